/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The IPv4 source table's protocol (struct sluice_set_v4, sluice_abi.h), one
 * copy compiled by both the XDP program and the controller. Plain C with the
 * __sync builtins, which clang's BPF target and GCC both provide as full
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
 *   3. writes the new bucket, its generation (which tags its counters), its
 *      stamps, and its word above the frozen value (sluice_way_install);
 *   4. publishes its key, a full barrier: no CPU finds a half-written bucket.
 * So a way's word only grows, across every bucket it holds: no value repeats,
 * and no stale compare-and-swap can match (no ABA). Counters are tagged with
 * the generation instead, as they are added to, not replaced.
 */
#ifndef SLUICE_SETTABLE_H
#define SLUICE_SETTABLE_H

#include <linux/types.h>
#include "sluice_abi.h"

/* A read the compiler must perform where it is written: another CPU writes it. */
#define SLUICE_READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))
#define SLUICE_WRITE_ONCE(x, v) (*(volatile __typeof__(x) *)&(x) = (v))

/* Stamps since way w was seen, as a signed difference: a way stamped by a CPU
 * whose clock reads a little ahead is the freshest (age 0), not 2^32 old. */
static inline __s32 sluice_way_age(const struct sluice_set_v4 *set, int w, __u32 stamp)
{
	__s32 age = (__s32)(stamp - SLUICE_READ_ONCE(set->seen[w & (SLUICE_SET_WAYS - 1)]));

	return age > 0 ? age : 0;
}

/* Whether way w's source sent a packet in the last SLUICE_PROBATION_STAMPS,
 * given its age: a bucket on probation was last sent to when it was born,
 * which its stamp puts SLUICE_PROBATION_STAMPS before its real time. */
static inline int sluice_way_active(const struct sluice_set_v4 *set, int w, __s32 age)
{
	w &= SLUICE_SET_WAYS - 1;
	int probation = (__u16)(set->seen[w] + SLUICE_PROBATION_STAMPS) == set->born[w];

	return age < (probation ? 2 * SLUICE_PROBATION_STAMPS : SLUICE_PROBATION_STAMPS);
}

/* The tag of a generation, as its counters carry it. */
static inline __u64 sluice_gen_tag(__u16 gen)
{
	return (__u64)(__u8)(gen >> 1) << SLUICE_CNT_TAG_SHIFT;
}

/* Step 1: takes way w from `old` (a key or SLUICE_KEY_EMPTY); 0 if another CPU was first. */
static inline int sluice_way_claim(struct sluice_set_v4 *set, int w, __u64 old)
{
	return __sync_val_compare_and_swap(&set->key[w & (SLUICE_SET_WAYS - 1)], old, SLUICE_KEY_BUSY) == old;
}

/* Step 1 undone: the way holds `old` again, untouched. */
static inline void sluice_way_unclaim(struct sluice_set_v4 *set, int w, __u64 old)
{
	__sync_lock_test_and_set(&set->key[w & (SLUICE_SET_WAYS - 1)], old);
}

/* Step 2: freezes a claimed way's word; 1 and the frozen (odd) value in *frozen,
 * or 0 if the old bucket's lock stayed held for SLUICE_LOCK_RETRIES reads. */
static inline int sluice_way_freeze(struct sluice_set_v4 *set, int w, __u64 *frozen)
{
	struct sluice_source_state *st;
	int locked, i;

	w &= SLUICE_SET_WAYS - 1;
	st = &set->way[w];
	locked = SLUICE_READ_ONCE(set->gen[w]) & 1;
	for (i = 0; i < SLUICE_LOCK_RETRIES; i++) {
		__u64 h = SLUICE_READ_ONCE(st->word);
		__u64 f = (h | 1) + 2;

		if (locked && (h & 1))
			continue; /* a charger of the old bucket holds its lock */
		if (__sync_val_compare_and_swap(&st->word, h, f) == h) {
			*frozen = f;
			return 1;
		}
	}
	return 0;
}

/*
 * Steps 3 and 4: writes `init` into frozen way w and publishes it under `key`.
 * For the GCRA form (gcra != 0), init->word is how far the new bucket's
 * theoretical arrival time is ahead of now_t (0 to its capacity), and the
 * way's word becomes frozen + 1 + that, above every value it held, with
 * algo.gcra.off set so that word - off is that arrival time. For the others,
 * init->algo is the state and the word becomes frozen + 1: even, unlocked.
 * init's counters are untagged. The bucket starts on probation (sluice_abi.h).
 */
static inline void sluice_way_install(struct sluice_set_v4 *set, int w, __u64 frozen,
				      const struct sluice_source_state *init, int gcra, __u64 now_t,
				      __u32 stamp, __u64 key)
{
	struct sluice_source_state *st;
	__u16 gen;
	__u64 tag;

	w &= SLUICE_SET_WAYS - 1;
	st = &set->way[w];
	gen = (__u16)((((set->gen[w] >> 1) + 1) << 1) | (gcra ? 0 : 1));
	tag = sluice_gen_tag(gen);
	set->gen[w] = gen;
	set->seen[w] = stamp - SLUICE_PROBATION_STAMPS;
	set->born[w] = (__u16)stamp;
	__builtin_memcpy(&st->algo, &init->algo, sizeof(st->algo));
	if (gcra)
		st->algo.gcra.off = frozen + 1 - now_t;
	st->cnt.passed_packets = init->cnt.passed_packets | tag;
	st->cnt.passed_bytes = init->cnt.passed_bytes | tag;
	st->cnt.dropped_packets = init->cnt.dropped_packets | tag;
	st->cnt.dropped_bytes = init->cnt.dropped_bytes | tag;
	SLUICE_WRITE_ONCE(st->word, frozen + 1 + (gcra ? init->word : 0));
	__sync_lock_test_and_set(&set->key[w], key); /* publish: a full barrier */
}

/* Empties way w if it still holds `key` (a deleted rule's bucket); 1 if it did. */
static inline int sluice_way_release(struct sluice_set_v4 *set, int w, __u64 key)
{
	return __sync_val_compare_and_swap(&set->key[w & (SLUICE_SET_WAYS - 1)], key, SLUICE_KEY_EMPTY) == key;
}

#endif /* SLUICE_SETTABLE_H */
