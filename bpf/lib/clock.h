/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The clocks the program charges with: the precise clock, the coarse clock
 * (jiffies on the scheduler tick's grid, constants set at load), and in test
 * builds (SLUICE_TEST_CLOCK) a per-CPU map the test sets before each packet.
 */
#ifndef SLUICE_LIB_CLOCK_H
#define SLUICE_LIB_CLOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sluice_abi.h"

#ifdef SLUICE_TEST_CLOCK
/* Test builds only: the clock is a per-CPU map the test sets before each
 * packet, so that an arrival trace replays deterministically. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sluice_clock SEC(".maps");

static __always_inline __u64 now_ns(const struct sluice_rule *rule)
{
	__u32 zero = 0;
	__u64 *t = bpf_map_lookup_elem(&sluice_clock, &zero);

	return t ? *t : 0;
}

static __always_inline __u64 frag_clock(void)
{
	return now_ns(NULL);
}
#else
/* The coarse clock's constants (struct sluice_tick_clock), set by the
 * controller at load; read-only, so the verifier keeps one branch below. */
const volatile struct sluice_tick_clock sluice_tick_clock = {};

/* The last scheduler tick's CLOCK_MONOTONIC time: jiffies, which the
 * verifier inlines as one load, on the tick's grid. */
static __always_inline __u64 coarse_ns(void)
{
	if (sluice_tick_clock.tick_ns)
		return (bpf_jiffies64() + sluice_tick_clock.jiffies_base) * sluice_tick_clock.tick_ns;
	return bpf_ktime_get_coarse_ns();
}

static __always_inline __u64 now_ns(const struct sluice_rule *rule)
{
	if (rule->flags & SLUICE_RULE_COARSE_CLOCK)
		return coarse_ns();
	return bpf_ktime_get_ns();
}

static __always_inline __u64 frag_clock(void)
{
	return coarse_ns();
}
#endif

/* Nanoseconds from `then` to `now`, 0 if `then` is later: a time that
 * another CPU wrote into a shared entry after this CPU read its clock `now`
 * (the coarse clock's next tick in between) is now, not 2^64 ns ago. */
static __always_inline __u64 clock_since(__u64 now, __u64 then)
{
	return now > then ? now - then : 0;
}

#endif /* SLUICE_LIB_CLOCK_H */
