// SPDX-License-Identifier: GPL-2.0-only
// The bucket arithmetic the XDP program runs (include/sluice_algos.h), driven
// by a fake clock with parameters compiled exactly as the controller does.
#include <gtest/gtest.h>

#include <random>

#include "rate.h"
#include "sluice_algos.h"

using namespace sluice;

namespace {

constexpr uint64_t NS = 1;
constexpr uint64_t MS = 1000000 * NS;
constexpr uint64_t SEC = 1000 * MS;

/// A bucket as the XDP program keeps it, with a clock the test moves.
struct FakeBucket {
	LimitParams p;
	uint64_t tat = 0;
	bool fresh = true;

	FakeBucket(const char *rate, uint64_t burst) : p(compile_limit(parse_rate(rate), burst)) {}

	bool offer(uint64_t now_ns, uint64_t cost = 1)
	{
		uint64_t now = sluice_ns_to_ticks(now_ns);
		uint64_t inc = sluice_cost_ticks(p.inc_mult, p.inc_shift, cost);
		__u64 next;
		if (fresh) { // the program creates a bucket with TAT = now
			tat = now;
			fresh = false;
		}
		if (!sluice_gcra_admit(tat, now, inc, p.capacity, &next))
			return false;
		tat = next;
		return true;
	}
};

} // namespace

TEST(Gcra, BurstThenExactlyTheRate)
{
	FakeBucket b("10/s", 5);
	uint64_t t = 1000 * SEC;
	int passed = 0;
	for (int i = 0; i < 20; i++)
		passed += b.offer(t);
	EXPECT_EQ(passed, 5) << "a full bucket passes the burst at once";
	EXPECT_FALSE(b.offer(t + 99 * MS)) << "not yet one interval later";
	EXPECT_TRUE(b.offer(t + 100 * MS)) << "one packet per 100 ms";
	EXPECT_FALSE(b.offer(t + 150 * MS));
	EXPECT_TRUE(b.offer(t + 200 * MS));
}

TEST(Gcra, IdleTimeRefillsUpToTheBurstOnly)
{
	FakeBucket b("100/s", 10);
	uint64_t t = 5 * SEC;
	for (int i = 0; i < 10; i++)
		ASSERT_TRUE(b.offer(t));
	t += 3600 * SEC; // an hour idle is worth 360000 packets, but the burst caps it
	int passed = 0;
	for (int i = 0; i < 50; i++)
		passed += b.offer(t);
	EXPECT_EQ(passed, 10);
}

TEST(Gcra, ClockSteppingBackwardsGrantsNoCredit)
{
	FakeBucket b("10/s", 2);
	uint64_t t = 50 * SEC;
	ASSERT_TRUE(b.offer(t));
	ASSERT_TRUE(b.offer(t));
	// Another CPU's clock reads 10 s earlier: still empty, nothing credited.
	EXPECT_FALSE(b.offer(t - 10 * SEC));
	EXPECT_FALSE(b.offer(t + 50 * MS));
	EXPECT_TRUE(b.offer(t + 100 * MS));
}

TEST(Gcra, LongRunRateHoldsWithinATenthOfAPercentAcrossRates)
{
	for (const char *rate : {"1/s", "7/s", "1000/s", "33333/s", "1000000/s", "6000/min"}) {
		Rate r = parse_rate(rate);
		// Burst 2 absorbs the phase of arrivals against the interval; with burst 1
		// an arrival a nanosecond early is dropped and the rate is quantised.
		FakeBucket b(rate, 2);
		// Offer 4x the rate, evenly spaced, for 1000 intervals of the rate.
		double per_sec = double(r.amount) * 1e9 / double(r.period_ns);
		uint64_t step = uint64_t(1e9 / per_sec / 4);
		uint64_t passed = 0, offered = uint64_t(4 * 1000);
		for (uint64_t i = 0; i < offered; i++)
			passed += b.offer(SEC + i * step);
		double expected = double(offered) * double(step) * per_sec / 1e9;
		EXPECT_NEAR(double(passed), expected, expected * 0.001 + 2) << rate;
	}
}

TEST(Gcra, ByteRatesChargeThePacketLength)
{
	FakeBucket b("1MB/s", 15000); // 15 full-size packets of burst
	uint64_t t = 10 * SEC;
	int passed = 0;
	for (int i = 0; i < 100; i++)
		passed += b.offer(t, 1500);
	EXPECT_EQ(passed, 10);
	EXPECT_FALSE(b.offer(t + 1 * MS, 1500));
	EXPECT_TRUE(b.offer(t + 1500 * 1000 * NS, 1500)) << "1500 bytes at 1 MB/s take 1.5 ms";
}

TEST(Gcra, NeverMoreThanBurstPlusRateTimesTimeUnderRandomArrivals)
{
	std::mt19937_64 rng(42);
	for (const char *rate : {"3/s", "1000/s", "250000/s", "10mbit/s"}) {
		Rate r = parse_rate(rate);
		uint64_t burst = r.counts_bytes() ? 20000 : 50;
		FakeBucket b(rate, burst);
		double units_per_ns = double(r.amount) / double(r.period_ns) / (r.unit == RateUnit::bits ? 8 : 1);
		std::vector<std::pair<uint64_t, uint64_t>> passed; // time, cost
		uint64_t t = SEC;
		for (int i = 0; i < 20000; i++) {
			t += rng() % uint64_t(4 / units_per_ns + 1);
			uint64_t cost = r.counts_bytes() ? 64 + rng() % 1437 : 1;
			if (b.offer(t, cost))
				passed.push_back({t, cost});
		}
		// Every window [passed[i], passed[j]] holds at most burst + rate * length.
		for (size_t i = 0; i < passed.size(); i += 97) {
			uint64_t sum = 0;
			for (size_t j = i; j < passed.size() && j < i + 2000; j++) {
				sum += passed[j].second;
				double bound = double(burst) + units_per_ns * double(passed[j].first - passed[i].first);
				ASSERT_LE(double(sum), bound + 1e-6) << rate << " window " << i << ".." << j;
			}
		}
	}
}

// ---- The other algorithms of include/sluice_algos.h, clock steps included.

TEST(TokenBucket, WarmupChargesThreeTimesWhenColdAndOnceWhenWarm)
{
	const uint64_t inc = sluice_ns_to_ticks(10 * MS), warmup = sluice_ns_to_ticks(SEC);
	EXPECT_NEAR(double(sluice_warm_cost(inc, warmup, warmup)), 3.0 * inc, 3.0 * inc * 1e-4) << "fully cold";
	EXPECT_EQ(sluice_warm_cost(inc, 0, warmup), inc) << "warm";
	EXPECT_NEAR(double(sluice_warm_cost(inc, warmup / 2, warmup)), 2.0 * inc, 2.0 * inc * 1e-4);
}

TEST(TokenBucket, ClockSteppingBackwardsRefillsNothing)
{
	__u64 tokens, last, cold;
	sluice_tb_init(&tokens, &last, &cold, 1000000, 3000, 0);
	ASSERT_TRUE(sluice_tb_admit(&tokens, &last, &cold, 1000000, 1000, 3000, 0));
	ASSERT_TRUE(sluice_tb_admit(&tokens, &last, &cold, 1000000, 1000, 3000, 0));
	ASSERT_TRUE(sluice_tb_admit(&tokens, &last, &cold, 1000000, 1000, 3000, 0));
	EXPECT_FALSE(sluice_tb_admit(&tokens, &last, &cold, 500000, 1000, 3000, 0)) << "earlier clock";
	EXPECT_EQ(last, 1000000u) << "the later time is kept";
	EXPECT_FALSE(sluice_tb_admit(&tokens, &last, &cold, 1000999, 1000, 3000, 0));
	EXPECT_TRUE(sluice_tb_admit(&tokens, &last, &cold, 1001000, 1000, 3000, 0));
}

TEST(FixedWindow, CountsPerAlignedWindowAndStaysPutWhenTheClockStepsBack)
{
	__u64 window = 0, count = 0;
	const uint64_t W = 10 * SEC;
	for (int i = 0; i < 3; i++)
		ASSERT_TRUE(sluice_fixed_admit(&window, &count, 25 * SEC, W, 3, 1));
	EXPECT_FALSE(sluice_fixed_admit(&window, &count, 29 * SEC, W, 3, 1));
	EXPECT_FALSE(sluice_fixed_admit(&window, &count, 15 * SEC, W, 3, 1)) << "no reset from the past";
	EXPECT_TRUE(sluice_fixed_admit(&window, &count, 30 * SEC, W, 3, 1)) << "a new window at 30 s";
}

TEST(SlidingWindow, WeighsThePreviousWindowByItsOverlap)
{
	__u64 window = 0, cur = 0, prev = 0;
	const uint64_t W = 10 * SEC;
	for (int i = 0; i < 10; i++)
		ASSERT_TRUE(sluice_sliding_admit(&window, &cur, &prev, 15 * SEC, W, 10, 1));
	// At 22.5 s a quarter of the sliding window lies in [20, 30): the previous
	// window's 10 weigh 7.5, so 2 more fit (7.5 rounded up to 8, + 2 = 10).
	EXPECT_TRUE(sluice_sliding_admit(&window, &cur, &prev, 22500 * MS, W, 10, 1));
	EXPECT_TRUE(sluice_sliding_admit(&window, &cur, &prev, 22500 * MS, W, 10, 1));
	EXPECT_FALSE(sluice_sliding_admit(&window, &cur, &prev, 22500 * MS, W, 10, 1));
	EXPECT_FALSE(sluice_sliding_admit(&window, &cur, &prev, 19 * SEC, W, 10, 1))
		<< "a clock behind the window weighs the previous window fully";
	EXPECT_TRUE(sluice_sliding_admit(&window, &cur, &prev, 45 * SEC, W, 10, 1)) << "two windows on: all clear";
	EXPECT_EQ(prev, 0u);
}

TEST(SlidingLog, NeverMoreThanNInAnyWindow)
{
	__u64 ring[SLUICE_MAX_LOG] = {};
	__u32 head = 0;
	const uint64_t W = SEC;
	for (int i = 0; i < 4; i++)
		ASSERT_TRUE(sluice_log_admit(ring, &head, 10 * SEC + i * 100 * MS, W, 4, 1));
	EXPECT_FALSE(sluice_log_admit(ring, &head, 10 * SEC + 999 * MS, W, 4, 1));
	EXPECT_TRUE(sluice_log_admit(ring, &head, 11 * SEC, W, 4, 1)) << "the first pass is a window old";
	EXPECT_FALSE(sluice_log_admit(ring, &head, 11 * SEC + 50 * MS, W, 4, 1));
	EXPECT_TRUE(sluice_log_admit(ring, &head, 11 * SEC + 100 * MS, W, 4, 1));
}

TEST(SlidingLog, AClockBehindTheNewestPassGainsNothing)
{
	__u64 ring[SLUICE_MAX_LOG] = {};
	__u32 head = 0;
	ASSERT_TRUE(sluice_log_admit(ring, &head, 20 * SEC, SEC, 2, 1));
	ASSERT_TRUE(sluice_log_admit(ring, &head, 5 * SEC, SEC, 2, 1)) << "not full yet";
	EXPECT_EQ(ring[1], 20 * SEC) << "logged as the newest time, not the earlier one";
	EXPECT_FALSE(sluice_log_admit(ring, &head, 20 * SEC + 999 * MS, SEC, 2, 1));
	EXPECT_TRUE(sluice_log_admit(ring, &head, 21 * SEC, SEC, 2, 1));
}

TEST(SlidingLog, ASuperPacketTakesOneEntryPerWirePacket)
{
	__u64 ring[SLUICE_MAX_LOG] = {};
	__u32 head = 0;
	ASSERT_TRUE(sluice_log_admit(ring, &head, 10 * SEC, SEC, 4, 3)) << "3 of 4 fit an empty window";
	EXPECT_FALSE(sluice_log_admit(ring, &head, 10 * SEC + 1 * MS, SEC, 4, 2)) << "5 would exceed 4";
	EXPECT_TRUE(sluice_log_admit(ring, &head, 10 * SEC + 2 * MS, SEC, 4, 1));
	EXPECT_FALSE(sluice_log_admit(ring, &head, 11 * SEC - 1, SEC, 4, 1));
	EXPECT_TRUE(sluice_log_admit(ring, &head, 11 * SEC, SEC, 4, 3)) << "the three of 10 s are a window old";
	EXPECT_FALSE(sluice_log_admit(ring, &head, 11 * SEC, SEC, 4, 5)) << "more than the limit never passes";
}

TEST(Charge, ASuperPacketIsChargedInChunksAndSaturates)
{
	// 1000/s: 10^6 ns = 64e6 ticks a packet, exact at shift 0.
	EXPECT_EQ(sluice_charge_ticks(64000000, 0, 1, 1), 64000000u);
	EXPECT_EQ(sluice_charge_ticks(64000000, 0, 44, 1), 44u * 64000000u);
	// Bytes: 1 tick a byte; 200,000 bytes is three whole chunks and the rest.
	EXPECT_EQ(sluice_charge_ticks(1, 0, 200000, SLUICE_MAX_COST), 200000u);
	EXPECT_EQ(sluice_charge_ticks(1ULL << 59, 0, 5, 1), SLUICE_MAX_CAPACITY_TICKS + 1)
		<< "more than any capacity saturates instead of wrapping";
}
