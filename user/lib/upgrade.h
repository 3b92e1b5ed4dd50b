// SPDX-License-Identifier: GPL-2.0-only
// Carrying the data plane's state from one program to another: a newer
// binary's program (`sluice upgrade`), or the same program with other table
// sizes (`sluice apply` with new `tables:`). Two layouts are read: this
// binary's, and the previous release's (sluice 0.2.7, state ABI 7), described
// by a frozen copy of its structs in upgrade.cpp. Older state is refused with
// one line naming the release to go through. Rules keep their ids, slots and
// counters; buckets keep their state and counts; the CPUs' caches (pending
// drops, owed passes, the drop memo) are settled into the buckets and the new
// program starts with them empty.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "maps.h"
#include "rule.h"

namespace sluice {

/// The release whose state `sluice upgrade` reads besides this binary's own.
inline constexpr const char *PREVIOUS_RELEASE = "0.2.7";
inline constexpr uint32_t PREVIOUS_RELEASE_ABI = 7;

/// The state worth keeping, read from a pinned deployment of this binary's
/// layout or the previous release's, in this binary's structs.
struct CarriedState {
	uint32_t abi = 0; ///< of the state read: SLUICE_ABI_VERSION, or PREVIOUS_RELEASE_ABI
	uint32_t next_rule_id = 1;
	uint32_t max_rules = 0, max_sources = 0, max_log_sources = 0;
	uint32_t max_bans = 0; ///< 0: none carried (the previous release has no bans): the default
	/// IPv6 prefixes of a rule set; 0 (the previous release's, whose trie
	/// held max_rules): as many as max_rules.
	uint32_t max_v6_prefixes = 0;
	std::vector<InstalledRule> rules;
	/// Every CPU's counters of each rule slot that holds a rule: [slot] -> one per CPU.
	std::vector<std::pair<uint32_t, std::vector<struct sluice_rule_counters>>> rule_counters;
	std::vector<struct sluice_counter> counters; ///< [index * CPUs + CPU]
	struct sluice_config config = {};            ///< the hash seed and the tables' sizes in sets
	std::vector<struct sluice_set_v4> src4;
	std::vector<struct sluice_set_v6> src6;
	std::vector<struct sluice_log_set_v4> logs4;
	std::vector<struct sluice_log_set_v6> logs6;
	/// The CPUs' caches as read: every pending-drops slot holding drops and
	/// every owed slot holding passes or doubt. flush_caches empties them.
	std::vector<struct sluice_pending_drops> pending;
	std::vector<struct sluice_owed> owed;
	std::vector<std::pair<struct sluice_frag_key, struct sluice_frag_info>> frags;
	std::vector<std::pair<uint32_t, uint32_t>> iface_mtu; ///< ifindex -> frame size recorded
	/// Temporary bans (this release's state only: 0.2.7 had none), with
	/// their times on CLOCK_MONOTONIC, which an upgrade does not move.
	std::vector<std::pair<struct sluice_ban_key, struct sluice_ban>> bans;
};

/// The layout hash the previous release records (its maps as upgrade.cpp's
/// frozen copy describes them).
uint64_t previous_layout_hash();

/// Reads the state pinned in `dir`: this binary's layout or the previous
/// release's. Throws one line for any other: older state names the release
/// to upgrade it with first (upgrade_refusal), newer or unknown state says so.
CarriedState read_state(const std::string &dir);

/// The one line refusing state that `sluice upgrade` cannot read because an
/// older release made it, judged by its layout record (the pinned
/// SLUICE_MAP_META's value size and first word): e.g. "this state was made by
/// sluice 0.2.x (ABI 5); upgrade it with sluice 0.2.7 first, then with this
/// binary". None for this binary's record, the previous release's, or a newer one.
std::optional<std::string> upgrade_refusal(uint32_t record_size, uint32_t abi);

/// Settles the CPUs' caches into the carried buckets, as the program itself
/// settles them, and empties them (see upgrade.cpp: what flushed means).
/// `now_ns`: CLOCK_MONOTONIC.
void flush_caches(CarriedState &state, uint64_t now_ns);

/// Writes carried state into a freshly loaded program's maps (empty, sized as
/// wanted), its caches flushed first (flush_caches). Returns the names of
/// bucket tables of which some buckets could not be placed (tables resized
/// smaller, their sets full), whose sources start afresh.
std::vector<std::string> restore_state(CarriedState &state, const MapSet &fresh);

} // namespace sluice
