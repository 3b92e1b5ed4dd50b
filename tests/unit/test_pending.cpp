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

// After a counters reset, readers take away what the reset zeroed while it was
// still on CPUs' accounts: from the bucket it names only (table, set, way,
// generation and key), from the count and not the generation tag above it,
// and never below zero.
TEST(PendingDrops, ACountersResetIsTakenFromTheBucketItNamesOnly)
{
	PendingDrops pending({slot(SLUICE_TABLE_V4, 7, 2, 5, 10)});
	PendingDrops::Debit d;
	d.table = SLUICE_TABLE_V4;
	d.set = 7;
	d.way = 2;
	d.gen = 5;
	d.key = 0xabcdef;
	d.cnt.dropped_packets = 10;
	d.cnt.dropped_bytes = 1000;
	pending.subtract({d});

	const uint64_t tag = 3ULL << SLUICE_CNT_TAG_SHIFT;
	auto read = [&](uint16_t gen, uint64_t key, uint64_t in_bucket) {
		struct sluice_source_counters c = {};
		c.dropped_packets = tag | in_bucket;
		c.dropped_bytes = tag | (in_bucket * 100);
		pending.add_to(c, SLUICE_TABLE_V4, 7, 2, gen, key);
		return c;
	};
	struct sluice_source_counters c = read(5, 0xabcdef, 4);
	EXPECT_EQ(c.dropped_packets, tag | 4) << "the 10 on account at the reset are not counted again";
	EXPECT_EQ(c.dropped_bytes, tag | 400);
	// The slot was added to the bucket since (10 more in it, none on account).
	pending.subtract({d});
	EXPECT_EQ(sluice_cnt_value(read(5, 0xabcdef, 14).dropped_packets), 14u + 10u - 10u);
	EXPECT_EQ(sluice_cnt_value(read(6, 0xabcdef, 4).dropped_packets), 4u) << "another generation: no slot, no debit";
	EXPECT_EQ(sluice_cnt_value(read(5, 0x123456, 4).dropped_packets), 14u) << "another key: no debit";
	d.cnt.dropped_packets = 100;
	pending.subtract({d});
	EXPECT_EQ(read(5, 0xabcdef, 4).dropped_packets, tag) << "never below zero, the tag kept";
	pending.subtract({});
	EXPECT_EQ(sluice_cnt_value(read(5, 0xabcdef, 4).dropped_packets), 14u) << "replaced by none";
}
