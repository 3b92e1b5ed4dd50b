// SPDX-License-Identifier: GPL-2.0-only
// Carrying the data plane's state from one program to another: a newer
// binary's program (`sluice upgrade`), or the same program with other table
// sizes (`sluice apply` with new `tables:`). Rules keep their ids, slots and
// counters; buckets are copied where their table keeps its layout and size.
#pragma once

#include <string>
#include <vector>

#include "maps.h"
#include "rule.h"

namespace sluice {

/// Every entry of one pinned map, as raw bytes.
struct RawMap {
	std::string name;
	uint32_t type = 0, key_size = 0, value_size = 0, max_entries = 0;
	uint32_t count = 0;
	std::vector<uint8_t> keys, values; ///< values: one stride each (all CPUs' for per-CPU maps)
};

/// The state worth keeping, read from a pinned deployment of any layout this
/// binary knows (ABI 1, sluice 0.2; ABI 2, the same layout as ABI 3 without
/// the sync word; ABI 4, this layout with rules and lookups flipping
/// together and pending-drops slots of 48 bytes; ABI 5, those slots; or
/// SLUICE_ABI_VERSION).
struct CarriedState {
	uint32_t abi = 0;
	uint32_t next_rule_id = 1;
	uint32_t max_rules = 0, max_sources = 0, max_log_sources = 0;
	std::vector<InstalledRule> rules;
	std::vector<RawMap> maps; ///< counters, config, buckets, fragments, MTUs: by ABI name

	const RawMap *find(const std::string &name) const;
};

/// The ABI version of the state pinned in `dir` (1 for sluice 0.2's).
uint32_t pinned_abi(const std::string &dir);

/// Reads the state pinned in `dir`; throws if its layout is unknown.
CarriedState read_state(const std::string &dir);

/// Writes carried state into a freshly loaded program's maps (empty, sized
/// as wanted). Returns the names of bucket tables that could not be carried
/// (their size or layout changed), whose sources start afresh.
std::vector<std::string> restore_state(const CarriedState &state, const MapSet &fresh);

} // namespace sluice
