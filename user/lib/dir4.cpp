// SPDX-License-Identifier: GPL-2.0-only
#include "dir4.h"

#include <algorithm>
#include <unordered_map>

#include "error.h"

namespace sluice {

namespace {

uint32_t host_order(const Cidr &c)
{
	return uint32_t(c.addr[0]) << 24 | uint32_t(c.addr[1]) << 16 | uint32_t(c.addr[2]) << 8 | c.addr[3];
}

// Writes `value` over the `1 << (bits - len)` entries a prefix covers at one
// level, where `bits` is the level's depth (16, 24 or 32) and `index` the
// prefix's first entry there.
template <class Entries> void paint(Entries &entries, uint32_t index, int len, int bits, uint32_t value)
{
	uint32_t span = 1u << (bits - len);
	for (uint32_t i = 0; i < span; i++)
		entries[index + i] = value;
}

} // namespace

namespace {

[[noreturn]] void too_many_blocks(uint32_t max_blocks)
{
	throw Error("the IPv4 rule table needs more than " + std::to_string(max_blocks) +
		    " blocks; attach again with a larger --max-rules");
}

} // namespace

uint32_t dir4_blocks_needed(const std::vector<std::pair<Cidr, uint32_t>> &prefixes)
{
	// A block for each /16 that holds a longer prefix, and for each /24
	// that holds a longer one.
	std::vector<uint32_t> l2, l3;
	for (const auto &[cidr, entry] : prefixes) {
		if (cidr.prefix_len > 16)
			l2.push_back(host_order(cidr) >> 16);
		if (cidr.prefix_len > 24)
			l3.push_back(host_order(cidr) >> 8);
	}
	auto distinct = [](std::vector<uint32_t> &v) {
		std::sort(v.begin(), v.end());
		return static_cast<uint32_t>(std::unique(v.begin(), v.end()) - v.begin());
	};
	return distinct(l2) + distinct(l3);
}

void check_dir4(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t max_blocks)
{
	if (dir4_blocks_needed(prefixes) > max_blocks)
		too_many_blocks(max_blocks);
}

uint32_t build_dir4_into(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t block_base,
			 uint32_t max_blocks, uint32_t *top, struct sluice_dir_block *blocks)
{
	// Shorter prefixes first, so that longer ones paint over them.
	std::vector<std::pair<Cidr, uint32_t>> sorted = prefixes;
	std::stable_sort(sorted.begin(), sorted.end(),
			 [](const auto &a, const auto &b) { return a.first.prefix_len < b.first.prefix_len; });

	constexpr uint32_t NO_BLOCK = ~0u;
	std::fill(top, top + SLUICE_DIR_TOP_SIZE, 0u);
	std::vector<uint32_t> level2(SLUICE_DIR_TOP_SIZE, NO_BLOCK); // top index -> block number (relative)
	std::unordered_map<uint32_t, uint32_t> level3; // top index << 8 | second byte -> block number
	std::vector<uint32_t> level3_order; // its keys, as made
	uint32_t needed = dir4_blocks_needed(prefixes);
	if (needed > max_blocks)
		too_many_blocks(max_blocks);
	level3.reserve(needed);
	uint32_t count = 0;
	auto new_block = [&](uint32_t fill) {
		std::fill(std::begin(blocks[count].entry), std::end(blocks[count].entry), fill);
		return count++;
	};

	for (const auto &[cidr, entry] : sorted) {
		uint32_t a = host_order(cidr);
		int len = cidr.prefix_len;
		if (len <= 16) {
			paint(top, a >> 16, len, 16, entry);
			continue;
		}
		uint32_t hi16 = a >> 16;
		if (level2[hi16] == NO_BLOCK)
			level2[hi16] = new_block(top[hi16]);
		uint32_t l2 = level2[hi16];
		if (len <= 24) {
			paint(blocks[l2].entry, (a >> 8) & 0xff, len, 24, entry);
			continue;
		}
		uint32_t hi24 = a >> 8;
		auto l3 = level3.find(hi24);
		if (l3 == level3.end()) {
			uint32_t fill = blocks[l2].entry[hi24 & 0xff];
			l3 = level3.emplace(hi24, new_block(fill)).first;
			level3_order.push_back(hi24);
		}
		paint(blocks[l3->second].entry, a & 0xff, len, 32, entry);
	}

	// Each block was filled from the entry above it when it was made, after
	// every shorter prefix had been painted (they are sorted): only the links
	// from the entries above to the blocks remain to be written.
	for (uint32_t hi24 : level3_order)
		blocks[level2[hi24 >> 8]].entry[hi24 & 0xff] = SLUICE_DIR_CHILD | (block_base + level3.at(hi24));
	for (uint32_t hi16 = 0; hi16 < SLUICE_DIR_TOP_SIZE; hi16++)
		if (level2[hi16] != NO_BLOCK)
			top[hi16] = SLUICE_DIR_CHILD | (block_base + level2[hi16]);
	return count;
}

Dir4Tables build_dir4(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t block_base,
		      uint32_t max_blocks)
{
	Dir4Tables t;
	t.top.resize(SLUICE_DIR_TOP_SIZE);
	t.blocks.resize(std::min(dir4_blocks_needed(prefixes), max_blocks));
	build_dir4_into(prefixes, block_base, max_blocks, t.top.data(), t.blocks.data());
	return t;
}

uint32_t dir4_lookup(const Dir4Tables &t, uint32_t block_base, uint32_t addr)
{
	uint32_t e = t.top[addr >> 16];
	if (e & SLUICE_DIR_CHILD) {
		e = t.blocks[(e & ~SLUICE_DIR_CHILD) - block_base].entry[(addr >> 8) & 0xff];
		if (e & SLUICE_DIR_CHILD)
			e = t.blocks[(e & ~SLUICE_DIR_CHILD) - block_base].entry[addr & 0xff];
	}
	return e;
}

} // namespace sluice
