// SPDX-License-Identifier: GPL-2.0-only
// The rule maps as RuleTable (the reader) and Transaction (the one writer)
// both read them. Internal to user/lib.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "maps.h"
#include "rule.h"

namespace sluice::rule_maps {

/// A slot no rule holds yet (a rule the commit is to place).
constexpr uint32_t NO_SLOT = ~0u;

/// The live rule set as read at one moment.
struct Snapshot {
	struct sluice_active active = {}; ///< the live set, and how far each set's slots go
	std::vector<InstalledRule> rules;
	struct sluice_meta meta = {};
	std::vector<bool> idle_used; ///< slots the idle set holds a rule in (stale entries to clear)
};

struct sluice_active read_active(const MapSet &maps);
/// Writes the live-set entry from `active`, but for its ban switch (`bans`),
/// which it keeps as the entry holds it: the switch has its own writer
/// (write_ban_switch), and a commit's copy of the entry must not undo it.
void write_active(const MapSet &maps, struct sluice_active active);
/// Writes the live-set entry's ban switch, keeping the rest.
void write_ban_switch(const MapSet &maps, uint32_t on);
struct sluice_meta read_meta(const MapSet &maps);
Snapshot read(const MapSet &maps);

/// How far either rule set's slots go: what a reader looks at.
inline uint32_t reach(const MapSet &maps, const struct sluice_active &active)
{
	return std::min(maps.max_rules(), std::max(active.slots[0], active.slots[1]));
}

/// One entry of an array map, read with a syscall.
template <class V> V read_entry(int fd, uint32_t index, const char *what)
{
	V v = {};
	if (bpf_map_lookup_elem(fd, &index, &v))
		throw_errno(std::string("cannot read ") + what, errno);
	return v;
}

/// The live set's slot of the rule that `key` names (rule_is: its name, or
/// its id in decimal), the first in slot order as read() lists them; NO_SLOT
/// if none. Reads the names in place and one rule entry, building nothing.
uint32_t locate(int rules_fd, const MappedArray &infos, const struct sluice_active &active, uint32_t reach,
		std::string_view key);

[[noreturn]] void no_rule(std::string_view key);

} // namespace sluice::rule_maps
