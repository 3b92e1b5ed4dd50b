/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The multi-word algorithms (fixed and sliding window, a token bucket with
 * warm-up): decided on a copy of the state read under a sequence lock, a
 * pass written under it (sluice_decide_locked in sluice_algos.h); and a new
 * bucket's state with its first packet's decision.
 */
#ifndef SLUICE_LIB_ALGOS_LOCKED_H
#define SLUICE_LIB_ALGOS_LOCKED_H

#include "lib/pending.h"

/* The debt of a window holding `count` of its `limit` units, as the time its
 * rate would take to earn them back (window / limit per unit), from now; but
 * never past `end`, when the state equals a fresh one whatever it holds. */
static __always_inline __u32 window_full(const struct sluice_rule *rule, __u64 now, __u64 count, __u64 end)
{
	__u64 per = rule->window.limit ? rule->window.window_ns / rule->window.limit : 0;
	__u64 debt = now + per * count;

	return sluice_stamp(debt < end ? debt : end);
}

/* When a multi-word algorithm's state `s` will equal a fresh bucket's; read
 * unlocked, a word at a time (relaxed): another CPU may be writing it. */
static __always_inline __u32 locked_full(const union sluice_algo_state *s, const struct sluice_rule *rule,
					 __u64 now)
{
	__u64 w = rule->window.window_ns;

	switch (rule->algo) {
	case SLUICE_ALGO_FIXED_WINDOW:
		return window_full(rule, now, sluice_load_relaxed(&s->fixed.count),
				   (sluice_load_relaxed(&s->fixed.window) + 1) * w);
	case SLUICE_ALGO_SLIDING_WINDOW:
		return window_full(rule, now,
				   sluice_load_relaxed(&s->sliding.cur) + sluice_load_relaxed(&s->sliding.prev),
				   (sluice_load_relaxed(&s->sliding.window) + 2) * w);
	default: /* a warm-up token bucket: full once its tokens are back */
		return sluice_tick_stamp(sluice_load_relaxed(&s->tb.last) +
					 (rule->bucket.capacity - sluice_load_relaxed(&s->tb.tokens)));
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
	s = sluice_load_relaxed(&st->word); /* the sequence lock's begin: see its re-read */
	if (s & 1)
		return 0; /* held: read again */
	/* Relaxed: the word's re-read after the fence below vouches for it. */
	c->gen_seen = sluice_load_relaxed(&t->gen[w]);
	if (owner_gone(&t->key[w], c->addr, c->req)) {
		c->res = -1;
		return 1;
	}
	/* The state's three words, one relaxed load each (as sluice_words_load;
	 * spelt out, the callback's frame stays as small as the chain of calls
	 * above it allows). */
	copy.sliding.window = sluice_load_relaxed(&st->algo.sliding.window);
	copy.sliding.cur = sluice_load_relaxed(&st->algo.sliding.cur);
	copy.sliding.prev = sluice_load_relaxed(&st->algo.sliding.prev);
	/* The sequence lock's re-read. Here the begin and the re-read are
	 * relaxed, with no fence, where the protocol has acquires and an
	 * acquire fence: on BPF every load of this copy is volatile, which the
	 * compiler keeps in program order, x86-64 keeps loads in order, and
	 * nothing shared is read after the re-read before the lock's
	 * compare-and-swap (a full barrier). Each compiler barrier those
	 * accessors add grows this callback's frame past what the chain of
	 * calls above it leaves of 512 bytes (walk_step, sluice_charge_locked). */
	if (sluice_load_relaxed(&st->word) != s)
		return 0;
	if (!sluice_decide_locked(&copy, c->rule, c->req->now, c->req->cost)) {
		c->res = BUCKET_DROP;
		return 1;
	}
	if (!sluice_word_lock(&st->word, s))
		return 0;
	if (owner_gone(&t->key[w], c->addr, c->req)) {
		sluice_word_unlock(&st->word, s);
		c->res = -1;
		return 1;
	}
	/* Relaxed, a word at a time: optimistic readers copy it meanwhile. */
	sluice_store_relaxed(&st->algo.sliding.window, copy.sliding.window);
	sluice_store_relaxed(&st->algo.sliding.cur, copy.sliding.cur);
	sluice_store_relaxed(&st->algo.sliding.prev, copy.sliding.prev);
	sluice_word_unlock(&st->word, s);
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
	c.gen_seen = sluice_load_acquire(&t->gen[w]);
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

	if (sluice_gcra_form(rule)) {
		res = sluice_gcra_admit(now_t, now_t, sluice_rule_cost_ticks(rule, cost), rule->bucket.capacity, &next)
			      ? BUCKET_PASS : BUCKET_DROP;
		init->word = res == BUCKET_PASS ? next - now_t : 0;
	} else {
		if (rule->algo == SLUICE_ALGO_TOKEN_BUCKET)
			sluice_tb_init(&init->algo.tb.tokens, &init->algo.tb.last, &init->algo.tb.cold,
				       now_t, rule->bucket.capacity, rule->bucket.warmup);
		res = sluice_decide_locked(&init->algo, rule, now, cost) ? BUCKET_PASS : BUCKET_DROP;
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

#endif /* SLUICE_LIB_ALGOS_LOCKED_H */
