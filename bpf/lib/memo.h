/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The drop memo: a cache of the fast path's drops (see its invariant below).
 */
#ifndef SLUICE_LIB_MEMO_H
#define SLUICE_LIB_MEMO_H

#include "lib/match.h"
#include "lib/rule.h"

/*
 * The drop memo: per CPU, in each pending-drops slot (struct
 * sluice_drop_memo), the last drop the fast path (decide_fast) decided for a
 * source that hashes to the slot, with everything it was decided on. A packet
 * that shows the same is dropped and counted as that drop was, without the
 * lookups (recall_drop). Only under the coarse clock the program reads from
 * jiffies (or the test clock): a reading is one load, and a rule on the
 * precise clock is never memoized.
 *
 * Invariant: a recalled drop is the verdict the walk (decide_packet) would
 * decide for the packet now, counted where the walk would count it (the
 * verdict counter, the rule's counters, the bucket's drops in this CPU's
 * pending slot). It holds while everything the drop was decided on stands:
 *  - the same source (all 16 bytes), family, protocol and port, on a packet
 *    the fast path may decide (no fragment, no encapsulation, ports shown)
 *    that is one wire packet (not a super-packet);
 *  - the same answer of the rule's source-port and TCP-flag selectors: the
 *    packet's word of them (packet_selectors: whether it showed its flags
 *    and source port, its flags, its source port) equals the dropped one's
 *    under the bits the rule reads (rule_selectors_mask). The rule then
 *    matches it as it matched the dropped packet (MATCH_YES) and, as the
 *    first rule of the source's first match list, decides it in the walk as
 *    on the fast path. The ACK after a SYN that a `--syn` rule dropped shows
 *    other flags under the rule's mask, a packet from another source port
 *    than one a `--sport` rule dropped another port (a range is keyed by the
 *    packet's own port, as a destination port is): each is decided afresh.
 *    A rule with neither selector reads none of the word (mask 0). Fragments
 *    never reach the memo: a later fragment takes its first's flags and
 *    source port, but the fast path leaves every fragment to the walk;
 *  - the same live-set word (struct sluice_active): every change of the
 *    rules moves it, so the same rule decides, with the same parameters;
 *  - the same reading of the coarse clock: a GCRA decision is a function of
 *    the bucket's word and offset, the clock and the cost, and a deny of
 *    none of them;
 *  - for a byte rate, a packet at least as long: a larger cost is dropped
 *    too;
 *  - the rule has no ban: each of its drops is a strike towards one
 *    (bans.h), so none is remembered;
 *  - for a limit, the bucket's way holds its key with the word and offset
 *    the drop was decided on (memo_bucket_held), and this CPU's pending
 *    slot still names the bucket, noted within SLUICE_NOTE_EVERY_NS
 *    (pending_holds): the walk would count the drop in that slot and note
 *    no throttle event. Its rank for eviction (sluice_way_touch) would be
 *    written from the same word and clock, and is left as it is. This
 *    CPU's account (owed.h) is left too: paying it only moves the word
 *    forward, which makes the drop surer.
 * What invalidates it: the next tick; a switch of the rule sets; any write
 * of the bucket's word (a pass on any CPU, an eviction, a new bucket in the
 * way); the pending slot naming another bucket (a drop of another source
 * that hashes to it), or its note growing stale; another drop remembered in
 * the slot. The walk-only build (SLUICE_WALK_ONLY) has no memo. A cluster
 * rule's drop is never remembered (decide_fast leaves it out): a grant
 * waiting for its bucket (grants.h) moves no word the memo checks.
 */

/* A packet's port, family and protocol as one word (struct packet_info keeps
 * them together and aligned, and parse_l4 stores them as one); never 0, the
 * family being 4 or 6. */
static __always_inline __u32 packet_selector(const struct packet_info *pkt)
{
	__u32 v;

	__builtin_memcpy(&v, &pkt->dport, sizeof(v));
	return v;
}

/* The clock the memo is keyed by, into *now: the coarse clock where the
 * program reads it from jiffies; 0 where that would take a helper call. */
static __always_inline int memo_clock(__u64 *now)
{
#ifdef SLUICE_TEST_CLOCK
	*now = now_ns(NULL);
	return 1;
#else
	if (!sluice_tick_clock.tick_ns)
		return 0;
	*now = coarse_ns();
	return 1;
#endif
}

/* The bucket a limit's memo in slot `p` names (the slot names it still), or NULL. */
static __always_inline struct sluice_source_state *memo_bucket(const struct sluice_pending_drops *p,
							     const struct sluice_set_tags **t)
{
	__u32 set = p->set, w = SLUICE_WAY(p->way);

	if (p->table == SLUICE_TABLE_V4) {
		struct sluice_set_v4 *s4 = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &set);

		if (!s4)
			return NULL;
		*t = &s4->tag;
		return &s4->way[w];
	} else {
		struct sluice_set_v6 *s6 = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &set);

		if (!s6)
			return NULL;
		*t = &s6->tag;
		return &s6->way[w];
	}
}

/* Remembers the fast path's drop of `pkt` by `rule` (in `slot`, under the
 * live-set word `set`), verdict counter `verdict`, where the memo may hold
 * it: a wire packet, by a rule without a ban, with what the rule read of its
 * source port and flags; for a limit, a GCRA-form drop on the coarse clock,
 * counted in the source's pending slot. */
static __always_inline void remember_drop(const struct packet_info *pkt, const struct sluice_rule *rule,
					  __u32 slot, __u32 set, __u32 verdict)
{
	struct sluice_pending_drops *p;
	struct charge_req *req = NULL;
	struct sluice_drop_memo *m;
	__u32 i = source_slot(pkt);
	__u64 now;

	/* A drop of a rule with a ban is a strike (bans.h): each is decided. */
	if (pkt->l3_len > SLUICE_DEFAULT_MTU || rule->ban.secs)
		return;
	p = bpf_map_lookup_elem(&SLUICE_MAP_PENDING, &i);
	if (!p)
		return;
	if (verdict == SLUICE_CNT_DROP_RATE) {
#ifndef SLUICE_TEST_CLOCK
		if (!(rule->flags & SLUICE_RULE_COARSE_CLOCK) || !sluice_tick_clock.tick_ns)
			return;
#endif
		i = 0;
		req = bpf_map_lookup_elem(&sluice_req, &i);
		if (!req || !req->dropped ||
		    !pending_holds(p, pending_name(req->set_idx, req->way, req->table, req->drop_gen), req->want,
				   req->now))
			return;
		now = req->now;
	} else if (!memo_clock(&now)) {
		return;
	}
	m = &p->memo;
	m->now = now;
	__builtin_memcpy(m->saddr, pkt->saddr, 16);
	m->set = set;
	m->slot = slot;
	m->selector = packet_selector(pkt);
	m->sel_mask = rule_selectors_mask(rule);
	m->sel = packet_selectors(pkt) & m->sel_mask;
	m->verdict = verdict;
	m->min_len = 0;
	if (!req)
		return;
	__builtin_memcpy(&m->name, p, sizeof(m->name));
	m->want = req->want;
	m->word = req->drop_word;
	m->off = req->drop_off;
	if (rule->unit == SLUICE_UNIT_BYTES)
		m->min_len = pkt->l3_len;
}

/* Whether the bucket a limit's memo names holds the state its drop was
 * decided on: the same word, key and offset, read as charge_gcra reads them
 * (the word again last: a way's word only grows, over its buckets too). */
static __always_inline int memo_bucket_held(const struct sluice_pending_drops *p)
{
	const struct sluice_set_tags *t = NULL;
	struct sluice_source_state *st = memo_bucket(p, &t);
	const struct sluice_drop_memo *m = &p->memo;
	__u64 off;

	if (!st || !t || sluice_load_acquire(&st->word) != m->word)
		return 0;
	off = sluice_load_relaxed(&st->algo.gcra.off);
	if (sluice_load_acquire(&t->key[SLUICE_WAY(p->way)]) != m->want)
		return 0;
	sluice_fence_acquire();
	return off == m->off && sluice_load_acquire(&st->word) == m->word;
}

/* The drop the memo holds for `pkt` (a packet decide_fast may decide) under
 * the live-set word `word`, counted as the drop it repeats: its verdict
 * counter; else VERDICT_WALK, having changed nothing. */
static __always_inline __u32 recall_drop(const struct packet_info *pkt, __u32 word)
{
	struct sluice_rule_counters *rc;
	const struct sluice_drop_memo *m;
	struct sluice_pending_drops *p;
	__u32 i = source_slot(pkt);
	__u64 now, lo, hi;

	if (pkt->l3_len > SLUICE_DEFAULT_MTU || !memo_clock(&now))
		return VERDICT_WALK;
	p = bpf_map_lookup_elem(&SLUICE_MAP_PENDING, &i);
	if (!p)
		return VERDICT_WALK;
	m = &p->memo;
	if (m->now != now || m->selector != packet_selector(pkt) || pkt->l3_len < m->min_len ||
	    (packet_selectors(pkt) & m->sel_mask) != m->sel)
		return VERDICT_WALK;
	__builtin_memcpy(&lo, pkt->saddr, 8);
	__builtin_memcpy(&hi, pkt->saddr + 8, 8);
	if (m->saddr[0] != lo || m->saddr[1] != hi || m->set != word)
		return VERDICT_WALK;
	if (m->verdict == SLUICE_CNT_DROP_RATE) {
		/* The slot still names the bucket (a drop of another, after
		 * this one, renames it), noted lately. */
		if (!pending_holds(p, m->name, m->want, now) || !memo_bucket_held(p))
			return VERDICT_WALK;
		p->packets += 1;
		p->bytes += pkt->l3_len;
	}
	rc = rule_counters(m->slot);
	if (rc) {
		rc->dropped_packets += 1;
		rc->dropped_bytes += pkt->l3_len;
	}
	return m->verdict;
}

#endif /* SLUICE_LIB_MEMO_H */
