// SPDX-License-Identifier: GPL-2.0-only
#include "rates.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <unordered_map>

#include "net.h"

namespace sluice {

namespace {

/// A counter's growth; a counter that went down was reset and grew from zero.
uint64_t growth(uint64_t before, uint64_t after) { return after >= before ? after - before : after; }

FlowCounts rule_counts(const RuleStats &r)
{
	const auto &c = r.counters;
	return {c.passed_packets, c.passed_bytes, c.dropped_packets, c.dropped_bytes};
}

FlowCounts source_counts(const SourceStats &s)
{
	return {s.passed_packets, s.passed_bytes, s.dropped_packets, s.dropped_bytes};
}

/// Every frame by verdict: the verdict counters partition the traffic.
FlowCounts total_counts(const Stats &s)
{
	FlowCounts t;
	for (int i = 0; i < SLUICE_CNT_VERDICT_END; i++) {
		bool drop = (SLUICE_DROP_VERDICTS >> i) & 1;
		(drop ? t.dropped_packets : t.passed_packets) += s.global[i].packets;
		(drop ? t.dropped_bytes : t.passed_bytes) += s.global[i].bytes;
	}
	return t;
}

/// A source's row across readings: its rule, and the bucket generation an
/// edit that restarts the buckets moves on (then its counters start anew).
std::string source_key(const SourceStats &s)
{
	return std::to_string(s.rule_id) + "/" + std::to_string(s.bucket_id) + " " + s.source;
}

double value_of(const std::optional<FlowRates> &r, RateKey key)
{
	if (!r)
		return 0;
	switch (key) {
	case RateKey::pass_packets: return r->passed.packets_per_s;
	case RateKey::pass_bits: return r->passed.bits_per_s;
	case RateKey::drop_packets: return r->dropped.packets_per_s;
	case RateKey::drop_bits: return r->dropped.bits_per_s;
	case RateKey::name: break;
	}
	return 0;
}

/// Sorts `rows` by `less` (the natural order), reversed if asked; equal rows
/// keep their order either way.
template <class Row, class Less>
void sort_rows(std::vector<Row> &rows, Less less, bool reverse)
{
	if (reverse)
		std::stable_sort(rows.begin(), rows.end(), [&](const Row &a, const Row &b) { return less(b, a); });
	else
		std::stable_sort(rows.begin(), rows.end(), less);
}

} // namespace

FlowRates rates_between(const FlowCounts &before, const FlowCounts &after, double seconds)
{
	auto per_s = [seconds](uint64_t b, uint64_t a) { return static_cast<double>(growth(b, a)) / seconds; };
	FlowRates r;
	r.passed.packets_per_s = per_s(before.passed_packets, after.passed_packets);
	r.passed.bits_per_s = 8 * per_s(before.passed_bytes, after.passed_bytes);
	r.dropped.packets_per_s = per_s(before.dropped_packets, after.dropped_packets);
	r.dropped.bits_per_s = 8 * per_s(before.dropped_bytes, after.dropped_bytes);
	return r;
}

RateView rate_view(const Stats *before, const Stats &after, double seconds)
{
	RateView view;
	view.tracked_sources = after.tracked_sources;
	bool deltas = before && seconds > 0;
	if (deltas)
		view.seconds = seconds;

	std::unordered_map<uint32_t, const RuleStats *> old_rules;
	std::unordered_map<std::string, const SourceStats *> old_sources;
	if (deltas) {
		for (const auto &r : before->rules)
			old_rules[r.rule.id] = &r;
		for (const auto &s : before->sources)
			old_sources[source_key(s)] = &s;
		view.total = rates_between(total_counts(*before), total_counts(after), seconds);
	}

	for (const auto &r : after.rules) {
		RuleRates row{r.rule, r.sources, std::nullopt};
		if (deltas) {
			auto it = old_rules.find(r.rule.id);
			row.rates = rates_between(it == old_rules.end() ? FlowCounts{} : rule_counts(*it->second),
						  rule_counts(r), seconds);
		}
		view.rules.push_back(std::move(row));
	}
	for (const auto &s : after.sources) {
		SourceRates row{s.source, s.rule, s.rule_id, s.shadow, std::nullopt};
		if (deltas) {
			auto it = old_sources.find(source_key(s));
			row.rates = rates_between(it == old_sources.end() ? FlowCounts{} : source_counts(*it->second),
						  source_counts(s), seconds);
		}
		view.sources.push_back(std::move(row));
	}
	return view;
}

std::string_view rate_key_title(RateKey k)
{
	switch (k) {
	case RateKey::name: return "NAME";
	case RateKey::pass_packets: return "PASS_PKT/S";
	case RateKey::pass_bits: return "PASS_BIT/S";
	case RateKey::drop_packets: return "DROP_PKT/S";
	case RateKey::drop_bits: return "DROP_BIT/S";
	}
	return "?";
}

void sort_view(RateView &view, RateKey key, bool reverse)
{
	// Ties: rules stay in match order, sources by rule id then address.
	std::vector<Cidr> addr(view.sources.size());
	for (size_t i = 0; i < addr.size(); i++)
		addr[i] = parse_cidr(view.sources[i].source);
	std::vector<size_t> order(view.sources.size());
	std::iota(order.begin(), order.end(), 0);
	std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
		const SourceRates &x = view.sources[a], &y = view.sources[b];
		return x.rule_id != y.rule_id ? x.rule_id < y.rule_id : addr[a] < addr[b];
	});

	if (key == RateKey::name) {
		std::stable_sort(view.rules.begin(), view.rules.end(),
				 [](const RuleRates &a, const RuleRates &b) { return a.rule.spec.name < b.rule.spec.name; });
		if (reverse)
			std::reverse(view.rules.begin(), view.rules.end()); // names are unique
		sort_rows(order, [&](size_t a, size_t b) { return addr[a] < addr[b]; }, reverse);
	} else {
		sort_rows(view.rules,
			  [key](const RuleRates &a, const RuleRates &b) {
				  return value_of(a.rates, key) > value_of(b.rates, key);
			  },
			  reverse);
		sort_rows(order,
			  [&](size_t a, size_t b) {
				  return value_of(view.sources[a].rates, key) > value_of(view.sources[b].rates, key);
			  },
			  reverse);
	}
	std::vector<SourceRates> sorted;
	sorted.reserve(order.size());
	for (size_t i : order)
		sorted.push_back(std::move(view.sources[i]));
	view.sources = std::move(sorted);
}

std::string format_si(double v)
{
	if (!std::isfinite(v) || v < 0)
		return "-";
	const char *prefixes[] = {"", "k", "M", "G", "T", "P"};
	size_t p = 0;
	// Round to 3 significant digits first, so 999.96 shows as 1.00k, not 1000.
	auto rounded = [](double x) {
		if (x >= 100)
			return std::round(x);
		if (x >= 10)
			return std::round(x * 10) / 10;
		return std::round(x * 100) / 100;
	};
	while (rounded(v) >= 1000 && p + 1 < std::size(prefixes)) {
		v /= 1000;
		p++;
	}
	v = rounded(v);
	char buf[32];
	if (v == 0)
		return "0";
	if (v >= 100)
		std::snprintf(buf, sizeof(buf), "%.0f%s", v, prefixes[p]);
	else if (v >= 10)
		std::snprintf(buf, sizeof(buf), "%.1f%s", v, prefixes[p]);
	else
		std::snprintf(buf, sizeof(buf), "%.2f%s", v, prefixes[p]);
	return buf;
}

} // namespace sluice
