/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The GCRA form's charge (GCRA, and a token bucket without warm-up): one
 * word, written by compare-and-swap (sluice_gcra_admit in sluice_algos.h).
 */
#ifndef SLUICE_LIB_ALGOS_GCRA_H
#define SLUICE_LIB_ALGOS_GCRA_H

#include "lib/owed.h"

/*
 * GCRA form: the arrival time is word - off. The word, the offset, the
 * generation and the key are read, then the word again: if it did not move,
 * the four belong to one bucket (a new bucket writes its offset and generation
 * before its word, and its word only after the way was claimed away from the
 * key). The decision is made on that snapshot; a pass is written by
 * compare-and-swap, which cannot land on a later bucket of the way (its word
 * is above every earlier value). A lost compare-and-swap returns the word
 * another CPU wrote: decide again on it. -1: the key left the way. The
 * bucket is full again at its arrival time, which ranks way `way` of tags
 * `t` for eviction (sluice_way_touch): done here, while what it needs is at
 * hand. `tries` (a constant): SLUICE_CAS_RETRIES, or fewer for the fast path
 * (decide_fast), whose charge returns -1, having changed nothing, where the
 * word kept moving under it, for the walk to charge with every try: the
 * verifier follows each try for every path of the program that reaches it.
 * IPv4 (`owes`): a pass written here names the bucket in this CPU's owed
 * slot, with the word written. On the fast path (tries below
 * SLUICE_CAS_RETRIES) a bucket that slot names, shared with another CPU or
 * with passes or doubt in the slot, is charged by sluice_charge_owed (struct
 * sluice_owed), unless it is a cluster rule's: grants move its offset, which
 * an account made on the word does not follow, so it never owes; the walk pays the slot's account first (sluice_owed_pay), so
 * that every path decides with this CPU's own account, and it never owes.
 * IPv6 charges the word alone. The drop memo repeats a drop only while the
 * word it was decided on stands, and an account only makes a drop surer.
 */
static __always_inline int charge_gcra(struct sluice_source_state *st, struct sluice_set_tags *t, int way,
				       const struct sluice_addr6 *addr, const struct sluice_rule *rule,
				       struct charge_req *req, const int tries, const int owes)
{
	__u64 inc = sluice_rule_cost_ticks(rule, req->cost), now_t = sluice_ns_to_ticks(req->now);
	__u64 w = sluice_load_acquire(&st->word), off, next, old, tat = now_t;
	const __u64 *key = &t->key[SLUICE_WAY(way)];
	const __u16 *gen = &t->gen[SLUICE_WAY(way)];
	enum bucket_result res = BUCKET_FORCED;
	__u16 g = 0;
	int i;

	if (owes) {
		req->count_gen = sluice_load_acquire(gen);
		if (tries < SLUICE_CAS_RETRIES) {
			/* A cluster rule's bucket, which grants move, is never
			 * charged on account. */
			if (!(rule->flags & SLUICE_RULE_CLUSTER) && owed_due(req, w))
				return sluice_charge_owed(st, t, rule, req);
		} else if (sluice_owed_pay(req, st)) {
			/* The walk: this CPU's account was paid first, so that
			 * the decision includes it. */
			w = sluice_load_acquire(&st->word);
		}
	}
	for (i = 0; i < tries; i++) {
		off = sluice_load_relaxed(&st->algo.gcra.off);
		g = sluice_load_acquire(gen);
		if (owner_gone(key, addr, req))
			return -1;
		sluice_fence_acquire();
		old = sluice_load_acquire(&st->word);
		if (old != w) {
			w = old;
			continue;
		}
		if (!sluice_gcra_admit(w - off, now_t, inc, rule->bucket.capacity, &next)) {
			res = BUCKET_DROP;
			tat = w - off;
			req_dropped_on(req, w, off, g);
			break;
		}
		if (owes && tries < SLUICE_CAS_RETRIES) /* the walk noted it: sluice_owed_pay */
			owed_note_full(st, w - off, now_t); /* before the write lands (struct sluice_owed) */
		old = sluice_cas(&st->word, w, next + off);
		if (old == w) {
			res = BUCKET_PASS;
			tat = next;
			req->written = next + off;
			break;
		}
		w = old;
	}
	if (res == BUCKET_FORCED && tries < SLUICE_CAS_RETRIES)
		return -1;
	if (owes && tries < SLUICE_CAS_RETRIES && res == BUCKET_PASS) {
		/* The slot names the bucket, with the word this CPU wrote. */
		struct sluice_owed *o = bpf_map_lookup_elem(&SLUICE_MAP_OWED, &req->pending);

		req->count_gen = g;
		if (o && o->want == req->want && o->name == pending_name(req->set_idx, req->way, req->table, g))
			o->written = req->written;
		else
			sluice_owed_wrote(req, req->written);
	}
	count_source(&st->cnt, g, res, req, 1, tries);
	sluice_way_touch(t, way, req->want, req->now, sluice_tick_stamp(tat));
	if (owes && tries >= SLUICE_CAS_RETRIES && res == BUCKET_PASS) {
		req->count_gen = g;
		sluice_owed_wrote(req, req->written);
	}
	return res;
}

#endif /* SLUICE_LIB_ALGOS_GCRA_H */
