// SPDX-License-Identifier: GPL-2.0-only
// The previous release's state layout, frozen, and its conversion to this
// release's structs: what `sluice upgrade` (upgrade.cpp) reads of the state of
// sluice 0.2.7 (state ABI 7). Included by upgrade.cpp only.
#pragma once

#include <cstring>
#include <iterator>

#include "maps.h"
#include "sluice_abi.h"

namespace sluice {

// The previous release's layout: sluice 0.2.7, state ABI 7.
//
// A frozen copy of what this upgrade reads of 0.2.7's include/sluice_abi.h,
// never edited: the sluice_abi.h of today may change any struct, and each is
// converted from this copy field by field (the `now` overloads below). A map
// or field added today is created empty (or given its default) by the
// conversion; a map 0.2.7 had and this binary does not is not read.
// At the next release this file becomes a copy of this release's layout.
namespace abi7 {

struct meta {
	__u32 abi_version;
	__u32 next_rule_id;
	__u64 layout_hash;
	__u64 loaded_ns;
};
static_assert(sizeof(meta) == 24);

struct active {
	__u32 set; // bit 0: the live rule entries' set
	__u32 sync;
	__u32 slots[2];
};
static_assert(sizeof(active) == 16);

struct rule {
	__u32 id;
	__u8 action, proto, unit, per_prefix;
	__u16 dport_lo, dport_hi;
	__u8 inc_shift, algo, flags, pad;
	__u64 strictness;
	__u64 params[3]; // bucket: inc_mult, capacity, warmup; window: limit, window_ns, unused
};
static_assert(sizeof(rule) == 48);

struct rule_info {
	char name[32];
	__u8 addr[16];
	__u8 family, prefix_len, rate_unit, scope;
	__u32 rule_id;
	__u64 rate_amount, rate_period_ns, burst, fallback_amount, fallback_period_ns;
	__u32 cluster_hosts;
	__u8 fallback_unit, pad[3];
};
static_assert(sizeof(rule_info) == 104);

struct rule_counters {
	__u64 passed_packets, passed_bytes, dropped_packets, dropped_bytes, failopen_table, passed_contention;
};
static_assert(sizeof(rule_counters) == 48);

struct counter {
	__u64 packets, bytes;
};
static_assert(sizeof(counter) == 16);

// 0.2.7's global counters, by index: where each one's counts go today.
inline constexpr int COUNTER_INDEX[] = {
	SLUICE_CNT_PASS_NOT_IP,       SLUICE_CNT_PASS_NO_MATCH,     SLUICE_CNT_PASS_ALLOW,
	SLUICE_CNT_PASS_LIMIT,        SLUICE_CNT_PASS_SHADOW,       SLUICE_CNT_PASS_CONTENTION,
	SLUICE_CNT_DROP_RATE,         SLUICE_CNT_DROP_DENY,         SLUICE_CNT_FAILOPEN_PARSE,
	SLUICE_CNT_FAILOPEN_RULE,     SLUICE_CNT_FAILOPEN_TABLE,    SLUICE_CNT_DROP_MALFORMED,
	SLUICE_CNT_INFO_FRAGMENT,     SLUICE_CNT_INFO_L4_UNKNOWN,   SLUICE_CNT_INFO_NEW_BUCKET,
	SLUICE_CNT_INFO_EVICTED,      SLUICE_CNT_INFO_EVICTED_ACTIVE, SLUICE_CNT_INFO_ENCAPSULATED,
	SLUICE_CNT_INFO_EVENTS_LOST,  SLUICE_CNT_INFO_EVICTED_V6,   SLUICE_CNT_INFO_EVICTED_ACTIVE_V6,
};

struct config {
	__u64 hash_seed;
	__u32 src4_sets, src6_sets, log4_sets, log6_sets;
};
static_assert(sizeof(config) == 24);

struct set_tags {
	__u64 key[4];
	__u32 keep[4];
	__u16 born[4];
	__u16 gen[4];
};
static_assert(sizeof(set_tags) == 64);

struct source_counters {
	__u64 passed_packets, passed_bytes, dropped_packets, dropped_bytes; // generation tag in the top 8 bits
};

struct source_state {
	__u64 word;
	__u64 algo[3]; // union sluice_algo_state: the rule's algorithm's words
	source_counters cnt;
};
static_assert(sizeof(source_state) == 64);

struct addr6 {
	__u64 hi, lo;
};

struct set_v4 {
	set_tags tag;
	source_state way[4];
};
static_assert(sizeof(set_v4) == 320);

struct set_v6 {
	set_tags tag;
	addr6 addr[4];
	source_state way[4];
};
static_assert(sizeof(set_v6) == 384);

struct log_state {
	__u64 word;
	__u32 head, pad;
	__u64 ring[64];
	source_counters cnt;
};
static_assert(sizeof(log_state) == 560);

struct log_set_v4 {
	set_tags tag;
	log_state way[4];
};
static_assert(sizeof(log_set_v4) == 2304);

struct log_set_v6 {
	set_tags tag;
	addr6 addr[4];
	log_state way[4];
};
static_assert(sizeof(log_set_v6) == 2368);

struct pending_drops {
	__u32 set;
	__u8 way, table;
	__u16 gen;
	__u64 packets, bytes;
	__u8 caches[96]; // the throttle note and the drop memo: caches, not read
};
static_assert(sizeof(pending_drops) == 120);

struct owed {
	__u64 name, want, written, since, ticks, packets, bytes, shared_until;
};
static_assert(sizeof(owed) == 64);

struct frag_key {
	__u8 family, proto;
	__u16 pad;
	__u32 id;
	__u8 saddr[16], daddr[16];
};
static_assert(sizeof(frag_key) == 40);

struct frag_info {
	__u64 first_ns;
	__u16 dport;
	__u8 proto, ports_known;
	__u32 flags;
};
static_assert(sizeof(frag_info) == 16);

inline constexpr uint32_t MMAPABLE = BPF_F_MMAPABLE;

// Every map of 0.2.7, in its order: what its layout record's hash covers.
inline const MapLayout MAPS[] = {
	{"sluice_active", BPF_MAP_TYPE_ARRAY, 4, 16, 0},
	{"sluice_rules", BPF_MAP_TYPE_ARRAY, 4, 48, MMAPABLE},
	{"sluice_rinfo", BPF_MAP_TYPE_ARRAY, 4, 104, MMAPABLE},
	{"sluice_rcnt", BPF_MAP_TYPE_PERCPU_ARRAY, 4, 48, 0},
	{"sluice_d4top", BPF_MAP_TYPE_ARRAY, 4, 4, MMAPABLE},
	{"sluice_d4blk", BPF_MAP_TYPE_ARRAY, 4, 1024, MMAPABLE},
	{"sluice_lists", BPF_MAP_TYPE_ARRAY, 4, 64, MMAPABLE},
	{"sluice_match6", BPF_MAP_TYPE_LPM_TRIE, 24, 64, 0},
	{"sluice_src4", BPF_MAP_TYPE_ARRAY, 4, 320, MMAPABLE},
	{"sluice_src6", BPF_MAP_TYPE_ARRAY, 4, 384, MMAPABLE},
	{"sluice_log4", BPF_MAP_TYPE_ARRAY, 4, 2304, MMAPABLE},
	{"sluice_log6", BPF_MAP_TYPE_ARRAY, 4, 2368, MMAPABLE},
	{"sluice_cnt", BPF_MAP_TYPE_PERCPU_ARRAY, 4, 16, 0},
	{"sluice_meta", BPF_MAP_TYPE_ARRAY, 4, 24, 0},
	{"sluice_cfg", BPF_MAP_TYPE_ARRAY, 4, 24, 0},
	{"sluice_pend", BPF_MAP_TYPE_PERCPU_ARRAY, 4, 120, 0},
	{"sluice_frags", BPF_MAP_TYPE_LRU_HASH, 40, 16, 0},
	{"sluice_ifmtu", BPF_MAP_TYPE_HASH, 4, 4, 0},
	{"sluice_events", BPF_MAP_TYPE_RINGBUF, 0, 0, 0},
	{"sluice_thrott", BPF_MAP_TYPE_HASH, 24, 48, 0},
	{"sluice_then", BPF_MAP_TYPE_PROG_ARRAY, 4, 4, 0},
	{"sluice_owed", BPF_MAP_TYPE_PERCPU_ARRAY, 4, 64, 0},
};

/// The layout hash 0.2.7 records (layout_hash of MAPS; a unit test pins it).
inline uint64_t layout_hash7() { return layout_hash(MAPS); }

} // namespace abi7

// 0.2.7's structs converted to today's, field by field. A field added since
// takes its default here.

inline struct sluice_rule now(const abi7::rule &o)
{
	struct sluice_rule r = {};
	r.id = o.id;
	r.action = o.action;
	r.proto = o.proto;
	r.unit = o.unit;
	r.per_prefix = o.per_prefix;
	r.dport_lo = o.dport_lo;
	r.dport_hi = o.dport_hi;
	r.inc_shift = o.inc_shift;
	r.algo = o.algo;
	r.flags = o.flags; // no SLUICE_RULE_SPORT: any source port
	r.strictness = o.strictness;
	r.bucket.inc_mult = o.params[0]; // or window.limit: the same words
	r.bucket.capacity = o.params[1];
	r.bucket.warmup = o.params[2];
	// tcp_flags_mask 0 (0.2.7's pad byte is not read): any TCP flags.
	return r;
}

inline struct sluice_rule_info now(const abi7::rule_info &o)
{
	struct sluice_rule_info r = {};
	std::memcpy(r.name, o.name, sizeof(o.name));
	static_assert(sizeof(r.name) == sizeof(o.name));
	std::memcpy(r.addr, o.addr, sizeof(o.addr));
	r.family = o.family;
	r.prefix_len = o.prefix_len;
	r.rate_unit = o.rate_unit;
	r.scope = o.scope;
	r.rule_id = o.rule_id;
	r.rate_amount = o.rate_amount;
	r.rate_period_ns = o.rate_period_ns;
	r.burst = o.burst;
	r.fallback_amount = o.fallback_amount;
	r.fallback_period_ns = o.fallback_period_ns;
	r.cluster_hosts = o.cluster_hosts;
	r.fallback_unit = o.fallback_unit;
	return r;
}

inline struct sluice_active now(const abi7::active &o)
{
	struct sluice_active a = {};
	a.set = o.set;
	a.sync = o.sync;
	a.slots[0] = o.slots[0];
	a.slots[1] = o.slots[1];
	return a;
}

inline struct sluice_rule_counters now(const abi7::rule_counters &o)
{
	return {o.passed_packets, o.passed_bytes, o.dropped_packets, o.dropped_bytes, o.failopen_table,
		o.passed_contention};
}

inline struct sluice_counter now(const abi7::counter &o) { return {o.packets, o.bytes}; }

inline struct sluice_config now(const abi7::config &o) { return {o.hash_seed, o.src4_sets, o.src6_sets, o.log4_sets, o.log6_sets}; }

inline struct sluice_set_tags now(const abi7::set_tags &o)
{
	struct sluice_set_tags t = {};
	for (int w = 0; w < SLUICE_SET_WAYS; w++) {
		t.key[w] = o.key[w];
		t.keep[w] = o.keep[w];
		t.born[w] = o.born[w];
		t.gen[w] = o.gen[w];
	}
	return t;
}

inline struct sluice_source_counters now(const abi7::source_counters &o)
{
	return {o.passed_packets, o.passed_bytes, o.dropped_packets, o.dropped_bytes};
}

inline struct sluice_source_state now(const abi7::source_state &o)
{
	struct sluice_source_state s = {};
	s.word = o.word;
	static_assert(sizeof(s.algo) == sizeof(o.algo));
	std::memcpy(&s.algo, o.algo, sizeof(o.algo)); // each algorithm's words, unchanged
	s.cnt = now(o.cnt);
	return s;
}

inline struct sluice_log_state now(const abi7::log_state &o)
{
	struct sluice_log_state s = {};
	s.word = o.word;
	s.head = o.head;
	static_assert(sizeof(s.ring) == sizeof(o.ring));
	std::memcpy(s.ring, o.ring, sizeof(o.ring));
	s.cnt = now(o.cnt);
	return s;
}

inline struct sluice_addr6 now(const abi7::addr6 &o) { return {o.hi, o.lo}; }

template <class To, class From> inline To now_set(const From &o)
{
	To s = {};
	s.tag = now(o.tag);
	for (int w = 0; w < SLUICE_SET_WAYS; w++) {
		if constexpr (requires { o.addr; })
			s.addr[w] = now(o.addr[w]);
		s.way[w] = now(o.way[w]);
	}
	return s;
}
inline struct sluice_set_v4 now(const abi7::set_v4 &o) { return now_set<struct sluice_set_v4>(o); }
inline struct sluice_set_v6 now(const abi7::set_v6 &o) { return now_set<struct sluice_set_v6>(o); }
inline struct sluice_log_set_v4 now(const abi7::log_set_v4 &o) { return now_set<struct sluice_log_set_v4>(o); }
inline struct sluice_log_set_v6 now(const abi7::log_set_v6 &o) { return now_set<struct sluice_log_set_v6>(o); }

inline struct sluice_pending_drops now(const abi7::pending_drops &o)
{
	struct sluice_pending_drops p = {}; // its caches (throttle note, drop memo) empty
	p.set = o.set;
	p.way = o.way;
	p.table = o.table;
	p.gen = o.gen;
	p.packets = o.packets;
	p.bytes = o.bytes;
	return p;
}

inline struct sluice_owed now(const abi7::owed &o)
{
	return {o.name, o.want, o.written, o.since, o.ticks, o.packets, o.bytes, o.shared_until};
}

inline struct sluice_frag_key now(const abi7::frag_key &o)
{
	struct sluice_frag_key k = {};
	k.family = o.family;
	k.proto = o.proto;
	k.id = o.id;
	std::memcpy(k.saddr, o.saddr, 16);
	std::memcpy(k.daddr, o.daddr, 16);
	return k;
}

inline struct sluice_frag_info now(const abi7::frag_info &o)
{
	struct sluice_frag_info f = {};
	f.first_ns = o.first_ns;
	f.dport = o.dport;
	f.proto = o.proto;
	f.ports_known = o.ports_known; // 1: the destination port (PORTS_KNOWN); the source port and TCP flags unknown
	f.flags = o.flags;
	return f;
}

/// This binary's own structs: read as they are.
template <class T> inline T now(const T &same) { return same; }

} // namespace sluice
