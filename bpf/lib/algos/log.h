/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The sliding log (sluice_log_admit in sluice_algos.h): decided as the
 * multi-word algorithms are, under the log's sequence lock; and a new log
 * with its first packet's decision.
 */
#ifndef SLUICE_LIB_ALGOS_LOG_H
#define SLUICE_LIB_ALGOS_LOG_H

#include "lib/algos/locked.h"

/* Whether the sliding log admits a packet now, read without writing: the
 * decision of sluice_log_admit on a snapshot taken under the sequence lock. */
static __always_inline int log_would_admit(struct sluice_log_state *st, __u32 head, __u64 now,
					   const struct sluice_rule *rule)
{
	__u32 limit = (__u32)rule->window.limit;
	__u32 h = head < limit ? head : 0;
	__u64 oldest = sluice_load_relaxed(&st->ring[h & (SLUICE_MAX_LOG - 1)]);

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
		t = sluice_load_relaxed(&st->ring[i]);
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
	s = sluice_load_acquire(&st->word);
	if (s & 1)
		return 0; /* held: read again */
	c->gen_seen = sluice_load_acquire(&t->gen[w]);
	if (owner_gone(&t->key[w], c->addr, req)) {
		c->res = -1;
		return 1;
	}
	head = sluice_load_relaxed(&st->head);
	/* A super-packet's several passes are decided under the lock. */
	admit = req->packets != 1 || log_would_admit(st, head, req->now, rule);
	sluice_fence_acquire();
	if (sluice_load_acquire(&st->word) != s)
		return 0;
	if (!admit) {
		/* Every pass it holds is inside the window: full again a window
		 * after its newest. */
		req->full = sluice_stamp(sluice_load_relaxed(&st->ring[log_newest(head, rule)]) +
					 rule->window.window_ns);
		c->res = BUCKET_DROP;
		return 1;
	}
	if (!sluice_word_lock(&st->word, s))
		return 0;
	if (owner_gone(&t->key[w], c->addr, req)) {
		sluice_word_unlock(&st->word, s);
		c->res = -1;
		return 1;
	}
	if (req->packets == 1)
		admit = sluice_log_admit(st->ring, &st->head, req->now, rule->window.window_ns,
					 (__u32)rule->window.limit, 1);
	else
		admit = sluice_log_admit_many(st, rule, req->now, req->packets);
	sluice_word_unlock(&st->word, s); /* an exchange: a full barrier */
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
	c.gen_seen = sluice_load_acquire(&t->gen[w]);
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

	/* Relaxed stores, before the publish: the claim's release fence orders
	 * them for optimistic readers, the publish for lookups. */
	for (i = 0; i < SLUICE_MAX_LOG; i++)
		sluice_store_relaxed(&st->ring[i], 0);
	sluice_store_relaxed(&st->head, 0);
	if (admit) {
		for (i = 0; i < SLUICE_MAX_LOG; i++) {
			if (i >= n)
				break;
			sluice_store_relaxed(&st->ring[i], req->now);
		}
		sluice_store_relaxed(&st->head, n >= rule->window.limit ? 0 : (__u32)n);
	}
	sluice_store_relaxed(&st->cnt.passed_packets, (admit ? n : 0) | tag);
	sluice_store_relaxed(&st->cnt.passed_bytes, (admit ? req->bytes : 0) | tag);
	sluice_store_relaxed(&st->cnt.dropped_packets, (admit ? 0 : n) | tag);
	sluice_store_relaxed(&st->cnt.dropped_bytes, (admit ? 0 : req->bytes) | tag);
	sluice_way_publish(t, w, &st->word, frozen + 1, req->want);
	return admit ? BUCKET_PASS : BUCKET_DROP;
}

#endif /* SLUICE_LIB_ALGOS_LOG_H */
