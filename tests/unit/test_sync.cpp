// SPDX-License-Identifier: GPL-2.0-only
// The cluster sync's arithmetic that needs no store: which readings a
// bucket's demand is measured between.
#include <gtest/gtest.h>

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
