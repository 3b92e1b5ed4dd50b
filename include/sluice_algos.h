/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The arithmetic of every rate-limiting algorithm, shared by the XDP program
 * and the controller's tests: pure functions of a bucket's state, the time and
 * the rule's parameters. Locking is the caller's business (the XDP program
 * uses compare-and-swap for GCRA and a try-lock for the others).
 *
 * GCRA, the generic cell rate algorithm: a token bucket kept as one timestamp.
 * A bucket is its theoretical arrival time (TAT). With T the emission interval
 * (time one unit of rate is worth) and capacity = burst * T, a packet costing
 * inc = cost * T passes at time now if max(TAT, now) + inc - now <= capacity,
 * and then TAT becomes max(TAT, now) + inc. This is exactly a token bucket of
 * `burst` tokens refilled at the rate: over any interval of length D at most
 * burst + rate * D units pass.
 *
 * Time is counted in ticks of 1/64 ns so that intervals of fast rates keep
 * their precision. Tick values wrap after 2^58 ns (9.1 years) of uptime and
 * are compared as signed differences, which hold for intervals up to 2^63
 * ticks (4.5 years): a new bucket therefore starts at `now`, never at 0, or
 * every new source would read as 4.5 years in debt once uptime passes 2^57 ns.
 * No kernel or libc dependency: plain C on both sides.
 */
#ifndef SLUICE_ALGOS_H
#define SLUICE_ALGOS_H

#include <linux/types.h>
#include "sluice_abi.h"
#include "sluice_atomic.h"

#define SLUICE_TICK_SHIFT 6 /* ticks per nanosecond = 2^6 */

/* The controller scales a byte rate so that a packet of up to SLUICE_MAX_COST
 * bytes costs no more than 2^60 ticks; a larger one (a super-packet) is
 * charged in chunks of that size (sluice_charge_ticks). */
#define SLUICE_MAX_COST 65535ULL

/* Range limits the controller enforces when it compiles a rule, so that none
 * of the sums below can overflow: the most expensive packet costs at most
 * 2^60 ticks and the capacity is at most 2^61 ticks (about 1.1 years). */
#define SLUICE_MAX_INC_TICKS      (1ULL << 60)
#define SLUICE_MAX_CAPACITY_TICKS (1ULL << 61)

static inline __u64 sluice_ns_to_ticks(__u64 ns)
{
	return ns << SLUICE_TICK_SHIFT;
}

/* Ticks a packet of `cost` units (1, or bytes) takes from a bucket: rounded up,
 * so that a limit never lets through more than it promises. The controller
 * guarantees cost * inc_mult < 2^63 for cost <= SLUICE_MAX_COST. */
static inline __u64 sluice_cost_ticks(__u64 inc_mult, __u8 inc_shift, __u64 cost)
{
	__u64 round = (1ULL << inc_shift) - 1;

	return (cost * inc_mult + round) >> inc_shift;
}

/* Ticks a charge of `cost` units takes, however large: packets (chunk 1) or
 * bytes (chunk SLUICE_MAX_COST) are charged a chunk at a time, each rounded
 * up. A charge beyond any capacity saturates at SLUICE_MAX_CAPACITY_TICKS + 1,
 * which no bucket admits. */
static inline __u64 sluice_charge_ticks(__u64 inc_mult, __u8 inc_shift, __u64 cost, __u64 chunk)
{
	__u64 chunks, per_chunk, ticks;

	if (cost <= chunk)
		return sluice_cost_ticks(inc_mult, inc_shift, cost);
	chunks = cost / chunk;
	per_chunk = sluice_cost_ticks(inc_mult, inc_shift, chunk);
	if (per_chunk && chunks > SLUICE_MAX_CAPACITY_TICKS / per_chunk)
		return SLUICE_MAX_CAPACITY_TICKS + 1;
	ticks = chunks * per_chunk + sluice_cost_ticks(inc_mult, inc_shift, cost % chunk);
	return ticks > SLUICE_MAX_CAPACITY_TICKS ? SLUICE_MAX_CAPACITY_TICKS + 1 : ticks;
}

/*
 * Decides one packet (sluice_gcra_next: the arrival time after it, whether it
 * passes or not). Returns 1 and sets *next_tat if it passes, 0 if it must
 * be dropped (a drop takes nothing from the bucket). A clock that reads earlier
 * than the one that wrote `tat` (another CPU) yields less credit, never more:
 * elapsed time is never negative because base is never before now.
 */
static inline __u64 sluice_gcra_next(__u64 tat, __u64 now, __u64 inc)
{
	__u64 base = (__s64)(tat - now) > 0 ? tat : now;

	return base + inc;
}

static inline int sluice_gcra_admit(__u64 tat, __u64 now, __u64 inc, __u64 capacity,
				    __u64 *next_tat)
{
	__u64 next = sluice_gcra_next(tat, now, inc);

	if (next - now > capacity)
		return 0;
	*next_tat = next;
	return 1;
}

/*
 * Token bucket in its textbook form: `tokens` ticks of credit, refilled one
 * tick per tick since `last`, up to the capacity; a packet takes `inc`.
 *
 * Warm-up (warmup > 0), after Guava's SmoothWarmingUp: time the bucket spends
 * full adds to its coldness (up to the warm-up period), and every tick a
 * packet costs removes one. A packet costs inc * (1 + 2 * cold / warmup): a
 * fully cold bucket runs at a third of the rate and, used at its limit, warms
 * to the full rate over the warm-up period. The cost never exceeds the
 * capacity, so a cold bucket cannot lock itself out.
 */
static inline __u64 sluice_warm_cost(__u64 inc, __u64 cold, __u64 warmup)
{
	__u64 unit = warmup >> 16; /* the controller keeps warm-ups >= 1 ms, so unit > 0 */
	__u64 frac, extra;         /* frac: cold / warmup in 1/65536ths */

	if (!cold)
		return inc;
	frac = unit ? cold / unit : 65536;
	if (frac > 65536)
		frac = 65536;
	extra = 2 * ((inc >> 16) * frac + (((inc & 0xffff) * frac) >> 16));
	return inc + extra;
}

/* A new token bucket is full and, with a warm-up, fully cold: a source never
 * seen before has been quiet for as long as it takes to cool down. */
static inline void sluice_tb_init(__u64 *tokens, __u64 *last, __u64 *cold, __u64 now,
				  __u64 capacity, __u64 warmup)
{
	*tokens = capacity;
	*last = now;
	*cold = warmup;
}

static inline int sluice_tb_admit(__u64 *tokens, __u64 *last, __u64 *cold, __u64 now, __u64 inc,
				  __u64 capacity, __u64 warmup)
{
	__u64 elapsed = 0, room;

	/* A clock behind `last` (another CPU's) refills nothing. */
	if ((__s64)(now - *last) > 0) {
		elapsed = now - *last;
		*last = now;
	}
	room = capacity - *tokens;
	if (elapsed <= room) {
		*tokens += elapsed;
	} else {
		*tokens = capacity;
		if (warmup)
			*cold = elapsed - room >= warmup - *cold ? warmup : *cold + elapsed - room;
	}
	if (warmup) {
		inc = sluice_warm_cost(inc, *cold, warmup);
		if (inc > capacity)
			inc = capacity;
	}
	if (*tokens < inc)
		return 0;
	*tokens -= inc;
	if (warmup)
		*cold = *cold > inc ? *cold - inc : 0;
	return 1;
}

/*
 * Fixed window: at most `limit` units in each window [k*W, (k+1)*W) since
 * boot. A clock stepping back into an earlier window stays in the current one.
 */
static inline int sluice_fixed_admit(__u64 *window, __u64 *count, __u64 now_ns, __u64 window_ns,
				     __u64 limit, __u64 cost)
{
	__u64 w = now_ns / window_ns;

	if (w > *window) {
		*window = w;
		*count = 0;
	}
	if (*count + cost > limit)
		return 0;
	*count += cost;
	return 1;
}

/*
 * Sliding window counter: the estimate is the current window's count plus the
 * previous window's, weighted by the share of the sliding window that still
 * overlaps it (in 1/65536ths, rounded up). A packet passes if the estimate
 * plus its cost stays within the limit. Counts stay below 2^32 (the
 * controller caps limits), so prev * weight cannot overflow.
 */
static inline int sluice_sliding_admit(__u64 *window, __u64 *cur, __u64 *prev, __u64 now_ns,
				       __u64 window_ns, __u64 limit, __u64 cost)
{
	__u64 w = now_ns / window_ns, pos, weight, estimate;

	if (w > *window) {
		*prev = w == *window + 1 ? *cur : 0;
		*cur = 0;
		*window = w;
	}
	/* Behind the current window (another CPU's clock): weigh the previous
	 * window fully, the most careful reading. */
	pos = w == *window ? now_ns - w * window_ns : 0;
	weight = ((window_ns - pos) << 16) / window_ns;
	estimate = *cur + ((*prev * weight + 0xffff) >> 16);
	if (estimate + cost > limit)
		return 0;
	*cur += cost;
	return 1;
}

/*
 * Sliding log: the times of the last `limit` passes, in a ring whose `head`
 * is the oldest. A packet of `cost` packets (a super-packet carries several)
 * passes if the cost-th oldest pass is at least a window ago (or that slot was
 * never used); then its time replaces the `cost` oldest. Exact: never more
 * than `limit` passes in any window of window_ns. Only passes are logged, so a
 * client that backs off recovers one window after its last pass. A clock
 * behind the newest entry is logged as the newest time (no credit gained).
 * The program runs it under the log's sequence lock while other CPUs copy
 * the ring optimistically: each word is read and written once, relaxed
 * (sluice_atomic.h), never torn.
 */
#ifdef __bpf__
/* Six arguments: more than a BPF call can pass, so never a call there. */
__attribute__((always_inline))
#endif
static inline int sluice_log_admit(__u64 *ring, __u32 *head, __u64 now_ns, __u64 window_ns,
				   __u32 limit, __u64 cost)
{
	__u32 h = sluice_load_relaxed(head), newest, last, i;
	__u64 stamp = now_ns, oldest, newest_t;

	h = h < limit ? h : 0;
	newest = (h ? h : limit) - 1;
	last = h + (__u32)cost - 1;
	if (cost == 0 || cost > limit)
		return 0;
	if (last >= limit)
		last -= limit;
	oldest = sluice_load_relaxed(&ring[last & (SLUICE_MAX_LOG - 1)]);
	if (oldest && (__s64)(now_ns - oldest) < (__s64)window_ns)
		return 0;
	newest_t = sluice_load_relaxed(&ring[newest & (SLUICE_MAX_LOG - 1)]);
	if ((__s64)(newest_t - now_ns) > 0)
		stamp = newest_t;
	sluice_store_relaxed(&ring[h & (SLUICE_MAX_LOG - 1)], stamp);
	if (cost > 1) {
		/* A loop with one exit and no branch in it: a verifier walks
		 * each pass once. h < limit and i < cost <= limit: the modulo
		 * wraps once at most. */
#ifdef __clang__
#pragma clang loop unroll(disable)
#endif
		for (i = 1; i < SLUICE_MAX_LOG && i < cost; i++)
			sluice_store_relaxed(&ring[((h + i) % limit) & (SLUICE_MAX_LOG - 1)], stamp);
	}
	h += (__u32)cost;
	if (h >= limit)
		h -= limit;
	sluice_store_relaxed(head, h);
	return 1;
}

/*
 * A rule's algorithm as the program runs it, read from its compiled form
 * (struct sluice_rule): the program decides with these, and the controller's
 * `sluice explain` predicts with the very same functions. Always inlined in
 * the BPF program, as its own helpers are.
 */
#ifdef __bpf__
#define SLUICE_RULE_INLINE static inline __attribute__((always_inline))
#else
#define SLUICE_RULE_INLINE static inline
#endif

/* Token bucket and GCRA share the GCRA form, one word; only a token bucket
 * with warm-up needs tokens, last refill and coldness. */
SLUICE_RULE_INLINE int sluice_gcra_form(const struct sluice_rule *rule)
{
	return rule->algo == SLUICE_ALGO_GCRA ||
	       (rule->algo == SLUICE_ALGO_TOKEN_BUCKET && !rule->bucket.warmup);
}

/* Ticks a charge of `cost` (packets, or bytes) takes from a bucket rule. */
SLUICE_RULE_INLINE __u64 sluice_rule_cost_ticks(const struct sluice_rule *rule, __u64 cost)
{
	return sluice_charge_ticks(rule->bucket.inc_mult, rule->inc_shift, cost,
				   rule->unit == SLUICE_UNIT_BYTES ? SLUICE_MAX_COST : 1);
}

/* One decision of a multi-word algorithm (fixed or sliding window, a token
 * bucket with warm-up) on a copy of its state `s`, at `now` (ns). */
SLUICE_RULE_INLINE int sluice_decide_locked(union sluice_algo_state *s, const struct sluice_rule *rule,
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
				       sluice_rule_cost_ticks(rule, cost), rule->bucket.capacity,
				       rule->bucket.warmup);
	}
}

/*
 * Owed passes (struct sluice_owed): settling a CPU's account with its bucket.
 * The program settles a slot when it writes the bucket; `sluice upgrade`
 * settles every slot of the old program into the buckets it carries, and the
 * new program starts with empty slots.
 *
 * Whether the account in owed slot `o` cannot go onto the word `w` (offset
 * `off`) as it stands: another write landed since the account was made on
 * `written`, and a write found the bucket full at a clock `full_t` beyond that
 * word's arrival time (algo.gcra.full_at; `sluice upgrade` passes the later of
 * it and its own clock), so it may have refilled the bucket and
 * forgotten what this account charged before it. Otherwise no write since
 * found the bucket full: every one stacked, and so does the account.
 */
SLUICE_RULE_INLINE int sluice_owed_uncertain(const struct sluice_owed *o, __u64 w, __u64 off, __u64 full_t)
{
	return w != o->written && (__s64)(o->written - off - (full_t & ~SLUICE_OWED_SURE)) < 0;
}

/*
 * The word that settles what owed slot `o` holds against its bucket's word
 * `w` (offset `off`), or `w` itself where nothing needs writing. An account
 * that can go onto the word as it stands (sluice_owed_uncertain) is written
 * as if at its own times, max(arrival time, since) + ticks. Where it cannot,
 * which came first is unknown, so only what is certain is written,
 * max(arrival time, since + ticks), and the rest is doubt (*doubt): no packet
 * is behind it, and it is never charged to one. Where the latest of those
 * writes refilled the bucket surely (SLUICE_OWED_SURE), GCRA forgot the
 * account with every charge before it: nothing is written, and no doubt kept.
 */
SLUICE_RULE_INLINE __u64 sluice_owed_settled_word(const struct sluice_owed *o, __u64 w, __u64 off, __u64 full_t,
					     __u64 *doubt)
{
	__u64 tat = w - off, c;

	if (!sluice_owed_uncertain(o, w, off, full_t)) {
		*doubt = 0;
		c = ((__s64)(tat - o->since) > 0 ? tat : o->since) + o->ticks;
	} else if (full_t & SLUICE_OWED_SURE) {
		*doubt = 0;
		return w;
	} else {
		*doubt = o->ticks;
		c = o->since + o->ticks;
		if ((__s64)(c - tat) <= 0)
			return w;
	}
	return c + off;
}

#endif /* SLUICE_ALGOS_H */
