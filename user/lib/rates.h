// SPDX-License-Identifier: GPL-2.0-only
// Rates from counters: two readings of the statistics (collect_stats) some
// seconds apart become packets and bits per second, per rule, per source and
// in total. What `sluice top` shows; pure, so tests drive it with made-up
// readings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stats.h"

namespace sluice {

/// Packets and bits per second of one kind of verdict.
struct Throughput {
	double packets_per_s = 0;
	double bits_per_s = 0;
};

/// Passed and dropped throughput of one row. For a shadow rule, as the
/// kernel counts it: "dropped" is what it would have dropped, and passed.
struct FlowRates {
	Throughput passed, dropped;
};

/// Cumulative counters of one row, as read.
struct FlowCounts {
	uint64_t passed_packets = 0, passed_bytes = 0;
	uint64_t dropped_packets = 0, dropped_bytes = 0;
};

/// Rates between two readings `seconds` apart (> 0). A counter that went
/// down was reset (a bucket evicted and made anew) and counts from zero: its
/// new value is what happened within the interval.
FlowRates rates_between(const FlowCounts &before, const FlowCounts &after, double seconds);

struct RuleRates {
	InstalledRule rule;
	uint64_t sources = 0;           ///< buckets tracked at the second reading
	std::optional<FlowRates> rates; ///< none on the first reading
};

struct SourceRates {
	std::string source; ///< address or prefix, as `sluice stats` names it
	std::string rule;
	uint32_t rule_id = 0;
	bool shadow = false;
	std::optional<FlowRates> rates;
};

/// Everything `sluice top` shows of one refresh.
struct RateView {
	double seconds = 0; ///< between the two readings; 0 on the first
	std::vector<RuleRates> rules;     ///< in match order until sorted
	std::vector<SourceRates> sources; ///< every source of the second reading
	uint64_t tracked_sources = 0;
	/// Every frame the program judged (all verdicts, rules or none): passed
	/// includes fail-open and shadow passes, dropped every drop verdict.
	std::optional<FlowRates> total;
};

/// The view between two readings taken `seconds` apart; `before` null (the
/// first refresh) gives rows without rates. Rules are matched by rule id
/// (ids are never reused), sources by rule id, bucket id and source; a row
/// new since `before` (a bucket an edit restarted among them) counts from
/// zero. `after` should hold every source (StatsQuery top 0):
/// rates rank sources, and a source cut from a reading has no delta.
RateView rate_view(const Stats *before, const Stats &after, double seconds);

/// What rows can be sorted by.
enum class RateKey { name, pass_packets, pass_bits, drop_packets, drop_bits };
inline constexpr RateKey RATE_KEYS[] = {RateKey::name, RateKey::pass_packets, RateKey::pass_bits,
					RateKey::drop_packets, RateKey::drop_bits};

/// Column title of a key: "NAME", "PASS_PKT/S", "PASS_BIT/S", "DROP_PKT/S", "DROP_BIT/S".
std::string_view rate_key_title(RateKey k);

/// Sorts rules and sources by `key` in its natural order (rates largest
/// first, names A to Z: rules by name, sources by address), or the other way
/// round if `reverse`. Rows without rates count as 0. Ties keep rules in match
/// order and sources by rule, then address.
void sort_view(RateView &view, RateKey key, bool reverse);

/// 3 significant digits with an SI prefix: "0", "0.50", "12.5", "999", "1.25k",
/// "12.5k", "125M", "1.25G"; negative or not finite as "-".
std::string format_si(double v);

} // namespace sluice
