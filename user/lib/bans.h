// SPDX-License-Identifier: GPL-2.0-only
// Temporary bans (bpf/lib/bans.h, docs/packets.md): reading, removing, and
// keeping the ban table in step with the rules. A ban lives in the data
// plane's table until it runs out; the controller only lists it, lifts it
// (`sluice ban del`), drops the bans of a rule that no longer bans, and
// clears the word that lets packets skip the check when nothing can ban.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "maps.h"
#include "net.h"
#include "rule.h"

namespace sluice {

/// One ban as the table holds it.
struct Ban {
	Cidr prefix;            ///< the banned address or --per prefix
	uint32_t slot = 0;      ///< the banning rule's slot
	uint32_t bucket_id = 0; ///< ...and its buckets' id when it banned
	uint64_t since_ns = 0;  ///< CLOCK_MONOTONIC (the program's coarse clock)
	uint64_t until_ns = 0;
	uint64_t drops = 0;     ///< packets dropped by it
};

/// The table's key of a prefix (IPv4 as ::ffff:0:0/96), and back.
struct sluice_ban_key ban_key(const Cidr &prefix);
Cidr ban_prefix(const struct sluice_ban_key &key);

/// The clock bans are kept on: CLOCK_MONOTONIC, in ns.
uint64_t ban_clock_ns();

/// A CLOCK_MONOTONIC time, past or future, as UTC wall-clock time to the
/// second ("2026-11-27T21:00:04Z"), given the monotonic and the wall-clock
/// (Unix seconds) readings of one instant.
std::string monotonic_to_utc(uint64_t mono_ns, uint64_t mono_now, int64_t wall_now_s);

/// Every entry of the ban table, run out or not, raw.
std::vector<std::pair<struct sluice_ban_key, struct sluice_ban>> read_ban_entries(int fd);

/// The bans in force at `now_ns`, most recent first.
std::vector<Ban> list_bans(const MapSet &maps, uint64_t now_ns);

/// The longest ban in force at `now_ns` covering `addr`, if any: the one
/// the program finds for a packet from it.
std::optional<Ban> covering_ban(const MapSet &maps, const Cidr &addr, uint64_t now_ns);

/// Lifts the ban covering `addr` (an address, or a banned prefix exactly):
/// the longest one in force, with its UNBAN event. Returns it, or nothing if
/// there is none.
std::optional<Ban> remove_ban(const MapSet &maps, const Cidr &addr, uint64_t now_ns);

/// Before a rule set goes live: lets packets check bans if any rule bans.
void bans_before_switch(const MapSet &maps, const std::vector<InstalledRule> &after);

/// After it went live: removes the bans of slots whose rule no longer
/// bans (deleted, or its --ban removed), and bans run out, each with its
/// UNBAN event; clears the
/// check's word when no rule bans and no ban is left.
void bans_after_switch(const MapSet &maps, const std::vector<InstalledRule> &after);

/// Removes the bans run out by `now_ns` whose sources have not come back
/// (the program removes one its source meets), each with its UNBAN event,
/// so that every ban's end is reported near its time. The agent calls it
/// at every tick, and `sluice events` as it reads the ring buffer. Returns
/// how many it removed.
size_t sweep_bans(const MapSet &maps, uint64_t now_ns);

/// Writes carried bans (`sluice upgrade`) and sets the check's word.
void restore_bans(const MapSet &maps, const std::vector<std::pair<struct sluice_ban_key, struct sluice_ban>> &bans);

} // namespace sluice
