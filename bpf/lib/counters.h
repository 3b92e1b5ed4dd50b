/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Counters: the per-CPU verdict and information counters (every frame lands
 * in exactly one verdict counter), a rule's per-CPU counters, and the add to
 * a bucket's shared counter word tagged with its generation (count_add).
 */
#ifndef SLUICE_LIB_COUNTERS_H
#define SLUICE_LIB_COUNTERS_H

#include "lib/maps.h"
#include "sluice_settable.h"

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
 * landed on a successor (sluice_cnt_add). */
static __always_inline void count_add(__u64 *c, __u64 tag, __u64 delta, const int tries)
{
	sluice_cnt_add(c, tag, delta, tries, 1);
}

#endif /* SLUICE_LIB_COUNTERS_H */
