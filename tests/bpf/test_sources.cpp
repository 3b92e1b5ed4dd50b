// The IPv4 source table under the test clock: which bucket is evicted, and
// what the eviction counters say, with every packet's time set by the test.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>

#include "replay.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t MS = 1000000ULL, SEC = 1000 * MS;

RuleSpec limit_rule(const char *rate = "1000/s", uint64_t burst = 100)
{
	RuleSpec r;
	r.cidr = parse_cidr("10.0.0.0/8");
	r.rate = parse_rate(rate);
	r.burst = burst;
	r.name = "limit";
	validate_rule(r);
	return r;
}

bool tracked(const Stats &s, uint32_t source)
{
	return std::any_of(s.sources.begin(), s.sources.end(),
			   [&](const SourceStats &x) { return x.source == source_address(source); });
}

} // namespace

// A CPU whose coarse clock reads 4 ms behind another's finds the way that CPU
// stamped "in the future". That way is the freshest of its set, not 2^32
// stamps old: the new bucket evicts a way idle for 504 ms, and since that one
// was seen within the last second, the eviction is counted as active.
TEST(SourceTable, AWayStampedAheadOfTheClockIsTheFreshestNotTheOldest)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	Replayer kernel(limit_rule(), TableSizes{4, 64, 64}); // one set of four ways
	const uint64_t t = TRACE_START_NS + 10 * SEC;
	Trace before;
	for (uint32_t src : {0u, 1u, 2u}) // two packets each: out of probation
		for (int i = 0; i < 2; i++)
			before.push_back({t - 504 * MS, src});
	for (int i = 0; i < 2; i++)
		before.push_back({t + 4 * MS, 3}); // stamped by a clock 4 ms ahead
	kernel.run(before);
	kernel.run({{t, 4}}); // a new source, on the clock that lags

	Stats s = collect_stats(kernel.maps(), {});
	EXPECT_TRUE(tracked(s, 3)) << "the freshest way was evicted";
	EXPECT_TRUE(tracked(s, 4));
	EXPECT_EQ(s.tracked_sources, 4u);
	EXPECT_EQ(s.global[SLUICE_CNT_INFO_EVICTED].packets, 1u);
	EXPECT_EQ(s.global[SLUICE_CNT_INFO_EVICTED_ACTIVE].packets, 1u) << "a source idle for 504 ms is active";
}

// The signal that the table is too small must fire when it is: 3,514 sources,
// each sending 140 packets a second, share a 1,024-bucket table. Every bucket
// evicted belongs to a source that sent within the last 7 ms, on probation or
// not, so every eviction is of an active source.
TEST(SourceTable, EvictedActiveFiresWhenTheTableIsTooSmallForTheActiveSources)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	const uint32_t sources = 3514;
	Replayer kernel(limit_rule(), TableSizes{1024, 64, 64});
	Trace flood = constant_flood(140.0 * sources, 2 * SEC, sources);
	kernel.run(flood);

	Stats s = collect_stats(kernel.maps(), {});
	uint64_t evicted = s.global[SLUICE_CNT_INFO_EVICTED].packets;
	uint64_t active = s.global[SLUICE_CNT_INFO_EVICTED_ACTIVE].packets;
	std::printf("%u sources at 140 pps in 1,024 buckets: %zu packets, %llu evicted, %llu of them active\n",
		    sources, flood.size(), (unsigned long long)evicted, (unsigned long long)active);
	EXPECT_GT(evicted, flood.size() / 2) << "most packets find their bucket gone";
	EXPECT_GE(double(active), 0.99 * double(evicted)) << "the table-too-small signal";
	EXPECT_LE(active, evicted);
}

// Quiet sources are evicted without being counted as active.
TEST(SourceTable, EvictingSourcesIdleForMoreThanASecondIsNotActive)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	Replayer kernel(limit_rule(), TableSizes{4, 64, 64});
	const uint64_t t = TRACE_START_NS + 10 * SEC;
	Trace trace;
	for (uint32_t src = 0; src < 4; src++) {
		trace.push_back({t, src});
		if (src % 2)
			trace.push_back({t, src}); // two of them leave probation
	}
	for (uint32_t src = 4; src < 8; src++)
		trace.push_back({t + 2200 * MS, src});
	kernel.run(trace);
	Stats s = collect_stats(kernel.maps(), {});
	EXPECT_EQ(s.global[SLUICE_CNT_INFO_EVICTED].packets, 4u);
	EXPECT_EQ(s.global[SLUICE_CNT_INFO_EVICTED_ACTIVE].packets, 0u);
}
