// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Sluice XDP program: per-source rate limiting at layer 3/4.
 *
 * For each frame: parse (parse.h), find the rules covering the source address
 * with one lookup (a multibit table for IPv4, an LPM trie for IPv6; the
 * controller compiles each prefix's candidate list, most specific first), take
 * the first rule whose protocol and port match, then allow, deny, or charge the
 * source's bucket (sluice_algos.h): IPv4 buckets in a set table of our own,
 * IPv6 buckets in an LRU hash.
 *
 * Fail-open: whenever the program cannot decide, the frame passes and a global
 * counter says why.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sluice_abi.h"
#include "sluice_algos.h"
#include "parse.h"
#ifdef SLUICE_BENCH_SOURCES
#include "bench_sources.h"
#endif

#define EEXIST 17

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_RULES);
	__type(key, __u32);
	__type(value, struct sluice_rule);
} SLUICE_MAP_RULES SEC(".maps");

/* Controller-only view of each rule; the program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_RULES);
	__type(key, __u32);
	__type(value, struct sluice_rule_info);
} SLUICE_MAP_RULE_INFO SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_RULES);
	__type(key, __u32);
	__type(value, struct sluice_rule_counters);
} SLUICE_MAP_RULE_COUNTERS SEC(".maps");

/* IPv4 rule lookup: two sets of a 16-8-8 table (see sluice_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_dir_sel);
} SLUICE_MAP_DIR4_SEL SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * SLUICE_DIR_TOP_SIZE);
	__type(key, __u32);
	__type(value, __u32);
} SLUICE_MAP_DIR4_TOP SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * SLUICE_DEFAULT_MAX_RULES); /* two sets */
	__type(key, __u32);
	__type(value, struct sluice_dir_block);
} SLUICE_MAP_DIR4_BLOCKS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * (SLUICE_DEFAULT_MAX_RULES + 1)); /* two sets; index 0 unused */
	__type(key, __u32);
	__type(value, struct sluice_match_list);
} SLUICE_MAP_LISTS_V4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SLUICE_DEFAULT_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sluice_lpm_v6);
	__type(value, struct sluice_match_list);
} SLUICE_MAP_MATCH_V6 SEC(".maps");

/* IPv4 buckets: sets of four ways (see sluice_abi.h); the controller maps it
 * to read statistics and to purge a deleted rule's buckets. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_set_v4);
} SLUICE_MAP_SOURCES_V4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_config);
} SLUICE_MAP_CONFIG SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_DEFAULT_MAX_SOURCES);
	__type(key, struct sluice_src_v6);
	__type(value, struct sluice_source_state);
} SLUICE_MAP_SOURCES_V6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_DEFAULT_MAX_LOG_SOURCES);
	__type(key, struct sluice_src_v4);
	__type(value, struct sluice_log_state);
} SLUICE_MAP_LOGS_V4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_DEFAULT_MAX_LOG_SOURCES);
	__type(key, struct sluice_src_v6);
	__type(value, struct sluice_log_state);
} SLUICE_MAP_LOGS_V6 SEC(".maps");

/* An all-zero log bucket to insert from: the struct is larger than the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_log_state);
} sluice_zero_log SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_CNT_MAX);
	__type(key, __u32);
	__type(value, struct sluice_counter);
} SLUICE_MAP_COUNTERS SEC(".maps");

/* Controller bookkeeping; the program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_meta);
} SLUICE_MAP_META SEC(".maps");

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

#ifdef SLUICE_TEST_CLOCK
/* Test builds only: the clock is a per-CPU map the test sets before each
 * packet, so that an arrival trace replays deterministically. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sluice_clock SEC(".maps");

static __always_inline __u64 now_ns(const struct sluice_rule *rule)
{
	__u32 zero = 0;
	__u64 *t = bpf_map_lookup_elem(&sluice_clock, &zero);

	return t ? *t : 0;
}
#else
static __always_inline __u64 now_ns(const struct sluice_rule *rule)
{
	if (rule->flags & SLUICE_RULE_COARSE_CLOCK)
		return bpf_ktime_get_coarse_ns();
	return bpf_ktime_get_ns();
}
#endif

/* A selector the packet cannot show (unknown protocol or ports) matches. */
static __always_inline int rule_matches(const struct sluice_rule *r, const struct packet_info *pkt)
{
	if (r->proto != SLUICE_PROTO_ANY && pkt->proto_known && r->proto != pkt->proto)
		return 0;
	if (pkt->ports_known && (pkt->dport < r->dport_lo || pkt->dport > r->dport_hi))
		return 0;
	return 1;
}

/* The match list for an IPv4 source: at most three array lookups. */
static __always_inline const struct sluice_match_list *lookup_v4(const __u8 *saddr)
{
	const struct sluice_dir_block *blk;
	const struct sluice_dir_sel *sel;
	__u32 zero = 0, addr, idx, *top, e;

	sel = bpf_map_lookup_elem(&SLUICE_MAP_DIR4_SEL, &zero);
	if (!sel)
		return NULL;
	__builtin_memcpy(&addr, saddr, 4);
	addr = bpf_ntohl(addr);
	idx = (sel->set & 1) * SLUICE_DIR_TOP_SIZE + (addr >> (32 - SLUICE_DIR_TOP_BITS));
	top = bpf_map_lookup_elem(&SLUICE_MAP_DIR4_TOP, &idx);
	if (!top)
		return NULL;
	e = *top;
	if (e & SLUICE_DIR_CHILD) {
		idx = e & ~SLUICE_DIR_CHILD;
		blk = bpf_map_lookup_elem(&SLUICE_MAP_DIR4_BLOCKS, &idx);
		if (!blk)
			return NULL;
		e = blk->entry[(addr >> 8) & 0xff];
		if (e & SLUICE_DIR_CHILD) {
			idx = e & ~SLUICE_DIR_CHILD;
			blk = bpf_map_lookup_elem(&SLUICE_MAP_DIR4_BLOCKS, &idx);
			if (!blk)
				return NULL;
			e = blk->entry[addr & 0xff];
		}
	}
	if (!e)
		return NULL;
	return bpf_map_lookup_elem(&SLUICE_MAP_LISTS_V4, &e);
}

/* The first candidate rule that matches, or NULL. *slot_out gets its slot;
 * *vanished is set if a listed slot was emptied by a concurrent update. */
static __always_inline const struct sluice_rule *
match_rule(const struct packet_info *pkt, __u32 *slot_out, int *vanished)
{
	const struct sluice_match_list *list;
	__u32 i, n;

	if (pkt->family == 4) {
		list = lookup_v4(pkt->saddr);
	} else {
		struct sluice_lpm_v6 key = { .prefixlen = 128 };

		__builtin_memcpy(key.addr, pkt->saddr, 16);
		list = bpf_map_lookup_elem(&SLUICE_MAP_MATCH_V6, &key);
	}
	if (!list)
		return NULL;

	n = list->count;
	for (i = 0; i < SLUICE_MAX_CANDIDATES; i++) {
		const struct sluice_rule *r;
		__u32 slot;

		if (i >= n)
			break;
		slot = list->slots[i];
		r = bpf_map_lookup_elem(&SLUICE_MAP_RULES, &slot);
		if (!r || r->id == 0) {
			*vanished = 1;
			continue;
		}
		if (rule_matches(r, pkt)) {
			*slot_out = slot;
			return r;
		}
	}
	return NULL;
}

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
 * BUCKET_CONTENDED: the bucket could not be updated because other CPUs kept
 * winning it (SLUICE_CAS_RETRIES lost compare-and-swaps, or the lock busy for
 * SLUICE_LOCK_RETRIES reads). That is a flood of one source from many CPUs at
 * once, so the packet is dropped: passing it would let such a flood around
 * the limit. It cannot black-hole anyone: every holder releases the lock
 * before its program returns.
 */
enum bucket_result {
	BUCKET_PASS,
	BUCKET_DROP,
	BUCKET_CONTENDED,
	BUCKET_FAIL_TABLE,
};

/* The lock of the multi-word states: test-and-test-and-set, bounded. */
static __always_inline int bucket_trylock(__u32 *lock)
{
	int i;

	for (i = 0; i < SLUICE_LOCK_RETRIES; i++) {
		if (*(volatile __u32 *)lock == 0 && __sync_val_compare_and_swap(lock, 0, 1) == 0)
			return 1;
	}
	return 0;
}

static __always_inline void bucket_unlock(__u32 *lock)
{
	/* An exchange, not a store: a full barrier, so the state written under
	 * the lock is visible before the lock is seen free. */
	__sync_lock_test_and_set(lock, 0);
}

/* Token bucket and GCRA share the GCRA form, one word; only a token bucket
 * with warm-up needs tokens, last refill and coldness. */
static __always_inline int gcra_form(const struct sluice_rule *rule)
{
	return rule->algo == SLUICE_ALGO_GCRA ||
	       (rule->algo == SLUICE_ALGO_TOKEN_BUCKET && !rule->bucket.warmup);
}

/* One decision of a bucket algorithm on state the caller owns. */
static __always_inline int decide(union sluice_algo_state *s, const struct sluice_rule *rule,
				  __u64 now, __u64 cost)
{
	__u64 next;

	if (gcra_form(rule)) {
		if (!sluice_gcra_admit(s->gcra.tat, sluice_ns_to_ticks(now),
				       sluice_cost_ticks(rule->bucket.inc_mult, rule->inc_shift, cost),
				       rule->bucket.capacity, &next))
			return 0;
		s->gcra.tat = next;
		return 1;
	}
	switch (rule->algo) {
	case SLUICE_ALGO_FIXED_WINDOW:
		return sluice_fixed_admit(&s->fixed.window, &s->fixed.count, now, rule->window.window_ns,
					  rule->window.limit, cost);
	case SLUICE_ALGO_SLIDING_WINDOW:
		return sluice_sliding_admit(&s->sliding.window, &s->sliding.cur, &s->sliding.prev, now,
					    rule->window.window_ns, rule->window.limit, cost);
	default:
		return sluice_tb_admit(&s->tb.tokens, &s->tb.last, &s->tb.cold, sluice_ns_to_ticks(now),
				       sluice_cost_ticks(rule->bucket.inc_mult, rule->inc_shift, cost),
				       rule->bucket.capacity, rule->bucket.warmup);
	}
}

/* GCRA's whole state is one word: compare-and-swap, no lock. */
static __always_inline enum bucket_result gcra_cas(__u64 *tat_word, const struct sluice_rule *rule,
						    __u64 now, __u64 cost)
{
	__u64 inc = sluice_cost_ticks(rule->bucket.inc_mult, rule->inc_shift, cost);
	__u64 now_t = sluice_ns_to_ticks(now);
	__u64 tat, next;
	int i;

	for (i = 0; i < SLUICE_CAS_RETRIES; i++) {
		tat = *(volatile __u64 *)tat_word;
		if (!sluice_gcra_admit(tat, now_t, inc, rule->bucket.capacity, &next))
			return BUCKET_DROP;
		if (__sync_val_compare_and_swap(tat_word, tat, next) == tat)
			return BUCKET_PASS;
	}
	return BUCKET_CONTENDED;
}

static __always_inline void count_source(struct sluice_source_counters *c, enum bucket_result res,
					 __u64 l3_len)
{
	if (res == BUCKET_PASS) {
		__sync_fetch_and_add(&c->passed_packets, 1);
		__sync_fetch_and_add(&c->passed_bytes, l3_len);
	} else if (res == BUCKET_DROP || res == BUCKET_CONTENDED) {
		__sync_fetch_and_add(&c->dropped_packets, 1);
		__sync_fetch_and_add(&c->dropped_bytes, l3_len);
	}
}

/*
 * Buckets. A new bucket is created already holding its first packet's
 * decision, so a new source costs one insert. Concurrent CPUs never lose an
 * update: GCRA by compare-and-swap on its one word, the others under the
 * bucket's try-lock. No per-CPU copy multiplies the rate.
 */

/* A new bucket, already holding the decision on its first packet. */
static __always_inline enum bucket_result init_state(struct sluice_source_state *init,
						      const struct sluice_rule *rule, __u64 now,
						      __u64 cost, __u64 l3_len)
{
	enum bucket_result res;

	if (!gcra_form(rule) && rule->algo == SLUICE_ALGO_TOKEN_BUCKET)
		sluice_tb_init(&init->algo.tb.tokens, &init->algo.tb.last, &init->algo.tb.cold,
			       sluice_ns_to_ticks(now), rule->bucket.capacity, rule->bucket.warmup);
	res = decide(&init->algo, rule, now, cost) ? BUCKET_PASS : BUCKET_DROP;
	count_source(&init->cnt, res, l3_len);
	return res;
}

/* Charges an existing bucket. */
static __always_inline enum bucket_result charge_state(struct sluice_source_state *st,
							const struct sluice_rule *rule, __u64 now,
							__u64 cost, __u64 l3_len)
{
	enum bucket_result res;

	if (gcra_form(rule)) {
		res = gcra_cas(&st->algo.gcra.tat, rule, now, cost);
	} else if (bucket_trylock(&st->lock)) {
		res = decide(&st->algo, rule, now, cost) ? BUCKET_PASS : BUCKET_DROP;
		bucket_unlock(&st->lock);
	} else {
		res = BUCKET_CONTENDED;
	}
	count_source(&st->cnt, res, l3_len);
	return res;
}

/* IPv6: charges `cost` units to the bucket at `key` in the LRU table. */
static __always_inline enum bucket_result charge_bucket(void *sources, void *key,
							 const struct sluice_rule *rule, __u64 now,
							 __u64 cost, __u64 l3_len)
{
	struct sluice_source_state *st;
	enum bucket_result res;
	int err;

	st = bpf_map_lookup_elem(sources, key);
	if (!st) {
		struct sluice_source_state init = {};

		res = init_state(&init, rule, now, cost, l3_len);
		err = bpf_map_update_elem(sources, key, &init, BPF_NOEXIST);
		if (err == 0) {
			count_global(SLUICE_CNT_INFO_NEW_BUCKET, 0);
			return res;
		}
		if (err != -EEXIST)
			return BUCKET_FAIL_TABLE;
		/* Another CPU created it first: charge the bucket it made. */
		st = bpf_map_lookup_elem(sources, key);
		if (!st)
			return BUCKET_FAIL_TABLE;
	}
	return charge_state(st, rule, now, cost, l3_len);
}

/* The way of `set` holding `key`, or -1; *busy is set to 1 + a way being written. */
static __always_inline int scan_set(const struct sluice_set_v4 *set, __u64 key, int *busy)
{
	int w;

#pragma unroll
	for (w = 0; w < SLUICE_SET_WAYS; w++) {
		__u64 k = *(volatile const __u64 *)&set->key[w];

		if (k == key)
			return w;
		if (k == SLUICE_KEY_BUSY)
			*busy = w + 1;
	}
	return -1;
}

/* Waits, boundedly, for another CPU to publish the bucket it is writing. */
static __always_inline void wait_published(const struct sluice_set_v4 *set, int w)
{
	int i;

	w &= SLUICE_SET_WAYS - 1;
	for (i = 0; i < SLUICE_LOCK_RETRIES; i++) {
		if (*(volatile const __u64 *)&set->key[w] != SLUICE_KEY_BUSY)
			break;
	}
}

struct victim {
	struct sluice_set_v4 *set;
	__u64 key;  /* what the way held */
	__s32 age;  /* stamps since it was seen (probation included), never negative */
	int way;
};

/* Stamps since a way was seen, as a signed difference: a way stamped by a CPU
 * whose clock reads a little ahead of ours is the freshest (age 0), not 2^32
 * stamps old. */
static __always_inline __s32 way_age(const struct sluice_set_v4 *set, int w, __u32 stamp)
{
	__s32 age = (__s32)(stamp - set->seen[w]);

	return age > 0 ? age : 0;
}

/* Whether the way's source sent a packet in the last SLUICE_PROBATION_STAMPS:
 * a bucket on probation was last sent to when it was born, which its stamp
 * puts SLUICE_PROBATION_STAMPS before its real time. */
static __always_inline int way_active(const struct sluice_set_v4 *set, int w, __s32 age)
{
	int probation = (__u16)(set->seen[w] + SLUICE_PROBATION_STAMPS) == set->born[w];

	return age < (probation ? 2 * SLUICE_PROBATION_STAMPS : SLUICE_PROBATION_STAMPS);
}

/* Keeps in *v the better way to evict: empty, else seen longest ago. */
static __always_inline void consider_set(struct sluice_set_v4 *set, __u32 stamp, struct victim *v)
{
	int w;

#pragma unroll
	for (w = 0; w < SLUICE_SET_WAYS; w++) {
		__u64 k = *(volatile __u64 *)&set->key[w];
		__s32 age = way_age(set, w, stamp);

		if (k == SLUICE_KEY_BUSY || (v->set && v->key == SLUICE_KEY_EMPTY))
			continue;
		if (k == SLUICE_KEY_EMPTY || !v->set || age > v->age) {
			v->set = set;
			v->key = k;
			v->age = age;
			v->way = w;
		}
	}
}

/*
 * Creates the bucket of `key` in one of its two sets, with its first packet's
 * decision in *out; -1 if another CPU won the way. The way is claimed by
 * compare-and-swap to SLUICE_KEY_BUSY, written, then published with its key,
 * so no CPU charges a half-written bucket and two CPUs cannot take one way.
 * Two CPUs creating the same new source at the same instant may each make
 * one; the copy found second is never charged again and ages out.
 */
static __always_inline int insert_v4(struct sluice_set_v4 *a, struct sluice_set_v4 *b, __u64 key,
				     const struct sluice_rule *rule, __u64 now, __u64 cost,
				     __u64 l3_len, enum bucket_result *out)
{
	struct sluice_source_state init = {};
	struct victim v = {};
	__u32 stamp = (__u32)(now >> SLUICE_STAMP_SHIFT);
	enum bucket_result res;
	struct sluice_source_state *st;
	int w, active;

	consider_set(a, stamp, &v);
	if (b != a)
		consider_set(b, stamp, &v);
	if (!v.set)
		return -1; /* every way being written */
	w = v.way & (SLUICE_SET_WAYS - 1);
	if (__sync_val_compare_and_swap(&v.set->key[w], v.key, SLUICE_KEY_BUSY) != v.key)
		return -1;

	res = init_state(&init, rule, now, cost, l3_len);
	st = &v.set->way[w];
	/* The lock word is left alone: a CPU still holding it on the evicted
	 * bucket releases it. */
	__builtin_memcpy(&st->algo, &init.algo, sizeof(init.algo));
	__builtin_memcpy(&st->cnt, &init.cnt, sizeof(init.cnt));
	/* Read before the way is stamped anew: was the evicted source active? */
	active = v.key != SLUICE_KEY_EMPTY && way_active(v.set, w, v.age);
	v.set->seen[w] = stamp - SLUICE_PROBATION_STAMPS;
	v.set->born[w] = (__u16)stamp;
	__sync_lock_test_and_set(&v.set->key[w], key); /* publish: a full barrier */

	count_global(SLUICE_CNT_INFO_NEW_BUCKET, 0);
	if (v.key != SLUICE_KEY_EMPTY) {
		count_global(SLUICE_CNT_INFO_EVICTED, 0);
		if (active)
			count_global(SLUICE_CNT_INFO_EVICTED_ACTIVE, 0);
	}
	*out = res;
	return 0;
}

/* IPv4: finds or creates the bucket of `key` in the set-associative table. */
static __always_inline enum bucket_result charge_v4(__u64 key, const struct sluice_rule *rule,
						     __u64 now, __u64 cost, __u64 l3_len)
{
	const struct sluice_config *cfg;
	struct sluice_set_v4 *a, *b, *set;
	__u32 zero = 0, i1, i2, stamp;
	enum bucket_result res;
	int attempt, w;

	cfg = bpf_map_lookup_elem(&SLUICE_MAP_CONFIG, &zero);
	if (!cfg || !cfg->src4_sets)
		return BUCKET_FAIL_TABLE;
	sluice_src4_sets(key, cfg->hash_seed, cfg->src4_sets, &i1, &i2);
	a = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &i1);
	b = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &i2);
	if (!a || !b)
		return BUCKET_FAIL_TABLE;

	for (attempt = 0; attempt < 4; attempt++) {
		int busy_a = 0, busy_b = 0;

		set = a;
		w = scan_set(a, key, &busy_a);
		if (w < 0) {
			set = b;
			w = scan_set(b, key, &busy_b);
		}
		if (w >= 0)
			goto found;
		/* A way being written may be this very bucket, created by another
		 * CPU: wait for it, then look again. */
		if (busy_a) {
			wait_published(a, busy_a - 1);
			continue;
		}
		if (busy_b) {
			wait_published(b, busy_b - 1);
			continue;
		}
		if (insert_v4(a, b, key, rule, now, cost, l3_len, &res) == 0)
			return res;
	}
	return BUCKET_FAIL_TABLE;

found:
	w &= SLUICE_SET_WAYS - 1;
	stamp = (__u32)(now >> SLUICE_STAMP_SHIFT);
	/* Written once per stamp, so the tag line stays shared; never moved back
	 * by a CPU whose clock reads a little behind. */
	if ((__s32)(stamp - set->seen[w]) > 0)
		set->seen[w] = stamp;
	return charge_state(&set->way[w], rule, now, cost, l3_len);
}

/* A sliding-log bucket: created empty from the zero template, then decided
 * under its lock like the other multi-word algorithms. */
static __always_inline enum bucket_result charge_log(void *logs, void *key,
						      const struct sluice_rule *rule, __u64 now,
						      __u64 l3_len)
{
	struct sluice_log_state *st;
	enum bucket_result res;
	__u32 zero = 0;
	int err;

	st = bpf_map_lookup_elem(logs, key);
	if (!st) {
		struct sluice_log_state *empty = bpf_map_lookup_elem(&sluice_zero_log, &zero);

		if (!empty)
			return BUCKET_FAIL_TABLE;
		err = bpf_map_update_elem(logs, key, empty, BPF_NOEXIST);
		if (err == 0)
			count_global(SLUICE_CNT_INFO_NEW_BUCKET, 0);
		else if (err != -EEXIST)
			return BUCKET_FAIL_TABLE;
		st = bpf_map_lookup_elem(logs, key);
		if (!st)
			return BUCKET_FAIL_TABLE;
	}
	if (bucket_trylock(&st->lock)) {
		res = sluice_log_admit(st->ring, &st->head, now, rule->window.window_ns,
				       (__u32)rule->window.limit) ? BUCKET_PASS : BUCKET_DROP;
		bucket_unlock(&st->lock);
	} else {
		res = BUCKET_CONTENDED;
	}
	count_source(&st->cnt, res, l3_len);
	return res;
}

static __always_inline enum bucket_result apply_limit(const struct packet_info *pkt,
						       const struct sluice_rule *rule)
{
	int log = rule->algo == SLUICE_ALGO_SLIDING_LOG;
	__u64 now = now_ns(rule);
	__u64 cost = 1;

	if (rule->unit == SLUICE_UNIT_BYTES)
		cost = pkt->l3_len < SLUICE_MAX_COST ? pkt->l3_len : SLUICE_MAX_COST;

	if (pkt->family == 4) {
		struct sluice_src_v4 key = { .rule_id = rule->id };
		__u32 addr;

		__builtin_memcpy(key.addr, pkt->saddr, 4);
		mask_addr(key.addr, 1, rule->per_prefix);
		if (log)
			return charge_log(&SLUICE_MAP_LOGS_V4, &key, rule, now, pkt->l3_len);
		__builtin_memcpy(&addr, key.addr, 4);
		return charge_v4(sluice_src4_key(rule->id, addr), rule, now, cost, pkt->l3_len);
	} else {
		struct sluice_src_v6 key = { .rule_id = rule->id };

		__builtin_memcpy(key.addr, pkt->saddr, 16);
		mask_addr(key.addr, 4, rule->per_prefix);
		if (log)
			return charge_log(&SLUICE_MAP_LOGS_V6, &key, rule, now, pkt->l3_len);
		return charge_bucket(&SLUICE_MAP_SOURCES_V6, &key, rule, now, cost, pkt->l3_len);
	}
}

SEC("xdp")
int SLUICE_PROG_NAME(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct packet_info pkt = {};
	struct sluice_rule_counters *rc;
	const struct sluice_rule *rule;
	enum bucket_result res;
	void *payload;
	__u32 slot = 0;
	int vanished = 0;
	int parsed;

#ifdef SLUICE_BENCH_SOURCES
	bench_rewrite_source(ctx);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
#endif
	parsed = parse_packet(data, data_end, &pkt, &payload);
	if (parsed <= 0) {
		count_global(parsed == 0 ? SLUICE_CNT_PASS_NOT_IP : SLUICE_CNT_FAILOPEN_PARSE,
			     data_end - payload);
		return XDP_PASS;
	}
	if (pkt.fragment)
		count_global(SLUICE_CNT_INFO_FRAGMENT, pkt.l3_len);
	if (!pkt.ports_known && (!pkt.proto_known || pkt.proto == SLUICE_PROTO_TCP ||
				 pkt.proto == SLUICE_PROTO_UDP))
		count_global(SLUICE_CNT_INFO_L4_UNKNOWN, pkt.l3_len);

	rule = match_rule(&pkt, &slot, &vanished);
	if (!rule) {
		count_global(vanished ? SLUICE_CNT_FAILOPEN_RULE : SLUICE_CNT_PASS_NO_MATCH,
			     pkt.l3_len);
		return XDP_PASS;
	}
	rc = rule_counters(slot);

	if (rule->action == SLUICE_ACTION_ALLOW) {
		res = BUCKET_PASS;
		count_global(SLUICE_CNT_PASS_ALLOW, pkt.l3_len);
	} else if (rule->action == SLUICE_ACTION_DENY) {
		res = BUCKET_DROP;
		count_global((rule->flags & SLUICE_RULE_SHADOW) ? SLUICE_CNT_PASS_SHADOW : SLUICE_CNT_DROP_DENY,
			     pkt.l3_len);
	} else {
		res = apply_limit(&pkt, rule);
		count_global(res == BUCKET_PASS ? SLUICE_CNT_PASS_LIMIT :
			     res == BUCKET_FAIL_TABLE ? SLUICE_CNT_FAILOPEN_TABLE :
			     (rule->flags & SLUICE_RULE_SHADOW) ? SLUICE_CNT_PASS_SHADOW :
			     res == BUCKET_CONTENDED ? SLUICE_CNT_DROP_CONTENTION :
						       SLUICE_CNT_DROP_RATE,
			     pkt.l3_len);
	}

	if (rc) {
		switch (res) {
		case BUCKET_PASS:
			rc->passed_packets++;
			rc->passed_bytes += pkt.l3_len;
			break;
		case BUCKET_CONTENDED:
			rc->dropped_contention++;
			/* fallthrough */
		case BUCKET_DROP:
			rc->dropped_packets++;
			rc->dropped_bytes += pkt.l3_len;
			break;
		case BUCKET_FAIL_TABLE:
			rc->failopen_table++;
			break;
		}
	}
	if ((res == BUCKET_DROP || res == BUCKET_CONTENDED) && !(rule->flags & SLUICE_RULE_SHADOW))
		return XDP_DROP;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
