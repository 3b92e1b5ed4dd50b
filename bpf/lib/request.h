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
