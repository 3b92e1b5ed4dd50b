/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * A source bucket's counters, and the pending-drops slots: a flood of one
 * source counts its drops in this CPU's slot (struct sluice_pending_drops),
 * added to the bucket when the slot moves on to another.
 */
#ifndef SLUICE_LIB_PENDING_H
#define SLUICE_LIB_PENDING_H

#include "lib/counters.h"
#include "lib/events.h"
#include "lib/request.h"

/* This CPU's pending-drops slot of req's source. */
static __always_inline struct sluice_pending_drops *pending_slot(struct charge_req *req)
{
	return bpf_map_lookup_elem(&SLUICE_MAP_PENDING, &req->pending);
}

/* Adds a pending-drops slot to the bucket it names, if its way still holds
 * it. A global function: checked once, not in every charger that may call
 * it (and called only when a CPU's drops move on to another bucket). */
__noinline int sluice_flush_pending(const struct sluice_pending_drops *p)
{
	struct sluice_source_counters *oc = NULL;
	__u32 set;

	if (!p)
		return 0; /* the verifier: arguments of a global function may be NULL */
	set = p->set;
	if (p->table == SLUICE_TABLE_V6) {
		struct sluice_set_v6 *s6 = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &set);

		if (s6)
			oc = &s6->way[SLUICE_WAY(p->way)].cnt;
	} else {
		struct sluice_set_v4 *s4 = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &set);

		if (s4)
			oc = &s4->way[SLUICE_WAY(p->way)].cnt;
	}
	if (!oc)
		return 0;
	count_add(&oc->dropped_packets, sluice_gen_tag(p->gen), p->packets, SLUICE_CAS_RETRIES);
	count_add(&oc->dropped_bytes, sluice_gen_tag(p->gen), p->bytes, SLUICE_CAS_RETRIES);
	return 1;
}

/* The first eight bytes of a pending-drops slot that names way `way` of set
 * `set` of table `table`, generation `gen`: one comparison, not four. */
static __always_inline __u64 pending_name(__u32 set, __u32 way, __u32 table, __u16 gen)
{
	struct sluice_pending_drops name = { .set = set, .way = (__u8)way, .table = (__u8)table, .gen = gen };
	__u64 v;

	__builtin_memcpy(&v, &name, sizeof(v));
	return v;
}

/*
 * Counts a drop on its bucket, of generation `gen`, but a flood's every
 * packet (count_source): notes it for throttle events if due, and puts it in
 * this CPU's pending slot (with `pending`), first adding to its bucket what
 * the slot held for another; or adds it to the bucket's counters. A global
 * function: out of line, the code that every drop of a hot source runs keeps
 * its registers.
 */
__noinline int sluice_count_drop(struct sluice_source_counters *c, struct charge_req *req, __u32 gen, int pending)
{
	struct sluice_pending_drops *p;
	__u64 tag, n, l3_len;

	if (!c || !req)
		return 0; /* the verifier: arguments of a global function may be NULL */
	/* Kept in req, and the slot looked up again, across the note, which
	 * calls a function: in registers they would take stack that a chain
	 * of calls down to here does not have. */
	req->count_gen = gen;
	req->count_pending = pending;
	p = pending_slot(req);
	if (p && (p->note_want != req->want || p->note_table != req->table ||
		  req->now - p->noted_ns >= SLUICE_NOTE_EVERY_NS))
		note_if_due(req, p);
	p = pending_slot(req);
	gen = req->count_gen;
	pending = req->count_pending;
	tag = sluice_gen_tag(gen);
	n = req->packets;
	l3_len = req->bytes;
	if (!p || !pending) {
		count_add(&c->dropped_packets, tag, n, SLUICE_CAS_RETRIES);
		count_add(&c->dropped_bytes, tag, l3_len, SLUICE_CAS_RETRIES);
		return 1;
	}
	if (p->packets && p->set == req->set_idx && p->way == req->way && p->table == req->table &&
	    p->gen == (__u16)gen) {
		p->packets += n;
		p->bytes += l3_len;
		return 1;
	}
	if (p->packets)
		sluice_flush_pending(p);
	p->set = req->set_idx;
	p->way = (__u8)req->way;
	p->table = (__u8)req->table;
	p->gen = gen;
	p->packets = n;
	p->bytes = l3_len;
	return 1;
}

/* Whether pending slot `p` names the bucket `name` (pending_name) of key
 * `want`, whose drop this CPU noted lately (at `now`): a flood's every drop
 * is then counted there. */
static __always_inline int pending_holds(const struct sluice_pending_drops *p, __u64 name, __u64 want, __u64 now)
{
	__u64 have;

	if (!p || !p->packets || p->note_want != want || now - p->noted_ns >= SLUICE_NOTE_EVERY_NS)
		return 0;
	__builtin_memcpy(&have, p, sizeof(have));
	return have == name;
}

/*
 * Counts a packet on its bucket, of generation `gen`. A source bucket's drop
 * (`pending`) goes to this CPU's pending slot (struct sluice_pending_drops)
 * when the slot names the bucket, so a flood of one source writes no shared
 * line to count its drops; a slot naming another bucket is first added to
 * that bucket's counters (if its way still holds it: the generation tags
 * them). Drops are noted for throttle events once per SLUICE_NOTE_EVERY_NS
 * per CPU and bucket (sluice_count_drop).
 */
static __always_inline void count_source(struct sluice_source_counters *c, __u16 gen, enum bucket_result res,
					 struct charge_req *req, int pending, const int tries)
{
	__u64 tag = sluice_gen_tag(gen), l3_len = req->bytes, n = req->packets;
	struct sluice_pending_drops *p;

	if (res != BUCKET_DROP) {
		count_add(&c->passed_packets, tag, n, tries);
		count_add(&c->passed_bytes, tag, l3_len, tries);
		return;
	}
	/* A flood's every packet: the slot names this very bucket (its key
	 * names its table). */
	p = pending_slot(req);
	if (pending && p && pending_holds(p, pending_name(req->set_idx, req->way, req->table, gen), req->want, req->now)) {
		p->packets += n;
		p->bytes += l3_len;
		return;
	}
	sluice_count_drop(c, req, gen, pending);
}

#endif /* SLUICE_LIB_PENDING_H */
