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
#define SLUICE_MAP_ACTIVE        sluice_active
#define SLUICE_MAP_DIR4_TOP      sluice_d4top
#define SLUICE_MAP_DIR4_BLOCKS   sluice_d4blk
#define SLUICE_MAP_LISTS         sluice_lists
#define SLUICE_MAP_MATCH_V6      sluice_match6
#define SLUICE_MAP_SOURCES_V4    sluice_src4
#define SLUICE_MAP_SOURCES_V6    sluice_src6
#define SLUICE_MAP_LOGS_V4       sluice_log4
#define SLUICE_MAP_LOGS_V6       sluice_log6
#define SLUICE_MAP_COUNTERS      sluice_cnt
#define SLUICE_MAP_META          sluice_meta
#define SLUICE_MAP_CONFIG        sluice_cfg
#define SLUICE_MAP_PENDING       sluice_pend
#define SLUICE_MAP_FRAGS         sluice_frags
#define SLUICE_MAP_IFACE_MTU     sluice_ifmtu
#define SLUICE_MAP_EVENTS        sluice_events
#define SLUICE_MAP_THROTTLED     sluice_thrott
#define SLUICE_MAP_THEN          sluice_then
#define SLUICE_MAP_OWED          sluice_owed
#define SLUICE_MAP_GRANTS        sluice_grants
#define SLUICE_MAP_BANS          sluice_bans
#define SLUICE_MAP_STRIKES       sluice_strike
#define SLUICE_PROG_NAME         sluice_xdp

#define SLUICE_STR_(x) #x
#define SLUICE_STR(x)  SLUICE_STR_(x)

#define SLUICE_PIN_DIR "/sys/fs/bpf/sluice"

/* Sizes fixed at build time. Rule and source table sizes are set at attach. */
#define SLUICE_DEFAULT_MAX_RULES   16384
#define SLUICE_DEFAULT_MAX_SOURCES 1000000
#define SLUICE_DEFAULT_MAX_LOG_SOURCES 16384 /* sliding-log buckets are 560 bytes */
#define SLUICE_MAX_LOG             64 /* sliding-log: packets remembered per bucket */
#define SLUICE_LIST_SLOTS          14 /* rules per match list; longer lists chain */
#define SLUICE_MAX_LIST_WALK       128 /* match lists walked per packet: the cover limit */
#define SLUICE_MAX_LAYERED         32  /* layered rules that may apply to one packet */
#define SLUICE_MAX_UNKNOWN_CHARGED 8   /* rules a packet that hides its port is charged to, before the strictest of the rest */
#define SLUICE_MAX_VLAN_DEPTH      8  /* VLAN tags walked; a deeper stack is dropped */
#define SLUICE_MAX_IPV6_EXT_HDRS   12 /* extension headers walked; beyond, the protocol is unknown */
#define SLUICE_FRAG_ENTRIES        8192 /* datagrams whose first fragment is remembered */
#define SLUICE_FRAG_TIMEOUT_NS     30000000000ULL /* as the kernel's ipfrag_time */
/* How long a reassembly queue can outlive its datagram's entry: the kernel
 * keeps one up to ip6frag_time (60 s; IPv4's ipfrag_time is 30 s), and a
 * second for its timer. */
#define SLUICE_FRAG_QUEUE_NS       61000000000ULL
#define SLUICE_MAX_IFACES          256
#define SLUICE_DEFAULT_MTU         1500 /* of an interface the controller did not record */
#define SLUICE_MTU_WIRE_FRAMES     0xffffffffu /* recorded for native mode: every frame is one wire packet */
#define SLUICE_MAX_RULE_ID         0xfffffffeu /* a key with id 0xffffffff could be SLUICE_KEY_BUSY */
#define SLUICE_CAS_RETRIES         8  /* compare-and-swap attempts per packet */
#define SLUICE_LOCK_RETRIES        256 /* reads of a held bucket lock before giving up */
#define SLUICE_NAME_LEN            32

enum sluice_action {
	SLUICE_ACTION_NONE  = 0, /* empty slot */
	SLUICE_ACTION_LIMIT = 1,
	SLUICE_ACTION_ALLOW = 2,
	SLUICE_ACTION_DENY  = 3,
};

/* Rate-limiting algorithm of a limit rule (see ../shared/ALGORITHMS.md). */
enum sluice_algo {
	SLUICE_ALGO_TOKEN_BUCKET   = 0, /* kept in GCRA form; with warm-up: tokens, last, cold */
	SLUICE_ALGO_GCRA           = 1, /* one theoretical arrival time, lock-free */
	SLUICE_ALGO_FIXED_WINDOW   = 2, /* count per aligned window */
	SLUICE_ALGO_SLIDING_LOG    = 3, /* times of the last N passes: exact */
	SLUICE_ALGO_SLIDING_WINDOW = 4, /* current + weighted previous window count */
	SLUICE_ALGO_COUNT,
};

#define SLUICE_RULE_SHADOW 0x1 /* count would-be drops, pass them */
/* Read the coarse clock (struct sluice_tick_clock: the last scheduler tick, one
 * tick of resolution, one load to read) instead of the precise one (tens of
 * ns). The controller sets it only where a tick is small beside the rule: a
 * bucket whose burst holds at least a tick's worth of rate, so what a tick
 * adds never overflows it, or a window of at least 100 ticks. The sliding log
 * always reads the precise clock. */
#define SLUICE_RULE_COARSE_CLOCK 0x2
/* Layered (`--continue`, limit rules only): a packet the rule passes goes on
 * to the next candidate instead of being decided here. */
#define SLUICE_RULE_CONTINUE     0x4
/* The rule selects source ports sport_lo-sport_hi (TCP and UDP); without it,
 * any source port. A flag, so that a rule entry whose new fields are zero
 * selects any source port and any TCP flags. */
#define SLUICE_RULE_SPORT        0x8

/* A cluster rule (--scope cluster): its buckets take the cluster sync's
 * grants (struct sluice_grant) when the walk charges them; the fast path
 * leaves them to the walk, so that a local rule pays nothing for grants. */
#define SLUICE_RULE_CLUSTER      0x10

/* TCP flag bits as the header's 13th byte holds them (RFC 9293, RFC 3168). */
#define SLUICE_TCP_FIN 0x01
#define SLUICE_TCP_SYN 0x02
#define SLUICE_TCP_RST 0x04
#define SLUICE_TCP_PSH 0x08
#define SLUICE_TCP_ACK 0x10
#define SLUICE_TCP_URG 0x20
#define SLUICE_TCP_ECE 0x40
#define SLUICE_TCP_CWR 0x80

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
	SLUICE_CNT_PASS_SHADOW,        /* over a shadow rule's limit: would drop, passed */
	SLUICE_CNT_PASS_CONTENTION,    /* decided a pass, but other CPUs kept winning the bucket: passed uncharged */
	SLUICE_CNT_DROP_RATE,          /* over a limit rule's rate */
	SLUICE_CNT_DROP_DENY,          /* matched a deny rule */
	SLUICE_CNT_FAILOPEN_PARSE,     /* malformed L2/L3 (the stack drops it) with no source
				        * to read, or from a source no rule covers */
	SLUICE_CNT_FAILOPEN_RULE,      /* a rule slot vanished under an update */
	SLUICE_CNT_FAILOPEN_TABLE,     /* bucket could not be created */
	SLUICE_CNT_DROP_MALFORMED,     /* more VLAN tags than walked, a tiny first fragment,
				        * a first fragment of another port than its key's
				        * entry; or malformed L3 from a source a rule covers */
	SLUICE_CNT_DROP_BAN,           /* from a source under a temporary ban (struct sluice_ban) */
	SLUICE_CNT_VERDICT_END,
	SLUICE_CNT_INFO_FRAGMENT = SLUICE_CNT_VERDICT_END, /* non-first fragments */
	SLUICE_CNT_INFO_L4_UNKNOWN,    /* ports/protocol unreadable: matched conservatively */
	SLUICE_CNT_INFO_NEW_BUCKET,    /* buckets created (evicting when the table is full) */
	SLUICE_CNT_INFO_EVICTED,       /* a bucket evicted to make room for a new one */
	SLUICE_CNT_INFO_EVICTED_ACTIVE,/* ...seen in the last second or in debt: table too small */
	SLUICE_CNT_INFO_ENCAPSULATED,  /* IP in IP, GRE, ESP, PPPoE, MPLS: judged by the outer header */
	SLUICE_CNT_INFO_EVENTS_LOST,   /* throttle events lost: ring buffer or throttled-source table full */
	SLUICE_CNT_INFO_EVICTED_V6,    /* the evictions of IPv6 buckets among SLUICE_CNT_INFO_EVICTED */
	SLUICE_CNT_INFO_EVICTED_ACTIVE_V6, /* ...and among SLUICE_CNT_INFO_EVICTED_ACTIVE */
	SLUICE_CNT_INFO_BANS,          /* temporary bans begun */
	SLUICE_CNT_INFO_BAN_TABLE_FULL,/* bans refused: the ban table was full */
	SLUICE_CNT_INFO_UNBANS_EXPIRED,/* bans lifted because they ran out: removed by the program
				        * when the source came back, or by the controller's sweep */
	SLUICE_CNT_INFO_UNBANS_DELETED,/* bans lifted by `sluice ban del` (the controller) */
	SLUICE_CNT_INFO_UNBANS_RULE,   /* bans lifted because their rule no longer bans (the controller) */
	SLUICE_CNT_MAX,
};

/* The verdict counters whose frames are dropped; every other verdict passes. */
#define SLUICE_DROP_VERDICTS ((1u << SLUICE_CNT_DROP_RATE) | (1u << SLUICE_CNT_DROP_DENY) | \
			      (1u << SLUICE_CNT_DROP_MALFORMED) | (1u << SLUICE_CNT_DROP_BAN))

struct sluice_counter {
	__u64 packets;
	__u64 bytes;
};
SLUICE_ASSERT_SIZE(struct sluice_counter, 16);

/* Per-rule counters: a per-CPU array indexed by rule slot. The drop reason is
 * the rule's action (rate for limit rules, deny for deny rules). For a shadow
 * rule the dropped counters hold would-be drops, which were passed. */
struct sluice_rule_counters {
	__u64 passed_packets;
	__u64 passed_bytes;
	__u64 dropped_packets;
	__u64 dropped_bytes;
	__u64 failopen_table;      /* passed: bucket could not be created */
	__u64 passed_contention;   /* of the passed: decided a pass, bucket too contended to charge */
};
SLUICE_ASSERT_SIZE(struct sluice_rule_counters, 48);

/*
 * The rule set exists twice: set 0 and set 1 of every rule array, match list
 * and lookup table. One word, struct sluice_active, names the live sets. The
 * controller builds a change in the other sets in full and then flips that
 * word, so a packet, a reader and a killed writer see the old rule set or the
 * new one, never a mixture (see user/lib/transaction.h).
 *
 * The rule entries (SLUICE_MAP_RULES, SLUICE_MAP_RULE_INFO) and the lookups
 * (match lists, IPv4 table, IPv6 prefixes) flip apart: a change that keeps
 * every selector writes the idle rule entries and flips them alone, on the
 * live lookups. `set` holds the live rule entries' set in bit 0, and in bit 1
 * whether the lookups' set is the other one (0: both sets are the same).
 *
 * The same entry carries the ban switch, `bans`, so that a packet reads both
 * with one lookup: the data plane reads `set` and `bans`, nothing else. The
 * controller writes the two apart, each write keeping the other field: a
 * commit's writes keep `bans`, and the switch keeps the rest.
 */
struct sluice_active {
	__u32 set;      /* sluice_rules_set, sluice_lookup_set (bits 0-1), and a count of switches
			 * (sluice_sets_switch) */
	__u32 bans;     /* not 0 while bans may apply (see SLUICE_MAP_BANS) */
	__u32 sync;     /* what the controller knows of the idle sets (SLUICE_SYNC_*); 0: nothing */
	__u32 slots[2]; /* each rule set's highest used slot + 1: how far the controller reads */
};
SLUICE_ASSERT_SIZE(struct sluice_active, 20);

static inline __u32 sluice_rules_set(__u32 set)
{
	return set & 1;
}

static inline __u32 sluice_lookup_set(__u32 set)
{
	return (set ^ (set >> 1)) & 1;
}

/* The word naming rule set `rules` and lookup set `lookups` live. */
static inline __u32 sluice_sets(__u32 rules, __u32 lookups)
{
	return (rules & 1) | (((rules ^ lookups) & 1) << 1);
}

/* The live-set word of a switch to rule set `rules` and lookup set `lookups`
 * from the word `before`: its bits 2-31 count the switches, so that the word
 * never reads as it did before a change (the program's drop memo keys on it). */
static inline __u32 sluice_sets_switch(__u32 before, __u32 rules, __u32 lookups)
{
	return sluice_sets(rules, lookups) | ((before & ~3u) + 4);
}

/*
 * sync lets a small change write only what it changes. The controller
 * clears it before it writes an idle set and sets it with the switch, from
 * what it knows then.
 * SLUICE_SYNC_LOOKUPS: the idle lookup set's match lists, IPv4 table and IPv6
 * prefixes hold what the live one's hold, at the idle set's own indices.
 * SLUICE_SYNC_RULES: below both rule sets' high-water marks, the idle rule
 * set's entries (struct sluice_rule and sluice_rule_info) equal the live
 * set's (an empty slot, id 0, equals an empty slot), except at slot
 * (sync & SLUICE_SYNC_SLOT) - 1 when that field is not 0.
 */
#define SLUICE_SYNC_LOOKUPS 0x80000000u
#define SLUICE_SYNC_RULES   0x40000000u
#define SLUICE_SYNC_SLOT    0x3fffffffu

/* A rule's entry in SLUICE_MAP_RULES and SLUICE_MAP_RULE_INFO: a slot stays
 * with its rule for life, and its two sets' copies sit side by side. Rule
 * counters are indexed by slot alone: both sets count into them. */
static inline __u32 sluice_rule_index(__u32 slot, __u32 set)
{
	return slot * 2 + (set & 1);
}

/*
 * What the data plane needs of a rule: an array indexed by sluice_rule_index.
 *
 * Token bucket and GCRA ("bucket"): a packet's cost in ticks is
 * ceil(cost * inc_mult / 2^inc_shift), where cost is 1 (packets) or the L3
 * length (bytes); capacity is the burst in ticks; warmup (token bucket only)
 * is the warm-up period in ticks, 0 for none. See sluice_algos.h.
 * Windows (fixed, sliding-log, sliding-window): at most `limit` units per
 * window of window_ns nanoseconds.
 */
struct sluice_rule {
	__u32 id;         /* the rule's buckets' id (keys of the source tables); 0 = empty slot.
			   * It is the rule's id until an edit restarts its buckets. */
	__u8  action;     /* enum sluice_action */
	__u8  proto;      /* enum sluice_proto */
	__u8  unit;       /* enum sluice_unit */
	__u8  per_prefix; /* bucket aggregation prefix length: 32/128 = per address */
	__u16 dport_lo;   /* destination port range, inclusive; 0-65535 = any */
	__u16 dport_hi;
	__u8  inc_shift;
	__u8  algo;       /* enum sluice_algo */
	__u8  flags;      /* SLUICE_RULE_* */
	/* TCP flags: a TCP packet matches when (its flags & tcp_flags_mask) ==
	 * tcp_flags_value; mask 0: any flags (a rule with a mask is a TCP rule). */
	__u8  tcp_flags_mask;
	/* How few packets the rule lets through, compared when a packet's
	 * protocol or port is unknown and the strictest rule it may belong to
	 * decides: 0 allow, 1 shadow, ~0 deny, else ns per packet (a byte rate's
	 * packet is 1,500 bytes). */
	__u64 strictness;
	union {
		struct {
			__u64 inc_mult; /* ticks per unit, scaled by 2^inc_shift, rounded up */
			__u64 capacity; /* burst in ticks: burst * ticks per unit, rounded up */
			__u64 warmup;   /* ticks; 0 = no warm-up */
		} bucket;
		struct {
			__u64 limit;     /* units per window */
			__u64 window_ns;
			__u64 unused;
		} window;
	};
	__u16 sport_lo;   /* source port range, inclusive, with SLUICE_RULE_SPORT */
	__u16 sport_hi;
	__u8  tcp_flags_value; /* within tcp_flags_mask */
	__u8  pad[3];
	/* A limit's temporary ban (bpf/lib/bans.h): a source whose bucket,
	 * off probation, this rule drops `after` times within `secs` seconds
	 * is banned for `secs` seconds. secs 0: the rule bans no one. Whole
	 * seconds, so that the entry stays one 64-byte cache line. */
	struct {
		__u32 secs;
		__u32 after;
	} ban;
};
SLUICE_ASSERT_SIZE(struct sluice_rule, 64);

enum sluice_scope {
	SLUICE_SCOPE_LOCAL   = 0, /* the rate holds on this host */
	SLUICE_SCOPE_CLUSTER = 1, /* the rate is shared by every host running the rule (sluice agent --redis) */
};

/* The user's view of a rule, kept beside it for the controller only.
 * A cluster rule's data-plane entry holds its local share when the store is
 * out of reach: the fallback rate if one is set, else the rate divided by
 * cluster_hosts; the agent moves each bucket to the share the store grants. */
struct sluice_rule_info {
	char  name[SLUICE_NAME_LEN];
	__u8  addr[16];     /* network order; IPv4 in the first 4 bytes */
	__u8  family;       /* 4 or 6 */
	__u8  prefix_len;   /* SLUICE_INFO_SET: a rule on an address set, named in addr (NUL-padded) */
	__u8  rate_unit;    /* how the rate was written: 0 packets, 1 bytes, 2 bits */
	__u8  scope;        /* enum sluice_scope */
	__u32 rule_id;      /* the id the operator sees, kept across edits */
	__u64 rate_amount;  /* rate = rate_amount units per rate_period_ns */
	__u64 rate_period_ns;
	__u64 burst;        /* packets or bytes */
	__u64 fallback_amount; /* cluster rules: the local limit without the store; 0 = rate / cluster_hosts */
	__u64 fallback_period_ns;
	__u32 cluster_hosts;   /* cluster rules: the host count last known (1 until the agent learns it) */
	__u8  fallback_unit;   /* as rate_unit */
	__u8  pad[3];
};
SLUICE_ASSERT_SIZE(struct sluice_rule_info, 104);
#define SLUICE_INFO_SET 0xff /* sluice_rule_info.prefix_len of a rule on a set */

/*
 * IPv4 rule lookup: a 16-8-8 multibit table built by the controller (prefix
 * expansion), at most three array lookups per packet whatever the number of
 * rules. An entry is 0 (no rule), a match-list index into SLUICE_MAP_LISTS,
 * SLUICE_DIR_CHILD | the index of the block holding the next 8 bits, or (at
 * the second level only) SLUICE_DIR_BITMAP | block << 4 | slot: a compact
 * third level, the bitmap in that slot of that block. Set s's top level is
 * entries s * SLUICE_DIR_TOP_SIZE on; blocks and lists of set s start at s
 * times the set's capacity. Entries and indices are absolute.
 *
 * The compact third level's invariant: a /24 whose longer prefixes all carry
 * one and the same entry `hit` is stored as a bitmap, bit i set where address
 * i of the /24 is under one of them, and `miss`, the entry the /24 inherits
 * from the levels above (0 or a match list); its 256 entries are exactly
 * bit i ? hit : miss (sluice_dir_bitmap_entry). A /24 whose longer prefixes
 * carry two entries or more is a full block of 256 entries. Sixteen bitmaps
 * share a block, one cache line each.
 *
 * A set needs at most two blocks per rule (a /32 in a /16 and a /24 of its
 * own), which is what the block map holds; compact /24s need a sixteenth.
 * Match-list indices stay below SLUICE_DIR_BITMAP and block indices below
 * 1 << 26: --max-rules is at most SLUICE_MAX_MAX_RULES.
 */
#define SLUICE_DIR_CHILD     0x80000000u
#define SLUICE_DIR_BITMAP    0x40000000u
#define SLUICE_DIR_TOP_BITS  16
#define SLUICE_DIR_TOP_SIZE  (1u << SLUICE_DIR_TOP_BITS) /* per set */
#define SLUICE_DIR_BITMAP_SLOTS 16 /* bitmaps in a block */
#define SLUICE_DIR_BITMAP_SLOT_BITS 4
#define SLUICE_MAX_MAX_RULES (1u << 24)
/* IPv6 prefixes a rule set holds (--max-v6-prefixes), at most: the trie holds
 * two sets' worth, which a 32-bit max_entries holds with room; the bound
 * refuses a typo rather than allowing a table of gigabytes. */
#define SLUICE_MAX_MAX_V6_PREFIXES (1u << 24)
/* The second-level entry of bitmap `slot` in block `block`, and back. */
#define SLUICE_DIR_BITMAP_ENTRY(block, slot) (SLUICE_DIR_BITMAP | (block) << SLUICE_DIR_BITMAP_SLOT_BITS | (slot))
#define SLUICE_DIR_BITMAP_BLOCK(e) (((e) & ~(SLUICE_DIR_CHILD | SLUICE_DIR_BITMAP)) >> SLUICE_DIR_BITMAP_SLOT_BITS)
#define SLUICE_DIR_BITMAP_SLOT(e) ((e) & (SLUICE_DIR_BITMAP_SLOTS - 1))

struct sluice_dir_bitmap {
	__u32 bits[8]; /* bit i (of word i / 32, from its low bit) for address i of the /24 */
	__u32 hit;     /* the entry where the bit is set */
	__u32 miss;    /* the entry where it is clear: what the /24 inherits */
	__u32 pad[6];
};
SLUICE_ASSERT_SIZE(struct sluice_dir_bitmap, 64);

struct sluice_dir_block {
	union {
		__u32 entry[256];
		struct sluice_dir_bitmap bitmap[SLUICE_DIR_BITMAP_SLOTS];
	};
};
SLUICE_ASSERT_SIZE(struct sluice_dir_block, 1024);

/* The entry of address `low` (its last byte) of a compact /24: both sides
 * look up through this. */
static inline __u32 sluice_dir_bitmap_entry(const struct sluice_dir_bitmap *b, __u32 low)
{
	return (b->bits[(low >> 5) & 7] >> (low & 31)) & 1 ? b->hit : b->miss;
}

/*
 * IPv6 LPM trie key (prefixlen first, as the kernel requires). The set is the
 * key's first byte, so both sets share one trie: prefixlen = 8 + the prefix
 * length. The value is the prefix's first match list itself (struct
 * sluice_match_list, whose `next` goes on in SLUICE_MAP_LISTS), so that an
 * IPv6 packet reads its first list with the lookup.
 */
struct sluice_lpm_v6 {
	__u32 prefixlen;
	__u8  set;
	__u8  addr[16];
	__u8  pad[3];
};
SLUICE_ASSERT_SIZE(struct sluice_lpm_v6, 24);
#define SLUICE_LPM_SET_BITS 8

/*
 * The rules that may apply to an address under a prefix, most specific first:
 * the prefix's own rules (SLUICE_LIST_SLOTS to a list, further ones in lists
 * chained by `next`), then, through `next`, the list of the nearest covering
 * prefix that holds rules. The data plane walks the chain in order: layered
 * rules apply as they are met, and the first terminal rule that matches
 * decides. Lists live in SLUICE_MAP_LISTS; an IPv4 table entry is the index
 * of its prefix's first list, an IPv6 trie value a copy of that list.
 */
struct sluice_match_list {
	__u32 count;
	__u32 next; /* absolute index of the next list in SLUICE_MAP_LISTS; 0 = end */
	__u32 slots[SLUICE_LIST_SLOTS];
};
SLUICE_ASSERT_SIZE(struct sluice_match_list, 64);

/*
 * Fragments: a later fragment carries no ports (nor TCP flags), so the first
 * fragment's are remembered (when it passes) under the datagram's reassembly key, and a later
 * fragment is judged as its datagram. An LRU hash of SLUICE_FRAG_ENTRIES.
 *
 * An entry cannot see the kernel's reassembly queue, which ends when the
 * datagram is whole but also on an overlap or a timeout; later fragments of
 * a new datagram with the same key must not take the old one's ports. So no
 * later fragment takes them after the datagram's last fragment
 * (SLUICE_FRAG_ENDED). And the kernel keeps a queue's first first fragment
 * and drops a copy, so while a queue holding the entry's first fragment, or
 * later fragments that took its ports (SLUICE_FRAG_JUDGED), may still wait
 * (SLUICE_FRAG_TIMEOUT_NS + SLUICE_FRAG_QUEUE_NS after the entry's), a
 * first fragment of another protocol or port under the key is dropped; one
 * of the same leaves a live entry as it is.
 */
struct sluice_frag_key {
	__u8  family;
	__u8  proto;    /* IPv4: the IP protocol (reassembly keys on it); IPv6: 0 */
	__u16 pad;
	__be32 id;      /* IPv4's 16-bit id, or IPv6's fragment header id */
	__u8  saddr[16];
	__u8  daddr[16];
};
SLUICE_ASSERT_SIZE(struct sluice_frag_key, 40);

struct sluice_frag_info {
	__u64 first_ns; /* when the first fragment passed */
	__u16 dport;      /* host order, when ports_known */
	__u8  proto;      /* enum sluice_proto, or the IP protocol */
	__u8  ports_known; /* the program's PORTS_* bits: ports, and TCP's flags */
	__u32 flags;      /* SLUICE_FRAG_* */
	__u16 sport;      /* host order, when ports_known says so (an entry converted from 0.2.7's: not) */
	__u8  tcp_flags;  /* TCP, when ports_known says so */
	__u8  pad[5];
};
SLUICE_ASSERT_SIZE(struct sluice_frag_info, 24);

#define SLUICE_FRAG_JUDGED  0x1 /* a later fragment took these ports */
#define SLUICE_FRAG_ENDED   0x2 /* the last fragment was seen: no later one takes them */
/* A first fragment under the key claimed the entry and is being judged on
 * some CPU: the entry says nothing yet, and another first fragment under the
 * key meanwhile is dropped (bpf/lib/fragments.h). Only the claiming CPU
 * changes a claimed entry, within the same run of the program. */
#define SLUICE_FRAG_CLAIMED 0x4
/* flags >> SLUICE_FRAG_GEN_SHIFT: the entry's generation, changed by every
 * claim, so that a reader sees whether the entry changed under it. */
#define SLUICE_FRAG_GEN_SHIFT 8

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

/*
 * The source tables. Every bucket (IPv4 and IPv6, the sliding log's too) lives
 * in a set table: an array of 4-way sets in which a bucket may sit in either of
 * two sets chosen by a keyed hash of (rule id, address). A lookup reads at most
 * two 64-byte tag lines and the bucket; memory is fixed when the program loads.
 *
 * A key is a 64-bit word: (rule_id << 32) | a 32-bit word of the address. For
 * IPv4 that word is the address itself (sluice_src4_key); for IPv6 it is a
 * keyed fingerprint of the address (sluice_src6_hash), and the address itself
 * sits in the set's address line, checked on every lookup and before every
 * charge. 0 is an empty way; SLUICE_KEY_BUSY a way whose bucket is being
 * written. Rule ids never reach 0xffffffff, so no key is either.
 *
 * Which bucket a new one replaces (struct sluice_set_tags), lowest rank
 * first (sluice_way_rank):
 *  - a bucket "on probation": its source has not yet sent a packet at least
 *    SLUICE_PROBATION_STAMPS (about a second) after its first. Ranked by when
 *    it was last seen, as if that were twice that long earlier, or once if
 *    its source has sent more than one packet; whatever its debt. So a flood
 *    of spoofed sources evicts its own buckets, whatever the number of
 *    packets each sends within its first second, before any settled bucket
 *    seen or in debt within the last second;
 *  - a settled bucket by its `keep` stamp: when its state will equal a fresh
 *    bucket's (a GCRA arrival time; a window's count or a log's passes, each
 *    worth window / limit), or when its source was last seen if that is
 *    later. A bucket that is full and idle costs nothing to lose and goes
 *    first; a limited one (in debt) last, the more in debt the later.
 */
#define SLUICE_SET_WAYS          4
#define SLUICE_KEY_EMPTY         0ULL
#define SLUICE_KEY_BUSY          (~0ULL)
#define SLUICE_STAMP_SHIFT       20   /* stamps count units of 2^20 ns (1.05 ms) */
#define SLUICE_PROBATION_STAMPS  1024 /* about 1.07 s */
#define SLUICE_BORN_SHIFT        27   /* born[] bits 15-1 count units of 2^27 ns (134 ms) */
#define SLUICE_BORN_RETURNED     0x1  /* born[] bit 0: its source sent a second packet */
#define SLUICE_BORN_SETTLED      0xffff /* born[] of a bucket off probation */

/* The keyed hash both sides use to place a key: its two candidate sets. */
static inline __u64 sluice_mix64(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* The two candidate sets of a hash: a multiply-shift of each 32-bit half. */
static inline void sluice_hash_sets(__u64 h, __u32 nsets, __u32 *first, __u32 *second)
{
	*first = (__u32)(((h & 0xffffffffULL) * nsets) >> 32);
	*second = (__u32)(((h >> 32) * nsets) >> 32);
}

static inline void sluice_src4_sets(__u64 key, __u64 seed, __u32 nsets, __u32 *first, __u32 *second)
{
	sluice_hash_sets(sluice_mix64(key ^ seed), nsets, first, second);
}

static inline __u64 sluice_src4_key(__u32 rule_id, __u32 addr_word)
{
	return ((__u64)rule_id << 32) | addr_word;
}

/* An IPv6 key's hash, from the address's two halves as loaded from memory
 * (network order). The seed is mixed with the first half before the second
 * half and the rule id join, so no choice of addresses lines up their sets
 * without knowing the seed. */
static inline __u64 sluice_src6_hash(__u32 rule_id, __u64 hi, __u64 lo, __u64 seed)
{
	return sluice_mix64(sluice_mix64(hi ^ seed) ^ lo ^ rule_id);
}

/* An IPv6 key: the rule id and a fingerprint of the hash that its sets'
 * choice does not determine (both halves' low and high bits). */
static inline __u64 sluice_src6_key(__u32 rule_id, __u64 h)
{
	return ((__u64)rule_id << 32) | (__u32)(h ^ (h >> 32));
}

/*
 * The tag line of a set: what each way holds, one 64-byte line. A lookup reads
 * key[] only; a charge may advance keep[] and settle born[].
 */
struct sluice_set_tags {
	__u64 key[SLUICE_SET_WAYS];
	/* Stamp to rank ways by for eviction (see above): on probation, when its
	 * source was last seen; then the later of that and when its state will
	 * equal a fresh bucket's. Written only when it moves forward. */
	__u32 keep[SLUICE_SET_WAYS];
	/* On probation: when the bucket was made, in units of 2^SLUICE_BORN_SHIFT
	 * ns, << 1, | SLUICE_BORN_RETURNED once its source sent a second packet.
	 * A packet at least SLUICE_PROBATION_STAMPS after the first (or after a
	 * silence that long) settles it: SLUICE_BORN_SETTLED. */
	__u16 born[SLUICE_SET_WAYS];
	__u16 gen[SLUICE_SET_WAYS]; /* buckets the way has held << 1 | 1 if its word is a lock */
};
SLUICE_ASSERT_SIZE(struct sluice_set_tags, 64);

/* The address of an IPv6 bucket, network order, masked to the rule's prefix. */
struct sluice_addr6 {
	__u64 hi;
	__u64 lo;
};
SLUICE_ASSERT_SIZE(struct sluice_addr6, 16);

/*
 * The program's coarse clock, constants the controller sets at load (the
 * program's read-only data, not a map): the CLOCK_MONOTONIC time of the last
 * scheduler tick, (jiffies + jiffies_base) * tick_ns. The kernel counts
 * jiffies at ticks that fall on whole multiples of a tick on CLOCK_MONOTONIC,
 * so this never reads later than CLOCK_MONOTONIC, and at most a tick (and the
 * tick's lateness) earlier; the verifier turns bpf_jiffies64 into one load,
 * where bpf_ktime_get_coarse_ns is a helper call (about 27 ns on the test
 * VM). tick_ns 0: not found at load;
 * the program reads bpf_ktime_get_coarse_ns (CLOCK_MONOTONIC_COARSE), which
 * is as coarse. jiffies_base is a two's complement: jiffies start near 2^32.
 */
struct sluice_tick_clock {
	__u64 tick_ns;
	__u64 jiffies_base;
};
SLUICE_ASSERT_SIZE(struct sluice_tick_clock, 16);

/* Written once by the controller when it loads the program, read per packet. */
struct sluice_config {
	__u64 hash_seed;  /* random: sources cannot be chosen to collide */
	__u32 src4_sets;  /* sets in SLUICE_MAP_SOURCES_V4 */
	__u32 src6_sets;  /* ... SLUICE_MAP_SOURCES_V6 */
	__u32 log4_sets;  /* ... SLUICE_MAP_LOGS_V4 */
	__u32 log6_sets;  /* ... SLUICE_MAP_LOGS_V6 */
};
SLUICE_ASSERT_SIZE(struct sluice_config, 24);

/* Counters kept with every bucket. Each word carries in its top 8 bits the
 * generation of the bucket its way holds, so that a CPU still counting for an
 * evicted bucket cannot count on its successor; the count is the low 56 bits
 * (sluice_cnt_value). */
#define SLUICE_CNT_TAG_SHIFT 56
#define SLUICE_CNT_VALUE_MASK ((1ULL << SLUICE_CNT_TAG_SHIFT) - 1)
static inline __u64 sluice_cnt_value(__u64 word)
{
	return word & SLUICE_CNT_VALUE_MASK;
}

struct sluice_source_counters {
	__u64 passed_packets;
	__u64 passed_bytes;
	__u64 dropped_packets; /* would-be drops for a shadow rule */
	__u64 dropped_bytes;
};
SLUICE_ASSERT_SIZE(struct sluice_source_counters, 32);

/* Algorithm state of one bucket, read by the rule's algorithm. Times in ticks
 * for the buckets, window indices counted in windows since boot. */
union sluice_algo_state {
	struct {
		__u64 off;     /* theoretical arrival time = the bucket's word - off */
		__u64 granted; /* the last cluster grant taken: generation << 48 | its seq (struct sluice_grant) */
		__u64 full_at; /* ticks: a clock a write may have found the bucket full at (struct sluice_owed) */
	} gcra;
	struct {
		__u64 tokens; /* in ticks of credit, up to the capacity */
		__u64 last;   /* when tokens were last refilled */
		__u64 cold;   /* warm-up: ticks of coldness, up to the warm-up period */
	} tb;
	struct {
		__u64 window;
		__u64 count;
	} fixed;
	struct {
		__u64 window;
		__u64 cur;    /* units in the current window */
		__u64 prev;   /* units in the previous window */
	} sliding;
};
SLUICE_ASSERT_SIZE(union sluice_algo_state, 24);

/*
 * A bucket and its source's counters (every algorithm but sliding-log).
 * `word` is the GCRA form's theoretical arrival time plus algo.gcra.off,
 * updated by compare-and-swap; for the other algorithms it is a sequence lock
 * (odd: held; see include/sluice_settable.h). A way's word only ever grows,
 * across every bucket the way holds in turn, so no compare-and-swap begun on
 * an evicted bucket can land on its successor.
 */
struct sluice_source_state {
	__u64 word;
	union sluice_algo_state algo;
	struct sluice_source_counters cnt;
};
SLUICE_ASSERT_SIZE(struct sluice_source_state, 64);

/* One set of the IPv4 source table: the tag line, then the four buckets.
 * 80 bytes per source. */
struct sluice_set_v4 {
	struct sluice_set_tags tag;
	struct sluice_source_state way[SLUICE_SET_WAYS];
};
SLUICE_ASSERT_SIZE(struct sluice_set_v4, 320);

/* One set of the IPv6 source table: the tag line, the addresses of its four
 * buckets (the line next to the tags), then the buckets. 96 bytes per source. */
struct sluice_set_v6 {
	struct sluice_set_tags tag;
	struct sluice_addr6 addr[SLUICE_SET_WAYS];
	struct sluice_source_state way[SLUICE_SET_WAYS];
};
SLUICE_ASSERT_SIZE(struct sluice_set_v6, 384);

/* Which source table a pending-drops slot names; a throttle event's family. */
enum sluice_table {
	SLUICE_TABLE_V4 = 0,
	SLUICE_TABLE_V6 = 1,
};

/*
 * Throttle events. A source's bucket is "throttled" from the first packet a
 * rule drops (or, shadow, would drop) until no packet of it has been dropped
 * for SLUICE_EVENT_INTERVAL_NS; the program writes an event to the ring buffer
 * SLUICE_MAP_EVENTS at each end, and at most one event per bucket per
 * interval (a source throttled again within an interval of its release is
 * reported when the interval ends, if it is still throttled then). The
 * throttled buckets are tracked in SLUICE_MAP_THROTTLED, a bounded hash whose
 * entries carry a timer that notices the release. A source that stays
 * throttled costs nothing more per packet: each CPU notes a bucket's drops at
 * most once per SLUICE_NOTE_EVERY_NS.
 */
#define SLUICE_EVENT_INTERVAL_NS 1000000000ULL
#define SLUICE_NOTE_EVERY_NS     100000000ULL
#define SLUICE_EVENT_RING_BYTES  (256 * 1024)
#define SLUICE_MAX_THROTTLED     65536

/* `attach --then`: interfaces up to this ifindex may chain a next program. */
#define SLUICE_MAX_THEN_IFINDEX  4096

enum sluice_event_kind {
	SLUICE_EVENT_THROTTLED = 1, /* a rule began dropping the source's packets */
	SLUICE_EVENT_RELEASED  = 2, /* ...and has dropped none for an interval */
	SLUICE_EVENT_BAN       = 3, /* a rule banned the source (struct sluice_ban); pad: the prefix length */
	SLUICE_EVENT_UNBAN     = 4, /* ...and the ban ran out; since_ns: when it began */
};

/* A throttled bucket: its rule's bucket id and its address, masked to the
 * rule's --per prefix, network order (IPv4: the first 4 bytes). */
struct sluice_throttle_key {
	__u32 bucket_id;
	__u32 family; /* enum sluice_table */
	__u8  addr[16];
};
SLUICE_ASSERT_SIZE(struct sluice_throttle_key, 24);

struct sluice_event {
	__u64 ns;       /* CLOCK_MONOTONIC */
	__u64 since_ns; /* when the throttling began (RELEASED: the episode's start) */
	__u32 kind;     /* enum sluice_event_kind */
	__u32 pad;      /* BAN, UNBAN: the banned prefix's length (IPv4: 0-32); else 0 */
	struct sluice_throttle_key key;
};
SLUICE_ASSERT_SIZE(struct sluice_event, 48);

/* The context of the controller's event writer (bpf/event_note.bpf.c): the
 * event, and the counter it adds one to (one of SLUICE_CNT_INFO_UNBANS_*),
 * so that a ban the controller lifts is counted where the program counts
 * the bans it lifts. */
struct sluice_event_note {
	struct sluice_event event;
	__u32 counter; /* enum sluice_counter_index */
	__u32 pad;
};
SLUICE_ASSERT_SIZE(struct sluice_event_note, 56);

#ifdef __cplusplus
struct sluice_timer { __u64 opaque[2]; }; /* struct bpf_timer, as the controller sees it */
#define SLUICE_TIMER struct sluice_timer
#else
#define SLUICE_TIMER struct bpf_timer
#endif
struct sluice_throttle {
	SLUICE_TIMER timer;
	__u64 last_drop_ns;  /* the latest drop noted */
	__u64 last_event_ns; /* the latest event written */
	__u64 since_ns;      /* the current (or last) episode's start */
	__u32 reported;      /* 1: THROTTLED written, RELEASED not yet */
	__u32 armed;         /* the timer is initialised */
};
SLUICE_ASSERT_SIZE(struct sluice_throttle, 48);

/*
 * Drops not yet added to a bucket's counters (IPv4 and IPv6 source tables):
 * per CPU, SLUICE_PENDING_SLOTS slots, each naming one bucket by table, set,
 * way and generation. A packet's drop on a CPU goes to the slot its source
 * address hashes to (sluice_source_slot) in that CPU's run of slots
 * (sluice_cpu_slot). A CPU that drops a packet of
 * the bucket that slot names counts it there, without writing the bucket's
 * shared line; when the slot names another bucket, it first adds the slot's
 * counts to that one (if its way still holds it). Readers add every slot of
 * every CPU to the bucket it names, so counts are exact. Empty when packets is
 * 0. `sluice upgrade` settles every slot into its bucket and starts the new
 * program's slots empty (user/lib/upgrade.cpp).
 */
#define SLUICE_PENDING_SLOTS_LOG2 11
#define SLUICE_PENDING_SLOTS      (1u << SLUICE_PENDING_SLOTS_LOG2)

/* The slot of a source address whose 16 bytes (IPv4 in the first 4, the
 * rest zero), read as two host-order words, are `lo` and `hi`. */
static inline __u32 sluice_source_slot(__u64 lo, __u64 hi)
{
	__u64 x = lo ^ hi;

	x ^= x >> 32;
	return ((__u32)x * 0x9e3779b1u) >> (32 - SLUICE_PENDING_SLOTS_LOG2);
}

/*
 * The pending-drops and owed maps are plain arrays of SLUICE_PENDING_SLOTS
 * slots per possible CPU, CPU after CPU (the controller sizes them when it
 * loads the program), made mmapable so that the kernel places them on a
 * page: every slot starts a cache line (128 and 64 bytes), and no line holds
 * two CPUs' slots. A per-CPU array's values are placed at 8 bytes, which put
 * a 128-byte slot on three lines. The index of slot `slot` of CPU `cpu`:
 */
static inline __u32 sluice_cpu_slot(__u32 cpu, __u32 slot)
{
	return cpu * SLUICE_PENDING_SLOTS + slot;
}

/*
 * The last drop the program decided on the fast path for a source whose
 * address hashes to the slot: the program's own (readers ignore it), kept
 * beside the slot's counts so that a repeated drop is decided and counted in
 * one slot, whose 128 bytes are two cache lines (sluice_cpu_slot). See the
 * program's recall_drop.
 */
struct sluice_drop_memo {
	__u64 now;      /* the coarse clock's reading it holds for */
	__u64 saddr[2]; /* the source address (IPv4 in the first 4 bytes) */
	__u64 name;     /* a limit: the slot's first 8 bytes then (its bucket's place and generation) */
	__u64 want;     /* a limit: the bucket's key */
	__u64 word;     /* a limit: the bucket's word and offset its drop was decided on */
	__u64 off;
	__u32 set;      /* the live-set word (struct sluice_active) */
	__u32 slot;     /* the rule's slot: its counters */
	__u32 selector; /* the packet's port, family and protocol; 0: empty */
	__u16 min_len;  /* a byte rate: the length dropped; a shorter packet is decided afresh */
	__u8  verdict;  /* the verdict counter (SLUICE_CNT_DROP_RATE or SLUICE_CNT_DROP_DENY) */
	__u8  pad;
	/* What the rule read of the packet beyond its port, family and
	 * protocol: its source port and TCP flags, with whether the packet
	 * showed them, as one word (the program's packet_selectors), masked by
	 * the bits the rule reads (sel_mask; 0 for a rule with neither). */
	__u32 sel;
	__u32 sel_mask;
};
SLUICE_ASSERT_SIZE(struct sluice_drop_memo, 80);

struct sluice_pending_drops {
	__u32 set;
	__u8  way;
	__u8  table; /* enum sluice_table */
	__u16 gen;
	__u64 packets;
	__u64 bytes;
	/* The bucket this CPU last noted a drop of for throttle events (struct
	 * sluice_event), and when: a bucket's drops are noted once per
	 * SLUICE_NOTE_EVERY_NS per CPU, not per packet. */
	__u64 note_want;
	__u64 noted_ns;
	__u32 note_table;
	__u32 pad;
	struct sluice_drop_memo memo;
};
SLUICE_ASSERT_SIZE(struct sluice_pending_drops, 128);

/*
 * Passes owed to a GCRA-form bucket (GCRA, and a token bucket without
 * warm-up) by one CPU: per CPU, SLUICE_PENDING_SLOTS slots indexed as the
 * pending-drops slots are. Every pass writes its bucket's word, which moves
 * the bucket's line from CPU to CPU when one source is charged from several
 * at once. So on the fast path (an IPv4 source whose first rule decides), a
 * CPU that finds the word written by another CPU since its own last write
 * counts the bucket as shared for SLUICE_OWED_SHARED_NS, and while it is
 * shared, at least half full and, with the account, not full at this CPU's
 * clock, passes a packet on account: it adds the charge here and writes
 * nothing shared. It writes what it owes with its
 * next write to the bucket: when the account holds SLUICE_OWED_MAX packets
 * or an eighth of the capacity, when the bucket would fall below half, when a
 * packet would be dropped (the account is paid, then the packet decided),
 * when the walk decides a packet of the bucket (the account is paid first),
 * or when the slot is wanted for another bucket (once what it holds is
 * settled: until then the other bucket is written at each pass).
 *
 * How an account is written. `written` is the word the account was made on.
 * While the word still reads so, the account is exact: the charges go on as
 * if written at their own times, max(arrival time, since) + ticks, and GCRA
 * forgets them as it forgets any charge once the bucket is full again.
 * Another write since (another CPU's) stacked too unless it found the bucket
 * full, refilled it from its clock and so forgot what the account had charged
 * before it. A write that may find the bucket full notes its clock in
 * algo.gcra.full_at before it lands (a pass on any path, an account's write,
 * a walk's charge); while that clock is behind the arrival time of the word
 * the account was made on, no write since can have found the bucket full:
 * every one stacked, and so does the account. (This CPU's own clock plays no
 * part: a CPU may read a clock earlier, or later, than another CPU that wrote
 * before it.) Past that, which came first is unknown, so only what is
 * certain is written, max(arrival time, since +
 * ticks); the rest is doubt, kept in `ticks` with `packets` 0, unless the
 * latest of those writes refilled the bucket surely: a write of an account
 * (sluice_charge_owed) to the bucket of one source whose clock is past the
 * arrival time it decided on by more than an account's most for every CPU
 * (sluice_owed_cpus) marks its note SLUICE_OWED_SURE once it has landed.
 * GCRA fed every pass made stood below that clock too (see the argument
 * below: G <= A + every slot's account or doubt), so it refilled as well and
 * forgot every charge before it: such an account is settled by writing
 * nothing, and leaves no doubt. Doubt is never
 * charged to a packet, the slot owes nothing new while it holds it, and it
 * is forgotten when the CPU writes the bucket or settles its slot, once
 * max(arrival time, since) + ticks is behind the clock (the bucket with it
 * would be full), or once the note is a sure refill from a clock past
 * since + ticks (every charge behind the doubt was decided on a word before
 * that refill's, which forgot it).
 *
 * The bound, per bucket and per CPU: a CPU alone on a bucket decides exactly
 * as GCRA (burst + rate x T over any interval T), on every path (the fast
 * path, the walk, the drop memo). Several CPUs at one bucket: what a CPU
 * decides on never exceeds what GCRA fed every pass made would hold, so
 * nothing within the limit is dropped; and each CPU holds at most one
 * account or one doubt per slot naming the bucket, each at most
 * SLUICE_OWED_MAX packets' and an eighth of the burst's charges, so at most
 * burst + rate x T + (that, for each CPU) pass, plus one packet per forced
 * pass (pass_contention). The argument: the arrival time G of GCRA fed
 * every pass made stays within the word's arrival time A plus every slot's
 * account and doubt (G <= A + sum of ticks), whatever clock each CPU reads.
 * An account sits on the word: it starts from A (since <= A, and A only
 * grows), and a pass that would start it, or go on it, from a clock beyond
 * A + ticks (the bucket, with the account, full) is written instead. So a
 * pass on account is decided on A + ticks, not behind its clock, and adds
 * its charge to G and to the account alike; a written pass takes A to
 * max(A + ticks, clock) + charge, at least as far as G goes without the
 * other slots' ticks; a settled account writes what is certain and keeps
 * the rest as doubt. A CPU deciding on A with an earlier clock than
 * another's gets less credit, never more. A bucket of one source has one
 * slot per CPU; the sources of a --per prefix bucket each take the slot
 * their address hashes to, and slots of one CPU see each other's writes as
 * another CPU's: "a CPU alone" above means one slot, and the bound counts
 * each slot. Readers add
 * every CPU's owed passes to the bucket the slot names, as they add pending
 * drops. Holds passes when packets is not 0.
 */
/*
 * The cluster sync's grants (SLUICE_MAP_GRANTS, an LRU hash of
 * SLUICE_GRANTS_MAX entries): how far to move the arrival time of a GCRA-form
 * bucket of a cluster rule, from its local share towards the share the store
 * grants this host. The sync writes them; the program applies them to its own
 * bucket, so that the bucket's words keep one writer (the program).
 *
 * An entry names its bucket by key: the set table's key (`want`, which holds
 * the bucket id; for IPv4 the address too), the table, and the IPv6 address
 * (zero for IPv4). Its value names the way the bucket was in when the sync
 * read it (`name`, sluice_way_name: set, way, table, generation) and carries
 * grants `base` + 1 to `seq` (numbers of the sync's steps for that bucket),
 * together `ticks` (positive: earlier, credit; negative: later, refill
 * withheld).
 *
 * Taken once. The bucket records the last grant it took in its state
 * (algo.gcra.granted: generation << 48 | seq; a record of another generation
 * reads as 0). When the walk charges a cluster rule's bucket, it takes the
 * entry if `name` is its way's and `base` its record: a compare-and-swap of
 * the record from base to seq (so one CPU takes it), then the offset is moved
 * (credit stops at a full bucket). An entry whose base is not the record (the
 * bucket took a later one since the sync read it) waits for the sync's next
 * write, which is based on the record it reads then; the sync keeps every
 * step's grant until a record shows it taken. A bucket evicted and made again
 * has a new generation: grants named for the old one are never taken (they
 * went with it), and the sync starts the new bucket's from 0. An entry the
 * LRU evicts is written again at the sync's next step, with nothing lost.
 */
#define SLUICE_GRANTS_MAX   65536
#define SLUICE_GRANT_SEQ_MASK ((1ULL << 48) - 1)

struct sluice_grant_key {
	__u64 want;              /* the bucket's key in its set table */
	struct sluice_addr6 addr; /* IPv6: the bucket's (masked) address; IPv4: 0 */
	__u32 table;             /* enum sluice_table */
	__u32 pad;
};
SLUICE_ASSERT_SIZE(struct sluice_grant_key, 32);

struct sluice_grant {
	__u64 name;  /* sluice_way_name of the bucket's way when the sync read it */
	__u64 base;  /* the record the grant follows (its seq; 0: none taken) */
	__u64 seq;   /* the last grant it carries */
	__s64 ticks; /* grants base + 1 .. seq, summed */
};
SLUICE_ASSERT_SIZE(struct sluice_grant, 32);

/* A way as an owed slot and a grant name it: set, way, table, generation. */
static inline __u64 sluice_way_name(__u32 set, __u32 way, __u32 table, __u16 gen)
{
	return (__u64)set | ((__u64)(way & 0xff) << 32) | ((__u64)(table & 0xff) << 40) | ((__u64)gen << 48);
}

/* The seq of the last grant a bucket of generation `gen` took, from its record. */
static inline __u64 sluice_grant_taken(__u64 record, __u16 gen)
{
	return (__u16)(record >> 48) == gen ? record & SLUICE_GRANT_SEQ_MASK : 0;
}

#define SLUICE_OWED_MAX 64
/* algo.gcra.full_at's bit 0 (its clocks are even): the write that noted it
 * refilled the bucket surely, every CPU's account and doubt included (see
 * below), and GCRA forgot every charge made before it. */
#define SLUICE_OWED_SURE 1ULL
/* A CPU that finds another's write keeps owing for this long after: longer
 * than a tick of the coarse clock (at most 10 ms), whose reading stands for a
 * tick; with a window shorter than a tick, each new tick found the bucket
 * unshared, and a CPU wrote every pass until the other's account filled. */
#define SLUICE_OWED_SHARED_NS 25000000ULL

struct sluice_owed {
	__u64 name;    /* the bucket: a pending-drops slot's first 8 bytes (set, way, table, generation) */
	__u64 want;    /* ...and its key */
	__u64 written; /* the word this CPU last wrote to it, or made its account on */
	__u64 since;   /* ticks: the owed charges are written from max(arrival time, since) */
	__u64 ticks;   /* the charges owed; with packets 0, doubt (see above) */
	__u64 packets; /* the passes owed: not yet in the bucket's counters */
	__u64 bytes;
	__u64 shared_until; /* ns: till then the bucket counts as charged from several CPUs */
};
SLUICE_ASSERT_SIZE(struct sluice_owed, 64);

/* A sliding-log bucket: the times of the last `limit` passes as a ring. Its
 * word is a sequence lock (odd while held) that, like a source bucket's, only
 * grows across the buckets its way holds. */
struct sluice_log_state {
	__u64 word;
	__u32 head;    /* index of the oldest remembered pass */
	__u32 pad;
	__u64 ring[SLUICE_MAX_LOG]; /* ns; 0 = slot never used */
	struct sluice_source_counters cnt;
};
SLUICE_ASSERT_SIZE(struct sluice_log_state, 560);

/* Sets of the sliding-log tables: 576 bytes per IPv4 source, 592 per IPv6. */
struct sluice_log_set_v4 {
	struct sluice_set_tags tag;
	struct sluice_log_state way[SLUICE_SET_WAYS];
};
SLUICE_ASSERT_SIZE(struct sluice_log_set_v4, 2304);

struct sluice_log_set_v6 {
	struct sluice_set_tags tag;
	struct sluice_addr6 addr[SLUICE_SET_WAYS];
	struct sluice_log_state way[SLUICE_SET_WAYS];
};
SLUICE_ASSERT_SIZE(struct sluice_log_set_v6, 2368);

/*
 * Temporary bans (bpf/lib/bans.h). A limit rule with a ban (struct
 * sluice_rule's ban) that drops a source off probation `after` times within
 * its ban's duration bans the source's bucket key (its address, or its
 * --per prefix) for that duration: every packet from it is then dropped
 * (SLUICE_CNT_DROP_BAN) before any rule is looked at. SLUICE_MAP_BANS is an
 * LPM trie of bounded size without eviction: a ban is refused when it is
 * full (SLUICE_CNT_INFO_BAN_TABLE_FULL), never an older one pushed out.
 * Keys hold IPv4 as ::ffff:a.b.c.d/(96 + prefix). SLUICE_MAP_STRIKES counts
 * a bucket's drops towards `after` (an LRU: losing a count only delays a
 * ban). struct sluice_active's bans word is not 0 while a live rule has a
 * ban or a ban is in the table: without it, a packet pays a branch, no
 * lookup (the data plane reads it with the live-set word, one lookup).
 */
#define SLUICE_DEFAULT_MAX_BANS 65536
#define SLUICE_MAX_STRIKES      65536
#define SLUICE_MAX_BAN_NS       (366ULL * 86400 * 1000000000ULL) /* a year, and a day */

struct sluice_ban_key {
	__u32 prefixlen; /* of addr: IPv4 96 + its prefix */
	__u8  addr[16];  /* network order; IPv4 as ::ffff:a.b.c.d */
};
SLUICE_ASSERT_SIZE(struct sluice_ban_key, 20);

struct sluice_ban {
	__u64 since_ns;  /* the program's coarse clock (CLOCK_MONOTONIC) when it began */
	__u64 until_ns;  /* ...and when it ends */
	__u64 drops;     /* packets dropped by the ban */
	__u32 slot;      /* the banning rule's slot */
	__u32 bucket_id; /* ...and its buckets' id then */
	struct sluice_ban_key key; /* the entry's own key: an LPM lookup does not say it */
	__u32 pad;
};
SLUICE_ASSERT_SIZE(struct sluice_ban, 56);

/* A bucket's drops towards its rule's ban threshold, counted from `start_ns`. */
struct sluice_strike {
	__u64 start_ns;
	__u64 count;
};
SLUICE_ASSERT_SIZE(struct sluice_strike, 16);

/*
 * Controller bookkeeping: a one-entry array. The pinned state's layout is
 * recorded here when the program loads. abi_version stays the first field of
 * every future layout, so any binary can read which layout it meets; the
 * state ABI changes only at a release, and `sluice upgrade` reads the
 * previous release's layout (see CHANGELOG.md for each release's).
 */
#define SLUICE_ABI_VERSION 1

/* A release as struct sluice_meta records it: 0.3.0 is 0x000300. */
#define SLUICE_RELEASE(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))

struct sluice_meta {
	__u32 abi_version;  /* SLUICE_ABI_VERSION of the binary that loaded the program */
	__u32 next_rule_id; /* ids are never reused, so no stale bucket meets a new rule */
	__u64 layout_hash;  /* of every map's name, type, key and value size and flags */
	__u64 loaded_ns;    /* CLOCK_REALTIME when the program was loaded */
	__u32 release;      /* SLUICE_RELEASE of the binary that loaded the program */
	__u32 pad;
};
SLUICE_ASSERT_SIZE(struct sluice_meta, 32);

#endif /* SLUICE_ABI_H */
