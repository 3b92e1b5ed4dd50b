/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The set tables' protocol (struct sluice_set_tags and the sets of
 * sluice_abi.h), one copy compiled by both the XDP program and the controller.
 * Every source table (IPv4, IPv6, and the sliding log's) runs it; a way is
 * named by its set's tag line, its index, and its bucket's word. Plain C with
 * the __sync builtins, which clang's BPF target and GCC both provide as full
 * barriers. Ordering: the writers below rely on stores being seen in program
 * order and the readers on loads not passing loads (x86-64's TSO; the XDP
 * program and the controller run on one machine).
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
 *   4. publishes its key, a full barrier: no CPU finds a half-written bucket
 *      (sluice_way_publish).
 * So a way's word only grows, across every bucket it holds: no value repeats,
 * and no stale compare-and-swap can match (no ABA). Counters are tagged with
 * the generation instead, as they are added to, not replaced.
 *
 * Which way a new bucket takes is sluice_way_rank's: see sluice_abi.h.
 */
#ifndef SLUICE_SETTABLE_H
#define SLUICE_SETTABLE_H

#include <linux/types.h>
#include "sluice_abi.h"
#include "sluice_algos.h"

/* A read the compiler must perform where it is written: another CPU writes it. */
#define SLUICE_READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))
#define SLUICE_WRITE_ONCE(x, v) (*(volatile __typeof__(x) *)&(x) = (v))

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
	__s32 v = (__s32)(SLUICE_READ_ONCE(t->keep[SLUICE_WAY(w)]) - stamp);
	__u16 born = SLUICE_READ_ONCE(t->born[SLUICE_WAY(w)]);

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

/* Step 1: takes way w from `old` (a key or SLUICE_KEY_EMPTY); 0 if another CPU was first. */
static inline int sluice_way_claim(struct sluice_set_tags *t, int w, __u64 old)
{
	return __sync_val_compare_and_swap(&t->key[SLUICE_WAY(w)], old, SLUICE_KEY_BUSY) == old;
}

/* Step 1 undone: the way holds `old` again, untouched. */
static inline void sluice_way_unclaim(struct sluice_set_tags *t, int w, __u64 old)
{
	__sync_lock_test_and_set(&t->key[SLUICE_WAY(w)], old);
}

/* Step 2: freezes the word of a claimed way's bucket; 1 and the frozen (odd)
 * value in *frozen, or 0 if the old bucket's lock stayed held for
 * SLUICE_LOCK_RETRIES reads. */
static inline int sluice_way_freeze(struct sluice_set_tags *t, int w, __u64 *word, __u64 *frozen)
{
	int locked = SLUICE_READ_ONCE(t->gen[SLUICE_WAY(w)]) & 1, i;

	for (i = 0; i < SLUICE_LOCK_RETRIES; i++) {
		__u64 h = SLUICE_READ_ONCE(*word);
		__u64 f = (h | 1) + 2;

		if (locked && (h & 1))
			continue; /* a charger of the old bucket holds its lock */
		if (__sync_val_compare_and_swap(word, h, f) == h) {
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
	gen = (__u16)((((t->gen[w] >> 1) + 1) << 1) | (locked ? 1 : 0));
	t->gen[w] = gen;
	t->keep[w] = sluice_stamp(now_ns);
	t->born[w] = sluice_born(now_ns);
	return sluice_gen_tag(gen);
}

/* Step 4: the bucket's word, then its key. */
static inline void sluice_way_publish(struct sluice_set_tags *t, int w, __u64 *word, __u64 value, __u64 key)
{
	SLUICE_WRITE_ONCE(*word, value);
	__sync_lock_test_and_set(&t->key[SLUICE_WAY(w)], key); /* publish: a full barrier */
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

	__builtin_memcpy(&st->algo, &init->algo, sizeof(st->algo));
	if (gcra)
		st->algo.gcra.off = frozen + 1 - sluice_ns_to_ticks(now_ns);
	st->cnt.passed_packets = init->cnt.passed_packets | tag;
	st->cnt.passed_bytes = init->cnt.passed_bytes | tag;
	st->cnt.dropped_packets = init->cnt.dropped_packets | tag;
	st->cnt.dropped_bytes = init->cnt.dropped_bytes | tag;
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
	keep = SLUICE_READ_ONCE(t->keep[w]);
	born = SLUICE_READ_ONCE(t->born[w]);
	if (born == SLUICE_BORN_SETTLED) {
		want = (__s32)(full - stamp) > 0 ? full : stamp;
		if ((__s32)(want - keep) > 0 && SLUICE_READ_ONCE(t->key[w]) == key)
			SLUICE_WRITE_ONCE(t->keep[w], want);
		return;
	}
	/* On probation, and its source already back: nothing moves within a stamp. */
	if ((__s32)(stamp - keep) <= 0 && (born & SLUICE_BORN_RETURNED))
		return;
	if (SLUICE_READ_ONCE(t->key[w]) != key)
		return;
	/* Units since it was made: a signed difference of born[]'s top 15 bits. */
	age = (__s16)((__u16)((now_ns >> SLUICE_BORN_SHIFT) << 1) - (born & ~SLUICE_BORN_RETURNED)) >> 1;
	if (age < (SLUICE_PROBATION_STAMPS >> (SLUICE_BORN_SHIFT - SLUICE_STAMP_SHIFT)) &&
	    (__s32)(stamp - keep) < SLUICE_PROBATION_STAMPS) {
		/* Still on probation: keep[] is when it was last seen. */
		if (!(born & SLUICE_BORN_RETURNED))
			SLUICE_WRITE_ONCE(t->born[w], born | SLUICE_BORN_RETURNED);
		if ((__s32)(stamp - keep) > 0)
			SLUICE_WRITE_ONCE(t->keep[w], stamp);
		return;
	}
	SLUICE_WRITE_ONCE(t->keep[w], (__s32)(full - stamp) > 0 ? full : stamp);
	SLUICE_WRITE_ONCE(t->born[w], SLUICE_BORN_SETTLED);
}

/* Empties way w if it still holds `key` (a deleted rule's bucket); 1 if it did. */
static inline int sluice_way_release(struct sluice_set_tags *t, int w, __u64 key)
{
	return __sync_val_compare_and_swap(&t->key[SLUICE_WAY(w)], key, SLUICE_KEY_EMPTY) == key;
}

#endif /* SLUICE_SETTABLE_H */
