/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Temporary bans: the check in front of every decision (ban_verdict) and
 * the strike a ban rule's drop counts towards a ban (ban_strike). The maps
 * and the rule's fields are in sluice_abi.h.
 *
 * A ban covers all of the source's traffic: it is checked before the caches
 * and the walk, so both builds (with caches, SLUICE_WALK_ONLY) check it the
 * same way. A strike is counted wherever the walk's decision is applied
 * (apply_rule, on the fast path and in the walk alike); the drop memo never
 * holds a drop of a rule with a ban (remember_drop), so no drop of one goes
 * uncounted.
 */
#ifndef SLUICE_LIB_BANS_H
#define SLUICE_LIB_BANS_H

#include "lib/clock.h"
#include "lib/events.h"
#include "lib/parse.h"

/* Per CPU: a ban's key and entry, built off the stack. */
struct ban_scratch {
	struct sluice_ban_key key;
	__u32 pad;
	struct sluice_ban ban;
	struct sluice_strike strike;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ban_scratch);
} sluice_ban_scratch SEC(".maps");

/* A ban key of the 16 address bytes `addr` (IPv4 in the first 4) of
 * `family` under prefix `len` (0-32 for IPv4): IPv4 maps to ::ffff:0:0/96. */
static __always_inline void ban_key(struct sluice_ban_key *k, const __u8 *addr, int family, __u32 len)
{
	if (family == 4) {
		__builtin_memset(k->addr, 0, 10);
		k->addr[10] = 0xff;
		k->addr[11] = 0xff;
		__builtin_memcpy(k->addr + 12, addr, 4);
		k->prefixlen = 96 + len;
	} else {
		__builtin_memcpy(k->addr, addr, 16);
		k->prefixlen = len;
	}
}

/* A ban event of `b` (kind SLUICE_EVENT_BAN or SLUICE_EVENT_UNBAN), keyed as
 * a throttle event of its bucket is, its prefix length in `pad`. */
static __always_inline void emit_ban_event(const struct sluice_ban *b, __u32 kind, __u64 now)
{
	struct sluice_event *e = bpf_ringbuf_reserve(&SLUICE_MAP_EVENTS, sizeof(*e), 0);
	int v4 = b->key.addr[10] == 0xff && b->key.addr[11] == 0xff && b->key.prefixlen >= 96 &&
		 !b->key.addr[0] && !b->key.addr[9];

	if (!e) {
		count_global(SLUICE_CNT_INFO_EVENTS_LOST, 0);
		return;
	}
	e->ns = now;
	e->since_ns = b->since_ns;
	e->kind = kind;
	e->key.bucket_id = b->bucket_id;
	__builtin_memset(e->key.addr, 0, sizeof(e->key.addr));
	if (v4) {
		e->key.family = SLUICE_TABLE_V4;
		e->pad = b->key.prefixlen - 96;
		__builtin_memcpy(e->key.addr, b->key.addr + 12, 4);
	} else {
		e->key.family = SLUICE_TABLE_V6;
		e->pad = b->key.prefixlen;
		__builtin_memcpy(e->key.addr, b->key.addr, 16);
	}
	bpf_ringbuf_submit(e, 0);
}

/*
 * Whether the packet's source is banned now: its longest ban in force
 * counts the drop. A ban found run out is removed, with its UNBAN event,
 * and the next longest looked at (two at most: a source under two bans of
 * different prefixes whose longer one ran out). A global function, its
 * frame apart from the walk's chain.
 */
__noinline int sluice_banned(const struct packet_info *pkt)
{
	struct sluice_ban_key key;
	struct sluice_ban *b;
	__u64 now;
	int i;

	if (!pkt)
		return 0; /* the verifier: arguments of a global function may be NULL */
	ban_key(&key, pkt->saddr, pkt->family, pkt->family == 4 ? 32 : 128);
	now = frag_clock();
	for (i = 0; i < 2; i++) {
		b = bpf_map_lookup_elem(&SLUICE_MAP_BANS, &key);
		if (!b)
			return 0;
		if ((__s64)(now - b->until_ns) < 0) {
			__sync_fetch_and_add(&b->drops, 1);
			return 1;
		}
		/* Run out: the CPU whose delete removes it reports it. */
		{
			struct sluice_ban gone;

			__builtin_memcpy(&gone, b, sizeof(gone));
			if (gone.key.prefixlen > 128)
				return 0;
			if (bpf_map_delete_elem(&SLUICE_MAP_BANS, &gone.key) == 0) {
				emit_ban_event(&gone, SLUICE_EVENT_UNBAN, now);
				count_global(SLUICE_CNT_INFO_UNBANS_EXPIRED, 0);
			}
		}
	}
	return 0;
}

/* The ban check in front of the decision: SLUICE_CNT_DROP_BAN for a banned
 * source, else 0. `on`: the live-set entry's ban switch (struct
 * sluice_active's bans); without bans, a branch. */
static __always_inline __u32 ban_verdict(const struct packet_info *pkt, __u32 on)
{
	if (!on)
		return 0;
	return sluice_banned(pkt) ? SLUICE_CNT_DROP_BAN : 0;
}

/* Whether the bucket req's charge just found (req->table, set_idx, way) is
 * off probation: a spoofed source, new at every packet, never is. */
static __always_inline int req_settled(const struct charge_req *req, const struct sluice_rule *rule)
{
	__u32 set = req->set_idx, w = req->way;
	const struct sluice_set_tags *t = NULL;

	if (rule->algo == SLUICE_ALGO_SLIDING_LOG) {
		if (req->table == SLUICE_TABLE_V4) {
			struct sluice_log_set_v4 *s = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V4, &set);

			t = s ? &s->tag : NULL;
		} else {
			struct sluice_log_set_v6 *s = bpf_map_lookup_elem(&SLUICE_MAP_LOGS_V6, &set);

			t = s ? &s->tag : NULL;
		}
	} else if (req->table == SLUICE_TABLE_V4) {
		struct sluice_set_v4 *s = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V4, &set);

		t = s ? &s->tag : NULL;
	} else {
		struct sluice_set_v6 *s = bpf_map_lookup_elem(&SLUICE_MAP_SOURCES_V6, &set);

		t = s ? &s->tag : NULL;
	}
	return t && sluice_way_settled(t, w, req->want);
}

/*
 * A drop by `rule` (a limit with a ban, in `slot`) of the bucket the
 * per-CPU request names: one strike. The rule's threshold of strikes within
 * its ban's duration (from the first) bans the bucket's key for that
 * duration, if its bucket is off probation and the table has room (else
 * SLUICE_CNT_INFO_BAN_TABLE_FULL: no ban is ever pushed out). A global
 * function: called after the charge, its frame beside the charge's chain.
 */
__noinline int sluice_ban_strike(const struct sluice_rule *rule, __u32 slot)
{
	struct sluice_throttle_key *tkey;
	struct ban_scratch *sc;
	struct charge_req *req;
	struct sluice_strike *s;
	__u32 zero = 0, lo;
	__u64 now, ns;
	int err;

	if (!rule)
		return 0; /* the verifier: arguments of a global function may be NULL */
	req = bpf_map_lookup_elem(&sluice_req, &zero);
	sc = bpf_map_lookup_elem(&sluice_ban_scratch, &zero);
	if (!req || !sc || !req_settled(req, rule))
		return 0;
	ns = (__u64)rule->ban.secs * 1000000000ULL;
	now = frag_clock();
	if (rule->ban.after > 1) {
		tkey = &req->tkey;
		tkey->bucket_id = rule->id;
		tkey->family = req->table;
		__builtin_memset(tkey->addr, 0, sizeof(tkey->addr));
		if (req->table == SLUICE_TABLE_V6) {
			__builtin_memcpy(tkey->addr, &req->addr, 16);
		} else {
			lo = (__u32)req->want;
			__builtin_memcpy(tkey->addr, &lo, 4);
		}
		s = bpf_map_lookup_elem(&SLUICE_MAP_STRIKES, tkey);
		if (!s || clock_since(now, s->start_ns) >= ns) {
			sc->strike.start_ns = now;
			sc->strike.count = 1;
			bpf_map_update_elem(&SLUICE_MAP_STRIKES, tkey, &sc->strike, BPF_ANY);
			return 0;
		}
		if (__sync_fetch_and_add(&s->count, 1) + 1 < rule->ban.after)
			return 0;
		bpf_map_delete_elem(&SLUICE_MAP_STRIKES, tkey);
	}
	if (req->table == SLUICE_TABLE_V6) {
		ban_key(&sc->key, (const __u8 *)&req->addr, 6, rule->per_prefix);
	} else {
		lo = (__u32)req->want;
		ban_key(&sc->key, (const __u8 *)&lo, 4, rule->per_prefix);
	}
	sc->ban.since_ns = now;
	sc->ban.until_ns = now + ns;
	sc->ban.drops = 0;
	sc->ban.slot = slot;
	sc->ban.bucket_id = rule->id;
	__builtin_memcpy(&sc->ban.key, &sc->key, sizeof(sc->key));
	sc->ban.pad = 0;
	err = bpf_map_update_elem(&SLUICE_MAP_BANS, &sc->key, &sc->ban, BPF_NOEXIST);
	if (err == -EEXIST)
		return 0; /* another CPU banned it a moment ago */
	if (err) {
		count_global(SLUICE_CNT_INFO_BAN_TABLE_FULL, 0);
		return 0;
	}
	count_global(SLUICE_CNT_INFO_BANS, 0);
	emit_ban_event(&sc->ban, SLUICE_EVENT_BAN, now);
	return 1;
}

#endif /* SLUICE_LIB_BANS_H */
