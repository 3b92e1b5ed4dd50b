// SPDX-License-Identifier: GPL-2.0-only
// The IPv4 multibit rule table against a brute-force longest-prefix match.
#include <gtest/gtest.h>

#include <random>

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
