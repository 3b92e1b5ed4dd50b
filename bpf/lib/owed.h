/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * What a CPU owes a GCRA-form bucket that several CPUs charge (struct
 * sluice_owed, "The bound" there): passes counted on this CPU's account and
 * written to the bucket's word later, settled, paid or flushed here.
 */
#ifndef SLUICE_LIB_OWED_H
#define SLUICE_LIB_OWED_H

#include "sluice_settable.h"
#include "lib/pending.h"

/* An account's settling against its bucket's word (sluice_owed_uncertain,
 * sluice_owed_settled_word) is in include/sluice_algos.h: `sluice upgrade`
 * settles the old program's accounts with the same functions. */

/* Possible CPUs, set by the controller when it loads the program (0: not
 * set): the bucket of one source is named by at most one owed slot per CPU. */
const volatile __u32 sluice_owed_cpus = 0;

/* Before a write of the word of GCRA-form bucket `st` that decided on the
 * arrival time `tat` at the clock `t` (ticks): where the write finds the
 * bucket full, it notes `t` in algo.gcra.full_at (if later; rounded up to
 * even, bit 0 being SLUICE_OWED_SURE), so that an account made on an earlier
 * word is not written as if stacked on it (struct sluice_owed). By
 * compare-and-swap: two CPUs noting at once keep the later clock. */
static __always_inline void owed_note_full(struct sluice_source_state *st, __u64 tat, __u64 t)
{
	__u64 f, n = (t + 1) & ~SLUICE_OWED_SURE;
	int i;

	if ((__s64)(tat - t) >= 0)
		return;
	f = sluice_load_relaxed(&st->algo.gcra.full_at);
	for (i = 0; i < 2 && (__s64)(n - (f & ~SLUICE_OWED_SURE)) > 0; i++)
		f = sluice_cas(&st->algo.gcra.full_at, f, n) == f ? n : sluice_load_relaxed(&st->algo.gcra.full_at);
}

/* After a write of `st` decided on the arrival time `tat` at the clock `t`
 * landed (owed_note_full noted `t` before it): where it refilled the bucket
 * of one source (rule `rule`) surely, its note is marked SLUICE_OWED_SURE.
 * Done by sluice_charge_owed's writes (owed_write_pass), which a bucket
 * charged from several CPUs takes: the fast path's and the walk's frames
 * have no room for it, and their refills are left unmarked (doubt, as
 * before, where one comes between an account and its settling).
 * Surely: the bucket with every account and doubt of every CPU's slot (one
 * per CPU, each at most SLUICE_OWED_MAX packets' and an eighth of the
 * capacity's charges) would have been full at `t` too, so GCRA fed every pass
 * made refilled it as the write did, and forgot every charge before it. */
static __always_inline void owed_mark_sure(struct sluice_source_state *st, const struct sluice_rule *rule,
					   __u64 tat, __u64 t)
{
	__u64 n = (t + 1) & ~SLUICE_OWED_SURE, most = rule->bucket.capacity / 8, p;

	if (!sluice_owed_cpus || rule->per_prefix != 32 || (__s64)(tat - t) >= 0)
		return;
	if (rule->unit == SLUICE_UNIT_PACKETS) {
		p = SLUICE_OWED_MAX * sluice_rule_cost_ticks(rule, 1);
		most = p < most ? p : most;
	}
	if (t - tat > most * sluice_owed_cpus)
		sluice_cas(&st->algo.gcra.full_at, n, n | SLUICE_OWED_SURE);
}

/* What an account of bucket `st` settles against (sluice_owed_uncertain):
 * the latest clock a write found the bucket full at, with SLUICE_OWED_SURE
 * where that write refilled it surely. Every write that may find it full
 * notes its clock there before it lands (owed_note_full), so an account
 * whose word's arrival time is not behind it was stacked on by no write that
 * refilled the bucket from a clock: writing it on top is exact. */
static __always_inline __u64 owed_settle_clock(struct sluice_source_state *st)
{
	return sluice_load_relaxed(&st->algo.gcra.full_at);
}

/* Whether doubt held in owed slot `o` (ticks from `since`) is spent: the
 * bucket's arrival time `tat` with it is behind the clock `now_t`, so a
 * bucket holding it would be full now, as GCRA forgets; or the bucket's note
 * `note` (owed_settle_clock) is a sure refill (SLUICE_OWED_SURE) from a clock
 * past since + ticks. Every charge behind the doubt was decided on a word
 * whose arrival time is at most since, so before that refill's write landed,
 * which forgot them with every charge before it. (Without the second, a CPU
 * that another CPU always writes first after a refill, as at each tick of a
 * coarse clock, never finds the bucket behind its clock, and keeps its doubt,
 * writing every pass.) */
static __always_inline int owed_doubt_spent(const struct sluice_owed *o, __u64 tat, __u64 now_t, __u64 note)
{
	if ((note & SLUICE_OWED_SURE) && (__s64)(o->since + o->ticks - (note & ~SLUICE_OWED_SURE)) < 0)
		return 1;
	return (__s64)(((__s64)(tat - o->since) > 0 ? tat : o->since) + o->ticks - now_t) < 0;
}

/*
 * Settles what owed slot `o` holds with the bucket it names, if its way still
 * holds that bucket (the key and generation), by compare-and-swap
 * (sluice_owed_settled_word), and adds its passes to the bucket's counters. Returns 1
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
	w = sluice_load_acquire(&st->word);
	for (i = 0; i < SLUICE_CAS_RETRIES; i++) {
		off = sluice_load_relaxed(&st->algo.gcra.off);
		if (sluice_load_acquire(&t->gen[way]) != gen || sluice_load_acquire(&t->key[way]) != o->want)
			goto gone; /* evicted: its charges and counts went with it */
		sluice_fence_acquire();
		old = sluice_load_acquire(&st->word);
		if (old != w) {
			w = old;
			continue;
		}
		if (o->packets) {
			want = owed_settle_clock(st);
			want = sluice_owed_settled_word(o, w, off, want, &doubt);
			if (want != w) {
				owed_note_full(st, w - off, o->since);
				old = sluice_cas(&st->word, w, want);
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
		if (o->ticks && owed_doubt_spent(o, w - off, now_t, owed_settle_clock(st)))
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
 * did (or did within SLUICE_OWED_SHARED_NS), the slot holds no doubt, the
 * bucket with the account is not full at this clock (`eff`, the arrival time
 * the pass is decided on, is not behind `now_t`: the account stays on the
 * word, "The bound" in struct sluice_owed), after the pass the account stays
 * within SLUICE_OWED_MAX packets and an eighth of the capacity (`owed` with
 * the pass), and the bucket (with the account) at least half full: `next` is
 * its arrival time after the pass. */
static __always_inline int may_owe(const struct sluice_owed *o, __u64 w, __u64 eff, __u64 owed, __u64 next,
				   __u64 now_t, const struct sluice_rule *rule, const struct charge_req *req)
{
	__u64 cap = rule->bucket.capacity;

	return (o->written != w || (__s64)(o->shared_until - req->now) > 0) && (o->packets || !o->ticks) &&
	       (__s64)(eff - now_t) >= 0 && o->packets + req->packets <= SLUICE_OWED_MAX && owed <= cap / 8 &&
	       next - now_t <= cap / 2;
}

/* The account after a pass that takes the bucket's arrival time `tat`
 * (with the account `owed`, not behind the clock: may_owe) to `next`: from
 * max(tat, since). */
static __always_inline __u64 owed_after_pass(const struct sluice_owed *o, __u64 owed, __u64 tat, __u64 next)
{
	if (!owed)
		return next - tat;
	return next - ((__s64)(tat - o->since) > 0 ? tat : o->since);
}

/* Puts a pass on this CPU's account (may_owe allowed it), which owes `owed`
 * ticks after it: nothing shared is written. The account sits on the word:
 * it starts from its arrival time `tat`, never from a clock beyond it. */
static __always_inline void owe_pass(struct sluice_owed *o, __u64 w, __u64 tat, __u64 owed,
				     const struct charge_req *req)
{
	if (!o->packets) {
		o->since = tat;
		o->written = w; /* the account's base */
	} else if ((__s64)(tat - o->since) > 0) {
		o->since = tat;
	}
	o->ticks = owed;
	o->packets += req->packets;
	o->bytes += req->bytes;
}

/* Pays what owed slot `o` holds for the bucket `st` (generation `gen`) by
 * writing `paid` over its word `w` (arrival time `tat`): the word after, this CPU's or the one
 * another CPU wrote first (then the slot still holds the account). */
static __always_inline __u64 owed_pay_word(struct sluice_owed *o, struct sluice_source_state *st, __u16 gen,
					   __u64 w, __u64 tat, __u64 paid)
{
	__u64 old;

	owed_note_full(st, tat, o->since);
	old = sluice_cas(&st->word, w, paid);
	if (old == w) {
		old = paid;
		settle_owed(o, &st->cnt, gen, old);
		o->ticks = 0;
	}
	return old;
}

/* Writes a pass, with what owed slot `o` holds, as `written` over the word
 * `w` of bucket `st` (generation `gen`, arrival time `tat` before; the pass
 * decided on `eff` under `rule`): what the compare-and-swap found, `w` where
 * it landed; then the slot owes nothing but doubt not yet spent, and a sure
 * refill is marked (owed_mark_sure). */
static __always_inline __u64 owed_write_pass(struct sluice_owed *o, struct sluice_source_state *st, __u16 gen,
					     __u64 w, __u64 written, __u64 tat, __u64 now_t,
					     const struct sluice_rule *rule, __u64 eff)
{
	__u64 old, doubt;

	owed_note_full(st, tat, now_t);
	if (o->packets)
		owed_note_full(st, tat, o->since);
	old = sluice_cas(&st->word, w, written);
	if (old == w) {
		owed_mark_sure(st, rule, eff, now_t);
		doubt = o->packets ? 0 : o->ticks;
		settle_owed(o, &st->cnt, gen, written);
		o->ticks = doubt;
		if (doubt && owed_doubt_spent(o, tat, now_t, owed_settle_clock(st)))
			o->ticks = 0;
	}
	return old;
}

/*
 * charge_gcra for a bucket this CPU's owed slot names, shared with another
 * CPU, or with passes or doubt in the slot (struct sluice_owed; see "The
 * bound" there). An account made while another write landed is settled
 * first (sluice_owed_settled_word), leaving doubt; then the decision includes what
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
	w = sluice_load_acquire(&st->word);
	for (i = 0; i < SLUICE_CAS_RETRIES; i++) {
		off = sluice_load_relaxed(&st->algo.gcra.off);
		if (sluice_load_acquire(&t->gen[SLUICE_WAY(req->way)]) != (__u16)req->count_gen ||
		    sluice_load_acquire(&t->key[SLUICE_WAY(req->way)]) != req->want)
			return -1;
		sluice_fence_acquire();
		old = sluice_load_acquire(&st->word);
		if (old != w) {
			w = old;
			continue;
		}
		tat = w - off;
		eff = owed_settle_clock(st);
		if (o->packets && sluice_owed_uncertain(o, w, off, eff)) {
			/* Another write landed on the account: settle what is certain. */
			eff = sluice_owed_settled_word(o, w, off, eff, &doubt);
			if (eff != w) {
				owed_note_full(st, tat, o->since);
				old = sluice_cas(&st->word, w, eff);
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
		/* sluice_gcra_admit's step, without its result's address, which would take stack. */
		next = sluice_gcra_next(eff, now_t, sluice_rule_cost_ticks(rule, req->cost));
		if (next - now_t > rule->bucket.capacity) {
			if (owed) {
				/* Pay what this CPU owes, then decide again. */
				w = owed_pay_word(o, st, (__u16)req->count_gen, w, tat, eff + off);
				continue;
			}
			req->full = sluice_tick_stamp(w - off);
			req_dropped_on(req, w, off, (__u16)req->count_gen);
			res = BUCKET_DROP;
			break;
		}
		req->full = sluice_tick_stamp(next);
		owed = owed_after_pass(o, owed, tat, next);
		if (may_owe(o, w, eff, owed, next, now_t, rule, req)) {
			owe_pass(o, w, tat, owed, req);
			/* Counted on account. */
			sluice_way_touch(t, req->way, req->want, req->now, req->full);
			return BUCKET_PASS;
		}
		old = owed_write_pass(o, st, (__u16)req->count_gen, w, next + off, tat, now_t, rule, eff);
		if (old == w) {
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

/* The walk's charge of req's bucket `st` (generation req->count_gen): where
 * this CPU's owed slot names it and owes it passes, they are paid first
 * (sluice_flush_owed), so that the walk decides with them; 1 if so. Where the
 * walk finds the bucket full, its clock is noted first (owed_note_full), as
 * the walk may write from it. A global function: the walk's frame has no
 * room for it inline. */
__noinline int sluice_owed_pay(struct charge_req *req, struct sluice_source_state *st)
{
	struct sluice_owed *o;

	if (!req || !st)
		return 0; /* the verifier: arguments of a global function may be NULL */
	owed_note_full(st, sluice_load_acquire(&st->word) - sluice_load_relaxed(&st->algo.gcra.off),
		       sluice_ns_to_ticks(req->now));
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

#endif /* SLUICE_LIB_OWED_H */
