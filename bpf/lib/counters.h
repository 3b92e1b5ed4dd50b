/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Counters: the per-CPU verdict and information counters (every frame lands
 * in exactly one verdict counter), a rule's per-CPU counters, and the add to
 * a bucket's shared counter word tagged with its generation (count_add).
 */
#ifndef SLUICE_LIB_COUNTERS_H
#define SLUICE_LIB_COUNTERS_H

#include "lib/maps.h"

static __always_inline void count_global(__u32 idx, __u64 bytes)
{
	struct sluice_counter *c = bpf_map_lookup_elem(&SLUICE_MAP_COUNTERS, &idx);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline struct sluice_rule_counters *rule_counters(__u32 slot)
{
	return bpf_map_lookup_elem(&SLUICE_MAP_RULE_COUNTERS, &slot);
}

/* Adds to a counter word if it still carries `tag`: the bucket it was read
 * for. `tries` (a constant) compare-and-swaps, then an add taken back if it
 * landed on a successor. */
static __always_inline void count_add(__u64 *c, __u64 tag, __u64 delta, const int tries)
{
	__u64 v = SLUICE_READ_ONCE(*c), old;
	int i;

	for (i = 0; i < tries; i++) {
		if ((v & ~SLUICE_CNT_VALUE_MASK) != tag)
			return; /* the bucket was evicted: its counts went with it */
		old = __sync_val_compare_and_swap(c, v, v + delta);
		if (old == v)
			return;
		v = old;
	}
	/* Still contended: add, and take it back if it landed on a successor. */
	old = __sync_fetch_and_add(c, delta);
	if ((old & ~SLUICE_CNT_VALUE_MASK) != tag)
		__sync_fetch_and_add(c, -delta);
}

#endif /* SLUICE_LIB_COUNTERS_H */
