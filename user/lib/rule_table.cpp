// SPDX-License-Identifier: GPL-2.0-only
// Reading the rule maps. Writing them is Transaction's (transaction.cpp).
#include "rule_table.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "rule_maps.h"

namespace sluice {

namespace rule_maps {

struct sluice_active read_active(const MapSet &maps)
{
	uint32_t zero = 0;
	struct sluice_active active = {};
	if (bpf_map_lookup_elem(maps.active.get(), &zero, &active))
		throw_errno("cannot read the live rule set's number", errno);
	return active;
}

void write_active(const MapSet &maps, struct sluice_active active)
{
	uint32_t zero = 0;
	active.bans = read_active(maps).bans;
	map_update(maps.active.get(), &zero, &active, "the live rule set's number");
}

void write_ban_switch(const MapSet &maps, uint32_t on)
{
	uint32_t zero = 0;
	struct sluice_active active = read_active(maps);
	if (active.bans == on)
		return;
	active.bans = on;
	map_update(maps.active.get(), &zero, &active, "the ban switch");
}

struct sluice_meta read_meta(const MapSet &maps)
{
	uint32_t zero = 0;
	struct sluice_meta meta = {};
	if (bpf_map_lookup_elem(maps.meta.get(), &zero, &meta))
		throw_errno("cannot read sluice metadata", errno);
	return meta;
}

Snapshot read(const MapSet &maps_)
{
	Snapshot s;
	s.meta = read_meta(maps_);
	s.active = read_active(maps_);
	// Both sets' entries up to the higher of their high-water marks: the
	// live set's rules, and the idle set's leftovers to clear.
	uint32_t upto = reach(maps_, s.active);
	MappedArray dps(maps_.rules.get(), 0, 2 * upto), infos(maps_.rule_info.get(), 0, 2 * upto);
	s.idle_used.assign(maps_.max_rules(), false);
	for (uint32_t slot = 0; slot < upto; slot++) {
		s.idle_used[slot] = dps.at<struct sluice_rule>(sluice_rule_index(slot, s.active.set ^ 1))->id != 0;
		uint32_t i = sluice_rule_index(slot, s.active.set);
		struct sluice_rule dp = *dps.at<struct sluice_rule>(i);
		if (dp.id == 0)
			continue;
		InstalledRule r = from_maps(dp, *infos.at<struct sluice_rule_info>(i));
		r.slot = slot;
		s.rules.push_back(r);
	}
	return s;
}

/// The live set's slot of the rule that `key` names (rule_is: its name, or
/// its id in decimal), the first in slot order as read() lists them; NO_SLOT
/// if none. Reads the names in place and one rule entry, building nothing.
uint32_t locate(int rules_fd, const MappedArray &infos, const struct sluice_active &active, uint32_t reach,
		std::string_view key)
{
	// An id is written as std::to_string writes it: digits, no leading zero.
	uint64_t id = 0;
	bool by_id = !key.empty() && key.size() <= 10 && (key[0] != '0' || key.size() == 1);
	for (char c : key)
		by_id = by_id && c >= '0' && c <= '9';
	if (by_id)
		std::from_chars(key.data(), key.data() + key.size(), id);
	for (uint32_t slot = 0; slot < reach; slot++) {
		uint32_t i = sluice_rule_index(slot, active.set);
		const auto *info = infos.at<struct sluice_rule_info>(i);
		size_t len = strnlen(info->name, sizeof(info->name));
		if (!(len == key.size() && std::memcmp(info->name, key.data(), len) == 0) &&
		    !(by_id && info->rule_id == id))
			continue;
		// An empty slot (id 0) holds no rule, whatever its name says.
		if (read_entry<struct sluice_rule>(rules_fd, i, "a rule").id != 0)
			return slot;
	}
	return NO_SLOT;
}

[[noreturn]] void no_rule(std::string_view key)
{
	throw Error("no rule named '" + std::string(key) + "' (see `sluice rule list`)");
}

} // namespace rule_maps

using namespace rule_maps;

std::vector<InstalledRule> RuleTable::list() const
{
	auto rules = read(maps_).rules;
	std::sort(rules.begin(), rules.end(), match_order);
	return rules;
}

const MappedArray &RuleTable::infos_upto(uint32_t reach) const
{
	if (!infos_ || infos_->size() < 2 * reach)
		infos_ = std::make_unique<MappedArray>(maps_.rule_info.get(), 0, 2 * reach);
	return *infos_;
}

InstalledRule RuleTable::find(std::string_view key) const
{
	struct sluice_active active = read_active(maps_);
	uint32_t reach = std::min(maps_.max_rules(), std::max(active.slots[0], active.slots[1]));
	const MappedArray &infos = infos_upto(reach);
	uint32_t slot = locate(maps_.rules.get(), infos, active, reach, key);
	if (slot == NO_SLOT)
		no_rule(key);
	uint32_t i = sluice_rule_index(slot, active.set);
	InstalledRule r = from_maps(read_entry<struct sluice_rule>(maps_.rules.get(), i, "a rule"),
				    *infos.at<struct sluice_rule_info>(i));
	r.slot = slot;
	return r;
}

struct sluice_rule RuleTable::datapath_rule(uint32_t slot) const
{
	uint32_t index = sluice_rule_index(slot, read_active(maps_).set);
	struct sluice_rule dp = {};
	if (bpf_map_lookup_elem(maps_.rules.get(), &index, &dp))
		throw_errno("cannot read rule slot " + std::to_string(slot), errno);
	return dp;
}

struct sluice_rule_counters RuleTable::counters(uint32_t slot) const
{
	struct sluice_rule_counters sum = {};
	for (const auto &c : lookup_percpu<struct sluice_rule_counters>(maps_.rule_counters.get(), slot)) {
		sum.passed_packets += c.passed_packets;
		sum.passed_bytes += c.passed_bytes;
		sum.dropped_packets += c.dropped_packets;
		sum.dropped_bytes += c.dropped_bytes;
		sum.failopen_table += c.failopen_table;
		sum.passed_contention += c.passed_contention;
	}
	return sum;
}


} // namespace sluice
