// SPDX-License-Identifier: GPL-2.0-only
// The IPv4 multibit rule table against a brute-force longest-prefix match.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "dir4.h"
#include "error.h"

using namespace sluice;

namespace {

Cidr v4(uint32_t addr, int len)
{
	Cidr c;
	c.family = 4;
	c.prefix_len = len;
	uint32_t masked = len ? addr & (~0u << (32 - len)) : 0;
	c.addr[0] = masked >> 24;
	c.addr[1] = masked >> 16;
	c.addr[2] = masked >> 8;
	c.addr[3] = masked;
	return c;
}

uint32_t brute_force(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t addr)
{
	int best = -1;
	uint32_t entry = 0;
	for (const auto &[c, e] : prefixes) {
		if (c.prefix_len > best && cidr_contains(c, v4(addr, 32))) {
			best = c.prefix_len;
			entry = e;
		}
	}
	return entry;
}

uint32_t host_order_of(const Cidr &c)
{
	return uint32_t(c.addr[0]) << 24 | uint32_t(c.addr[1]) << 16 | uint32_t(c.addr[2]) << 8 | c.addr[3];
}

} // namespace

TEST(Dir4, EveryAddressFindsItsLongestPrefix)
{
	std::mt19937 rng(3);
	for (int round = 0; round < 20; round++) {
		std::vector<std::pair<Cidr, uint32_t>> prefixes;
		std::map<Cidr, uint32_t> seen;
		// Clustered under a few /12s so that prefixes nest at every level.
		for (int i = 0; i < 300; i++) {
			uint32_t addr = (0x0a000000 | (rng() % 4) << 20) | (rng() & 0x000fffff);
			Cidr c = v4(addr, static_cast<int>(rng() % 33));
			if (seen.emplace(c, i + 1).second)
				prefixes.push_back({c, static_cast<uint32_t>(i + 1)});
		}
		const uint32_t base = round % 2 ? 5000 : 0;
		Dir4Tables t = build_dir4(prefixes, base, 100000);
		for (int i = 0; i < 20000; i++) {
			uint32_t addr = i % 2 ? (0x0a000000 | (rng() % 4) << 20) | (rng() & 0x000fffff) : rng();
			ASSERT_EQ(dir4_lookup(t, base, addr), brute_force(prefixes, addr)) << std::hex << addr;
		}
		// And both ends of every prefix.
		for (const auto &[c, e] : prefixes) {
			uint32_t lo = uint32_t(c.addr[0]) << 24 | c.addr[1] << 16 | c.addr[2] << 8 | c.addr[3];
			uint32_t hi = lo | (c.prefix_len ? ~(~0u << (32 - c.prefix_len)) : ~0u);
			ASSERT_EQ(dir4_lookup(t, base, lo), brute_force(prefixes, lo));
			ASSERT_EQ(dir4_lookup(t, base, hi), brute_force(prefixes, hi));
		}
	}
}

TEST(Dir4, BlocksAreBoundedAndCountedOnlyWhereLongPrefixesAre)
{
	std::vector<std::pair<Cidr, uint32_t>> prefixes = {{v4(0x0a000000, 8), 1}, {v4(0x0a010100, 24), 2},
							    {v4(0x0a010180, 25), 3}};
	Dir4Tables t = build_dir4(prefixes, 0, 10);
	EXPECT_EQ(t.blocks.size(), 2u) << "one /16 block and one /24 block";
	EXPECT_EQ(dir4_lookup(t, 0, 0x0a0101ff), 3u);
	EXPECT_EQ(dir4_lookup(t, 0, 0x0a01017f), 2u);
	EXPECT_EQ(dir4_lookup(t, 0, 0x0a020304), 1u);
	EXPECT_EQ(dir4_lookup(t, 0, 0x0b000000), 0u);
	EXPECT_THROW(build_dir4(prefixes, 0, 1), Error) << "more blocks than allowed";
}

namespace {

/// How many /24s `t` holds as full blocks and as compact bitmaps.
std::pair<size_t, size_t> forms(const Dir4Tables &t, uint32_t base)
{
	size_t full = 0, compact = 0;
	for (uint32_t e : t.top) {
		if (!(e & SLUICE_DIR_CHILD))
			continue;
		for (uint32_t e2 : t.blocks[(e & ~SLUICE_DIR_CHILD) - base].entry) {
			EXPECT_FALSE((e2 & SLUICE_DIR_CHILD) && (e2 & SLUICE_DIR_BITMAP)) << "one tag at a time";
			full += (e2 & SLUICE_DIR_CHILD) != 0;
			compact += (e2 & SLUICE_DIR_BITMAP) != 0;
		}
	}
	return {full, compact};
}

} // namespace

// A /24 is a bitmap while its longer prefixes carry one entry, and a full
// block once they carry two: members added and deleted, a second rule in the
// /24, a /25 or a shorter prefix over them. Every address of every /24
// touched is looked up after each change, against the brute force.
TEST(Dir4, BlocksSwitchBetweenBitmapAndFullAsPrefixesChange)
{
	std::mt19937 rng(24);
	size_t full_seen = 0, compact_seen = 0, switched = 0;
	for (int round = 0; round < 30; round++) {
		std::map<Cidr, uint32_t> table; // prefix -> entry
		std::map<uint32_t, bool> was_compact; // /24 -> its form at the last step
		const uint32_t base = round % 2 ? 700 : 0;
		for (int step = 0; step < 25; step++) {
			// A change: mostly set members (/32s, some /26-/31) of entry 1
			// added or deleted, sometimes another entry's member, a /25,
			// a /24 or a /16 over them.
			uint32_t addr = 0x0a000000 | (rng() % 2) << 16 | (rng() % 4) << 8 | (rng() & 0xff);
			int kind = static_cast<int>(rng() % 10);
			Cidr c = v4(addr, kind < 6 ? 32 : kind == 6 ? static_cast<int>(26 + rng() % 6) : kind == 7 ? 25
												 : kind == 8 ? 24 : 16);
			uint32_t entry = kind < 7 ? (rng() % 6 ? 1 : 2) : 3 + rng() % 2;
			if (table.count(c) && rng() % 2)
				table.erase(c);
			else
				table[c] = entry;
			for (int n = static_cast<int>(rng() % 3); n > 0 && !table.empty(); n--) // members deleted
				if (auto it = std::next(table.begin(), static_cast<long>(rng() % table.size()));
				    it->first.prefix_len == 32)
					table.erase(it);

			std::vector<std::pair<Cidr, uint32_t>> prefixes(table.begin(), table.end());
			Dir4Tables t = build_dir4(prefixes, base, 100000);
			ASSERT_EQ(t.blocks.size(), dir4_blocks_needed(prefixes)) << "the count made is the count planned";
			for (uint32_t hi24 = 0x0a0000; hi24 < 0x0a0200; hi24 += (hi24 & 0xff) == 3 ? 0xfd : 1)
				for (uint32_t low = 0; low < 256; low++) {
					uint32_t a = hi24 << 8 | low;
					ASSERT_EQ(dir4_lookup(t, base, a), brute_force(prefixes, a))
						<< std::hex << a << " round " << std::dec << round << " step " << step;
				}
			auto [full, compact] = forms(t, base);
			full_seen += full;
			compact_seen += compact;
			// Which /24s changed form since the last step.
			for (uint32_t hi16 : {0x0a00u, 0x0a01u}) {
				uint32_t e = t.top[hi16];
				if (!(e & SLUICE_DIR_CHILD))
					continue;
				for (uint32_t b = 0; b < 4; b++) {
					uint32_t e2 = t.blocks[(e & ~SLUICE_DIR_CHILD) - base].entry[b];
					if (!(e2 & (SLUICE_DIR_CHILD | SLUICE_DIR_BITMAP)))
						continue;
					bool compact_now = (e2 & SLUICE_DIR_BITMAP) != 0;
					auto [it, made] = was_compact.emplace(hi16 << 8 | b, compact_now);
					if (!made && it->second != compact_now)
						switched++;
					it->second = compact_now;
				}
			}
		}
	}
	EXPECT_GT(full_seen, 100u);
	EXPECT_GT(compact_seen, 100u);
	EXPECT_GT(switched, 50u) << "/24s went from one form to the other";
}

// A million scattered /32s under one rule: a bitmap a /24, sixteen to a
// block, so the table takes about a sixteenth of the blocks it would take
// as full blocks (the second level's one block a /16 is the rest).
TEST(Dir4, AMillionScatteredHostsTakeABitmapEach)
{
	std::mt19937 rng(6);
	std::map<Cidr, uint32_t> hosts;
	while (hosts.size() < 1000000)
		hosts.emplace(v4(rng(), 32), 7);
	std::vector<std::pair<Cidr, uint32_t>> prefixes(hosts.begin(), hosts.end());
	prefixes.push_back({v4(0x0a000000, 8), 9}); // and a rule over some of them
	std::set<uint32_t> slash24s;
	for (const auto &[c, e] : prefixes)
		if (c.prefix_len == 32)
			slash24s.insert(uint32_t(c.addr[0]) << 16 | c.addr[1] << 8 | c.addr[2]);
	uint32_t needed = dir4_blocks_needed(prefixes);
	EXPECT_EQ(needed, 65536 + (slash24s.size() + 15) / 16);
	Dir4Tables t = build_dir4(prefixes, 0, needed);
	auto [full, compact] = forms(t, 0);
	EXPECT_EQ(full, 0u);
	EXPECT_EQ(compact, slash24s.size());
	for (int i = 0; i < 200000; i++) {
		uint32_t a = i % 2 ? rng() : host_order_of(prefixes[rng() % prefixes.size()].first);
		uint32_t want = hosts.count(v4(a, 32)) ? 7 : (a >> 24 == 10 ? 9 : 0);
		ASSERT_EQ(dir4_lookup(t, 0, a), want) << std::hex << a;
	}
}
