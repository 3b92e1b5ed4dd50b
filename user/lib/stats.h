// Reading the data plane's counters: global, per rule, per source.
#pragma once

#include <array>
#include <iosfwd>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maps.h"
#include "rule.h"

namespace sluice {

/// One bucket: a source address (or prefix, for --per rules) under one rule.
/// As the kernel counts it: for a shadow rule, "dropped" are would-be drops
/// that were passed.
struct SourceStats {
	std::string source;
	std::string rule;
	uint32_t rule_id = 0;
	bool shadow = false;
	uint64_t passed_packets = 0, passed_bytes = 0;
	uint64_t dropped_packets = 0, dropped_bytes = 0;
	Algo algo = Algo::token_bucket;
	/// The bucket's rule part (bucket_id of its rule): a bucket an edit
	/// restarted counts afresh under a new one.
	uint32_t bucket_id = 0;
};

struct RuleStats {
	InstalledRule rule;
	struct sluice_rule_counters counters = {};
	uint64_t sources = 0; ///< buckets currently tracked for the rule
};

/// One table of buckets: how full it is.
struct SourceTableUsage {
	int family = 4;           ///< 4 or 6
	bool sliding_log = false; ///< the sliding-log table, else the bucket table
	uint64_t tracked = 0;     ///< buckets of current rules
	uint64_t capacity = 0;    ///< buckets the table can hold
};

struct Stats {
	std::vector<SourceStats> sources; ///< most dropped first, cut to the query's top
	uint64_t tracked_sources = 0;     ///< all buckets of current rules
	std::vector<SourceTableUsage> tables; ///< every bucket table, IPv4 first
	std::vector<RuleStats> rules;
	std::array<struct sluice_counter, SLUICE_CNT_MAX> global{};
};

struct StatsQuery {
	size_t top = 0;   ///< 0: every source
	std::string rule; ///< name or id; empty: every rule
};

Stats collect_stats(const MapSet &maps, const StatsQuery &query);

/// Packets per kind of verdict, from the global counters.
struct VerdictTotals {
	uint64_t passed = 0, dropped = 0, failopen = 0;
};
VerdictTotals verdict_totals(const Stats &s);

/// Name of a global counter ("drop_rate", "failopen_table"...).
const char *counter_name(int index);

/// A digest of a rule set (every rule's id and spec, in match order): equal
/// on two hosts, or before and after a change, exactly when the rules are.
uint64_t rule_set_digest(const std::vector<RuleStats> &rules);

/// JSON with keys in a reading order (sources first), not sorted.
nlohmann::ordered_json rule_json(const InstalledRule &r);
/// Writes `sluice stats --json`: {"sources": [...], "tracked_sources": N,
/// "rules": [...], "global": {...}}, streaming the sources (there may be millions).
void write_stats_json(std::ostream &out, const Stats &s);

} // namespace sluice
