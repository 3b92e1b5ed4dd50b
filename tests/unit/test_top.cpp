// SPDX-License-Identifier: GPL-2.0-only
// `sluice top` without a terminal or a kernel: rates from two made-up
// readings, sorting, number formatting, the screen's layout and --interval.
#include <gtest/gtest.h>

#include <sstream>

#include "error.h"
#include "rates.h"
#include "top.h"
#include "top_view.h"

using namespace sluice;

namespace {

RuleStats rule(uint32_t id, const std::string &name, uint64_t passed, uint64_t dropped, uint64_t size = 100)
{
	RuleStats r;
	r.rule.id = id;
	r.rule.spec.name = name;
	r.rule.spec.action = Action::limit;
	r.rule.spec.rate = parse_rate("50/s");
	r.counters.passed_packets = passed;
	r.counters.passed_bytes = passed * size;
	r.counters.dropped_packets = dropped;
	r.counters.dropped_bytes = dropped * size;
	return r;
}

SourceStats source(const std::string &addr, uint32_t rule_id, uint64_t passed, uint64_t dropped, uint64_t size = 100)
{
	SourceStats s;
	s.source = addr;
	s.rule = "rule" + std::to_string(rule_id);
	s.rule_id = rule_id;
	s.passed_packets = passed;
	s.passed_bytes = passed * size;
	s.dropped_packets = dropped;
	s.dropped_bytes = dropped * size;
	return s;
}

const SourceRates &find_source(const RateView &v, const std::string &addr)
{
	for (const auto &s : v.sources)
		if (s.source == addr)
			return s;
	throw std::runtime_error("no row for " + addr);
}

std::vector<std::string> source_order(const RateView &v)
{
	std::vector<std::string> out;
	for (const auto &s : v.sources)
		out.push_back(s.source);
	return out;
}

std::vector<std::string> rule_order(const RateView &v)
{
	std::vector<std::string> out;
	for (const auto &r : v.rules)
		out.push_back(r.rule.spec.name);
	return out;
}

} // namespace

TEST(TopRates, PacketsAndBitsPerSecondFromTheCounterDelta)
{
	FlowCounts before{100, 10000, 300, 30000}, after{150, 15000, 450, 45000};
	FlowRates r = rates_between(before, after, 2.0);
	EXPECT_DOUBLE_EQ(r.passed.packets_per_s, 25);
	EXPECT_DOUBLE_EQ(r.passed.bits_per_s, 25 * 100 * 8);
	EXPECT_DOUBLE_EQ(r.dropped.packets_per_s, 75);
	EXPECT_DOUBLE_EQ(r.dropped.bits_per_s, 75 * 100 * 8);
}

TEST(TopRates, ACounterThatWentDownWasResetAndCountsFromZero)
{
	// A bucket evicted and made anew within the interval: its 40 packets
	// happened since, not -60.
	FlowRates r = rates_between({100, 1000, 0, 0}, {40, 400, 0, 0}, 1.0);
	EXPECT_DOUBLE_EQ(r.passed.packets_per_s, 40);
	EXPECT_DOUBLE_EQ(r.passed.bits_per_s, 3200);
}

TEST(TopRates, TheFirstReadingHasNoRatesAndLaterOnesMatchRowsById)
{
	Stats first;
	first.rules = {rule(1, "web", 100, 0), rule(2, "ssh", 10, 5)};
	first.sources = {source("10.0.0.1", 1, 50, 0), source("10.0.0.2", 1, 50, 0)};
	first.global[SLUICE_CNT_PASS_LIMIT] = {110, 11000};
	first.global[SLUICE_CNT_DROP_RATE] = {5, 500};

	RateView v0 = rate_view(nullptr, first, 0);
	ASSERT_EQ(v0.rules.size(), 2u);
	EXPECT_FALSE(v0.rules[0].rates);
	EXPECT_FALSE(v0.sources[0].rates);
	EXPECT_FALSE(v0.total);

	Stats second;
	// Rule 2 was deleted, rule 3 added: it counts from zero.
	second.rules = {rule(1, "web", 300, 100), rule(3, "new", 20, 0)};
	second.sources = {source("10.0.0.1", 1, 150, 100), source("10.0.0.2", 1, 150, 0), source("10.0.0.3", 3, 20, 0)};
	second.global[SLUICE_CNT_PASS_LIMIT] = {330, 33000};
	second.global[SLUICE_CNT_PASS_NO_MATCH] = {10, 1000};
	second.global[SLUICE_CNT_DROP_RATE] = {105, 10500};
	second.tracked_sources = 3;

	RateView v = rate_view(&first, second, 2.0);
	EXPECT_DOUBLE_EQ(v.seconds, 2.0);
	EXPECT_EQ(v.tracked_sources, 3u);
	ASSERT_EQ(v.rules.size(), 2u);
	EXPECT_DOUBLE_EQ(v.rules[0].rates->passed.packets_per_s, 100);
	EXPECT_DOUBLE_EQ(v.rules[0].rates->dropped.packets_per_s, 50);
	EXPECT_DOUBLE_EQ(v.rules[1].rates->passed.packets_per_s, 10) << "a new rule counts from zero";
	EXPECT_DOUBLE_EQ(find_source(v, "10.0.0.1").rates->dropped.packets_per_s, 50);
	EXPECT_DOUBLE_EQ(find_source(v, "10.0.0.2").rates->passed.packets_per_s, 50);
	EXPECT_DOUBLE_EQ(find_source(v, "10.0.0.3").rates->passed.packets_per_s, 10);
	// Totals are every verdict: passes with and without a rule, and drops.
	ASSERT_TRUE(v.total);
	EXPECT_DOUBLE_EQ(v.total->passed.packets_per_s, (330 + 10 - 110) / 2.0);
	EXPECT_DOUBLE_EQ(v.total->dropped.packets_per_s, 50);
	EXPECT_DOUBLE_EQ(v.total->dropped.bits_per_s, 50 * 100 * 8);
}

TEST(TopRates, ASourceIsMatchedUnderItsOwnRule)
{
	// One address under two rules (layered limits) is two rows.
	Stats a, b;
	a.rules = {rule(1, "r1", 0, 0), rule(2, "r2", 0, 0)};
	b.rules = a.rules;
	a.sources = {source("10.0.0.1", 1, 10, 0), source("10.0.0.1", 2, 100, 0)};
	b.sources = {source("10.0.0.1", 1, 20, 0), source("10.0.0.1", 2, 300, 0)};
	RateView v = rate_view(&a, b, 1.0);
	ASSERT_EQ(v.sources.size(), 2u);
	EXPECT_DOUBLE_EQ(v.sources[0].rates->passed.packets_per_s, 10);
	EXPECT_DOUBLE_EQ(v.sources[1].rates->passed.packets_per_s, 200);
}

TEST(TopRates, SortingByEveryKeyBothWays)
{
	Stats a, b;
	a.rules = {rule(1, "zeta", 0, 0), rule(2, "alpha", 0, 0), rule(3, "mid", 0, 0)};
	// zeta passes most, alpha drops most; mid drops most bits (big packets).
	b.rules = {rule(1, "zeta", 500, 10), rule(2, "alpha", 100, 300), rule(3, "mid", 50, 200, 1500)};
	a.sources = {source("10.0.0.10", 1, 0, 0), source("10.0.0.9", 1, 0, 0), source("fd00::1", 2, 0, 0)};
	b.sources = {source("10.0.0.10", 1, 5, 50), source("10.0.0.9", 1, 80, 0), source("fd00::1", 2, 1, 20, 1500)};
	const RateView base = rate_view(&a, b, 1.0);

	RateView v = base;
	sort_view(v, RateKey::drop_packets, false);
	EXPECT_EQ(rule_order(v), (std::vector<std::string>{"alpha", "mid", "zeta"}));
	EXPECT_EQ(source_order(v), (std::vector<std::string>{"10.0.0.10", "fd00::1", "10.0.0.9"}));
	sort_view(v, RateKey::drop_bits, false);
	EXPECT_EQ(rule_order(v), (std::vector<std::string>{"mid", "alpha", "zeta"}));
	EXPECT_EQ(source_order(v), (std::vector<std::string>{"fd00::1", "10.0.0.10", "10.0.0.9"}));
	sort_view(v, RateKey::pass_packets, false);
	EXPECT_EQ(rule_order(v), (std::vector<std::string>{"zeta", "alpha", "mid"}));
	EXPECT_EQ(source_order(v), (std::vector<std::string>{"10.0.0.9", "10.0.0.10", "fd00::1"}));
	sort_view(v, RateKey::pass_packets, true);
	EXPECT_EQ(rule_order(v), (std::vector<std::string>{"mid", "alpha", "zeta"}));
	// Names: rules by name, sources by address (10.0.0.9 before 10.0.0.10).
	sort_view(v, RateKey::name, false);
	EXPECT_EQ(rule_order(v), (std::vector<std::string>{"alpha", "mid", "zeta"}));
	EXPECT_EQ(source_order(v), (std::vector<std::string>{"10.0.0.9", "10.0.0.10", "fd00::1"}));
	sort_view(v, RateKey::name, true);
	EXPECT_EQ(rule_order(v), (std::vector<std::string>{"zeta", "mid", "alpha"}));
	EXPECT_EQ(source_order(v), (std::vector<std::string>{"fd00::1", "10.0.0.10", "10.0.0.9"}));
}

TEST(TopRates, EqualRatesKeepRulesInMatchOrder)
{
	Stats b;
	b.rules = {rule(7, "b", 0, 0), rule(3, "c", 0, 0), rule(5, "a", 0, 0)};
	RateView v = rate_view(nullptr, b, 0);
	sort_view(v, RateKey::drop_packets, false);
	EXPECT_EQ(rule_order(v), (std::vector<std::string>{"b", "c", "a"}));
	sort_view(v, RateKey::drop_packets, true);
	EXPECT_EQ(rule_order(v), (std::vector<std::string>{"b", "c", "a"}));
}

TEST(TopFormat, ThreeSignificantDigitsWithAnSiPrefix)
{
	EXPECT_EQ(format_si(0), "0");
	EXPECT_EQ(format_si(0.5), "0.50");
	EXPECT_EQ(format_si(7), "7.00");
	EXPECT_EQ(format_si(12.345), "12.3");
	EXPECT_EQ(format_si(999), "999");
	EXPECT_EQ(format_si(999.7), "1.00k");
	EXPECT_EQ(format_si(1250), "1.25k");
	EXPECT_EQ(format_si(12500), "12.5k");
	EXPECT_EQ(format_si(125e6), "125M");
	EXPECT_EQ(format_si(1.25e9), "1.25G");
	EXPECT_EQ(format_si(-1), "-");
}

namespace {

RateView sample_view(size_t rules, size_t sources)
{
	Stats a, b;
	for (uint32_t i = 1; i <= rules; i++) {
		a.rules.push_back(rule(i, "rule" + std::to_string(i), 0, 0));
		b.rules.push_back(rule(i, "rule" + std::to_string(i), 50 * i, 150 * i));
	}
	for (uint32_t i = 1; i <= sources; i++)
		b.sources.push_back(source("10.0.0." + std::to_string(i), 1, 50, 150 * i, 92));
	b.tracked_sources = sources;
	RateView v = rate_view(&a, b, 1.0);
	sort_view(v, RateKey::drop_packets, false);
	return v;
}

TopHeader header()
{
	return {"12:00:00", "eth0 (native)", 1000000000, RateKey::drop_packets, false, true};
}

/// The words of the line that starts with `first`; empty if none does.
std::vector<std::string> row(const std::vector<std::string> &lines, const std::string &first)
{
	for (const auto &l : lines)
		if (l.rfind(first + " ", 0) == 0) {
			std::vector<std::string> words;
			std::istringstream in(l);
			for (std::string w; in >> w;)
				words.push_back(w);
			return words;
		}
	return {};
}

bool contains(const std::vector<std::string> &lines, const std::string &text)
{
	for (const auto &l : lines)
		if (l.find(text) != std::string::npos)
			return true;
	return false;
}

} // namespace

TEST(TopView, TheHeaderNamesInterfacesTotalsAndTheSortedColumn)
{
	RateView v = sample_view(2, 3);
	auto lines = render_top(v, header(), {100, 30, 0});
	EXPECT_EQ(lines[0], "sluice top - 12:00:00 - every 1s - interfaces: eth0 (native)");
	EXPECT_NE(lines[2].find("sort: DROP_PKT/S, largest first"), std::string::npos) << lines[2];
	EXPECT_TRUE(contains(lines, "DROP_PKT/S*"));
	EXPECT_TRUE(contains(lines, "2 rules, 3 sources tracked"));
	// rule2: 100 pkt/s passed, 300 dropped at 100 bytes: 80.0k and 240k bit/s.
	EXPECT_EQ(row(lines, "rule2"), (std::vector<std::string>{"rule2", "50/s", "0", "100", "80.0k", "300", "240k"}));
	// 10.0.0.3: 50 passed, 450 dropped at 92 bytes.
	EXPECT_EQ(row(lines, "10.0.0.3"),
		  (std::vector<std::string>{"10.0.0.3", "rule1", "50.0", "36.8k", "450", "331k"}));
}

TEST(TopView, TheFirstFrameShowsDashesForRates)
{
	Stats b;
	b.rules = {rule(1, "web", 10, 10)};
	b.sources = {source("10.0.0.1", 1, 10, 10)};
	RateView v = rate_view(nullptr, b, 0);
	auto lines = render_top(v, header(), {100, 30, 0});
	EXPECT_TRUE(contains(lines, "rates after the first interval"));
	EXPECT_EQ(row(lines, "web"), (std::vector<std::string>{"web", "50/s", "0", "-", "-", "-", "-"}));
	EXPECT_EQ(row(lines, "10.0.0.1"), (std::vector<std::string>{"10.0.0.1", "rule1", "-", "-", "-", "-"}));
}

TEST(TopView, EveryLineFitsTheWindowAndCutSectionsSaySo)
{
	RateView v = sample_view(20, 50);
	for (int width : {60, 80, 132})
		for (int height : {10, 11, 24, 40, 200}) {
			SCOPED_TRACE(std::to_string(width) + "x" + std::to_string(height));
			auto lines = render_top(v, header(), {width, height, 0});
			EXPECT_LE(lines.size(), static_cast<size_t>(height));
			for (const auto &l : lines)
				EXPECT_LE(l.size(), static_cast<size_t>(width));
			if (height < 80) {
				EXPECT_TRUE(contains(lines, "more rules") || contains(lines, " of 50 sources shown"));
			} else {
				EXPECT_FALSE(contains(lines, "more rules"));
				EXPECT_FALSE(contains(lines, "sources shown"));
			}
			EXPECT_TRUE(contains(lines, "SOURCE")) << "sources keep rows under many rules";
		}
}

TEST(TopView, ATooSmallWindowGetsOneLine)
{
	RateView v = sample_view(2, 2);
	auto lines = render_top(v, header(), {59, 30, 0});
	ASSERT_EQ(lines.size(), 1u);
	EXPECT_EQ(lines[0].substr(0, 29), "window too small (59x30); slu");
	lines = render_top(v, header(), {80, 9, 0});
	ASSERT_EQ(lines.size(), 1u);
	EXPECT_EQ(lines[0], "window too small (80x9); sluice top needs 60x10, q quits");
}

TEST(TopView, TopNCapsTheSourcesOfTheReport)
{
	RateView v = sample_view(1, 30);
	TopHeader h = header();
	h.interactive = false;
	auto lines = render_top(v, h, {0, 0, 5});
	EXPECT_TRUE(contains(lines, "(5 of 30 sources shown)"));
	EXPECT_TRUE(contains(lines, "10.0.0.30 ")) << "most dropped first";
	EXPECT_FALSE(contains(lines, "10.0.0.25 "));
	EXPECT_FALSE(contains(lines, "[q quit")) << "no keys in a report";
}

TEST(TopOptions, IntervalTakesSecondsOrADurationFrom100msTo1h)
{
	EXPECT_EQ(parse_interval_ns("1"), 1000000000u);
	EXPECT_EQ(parse_interval_ns("0.5"), 500000000u);
	EXPECT_EQ(parse_interval_ns("250ms"), 250000000u);
	EXPECT_EQ(parse_interval_ns("2s"), 2000000000u);
	EXPECT_EQ(parse_interval_ns("1h"), 3600000000000u);
	for (const char *bad : {"0", "0.05", "50ms", "2h", "1e9", "abc", "", "-1", "1.5.2", "inf", "nan", "1 s"}) {
		SCOPED_TRACE(bad);
		EXPECT_THROW(parse_interval_ns(bad), Error);
	}
	try {
		parse_interval_ns("abc");
	} catch (const Error &e) {
		EXPECT_STREQ(e.what(), "invalid --interval 'abc': seconds (1, 0.5) or a duration (500ms, 2s)");
	}
	try {
		parse_interval_ns("0");
	} catch (const Error &e) {
		EXPECT_STREQ(e.what(), "--interval must be from 100ms to 1h, not '0'");
	}
}

TEST(TopOptions, SortKeys)
{
	for (RateKey k : RATE_KEYS)
		EXPECT_EQ(parse_rate_key(rate_key_option(k)), k);
	EXPECT_THROW(parse_rate_key("drops"), Error);
}
