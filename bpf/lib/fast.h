/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The fast path: a cache of the walk's decision for the common case (see its
 * invariant below).
 */
#ifndef SLUICE_LIB_FAST_H
#define SLUICE_LIB_FAST_H

#include "lib/memo.h"

/*
 * The common case, decided without the walk: a packet that is not a
 * fragment, not encapsulated and shows its protocol and port, whose source's
 * first match list begins with a terminal rule that matches it: an allow, a
 * deny, or a GCRA-form limit (a cluster rule's bucket takes a grant waiting
 * for it first, as in the walk: grants.h), its bucket charged or made at one
 * attempt, made from the same live sets in registers: no walk state, one rule
 * lookup, one attempt at the bucket, and, for an IPv4 bucket that exists (and
 * no grant waiting), no call of a function of the program's own (each costs
 * about 12 ns on the test VM, where every return goes through a return thunk;
 * IPv6 makes one, sluice_charge_v6). Anything else, untouched, is left to the walk
 * (VERDICT_WALK). `family` is a constant. Inline in the program: its frame
 * and the deepest chain of calls below walk_step (sluice_init_source keeps
 * the new-bucket arithmetic out of the insert's frame) fit in 512 bytes.
 *
 * Invariant: a packet the fast path decides (not VERDICT_WALK) leaves the
 * verdict counter, the rule's counters, the bucket, the pending slot and the
 * throttle events as the walk (decide_packet) would. It keeps no state of
 * its own; it holds because
 *  - with no packet flag and the ports shown, the walk counts no
 *    information counter, charges no candidate that may match, and stops at
 *    the first terminal rule that matches (walk_list);
 *  - that rule is slot 0 of the source's first match list, read under the
 *    live-set word the walk would read (decide_ip reads it once for both):
 *    no layered rule comes before it, and no source is covered on one path
 *    and not the other (PASS_NO_MATCH on both);
 *  - a limit is charged by the walk's own code (apply_rule, charge_gcra),
 *    a cluster rule's after the same grant is taken (grant_waits,
 *    sluice_take_grant), with fewer compare-and-swaps (FAST_TRIES): where
 *    they would not do, nothing but the grant has been written (the walk
 *    would take it too, and finds it taken) and the walk decides with every
 *    try;
 *  - a cluster rule's drop is not remembered (memo.h): the memo would not
 *    see a grant waiting; and its bucket never goes on account (owed.h):
 *    a grant moves the offset, which an account does not follow.
 * One difference is allowed, and bounded: a pass of a bucket that other
 * CPUs write too may go on this CPU's account (owed.h, struct sluice_owed)
 * rather than into the bucket's word and counters; every later decision on
 * this CPU includes the account (the walk pays it first: sluice_owed_pay),
 * and the word and counters catch up when it is paid. A single CPU's
 * packets on a bucket that no one else writes never make an account.
 * What invalidates it: nothing stored can go stale; the code must change
 * with the walk: its rule order (the first terminal match decides), what
 * start_decision counts, and the charge of a limit. The walk-only build
 * (SLUICE_WALK_ONLY) has no fast path.
 */
static __always_inline __u32 decide_fast_family(struct xdp_md *ctx, struct packet_info *pkt, __u32 word,
						const int family)
{
	const struct sluice_match_list *list;
	const struct sluice_rule *rule;
	__u32 set = live_sets(word), index, slot, verdict;

	if (family == 4) {
		index = lookup_v4(pkt->saddr, sluice_lookup_set(set));
		if (!index)
			return SLUICE_CNT_PASS_NO_MATCH;
		list = bpf_map_lookup_elem(&SLUICE_MAP_LISTS, &index);
	} else {
		list = lookup_v6(pkt->saddr, sluice_lookup_set(set));
		if (!list)
			return SLUICE_CNT_PASS_NO_MATCH;
	}
	if (!list || list->count == 0)
		return VERDICT_WALK;
	slot = list->slots[0];
	index = sluice_rule_index(slot, set);
	rule = bpf_map_lookup_elem(&SLUICE_MAP_RULES, &index);
	if (!rule || !rule->id || (rule->flags & SLUICE_RULE_CONTINUE) ||
	    rule_matches(rule, pkt) != MATCH_YES ||
	    (rule->action == SLUICE_ACTION_LIMIT && !sluice_gcra_form(rule)))
		return VERDICT_WALK;
	verdict = apply_rule(ctx, pkt, rule, slot, 1);
	if (verdict != VERDICT_WALK)
		pkt->flags |= PKT_COVERED;
	if ((verdict == SLUICE_CNT_DROP_RATE || verdict == SLUICE_CNT_DROP_DENY) &&
	    !(rule->flags & SLUICE_RULE_CLUSTER))
		remember_drop(pkt, rule, slot, word, verdict);
	return verdict;
}

/* The fast path, for the packets it may decide under the live-set word
 * `word`: 1 and the verdict counter in *verdict, or 0. */
static __always_inline int decide_fast(struct xdp_md *ctx, struct packet_info *pkt, __u32 word, __u32 *verdict)
{
	if (pkt->flags || !pkt->ports_known)
		return 0;
	*verdict = recall_drop(pkt, word);
	if (*verdict != VERDICT_WALK)
		return 1;
	if (pkt->family == 4)
		*verdict = decide_fast_family(ctx, pkt, word, 4);
	else
		*verdict = decide_fast_family(ctx, pkt, word, 6);
	return *verdict != VERDICT_WALK;
}

#endif /* SLUICE_LIB_FAST_H */
