/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The set tables' protocol (struct sluice_set_tags and the sets of
 * sluice_abi.h), one copy compiled by both the XDP program and the controller.
 * Every source table (IPv4, IPv6, and the sliding log's) runs it; a way is
 * named by its set's tag line, its index, and its bucket's word.
 * docs/design/source-table.md tells it in one page.
 *
 * A way holds one bucket at a time. To replace it, a CPU
 *   1. claims the way: compare-and-swap of its key from what it read to
 *      SLUICE_KEY_BUSY (sluice_way_claim). Nobody else can claim it now, and a
 *      charger that re-checks the key sees it is no longer its bucket;
 *   2. freezes the bucket's word (sluice_way_freeze): a compare-and-swap to an
 *      odd value above every value it held. A compare-and-swap begun on the
 *      old bucket can no longer land, and a lock holder of the old bucket has
 *      released first (the word of a locked algorithm is odd while held). If
 *      the lock stays held, the way is given back (sluice_way_unclaim);
 *   3. writes the new bucket's generation (which tags its counters) and
 *      stamps (sluice_way_begin), then the bucket, its address (IPv6), and
 *      its word above the frozen value;
 *   4. publishes its key (sluice_way_publish): no CPU finds a half-written
 *      bucket.
 * So a way's word only grows, across every bucket it holds: no value repeats,
 * and no stale compare-and-swap can match (no ABA). Counters are tagged with
 * the generation instead, as they are added to, not replaced.
 *
 * Memory ordering. Every access to a shared word goes through the accessors
 * of sluice_atomic.h, each named for the ordering it needs:
 *
 *   word            written by                      read by
 *   key[w]          claim, release: CAS (full);     lookups: acquire (gates the
 *                   publish, unclaim: exchange      bucket); re-checks after a
 *                   (full; release needed)          copy: acquire fence first
 *   gen[w]          the claimer only, while BUSY:   chargers, readers: acquire
 *                   relaxed (key's publish orders)  (gates counters and locking)
 *   keep[w],born[w] chargers (touch), the claimer:  victim choice: relaxed (they
 *                   relaxed; a lost write           only rank; a stale one
 *                   misranks one bucket             misranks one bucket)
 *   bucket word     freeze, GCRA charge, lock: CAS  chargers, readers: acquire
 *                   (full); unlock: exchange        (a sequence lock's begin);
 *                   (full); publish: relaxed        its re-read after an
 *                   before key's release            acquire fence
 *   algorithm state the claimer, lock holders:      optimistic copies: relaxed,
 *   and addr[w]     relaxed, after the claim's or   then an acquire fence and a
 *                   the lock's release fence        re-read of word/key/gen
 *   counters        chargers: CAS/fetch-add (full); readers: relaxed (the tag
 *                   the claimer: relaxed; reset:    says which bucket's)
 *                   CAS (full) while the tag is its
 *   gcra.off        the claimer: relaxed; a         chargers: relaxed, checked
 *                   charger taking a cluster grant  by the word's re-read
 *                   (bpf/lib/grants.h): CAS (full)
 *   gcra.granted    the claimer; a grant's taker:   the taker, the cluster sync:
 *                   CAS (full)                      relaxed
 *
 * The writer's rule of a sequence lock holds for both the claim and a lock
 * holder: a compare-and-swap (full) takes the way or the lock, then a release
 * fence, so that a reader that copied any value written after it sees, past
 * its own acquire fence, that the key or the word moved.
 *
 * Per side:
 *  - user space (the controller, C or C++): the compiler's __atomic builtins
 *    with the ordering named (__ATOMIC_RELAXED, _ACQUIRE, _RELEASE, _SEQ_CST
 *    for every read-modify-write). Correct on any architecture as far as the
 *    C++ memory model goes, but the program's side is only checked on
 *    x86-64, so user space refuses to build elsewhere (below), as does the
 *    CMake configure.
 *  - BPF: clang 14 (Debian 12) has no BPF load-acquire or store-release
 *    instruction. The x86-64 JIT turns a BPF load or store into a plain mov,
 *    and x86-64 is TSO: every load is an acquire and every store a release.
 *    The __sync builtins become locked instructions (lock cmpxchg, xchg, lock
 *    xadd): full barriers. So on the BPF side an acquire load is a volatile
 *    load followed by a compiler barrier, a release store a compiler barrier
 *    followed by a volatile store, a fence a compiler barrier, and every
 *    read-modify-write a __sync builtin. That reasoning holds for x86-64
 *    only: the JIT of a weakly ordered CPU (arm64) emits plain loads and
 *    stores that are neither; check this protocol there (and use real
 *    acquire/release, clang 18's BPF load-acquire) before building for it.
 */
#ifndef SLUICE_SETTABLE_H
#define SLUICE_SETTABLE_H

#include <linux/types.h>
#include "sluice_abi.h"
#include "sluice_algos.h"
#include "sluice_atomic.h"


/* Copies n 64-bit words of a bucket that other CPUs may read or write at the
 * same time, one relaxed access each (never a memcpy, which may tear a word). */
static inline void sluice_words_load(__u64 *dst, const __u64 *src, int n)
{
	int i;

	for (i = 0; i < n; i++)
		dst[i] = sluice_load_relaxed(&src[i]);
}

static inline void sluice_words_store(__u64 *dst, const __u64 *src, int n)
{
	int i;

	for (i = 0; i < n; i++)
		sluice_store_relaxed(&dst[i], src[i]);
}

#define SLUICE_WAY(w) ((w) & (SLUICE_SET_WAYS - 1))

static inline __u32 sluice_stamp(__u64 ns)
{
	return (__u32)(ns >> SLUICE_STAMP_SHIFT);
}

/* born[] of a bucket made at `ns`: never the settled mark, even once returned. */
static inline __u16 sluice_born(__u64 ns)
{
	__u16 b = (__u16)((ns >> SLUICE_BORN_SHIFT) << 1);

	return (b | SLUICE_BORN_RETURNED) == SLUICE_BORN_SETTLED ? b - 2 : b;
}

/* The stamp a GCRA arrival time (in ticks) falls in. */
static inline __u32 sluice_tick_stamp(__u64 ticks)
{
	return (__u32)(ticks >> (SLUICE_STAMP_SHIFT + SLUICE_TICK_SHIFT));
}

/*
 * How much way w's bucket is worth keeping, at `stamp`: the lowest goes first.
 * A settled bucket: keep[] - stamp, negative for a full bucket idle that long,
 * positive for one in debt. A bucket on probation ranks as a full bucket last
 * seen SLUICE_PROBATION_STAMPS before it really was, twice that if its source
 * sent one packet only, whatever its debt: below every settled bucket seen or
 * in debt within that time. Signed differences, so a way stamped by a CPU
 * whose clock reads a little ahead is the freshest, not 2^32 stamps old.
 */
static inline __s32 sluice_way_rank(const struct sluice_set_tags *t, int w, __u32 stamp)
{
	__s32 v = (__s32)(sluice_load_relaxed(&t->keep[SLUICE_WAY(w)]) - stamp);
	__u16 born = sluice_load_relaxed(&t->born[SLUICE_WAY(w)]);

	if (v > (1 << 29))
		v = 1 << 29;
	if (v < -(1 << 29))
		v = -(1 << 29);
	if (born != SLUICE_BORN_SETTLED)
		v = (v < 0 ? v : 0) -
		    (born & SLUICE_BORN_RETURNED ? SLUICE_PROBATION_STAMPS : 2 * SLUICE_PROBATION_STAMPS);
	return v;
}

/* Whether a bucket whose keep[] read `keep` at `stamp` was active: its source
 * sent a packet in the last SLUICE_PROBATION_STAMPS, or it is in debt. */
static inline int sluice_way_active(__u32 keep, __u32 stamp)
{
	return (__s32)(stamp - keep) < SLUICE_PROBATION_STAMPS;
}

/* The tag of a generation, as its counters carry it. */
static inline __u64 sluice_gen_tag(__u16 gen)
{
	return (__u64)(__u8)(gen >> 1) << SLUICE_CNT_TAG_SHIFT;
}

/* Step 1: takes way w from `old` (a key or SLUICE_KEY_EMPTY); 0 if another
 * CPU was first. A full barrier, then a release fence: whatever this CPU
 * writes into the way from now on, a reader that copies it sees the key move
 * when it re-checks. */
static inline int sluice_way_claim(struct sluice_set_tags *t, int w, __u64 old)
{
	if (sluice_cas(&t->key[SLUICE_WAY(w)], old, SLUICE_KEY_BUSY) != old)
		return 0;
	sluice_fence_release();
	return 1;
}

/* Step 1 undone: the way holds `old` again, untouched. */
static inline void sluice_way_unclaim(struct sluice_set_tags *t, int w, __u64 old)
{
	sluice_xchg(&t->key[SLUICE_WAY(w)], old);
}

/* Step 2: freezes the word of a claimed way's bucket; 1 and the frozen (odd)
 * value in *frozen, or 0 if the old bucket's lock stayed held for
 * SLUICE_LOCK_RETRIES reads. */
static inline int sluice_way_freeze(struct sluice_set_tags *t, int w, __u64 *word, __u64 *frozen)
{
	int locked = sluice_load_acquire(&t->gen[SLUICE_WAY(w)]) & 1, i;

	for (i = 0; i < SLUICE_LOCK_RETRIES; i++) {
		__u64 h = sluice_load_acquire(word);
		__u64 f = (h | 1) + 2;

		if (locked && (h & 1))
			continue; /* a charger of the old bucket holds its lock */
		if (sluice_cas(word, h, f) == h) {
			sluice_fence_release(); /* as after the claim */
			*frozen = f;
			return 1;
		}
	}
	return 0;
}

/* Step 3, the tag line: a new generation (`locked`: the bucket's word is a
 * lock), on probation, seen at `now`. Returns the tag its counters carry. */
static inline __u64 sluice_way_begin(struct sluice_set_tags *t, int w, int locked, __u64 now_ns)
{
	__u16 gen;

	w = SLUICE_WAY(w);
	gen = (__u16)((((sluice_load_relaxed(&t->gen[w]) >> 1) + 1) << 1) | (locked ? 1 : 0));
	sluice_store_relaxed(&t->gen[w], gen);
	sluice_store_relaxed(&t->keep[w], sluice_stamp(now_ns));
	sluice_store_relaxed(&t->born[w], sluice_born(now_ns));
	return sluice_gen_tag(gen);
}

/* Step 4: the bucket's word, then its key: an exchange, a full barrier (a
 * release is what it needs: everything written into the way before it). */
static inline void sluice_way_publish(struct sluice_set_tags *t, int w, __u64 *word, __u64 value, __u64 key)
{
	sluice_store_relaxed(word, value);
	sluice_xchg(&t->key[SLUICE_WAY(w)], key);
}

/* Step 3 for an IPv6 way: the address line of way w, before its bucket. */
static inline void sluice_way_set_addr(struct sluice_addr6 *addrs, int w, const struct sluice_addr6 *addr)
{
	sluice_store_relaxed(&addrs[SLUICE_WAY(w)].hi, addr->hi);
	sluice_store_relaxed(&addrs[SLUICE_WAY(w)].lo, addr->lo);
}

/*
 * Steps 3 and 4 for a source bucket (struct sluice_source_state) `st`, way w
 * of the set whose tags are `t`: writes `init` and publishes it under `key`.
 * For the GCRA form (gcra != 0), init->word is how far the new bucket's
 * theoretical arrival time is ahead of now (0 to its capacity), and the
 * way's word becomes frozen + 1 + that, above every value it held, with
 * algo.gcra.off set so that word - off is that arrival time. For the others,
 * init->algo is the state and the word becomes frozen + 1: even, unlocked.
 * init's counters are untagged.
 */
static inline void sluice_way_install(struct sluice_set_tags *t, struct sluice_source_state *st, int w,
				      __u64 frozen, const struct sluice_source_state *init, int gcra,
				      __u64 now_ns, __u64 key)
{
	__u64 tag = sluice_way_begin(t, w, !gcra, now_ns);
	union sluice_algo_state algo = init->algo;

	if (gcra)
		algo.gcra.off = frozen + 1 - sluice_ns_to_ticks(now_ns);
	sluice_words_store((__u64 *)&st->algo, (const __u64 *)&algo, sizeof(algo) / sizeof(__u64));
	sluice_store_relaxed(&st->cnt.passed_packets, init->cnt.passed_packets | tag);
	sluice_store_relaxed(&st->cnt.passed_bytes, init->cnt.passed_bytes | tag);
	sluice_store_relaxed(&st->cnt.dropped_packets, init->cnt.dropped_packets | tag);
	sluice_store_relaxed(&st->cnt.dropped_bytes, init->cnt.dropped_bytes | tag);
	sluice_way_publish(t, w, &st->word, frozen + 1 + (gcra ? init->word : 0), key);
}

/*
 * After a charge of way w's bucket at `now`: `full` is the stamp from which
 * its state will equal a fresh bucket's. A bucket on probation leaves it at a
 * packet SLUICE_PROBATION_STAMPS or more after it was made (or after a
 * silence that long); until then keep[] is when it was last seen (and born[]
 * notes that its source sent a second packet), and then the later of that
 * and `full`. Written only when it moves forward, and only while the way
 * still holds `key` (a charger that lost its bucket a moment ago has no
 * business here; what slips past in between misranks one bucket).
 */
static inline void sluice_way_touch(struct sluice_set_tags *t, int w, __u64 key, __u64 now_ns, __u32 full)
{
	__u32 stamp = sluice_stamp(now_ns), keep, want;
	__s16 age;
	__u16 born;

	w = SLUICE_WAY(w);
	keep = sluice_load_relaxed(&t->keep[w]);
	born = sluice_load_relaxed(&t->born[w]);
	if (born == SLUICE_BORN_SETTLED) {
		want = (__s32)(full - stamp) > 0 ? full : stamp;
		if ((__s32)(want - keep) > 0 && sluice_load_relaxed(&t->key[w]) == key)
			sluice_store_relaxed(&t->keep[w], want);
		return;
	}
	/* On probation, and its source already back: nothing moves within a stamp. */
	if ((__s32)(stamp - keep) <= 0 && (born & SLUICE_BORN_RETURNED))
		return;
	if (sluice_load_relaxed(&t->key[w]) != key)
		return;
	/* Units since it was made: a signed difference of born[]'s top 15 bits. */
	age = (__s16)((__u16)((now_ns >> SLUICE_BORN_SHIFT) << 1) - (born & ~SLUICE_BORN_RETURNED)) >> 1;
	if (age < (SLUICE_PROBATION_STAMPS >> (SLUICE_BORN_SHIFT - SLUICE_STAMP_SHIFT)) &&
	    (__s32)(stamp - keep) < SLUICE_PROBATION_STAMPS) {
		/* Still on probation: keep[] is when it was last seen. */
		if (!(born & SLUICE_BORN_RETURNED))
			sluice_store_relaxed(&t->born[w], born | SLUICE_BORN_RETURNED);
		if ((__s32)(stamp - keep) > 0)
			sluice_store_relaxed(&t->keep[w], stamp);
		return;
	}
	sluice_store_relaxed(&t->keep[w], (__s32)(full - stamp) > 0 ? full : stamp);
	sluice_store_relaxed(&t->born[w], SLUICE_BORN_SETTLED);
}

/*
 * Whether way w holds `key`'s bucket and it is off probation (its source came
 * back after SLUICE_PROBATION_STAMPS: a spoofed address, new at every packet,
 * never is). The key as a lookup reads it (acquire), born[] relaxed: a stale
 * born[] misjudges one drop's strike towards a ban (bpf/lib/bans.h).
 */
static inline int sluice_way_settled(const struct sluice_set_tags *t, int w, __u64 key)
{
	w = SLUICE_WAY(w);
	return sluice_load_acquire(&t->key[w]) == key && sluice_load_relaxed(&t->born[w]) == SLUICE_BORN_SETTLED;
}

/* Empties way w if it still holds `key` (a deleted rule's bucket); 1 if it did. */
static inline int sluice_way_release(struct sluice_set_tags *t, int w, __u64 key)
{
	return sluice_cas(&t->key[SLUICE_WAY(w)], key, SLUICE_KEY_EMPTY) == key;
}

/*
 * The rest of the protocol, as both sides run it.
 */

/* Whether way w of `t` still holds `key`, re-checked after copying what it
 * held: the copy's reads are done first (an acquire fence). */
static inline int sluice_way_still(const struct sluice_set_tags *t, int w, __u64 key)
{
	sluice_fence_acquire();
	return sluice_load_acquire(&t->key[SLUICE_WAY(w)]) == key;
}

/* A locked algorithm's word: takes the lock from the even value `s` it read;
 * 1 if taken. A full barrier, then a release fence, as a claim. */
static inline int sluice_word_lock(__u64 *word, __u64 s)
{
	if ((s & 1) || sluice_cas(word, s, s + 1) != s)
		return 0;
	sluice_fence_release();
	return 1;
}

/* Releases a lock taken from `s`: an exchange (a full barrier), so the state
 * written under it is visible before the lock is seen free. */
static inline void sluice_word_unlock(__u64 *word, __u64 s)
{
	sluice_xchg(word, s + 2);
}

/* Adds `delta` to a counter word if it still carries `tag` (its bucket's
 * generation): 1 if it landed, 0 if the bucket was evicted (its counts went
 * with it) or `tries` compare-and-swaps all lost a race. With `fallback`
 * (a constant), a race lost that often ends in a fetch-and-add instead,
 * taken back if the word turns out to carry another tag (it landed on a
 * successor): 0 then. */
static inline int sluice_cnt_add(__u64 *c, __u64 tag, __u64 delta, const int tries, const int fallback)
{
	__u64 v = sluice_load_relaxed(c), old;
	int i;

	for (i = 0; i < tries; i++) {
		if ((v & ~SLUICE_CNT_VALUE_MASK) != tag)
			return 0;
		old = sluice_cas(c, v, v + delta);
		if (old == v)
			return 1;
		v = old;
	}
	if (!fallback)
		return 0;
	old = sluice_fetch_add(c, delta);
	if ((old & ~SLUICE_CNT_VALUE_MASK) == tag)
		return 1;
	sluice_fetch_add(c, -delta);
	return 0;
}

#endif /* SLUICE_SETTABLE_H */
