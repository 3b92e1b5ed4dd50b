/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The one ABI between the XDP program and the controller: map names and
 * limits, map keys and values, actions and counter indices. Both sides compile
 * this header; every struct has fixed-width fields, explicit padding and a size
 * assertion so that a layout change breaks the build, not production.
 *
 * Byte order: fields named addr* hold addresses in network order; every other
 * field is in host order.
 */
#ifndef SLUICE_ABI_H
#define SLUICE_ABI_H

#include <linux/types.h>

#ifdef __cplusplus
#define SLUICE_ASSERT_SIZE(type, n) static_assert(sizeof(type) == (n), #type " layout")
#else
#define SLUICE_ASSERT_SIZE(type, n) _Static_assert(sizeof(type) == (n), #type " layout")
#endif

/* Map names. The BPF object declares maps with exactly these identifiers; the
 * controller pins them under SLUICE_PIN_DIR with the same names. */
#define SLUICE_MAP_RULES         sluice_rules
#define SLUICE_MAP_RULE_INFO     sluice_rinfo
#define SLUICE_MAP_RULE_COUNTERS sluice_rcnt
#define SLUICE_MAP_MATCH_V4      sluice_match4
#define SLUICE_MAP_MATCH_V6      sluice_match6
#define SLUICE_MAP_SOURCES_V4    sluice_src4
#define SLUICE_MAP_SOURCES_V6    sluice_src6
#define SLUICE_MAP_COUNTERS      sluice_cnt
#define SLUICE_MAP_META          sluice_meta
#define SLUICE_PROG_NAME         sluice_xdp

#define SLUICE_STR_(x) #x
#define SLUICE_STR(x)  SLUICE_STR_(x)

#define SLUICE_PIN_DIR "/sys/fs/bpf/sluice"

/* Sizes fixed at build time. Rule and source table sizes are set at attach. */
#define SLUICE_DEFAULT_MAX_RULES   16384
#define SLUICE_DEFAULT_MAX_SOURCES 1000000
#define SLUICE_MAX_CANDIDATES      15 /* rules that may cover one address */
#define SLUICE_MAX_VLAN_DEPTH      2  /* 802.1ad + 802.1Q */
#define SLUICE_MAX_IPV6_EXT_HDRS   8  /* extension headers walked before giving up */
#define SLUICE_CAS_RETRIES         8  /* compare-and-swap attempts per packet */
#define SLUICE_NAME_LEN            32

enum sluice_action {
	SLUICE_ACTION_NONE  = 0, /* empty slot */
	SLUICE_ACTION_LIMIT = 1,
	SLUICE_ACTION_ALLOW = 2,
	SLUICE_ACTION_DENY  = 3,
};

enum sluice_unit {
	SLUICE_UNIT_PACKETS = 0,
	SLUICE_UNIT_BYTES   = 1,
};

/* Protocol selector; SLUICE_PROTO_ICMP matches ICMP on IPv4 and ICMPv6 on IPv6. */
enum sluice_proto {
	SLUICE_PROTO_ANY  = 0,
	SLUICE_PROTO_ICMP = 1,
	SLUICE_PROTO_TCP  = 6,
	SLUICE_PROTO_UDP  = 17,
};

/*
 * Global counters: a per-CPU array of struct sluice_counter indexed by this
 * enum. Every frame lands in exactly one of the "verdict" counters (up to
 * SLUICE_CNT_VERDICT_END); the ones after it are informational and overlap.
 */
enum sluice_counter_index {
	SLUICE_CNT_PASS_NOT_IP = 0,    /* not IPv4/IPv6 (ARP, LLDP...): untouched */
	SLUICE_CNT_PASS_NO_MATCH,      /* IP, but no rule covers it */
	SLUICE_CNT_PASS_ALLOW,         /* matched an allow rule */
	SLUICE_CNT_PASS_LIMIT,         /* within a limit rule's rate */
	SLUICE_CNT_DROP_RATE,          /* over a limit rule's rate */
	SLUICE_CNT_DROP_DENY,          /* matched a deny rule */
	SLUICE_CNT_FAILOPEN_PARSE,     /* malformed L2/L3: no source to charge */
	SLUICE_CNT_FAILOPEN_RULE,      /* a rule slot vanished under an update */
	SLUICE_CNT_FAILOPEN_TABLE,     /* bucket could not be created */
	SLUICE_CNT_FAILOPEN_CONTENTION,/* bucket update lost SLUICE_CAS_RETRIES races */
	SLUICE_CNT_VERDICT_END,
	SLUICE_CNT_INFO_FRAGMENT = SLUICE_CNT_VERDICT_END, /* non-first fragments */
	SLUICE_CNT_INFO_L4_UNKNOWN,    /* ports/protocol unreadable: matched conservatively */
	SLUICE_CNT_INFO_NEW_BUCKET,    /* buckets created (evicting when the table is full) */
	SLUICE_CNT_MAX,
};

struct sluice_counter {
	__u64 packets;
	__u64 bytes;
};
SLUICE_ASSERT_SIZE(struct sluice_counter, 16);

/* Per-rule counters: a per-CPU array indexed by rule slot. The drop reason is
 * the rule's action (rate for limit rules, deny for deny rules). */
struct sluice_rule_counters {
	__u64 passed_packets;
	__u64 passed_bytes;
	__u64 dropped_packets;
	__u64 dropped_bytes;
	__u64 failopen_table;      /* passed: bucket could not be created */
	__u64 failopen_contention; /* passed: bucket update kept losing races */
};
SLUICE_ASSERT_SIZE(struct sluice_rule_counters, 48);

/*
 * What the data plane needs of a rule: an array indexed by slot. A limit rule's
 * cost per packet in ticks is ceil(cost * inc_mult / 2^inc_shift), where cost
 * is 1 (packets) or the L3 length (bytes); see sluice_gcra.h.
 */
struct sluice_rule {
	__u32 id;         /* stable rule id; 0 = empty slot */
	__u8  action;     /* enum sluice_action */
	__u8  proto;      /* enum sluice_proto */
	__u8  unit;       /* enum sluice_unit */
	__u8  per_prefix; /* bucket aggregation prefix length: 32/128 = per address */
	__u16 dport_lo;   /* destination port range, inclusive; 0-65535 = any */
	__u16 dport_hi;
	__u8  inc_shift;
	__u8  pad[3];
	__u64 inc_mult;   /* ticks per unit, scaled by 2^inc_shift, rounded up */
	__u64 capacity;   /* burst in ticks: burst * ticks per unit, rounded down */
};
SLUICE_ASSERT_SIZE(struct sluice_rule, 32);

/* The user's view of a rule, kept beside it for the controller only. */
struct sluice_rule_info {
	char  name[SLUICE_NAME_LEN];
	__u8  addr[16];     /* network order; IPv4 in the first 4 bytes */
	__u8  family;       /* 4 or 6 */
	__u8  prefix_len;
	__u8  rate_unit;    /* how the rate was written: 0 packets, 1 bytes, 2 bits */
	__u8  pad[5];
	__u64 rate_amount;  /* rate = rate_amount units per rate_period_ns */
	__u64 rate_period_ns;
	__u64 burst;        /* packets or bytes */
	__u64 created_ns;   /* CLOCK_REALTIME at creation */
};
SLUICE_ASSERT_SIZE(struct sluice_rule_info, 88);

/* LPM trie keys (prefixlen first, as the kernel requires). */
struct sluice_lpm_v4 {
	__u32 prefixlen;
	__u8  addr[4];
};
SLUICE_ASSERT_SIZE(struct sluice_lpm_v4, 8);

struct sluice_lpm_v6 {
	__u32 prefixlen;
	__u8  addr[16];
};
SLUICE_ASSERT_SIZE(struct sluice_lpm_v6, 20);

/*
 * The rules that may apply to an address under a prefix, most specific first:
 * the prefix's own rules and those inherited from covering prefixes. The
 * controller compiles these lists; the data plane takes the first that matches.
 */
struct sluice_match_list {
	__u32 count;
	__u32 slots[SLUICE_MAX_CANDIDATES];
};
SLUICE_ASSERT_SIZE(struct sluice_match_list, 64);

/* Bucket keys: one bucket per (rule, source address masked to per_prefix). */
struct sluice_src_v4 {
	__u32 rule_id;
	__u8  addr[4];
};
SLUICE_ASSERT_SIZE(struct sluice_src_v4, 8);

struct sluice_src_v6 {
	__u32 rule_id;
	__u8  addr[16];
};
SLUICE_ASSERT_SIZE(struct sluice_src_v6, 20);

/* A bucket and its source's counters. */
struct sluice_source_state {
	__u64 tat; /* GCRA theoretical arrival time, in ticks (wraps; compare signed) */
	__u64 passed_packets;
	__u64 passed_bytes;
	__u64 dropped_packets;
	__u64 dropped_bytes;
};
SLUICE_ASSERT_SIZE(struct sluice_source_state, 40);

/* Controller bookkeeping: a one-entry array. */
struct sluice_meta {
	__u32 next_rule_id; /* ids are never reused, so no stale bucket meets a new rule */
	__u32 pad;
	__u64 loaded_ns;    /* CLOCK_REALTIME when the program was loaded */
};
SLUICE_ASSERT_SIZE(struct sluice_meta, 16);

#endif /* SLUICE_ABI_H */
