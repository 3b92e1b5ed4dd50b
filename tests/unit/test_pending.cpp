// SPDX-License-Identifier: GPL-2.0-only
// The controller's index of pending-drops slots (sources.h, PendingDrops):
// each bucket gets exactly the drops of the slots that name it.
#include <gtest/gtest.h>

#include <cstring>

#include "sources.h"

using namespace sluice;

namespace {

struct sluice_pending_drops slot(int table, uint32_t set, int way, uint16_t gen, uint64_t packets)
{
	struct sluice_pending_drops p = {};
	p.table = static_cast<__u8>(table);
	p.set = set;
	p.way = static_cast<__u8>(way);
	p.gen = gen;
	p.packets = packets;
	p.bytes = packets * 100;
	return p;
}

struct sluice_source_counters added(const PendingDrops &pending, int table, uint32_t set, int way, uint16_t gen)
{
	struct sluice_source_counters c = {};
	c.dropped_packets = 1;
	c.dropped_bytes = 100;
	pending.add_to(c, table, set, way, gen);
	return c;
}

} // namespace

TEST(PendingDrops, EachBucketGetsTheSlotsThatNameItOnEveryCpu)
{
	const PendingDrops pending({
		slot(SLUICE_TABLE_V4, 7, 2, 5, 10),  // CPU 0
		slot(SLUICE_TABLE_V4, 7, 2, 5, 3),   // CPU 1, the same bucket
		slot(SLUICE_TABLE_V4, 7, 2, 4, 50),  // an earlier bucket of the way
		slot(SLUICE_TABLE_V6, 7, 2, 5, 20),  // the other table's set 7
		slot(SLUICE_TABLE_V4, 7, 3, 5, 40),  // the next way
		slot(SLUICE_TABLE_V4, 8, 2, 5, 0),   // empty
	});
	struct sluice_source_counters c = added(pending, SLUICE_TABLE_V4, 7, 2, 5);
	EXPECT_EQ(c.dropped_packets, 14u);
	EXPECT_EQ(c.dropped_bytes, 1400u);
	EXPECT_EQ(added(pending, SLUICE_TABLE_V6, 7, 2, 5).dropped_packets, 21u);
	EXPECT_EQ(added(pending, SLUICE_TABLE_V4, 7, 3, 5).dropped_packets, 41u);
	EXPECT_EQ(added(pending, SLUICE_TABLE_V4, 8, 2, 5).dropped_packets, 1u);
	EXPECT_EQ(added(pending, -1, 7, 2, 5).dropped_packets, 1u) << "a table without pending drops";
}

TEST(PendingDrops, EachBucketGetsThePassesOwedToItOnEveryCpu)
{
	auto owed = [](int table, uint32_t set, int way, uint16_t gen, uint64_t packets) {
		struct sluice_pending_drops name = slot(table, set, way, gen, 0);
		struct sluice_owed o = {};
		std::memcpy(&o.name, &name, sizeof(o.name));
		o.packets = packets;
		o.bytes = packets * 100;
		return o;
	};
	const PendingDrops pending({slot(SLUICE_TABLE_V4, 7, 2, 5, 10)},
				   {
					   owed(SLUICE_TABLE_V4, 7, 2, 5, 3),  // CPU 0
					   owed(SLUICE_TABLE_V4, 7, 2, 5, 4),  // CPU 1, the same bucket
					   owed(SLUICE_TABLE_V4, 7, 2, 4, 50), // an earlier bucket of the way
					   owed(SLUICE_TABLE_V6, 7, 2, 5, 20), // the other table's set 7
				   });
	struct sluice_source_counters c = added(pending, SLUICE_TABLE_V4, 7, 2, 5);
	EXPECT_EQ(c.passed_packets, 7u);
	EXPECT_EQ(c.passed_bytes, 700u);
	EXPECT_EQ(c.dropped_packets, 11u) << "and the drops pending as before";
	EXPECT_EQ(added(pending, SLUICE_TABLE_V6, 7, 2, 5).passed_packets, 20u);
	EXPECT_EQ(added(pending, SLUICE_TABLE_V4, 7, 3, 5).passed_packets, 0u);
}
