/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The program's maps: the state the controller shares with it (named in
 * sluice_abi.h, pinned under the pin directory) and the program's own
 * per-CPU scratch. A room that owns a map of its own defines it there
 * (events.h, request.h, clock.h, sources.h); the maps the controller's event
 * note shares are in event_maps.h.
 */
#ifndef SLUICE_LIB_MAPS_H
#define SLUICE_LIB_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sluice_abi.h"
#include "lib/event_maps.h" /* the counters and the events' ring */

/* The rule sets (see struct sluice_active): the live one's number. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_active);
} SLUICE_MAP_ACTIVE SEC(".maps");

/* Both sets' rules, by sluice_rule_index(slot, set). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * SLUICE_DEFAULT_MAX_RULES);
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, struct sluice_rule);
} SLUICE_MAP_RULES SEC(".maps");

/* Controller-only view of each rule, indexed as the rules; the program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * SLUICE_DEFAULT_MAX_RULES);
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, struct sluice_rule_info);
} SLUICE_MAP_RULE_INFO SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_RULES);
	__type(key, __u32);
	__type(value, struct sluice_rule_counters);
} SLUICE_MAP_RULE_COUNTERS SEC(".maps");

/* IPv4 rule lookup: two sets of a 16-8-8 table (see sluice_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * SLUICE_DIR_TOP_SIZE);
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, __u32);
} SLUICE_MAP_DIR4_TOP SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 2 * SLUICE_DEFAULT_MAX_RULES); /* two sets of two blocks a rule */
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, struct sluice_dir_block);
} SLUICE_MAP_DIR4_BLOCKS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * (SLUICE_DEFAULT_MAX_RULES + 1)); /* two sets; index 0 unused */
	__uint(map_flags, BPF_F_MMAPABLE); /* the controller writes it in place */
	__type(key, __u32);
	__type(value, struct sluice_match_list);
} SLUICE_MAP_LISTS SEC(".maps");

/* IPv6 rule lookup: both sets' prefixes, the set in the key's first byte. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 2 * SLUICE_DEFAULT_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sluice_lpm_v6);
	__type(value, struct sluice_match_list); /* the prefix's first list itself */
} SLUICE_MAP_MATCH_V6 SEC(".maps");

/* The source tables: arrays of 4-way sets (see sluice_abi.h), every bucket's
 * home. The controller maps them to read statistics and to purge a deleted
 * rule's buckets, and sizes them when it loads the program. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_set_v4);
} SLUICE_MAP_SOURCES_V4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_set_v6);
} SLUICE_MAP_SOURCES_V6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_LOG_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_log_set_v4);
} SLUICE_MAP_LOGS_V4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_DEFAULT_MAX_LOG_SOURCES / SLUICE_SET_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_log_set_v6);
} SLUICE_MAP_LOGS_V6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_config);
} SLUICE_MAP_CONFIG SEC(".maps");

/* Each CPU's pending-drops slots, CPU after CPU (sluice_cpu_slot; sized by
 * the controller for the possible CPUs). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_PENDING_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_pending_drops);
} SLUICE_MAP_PENDING SEC(".maps");

/* What each CPU owes its GCRA-form buckets (struct sluice_owed), slotted as
 * the pending-drops slots are. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLUICE_PENDING_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sluice_owed);
} SLUICE_MAP_OWED SEC(".maps");

/* The cluster sync's grants to cluster rules' buckets (struct sluice_grant),
 * applied by the program before it charges the bucket (grants.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_GRANTS_MAX);
	__type(key, struct sluice_grant_key);
	__type(value, struct sluice_grant);
} SLUICE_MAP_GRANTS SEC(".maps");

/* A new source bucket is built here before it is installed (see sluice_insert_v4). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_source_state);
} sluice_scratch SEC(".maps");

/* Controller bookkeeping; the program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_meta);
} SLUICE_MAP_META SEC(".maps");

/* The first fragment's protocol and port, by datagram (see sluice_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_FRAG_ENTRIES);
	__type(key, struct sluice_frag_key);
	__type(value, struct sluice_frag_info);
} SLUICE_MAP_FRAGS SEC(".maps");

/* Each attached interface's MTU by ifindex: a longer frame is a super-packet. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
} SLUICE_MAP_IFACE_MTU SEC(".maps");

/* The buckets throttled now or within the last interval, each with a timer. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLUICE_MAX_THROTTLED);
	__type(key, struct sluice_throttle_key);
	__type(value, struct sluice_throttle);
} SLUICE_MAP_THROTTLED SEC(".maps");

/* `sluice attach IFACE --then PROG`: the program each interface's passed
 * packets go on to, by ifindex; an empty entry ends the chain. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, SLUICE_MAX_THEN_IFINDEX);
	__type(key, __u32);
	__type(value, __u32);
} SLUICE_MAP_THEN SEC(".maps");

/* Temporary bans (see sluice_abi.h): bounded, never evicted. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SLUICE_DEFAULT_MAX_BANS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sluice_ban_key);
	__type(value, struct sluice_ban);
} SLUICE_MAP_BANS SEC(".maps");

/* Drops towards a ban, by bucket (its rule's bucket id and its key). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SLUICE_MAX_STRIKES);
	__type(key, struct sluice_throttle_key);
	__type(value, struct sluice_strike);
} SLUICE_MAP_STRIKES SEC(".maps");

#endif /* SLUICE_LIB_MAPS_H */
