// SPDX-License-Identifier: GPL-2.0-only
// Reading the data plane's counters: global, per rule, per source.
#pragma once

#include <array>
#include <optional>
#include <iosfwd>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "maps.h"
#include "net.h"
#include "rule.h"
#include "sources.h"

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
	uint64_t bans = 0; ///< sources under a temporary ban now (`sluice bans`)
};

struct StatsQuery {
	size_t top = 0;   ///< 0: every source
	std::string rule; ///< name or id; empty: every rule
};

Stats collect_stats(const MapSet &maps, const StatsQuery &query);

/// What `sluice stats --reset` zeroes: every counter (empty query), one
/// rule's (its rule counters and its buckets' counters), or the buckets of
/// one source (an address or a prefix: every bucket that overlaps it), under
/// one rule or every rule.
struct ResetQuery {
	std::string rule;           ///< name or id; empty: every rule
	std::optional<Cidr> source; ///< none: every source
};

/// What a reset zeroed.
struct ResetSummary {
	bool global = false;  ///< the global counters
	uint64_t rules = 0;   ///< rules whose counters were zeroed
	uint64_t buckets = 0; ///< buckets whose counters were zeroed
};

/// Zeroes counters at once, as `nft reset counters` and `iptables -Z` do,
/// and leaves every bucket as it is: a throttled source stays throttled.
/// Global and rule counters are per-CPU entries written whole; a bucket's
/// counters are zeroed word by word by compare-and-swap. Counts still on a
/// CPU's account (pending drops, owed passes) stay there, since the program
/// adds them to their bucket later and owed passes carry charges: what they
/// held at the reset is recorded (reset_debits_path) and read_accounts takes
/// it away again, so every reader sees counts since the reset. A packet
/// counted during the reset may land before it (and be zeroed) or after.
ResetSummary reset_counters(const MapSet &maps, const ResetQuery &query);

/// One bucket `release_source` refilled.
struct ReleasedBucket {
	std::string rule;   ///< the rule's name
	std::string bucket; ///< the bucket's address or prefix (the rule's --per)
	Algo algo = Algo::token_bucket;
};

/// Refills the buckets of `source` (an address or a prefix: every bucket that
/// overlaps it) of every limit rule, or of `rule` only, so that the source
/// passes its burst again at once; counters stay. Throws if `rule` is not a
/// limit rule, or if no bucket matched (one line saying so).
std::vector<ReleasedBucket> release_source(const MapSet &maps, const Cidr &source, const std::string &rule = "");

/// Every CPU's pending drops and owed passes, as readers add them to the
/// buckets they name, less what the latest counter resets zeroed of them.
PendingDrops read_accounts(const MapSet &maps);

/// What the counters resets of the program whose hash seed is `seed` left
/// on CPUs' accounts (reset_counters): readers take it off the buckets named.
std::vector<PendingDrops::Debit> read_reset_debits(uint64_t seed);

/// Where the counts a reset zeroed on CPUs' accounts are kept: a file in
/// the instance's run directory (default_run_dir()) named by the
/// loaded program's hash seed, so that each load (and each instance) has
/// its own and a reload starts with none.
std::string reset_debits_path(uint64_t hash_seed);
/// Removes every program's record of reset counters from `run_dir`
/// (`detach --all`: no program is left whose counters they correct).
void forget_reset_records(const std::string &run_dir);

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
/// "bans": N, "rules": [...], "global": {...}}, streaming the sources (there
/// may be millions). with_global false: without the "global" object (`stats
/// --rule R`, which shows that rule's lines only). with_rules false: the
/// sources and tracked_sources only, no whole-table figure (`stats --source
/// ADDR`, whose text prints that source's lines and the count only).
void write_stats_json(std::ostream &out, const Stats &s, bool with_global = true, bool with_rules = true);

} // namespace sluice
