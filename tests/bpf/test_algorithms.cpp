// SPDX-License-Identifier: GPL-2.0-only
// Every algorithm through the real XDP program (the test-clock build), driven
// by arrival traces with BPF_PROG_TEST_RUN. The kernel's decisions must equal
// an independent C++ model's, packet by packet, and each algorithm's promise
// must hold on every trace.
#include <gtest/gtest.h>

#include <unistd.h>

#include <sstream>

#include "analysis.h"
#include "reference.h"
#include "replay.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t MS = 1000000ULL, SEC = 1000 * MS;

RuleSpec rule(Algo algo, const char *rate, uint64_t burst = 0, uint64_t warmup_ns = 0)
{
	RuleSpec r;
	r.cidr = parse_cidr("10.0.0.0/8");
	r.algo = algo;
	r.rate = parse_rate(rate);
	r.burst = burst;
	r.warmup_ns = warmup_ns;
	validate_rule(r);
	return r;
}

struct Named {
	const char *name;
	Trace trace;
};

std::vector<Named> traces_for(const RuleSpec &r)
{
	// Byte rules get 500-byte packets (random sizes in the Poisson trace).
	bool bytes = r.rate.counts_bytes();
	double per_sec = double(r.rate.amount) * 1e9 / double(r.rate.period_ns);
	if (bytes)
		per_sec /= 500 * (r.rate.unit == RateUnit::bits ? 8 : 1);
	uint64_t window = r.rate.period_ns;
	uint64_t per_window = static_cast<uint64_t>(per_sec * double(window) / 1e9);
	std::vector<Named> traces = {
		{"flood 2x", constant_flood(2 * per_sec, 3 * SEC)},
		{"flood 10x", constant_flood(10 * per_sec, 3 * SEC)},
		{"on-off bursts", on_off(20 * per_sec, 200 * MS, 1500 * MS, 3)},
		{"window-boundary attack", boundary_attack(per_window * 3 / 2, window, window / 20, 3)},
		{"20 sources at 3x", constant_flood(60 * per_sec, 2 * SEC, 20)},
		{"two CPUs, one source", two_cpus(10 * per_sec, 2 * SEC)},
	};
	if (bytes)
		for (auto &t : traces)
			for (auto &a : t.trace)
				a.payload = 472;
	traces.push_back({"poisson, random sizes", poisson(3 * per_sec, 3 * SEC, 7)});
	return traces;
}

void expect_kernel_equals_model(const RuleSpec &r, const char *label)
{
	ASSERT_EQ(geteuid(), 0u) << "replay loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "the two-CPU trace needs two CPUs";
	bool bytes = r.rate.counts_bytes();
	for (const auto &[name, trace] : traces_for(r)) {
		SCOPED_TRACE(std::string(label) + ", " + name);
		Replayer kernel(r);
		ReferenceModel model(r);
		std::vector<bool> got = kernel.run(trace);
		size_t mismatches = 0, first = SIZE_MAX, passed = 0;
		for (size_t i = 0; i < trace.size(); i++) {
			bool want = model.admit(trace[i].source, trace[i].t_ns, units(trace[i], bytes));
			if (want != got[i]) {
				mismatches++;
				first = std::min(first, i);
			}
			passed += got[i];
		}
		EXPECT_EQ(mismatches, 0u) << "of " << trace.size() << " packets; first at #" << first;
		EXPECT_GT(passed, 0u);
		EXPECT_LT(passed, trace.size()) << "every trace is over the limit somewhere";

		// The promise of each algorithm, on the kernel's decisions.
		if (r.has_burst()) {
			double rate = double(r.rate.amount) * 1e9 / double(r.rate.period_ns) /
				      (r.rate.unit == RateUnit::bits ? 8 : 1);
			EXPECT_TRUE(within_token_bucket_bound(trace, got, rate, double(r.burst), bytes))
				<< "more than burst + rate x T passed";
		} else if (r.algo == Algo::sliding_log) {
			EXPECT_LE(max_in_sliding_window(trace, got, r.rate.period_ns, bytes), r.rate.amount);
		} else {
			EXPECT_LE(max_in_aligned_window(trace, got, r.rate.period_ns, bytes), r.rate.amount);
		}
		Stats s = collect_stats(kernel.maps(), {});
		EXPECT_EQ(s.global[SLUICE_CNT_PASS_CONTENTION].packets, 0u) << "replay is sequential";
	}
}

} // namespace

TEST(Algorithms, TokenBucketMatchesItsModel)
{
	expect_kernel_equals_model(rule(Algo::token_bucket, "100/s", 20), "token-bucket");
}

TEST(Algorithms, TokenBucketInBytesMatchesItsModel)
{
	expect_kernel_equals_model(rule(Algo::token_bucket, "200kbit/s", 6000), "token-bucket bytes");
}

TEST(Algorithms, TokenBucketWithWarmupMatchesItsModel)
{
	expect_kernel_equals_model(rule(Algo::token_bucket, "100/s", 20, 1 * SEC), "token-bucket warm-up");
}

TEST(Algorithms, GcraMatchesItsModel)
{
	expect_kernel_equals_model(rule(Algo::gcra, "100/s", 20), "gcra");
	expect_kernel_equals_model(rule(Algo::gcra, "25kB/s", 3000), "gcra bytes");
}

TEST(Algorithms, FixedWindowMatchesItsModel)
{
	expect_kernel_equals_model(rule(Algo::fixed_window, "50/s"), "fixed-window");
	expect_kernel_equals_model(rule(Algo::fixed_window, "20kB/s"), "fixed-window bytes");
}

TEST(Algorithms, SlidingLogMatchesItsModel)
{
	expect_kernel_equals_model(rule(Algo::sliding_log, "20/s"), "sliding-log");
	expect_kernel_equals_model(rule(Algo::sliding_log, "64/500ms"), "sliding-log at the maximum");
}

TEST(Algorithms, SlidingWindowMatchesItsModel)
{
	expect_kernel_equals_model(rule(Algo::sliding_window, "50/s"), "sliding-window");
	expect_kernel_equals_model(rule(Algo::sliding_window, "20kB/s"), "sliding-window bytes");
}

TEST(Algorithms, FixedWindowPassesTwiceItsLimitAcrossABoundaryAndTheLogDoesNot)
{
	const uint64_t n = 40;
	Trace attack = boundary_attack(n, SEC, 50 * MS, 4);
	auto fixed = Replayer(rule(Algo::fixed_window, "40/s")).run(attack);
	auto log = Replayer(rule(Algo::sliding_log, "40/s")).run(attack);
	auto sliding = Replayer(rule(Algo::sliding_window, "40/s")).run(attack);
	EXPECT_EQ(max_in_sliding_window(attack, fixed, SEC, false), 2 * n) << "the flaw theory predicts";
	EXPECT_EQ(max_in_aligned_window(attack, fixed, SEC, false), n) << "yet each window holds its limit";
	EXPECT_EQ(max_in_sliding_window(attack, log, SEC, false), n) << "the log is exact";
	EXPECT_LE(max_in_sliding_window(attack, sliding, SEC, false), n + n / 10)
		<< "the weighted counter smooths the boundary";
}

TEST(Algorithms, WarmupStartsAtAThirdOfTheRateAndReachesItAfterThePeriod)
{
	// 100/s, burst 30, warm-up 2 s; a new source is cold. Flood it at 10x for 4 s.
	RuleSpec r = rule(Algo::token_bucket, "100/s", 30, 2 * SEC);
	Trace flood = constant_flood(1000, 4 * SEC);
	std::vector<bool> got = Replayer(r).run(flood);
	auto rate_between = [&](uint64_t from, uint64_t to) {
		uint64_t n = 0;
		for (size_t i = 0; i < flood.size(); i++)
			n += got[i] && flood[i].t_ns >= TRACE_START_NS + from && flood[i].t_ns < TRACE_START_NS + to;
		return double(n) * 1e9 / double(to - from);
	};
	double first = rate_between(100 * MS, 500 * MS), last = rate_between(3 * SEC, 4 * SEC);
	EXPECT_NEAR(first, 100.0 / 3 * 1.25, 100.0 / 3 * 0.35) << "cold: close to a third of the rate";
	EXPECT_NEAR(last, 100.0, 2.0) << "warm after the period: the full rate";
	EXPECT_LT(rate_between(100 * MS, 1 * SEC), rate_between(1 * SEC, 2 * SEC)) << "it ramps";

	// Idle for longer than the period: cold again.
	Trace again = flood;
	for (auto &a : again)
		a.t_ns += 10 * SEC;
	Replayer kernel(r);
	kernel.run(flood);
	std::vector<bool> second = kernel.run(again);
	uint64_t early = 0;
	for (size_t i = 0; i < again.size(); i++)
		early += second[i] && again[i].t_ns < TRACE_START_NS + 10 * SEC + 500 * MS;
	EXPECT_LT(double(early), 0.5 * 100 + 30) << "a quiet bucket cools down";
}

TEST(Algorithms, LongRunRateOfFloodsIsWithinHalfAPercent)
{
	for (Algo a : {Algo::token_bucket, Algo::gcra, Algo::sliding_log}) {
		SCOPED_TRACE(std::string(algo_name(a)));
		RuleSpec r = rule(a, "50/s", a == Algo::sliding_log ? 0 : 5);
		for (double factor : {2.0, 10.0, 100.0}) {
			Trace flood = constant_flood(50 * factor, 60 * SEC);
			std::vector<bool> got = Replayer(r).run(flood);
			EXPECT_NEAR(passed_rate(flood, got, false), 50.0, 50.0 * 0.005) << factor << "x";
		}
	}
}

TEST(Algorithms, ShadowRulesPassEverythingAndCountWhatTheyWouldDrop)
{
	RuleSpec r = rule(Algo::fixed_window, "10/s");
	r.shadow = true;
	Trace flood = constant_flood(100, 2 * SEC);
	Replayer kernel(r);
	std::vector<bool> got = kernel.run(flood);
	EXPECT_EQ(std::count(got.begin(), got.end(), true), static_cast<long>(flood.size())) << "nothing dropped";

	ReferenceModel model(r);
	uint64_t would = 0;
	for (const auto &a : flood)
		would += !model.admit(a.source, a.t_ns, 1);
	Stats s = collect_stats(kernel.maps(), {});
	ASSERT_EQ(s.sources.size(), 1u);
	EXPECT_EQ(s.sources[0].dropped_packets, would) << "would-be drops counted per source";
	EXPECT_EQ(s.global[SLUICE_CNT_PASS_SHADOW].packets, would);
	EXPECT_EQ(s.global[SLUICE_CNT_DROP_RATE].packets, 0u);
	std::ostringstream out;
	write_stats_json(out, s);
	nlohmann::json j = nlohmann::json::parse(out.str());
	EXPECT_EQ(j["sources"][0]["dropped_packets"], 0u);
	EXPECT_EQ(j["sources"][0]["would_drop_packets"], would);
	EXPECT_EQ(j["sources"][0]["passed_packets"], flood.size());
}

// Ticks are nanoseconds << 6: a new bucket that started at TAT 0 read as 4.5
// years in debt once uptime passed 2^57 ns, and every new source was dropped.
// Sources new after 4.5 years, and across the tick counter's wrap at 9.1
// years, get their burst and their rate.
TEST(Algorithms, NewSourcesPassAfterYearsOfUptimeAndAcrossTheTickWrap)
{
	const uint64_t starts[] = {(1ULL << 57) - 10 * SEC, (1ULL << 57) + SEC, (1ULL << 58) - 2 * SEC};
	for (Algo algo : {Algo::token_bucket, Algo::gcra}) {
		for (uint64_t start : starts) {
			Replayer replayer(rule(algo, "1000/s"));
			Trace trace;
			for (uint32_t i = 0; i < 50; i++)
				trace.push_back({.t_ns = start + i * 100 * MS, .source = i % 5});
			std::vector<bool> passed = replayer.run(trace);
			EXPECT_EQ(std::count(passed.begin(), passed.end(), true), 50)
				<< algo_name(algo) << " from " << start << " ns of uptime";
		}
	}
}
