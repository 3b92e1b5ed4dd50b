// SPDX-License-Identifier: GPL-2.0-only
// The cluster sync's arithmetic that needs no store: which readings a
// bucket's demand is measured between, and how far a grant moves a bucket.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "sluice_algos.h"
#include "sync.h"

using namespace sluice::cluster;
using std::chrono::milliseconds;

namespace {

Reading at(int ms, uint64_t offered, uint64_t passed = 0)
{
	Reading r;
	r.at = std::chrono::steady_clock::time_point(milliseconds(ms));
	r.offered = offered;
	r.passed = passed;
	r.exists = true;
	return r;
}

} // namespace

TEST(SyncDemand, MeasuredOverTheLastHalfIntervalWhenThatReadingIsUsable)
{
	Reading last = at(1000, 100), half = at(1050, 110), now = at(1100, 110);
	EXPECT_EQ(&measure_from(last, half, now, milliseconds(100)), &half) << "traffic that stopped reads as gone";
}

// A round that ran long took the half-way reading just before this one: a
// window of a few milliseconds would read as no demand, and the store would
// grant nothing for a round.
TEST(SyncDemand, AHalfWayReadingTakenJustNowIsNotUsed)
{
	Reading last = at(1000, 100), half = at(1098, 130), now = at(1100, 130);
	EXPECT_EQ(&measure_from(last, half, now, milliseconds(100)), &last);
}

TEST(SyncDemand, AReadingOfAnotherBucketOrFromBeforeTheLastRoundIsNotUsed)
{
	Reading last = at(1000, 100), now = at(1100, 20);
	Reading evicted = at(1050, 120); // the bucket was evicted and made again: counts went down
	EXPECT_EQ(&measure_from(last, evicted, now, milliseconds(100)), &last);
	Reading older = at(950, 90);
	EXPECT_EQ(&measure_from(last, older, at(1100, 130), milliseconds(100)), &last);
	Reading gone = at(1050, 0);
	gone.exists = false;
	EXPECT_EQ(&measure_from(last, gone, at(1100, 130), milliseconds(100)), &last);
}

// How far the apply loop moves a bucket, for generated grants of every form
// (a store's or a peer's lie included: nan, inf, negative, huge): never by
// an undefined or unbounded amount. The move lies between -dt (the bucket
// refills nothing: a source within its limit is never put in debt beyond
// the time that passed) and (rate/local - 1) * dt (refill at the whole
// rate), and nothing at all for an input that is not a finite number.
TEST(SyncApply, AShiftStaysWithinWhatTheRateAllowsWhateverTheGrant)
{
	constexpr double TPS = 1e9 * double(1 << SLUICE_TICK_SHIFT);
	const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
	const std::vector<double> hostile = {nan, -nan, inf, -inf, 1e300, -1e300, -1, 0, -0.0, 1e-300, 5e-324,
					     std::numeric_limits<double>::max(), -std::numeric_limits<double>::max()};
	std::mt19937_64 rng(26);
	std::uniform_real_distribution<double> unit(0, 1);
	std::uniform_int_distribution<size_t> pick(0, hostile.size() - 1);
	auto any = [&](double scale) { return unit(rng) < 0.3 ? hostile[pick(rng)] : unit(rng) * scale; };
	for (int i = 0; i < 500000; i++) {
		double rate = i % 5 == 0 ? any(1e6) : 1 + unit(rng) * 1e6;
		double local = i % 7 == 0 ? any(1e6) : rate / (1 + double(rng() % 100));
		double share = any(2 * rate), dt = i % 3 == 0 ? any(5) : unit(rng) * 0.01, carry = any(1) - 0.5;
		ArrivalShift s = arrival_shift(share, local, rate, dt, carry);
		ASSERT_TRUE(std::isfinite(s.carry));
		ASSERT_LT(std::fabs(s.carry), 1);
		bool finite = std::isfinite(share) && std::isfinite(local) && std::isfinite(rate) && std::isfinite(dt);
		if (!finite || local <= 0 || rate <= 0) {
			ASSERT_EQ(s.ticks, 0) << share << " " << local << " " << rate << " " << dt;
			continue;
		}
		double step = std::clamp(dt, 0.0, MAX_APPLY_STEP_SECONDS);
		double ratio = std::isfinite(rate / local) ? rate / local : MAX_SHIFT_TICKS;
		double least = -(step * TPS) - 1, most = std::max(ratio - 1, 0.0) * step * TPS + 1;
		ASSERT_GE(double(s.ticks), std::floor(least)) << share << " " << local << " " << rate << " " << dt;
		ASSERT_LE(double(s.ticks), std::ceil(std::min(most, MAX_SHIFT_TICKS)))
			<< share << " " << local << " " << rate << " " << dt;
	}
}

// An honest grant, applied in many small steps, moves the bucket by what the
// difference of rates makes over the whole time, to a tick (the carry keeps
// the fractions), against the ideal computed in one step.
TEST(SyncApply, SmallStepsAddUpToTheIdealMove)
{
	constexpr double TPS = 1e9 * double(1 << SLUICE_TICK_SHIFT);
	std::mt19937_64 rng(3);
	std::uniform_real_distribution<double> unit(0, 1);
	for (int run = 0; run < 200; run++) {
		double rate = 1 + unit(rng) * 1e5, local = rate / (1 + double(rng() % 10)), share = unit(rng) * rate;
		double carry = 0, total_time = 0;
		long double moved = 0;
		for (int step = 0; step < 1000; step++) {
			double dt = unit(rng) * 0.005;
			ArrivalShift s = arrival_shift(share, local, rate, dt, carry);
			carry = s.carry;
			moved += s.ticks;
			total_time += dt;
		}
		double ideal = (share / local - 1) * total_time * TPS;
		ASSERT_NEAR(double(moved), ideal, 2 + std::fabs(ideal) * 1e-9) << rate << " " << local << " " << share;
	}
}
