/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * A limit rule's charge: finds or makes the packet's bucket in its table and
 * charges it with the rule's algorithm; the walk's charge (every try) and the
 * fast path's (one attempt, or nothing changed).
 */
#ifndef SLUICE_LIB_CHARGE_H
#define SLUICE_LIB_CHARGE_H

#include "lib/algos/gcra.h"
#include "lib/grants.h"
#include "lib/sources.h"

/* A multi-word algorithm's IPv4 bucket: charged, then its way ranked. */
static __always_inline int charge_found_locked(struct sluice_source_state *st, struct sluice_set_tags *t, int w,
					       const struct sluice_rule *rule, struct charge_req *req)
{
	int res;

	req->full = sluice_stamp(req->now);
	res = sluice_charge_locked(st, t, NULL, rule, req);
	if (res >= 0)
		sluice_way_touch(t, w, req->want, req->now, req->full);
	return res;
}

/* The request for IPv4 key `key`: its two sets chosen (req->set_a,
 * req->set_b), the first looked up into *a. NULL if the table is missing. */
static __always_inline struct charge_req *begin_v4(__u64 key, const struct sluice_rule *rule, __u64 now,
						    const struct charge *ch, struct sluice_set_v4 **a)
{
	struct charge_req *req = new_req(rule, now, ch);
	const struct sluice_config *cfg;
	__u32 zero = 0, i1, i2;

	if (!req)
		return NULL;
	req->want = key;
	cfg = bpf_map_lookup_elem(&SLUICE_MAP_CONFIG, &zero);
	if (!cfg || !cfg->src4_sets)
		return NULL;
	sluice_src4_sets(key, cfg->hash_seed, cfg->src4_sets, &i1, &i2);
	*a = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &i1);
	if (!*a)
		return NULL;
	req->set_a = i1;
	req->set_b = i2;
	return req;
}

#define FIND_MISSING (-2) /* find_v4: the second set is not in the table */

/* The way holding req's key in its first set `a`, or else in its second,
 * looked up into *b only then (a source found in its first set reads one tag
 * line): the way, with its set in *set, req->set_idx and req->way; or -1 with
 * a way being written noted in *busy_a or *busy_b (scan_set); or
 * FIND_MISSING. */
static __always_inline int find_v4(struct charge_req *req, struct sluice_set_v4 *a, struct sluice_set_v4 **b,
				   struct sluice_set_v4 **set, int *busy_a, int *busy_b)
{
	__u32 i2 = req->set_b;
	int w;

	*set = a;
	req->set_idx = req->set_a;
	w = scan_set(&a->tag, NULL, req, busy_a);
	if (w < 0) {
		*b = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &i2);
		if (!*b)
			return FIND_MISSING;
		*set = *b;
		req->set_idx = i2;
		w = scan_set(&(*b)->tag, NULL, req, busy_b);
		if (w < 0)
			return -1;
	}
	w = SLUICE_WAY(w);
	req->way = w;
	race_window(&(*set)->tag.key[w]);
	return w;
}

/* One attempt at the bucket of req's key, whose first set is `a`: charged,
 * or made with the packet's decision (an enum bucket_result); or negative,
 * having changed nothing, for another attempt (a way was being written, the
 * bucket was evicted under us, or, with `tries` below SLUICE_CAS_RETRIES, its
 * word kept moving), or FIND_MISSING. `tries` is a constant, and below
 * SLUICE_CAS_RETRIES only for a GCRA-form rule (decide_fast). */
static __always_inline int charge_v4_attempt(struct charge_req *req, struct sluice_set_v4 *a,
					     const struct sluice_rule *rule, const int tries)
{
	struct sluice_set_v4 *b = NULL, *set = NULL;
	int w, res, busy_a = 0, busy_b = 0;

	w = find_v4(req, a, &b, &set, &busy_a, &busy_b);
	if (w == FIND_MISSING || !set)
		return FIND_MISSING;
	if (w < 0) {
		if (!b)
			return FIND_MISSING;
		res = lookup_missed(&a->tag, &b->tag, busy_a, busy_b, req);
		if (res == LOOKUP_NOT_FOUND)
			res = sluice_insert_v4(rule, req);
		return res;
	}
	if (tries < SLUICE_CAS_RETRIES || sluice_gcra_form(rule)) {
		/* A cluster rule's bucket takes its grant first, on either path. */
		if ((rule->flags & SLUICE_RULE_CLUSTER) && grant_waits(req, &set->way[w]))
			sluice_take_grant(req);
		return charge_gcra(&set->way[w], &set->tag, w, NULL, rule, req, tries, 1);
	}
	return charge_found_locked(&set->way[w], &set->tag, w, rule, req);
}

/* IPv4: finds or creates the bucket of `key` in the set-associative table.
 * Inline: the hot path pays no call for the lookup or the GCRA form. */
static __always_inline enum bucket_result charge_v4(__u64 key, const struct sluice_rule *rule,
						     __u64 now, const struct charge *ch)
{
	struct sluice_set_v4 *a = NULL;
	struct charge_req *req = begin_v4(key, rule, now, ch, &a);
	int attempt, res;

	if (!req || !a)
		return BUCKET_FAIL_TABLE;
	for (attempt = 0; attempt < 4; attempt++) {
		res = charge_v4_attempt(req, a, rule, SLUICE_CAS_RETRIES);
		if (res >= 0)
			return res;
		if (res == FIND_MISSING)
			return BUCKET_FAIL_TABLE;
		/* a way was being written, or the bucket was evicted under us: look again */
	}
	return BUCKET_FAIL_TABLE;
}

/* The compare-and-swaps the fast path tries on a bucket or a counter before
 * it leaves a contended bucket to the walk (or, once it has charged, falls
 * back to an add: count_add). */
#define FAST_TRIES 2

/* The fast path's charge (decide_fast) of a GCRA-form rule: one attempt
 * (charge_v4_attempt, FAST_TRIES compare-and-swaps), which may make the
 * bucket; -1, having changed nothing, where that attempt would look again,
 * for the walk to charge. */
static __always_inline int charge_v4_held(__u64 key, const struct sluice_rule *rule, __u64 now,
					  const struct charge *ch)
{
	struct sluice_set_v4 *a = NULL;
	struct charge_req *req = begin_v4(key, rule, now, ch, &a);
	int res;

	if (!req || !a)
		return -1;
	res = charge_v4_attempt(req, a, rule, FAST_TRIES);
	return res < 0 ? -1 : res;
}

/*
 * IPv6: looks up the bucket of req's address (req->addr, masked) in its set
 * table and charges it: a bucket_result, or LOOKUP_RETRY, or LOOKUP_NOT_FOUND
 * with the way to create it in (sluice_insert_v6), or LOOKUP_LOCKED with the
 * way found (req->set_idx, req->way) for a multi-word algorithm, which the
 * caller charges with sluice_charge_locked. A global function:
 * checked once by the verifier.
 */
__noinline int sluice_charge_v6(const struct sluice_rule *rule, struct charge_req *req)
{
	struct sluice_set_v6 *set;
	void *found = NULL;
	int w, res;

	if (!rule || !req)
		return BUCKET_FAIL_TABLE; /* the verifier: arguments of a global function may be NULL */
	w = find_bucket(rule, req, KIND_V6, &found);
	if (w == LOOKUP_FAIL || !found)
		return BUCKET_FAIL_TABLE;
	if (w < 0)
		return w;
	if (!sluice_gcra_form(rule))
		return LOOKUP_LOCKED;
	set = found;
	if ((rule->flags & SLUICE_RULE_CLUSTER) && grant_waits(req, &set->way[w]))
		sluice_take_grant(req);
	res = charge_gcra(&set->way[w], &set->tag, w, &set->addr[w], rule, req, SLUICE_CAS_RETRIES, 0);
	return res < 0 ? LOOKUP_RETRY : res; /* -1: evicted under us */
}


/* Charges the bucket a lookup found for a multi-word algorithm (LOOKUP_LOCKED):
 * a global function per kind of bucket, called from here so that its lock's
 * bpf_loop callback is the deepest frame. Not one body over the set
 * accessors (sources.h), as the inserts are: here `kind` is not a constant
 * (apply_limit picks an IPv6 bucket or a log at run time), and one lookup
 * reached by two maps would cost every lookup there its inlining (the
 * verifier inlines an array lookup only at a call that one map reaches), so
 * each kind keeps its own lookup. */
static __always_inline int charge_found(int kind, const struct sluice_rule *rule, struct charge_req *req)
{
	struct sluice_set_tags *t = NULL;
	int w = SLUICE_WAY(req->way), res = LOOKUP_RETRY;

	req->full = sluice_stamp(req->now);
	if (kind == KIND_V6) {
		struct sluice_set_v6 *set = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &req->set_idx);

		if (set) {
			t = &set->tag;
			res = sluice_charge_locked(&set->way[w], t, &set->addr[w], rule, req);
		}
	} else if (kind == KIND_LOG4) {
		struct sluice_log_set_v4 *set = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V4, &req->set_idx);

		if (set) {
			t = &set->tag;
			res = sluice_charge_log(&set->way[w], t, NULL, rule, req);
		}
	} else {
		struct sluice_log_set_v6 *set = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V6, &req->set_idx);

		if (set) {
			t = &set->tag;
			res = sluice_charge_log(&set->way[w], t, &set->addr[w], rule, req);
		}
	}
	if (!t || res < 0)
		return LOOKUP_RETRY;
	sluice_way_touch(t, w, req->want, req->now, req->full);
	return res;
}

/* Looks up and charges req's bucket in a table of `kind`, creating it if
 * missing; a few attempts, as charge_v4 makes. */
static __always_inline enum bucket_result charge_table(enum table_kind kind, const struct sluice_rule *rule,
						       struct charge_req *req)
{
	int attempt, res;

	for (attempt = 0; attempt < 4; attempt++) {
		if (kind == KIND_V6)
			res = sluice_charge_v6(rule, req);
		else if (kind == KIND_LOG4)
			res = sluice_log_v4(rule, req);
		else
			res = sluice_log_v6(rule, req);
		if (res == LOOKUP_LOCKED)
			res = charge_found(kind, rule, req);
		if (res == LOOKUP_NOT_FOUND) {
			if (kind == KIND_V6)
				res = sluice_insert_v6(rule, req);
			else if (kind == KIND_LOG4)
				res = sluice_log_insert_v4(rule, req);
			else
				res = sluice_log_insert_v6(rule, req);
		}
		if (res >= 0)
			return res;
	}
	return BUCKET_FAIL_TABLE;
}

/* An IPv4 source's key in a rule's buckets: its address masked to the
 * rule's per-prefix length. */
static __always_inline __u64 source_key_v4(const struct packet_info *pkt, const struct sluice_rule *rule)
{
	struct sluice_src_v4 key = { .rule_id = rule->id };
	__u32 addr;

	__builtin_memcpy(key.addr, pkt->saddr, 4);
	mask_addr(key.addr, 1, rule->per_prefix);
	__builtin_memcpy(&addr, key.addr, 4);
	return sluice_src4_key(rule->id, addr);
}

/* The request for an IPv6 source: its address masked to the rule's
 * per-prefix length (the set table hashes it into a key); NULL if none. */
static __always_inline struct charge_req *begin_v6(const struct packet_info *pkt, const struct sluice_rule *rule,
						    __u64 now, const struct charge *ch)
{
	struct sluice_src_v6 key = { .rule_id = rule->id };
	struct charge_req *req;

	__builtin_memcpy(key.addr, pkt->saddr, 16);
	mask_addr(key.addr, 4, rule->per_prefix);
	req = new_req(rule, now, ch);
	if (!req)
		return NULL;
	req->table = SLUICE_TABLE_V6;
	__builtin_memcpy(&req->addr, key.addr, 16);
	return req;
}

static __always_inline enum bucket_result apply_limit(const struct packet_info *pkt,
						       const struct sluice_rule *rule,
						       const struct charge *ch)
{
	int log = rule->algo == SLUICE_ALGO_SLIDING_LOG;
	__u64 now = now_ns(rule);
	struct charge_req *req;

	if (pkt->family == 4) {
		if (!log)
			return charge_v4(source_key_v4(pkt, rule), rule, now, ch);
		req = new_req(rule, now, ch);
		if (!req)
			return BUCKET_FAIL_TABLE;
		req->want = source_key_v4(pkt, rule);
		return charge_table(KIND_LOG4, rule, req);
	} else {
		req = begin_v6(pkt, rule, now, ch);
		if (!req)
			return BUCKET_FAIL_TABLE;
		return charge_table(log ? KIND_LOG6 : KIND_V6, rule, req);
	}
}

/* The fast path's IPv6 charge (decide_fast), as charge_v4_held: one
 * attempt, which may make the bucket, else -1 having changed nothing. */
static __always_inline int charge_v6_held(const struct packet_info *pkt, const struct sluice_rule *rule,
					  __u64 now, const struct charge *ch)
{
	struct charge_req *req = begin_v6(pkt, rule, now, ch);
	int res;

	if (!req)
		return -1;
	res = sluice_charge_v6(rule, req);
	if (res == LOOKUP_NOT_FOUND)
		res = sluice_insert_v6(rule, req);
	return res < 0 ? -1 : res; /* LOOKUP_*: a way being written, or evicted under us */
}

#endif /* SLUICE_LIB_CHARGE_H */
