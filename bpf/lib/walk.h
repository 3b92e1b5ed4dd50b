/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The decision: a walk down a packet's match lists, layered rules applied as
 * it meets them, then the terminal rule it found (decide_packet). Every
 * other way into a decision (memo.h, fast.h) is a cache of this one.
 */
#ifndef SLUICE_LIB_WALK_H
#define SLUICE_LIB_WALK_H

#include "lib/fragments.h"
#include "lib/match.h"
#include "lib/rule.h"

/*
 * A walk down a packet's match lists (see struct sluice_match_list): its
 * state, packed. The reason, once: it lives in the program's frame, below
 * which the chain of calls to the bucket code (walk_step, the charge, the
 * lock's bpf_loop callback) must fit the verifier's 512 bytes of stack; one
 * byte more took the chain past it. So its flags are bits of one byte, the
 * set and the verdict a byte each, and the two positions nibbles (the limits
 * asserted below). Only this file reads or writes it.
 */
#define WALK_DONE     0x1 /* the walk ended in `verdict` */
#define WALK_FOUND    0x2 /* best_slot holds the terminal candidate that decides */
#define WALK_LAYERED  0x4 /* a layered rule passed the packet: `verdict` is its verdict */
#define WALK_VANISHED 0x8 /* a listed slot was empty: a rule set changed under the packet */
#define WALK_V6_HEAD  0x10 /* in an IPv6 prefix's first list, which the trie holds */
#define WALK_NO_COVER 0x20 /* no rule covers the source */
#define WALK_LAST     0x40 /* the walk's last step: it ends here */
#define WALK_APPLYING_LAYERED 0x80 /* walk_step is applying the layered rule w->slot */
struct walk {
	__u64 best_strictness;
	__u32 best_slot;
	__u32 slot;  /* STEP_LAYERED: the layered rule to apply */
	__u32 list;  /* the list the walk is in (absolute index in SLUICE_MAP_LISTS), unless WALK_V6_HEAD */
	__u8  set;   /* struct sluice_active.set: the live rule and lookup sets */
	__u8  flags;
	__u8  verdict;
	/* Two nibbles: see above. */
	__u8  pos : 4;             /* where in that list the walk goes on */
	__u8  unknown_charged : 4; /* rules charged as a candidate that may match */
};
_Static_assert(SLUICE_LIST_SLOTS < 16 && SLUICE_MAX_UNKNOWN_CHARGED < 16, "struct walk's nibbles");

enum walk_step {
	STEP_END,     /* the walk is over */
	STEP_NEXT,    /* go on with list w->list */
	STEP_LAYERED, /* a layered rule (w->slot) passed: go on from w->list, w->pos */
};

/*
 * Walks one match list from w->pos. Of the terminal rules, with every
 * selector known, the first that matches decides. A candidate that may match
 * (an unknown protocol or port) is charged as a layered rule is, up to the
 * first that surely matches: an allow never matches on an unknown selector,
 * and each other candidate must pass the packet, so hiding a header never
 * spends another rule's budget in place of its own. Past
 * SLUICE_MAX_UNKNOWN_CHARGED such rules, the rest are weighed, and the
 * strictest decides (the earlier on a tie). A layered rule, or a candidate
 * to charge, stops the walk to be applied. Inlined into walk_step, which the
 * verifier checks once; the best candidate is kept as a slot, not a
 * pointer, so that its states converge.
 */
static __always_inline int walk_list(const struct packet_info *pkt, const struct sluice_match_list *list,
				     struct walk *w)
{
	__u32 i, n, slot, idx;

	n = list->count;
	for (i = 0; i < SLUICE_LIST_SLOTS; i++) {
		const struct sluice_rule *r;
		enum rule_match m;

		if (i < w->pos)
			continue;
		if (i >= n)
			break;
		slot = list->slots[i];
		idx = sluice_rule_index(slot, w->set);
		r = bpf_map_lookup_elem(&SLUICE_MAP_RULES, &idx);
		if (!r || r->id == 0) {
			w->flags |= WALK_VANISHED;
			continue;
		}
		m = rule_matches(r, pkt);
		if (m == MATCH_NO || (m == MATCH_MAYBE && r->action == SLUICE_ACTION_ALLOW))
			continue;
		/* A first fragment too short for its ports hides them from
		 * every fragment of its datagram: nothing legitimate is sent
		 * that way. */
		if (pkt->flags & PKT_TINY_FRAG) {
			w->verdict = SLUICE_CNT_DROP_MALFORMED;
			w->flags |= WALK_DONE;
			return STEP_END;
		}
		if ((r->flags & SLUICE_RULE_CONTINUE) ||
		    (m == MATCH_MAYBE && w->unknown_charged < SLUICE_MAX_UNKNOWN_CHARGED)) {
			if (!(r->flags & SLUICE_RULE_CONTINUE))
				w->unknown_charged++;
			w->slot = slot;
			w->pos = i + 1;
			return STEP_LAYERED;
		}
		if (!(w->flags & WALK_FOUND) || r->strictness > w->best_strictness) {
			w->flags |= WALK_FOUND;
			w->best_strictness = r->strictness;
			w->best_slot = slot;
		}
		if (m == MATCH_YES)
			return STEP_END;
	}
	w->list = list->next;
	w->pos = 0;
	return w->list ? STEP_NEXT : STEP_END;
}

/* One step of the walk: the list w->list (or, with WALK_V6_HEAD, the
 * source's first IPv6 list) from w->pos, up to the next layered rule
 * (STEP_LAYERED), the next list (STEP_NEXT) or the end of the walk
 * (STEP_END). A layered rule met is applied here: a drop ends the walk (in
 * w->verdict, WALK_DONE), a pass is kept (WALK_LAYERED) and the walk goes on
 * at the next step. At the end, the terminal rule found decides, applied
 * here too. A global function: the verifier checks a list's walk and the
 * bucket code once, and a packet decided by one terminal rule makes one call. */
__noinline int walk_step(struct xdp_md *ctx, const struct packet_info *pkt, struct walk *w)
{
	const struct sluice_match_list *list;
	const struct sluice_rule *rule;
	__u32 index, slot, v;
	int step = STEP_END;

	if (!ctx || !pkt || !w) /* the verifier needs it */
		return STEP_END;
	if (w->flags & WALK_V6_HEAD) {
		list = lookup_v6(pkt->saddr, sluice_lookup_set(w->set));
		if (!list) {
			/* Before the walk's first step: no rule covers the
			 * source. Back after a layered rule: the set changed. */
			w->flags &= ~WALK_V6_HEAD;
			w->flags |= w->pos ? WALK_VANISHED : WALK_NO_COVER;
		}
	} else {
		index = w->list;
		list = bpf_map_lookup_elem(&SLUICE_MAP_LISTS, &index);
		if (!list)
			w->flags |= WALK_VANISHED;
	}
	if (list) {
		step = walk_list(pkt, list, w);
		if (step != STEP_LAYERED)
			w->flags &= ~WALK_V6_HEAD; /* on in SLUICE_MAP_LISTS, or done */
	}
	if (step == STEP_NEXT && (w->flags & WALK_LAST))
		step = STEP_END;
	if (step == STEP_LAYERED) {
		slot = w->slot;
		w->flags |= WALK_APPLYING_LAYERED;
	} else if (step == STEP_END && (w->flags & (WALK_DONE | WALK_FOUND)) == WALK_FOUND) {
		slot = w->best_slot;
	} else {
		return step;
	}
	/* From here the rule is applied the same way either way: the kind of
	 * rule is read back from w, so that the verifier checks the bucket
	 * code once, not once for each. */
	barrier();

	index = sluice_rule_index(slot, w->set);
	rule = bpf_map_lookup_elem(&SLUICE_MAP_RULES, &index);
	if (rule && rule->id) {
		v = apply_rule(ctx, pkt, rule, slot, 0);
	} else {
		w->flags |= WALK_VANISHED;
		v = SLUICE_CNT_FAILOPEN_RULE;
	}
	w->verdict = v;
	if (w->flags & WALK_APPLYING_LAYERED) {
		w->flags &= ~WALK_APPLYING_LAYERED;
		if (!((SLUICE_DROP_VERDICTS >> v) & 1)) {
			w->flags |= WALK_LAYERED;
			return STEP_LAYERED;
		}
	}
	w->flags |= WALK_DONE;
	return STEP_END;
}

/* Starts a packet's decision under the live-set word `word`: fragment and
 * header bookkeeping, then the first match list: for IPv4, its index
 * (w->list), 0 if no rule covers the source; for IPv6, the walk's first step
 * reads it from the trie (WALK_V6_HEAD), and finds whether a rule covers the
 * source. */
static __always_inline int start_decision(struct packet_info *pkt, struct walk *w, __u32 word)
{
	if (pkt->flags & PKT_LATER_FRAG) {
		count_global(SLUICE_CNT_INFO_FRAGMENT, pkt->l3_len);
		recall_first_fragment(pkt);
	}
	if (pkt->flags & PKT_ENCAP)
		count_global(SLUICE_CNT_INFO_ENCAPSULATED, pkt->l3_len);
	if (!pkt->ports_known && (!pkt->proto_known || pkt->proto == SLUICE_PROTO_TCP ||
				  pkt->proto == SLUICE_PROTO_UDP))
		count_global(SLUICE_CNT_INFO_L4_UNKNOWN, pkt->l3_len);

	w->set = live_sets(word);
	if (pkt->family == 6) {
		w->flags |= WALK_V6_HEAD;
		return 1;
	}
	w->list = lookup_v4(pkt->saddr, sluice_lookup_set(w->set));
	return w->list != 0;
}

/* Decides an IP packet: the verdict counter it lands in. Layered rules
 * apply as the walk meets them, and a drop ends it; then the terminal rule
 * the walk found decides. Inlined into the program, each step a global
 * function (walk_step): the call chain to the bucket code stays within the
 * 512-byte stack. The controller keeps every walk within
 * SLUICE_MAX_LIST_WALK lists and SLUICE_MAX_LAYERED layered rules, and the
 * walk charges at most SLUICE_MAX_UNKNOWN_CHARGED candidates that may match,
 * so the loop's last step is never needed; it ends the walk all the same. */
static __always_inline __u32 walk_packet(struct xdp_md *ctx, struct packet_info *pkt, __u32 word)
{
	struct walk w = {};
	__u32 i;

	if (!start_decision(pkt, &w, word))
		return SLUICE_CNT_PASS_NO_MATCH;
	for (i = 0; i < SLUICE_MAX_LIST_WALK + SLUICE_MAX_LAYERED + SLUICE_MAX_UNKNOWN_CHARGED + 1; i++) {
		int step;

		if (i == SLUICE_MAX_LIST_WALK + SLUICE_MAX_LAYERED + SLUICE_MAX_UNKNOWN_CHARGED)
			w.flags |= WALK_LAST;
		step = walk_step(ctx, pkt, &w);
		if (w.flags & WALK_NO_COVER)
			return SLUICE_CNT_PASS_NO_MATCH;
		pkt->flags |= PKT_COVERED;
		if (step == STEP_END)
			break;
	}
	if (w.flags & (WALK_DONE | WALK_LAYERED))
		return w.verdict;
	return (w.flags & WALK_VANISHED) ? SLUICE_CNT_FAILOPEN_RULE : SLUICE_CNT_PASS_NO_MATCH;
}

/* Whether some rule covers the source: its first match list. */
static __always_inline int source_covered(const struct packet_info *pkt, __u32 word)
{
	__u32 set = sluice_lookup_set(live_sets(word));

	return pkt->family == 4 ? lookup_v4(pkt->saddr, set) != 0 : lookup_v6(pkt->saddr, set) != NULL;
}

/* An IP packet's decision (walk_packet) under the live-set word `word`. A
 * first fragment first meets its key's entry: refused there (another first
 * fragment holds the key), it is dropped before any bucket; where it may
 * leave an entry (a rule covers its source, it names its protocol, it is not
 * tiny) it claims the key before the walk and settles the claim with the
 * walk's verdict (lib/fragments.h). */
static __always_inline __u32 decide_packet(struct xdp_md *ctx, struct packet_info *pkt, __u32 word)
{
	__u32 verdict, frag_word = 0, before = 0;
	int claim;

	if (!(pkt->flags & PKT_FIRST_FRAG))
		return walk_packet(ctx, pkt, word);
	claim = claim_first_fragment(pkt,
				     pkt->proto_known && !(pkt->flags & PKT_TINY_FRAG) && source_covered(pkt, word),
				     &frag_word, &before);
	if (claim == FRAG_REFUSED)
		return SLUICE_CNT_DROP_MALFORMED;
	verdict = walk_packet(ctx, pkt, word);
	if (claim == FRAG_CLAIMED)
		settle_first_fragment(pkt, frag_word, before,
				      !((SLUICE_DROP_VERDICTS >> verdict) & 1) && (pkt->flags & PKT_COVERED));
	return verdict;
}

#endif /* SLUICE_LIB_WALK_H */
