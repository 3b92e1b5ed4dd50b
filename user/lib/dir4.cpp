// SPDX-License-Identifier: GPL-2.0-only
#include "dir4.h"

#include <algorithm>

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
		    " blocks; raise --max-rules with `sluice apply` (tables: max_rules)");
}

} // namespace

namespace {

// The prefixes longer than /24 by /24 (then by length, shortest first), with
// whether each /24's are compact: all of one entry (see sluice_abi.h).
struct Level3 {
	std::vector<std::pair<Cidr, uint32_t>> prefixes; // sorted by /24, then length
	std::vector<std::pair<size_t, bool>> groups;     // first prefix of each /24, compact
	uint32_t full = 0, compact = 0;
	uint32_t blocks() const { return full + (compact + SLUICE_DIR_BITMAP_SLOTS - 1) / SLUICE_DIR_BITMAP_SLOTS; }
};

Level3 level3_of(const std::vector<std::pair<Cidr, uint32_t>> &prefixes)
{
	Level3 l;
	for (const auto &p : prefixes)
		if (p.first.prefix_len > 24)
			l.prefixes.push_back(p);
	std::stable_sort(l.prefixes.begin(), l.prefixes.end(), [](const auto &a, const auto &b) {
		uint32_t x = host_order(a.first) >> 8, y = host_order(b.first) >> 8;
		return x != y ? x < y : a.first.prefix_len < b.first.prefix_len;
	});
	for (size_t i = 0; i < l.prefixes.size();) {
		size_t j = i;
		bool one_entry = true;
		for (; j < l.prefixes.size() && host_order(l.prefixes[j].first) >> 8 == host_order(l.prefixes[i].first) >> 8;
		     j++)
			one_entry = one_entry && l.prefixes[j].second == l.prefixes[i].second;
		l.groups.push_back({i, one_entry});
		(one_entry ? l.compact : l.full)++;
		i = j;
	}
	return l;
}

uint32_t level2_blocks(const std::vector<std::pair<Cidr, uint32_t>> &prefixes)
{
	std::vector<uint32_t> l2;
	for (const auto &[cidr, entry] : prefixes)
		if (cidr.prefix_len > 16)
			l2.push_back(host_order(cidr) >> 16);
	std::sort(l2.begin(), l2.end());
	return static_cast<uint32_t>(std::unique(l2.begin(), l2.end()) - l2.begin());
}

} // namespace

uint32_t dir4_blocks_needed(const std::vector<std::pair<Cidr, uint32_t>> &prefixes)
{
	// A block for each /16 that holds a longer prefix, one for each /24
	// that holds longer ones of two entries or more, and a sixteenth of
	// one for each /24 that holds longer ones of one entry.
	return level2_blocks(prefixes) + level3_of(prefixes).blocks();
}

void check_dir4(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t max_blocks)
{
	if (dir4_blocks_needed(prefixes) > max_blocks)
		too_many_blocks(max_blocks);
}

uint32_t build_dir4_into(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t block_base,
			 uint32_t max_blocks, uint32_t *top, struct sluice_dir_block *blocks)
{
	// Up to /24, shorter prefixes first, so that longer ones paint over them.
	std::vector<std::pair<Cidr, uint32_t>> sorted;
	for (const auto &p : prefixes)
		if (p.first.prefix_len <= 24)
			sorted.push_back(p);
	std::stable_sort(sorted.begin(), sorted.end(),
			 [](const auto &a, const auto &b) { return a.first.prefix_len < b.first.prefix_len; });
	Level3 level3 = level3_of(prefixes);
	if (level2_blocks(prefixes) + level3.blocks() > max_blocks)
		too_many_blocks(max_blocks);

	constexpr uint32_t NO_BLOCK = ~0u;
	std::fill(top, top + SLUICE_DIR_TOP_SIZE, 0u);
	std::vector<uint32_t> level2(SLUICE_DIR_TOP_SIZE, NO_BLOCK); // top index -> block number (relative)
	uint32_t count = 0;
	auto new_block = [&](uint32_t fill) {
		std::fill(std::begin(blocks[count].entry), std::end(blocks[count].entry), fill);
		return count++;
	};
	auto level2_block = [&](uint32_t hi16) {
		// Made after every prefix up to /16 is painted: filled from the top.
		if (level2[hi16] == NO_BLOCK)
			level2[hi16] = new_block(top[hi16]);
		return level2[hi16];
	};

	for (const auto &[cidr, entry] : sorted) {
		uint32_t a = host_order(cidr);
		if (cidr.prefix_len <= 16)
			paint(top, a >> 16, cidr.prefix_len, 16, entry);
		else
			paint(blocks[level2_block(a >> 16)].entry, (a >> 8) & 0xff, cidr.prefix_len, 24, entry);
	}

	// The third level, a /24 at a time, once the levels above are whole:
	// each /24 starts from the entry it inherits, which its link replaces.
	uint32_t bitmaps = 0, bitmap_block = 0;
	for (size_t g = 0; g < level3.groups.size(); g++) {
		auto [first, compact] = level3.groups[g];
		size_t last = g + 1 < level3.groups.size() ? level3.groups[g + 1].first : level3.prefixes.size();
		uint32_t hi24 = host_order(level3.prefixes[first].first) >> 8;
		uint32_t &link = blocks[level2_block(hi24 >> 8)].entry[hi24 & 0xff];
		uint32_t entries[256];
		std::fill(std::begin(entries), std::end(entries), link);
		for (size_t i = first; i < last; i++) {
			const auto &[cidr, entry] = level3.prefixes[i];
			paint(entries, host_order(cidr) & 0xff, cidr.prefix_len, 32, entry);
		}
		if (!compact) {
			uint32_t b = new_block(0);
			std::copy(std::begin(entries), std::end(entries), blocks[b].entry);
			link = SLUICE_DIR_CHILD | (block_base + b);
			continue;
		}
		uint32_t slot = bitmaps++ % SLUICE_DIR_BITMAP_SLOTS;
		if (slot == 0)
			bitmap_block = new_block(0);
		struct sluice_dir_bitmap &bm = blocks[bitmap_block].bitmap[slot];
		bm.hit = level3.prefixes[first].second;
		bm.miss = link;
		for (uint32_t i = 0; i < 256; i++)
			if (entries[i] == bm.hit)
				bm.bits[i / 32] |= 1u << (i % 32);
		link = SLUICE_DIR_BITMAP_ENTRY(block_base + bitmap_block, slot);
	}
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
		else if (e & SLUICE_DIR_BITMAP)
			e = sluice_dir_bitmap_entry(
				&t.blocks[SLUICE_DIR_BITMAP_BLOCK(e) - block_base].bitmap[SLUICE_DIR_BITMAP_SLOT(e)],
				addr & 0xff);
	}
	return e;
}

} // namespace sluice
