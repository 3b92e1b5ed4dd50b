/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Rule matching: the live rule sets, the first match list of a source (a
 * 16-8-8 table for IPv4, the LPM trie for IPv6), and whether a rule's
 * protocol, ports and TCP flags match a packet (the source port and flags in
 * lib/selectors.h).
 */
#ifndef SLUICE_LIB_MATCH_H
#define SLUICE_LIB_MATCH_H

#include <bpf/bpf_endian.h>

#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/selectors.h"

enum rule_match {
	MATCH_NO,    /* a selector the packet shows differs */
	MATCH_MAYBE, /* a selector the rule has cannot be read from the packet */
	MATCH_YES,
};

static __always_inline enum rule_match rule_matches(const struct sluice_rule *r,
						    const struct packet_info *pkt)
{
	enum rule_match m = MATCH_YES;

	if (r->proto != SLUICE_PROTO_ANY) {
		if (!pkt->proto_known)
			m = MATCH_MAYBE;
		else if (r->proto != pkt->proto)
			return MATCH_NO;
	}
	if (r->dport_lo != 0 || r->dport_hi != 0xffff) {
		if (!pkt->ports_known)
			m = MATCH_MAYBE;
		else if (pkt->dport < r->dport_lo || pkt->dport > r->dport_hi)
			return MATCH_NO;
	}
	if (rule_selects_more(r)) {
		enum selectors_match more = selectors_match(r, pkt);

		if (more == SELECTORS_DIFFER)
			return MATCH_NO;
		if (more == SELECTORS_UNKNOWN)
			m = MATCH_MAYBE;
	}
	return m;
}

/* The live-set map's entry (struct sluice_active): a decision reads it once
 * (decide_ip), its set word and its ban switch. */
static __always_inline const struct sluice_active *live_entry(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&SLUICE_MAP_ACTIVE, &zero);
}

/* The live sets of the live-set word `word` (struct sluice_active's set,
 * with its count of switches): sluice_rule_index takes the rule set from
 * them, sluice_lookup_set the lookups'. */
static __always_inline __u32 live_sets(__u32 word)
{
	return word & 3;
}

/* The first match list's index for an IPv4 source: at most three array
 * lookups (the third a full block's entry or a compact /24's bit); 0 if no
 * rule covers it. */
static __always_inline __u32 lookup_v4(const __u8 *saddr, __u32 set)
{
	const struct sluice_dir_block *blk;
	__u32 addr, idx, *top, e;

	__builtin_memcpy(&addr, saddr, 4);
	addr = bpf_ntohl(addr);
	idx = set * SLUICE_DIR_TOP_SIZE + (addr >> (32 - SLUICE_DIR_TOP_BITS));
	top = bpf_map_lookup_elem(&SLUICE_MAP_DIR4_TOP, &idx);
	if (!top)
		return 0;
	e = *top;
	if (e & SLUICE_DIR_CHILD) {
		idx = e & ~SLUICE_DIR_CHILD;
		blk = bpf_map_lookup_elem(&SLUICE_MAP_DIR4_BLOCKS, &idx);
		if (!blk)
			return 0;
		e = blk->entry[(addr >> 8) & 0xff];
		if (e & SLUICE_DIR_CHILD) {
			idx = e & ~SLUICE_DIR_CHILD;
			blk = bpf_map_lookup_elem(&SLUICE_MAP_DIR4_BLOCKS, &idx);
			if (!blk)
				return 0;
			e = blk->entry[addr & 0xff];
		} else if (e & SLUICE_DIR_BITMAP) {
			/* A compact /24 (see sluice_abi.h): one bit of its bitmap. */
			idx = SLUICE_DIR_BITMAP_BLOCK(e);
			blk = bpf_map_lookup_elem(&SLUICE_MAP_DIR4_BLOCKS, &idx);
			if (!blk)
				return 0;
			e = sluice_dir_bitmap_entry(&blk->bitmap[SLUICE_DIR_BITMAP_SLOT(e)], addr & 0xff);
		}
	}
	return e;
}

/* The first match list of an IPv6 source, held in the trie: one lookup. */
static __always_inline const struct sluice_match_list *lookup_v6(const __u8 *saddr, __u32 set)
{
	struct sluice_lpm_v6 key = { .prefixlen = SLUICE_LPM_SET_BITS + 128, .set = set };

	__builtin_memcpy(key.addr, saddr, 16);
	return bpf_map_lookup_elem(&SLUICE_MAP_MATCH_V6, &key);
}

#endif /* SLUICE_LIB_MATCH_H */
