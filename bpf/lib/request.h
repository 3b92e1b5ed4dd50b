/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * What a packet asks of a bucket: the charge (packets, bytes, cost), the
 * request that carries it through the lookup, the charge and the counting
 * (struct charge_req), and the results a charge ends in.
 */
#ifndef SLUICE_LIB_REQUEST_H
#define SLUICE_LIB_REQUEST_H

#include "lib/maps.h"

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

/* A way a new bucket may take (sluice_choose_victim). */
struct victim {
	__u64 key;  /* what the way held */
	__u32 keep; /* its keep[], to tell whether it was active */
	__s32 rank; /* sluice_way_rank */
	int found;
	int way;    /* in the key's first set, or SLUICE_SET_WAYS + way in its second */
};

/*
 * A packet's request of a bucket, from the lookup to the count. Four concepts
 * share it, each a group below: the bucket asked for, the charge, what the
 * charge left for the caller, and the scratch of the global functions it
 * passes through. They share one per-CPU slot (sluice_req), not the stack,
 * for one reason, written here once: the chain of calls from the program to
 * the deepest global function has 512 bytes of stack in all, and a global
 * function takes one pointer to all of them rather than one argument each.
 */
struct charge_req {
	/* The bucket: its key `want` (IPv6: with its masked address `addr`), in
	 * table `table` (enum sluice_table), its two sets `set_a` and `set_b`,
	 * found at `set_idx` and `way`; the source's pending-drops slot
	 * (source_slot), a map key in a map value rather than on the stack. */
	struct {
		__u64 want;
		struct sluice_addr6 addr;
		__u32 set_a;
		__u32 set_b;
		__u32 set_idx;
		__u32 way;
		__u32 table;
		__u32 pending;
	};
	/* The charge (struct charge): at `now`, `cost` units in the rule's unit,
	 * the wire `packets` and `bytes` the frame carries. */
	struct {
		__u64 now;
		__u64 cost;
		__u64 packets;
		__u64 bytes;
	};
	/* What the charge left: the stamp `full` from which the bucket's state
	 * will equal a fresh bucket's (sluice_way_touch); a GCRA-form drop
	 * (`dropped`) with the bucket's word, offset and generation it was
	 * decided on, for the drop memo (req_dropped_on, remember_drop); the
	 * word a pass wrote (`written`: sluice_owed_wrote). */
	struct {
		__u32 full;
		__u32 dropped;
		__u64 drop_word;
		__u64 drop_off;
		__u32 drop_gen;
		__u32 pad;
		__u64 written;
	};
	/* Scratch: the way a lookup that missed chose for a new bucket
	 * (`victim`); sluice_note_drop's key and a new entry's bytes;
	 * sluice_count_drop's arguments, kept here across its calls; and
	 * sluice_take_grant's key (off its frame: it is a fourth call deep). */
	struct {
		struct victim victim;
		struct sluice_grant_key grant_key;
		struct sluice_throttle_key tkey;
		__u8 tzero[sizeof(struct sluice_throttle)];
		__u32 count_gen;
		__u32 count_pending;
	};
};

/*
 * Whether the way a charger found its bucket in (its key and, for IPv6, its
 * address) holds another bucket now: re-checked before every write, so a
 * charge lands only on the bucket of the key looked up. Relaxed loads: each
 * check is followed by the word's re-read (which vouches for what was read
 * with it) or made under a lock or after a compare-and-swap (full barriers).
 */
static __always_inline int owner_gone(const __u64 *key, const struct sluice_addr6 *addr,
				      const struct charge_req *req)
{
	if (sluice_load_relaxed(key) != req->want)
		return 1;
	return addr && (sluice_load_relaxed(&addr->hi) != req->addr.hi ||
			sluice_load_relaxed(&addr->lo) != req->addr.lo);
}

/* A GCRA-form drop decided on the bucket's word `w`, offset `off` and
 * generation `gen`: kept for the drop memo (remember_drop). */
static __always_inline void req_dropped_on(struct charge_req *req, __u64 w, __u64 off, __u16 gen)
{
	req->drop_word = w;
	req->drop_off = off;
	req->drop_gen = gen;
	req->dropped = 1;
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

#endif /* SLUICE_LIB_REQUEST_H */
