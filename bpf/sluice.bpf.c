// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Sluice XDP program: per-source rate limiting at layer 3/4.
 *
 * For each frame: parse (parse.h); a later fragment takes its datagram's
 * protocol and port from the fragment table; find the rules covering the
 * source address with one lookup (a multibit table for IPv4, an LPM trie for
 * IPv6; the controller compiles each prefix's candidate list, most specific
 * first), take the first rule whose protocol, ports and TCP flags match (or, when they
 * are unknown, the strictest rule the packet may belong to), then allow, deny,
 * or charge the source's bucket (sluice_algos.h) in a set table of our own
 * (sluice_settable.h): IPv4, IPv6 and sliding-log buckets alike.
 *
 * Every frame lands in exactly one verdict counter. Fail-open: whenever the
 * program cannot decide, the frame passes and a counter says why.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sluice_abi.h"
#include "sluice_algos.h"
#include "sluice_settable.h"
#include "parse.h"
#include "lib/selectors.h"
#ifdef SLUICE_BENCH_SOURCES
#include "bench_sources.h"
#endif

#define EEXIST 17

/* The rule sets (see struct sluice_active): the live one's number. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_active);
} SLUICE_MAP_ACTIVE SEC(".maps");

/* Both sets' rules, by sluice_rule_index(slot, set). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * SLUICE_DEFAULT_MAX_RULES);
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, struct sluice_rule);
} SLUICE_MAP_RULES SEC(".maps");

/* Controller-only view of each rule, indexed as the rules; the program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * SLUICE_DEFAULT_MAX_RULES);
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
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
	__uint(max_entries, 2 * SLUICE_DIR_TOP_SIZE);
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, __u32);
} SLUICE_MAP_DIR4_TOP SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 2 * SLUICE_DEFAULT_MAX_RULES); /* two sets of two blocks a rule */
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, struct sluice_dir_block);
} SLUICE_MAP_DIR4_BLOCKS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * (SLUICE_DEFAULT_MAX_RULES + 1)); /* two sets; index 0 unused */
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, struct sluice_match_list);
} SLUICE_MAP_LISTS SEC(".maps");

/* IPv6 rule lookup: both sets' prefixes, the set in the key's first byte. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 2 * SLUICE_DEFAULT_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sluice_lpm_v6);
	__type(value, struct sluice_match_list); /* the prefix's first list itself */
} SLUICE_MAP_MATCH_V6 SEC(".maps");

/* The source tables: arrays of 4-way sets (see sluice_abi.h), every bucket's
 * home. The controller maps them to read statistics and to purge a deleted
 * rule's buckets, and sizes them when it loads the program. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_set_v4);
} SLUICE_MAP_SOURCES_V4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_set_v6);
} SLUICE_MAP_SOURCES_V6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_LOG_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_log_set_v4);
} SLUICE_MAP_LOGS_V4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_LOG_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_log_set_v6);
} SLUICE_MAP_LOGS_V6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_config);
} SLUICE_MAP_CONFIG SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_PENDING_SLOTS);
	__type(key, __u32);
	__type(value, struct sluice_pending_drops);
} SLUICE_MAP_PENDING SEC(".maps");

/* What each CPU owes its GCRA-form buckets (struct sluice_owed), slotted as
 * the pending-drops slots are. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_PENDING_SLOTS);
	__type(key, __u32);
	__type(value, struct sluice_owed);
} SLUICE_MAP_OWED SEC(".maps");

/* The pending-drops slot of a packet's source (sluice_source_slot), which
 * holds the drop memo of the sources that hash to it too. */
static __always_inline __u32 source_slot(const struct packet_info *pkt)
{
	__u64 lo, hi;

	__builtin_memcpy(&lo, pkt->saddr, 8);
	__builtin_memcpy(&hi, pkt->saddr + 8, 8);
	return sluice_source_slot(lo, hi);
}

/* A new source bucket is built here before it is installed (see sluice_insert_v4). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_source_state);
} sluice_scratch SEC(".maps");

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

/* The first fragment's protocol and port, by datagram (see sluice_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_FRAG_ENTRIES);
	__type(key, struct sluice_frag_key);
	__type(value, struct sluice_frag_info);
} SLUICE_MAP_FRAGS SEC(".maps");

/* Each attached interface's MTU by ifindex: a longer frame is a super-packet. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
} SLUICE_MAP_IFACE_MTU SEC(".maps");

/* Throttle events (struct sluice_event), read by `sluice events` or the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SLUICE_EVENT_RING_BYTES);
} SLUICE_MAP_EVENTS SEC(".maps");

/* The buckets throttled now or within the last interval, each with a timer. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_MAX_THROTTLED);
	__type(key, struct sluice_throttle_key);
	__type(value, struct sluice_throttle);
} SLUICE_MAP_THROTTLED SEC(".maps");

/* `sluice attach IFACE --then PROG`: the program each interface's passed
 * packets go on to, by ifindex; an empty entry ends the chain. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, SLUICE_MAX_THEN_IFINDEX);
	__type(key, __u32);
	__type(value, __u32);
} SLUICE_MAP_THEN SEC(".maps");

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

static __always_inline __u64 frag_clock(void)
{
	return now_ns(NULL);
}

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
		SLUICE_READ_ONCE(*key);
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

/* The coarse clock's constants (struct sluice_tick_clock), set by the
 * controller at load; read-only, so the verifier keeps one branch below. */
const volatile struct sluice_tick_clock sluice_tick_clock = {};

/* The last scheduler tick's CLOCK_MONOTONIC time: jiffies, which the
 * verifier inlines as one load, on the tick's grid. */
static __always_inline __u64 coarse_ns(void)
{
	if (sluice_tick_clock.tick_ns)
		return (bpf_jiffies64() + sluice_tick_clock.jiffies_base) * sluice_tick_clock.tick_ns;
	return bpf_ktime_get_coarse_ns();
}

static __always_inline __u64 now_ns(const struct sluice_rule *rule)
{
	if (rule->flags & SLUICE_RULE_COARSE_CLOCK)
		return coarse_ns();
	return bpf_ktime_get_ns();
}

static __always_inline __u64 frag_clock(void)
{
	return coarse_ns();
}
#endif

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

/* The live-set word (struct sluice_active), with its count of switches. */
static __always_inline __u32 active_word(void)
{
	const struct sluice_active *a;
	__u32 zero = 0;

	a = bpf_map_lookup_elem(&SLUICE_MAP_ACTIVE, &zero);
	return a ? a->set : 0;
}

/* The live sets: read once per packet, kept whole; sluice_rule_index takes
 * the rule set from it, sluice_lookup_set the lookups'. */
static __always_inline __u32 active_sets(void)
{
	return active_word() & 3;
}

/* The first match list's index for an IPv4 source: at most three array
 * lookups; 0 if no rule covers it. */
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
 * Results of charging a bucket. BUCKET_FORCED: the program decided a pass,
 * but other CPUs kept winning the bucket (SLUICE_CAS_RETRIES lost
 * compare-and-swaps, or its lock held for SLUICE_LOCK_RETRIES reads), so the
 * packet passes uncharged. A lost compare-and-swap means another CPU's update
 * landed and the next attempt decides on it, so traffic under its limit is
 * never dropped for contention, and each forced pass is one packet beyond the
 * bound burst + rate x T. A drop never needs to write the bucket.
 */
enum bucket_result {
	BUCKET_PASS,
	BUCKET_DROP,
	BUCKET_FORCED,
	BUCKET_FAIL_TABLE,
};

/* Token bucket and GCRA share the GCRA form, one word; only a token bucket
 * with warm-up needs tokens, last refill and coldness. */
static __always_inline int gcra_form(const struct sluice_rule *rule)
{
	return rule->algo == SLUICE_ALGO_GCRA ||
	       (rule->algo == SLUICE_ALGO_TOKEN_BUCKET && !rule->bucket.warmup);
}

/* Ticks a charge of `cost` (packets, or bytes) takes from a bucket rule. */
static __always_inline __u64 cost_ticks(const struct sluice_rule *rule, __u64 cost)
{
	return sluice_charge_ticks(rule->bucket.inc_mult, rule->inc_shift, cost,
				   rule->unit == SLUICE_UNIT_BYTES ? SLUICE_MAX_COST : 1);
}

/* What a packet is charged: the wire packets and bytes it carries (a
 * super-packet carries several), and its cost in the rule's unit. */
struct charge {
	__u64 bytes;
	__u32 packets;
	__u32 pending; /* the source's pending-drops slot (source_slot) */
};

/* The cost of a charge in the rule's unit. */
static __always_inline __u64 charge_cost(const struct sluice_rule *rule, const struct charge *ch)
{
	return rule->unit == SLUICE_UNIT_BYTES ? ch->bytes : ch->packets;
}

/* One decision of a multi-word algorithm on a copy of its state. */
static __always_inline int decide_locked(union sluice_algo_state *s, const struct sluice_rule *rule,
					 __u64 now, __u64 cost)
{
	switch (rule->algo) {
	case SLUICE_ALGO_FIXED_WINDOW:
		return sluice_fixed_admit(&s->fixed.window, &s->fixed.count, now, rule->window.window_ns,
					  rule->window.limit, cost);
	case SLUICE_ALGO_SLIDING_WINDOW:
		return sluice_sliding_admit(&s->sliding.window, &s->sliding.cur, &s->sliding.prev, now,
					    rule->window.window_ns, rule->window.limit, cost);
	default:
		return sluice_tb_admit(&s->tb.tokens, &s->tb.last, &s->tb.cold, sluice_ns_to_ticks(now),
				       cost_ticks(rule, cost), rule->bucket.capacity, rule->bucket.warmup);
	}
}

/* A way a new bucket may take (sluice_choose_victim). */
struct victim {
	__u64 key;  /* what the way held */
	__u32 keep; /* its keep[], to tell whether it was active */
	__s32 rank; /* sluice_way_rank */
	int found;
	int way;    /* in the key's first set, or SLUICE_SET_WAYS + way in its second */
};

/* What a packet asks of a bucket: `want` is the key it looked up, `addr` its
 * address (IPv6), in sets `set_a` and `set_b`, found at `set_idx`, `way` of
 * table `table`; `cost` its units in the rule's unit; `packets` and `bytes`
 * what it carries (struct charge). A charge leaves in `full` the stamp from
 * which the bucket's state will equal a fresh bucket's (sluice_way_touch). A
 * lookup that missed leaves in `victim` the way a new bucket takes. */
struct charge_req {
	__u64 want;
	struct sluice_addr6 addr;
	__u64 now;
	__u64 cost;
	__u64 packets;
	__u64 bytes;
	__u32 set_a;
	__u32 set_b;
	__u32 set_idx;
	__u32 way;
	__u32 full;
	__u32 table; /* enum sluice_table */
	struct victim victim;
	struct sluice_throttle_key tkey; /* sluice_note_drop's key */
	__u8 tzero[sizeof(struct sluice_throttle)]; /* ...and a new entry's bytes */
	/* A GCRA-form drop (charge_gcra): the bucket's word, offset and
	 * generation it was decided on, for the drop memo (remember_drop). */
	__u64 drop_word;
	__u64 drop_off;
	__u32 drop_gen;
	__u32 dropped;
	__u32 pending; /* the source's pending-drops slot (source_slot): a key in a map value, not on the stack */
	__u32 count_gen; /* sluice_count_drop's arguments, kept here across its calls */
	__u32 count_pending;
	__u64 written; /* charge_gcra: the word a pass wrote (sluice_owed_wrote) */
};

/* This CPU's pending-drops slot of req's source. */
static __always_inline struct sluice_pending_drops *pending_slot(struct charge_req *req)
{
	return bpf_map_lookup_elem(&SLUICE_MAP_PENDING, &req->pending);
}

/*
 * Whether the way a charger found its bucket in (its key and, for IPv6, its
 * address) holds another bucket now: re-checked before every write, so a
 * charge lands only on the bucket of the key looked up.
 */
static __always_inline int owner_gone(const __u64 *key, const struct sluice_addr6 *addr,
				      const struct charge_req *req)
{
	if (SLUICE_READ_ONCE(*key) != req->want)
		return 1;
	return addr && (SLUICE_READ_ONCE(addr->hi) != req->addr.hi || SLUICE_READ_ONCE(addr->lo) != req->addr.lo);
}

/* Adds to a counter word if it still carries `tag`: the bucket it was read
 * for. `tries` (a constant) compare-and-swaps, then an add taken back if it
 * landed on a successor. */
static __always_inline void count_add(__u64 *c, __u64 tag, __u64 delta, const int tries)
{
	__u64 v = SLUICE_READ_ONCE(*c), old;
	int i;

	for (i = 0; i < tries; i++) {
		if ((v & ~SLUICE_CNT_VALUE_MASK) != tag)
			return; /* the bucket was evicted: its counts went with it */
		old = __sync_val_compare_and_swap(c, v, v + delta);
		if (old == v)
			return;
		v = old;
	}
	/* Still contended: add, and take it back if it landed on a successor. */
	old = __sync_fetch_and_add(c, delta);
	if ((old & ~SLUICE_CNT_VALUE_MASK) != tag)
		__sync_fetch_and_add(c, -delta);
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

/* Whether the account in owed slot `o` cannot go onto the word `w` (offset
 * `off`) as it stands: another write landed since the account was made on
 * `written`, and the clock `now_t` has passed that word's arrival time, so
 * the other write may have found the bucket full and forgotten what this
 * account charged before it. While the clock is behind it, no write can have
 * found the bucket full: every write since stacked, and so does the account. */
static __always_inline int owed_uncertain(const struct sluice_owed *o, __u64 w, __u64 off, __u64 now_t)
{
	return w != o->written && (__s64)(o->written - off - now_t) < 0;
}

/*
 * Settles what owed slot `o` holds against its bucket's word `w` (offset
 * `off`), read while the way holds the bucket (see "The bound" at struct
 * sluice_owed): the word to write, or `w` itself where nothing needs writing.
 * An account that can go onto the word as it stands (owed_uncertain) is
 * written as if at its own times, max(arrival time, since) + ticks. Where it
 * cannot, which came first is unknown, so only what is certain is written,
 * max(arrival time, since + ticks), and the rest stays as doubt (*doubt).
 */
static __always_inline __u64 owed_settled_word(const struct sluice_owed *o, __u64 w, __u64 off, __u64 now_t,
						__u64 *doubt)
{
	__u64 tat = w - off, c;

	if (!owed_uncertain(o, w, off, now_t)) {
		*doubt = 0;
		c = ((__s64)(tat - o->since) > 0 ? tat : o->since) + o->ticks;
	} else {
		*doubt = o->ticks;
		c = o->since + o->ticks;
		if ((__s64)(c - tat) <= 0)
			return w;
	}
	return c + off;
}

/* Whether doubt held in owed slot `o` (ticks from `since`) is spent: the
 * bucket's arrival time `tat` with it is behind the clock `now_t`, so a
 * bucket holding it would be full now, as GCRA forgets. */
static __always_inline int owed_doubt_spent(const struct sluice_owed *o, __u64 tat, __u64 now_t)
{
	return (__s64)(((__s64)(tat - o->since) > 0 ? tat : o->since) + o->ticks - now_t) < 0;
}

/*
 * Settles what owed slot `o` holds with the bucket it names, if its way still
 * holds that bucket (the key and generation), by compare-and-swap
 * (owed_settled_word), and adds its passes to the bucket's counters. Returns 1
 * when the slot is free for another bucket: it holds neither passes nor
 * doubt (spent at `now_t`, or the bucket was evicted, its charges and counts
 * gone with it); 0 when it still holds either: the slot keeps naming its
 * bucket and nothing owed is lost (other CPUs kept winning the word
 * SLUICE_CAS_RETRIES times, or the doubt is not yet spent). A global
 * function: called when a CPU's slot would move on to another bucket.
 */
__noinline int sluice_flush_owed(struct sluice_owed *o, __u64 now_t)
{
	struct sluice_source_state *st = NULL;
	struct sluice_set_tags *t = NULL;
	__u64 name, w, old, off, want, doubt;
	__u32 set;
	__u16 gen;
	int way, i;

	if (!o)
		return 0; /* the verifier: arguments of a global function may be NULL */
	if (!o->packets && !o->ticks)
		return 1;
	name = o->name;
	set = (__u32)name;
	way = SLUICE_WAY((int)(name >> 32));
	gen = (__u16)(name >> 48);
	if (((name >> 40) & 0xff) == SLUICE_TABLE_V6) {
		struct sluice_set_v6 *s6 = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &set);

		if (!s6)
			goto gone;
		barrier_var(s6); /* no pointer arithmetic before the check */
		t = &s6->tag;
		st = &s6->way[way];
	} else {
		struct sluice_set_v4 *s4 = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &set);

		if (!s4)
			goto gone;
		barrier_var(s4); /* no pointer arithmetic before the check */
		t = &s4->tag;
		st = &s4->way[way];
	}
	if (!t || !st)
		goto gone;
	w = SLUICE_READ_ONCE(st->word);
	for (i = 0; i < SLUICE_CAS_RETRIES; i++) {
		off = SLUICE_READ_ONCE(st->algo.gcra.off);
		if (SLUICE_READ_ONCE(t->gen[way]) != gen || SLUICE_READ_ONCE(t->key[way]) != o->want)
			goto gone; /* evicted: its charges and counts went with it */
		old = SLUICE_READ_ONCE(st->word);
		if (old != w) {
			w = old;
			continue;
		}
		if (o->packets) {
			want = owed_settled_word(o, w, off, now_t, &doubt);
			if (want != w) {
				old = __sync_val_compare_and_swap(&st->word, w, want);
				if (old != w) {
					w = old;
					continue;
				}
				w = want;
			}
			count_add(&st->cnt.passed_packets, sluice_gen_tag(gen), o->packets, SLUICE_CAS_RETRIES);
			count_add(&st->cnt.passed_bytes, sluice_gen_tag(gen), o->bytes, SLUICE_CAS_RETRIES);
			o->packets = 0;
			o->bytes = 0;
			o->ticks = doubt;
			o->written = w;
		}
		if (o->ticks && owed_doubt_spent(o, w - off, now_t))
			o->ticks = 0;
		return !o->ticks;
	}
	return 0; /* contended: the slot keeps its account, to pay another time */
gone:
	o->packets = 0;
	o->bytes = 0;
	o->ticks = 0;
	return 1;
}

/* Writes a throttle event; counts it lost if the ring buffer is full. */
static __always_inline void emit_event(const struct sluice_throttle_key *key, __u32 kind, __u64 now,
				       __u64 since)
{
	struct sluice_event *e = bpf_ringbuf_reserve(&SLUICE_MAP_EVENTS, sizeof(*e), 0);

	if (!e) {
		count_global(SLUICE_CNT_INFO_EVENTS_LOST, 0);
		return;
	}
	e->ns = now;
	e->since_ns = since;
	e->kind = kind;
	e->pad = 0;
	__builtin_memcpy(&e->key, key, sizeof(e->key));
	bpf_ringbuf_submit(e, 0);
}

/*
 * A throttled bucket's timer: RELEASED once no drop was noted for an
 * interval; a bucket throttled again within an interval of its release gets
 * its THROTTLED when that interval ends; a bucket quiet for an interval
 * after its release is forgotten. Runs at most once per interval per bucket.
 */
static int throttle_timer(void *map, struct sluice_throttle_key *key, struct sluice_throttle *t)
{
	__u64 now = bpf_ktime_get_ns(), next = SLUICE_EVENT_INTERVAL_NS;
	__u64 quiet = now - SLUICE_READ_ONCE(t->last_drop_ns), since_event = now - t->last_event_ns;

	if (t->reported) {
		if ((__s64)quiet >= (__s64)SLUICE_EVENT_INTERVAL_NS) {
			emit_event(key, SLUICE_EVENT_RELEASED, now, t->since_ns);
			t->reported = 0;
			t->last_event_ns = now;
		} else if ((__s64)quiet > 0) {
			next = SLUICE_EVENT_INTERVAL_NS - quiet;
		}
	} else if ((__s64)quiet < (__s64)SLUICE_EVENT_INTERVAL_NS) {
		/* Dropped again since its release. */
		if ((__s64)since_event >= (__s64)SLUICE_EVENT_INTERVAL_NS) {
			emit_event(key, SLUICE_EVENT_THROTTLED, now, now);
			t->reported = 1;
			t->since_ns = now;
			t->last_event_ns = now;
		} else {
			next = SLUICE_EVENT_INTERVAL_NS - since_event;
		}
	} else if ((__s64)since_event >= (__s64)SLUICE_EVENT_INTERVAL_NS) {
		bpf_map_delete_elem(map, key); /* cancels this timer: nothing runs after */
		return 0;
	}
	bpf_timer_start(&t->timer, next, 0);
	return 0;
}

/*
 * Notes a drop of req's bucket for throttle events: the first starts an
 * episode (THROTTLED now, a timer for the release), later ones move its
 * last drop. Called at most once per SLUICE_NOTE_EVERY_NS per CPU and bucket
 * (count_source), so a source that stays throttled costs nothing more. A
 * global function: verified once; the key is built in the request, off the
 * stack.
 */
__noinline int sluice_note_drop(struct charge_req *req)
{
	struct sluice_throttle_key *key;
	struct sluice_throttle *t;
	__u64 now;
	__u32 lo;
	int err;

	if (!req)
		return 0; /* the verifier: arguments of a global function may be NULL */
	key = &req->tkey;
	key->bucket_id = (__u32)(req->want >> 32);
	key->family = req->table;
	if (req->table == SLUICE_TABLE_V6) {
		__builtin_memcpy(key->addr, &req->addr, 16);
	} else {
		lo = (__u32)req->want;
		__builtin_memset(key->addr, 0, sizeof(key->addr));
		__builtin_memcpy(key->addr, &lo, 4);
	}
	/* The timer's clock, whatever clock the rule charges with. */
	now = bpf_ktime_get_ns();
	t = bpf_map_lookup_elem(&SLUICE_MAP_THROTTLED, key);
	if (t) {
		SLUICE_WRITE_ONCE(t->last_drop_ns, now);
		return 0;
	}
	__builtin_memset(req->tzero, 0, sizeof(req->tzero));
	err = bpf_map_update_elem(&SLUICE_MAP_THROTTLED, key, req->tzero, BPF_NOEXIST);
	if (err == -EEXIST)
		return 0; /* another CPU began this episode a moment ago */
	t = err ? NULL : bpf_map_lookup_elem(&SLUICE_MAP_THROTTLED, key);
	if (!t) {
		count_global(SLUICE_CNT_INFO_EVENTS_LOST, 0);
		return 0;
	}
	t->last_drop_ns = now;
	t->last_event_ns = now;
	t->since_ns = now;
	t->reported = 1;
	if (bpf_timer_init(&t->timer, &SLUICE_MAP_THROTTLED, 1 /* CLOCK_MONOTONIC */) ||
	    bpf_timer_set_callback(&t->timer, throttle_timer) ||
	    bpf_timer_start(&t->timer, SLUICE_EVENT_INTERVAL_NS, 0)) {
		/* No timer, no release: forget the episode rather than report half of it. */
		bpf_map_delete_elem(&SLUICE_MAP_THROTTLED, key);
		count_global(SLUICE_CNT_INFO_EVENTS_LOST, 0);
		return 0;
	}
	t->armed = 1;
	emit_event(key, SLUICE_EVENT_THROTTLED, now, now);
	return 1;
}

/*
 * The buckets this CPU noted a drop of lately, beyond the one its pending
 * slot names: a direct-mapped table, so that a flood of many sources over
 * their limits, interleaved, notes each bucket once per SLUICE_NOTE_EVERY_NS
 * per CPU as one source's flood does, instead of once per packet. The
 * program's own: not pinned, and a fresh program starts it empty.
 */
#define NOTED_SLOTS_LOG2 10
struct noted {
	__u64 want;
	__u64 noted_ns;
	__u32 table;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << NOTED_SLOTS_LOG2);
	__type(key, __u32);
	__type(value, struct noted);
} sluice_noted SEC(".maps");

/* Notes a drop of req's bucket (sluice_note_drop) unless this CPU did within
 * SLUICE_NOTE_EVERY_NS; the pending slot `p` names the bucket from now on. */
static __always_inline void note_if_due(struct charge_req *req, struct sluice_pending_drops *p)
{
	__u32 i = (__u32)(((req->want ^ req->table) * 0x9e3779b97f4a7c15ULL) >> (64 - NOTED_SLOTS_LOG2));
	struct noted *n = bpf_map_lookup_elem(&sluice_noted, &i);
	int due = !n || n->want != req->want || n->table != req->table ||
		  req->now - n->noted_ns >= SLUICE_NOTE_EVERY_NS;

	if (due && n) {
		n->want = req->want;
		n->table = req->table;
		n->noted_ns = req->now;
	}
	p->note_want = req->want;
	p->note_table = req->table;
	p->noted_ns = n ? n->noted_ns : req->now;
	if (due)
		sluice_note_drop(req);
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

/* Owed slot `o`, which names the bucket of counters `c` (generation `gen`),
 * was settled with this CPU's write of `written` (or found the word at
 * `written`): its passes go to the counters, and the slot owes nothing. The
 * caller says what its ticks hold after (nothing, or doubt). */
static __always_inline void settle_owed(struct sluice_owed *o, struct sluice_source_counters *c, __u16 gen,
					__u64 written)
{
	if (o->packets) {
		count_add(&c->passed_packets, sluice_gen_tag(gen), o->packets, SLUICE_CAS_RETRIES);
		count_add(&c->passed_bytes, sluice_gen_tag(gen), o->bytes, SLUICE_CAS_RETRIES);
	}
	o->written = written;
	o->packets = 0;
	o->bytes = 0;
}

/* Whether a pass may go on this CPU's account (struct sluice_owed) rather
 * than be written: another CPU wrote the bucket's word `w` since this one
 * did (or did within SLUICE_OWED_SHARED_NS), the slot holds no doubt, and
 * after the pass the account stays within SLUICE_OWED_MAX packets and an
 * eighth of the capacity (`owed` with the pass), and the bucket (with the
 * account) at least half full: `next` is its arrival time after the pass. */
static __always_inline int may_owe(const struct sluice_owed *o, __u64 w, __u64 owed, __u64 next, __u64 now_t,
				   const struct sluice_rule *rule, const struct charge_req *req)
{
	__u64 cap = rule->bucket.capacity;

	return (o->written != w || (__s64)(o->shared_until - req->now) > 0) && (o->packets || !o->ticks) &&
	       o->packets + req->packets <= SLUICE_OWED_MAX && owed <= cap / 8 && next - now_t <= cap / 2;
}

/*
 * charge_gcra for a bucket this CPU's owed slot names, shared with another
 * CPU, or with passes or doubt in the slot (struct sluice_owed; see "The
 * bound" there). An account made while another write landed is settled
 * first (owed_settled_word), leaving doubt; then the decision includes what
 * this CPU owes, exactly; a pass goes on account where may_owe allows, or is
 * written with the account; a drop first pays the account. Doubt is left out
 * of decisions (it never drops a packet) and forgotten once spent
 * (owed_doubt_spent) at a write. The caller read the way's generation
 * (req->count_gen): -1 if the way holds another bucket now. Counts the packet
 * and ranks the way, as charge_gcra does. A global function: only buckets
 * charged from several CPUs at once come here, and the fast path keeps its
 * registers and stack.
 */
__noinline int sluice_charge_owed(struct sluice_source_state *st, struct sluice_set_tags *t,
				  const struct sluice_rule *rule, struct charge_req *req)
{
	__u64 w, off, next, old, eff, owed, now_t, tat, doubt;
	struct sluice_owed *o;
	int i, res = BUCKET_FORCED;

	if (!st || !t || !rule || !req)
		return -1; /* the verifier: arguments of a global function may be NULL */
	o = bpf_map_lookup_elem(&SLUICE_MAP_OWED, &req->pending);
	if (!o)
		return -1;
	now_t = sluice_ns_to_ticks(req->now);
	w = SLUICE_READ_ONCE(st->word);
	for (i = 0; i < SLUICE_CAS_RETRIES; i++) {
		off = SLUICE_READ_ONCE(st->algo.gcra.off);
		if (SLUICE_READ_ONCE(t->gen[SLUICE_WAY(req->way)]) != (__u16)req->count_gen ||
		    SLUICE_READ_ONCE(t->key[SLUICE_WAY(req->way)]) != req->want)
			return -1;
		old = SLUICE_READ_ONCE(st->word);
		if (old != w) {
			w = old;
			continue;
		}
		tat = w - off;
		if (o->packets && owed_uncertain(o, w, off, now_t)) {
			/* Another write landed on the account: settle what is certain. */
			eff = owed_settled_word(o, w, off, now_t, &doubt);
			if (eff != w) {
				old = __sync_val_compare_and_swap(&st->word, w, eff);
				if (old != w) {
					w = old;
					continue;
				}
				w = eff;
			}
			settle_owed(o, &st->cnt, (__u16)req->count_gen, w);
			o->ticks = doubt;
			tat = w - off;
		}
		owed = o->packets ? o->ticks : 0;
		eff = tat;
		if (owed)
			eff = ((__s64)(tat - o->since) > 0 ? tat : o->since) + owed;
		/* sluice_gcra_admit, spelled out: its result's address would take stack. */
		next = ((__s64)(eff - now_t) > 0 ? eff : now_t) + cost_ticks(rule, req->cost);
		if (next - now_t > rule->bucket.capacity) {
			if (owed) {
				/* Pay what this CPU owes, then decide again. */
				old = __sync_val_compare_and_swap(&st->word, w, eff + off);
				if (old == w) {
					old = eff + off;
					settle_owed(o, &st->cnt, (__u16)req->count_gen, old);
					o->ticks = 0;
				}
				w = old;
				continue;
			}
			req->full = sluice_tick_stamp(w - off);
			req->drop_word = w;
			req->drop_off = off;
			req->drop_gen = (__u16)req->count_gen;
			req->dropped = 1;
			res = BUCKET_DROP;
			break;
		}
		req->full = sluice_tick_stamp(next);
		/* The account after the pass: from `since`, or, where the bucket
		 * with it was full, from now (GCRA forgets the charges, not the
		 * passes). */
		if (!owed || (__s64)(eff - now_t) < 0) {
			owed = next - ((__s64)(tat - now_t) > 0 ? tat : now_t);
		} else {
			owed = next - ((__s64)(tat - o->since) > 0 ? tat : o->since);
		}
		if (may_owe(o, w, owed, next, now_t, rule, req)) {
			/* On account: nothing shared is written. */
			if (!o->packets || (__s64)(eff - now_t) < 0) {
				o->since = (__s64)(tat - now_t) > 0 ? tat : now_t;
				if (!o->packets)
					o->written = w; /* the account's base */
			} else if ((__s64)(tat - o->since) > 0) {
				o->since = tat;
			}
			o->ticks = owed;
			o->packets += req->packets;
			o->bytes += req->bytes;
			/* Counted on account. */
			sluice_way_touch(t, req->way, req->want, req->now, req->full);
			return BUCKET_PASS;
		}
		old = __sync_val_compare_and_swap(&st->word, w, next + off);
		if (old == w) {
			doubt = o->packets ? 0 : o->ticks;
			settle_owed(o, &st->cnt, (__u16)req->count_gen, next + off);
			o->ticks = doubt;
			if (doubt && owed_doubt_spent(o, tat, now_t))
				o->ticks = 0;
			res = BUCKET_PASS;
			break;
		}
		w = old;
	}
	count_source(&st->cnt, (__u16)req->count_gen, res, req, 1, SLUICE_CAS_RETRIES);
	sluice_way_touch(t, req->way, req->want, req->now, req->full);
	return res;
}

/* Whether this CPU's owed slot names the bucket of req (generation
 * req->count_gen), whose word reads `w`, and the bucket is shared (another
 * CPU wrote the word since this one did, now or within SLUICE_OWED_SHARED_NS),
 * or the slot holds passes or doubt: then sluice_charge_owed charges it. */
static __always_inline int owed_due(struct charge_req *req, __u64 w)
{
	struct sluice_owed *o = bpf_map_lookup_elem(&SLUICE_MAP_OWED, &req->pending);

	if (!o || o->want != req->want ||
	    o->name != pending_name(req->set_idx, req->way, req->table, (__u16)req->count_gen))
		return 0;
	if (o->written != w)
		o->shared_until = req->now + SLUICE_OWED_SHARED_NS;
	return o->packets || o->ticks || (__s64)(o->shared_until - req->now) > 0;
}

/* The walk's charge of req's bucket (generation req->count_gen): where this
 * CPU's owed slot names it and owes it passes, they are paid first
 * (sluice_flush_owed), so that the walk decides with them; 1 if so. A global
 * function: the walk's frame has no room for it inline. */
__noinline int sluice_owed_pay(struct charge_req *req)
{
	struct sluice_owed *o;

	if (!req)
		return 0; /* the verifier: arguments of a global function may be NULL */
	o = bpf_map_lookup_elem(&SLUICE_MAP_OWED, &req->pending);
	if (!o || !o->packets || o->want != req->want ||
	    o->name != pending_name(req->set_idx, req->way, req->table, (__u16)req->count_gen))
		return 0;
	sluice_flush_owed(o, sluice_ns_to_ticks(req->now));
	return 1;
}

/* This CPU wrote `written` to the bucket of req (generation req->count_gen),
 * which its owed slot does not name: it names that bucket now, once what it
 * held for the one it named is settled (sluice_flush_owed); while that cannot
 * be, the slot stays, and this bucket is written at each pass. A global
 * function: the fast path's frame stays as it was. */
__noinline int sluice_owed_wrote(struct charge_req *req, __u64 written)
{
	struct sluice_owed *o;
	__u64 name;

	if (!req)
		return 0; /* the verifier: arguments of a global function may be NULL */
	o = bpf_map_lookup_elem(&SLUICE_MAP_OWED, &req->pending);
	if (!o)
		return 0;
	name = pending_name(req->set_idx, req->way, req->table, (__u16)req->count_gen);
	if (o->want != req->want || o->name != name) {
		if (!sluice_flush_owed(o, sluice_ns_to_ticks(req->now)))
			return 0;
		o->name = name;
		o->want = req->want;
		o->shared_until = 0;
	}
	o->written = written;
	return 1;
}

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
 * sluice_owed); the walk pays the slot's account first (sluice_owed_pay), so
 * that every path decides with this CPU's own account, and it never owes.
 * IPv6 charges the word alone. The drop memo repeats a drop only while the
 * word it was decided on stands, and an account only makes a drop surer.
 */
static __always_inline int charge_gcra(struct sluice_source_state *st, struct sluice_set_tags *t, int way,
				       const struct sluice_addr6 *addr, const struct sluice_rule *rule,
				       struct charge_req *req, const int tries, const int owes)
{
	__u64 inc = cost_ticks(rule, req->cost), now_t = sluice_ns_to_ticks(req->now);
	__u64 w = SLUICE_READ_ONCE(st->word), off, next, old, tat = now_t;
	const __u64 *key = &t->key[SLUICE_WAY(way)];
	const __u16 *gen = &t->gen[SLUICE_WAY(way)];
	enum bucket_result res = BUCKET_FORCED;
	__u16 g = 0;
	int i;

	if (owes) {
		req->count_gen = SLUICE_READ_ONCE(*gen);
		if (tries < SLUICE_CAS_RETRIES) {
			if (owed_due(req, w))
				return sluice_charge_owed(st, t, rule, req);
		} else if (sluice_owed_pay(req)) {
			/* The walk: this CPU's account was paid first, so that
			 * the decision includes it. */
			w = SLUICE_READ_ONCE(st->word);
		}
	}
	for (i = 0; i < tries; i++) {
		off = SLUICE_READ_ONCE(st->algo.gcra.off);
		g = SLUICE_READ_ONCE(*gen);
		if (owner_gone(key, addr, req))
			return -1;
		old = SLUICE_READ_ONCE(st->word);
		if (old != w) {
			w = old;
			continue;
		}
		if (!sluice_gcra_admit(w - off, now_t, inc, rule->bucket.capacity, &next)) {
			res = BUCKET_DROP;
			tat = w - off;
			req->drop_word = w;
			req->drop_off = off;
			req->drop_gen = g;
			req->dropped = 1;
			break;
		}
		old = __sync_val_compare_and_swap(&st->word, w, next + off);
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

/* The debt of a window holding `count` of its `limit` units, as the time its
 * rate would take to earn them back (window / limit per unit), from now; but
 * never past `end`, when the state equals a fresh one whatever it holds. */
static __always_inline __u32 window_full(const struct sluice_rule *rule, __u64 now, __u64 count, __u64 end)
{
	__u64 per = rule->window.limit ? rule->window.window_ns / rule->window.limit : 0;
	__u64 debt = now + per * count;

	return sluice_stamp(debt < end ? debt : end);
}

/* When a multi-word algorithm's state `s` will equal a fresh bucket's. */
static __always_inline __u32 locked_full(const union sluice_algo_state *s, const struct sluice_rule *rule,
					 __u64 now)
{
	__u64 w = rule->window.window_ns;

	switch (rule->algo) {
	case SLUICE_ALGO_FIXED_WINDOW:
		return window_full(rule, now, s->fixed.count, (s->fixed.window + 1) * w);
	case SLUICE_ALGO_SLIDING_WINDOW:
		return window_full(rule, now, s->sliding.cur + s->sliding.prev, (s->sliding.window + 2) * w);
	default: /* a warm-up token bucket: full once its tokens are back */
		return sluice_tick_stamp(s->tb.last + (rule->bucket.capacity - s->tb.tokens));
	}
}

/*
 * The multi-word algorithms: the word is a sequence lock, odd while held. A
 * decision is made on a copy of the state read between two equal even values
 * of the word, so a drop takes nothing. A pass takes the lock by
 * compare-and-swap from that very value (the state is still the copy's),
 * re-checks the key under it (an evicting CPU waits for the lock before it
 * writes the way), writes the copy back and releases. Each attempt is one
 * call of locked_attempt by bpf_loop (the verifier checks the callback once;
 * an open-coded loop around the algorithms' arithmetic exceeded its limit):
 * SLUICE_LOCK_RETRIES attempts, each a read of a held lock or a lost race.
 */
struct locked_ctx {
	struct sluice_source_state *st;
	const struct sluice_set_tags *tags; /* the way's key and generation: way req->way */
	const struct sluice_addr6 *addr;
	const struct sluice_rule *rule;
	struct charge_req *req;
	__u16 gen_seen;
	int res; /* BUCKET_FORCED until decided; -1: the key left the way */
};

static long locked_attempt(__u32 index, void *data)
{
	struct locked_ctx *c = data;
	struct sluice_source_state *st = c->st;
	const struct sluice_set_tags *t = c->tags;
	union sluice_algo_state copy;
	int w;
	__u64 s;

	if (!st || !t || !c->rule || !c->req)
		return 1; /* the verifier: pointers read back from the context may be NULL */
	w = SLUICE_WAY(c->req->way);
	s = SLUICE_READ_ONCE(st->word);
	if (s & 1)
		return 0; /* held: read again */
	c->gen_seen = SLUICE_READ_ONCE(t->gen[w]);
	if (owner_gone(&t->key[w], c->addr, c->req)) {
		c->res = -1;
		return 1;
	}
	copy.sliding.window = SLUICE_READ_ONCE(st->algo.sliding.window);
	copy.sliding.cur = SLUICE_READ_ONCE(st->algo.sliding.cur);
	copy.sliding.prev = SLUICE_READ_ONCE(st->algo.sliding.prev);
	if (SLUICE_READ_ONCE(st->word) != s)
		return 0;
	if (!decide_locked(&copy, c->rule, c->req->now, c->req->cost)) {
		c->res = BUCKET_DROP;
		return 1;
	}
	if (__sync_val_compare_and_swap(&st->word, s, s + 1) != s)
		return 0;
	if (owner_gone(&t->key[w], c->addr, c->req)) {
		__sync_lock_test_and_set(&st->word, s + 2);
		c->res = -1;
		return 1;
	}
	__builtin_memcpy(&st->algo, &copy, sizeof(copy));
	/* An exchange, not a store: a full barrier, so the state is visible
	 * before the lock is seen free. */
	__sync_lock_test_and_set(&st->word, s + 2);
	c->res = BUCKET_PASS;
	return 1;
}

/* A multi-word algorithm's charge of way req->way of tags `t`. The stamp at
 * which the bucket is full again is read after the decision, unlocked: it
 * ranks the way for eviction, and another CPU's charge a moment later would
 * move it as much. */
static __always_inline int charge_locked(struct sluice_source_state *st, const struct sluice_set_tags *t,
					 const struct sluice_addr6 *addr, const struct sluice_rule *rule,
					 struct charge_req *req)
{
	struct locked_ctx c = { .st = st, .tags = t, .addr = addr, .rule = rule, .req = req,
				.res = BUCKET_FORCED };
	int w = SLUICE_WAY(req->way);

	/* The generation a forced pass counts with, if the lock is never seen free. */
	c.gen_seen = SLUICE_READ_ONCE(t->gen[w]);
	if (owner_gone(&t->key[w], addr, req))
		return -1;
	bpf_loop(SLUICE_LOCK_RETRIES, locked_attempt, &c, 0);
	if (c.res < 0)
		return -1;
	if (c.res != BUCKET_FORCED)
		req->full = locked_full(&st->algo, rule, req->now);
	count_source(&st->cnt, c.gen_seen, c.res, req, 1, SLUICE_CAS_RETRIES);
	return c.res;
}

/*
 * Charges a multi-word algorithm's bucket found in way req->way of the set
 * whose tags are `t` (and, for IPv6, at `addr`): an enum bucket_result, or -1
 * if the way no longer holds req's key. A global function, so the verifier
 * checks its bounded loops once, not once per path of every caller (inlined,
 * the program exceeded its complexity limit); called by walk_step itself,
 * as its lock's bpf_loop callback is one more frame in a chain of calls that
 * has 512 bytes of stack. The GCRA form is charged inline (charge_gcra).
 */
__noinline int sluice_charge_locked(struct sluice_source_state *st, const struct sluice_set_tags *t,
				    const struct sluice_addr6 *addr, const struct sluice_rule *rule,
				    struct charge_req *req)
{
	if (!st || !t || !rule || !req)
		return BUCKET_FAIL_TABLE; /* the verifier: arguments of a global function may be NULL */
	return charge_locked(st, t, addr, rule, req);
}

/*
 * A new bucket, already holding the decision on its first packet: for the
 * GCRA form, init->word is how far its arrival time is ahead of now (it
 * starts at now); for the others, init->algo is the state. Counters untagged.
 */
static __always_inline enum bucket_result init_state(struct sluice_source_state *init,
						      const struct sluice_rule *rule, __u64 now,
						      __u64 cost, __u64 packets, __u64 l3_len)
{
	enum bucket_result res;
	__u64 now_t = sluice_ns_to_ticks(now), next;

	if (gcra_form(rule)) {
		res = sluice_gcra_admit(now_t, now_t, cost_ticks(rule, cost), rule->bucket.capacity, &next)
			      ? BUCKET_PASS : BUCKET_DROP;
		init->word = res == BUCKET_PASS ? next - now_t : 0;
	} else {
		if (rule->algo == SLUICE_ALGO_TOKEN_BUCKET)
			sluice_tb_init(&init->algo.tb.tokens, &init->algo.tb.last, &init->algo.tb.cold,
				       now_t, rule->bucket.capacity, rule->bucket.warmup);
		res = decide_locked(&init->algo, rule, now, cost) ? BUCKET_PASS : BUCKET_DROP;
	}
	if (res == BUCKET_PASS) {
		init->cnt.passed_packets = packets;
		init->cnt.passed_bytes = l3_len;
	} else {
		init->cnt.dropped_packets = packets;
		init->cnt.dropped_bytes = l3_len;
	}
	return res;
}

/* A packet's request, in a per-CPU slot rather than on the stack: the
 * program's frames must fit the verifier's 512 bytes across its calls. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct charge_req);
} sluice_req SEC(".maps");

static __always_inline struct charge_req *new_req(const struct sluice_rule *rule, __u64 now,
						  const struct charge *ch)
{
	__u32 zero = 0;
	struct charge_req *req = bpf_map_lookup_elem(&sluice_req, &zero);

	if (!req)
		return NULL;
	req->want = 0;
	req->now = now;
	req->cost = charge_cost(rule, ch);
	req->packets = ch->packets;
	req->bytes = ch->bytes;
	req->set_idx = 0;
	req->way = 0;
	req->table = SLUICE_TABLE_V4;
	req->dropped = 0;
	req->pending = ch->pending;
	return req;
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
		__u64 k = SLUICE_READ_ONCE(t->key[w]);

		if (k == req->want && (!addrs || (SLUICE_READ_ONCE(addrs[w].hi) == req->addr.hi &&
						  SLUICE_READ_ONCE(addrs[w].lo) == req->addr.lo)))
			return w;
		if (k == SLUICE_KEY_BUSY)
			*busy = w + 1;
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
		if (SLUICE_READ_ONCE(t->key[w]) != SLUICE_KEY_BUSY)
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
		__u64 k = SLUICE_READ_ONCE(t->key[w]);
		__s32 rank;

		if (k == SLUICE_KEY_BUSY || (v->found && v->key == SLUICE_KEY_EMPTY))
			continue;
		rank = sluice_way_rank(t, w, stamp);
		if (k == SLUICE_KEY_EMPTY || !v->found || rank < v->rank) {
			v->found = 1;
			v->key = k;
			v->rank = rank;
			v->keep = SLUICE_READ_ONCE(t->keep[w]);
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

	sluice_way_install(t, st, w, frozen, init, gcra_form(rule), req->now, req->want);
	return res;
}

/*
 * Creates the bucket of req's key in the way a lookup chose (req->victim of
 * sets req->set_a and req->set_b), with its first packet's decision; or
 * LOOKUP_RETRY if another CPU took the way first, or a charger of the old
 * bucket held its lock too long. The protocol (claim, freeze, write,
 * publish) is include/sluice_settable.h. Two CPUs creating the same new
 * source at the same instant may each make one; the copy found second is
 * never charged again and goes first (it stays on probation). Global
 * functions, one per table, called by walk_step itself: the verifier allows
 * 512 bytes of stack across a chain of calls, and the new bucket's state is
 * one more (sluice_init_source).
 */
__noinline int sluice_insert_v4(const struct sluice_rule *rule, struct charge_req *req)
{
	struct sluice_source_state *init;
	struct sluice_set_v4 *set;
	__u32 zero = 0, idx;
	__u64 frozen = 0;
	int w, res;

	if (!rule || !req)
		return LOOKUP_RETRY; /* the verifier: arguments of a global function may be NULL */
	init = bpf_map_lookup_elem(&sluice_scratch, &zero);
	idx = req->victim.way & SLUICE_SET_WAYS ? req->set_b : req->set_a;
	set = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &idx);
	if (!init || !set)
		return LOOKUP_RETRY;
	w = SLUICE_WAY(req->victim.way);
	if (!sluice_way_claim(&set->tag, w, req->victim.key))
		return LOOKUP_RETRY;
	if (!sluice_freeze_claimed(&set->tag, w, &set->way[w].word, req->victim.key, &frozen))
		return LOOKUP_RETRY;
	res = install_source(&set->tag, &set->way[w], w, frozen, init, rule, req);
	count_insert(&req->victim, sluice_stamp(req->now), req->table);
	return res;
}

/* The same for IPv6: the address goes into the set's address line first. */
__noinline int sluice_insert_v6(const struct sluice_rule *rule, struct charge_req *req)
{
	struct sluice_source_state *init;
	struct sluice_set_v6 *set;
	__u32 zero = 0, idx;
	__u64 frozen = 0;
	int w, res;

	if (!rule || !req)
		return LOOKUP_RETRY; /* the verifier: arguments of a global function may be NULL */
	init = bpf_map_lookup_elem(&sluice_scratch, &zero);
	idx = req->victim.way & SLUICE_SET_WAYS ? req->set_b : req->set_a;
	set = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &idx);
	if (!init || !set)
		return LOOKUP_RETRY;
	w = SLUICE_WAY(req->victim.way);
	if (!sluice_way_claim(&set->tag, w, req->victim.key))
		return LOOKUP_RETRY;
	if (!sluice_freeze_claimed(&set->tag, w, &set->way[w].word, req->victim.key, &frozen))
		return LOOKUP_RETRY;
	set->addr[w] = req->addr;
	res = install_source(&set->tag, &set->way[w], w, frozen, init, rule, req);
	count_insert(&req->victim, sluice_stamp(req->now), req->table);
	return res;
}

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
	if (tries < SLUICE_CAS_RETRIES || gcra_form(rule))
		return charge_gcra(&set->way[w], &set->tag, w, NULL, rule, req, tries, 1);
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
	const struct sluice_config *cfg;
	struct sluice_set_v6 *a, *b, *set;
	int w, res, busy_a = 0, busy_b = 0;
	__u32 zero = 0;
	__u64 h;

	if (!rule || !req)
		return BUCKET_FAIL_TABLE; /* the verifier: arguments of a global function may be NULL */
	cfg = bpf_map_lookup_elem(&SLUICE_MAP_CONFIG, &zero);
	if (!cfg || !cfg->src6_sets)
		return BUCKET_FAIL_TABLE;
	h = sluice_src6_hash(rule->id, req->addr.hi, req->addr.lo, cfg->hash_seed);
	req->want = sluice_src6_key(rule->id, h);
	req->table = SLUICE_TABLE_V6;
	sluice_hash_sets(h, cfg->src6_sets, &req->set_a, &req->set_b);
	a = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &req->set_a);
	b = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &req->set_b);
	if (!a || !b)
		return BUCKET_FAIL_TABLE;

	set = a;
	req->set_idx = req->set_a;
	w = scan_set(&a->tag, a->addr, req, &busy_a);
	if (w < 0) {
		set = b;
		req->set_idx = req->set_b;
		w = scan_set(&b->tag, b->addr, req, &busy_b);
	}
	if (w < 0)
		return lookup_missed(&a->tag, &b->tag, busy_a, busy_b, req);
	w = SLUICE_WAY(w);
	req->way = w;
	if (!gcra_form(rule))
		return LOOKUP_LOCKED;
	res = charge_gcra(&set->way[w], &set->tag, w, &set->addr[w], rule, req, SLUICE_CAS_RETRIES, 0);
	return res < 0 ? LOOKUP_RETRY : res; /* -1: evicted under us */
}

/* Whether the sliding log admits a packet now, read without writing: the
 * decision of sluice_log_admit on a snapshot taken under the sequence lock. */
static __always_inline int log_would_admit(struct sluice_log_state *st, __u32 head, __u64 now,
					   const struct sluice_rule *rule)
{
	__u32 limit = (__u32)rule->window.limit;
	__u32 h = head < limit ? head : 0;
	__u64 oldest = SLUICE_READ_ONCE(st->ring[h & (SLUICE_MAX_LOG - 1)]);

	return !oldest || (__s64)(now - oldest) >= (__s64)rule->window.window_ns;
}

/* The ring index of a log's newest pass, given the index of its oldest. */
static __always_inline __u32 log_newest(__u32 head, const struct sluice_rule *rule)
{
	__u32 limit = (__u32)rule->window.limit;
	__u32 h = head < limit ? head : 0;

	return ((h ? h : limit) - 1) & (SLUICE_MAX_LOG - 1);
}

/* When a log will equal a fresh one: its passes inside the window, each worth
 * window / limit of the rate, from now; but no later than its newest pass's
 * window end, when it holds no pass inside its window. A global function:
 * the verifier walks its loop once, not once for each way a charge ends. */
__noinline __u32 sluice_log_full(const struct sluice_log_state *st, const struct sluice_rule *rule, __u64 now)
{
	__u32 limit, i;
	__u64 w, n = 0, newest = 0;

	if (!st || !rule)
		return 0; /* the verifier: arguments of a global function may be NULL */
	limit = (__u32)rule->window.limit;
	w = rule->window.window_ns;

	for (i = 0; i < SLUICE_MAX_LOG; i++) {
		__u64 t;

		if (i >= limit)
			break;
		t = SLUICE_READ_ONCE(st->ring[i]);
		if (t && (__s64)(now - t) < (__s64)w)
			n++;
		if (t > newest)
			newest = t;
	}
	return window_full(rule, now, n, newest + w);
}

/*
 * Decides a sliding-log packet as the other multi-word algorithms are: on a
 * snapshot between two equal even values of its sequence lock (the word), the
 * lock taken only to write a pass, the key (and address) of way req->way of
 * tags `t` re-checked in the snapshot and under the lock. Each attempt is one
 * call of log_attempt by bpf_loop (as locked_attempt): SLUICE_LOCK_RETRIES
 * attempts, each a read of a held lock or a lost race.
 */
#define LOG_DROP_LOCKED 4 /* log_ctx.res: a drop decided under the lock (a super-packet) */

struct log_ctx {
	struct sluice_log_state *st;
	const struct sluice_set_tags *tags;
	const struct sluice_addr6 *addr;
	const struct sluice_rule *rule;
	struct charge_req *req;
	__u16 gen_seen;
	int res; /* BUCKET_FORCED until decided; LOG_DROP_LOCKED; -1: the key left the way */
};

/* sluice_log_admit for a super-packet's several passes, under the lock: a
 * global function, so that the verifier walks its 63 ring writes once, not
 * once for every path that reaches them. */
__noinline int sluice_log_admit_many(struct sluice_log_state *st, const struct sluice_rule *rule, __u64 now,
				     __u64 packets)
{
	if (!st || !rule)
		return 0; /* the verifier: arguments of a global function may be NULL */
	return sluice_log_admit(st->ring, &st->head, now, rule->window.window_ns, (__u32)rule->window.limit,
				packets);
}

static long log_attempt(__u32 index, void *data)
{
	struct log_ctx *c = data;
	struct sluice_log_state *st = c->st;
	const struct sluice_set_tags *t = c->tags;
	const struct sluice_rule *rule = c->rule;
	struct charge_req *req = c->req;
	__u32 head;
	__u64 s;
	int w, admit;

	if (!st || !t || !rule || !req)
		return 1; /* the verifier: pointers read back from the context may be NULL */
	w = SLUICE_WAY(req->way);
	s = SLUICE_READ_ONCE(st->word);
	if (s & 1)
		return 0; /* held: read again */
	c->gen_seen = SLUICE_READ_ONCE(t->gen[w]);
	if (owner_gone(&t->key[w], c->addr, req)) {
		c->res = -1;
		return 1;
	}
	head = SLUICE_READ_ONCE(st->head);
	/* A super-packet's several passes are decided under the lock. */
	admit = req->packets != 1 || log_would_admit(st, head, req->now, rule);
	if (SLUICE_READ_ONCE(st->word) != s)
		return 0;
	if (!admit) {
		/* Every pass it holds is inside the window: full again a window
		 * after its newest. */
		req->full = sluice_stamp(SLUICE_READ_ONCE(st->ring[log_newest(head, rule)]) +
					 rule->window.window_ns);
		c->res = BUCKET_DROP;
		return 1;
	}
	if (__sync_val_compare_and_swap(&st->word, s, s + 1) != s)
		return 0;
	if (owner_gone(&t->key[w], c->addr, req)) {
		__sync_lock_test_and_set(&st->word, s + 2);
		c->res = -1;
		return 1;
	}
	if (req->packets == 1)
		admit = sluice_log_admit(st->ring, &st->head, req->now, rule->window.window_ns,
					 (__u32)rule->window.limit, 1);
	else
		admit = sluice_log_admit_many(st, rule, req->now, req->packets);
	__sync_lock_test_and_set(&st->word, s + 2); /* a full barrier, as above */
	c->res = admit ? BUCKET_PASS : LOG_DROP_LOCKED;
	return 1;
}

/* Charges the log found in way req->way of tags `t`: an enum bucket_result,
 * or -1 if the way no longer holds req's key. A global function, called by
 * walk_step itself (its bpf_loop callback is one more stack frame). */
__noinline int sluice_charge_log(struct sluice_log_state *st, const struct sluice_set_tags *t,
				 const struct sluice_addr6 *addr, const struct sluice_rule *rule,
				 struct charge_req *req)
{
	struct log_ctx c = { .st = st, .tags = t, .addr = addr, .rule = rule, .req = req, .res = BUCKET_FORCED };
	int w;

	if (!st || !t || !rule || !req)
		return BUCKET_FAIL_TABLE; /* the verifier: arguments of a global function may be NULL */
	w = SLUICE_WAY(req->way);
	c.gen_seen = SLUICE_READ_ONCE(t->gen[w]);
	if (owner_gone(&t->key[w], addr, req))
		return -1;
	bpf_loop(SLUICE_LOCK_RETRIES, log_attempt, &c, 0);
	if (c.res < 0)
		return -1;
	if (c.res == BUCKET_PASS || c.res == LOG_DROP_LOCKED) {
		/* Read unlocked: it only ranks the way, and keeps the lock short. */
		req->full = sluice_log_full(st, rule, req->now);
		if (c.res != BUCKET_PASS)
			c.res = BUCKET_DROP;
	}
	count_source(&st->cnt, c.gen_seen, c.res, req, 0, SLUICE_CAS_RETRIES);
	return c.res;
}

/* Writes a new log with its first packet's decision (returned) into claimed
 * and frozen way w, and publishes it. A fresh log admits a packet carrying at
 * most `limit` (a super-packet carries several), logged from slot 0. */
static __always_inline int install_log(struct sluice_set_tags *t, struct sluice_log_state *st, int w,
				       __u64 frozen, const struct sluice_rule *rule, const struct charge_req *req)
{
	__u64 tag = sluice_way_begin(t, w, 1, req->now), n = req->packets;
	int admit = n >= 1 && n <= rule->window.limit, i;

	__builtin_memset(st->ring, 0, sizeof(st->ring));
	st->head = 0;
	if (admit) {
		for (i = 0; i < SLUICE_MAX_LOG; i++) {
			if (i >= n)
				break;
			st->ring[i] = req->now;
		}
		st->head = n >= rule->window.limit ? 0 : (__u32)n;
	}
	st->cnt.passed_packets = (admit ? n : 0) | tag;
	st->cnt.passed_bytes = (admit ? req->bytes : 0) | tag;
	st->cnt.dropped_packets = (admit ? 0 : n) | tag;
	st->cnt.dropped_bytes = (admit ? 0 : req->bytes) | tag;
	sluice_way_publish(t, w, &st->word, frozen + 1, req->want);
	return admit ? BUCKET_PASS : BUCKET_DROP;
}

/* Creates a sliding-log bucket in the way a lookup chose, as
 * sluice_insert_v4 does a source bucket. One global function per family. */
__noinline int sluice_log_insert_v4(const struct sluice_rule *rule, struct charge_req *req)
{
	struct sluice_log_set_v4 *set;
	__u32 idx;
	__u64 frozen = 0;
	int w, res;

	if (!rule || !req)
		return LOOKUP_RETRY; /* the verifier: arguments of a global function may be NULL */
	idx = req->victim.way & SLUICE_SET_WAYS ? req->set_b : req->set_a;
	set = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V4, &idx);
	if (!set)
		return LOOKUP_RETRY;
	w = SLUICE_WAY(req->victim.way);
	if (!sluice_way_claim(&set->tag, w, req->victim.key))
		return LOOKUP_RETRY;
	if (!sluice_freeze_claimed(&set->tag, w, &set->way[w].word, req->victim.key, &frozen))
		return LOOKUP_RETRY;
	res = install_log(&set->tag, &set->way[w], w, frozen, rule, req);
	count_insert(&req->victim, sluice_stamp(req->now), req->table);
	return res;
}

__noinline int sluice_log_insert_v6(const struct sluice_rule *rule, struct charge_req *req)
{
	struct sluice_log_set_v6 *set;
	__u32 idx;
	__u64 frozen = 0;
	int w, res;

	if (!rule || !req)
		return LOOKUP_RETRY; /* the verifier: arguments of a global function may be NULL */
	idx = req->victim.way & SLUICE_SET_WAYS ? req->set_b : req->set_a;
	set = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V6, &idx);
	if (!set)
		return LOOKUP_RETRY;
	w = SLUICE_WAY(req->victim.way);
	if (!sluice_way_claim(&set->tag, w, req->victim.key))
		return LOOKUP_RETRY;
	if (!sluice_freeze_claimed(&set->tag, w, &set->way[w].word, req->victim.key, &frozen))
		return LOOKUP_RETRY;
	set->addr[w] = req->addr;
	res = install_log(&set->tag, &set->way[w], w, frozen, rule, req);
	count_insert(&req->victim, sluice_stamp(req->now), req->table);
	return res;
}

/*
 * Sliding-log buckets, in their own set tables (a log is 560 bytes): looked
 * up as sluice_charge_v6 does a source bucket, and found, LOOKUP_LOCKED with
 * the way (req->set_idx, req->way) for the caller to charge with
 * sluice_charge_log. One global function per family.
 */
__noinline int sluice_log_v4(const struct sluice_rule *rule, struct charge_req *req)
{
	const struct sluice_config *cfg;
	struct sluice_log_set_v4 *a, *b;
	int w, busy_a = 0, busy_b = 0;
	__u32 zero = 0;

	if (!rule || !req)
		return BUCKET_FAIL_TABLE; /* the verifier: arguments of a global function may be NULL */
	cfg = bpf_map_lookup_elem(&SLUICE_MAP_CONFIG, &zero);
	if (!cfg || !cfg->log4_sets)
		return BUCKET_FAIL_TABLE;
	sluice_src4_sets(req->want, cfg->hash_seed, cfg->log4_sets, &req->set_a, &req->set_b);
	a = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V4, &req->set_a);
	b = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V4, &req->set_b);
	if (!a || !b)
		return BUCKET_FAIL_TABLE;

	req->set_idx = req->set_a;
	w = scan_set(&a->tag, NULL, req, &busy_a);
	if (w < 0) {
		req->set_idx = req->set_b;
		w = scan_set(&b->tag, NULL, req, &busy_b);
	}
	if (w < 0)
		return lookup_missed(&a->tag, &b->tag, busy_a, busy_b, req);
	req->way = SLUICE_WAY(w);
	return LOOKUP_LOCKED;
}

__noinline int sluice_log_v6(const struct sluice_rule *rule, struct charge_req *req)
{
	const struct sluice_config *cfg;
	struct sluice_log_set_v6 *a, *b;
	int w, busy_a = 0, busy_b = 0;
	__u32 zero = 0;
	__u64 h;

	if (!rule || !req)
		return BUCKET_FAIL_TABLE; /* the verifier: arguments of a global function may be NULL */
	cfg = bpf_map_lookup_elem(&SLUICE_MAP_CONFIG, &zero);
	if (!cfg || !cfg->log6_sets)
		return BUCKET_FAIL_TABLE;
	h = sluice_src6_hash(rule->id, req->addr.hi, req->addr.lo, cfg->hash_seed);
	req->want = sluice_src6_key(rule->id, h);
	sluice_hash_sets(h, cfg->log6_sets, &req->set_a, &req->set_b);
	a = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V6, &req->set_a);
	b = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V6, &req->set_b);
	if (!a || !b)
		return BUCKET_FAIL_TABLE;

	req->set_idx = req->set_a;
	w = scan_set(&a->tag, a->addr, req, &busy_a);
	if (w < 0) {
		req->set_idx = req->set_b;
		w = scan_set(&b->tag, b->addr, req, &busy_b);
	}
	if (w < 0)
		return lookup_missed(&a->tag, &b->tag, busy_a, busy_b, req);
	req->way = SLUICE_WAY(w);
	return LOOKUP_LOCKED;
}

/* The tables whose lookup is a global function (every one but IPv4's). */
enum table_kind {
	KIND_V6,
	KIND_LOG4,
	KIND_LOG6,
};

/* Charges the bucket a lookup found for a multi-word algorithm (LOOKUP_LOCKED):
 * a global function per kind of bucket, called from here so that its lock's
 * bpf_loop callback is the deepest frame. */
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

/* A later fragment takes its datagram's protocol, ports and TCP flags,
 * remembered when the first fragment passed, until the datagram's last
 * fragment. */
static __always_inline void recall_first_fragment(struct packet_info *pkt)
{
	const struct sluice_frag_key *fk = frag_key();
	struct sluice_frag_info *fi = fk ? bpf_map_lookup_elem(&SLUICE_MAP_FRAGS, fk) : NULL;
	__u32 mark;

	if (!fi || (fi->flags & SLUICE_FRAG_ENDED) || frag_clock() - fi->first_ns > SLUICE_FRAG_TIMEOUT_NS)
		return;
	pkt->proto = fi->proto;
	pkt->proto_known = 1;
	pkt->dport = fi->dport;
	pkt->sport = fi->sport;
	pkt->tcp_flags = fi->tcp_flags;
	pkt->ports_known = fi->ports_known;
	mark = SLUICE_FRAG_JUDGED | (pkt->flags & PKT_LAST_FRAG ? SLUICE_FRAG_ENDED : 0);
	if ((fi->flags & mark) != mark)
		__sync_fetch_and_or(&fi->flags, mark);
}

/*
 * A first fragment meets its key's entry (struct sluice_frag_info) for
 * SLUICE_FRAG_TIMEOUT_NS + SLUICE_FRAG_QUEUE_NS after the entry was made:
 * that long the kernel may hold a queue with the entry's first fragment in
 * it, or with later fragments judged by the entry. One that names another
 * protocol, port or TCP flags (or hides them) conflicts: the kernel keeps the first
 * first fragment and drops a copy, so the datagram delivered would not be
 * the one its later fragments were judged as; it is dropped. One that names
 * the same does not relabel anything: while the entry still serves later
 * fragments it is left as it is (PKT_FRAG_LIVE: not made younger), and after
 * that it is made again with its JUDGED mark (PKT_FRAG_JUDGED), so that the
 * window above runs from the last later fragment that may take its ports.
 */
static __always_inline int first_fragment_conflicts(struct packet_info *pkt)
{
	const struct sluice_frag_key *fk = frag_key();
	const struct sluice_frag_info *fi = fk ? bpf_map_lookup_elem(&SLUICE_MAP_FRAGS, fk) : NULL;
	__u64 age;

	if (!fi)
		return 0;
	age = frag_clock() - fi->first_ns;
	if (age > SLUICE_FRAG_TIMEOUT_NS + SLUICE_FRAG_QUEUE_NS)
		return 0;
	if (fi->proto != pkt->proto || fi->ports_known != pkt->ports_known ||
	    (pkt->ports_known && (fi->dport != pkt->dport || fi->sport != pkt->sport || fi->tcp_flags != pkt->tcp_flags)) ||
	    !pkt->proto_known)
		return 1;
	if (fi->flags & SLUICE_FRAG_JUDGED)
		pkt->flags |= PKT_FRAG_JUDGED;
	if (!(fi->flags & SLUICE_FRAG_ENDED) && age <= SLUICE_FRAG_TIMEOUT_NS)
		pkt->flags |= PKT_FRAG_LIVE;
	return 0;
}

/* A first fragment that passed: its datagram's entry, unless the same entry
 * is live (first_fragment_conflicts). */
static __always_inline void remember_first_fragment(const struct packet_info *pkt)
{
	const struct sluice_frag_key *fk = frag_key();
	struct sluice_frag_info fi = {
		.first_ns = frag_clock(),
		.dport = pkt->dport,
		.proto = pkt->proto,
		.ports_known = pkt->ports_known,
		.sport = pkt->sport,
		.tcp_flags = pkt->tcp_flags,
		.flags = pkt->flags & PKT_FRAG_JUDGED ? SLUICE_FRAG_JUDGED : 0,
	};

	if (fk && !(pkt->flags & PKT_FRAG_LIVE))
		bpf_map_update_elem(&SLUICE_MAP_FRAGS, fk, &fi, BPF_ANY);
}

/*
 * The wire packets and bytes a frame carries. A TCP or UDP frame longer than
 * its interface's MTU is a super-packet (GRO in generic mode, BIG TCP): it is
 * charged as the segments it was or will be cut into, each with its headers.
 */
static __always_inline void wire_charge(const struct xdp_md *ctx, const struct packet_info *pkt,
					struct charge *ch)
{
	__u32 ifindex, mtu = SLUICE_DEFAULT_MTU, *m;
	__u64 segment, segs;

	ch->packets = 1;
	ch->bytes = pkt->l3_len;
	ch->pending = source_slot(pkt);
	if (pkt->l3_len <= SLUICE_DEFAULT_MTU || !pkt->ports_known)
		return;
	/* Read here, not above: the verifier turns it into three dependent
	 * loads (the frame's queue, its device, the index). */
	ifindex = ctx->ingress_ifindex;
	m = bpf_map_lookup_elem(&SLUICE_MAP_IFACE_MTU, &ifindex);
	if (m)
		mtu = *m;
	if (pkt->l3_len <= mtu || pkt->hdr_len >= mtu)
		return;
	segment = mtu - pkt->hdr_len;
	segs = (pkt->l3_len - pkt->hdr_len + segment - 1) / segment;
	ch->packets = segs;
	ch->bytes = pkt->l3_len + (segs - 1) * pkt->hdr_len;
}

/* The verdict counter of a limit rule's bucket result. */
static __always_inline __u32 limit_verdict(enum bucket_result res, const struct sluice_rule *rule)
{
	int shadow = rule->flags & SLUICE_RULE_SHADOW;

	switch (res) {
	case BUCKET_PASS:
		return SLUICE_CNT_PASS_LIMIT;
	case BUCKET_FORCED:
		return SLUICE_CNT_PASS_CONTENTION;
	case BUCKET_DROP:
		return shadow ? SLUICE_CNT_PASS_SHADOW : SLUICE_CNT_DROP_RATE;
	default:
		return SLUICE_CNT_FAILOPEN_TABLE;
	}
}

static __always_inline void count_rule(__u32 slot, enum bucket_result res, const struct charge *ch)
{
	struct sluice_rule_counters *rc = rule_counters(slot);

	if (!rc)
		return;
	switch (res) {
	case BUCKET_FORCED:
		rc->passed_contention += ch->packets;
		/* fallthrough */
	case BUCKET_PASS:
		rc->passed_packets += ch->packets;
		rc->passed_bytes += ch->bytes;
		break;
	case BUCKET_DROP:
		rc->dropped_packets += ch->packets;
		rc->dropped_bytes += ch->bytes;
		break;
	case BUCKET_FAIL_TABLE:
		rc->failopen_table += ch->packets;
		break;
	}
}

/* Not a verdict counter: decide_fast leaves the packet to the walk. */
#define VERDICT_WALK SLUICE_CNT_MAX

/* Applies one rule to a packet: charges its bucket if it is a limit, counts
 * it in the rule's counters, and returns the verdict counter. `fast` (a
 * constant) is decide_fast's: the rule, if a limit, is a GCRA-form
 * bucket, charged only if it exists (charge_v4_held, charge_v6_held); else
 * nothing is counted and VERDICT_WALK returned. */
static __always_inline __u32 apply_rule(struct xdp_md *ctx, const struct packet_info *pkt,
					const struct sluice_rule *rule, __u32 slot, const int fast)
{
	enum bucket_result res;
	struct charge ch;
	__u32 verdict;

	wire_charge(ctx, pkt, &ch);
	if (rule->action == SLUICE_ACTION_ALLOW) {
		res = BUCKET_PASS;
		verdict = SLUICE_CNT_PASS_ALLOW;
	} else if (rule->action == SLUICE_ACTION_DENY) {
		res = BUCKET_DROP;
		verdict = (rule->flags & SLUICE_RULE_SHADOW) ? SLUICE_CNT_PASS_SHADOW : SLUICE_CNT_DROP_DENY;
	} else if (fast) {
		int held = pkt->family == 4 ? charge_v4_held(source_key_v4(pkt, rule), rule, now_ns(rule), &ch)
					    : charge_v6_held(pkt, rule, now_ns(rule), &ch);

		if (held < 0)
			return VERDICT_WALK;
		res = held;
		verdict = limit_verdict(res, rule);
	} else {
		res = apply_limit(pkt, rule, &ch);
		verdict = limit_verdict(res, rule);
	}
	count_rule(slot, res, &ch);
	return verdict;
}

/* A walk down a packet's match lists (see struct sluice_match_list). */
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
	/* Two nibbles: one byte more would take the call chain's stack past 512. */
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

/* Starts a packet's decision: fragment and header bookkeeping, then the
 * first match list: for IPv4, its index (w->list), 0 if no rule covers the
 * source; for IPv6, the walk's first step reads it from the trie
 * (WALK_V6_HEAD), and finds whether a rule covers the source. A global
 * function, so the verifier checks it once rather than once per parsing path. */
static __always_inline int start_decision(struct packet_info *pkt, struct walk *w)
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

	w->set = active_sets();
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
static __always_inline __u32 decide_packet(struct xdp_md *ctx, struct packet_info *pkt)
{
	struct walk w = {};
	__u32 i;

	if ((pkt->flags & PKT_FIRST_FRAG) && first_fragment_conflicts(pkt))
		return SLUICE_CNT_DROP_MALFORMED;
	if (!start_decision(pkt, &w))
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

/*
 * The drop memo: per CPU, in each pending-drops slot (struct
 * sluice_drop_memo), the last drop the fast path (decide_fast) decided for a
 * source that hashes to the slot, with everything it was decided on: the
 * source, its family, protocol and port; the live-set word, which changes
 * with every change of the rules; the coarse clock's reading; for a byte
 * rate, the length; and for a limit, the bucket's word and offset, and the
 * slot's name of the bucket then. A packet that shows the same, and is at
 * least as long, while the bucket still holds that word and offset, would be
 * dropped by the same rule on the same arithmetic: it is, and counted as that
 * drop was (the rule's counters, the bucket's in the very slot, which still
 * names it), without the lookups. Any other packet, and any packet at the
 * next tick, takes the fast path or the walk. Only under the coarse clock the
 * program reads from jiffies (or the test clock): a reading is one load, and
 * a rule on the precise clock is never memoized.
 *
 * The invariant: a packet the memo holds a drop for would get that drop from
 * the walk. The drop was the fast path's: the first rule of the source's
 * first list matched with every selector known, and so decided. Its match
 * must depend on nothing the memo's key lacks, so the memo holds no drop of
 * a rule that selects source ports or TCP flags (rule_selects_more): the
 * SYN a `--syn` rule drops says nothing of the ACKs that follow it on the
 * same port. Such a rule's drops take the fast path each time (its first
 * rule, its bucket's word: no write), the rest of the memo is as it was, and
 * a packet's recall costs nothing more. (Keying the memo on the source port
 * and flags too would cost every recall a second compare and miss on every
 * packet of a flood that varies its source port.) The fast path itself reads
 * the packet's own selectors (rule_matches): it needs nothing more.
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
 * it: a wire packet, by a rule that selects nothing beyond the memo's key;
 * for a limit, a GCRA-form drop on the coarse clock, counted in the source's
 * pending slot. */
static __always_inline void remember_drop(const struct packet_info *pkt, const struct sluice_rule *rule,
					  __u32 slot, __u32 set, __u32 verdict)
{
	struct sluice_pending_drops *p;
	struct charge_req *req = NULL;
	struct sluice_drop_memo *m;
	__u32 i = source_slot(pkt);
	__u64 now;

	if (pkt->l3_len > SLUICE_DEFAULT_MTU || rule_selects_more(rule))
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

	if (!st || !t || SLUICE_READ_ONCE(st->word) != m->word)
		return 0;
	off = SLUICE_READ_ONCE(st->algo.gcra.off);
	if (SLUICE_READ_ONCE(t->key[SLUICE_WAY(p->way)]) != m->want)
		return 0;
	return off == m->off && SLUICE_READ_ONCE(st->word) == m->word;
}

/* The drop the memo holds for `pkt` (a packet decide_fast may decide),
 * counted as the drop it repeats: its verdict counter; else VERDICT_WALK,
 * having changed nothing. */
static __always_inline __u32 recall_drop(const struct packet_info *pkt)
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
	if (m->now != now || m->selector != packet_selector(pkt) || pkt->l3_len < m->min_len)
		return VERDICT_WALK;
	__builtin_memcpy(&lo, pkt->saddr, 8);
	__builtin_memcpy(&hi, pkt->saddr + 8, 8);
	if (m->saddr[0] != lo || m->saddr[1] != hi || m->set != active_word())
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

/*
 * The common case, decided without the walk: a packet that is not a
 * fragment, not encapsulated and shows its protocol and port, whose source's
 * first match list begins with a terminal rule that matches it: an allow, a
 * deny, or a GCRA-form limit, its bucket charged or made at one attempt. With
 * every selector known the walk stops at the first terminal rule that matches,
 * so this is its decision, made from the same live sets, in registers: no walk
 * state, one rule lookup, one attempt at the bucket, and, for an IPv4 bucket
 * that exists, no call of a function of the program's own (each costs about
 * 12 ns on the test VM, where every return goes through a return thunk; IPv6
 * makes one, sluice_charge_v6). Anything
 * else, untouched, is left to the walk
 * (VERDICT_WALK). `family` is a constant. Inline in the program: its frame
 * and the deepest chain of calls below walk_step (sluice_init_source keeps
 * the new-bucket arithmetic out of the insert's frame) fit in 512 bytes.
 */
static __always_inline __u32 decide_fast_family(struct xdp_md *ctx, struct packet_info *pkt, const int family)
{
	const struct sluice_match_list *list;
	const struct sluice_rule *rule;
	__u32 word, set, index, slot, verdict;

	word = active_word();
	set = word & 3;
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
	if (!rule || !rule->id || (rule->flags & SLUICE_RULE_CONTINUE) || rule_matches(rule, pkt) != MATCH_YES ||
	    (rule->action == SLUICE_ACTION_LIMIT && !gcra_form(rule)))
		return VERDICT_WALK;
	verdict = apply_rule(ctx, pkt, rule, slot, 1);
	if (verdict != VERDICT_WALK)
		pkt->flags |= PKT_COVERED;
	if (verdict == SLUICE_CNT_DROP_RATE || verdict == SLUICE_CNT_DROP_DENY)
		remember_drop(pkt, rule, slot, word, verdict);
	return verdict;
}

/* The fast path, for the packets it may decide: 1 and the verdict counter in
 * *verdict, or 0. */
static __always_inline int decide_fast(struct xdp_md *ctx, struct packet_info *pkt, __u32 *verdict)
{
	if (pkt->flags || !pkt->ports_known)
		return 0;
	*verdict = recall_drop(pkt);
	if (*verdict != VERDICT_WALK)
		return 1;
	if (pkt->family == 4)
		*verdict = decide_fast_family(ctx, pkt, 4);
	else
		*verdict = decide_fast_family(ctx, pkt, 6);
	return *verdict != VERDICT_WALK;
}

/* The bytes after L2 of a frame that was not parsed as IP: what its counter counts. */
static __always_inline __u32 bytes_after(void *data, void *data_end, __u32 l3_off)
{
	void *l3 = data + (l3_off & (SLUICE_MAX_HDR_OFF - 1)); /* the verifier wants it bounded */

	return l3 < data_end ? data_end - l3 : 0;
}

/*
 * A malformed frame (truncated, or lengths that disagree with the frame or
 * the header: the stack drops it) whose source can be read and some rule
 * covers: passed, it would cost the host an skb for nothing, so it is
 * dropped (drop_malformed), whatever the rules say of the source. Without a
 * source to read, or from a source no rule covers, it fails open.
 */
static __always_inline __u32 malformed_verdict(struct xdp_md *ctx, __u32 l3_off, struct packet_info *pkt)
{
	__u32 set;

	if (!malformed_source(ctx, l3_off, pkt))
		return SLUICE_CNT_FAILOPEN_PARSE;
	set = sluice_lookup_set(active_sets());
	if (pkt->family == 4 ? lookup_v4(pkt->saddr, set) != 0 : lookup_v6(pkt->saddr, set) != NULL)
		return SLUICE_CNT_DROP_MALFORMED;
	return SLUICE_CNT_FAILOPEN_PARSE;
}

/* The verdict counter of a frame that is not an IP packet we can judge. */
static __always_inline __u32 unparsed_verdict(struct xdp_md *ctx, __u32 l3_off, struct packet_info *pkt,
					      int parsed)
{
	switch (parsed) {
	case PARSE_NOT_IP:
		return SLUICE_CNT_PASS_NOT_IP;
	case PARSE_TOO_DEEP:
		return SLUICE_CNT_DROP_MALFORMED;
	default:
		return malformed_verdict(ctx, l3_off, pkt);
	}
}

SEC("xdp.frags")
int SLUICE_PROG_NAME(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct packet_info pkt = {};
	__u32 verdict, l3_off;
	int parsed;

#ifdef SLUICE_BENCH_SOURCES
	bench_rewrite_source(ctx);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
#endif
	parsed = parse_packet(ctx, &pkt, &l3_off);
	if (parsed == PARSE_IP) {
		if (!decide_fast(ctx, &pkt, &verdict))
			verdict = decide_packet(ctx, &pkt);
		count_global(verdict, pkt.l3_len);
	} else {
		__u32 bytes = bytes_after(data, data_end, l3_off);

		if (pkt.flags & PKT_ENCAP)
			count_global(SLUICE_CNT_INFO_ENCAPSULATED, bytes);
		verdict = unparsed_verdict(ctx, l3_off, &pkt, parsed);
		count_global(verdict, bytes);
	}
	if ((SLUICE_DROP_VERDICTS >> verdict) & 1)
		return XDP_DROP;
	/* Only where a rule covers the source (the table is kept for them), and
	 * only a first fragment that names its datagram's protocol. */
	if ((pkt.flags & (PKT_FIRST_FRAG | PKT_TINY_FRAG | PKT_COVERED)) == (PKT_FIRST_FRAG | PKT_COVERED) &&
	    pkt.proto_known)
		remember_first_fragment(&pkt);
	/* attach --then: on to the interface's next program. Without one the
	 * tail call falls through. */
	bpf_tail_call(ctx, &SLUICE_MAP_THEN, ctx->ingress_ifindex);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
