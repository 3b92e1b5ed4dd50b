/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Bucket arithmetic shared by the XDP program and the controller's tests: the
 * generic cell rate algorithm (GCRA), a token bucket kept as one timestamp.
 *
 * A bucket is its theoretical arrival time (TAT). With T the emission interval
 * (time one unit of rate is worth) and capacity = burst * T, a packet costing
 * inc = cost * T passes at time now if max(TAT, now) + inc - now <= capacity,
 * and then TAT becomes max(TAT, now) + inc. This is exactly a token bucket of
 * `burst` tokens refilled at the rate: over any interval of length D at most
 * burst + rate * D units pass.
 *
 * Time is counted in ticks of 1/64 ns so that intervals of fast rates keep
 * their precision. Tick values wrap (after 9 years of uptime) and are compared
 * as signed differences. No kernel or libc dependency: plain C on both sides.
 */
#ifndef SLUICE_GCRA_H
#define SLUICE_GCRA_H

#include <linux/types.h>
#include "sluice_abi.h"

#define SLUICE_TICK_SHIFT 6 /* ticks per nanosecond = 2^6 */

/* Largest cost of one packet in bytes mode; longer frames are charged this. */
#define SLUICE_MAX_COST 65535ULL

/* Range limits the controller enforces when it compiles a rule, so that none
 * of the sums below can overflow: the most expensive packet costs at most
 * 2^60 ticks and the capacity is at most 2^61 ticks (about 1.1 years). */
#define SLUICE_MAX_INC_TICKS      (1ULL << 60)
#define SLUICE_MAX_CAPACITY_TICKS (1ULL << 61)

static inline __u64 sluice_ns_to_ticks(__u64 ns)
{
	return ns << SLUICE_TICK_SHIFT;
}

/* Ticks a packet of `cost` units (1, or bytes) takes from a bucket: rounded up,
 * so that a limit never lets through more than it promises. The controller
 * guarantees cost * inc_mult < 2^63 for cost <= SLUICE_MAX_COST. */
static inline __u64 sluice_cost_ticks(__u64 inc_mult, __u8 inc_shift, __u64 cost)
{
	__u64 round = (1ULL << inc_shift) - 1;

	return (cost * inc_mult + round) >> inc_shift;
}

/*
 * Decides one packet. Returns 1 and sets *next_tat if it passes, 0 if it must
 * be dropped (a drop takes nothing from the bucket). A clock that reads earlier
 * than the one that wrote `tat` (another CPU) yields less credit, never more:
 * elapsed time is never negative because base is never before now.
 */
static inline int sluice_gcra_admit(__u64 tat, __u64 now, __u64 inc, __u64 capacity,
				    __u64 *next_tat)
{
	__u64 base = (__s64)(tat - now) > 0 ? tat : now;
	__u64 next = base + inc;

	if (next - now > capacity)
		return 0;
	*next_tat = next;
	return 1;
}

#endif /* SLUICE_GCRA_H */
