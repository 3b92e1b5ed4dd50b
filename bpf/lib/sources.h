/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The source tables (sluice_settable.h): a bucket's key, the scan of its two
 * sets, the choice of a victim, and the claim, freeze and publish of a new
 * bucket (source buckets and sliding logs, IPv4 and IPv6).
 */
#ifndef SLUICE_LIB_SOURCES_H
#define SLUICE_LIB_SOURCES_H

#include "sluice_settable.h"
#include "lib/algos/locked.h"
#include "lib/algos/log.h"
#include "lib/clock.h"
#include "lib/parse.h"

/* This CPU's pending-drops (and owed) slot of a packet's source
 * (sluice_source_slot, sluice_cpu_slot), which holds the drop memo of the
 * sources that hash to it too. */
static __always_inline __u32 source_slot(const struct packet_info *pkt)
{
	__u64 lo, hi;

	__builtin_memcpy(&lo, pkt->saddr, 8);
	__builtin_memcpy(&hi, pkt->saddr + 8, 8);
	return sluice_cpu_slot(bpf_get_smp_processor_id(), sluice_source_slot(lo, hi));
}

#ifdef SLUICE_TEST_CLOCK
/* Test builds only: reads of a key to waste between finding a bucket and
 * charging it, so that a test can make another CPU's eviction land there. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sluice_race_window SEC(".maps");

/* A global function: the verifier walks its loop once, not on every path
 * that reaches it. */
__noinline int sluice_race_reads(const __u64 *key)
{
	__u32 zero = 0, *reads = bpf_map_lookup_elem(&sluice_race_window, &zero), i;

	if (!reads || !key)
		return 0;
	for (i = 0; i < 1024; i++) { /* the verifier walks each iteration: keep it short */
		if (i >= *reads)
			break;
		sluice_load_relaxed(key);
	}
	return 0;
}

static __always_inline void race_window(const __u64 *key)
{
	sluice_race_reads(key);
}
#else
static __always_inline void race_window(const __u64 *key)
{
}
#endif

/* Masks an address in place to its first `bits` bits. */
static __always_inline void mask_addr(__u8 *addr, __u32 words, __u32 bits)
{
	__u32 *w = (__u32 *)addr;
	__u32 i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		if (i >= words)
			break;
		if (bits >= 32) {
			bits -= 32;
		} else {
			w[i] &= bits ? bpf_htonl(~0U << (32 - bits)) : 0;
			bits = 0;
		}
	}
}

/*
 * The way of a set holding req's key (and, with `addrs`, the set's address
 * line, req's address), or -1; *busy is set to 1 + a way being written.
 */
static __always_inline int scan_set(const struct sluice_set_tags *t, const struct sluice_addr6 *addrs,
				    const struct charge_req *req, int *busy)
{
	int w;

#pragma unroll
	for (w = 0; w < SLUICE_SET_WAYS; w++) {
		__u64 k = sluice_load_relaxed(&t->key[w]);

		if (k != req->want) {
			if (k == SLUICE_KEY_BUSY)
				*busy = w + 1;
			continue;
		}
		/* The key's acquire, paid at the match only: the address
		 * line and the bucket are read after it. */
		sluice_fence_acquire();
		if (!addrs || (sluice_load_relaxed(&addrs[w].hi) == req->addr.hi &&
			       sluice_load_relaxed(&addrs[w].lo) == req->addr.lo))
			return w;
	}
	return -1;
}

/* Waits, boundedly, for another CPU to publish the bucket it is writing in
 * way w of `t`: 1 if it did. A global function, so that the verifier walks
 * its reads once, not once for every lookup path that may wait. */
__noinline int sluice_wait_published(const struct sluice_set_tags *t, int w)
{
	int i;

	if (!t)
		return 0; /* the verifier: arguments of a global function may be NULL */
	w = SLUICE_WAY(w);
	for (i = 0; i < SLUICE_LOCK_RETRIES; i++) {
		if (sluice_load_relaxed(&t->key[w]) != SLUICE_KEY_BUSY) /* the caller looks again */
			return 1;
	}
	return 0;
}

/* Keeps in *v the better way to evict: empty, else the lowest rank. */
static __always_inline void consider_set(const struct sluice_set_tags *t, int base, __u32 stamp,
					 struct victim *v)
{
	int w;

#pragma unroll
	for (w = 0; w < SLUICE_SET_WAYS; w++) {
		__u64 k = sluice_load_relaxed(&t->key[w]); /* the claim's compare-and-swap checks it */
		__s32 rank;

		if (k == SLUICE_KEY_BUSY || (v->found && v->key == SLUICE_KEY_EMPTY))
			continue;
		rank = sluice_way_rank(t, w, stamp);
		if (k == SLUICE_KEY_EMPTY || !v->found || rank < v->rank) {
			v->found = 1;
			v->key = k;
			v->rank = rank;
			v->keep = sluice_load_relaxed(&t->keep[w]);
			v->way = base + w;
		}
	}
}

/*
 * The way a new bucket takes among both sets, into *v: 1, or 0 if every way
 * is being written. A global function: its callers see an unknown way, so the
 * verifier walks the choice once, not once per way.
 */
__noinline int sluice_choose_victim(const struct sluice_set_tags *a, const struct sluice_set_tags *b,
				    __u32 stamp, struct victim *v)
{
	if (!a || !b || !v)
		return 0; /* the verifier: arguments of a global function may be NULL */
	v->found = 0;
	v->key = 0;
	v->keep = 0;
	v->rank = 0;
	v->way = 0;
	consider_set(a, 0, stamp, v);
	if (b != a)
		consider_set(b, SLUICE_SET_WAYS, stamp, v);
	return v->found;
}

/* Counts a new bucket, and what it evicted. */
static __always_inline void count_insert(const struct victim *v, __u32 stamp, __u32 table)
{
	int v6 = table == SLUICE_TABLE_V6, active;

	count_global(SLUICE_CNT_INFO_NEW_BUCKET, 0);
	if (v->key != SLUICE_KEY_EMPTY) {
		active = sluice_way_active(v->keep, stamp);
		count_global(SLUICE_CNT_INFO_EVICTED, 0);
		if (active)
			count_global(SLUICE_CNT_INFO_EVICTED_ACTIVE, 0);
		if (v6)
			count_global(SLUICE_CNT_INFO_EVICTED_V6, 0);
		if (v6 && active)
			count_global(SLUICE_CNT_INFO_EVICTED_ACTIVE_V6, 0);
	}
}

/*
 * Lookups end in one of these, or in a bucket_result: NOT_FOUND asks the
 * caller to create the bucket in req->victim (chosen by the lookup), RETRY to
 * look again (the key left its way under the charge, or a way was being
 * written).
 */
#define LOOKUP_RETRY     (-1)
#define LOOKUP_NOT_FOUND (-2)
#define LOOKUP_LOCKED    (-3)

/*
 * After a lookup of req's key in sets a and b missed: LOOKUP_RETRY if a way
 * was being written (it may be this very bucket, created by another CPU:
 * waited for), else the way a new bucket takes, in req->victim, and
 * LOOKUP_NOT_FOUND (LOOKUP_RETRY if every way is being written).
 */
static __always_inline int lookup_missed(const struct sluice_set_tags *a, const struct sluice_set_tags *b,
					 int busy_a, int busy_b, struct charge_req *req)
{
	if (busy_a || busy_b) {
		sluice_wait_published(busy_a ? a : b, (busy_a ? busy_a : busy_b) - 1);
		return LOOKUP_RETRY;
	}
	return sluice_choose_victim(a, b, sluice_stamp(req->now), &req->victim) ? LOOKUP_NOT_FOUND : LOOKUP_RETRY;
}

/* Freezes claimed way w of `t` (its bucket's word `word`) for a new bucket:
 * 1 and the frozen value in *frozen; else gives the way back to `old`, its
 * key before the claim, and 0. A global function, so that the verifier walks
 * the freeze's wait once, not once for each table. */
__noinline int sluice_freeze_claimed(struct sluice_set_tags *t, int w, __u64 *word, __u64 old, __u64 *frozen)
{
	if (!t || !word || !frozen)
		return 0; /* the verifier: arguments of a global function may be NULL */
	if (sluice_way_freeze(t, w, word, frozen))
		return 1;
	sluice_way_unclaim(t, w, old);
	return 0;
}

/* A new source bucket's state in `init` (init_state), from nothing: a global
 * function, so that the algorithms' arithmetic keeps its registers in a frame
 * of its own, off the stack of the chain of calls that reaches it. */
__noinline int sluice_init_source(struct sluice_source_state *init, const struct sluice_rule *rule,
				  const struct charge_req *req)
{
	if (!init || !rule || !req)
		return BUCKET_FAIL_TABLE; /* the verifier: arguments of a global function may be NULL */
	__builtin_memset(init, 0, sizeof(*init));
	return init_state(init, rule, req->now, req->cost, req->packets, req->bytes);
}

/* Writes a new source bucket, with its first packet's decision (returned),
 * into claimed and frozen way w (tags `t`, bucket `st`), and publishes it.
 * Built in `init`, the per-CPU scratch slot: stack frames are short across calls. */
static __always_inline int install_source(struct sluice_set_tags *t, struct sluice_source_state *st, int w,
					  __u64 frozen, struct sluice_source_state *init,
					  const struct sluice_rule *rule, const struct charge_req *req)
{
	int res = sluice_init_source(init, rule, req);

	sluice_way_install(t, st, w, frozen, init, sluice_gcra_form(rule), req->now, req->want);
	return res;
}

/*
 * The set tables a bucket lives in: source buckets (the GCRA form and the
 * multi-word algorithms) and sliding logs, for IPv4 and IPv6. The bodies
 * below serve every table: `kind` is a constant wherever it names a map, so
 * that each map lookup names one map (the verifier inlines an array lookup
 * only at a call that only one map reaches).
 */
enum table_kind {
	KIND_V6,
	KIND_LOG4,
	KIND_LOG6,
	KIND_V4,
};

#define TABLE_IS_LOG(kind) ((kind) == KIND_LOG4 || (kind) == KIND_LOG6)

static __always_inline void *table_map(const int kind)
{
	switch (kind) {
	case KIND_V4:
		return &SLUICE_MAP_SOURCES_V4;
	case KIND_V6:
		return &SLUICE_MAP_SOURCES_V6;
	case KIND_LOG4:
		return &SLUICE_MAP_LOGS_V4;
	default:
		return &SLUICE_MAP_LOGS_V6;
	}
}

/* A set's tags. */
static __always_inline struct sluice_set_tags *set_tags(void *set, const int kind)
{
	switch (kind) {
	case KIND_V4:
		return &((struct sluice_set_v4 *)set)->tag;
	case KIND_V6:
		return &((struct sluice_set_v6 *)set)->tag;
	case KIND_LOG4:
		return &((struct sluice_log_set_v4 *)set)->tag;
	default:
		return &((struct sluice_log_set_v6 *)set)->tag;
	}
}

/* A set's address line (IPv6), or NULL (IPv4: the key is the address). */
static __always_inline struct sluice_addr6 *set_addrs(void *set, const int kind)
{
	if (kind == KIND_V6)
		return ((struct sluice_set_v6 *)set)->addr;
	if (kind == KIND_LOG6)
		return ((struct sluice_log_set_v6 *)set)->addr;
	return NULL;
}

/* Way `w` of a source set, or of a log set. */
static __always_inline struct sluice_source_state *source_way(void *set, const int kind, int w)
{
	if (kind == KIND_V4)
		return &((struct sluice_set_v4 *)set)->way[w];
	return &((struct sluice_set_v6 *)set)->way[w];
}

static __always_inline struct sluice_log_state *log_way(void *set, const int kind, int w)
{
	if (kind == KIND_LOG4)
		return &((struct sluice_log_set_v4 *)set)->way[w];
	return &((struct sluice_log_set_v6 *)set)->way[w];
}

/* The word of way `w`: a source bucket's, or a log's sequence lock. */
static __always_inline __u64 *way_word(void *set, const int kind, int w)
{
	return TABLE_IS_LOG(kind) ? &log_way(set, kind, w)->word : &source_way(set, kind, w)->word;
}

/*
 * Creates the bucket of req's key in the way a lookup chose (req->victim of
 * sets req->set_a and req->set_b) of a table of `kind`, with its first
 * packet's decision; or LOOKUP_RETRY if another CPU took the way first, or a
 * charger of the old bucket held its lock too long. The protocol (claim,
 * freeze, write, publish) is include/sluice_settable.h; an IPv6 bucket's
 * address goes into the set's address line before it is written. Two CPUs
 * creating the same new source at the same instant may each make one; the
 * copy found second is never charged again and goes first (it stays on
 * probation). A source bucket is built in the per-CPU scratch slot.
 */
static __always_inline int insert_bucket(const struct sluice_rule *rule, struct charge_req *req, const int kind)
{
	struct sluice_source_state *init = NULL;
	struct sluice_set_tags *t;
	struct sluice_addr6 *addrs;
	__u32 zero = 0, idx;
	__u64 frozen = 0;
	void *set;
	int w, res;

	if (!rule || !req)
		return LOOKUP_RETRY; /* the verifier: arguments of a global function may be NULL */
	if (!TABLE_IS_LOG(kind))
		init = bpf_map_lookup_elem(&sluice_scratch, &zero);
	idx = req->victim.way & SLUICE_SET_WAYS ? req->set_b : req->set_a;
	set = bpf_map_lookup_elem(table_map(kind), &idx);
	if ((!TABLE_IS_LOG(kind) && !init) || !set)
		return LOOKUP_RETRY;
	w = SLUICE_WAY(req->victim.way);
	t = set_tags(set, kind);
	if (!sluice_way_claim(t, w, req->victim.key))
		return LOOKUP_RETRY;
	if (!sluice_freeze_claimed(t, w, way_word(set, kind, w), req->victim.key, &frozen))
		return LOOKUP_RETRY;
	addrs = set_addrs(set, kind);
	if (addrs)
		sluice_way_set_addr(addrs, w, &req->addr);
	if (TABLE_IS_LOG(kind))
		res = install_log(t, log_way(set, kind, w), w, frozen, rule, req);
	else
		res = install_source(t, source_way(set, kind, w), w, frozen, init, rule, req);
	count_insert(&req->victim, sluice_stamp(req->now), req->table);
	return res;
}

/* insert_bucket for each table: global functions, called by walk_step
 * itself (the verifier allows 512 bytes of stack across a chain of calls,
 * and a new bucket's state is one more frame: sluice_init_source). */
__noinline int sluice_insert_v4(const struct sluice_rule *rule, struct charge_req *req)
{
	return insert_bucket(rule, req, KIND_V4);
}

__noinline int sluice_insert_v6(const struct sluice_rule *rule, struct charge_req *req)
{
	return insert_bucket(rule, req, KIND_V6);
}

__noinline int sluice_log_insert_v4(const struct sluice_rule *rule, struct charge_req *req)
{
	return insert_bucket(rule, req, KIND_LOG4);
}

__noinline int sluice_log_insert_v6(const struct sluice_rule *rule, struct charge_req *req)
{
	return insert_bucket(rule, req, KIND_LOG6);
}

#define LOOKUP_FAIL (-4) /* find_bucket: the table is missing; the caller's BUCKET_FAIL_TABLE */

/*
 * Looks up req's bucket in a table of `kind` but IPv4 sources' (find_v4
 * spares the hot path its second set until it needs it): its key (IPv6:
 * hashed from req->addr, masked) and two sets chosen, both looked up, the
 * first scanned, then the second. The way found, with its set in *found,
 * req->set_idx and req->way; or lookup_missed's answer (LOOKUP_RETRY, or
 * LOOKUP_NOT_FOUND with the way to create it in); or LOOKUP_FAIL.
 */
static __always_inline int find_bucket(const struct sluice_rule *rule, struct charge_req *req, const int kind,
				       void **found)
{
	const struct sluice_config *cfg;
	int w, busy_a = 0, busy_b = 0;
	__u32 zero = 0, sets;
	void *a, *b;
	__u64 h;

	cfg = bpf_map_lookup_elem(&SLUICE_MAP_CONFIG, &zero);
	if (!cfg)
		return LOOKUP_FAIL;
	sets = kind == KIND_V6 ? cfg->src6_sets : kind == KIND_LOG4 ? cfg->log4_sets : cfg->log6_sets;
	if (!sets)
		return LOOKUP_FAIL;
	if (kind == KIND_LOG4) {
		sluice_src4_sets(req->want, cfg->hash_seed, sets, &req->set_a, &req->set_b);
	} else {
		h = sluice_src6_hash(rule->id, req->addr.hi, req->addr.lo, cfg->hash_seed);
		req->want = sluice_src6_key(rule->id, h);
		if (kind == KIND_V6)
			req->table = SLUICE_TABLE_V6;
		sluice_hash_sets(h, sets, &req->set_a, &req->set_b);
	}
	a = bpf_map_lookup_elem(table_map(kind), &req->set_a);
	b = bpf_map_lookup_elem(table_map(kind), &req->set_b);
	if (!a || !b)
		return LOOKUP_FAIL;
	*found = a;
	req->set_idx = req->set_a;
	w = scan_set(set_tags(a, kind), set_addrs(a, kind), req, &busy_a);
	if (w < 0) {
		*found = b;
		req->set_idx = req->set_b;
		w = scan_set(set_tags(b, kind), set_addrs(b, kind), req, &busy_b);
	}
	if (w < 0)
		return lookup_missed(set_tags(a, kind), set_tags(b, kind), busy_a, busy_b, req);
	w = SLUICE_WAY(w);
	req->way = w;
	return w;
}

/*
 * Sliding-log buckets, in their own set tables (a log is 560 bytes): looked
 * up (find_bucket), and found, LOOKUP_LOCKED with the way (req->set_idx,
 * req->way) for the caller to charge with sluice_charge_log; or
 * BUCKET_FAIL_TABLE. One global function per family.
 */
static __always_inline int find_log(const struct sluice_rule *rule, struct charge_req *req, const int kind)
{
	void *set = NULL;
	int w;

	if (!rule || !req)
		return BUCKET_FAIL_TABLE; /* the verifier: arguments of a global function may be NULL */
	w = find_bucket(rule, req, kind, &set);
	if (w == LOOKUP_FAIL)
		return BUCKET_FAIL_TABLE;
	return w < 0 ? w : LOOKUP_LOCKED;
}

__noinline int sluice_log_v4(const struct sluice_rule *rule, struct charge_req *req)
{
	return find_log(rule, req, KIND_LOG4);
}

__noinline int sluice_log_v6(const struct sluice_rule *rule, struct charge_req *req)
{
	return find_log(rule, req, KIND_LOG6);
}

#endif /* SLUICE_LIB_SOURCES_H */
