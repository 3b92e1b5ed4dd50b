// SPDX-License-Identifier: GPL-2.0-only
// The IPv4 rule table the data plane walks: a 16-8-8 multibit table built by
// prefix expansion, so a lookup is at most three array reads whatever the
// number of rules (see sluice_abi.h for the layout).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "net.h"
#include "sluice_abi.h"

namespace sluice {

/// One table set, ready to write: the top level and the blocks, the first of
/// which has index `block_base`.
struct Dir4Tables {
	std::vector<uint32_t> top; ///< SLUICE_DIR_TOP_SIZE entries
	std::vector<struct sluice_dir_block> blocks;
};

/// Builds a table set mapping every IPv4 address to the entry (a nonzero
/// match-list index) of the longest prefix that covers it, 0 where none does.
/// Throws if it needs more than `max_blocks` blocks.
Dir4Tables build_dir4(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t block_base,
		      uint32_t max_blocks);

/// build_dir4 into memory of the caller's (the idle set's, mapped): `top`
/// holds SLUICE_DIR_TOP_SIZE entries, `blocks` dir4_blocks_needed(prefixes).
/// Returns the blocks written; throws, writing nothing, if they would be
/// more than `max_blocks`.
uint32_t build_dir4_into(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t block_base,
			 uint32_t max_blocks, uint32_t *top, struct sluice_dir_block *blocks);

/// How many blocks build_dir4 makes for these prefixes.
uint32_t dir4_blocks_needed(const std::vector<std::pair<Cidr, uint32_t>> &prefixes);

/// Throws as build_dir4 would if the prefixes need more than `max_blocks`
/// blocks, without building anything.
void check_dir4(const std::vector<std::pair<Cidr, uint32_t>> &prefixes, uint32_t max_blocks);

/// What the data plane finds for `addr` (host order) in `t`: its entry, 0 if none.
uint32_t dir4_lookup(const Dir4Tables &t, uint32_t block_base, uint32_t addr);

} // namespace sluice
