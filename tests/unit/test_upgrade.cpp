// SPDX-License-Identifier: GPL-2.0-only
// `sluice upgrade` (upgrade.h): which state it refuses, the previous
// release's layout it reads, and the flush of the CPUs' caches into the
// buckets, which must leave every bucket reading as it read with them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "sluice_settable.h"
#include "sources.h"
#include "upgrade.h"
#include "upgrade_abi7.h"

using namespace sluice;

TEST(Upgrade, StateOlderThanThePreviousReleaseIsRefusedNamingTheReleaseToGoThrough)
{
	EXPECT_EQ(upgrade_refusal(16, 0).value_or(""),
		  "this state was made by sluice 0.2, which recorded no layout; upgrade it with sluice 0.2.7 first, "
		  "then with this binary");
	for (uint32_t abi = 1; abi <= 6; abi++)
		EXPECT_EQ(upgrade_refusal(24, abi).value_or(""),
			  "this state was made by sluice 0.2.x (ABI " + std::to_string(abi) +
				  "); upgrade it with sluice 0.2.7 first, then with this binary");
	EXPECT_FALSE(upgrade_refusal(24, 7)) << "0.2.7's state is read";
	EXPECT_FALSE(upgrade_refusal(sizeof(struct sluice_meta), SLUICE_ABI_VERSION)) << "this binary's is read";
}

// The frozen copy of 0.2.7's maps hashes to what 0.2.7 records (the e2e
// upgrade from the 0.2.7 binary reads it): nobody edits the copy by mistake.
TEST(Upgrade, TheFrozenCopyOfThePreviousLayoutHashesAsThePreviousReleaseRecords)
{
	EXPECT_EQ(previous_layout_hash(), 0xcff883963af7cfdeULL);
	EXPECT_NE(previous_layout_hash(), layout_hash()) << "this release's layout record differs";
}

// A 0.2.7 rule converted selects any source port and any TCP flags (its pad
// byte, where the flag mask is now, not read), and a 0.2.7 fragment entry
// converted knows its datagram's destination port but neither its source
// port nor its TCP flags (the program's PORTS_* bits: 1 is the destination
// port alone), so a later fragment may match a --sport or --syn rule, as one
// whose first fragment was not seen.
TEST(Upgrade, ThePreviousReleasesRulesAndFragmentsSelectAnySourcePortAndFlags)
{
	std::mt19937_64 rng(7);
	for (int i = 0; i < 1000; i++) {
		abi7::rule o;
		abi7::frag_info f;
		std::generate_n(reinterpret_cast<uint8_t *>(&o), sizeof(o), [&] { return uint8_t(rng()); });
		std::generate_n(reinterpret_cast<uint8_t *>(&f), sizeof(f), [&] { return uint8_t(rng()); });
		o.flags &= SLUICE_RULE_SPORT - 1; // the flags 0.2.7 had
		f.ports_known &= 1;
		const struct sluice_rule r = now(o);
		EXPECT_EQ(r.id, o.id);
		EXPECT_EQ(r.dport_lo, o.dport_lo);
		EXPECT_EQ(r.dport_hi, o.dport_hi);
		EXPECT_EQ(r.flags, o.flags);
		EXPECT_FALSE(r.flags & SLUICE_RULE_SPORT);
		EXPECT_EQ(r.tcp_flags_mask, 0) << "any TCP flags, whatever 0.2.7's pad held";
		EXPECT_EQ(r.tcp_flags_value, 0);
		EXPECT_EQ(r.sport_lo, 0);
		EXPECT_EQ(r.sport_hi, 0);
		const struct sluice_frag_info n = now(f);
		EXPECT_EQ(n.dport, f.dport);
		EXPECT_EQ(n.proto, f.proto);
		EXPECT_EQ(n.flags, f.flags);
		EXPECT_EQ(n.first_ns, f.first_ns);
		EXPECT_EQ(n.ports_known, f.ports_known) << "the destination port alone: no source port, no flags";
		EXPECT_EQ(n.sport, 0);
		EXPECT_EQ(n.tcp_flags, 0);
	}
}

namespace {

uint64_t value(__u64 word) { return sluice_cnt_value(word); }

/// The counts a reader sees of way w of set i: the bucket's with every
/// CPU's pending drops and owed passes added (sources.h).
template <class Set>
struct sluice_source_counters seen(const Set &set, int table, uint32_t i, int w, const PendingDrops &caches)
{
	struct sluice_source_counters c = set.way[w].cnt;
	caches.add_to(c, table, i, w, set.tag.gen[w]);
	return {value(c.passed_packets), value(c.passed_bytes), value(c.dropped_packets), value(c.dropped_bytes)};
}

} // namespace

// Generated states: buckets of both tables, pending drops naming them (and
// buckets evicted since), owed passes certain and uncertain, doubt alone.
// After flush_caches every bucket reads as a reader read it with the caches
// (no counted drop or owed pass lost or counted twice), the caches are empty,
// and each owed charge is on its bucket's word as the program writes it.
TEST(Upgrade, FlushingTheCachesLeavesEveryBucketReadingAsItDidAndChargesWhatWasOwed)
{
	std::mt19937_64 rng(27);
	for (int round = 0; round < 200; round++) {
		SCOPED_TRACE("round " + std::to_string(round));
		CarriedState s;
		s.src4.resize(4);
		s.src6.resize(4);
		const uint64_t now_ns = 1000000000000ULL + rng() % 1000000000ULL;
		const uint64_t now_t = now_ns << SLUICE_TICK_SHIFT;
		struct Expect {
			int table;
			uint32_t set;
			int way;
			uint64_t tat;
			bool owed = false;
		};
		std::vector<Expect> buckets;
		auto fill = [&](auto &sets, int table) {
			for (uint32_t i = 0; i < sets.size(); i++)
				for (int w = 0; w < SLUICE_SET_WAYS; w++) {
					auto &tag = sets[i].tag;
					auto &b = sets[i].way[w];
					if (rng() % 4 == 0)
						continue; // empty
					tag.key[w] = (uint64_t(1 + rng() % 50) << 32) | (rng() & 0xffffffff);
					tag.gen[w] = uint16_t((rng() % 200) << 1); // GCRA form
					uint64_t t = sluice_gen_tag(tag.gen[w]);
					uint64_t tat = now_t + (rng() % 2000000) - 1000000;
					b.algo.gcra.off = rng() % 1000;
					b.word = tat + b.algo.gcra.off;
					b.cnt = {t | rng() % 1000, t | rng() % 100000, t | rng() % 1000, t | rng() % 100000};
					buckets.push_back({table, i, w, tat});
				}
		};
		fill(s.src4, SLUICE_TABLE_V4);
		fill(s.src6, SLUICE_TABLE_V6);
		if (buckets.empty())
			continue;
		auto tags = [&](const Expect &e) -> struct sluice_set_tags & {
			return e.table == SLUICE_TABLE_V4 ? s.src4[e.set].tag : s.src6[e.set].tag;
		};
		auto word = [&](const Expect &e) -> __u64 & {
			return e.table == SLUICE_TABLE_V4 ? s.src4[e.set].way[e.way].word : s.src6[e.set].way[e.way].word;
		};
		auto off = [&](const Expect &e) {
			return e.table == SLUICE_TABLE_V4 ? s.src4[e.set].way[e.way].algo.gcra.off
							  : s.src6[e.set].way[e.way].algo.gcra.off;
		};
		// Pending drops: several CPUs' slots per bucket, some of an
		// earlier generation of the way (evicted: dropped with it).
		for (int k = 0; k < 30; k++) {
			const Expect &e = buckets[rng() % buckets.size()];
			struct sluice_pending_drops p = {};
			p.table = uint8_t(e.table);
			p.set = e.set;
			p.way = uint8_t(e.way);
			p.gen = uint16_t(tags(e).gen[e.way] + (rng() % 3 == 0 ? 2 : 0));
			p.packets = 1 + rng() % 100;
			p.bytes = p.packets * 60;
			s.pending.push_back(p);
		}
		// Owed: at most one slot per bucket, so that its charge is known.
		std::vector<struct sluice_owed> owed;
		for (auto &e : buckets) {
			if (rng() % 2)
				continue;
			struct sluice_pending_drops name = {};
			name.table = uint8_t(e.table);
			name.set = e.set;
			name.way = uint8_t(e.way);
			name.gen = tags(e).gen[e.way];
			bool evicted = rng() % 5 == 0;
			if (evicted)
				name.gen = uint16_t(name.gen + 2);
			struct sluice_owed o = {};
			std::memcpy(&o.name, &name, sizeof(o.name));
			o.want = tags(e).key[e.way];
			o.since = now_t - rng() % 1000000;
			o.ticks = 1 + rng() % 100000;
			o.packets = rng() % 4 == 0 ? 0 : 1 + rng() % 32; // 0: doubt alone
			o.bytes = o.packets * 60;
			switch (rng() % 3) {
			case 0: o.written = word(e); break;                      // certain: the word as made on
			case 1: o.written = word(e) - 1 - rng() % 1000; break;   // written since: ...
			default: o.written = now_t + off(e) + 1 + rng() % 1000; // ...but the clock is behind it
			}
			e.owed = o.packets && !evicted;
			if (e.owed) {
				uint64_t tat = e.tat;
				bool uncertain = o.written != word(e) && int64_t(o.written - off(e) - now_t) < 0;
				e.tat = uncertain ? std::max<uint64_t>(tat, o.since + o.ticks)
						  : std::max<uint64_t>(tat, o.since) + o.ticks; // GCRA: max(TAT, since) + charge
			}
			s.owed.push_back(o);
			owed.push_back(o);
		}

		const PendingDrops caches(s.pending, owed);
		std::vector<struct sluice_source_counters> before;
		for (const auto &e : buckets)
			before.push_back(e.table == SLUICE_TABLE_V4 ? seen(s.src4[e.set], e.table, e.set, e.way, caches)
								   : seen(s.src6[e.set], e.table, e.set, e.way, caches));
		flush_caches(s, now_ns);
		EXPECT_TRUE(s.pending.empty());
		EXPECT_TRUE(s.owed.empty());
		const PendingDrops none;
		for (size_t i = 0; i < buckets.size(); i++) {
			const Expect &e = buckets[i];
			struct sluice_source_counters after = e.table == SLUICE_TABLE_V4
								      ? seen(s.src4[e.set], e.table, e.set, e.way, none)
								      : seen(s.src6[e.set], e.table, e.set, e.way, none);
			EXPECT_EQ(after.passed_packets, before[i].passed_packets);
			EXPECT_EQ(after.passed_bytes, before[i].passed_bytes);
			EXPECT_EQ(after.dropped_packets, before[i].dropped_packets);
			EXPECT_EQ(after.dropped_bytes, before[i].dropped_bytes);
			EXPECT_EQ(word(e) - off(e), e.tat) << "the arrival time carries what was owed";
		}
	}
}
