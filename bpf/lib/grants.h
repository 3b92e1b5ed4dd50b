/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The cluster sync's grants (struct sluice_grant in sluice_abi.h): taken by
 * the program into its own bucket, once each, so that a bucket's words have
 * one writer. Only cluster rules' buckets take them (SLUICE_RULE_CLUSTER),
 * before each charge, on the fast path and in the walk alike; where no grant
 * waits (grant_waits), with one lookup of the grants map and no call.
 */
#ifndef SLUICE_LIB_GRANTS_H
#define SLUICE_LIB_GRANTS_H

#include "sluice_settable.h"
#include "lib/request.h"

/* The GCRA form's arrival time of `st` moved `ticks` earlier (credit, which
 * stops at a full bucket: `now_t`) or, negative, later, by compare-and-swap of
 * its offset from a value read while way `w` of `t` held generation `gen`
 * of req's bucket: the word only grows, so the offset is what moves, and a
 * charge's compare-and-swap of the word, before or after, keeps the move. 1
 * if it moved (or had nothing to move), 0 if the bucket was evicted. */
static __always_inline int grant_move(struct sluice_source_state *st, const struct sluice_set_tags *t, int w,
				      __u16 gen, const struct sluice_addr6 *addr, const struct charge_req *req,
				      __s64 ticks, __u64 now_t)
{
	__u64 word, off;
	__s64 moved, ahead;
	int i;

	for (i = 0; i < SLUICE_CAS_RETRIES; i++) {
		word = sluice_load_acquire(&st->word);
		off = sluice_load_relaxed(&st->algo.gcra.off);
		if (sluice_load_acquire(&t->gen[w]) != gen || owner_gone(&t->key[w], addr, req))
			return 0;
		sluice_fence_acquire();
		if (sluice_load_acquire(&st->word) != word)
			continue;
		moved = ticks;
		ahead = (__s64)(word - off - now_t);
		if (moved > 0 && moved > ahead)
			moved = ahead > 0 ? ahead : 0;
		if (!moved || sluice_cas(&st->algo.gcra.off, off, off + (__u64)moved) == off)
			return 1;
	}
	return 0;
}

/* The grants map's entry for req's bucket, or NULL; its key built in the
 * request (off the stack). */
static __always_inline const struct sluice_grant *grant_entry(struct charge_req *req)
{
	struct sluice_grant_key *k = &req->grant_key;

	k->want = req->want;
	k->table = req->table;
	k->pad = 0;
	k->addr.hi = req->table == SLUICE_TABLE_V6 ? req->addr.hi : 0;
	k->addr.lo = req->table == SLUICE_TABLE_V6 ? req->addr.lo : 0;
	return bpf_map_lookup_elem(&SLUICE_MAP_GRANTS, k);
}

/* Whether a grant may wait for req's bucket `st` (a cluster rule's, about to
 * be charged): its key has an entry, and the bucket's record is not that
 * entry's grant taken (generation << 48 | seq). Where it is, or there is no
 * entry, sluice_take_grant would take nothing: the charge goes on without
 * its call. */
static __always_inline int grant_waits(struct charge_req *req, const struct sluice_source_state *st)
{
	const struct sluice_grant *g = grant_entry(req);
	__u64 taken;

	if (!g)
		return 0;
	taken = (sluice_load_relaxed(&g->name) >> 48 << 48) | (sluice_load_relaxed(&g->seq) & SLUICE_GRANT_SEQ_MASK);
	return sluice_load_relaxed(&st->algo.gcra.granted) != taken;
}

/*
 * Takes the grant waiting for req's bucket (a cluster rule's, found by the
 * charge in way req->way of set req->set_idx, about to be charged): if the entry names the
 * way as it is (set, way, table, generation) and follows the grant the
 * bucket took last (base), a compare-and-swap of the bucket's record from
 * base to the entry's seq takes it, on one CPU only; then its ticks move the
 * bucket's arrival time. 1 if a grant was taken. A global function: only
 * cluster rules call it, where grant_waits, and the callers' frames stay as
 * they were.
 */
__noinline int sluice_take_grant(struct charge_req *req)
{
	const struct sluice_grant *g;
	struct sluice_source_state *st;
	const struct sluice_addr6 *addr = NULL;
	struct sluice_set_tags *t;
	__u64 name, base, seq, record;
	__u32 set;
	__s64 ticks;
	__u16 gen;
	int w;

	if (!req)
		return 0; /* the verifier: arguments of a global function may be NULL */
	g = grant_entry(req);
	if (!g)
		return 0;
	/* Keys in the request, and the entry read after the last lookup: few
	 * values live across calls, so the frame stays small (a fourth call
	 * deep under the IPv6 charge). */
	w = SLUICE_WAY(req->way);
	if (req->table == SLUICE_TABLE_V6) {
		struct sluice_set_v6 *s6 = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &req->set_idx);

		if (!s6)
			return 0;
		barrier_var(s6); /* no pointer arithmetic before the check */
		t = &s6->tag;
		st = &s6->way[w];
		addr = &s6->addr[w];
	} else {
		struct sluice_set_v4 *s4 = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &req->set_idx);

		if (!s4)
			return 0;
		barrier_var(s4); /* no pointer arithmetic before the check */
		t = &s4->tag;
		st = &s4->way[w];
	}
	/* The sync replaces an entry whole (a map update): one value's fields. */
	name = sluice_load_relaxed(&g->name);
	base = sluice_load_relaxed(&g->base);
	seq = sluice_load_relaxed(&g->seq);
	ticks = sluice_load_relaxed(&g->ticks);
	set = req->set_idx;
	gen = sluice_load_acquire(&t->gen[w]);
	if ((gen & 1) || name != sluice_way_name(set, w, req->table, gen) || owner_gone(&t->key[w], addr, req))
		return 0; /* a locked algorithm, or not the bucket the grant is for */
	record = sluice_load_relaxed(&st->algo.gcra.granted);
	if (sluice_grant_taken(record, gen) != base || seq == base)
		return 0; /* taken, or based on a record since moved: the sync writes it again */
	if (sluice_cas(&st->algo.gcra.granted, record, ((__u64)gen << 48) | (seq & SLUICE_GRANT_SEQ_MASK)) != record)
		return 0; /* another CPU took it */
	return grant_move(st, t, w, gen, addr, req, ticks, sluice_ns_to_ticks(req->now));
}

#endif /* SLUICE_LIB_GRANTS_H */
