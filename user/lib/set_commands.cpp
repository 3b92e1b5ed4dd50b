// SPDX-License-Identifier: GPL-2.0-only
#include "set_commands.h"

#include <algorithm>

#include "error.h"
#include "rule_table.h"
#include "transaction.h"

namespace sluice {

namespace {

SetStore store_of(const Instance &inst) { return SetStore(inst.run_dir()); }

std::vector<InstalledRule> all_rules(const Instance &inst)
{
	if (!inst.loaded())
		return {};
	return RuleTable(inst.maps()).list();
}

std::vector<InstalledRule> rules_using(const Instance &inst, std::string_view name)
{
	std::vector<InstalledRule> out;
	for (auto &r : all_rules(inst))
		if (r.spec.set == name)
			out.push_back(std::move(r));
	return out;
}

} // namespace

std::vector<SetInfo> list_sets(const Instance &inst)
{
	SetStore store = store_of(inst);
	std::vector<InstalledRule> rules = all_rules(inst);
	std::vector<SetInfo> out;
	for (const auto &name : store.names()) {
		AddressSet s = store.read(name);
		SetInfo info{name, s.family, s.prefixes.size(), {}};
		for (const auto &r : rules)
			if (r.spec.set == name)
				info.rules.push_back(r.spec.name);
		out.push_back(std::move(info));
	}
	return out;
}

int required_family(const Instance &inst, std::string_view name)
{
	auto rules = rules_using(inst, name);
	return rules.empty() ? 0 : rules.front().spec.cidr.family;
}

SetChange replace_set(const Instance &inst, std::string_view name, AddressSet set)
{
	check_set_name(name);
	SetStore store = store_of(inst);
	SetChange change;
	change.created = !store.exists(name);
	change.before = change.created ? 0 : store.read(name).prefixes.size();
	change.after = set.prefixes.size();
	auto rules = rules_using(inst, name);
	if (!rules.empty() && rules.front().spec.cidr.family != set.family)
		throw Error("set '" + std::string(name) + "' is used by IPv" + std::to_string(rules.front().spec.cidr.family) +
			    " rule '" + rules.front().spec.name + "': it takes IPv" +
			    std::to_string(rules.front().spec.cidr.family) + " prefixes only");
	normalize(set.prefixes);
	// The file is written aside first, and becomes the set once the tables
	// built from it are live: a failed commit leaves the old set in both.
	SetStore::Pending pending = store.stage(name, set);
	if (!rules.empty()) {
		MapSet maps = inst.maps();
		SetContents given;
		given.emplace(std::string(name), std::move(set));
		Transaction(maps).with_sets(std::move(given)).commit();
		change.rules = rules.size();
	}
	pending.commit();
	return change;
}

SetChange add_to_set(const Instance &inst, std::string_view name, const std::vector<std::string> &prefixes)
{
	check_set_name(name);
	SetStore store = store_of(inst);
	AddressSet set;
	bool exists = store.exists(name);
	if (exists)
		set = store.read(name);
	std::vector<Cidr> more = parse_set_prefixes(prefixes, exists ? set.family : required_family(inst, name));
	if (!exists && !more.empty())
		set.family = more.front().family;
	set.prefixes.insert(set.prefixes.end(), more.begin(), more.end());
	return replace_set(inst, name, std::move(set));
}

SetChange delete_from_set(const Instance &inst, std::string_view name, const std::vector<std::string> &prefixes)
{
	SetStore store = store_of(inst);
	AddressSet set = store.read(name);
	std::vector<Cidr> gone = parse_set_prefixes(prefixes, set.family);
	for (const Cidr &c : gone)
		if (!std::binary_search(set.prefixes.begin(), set.prefixes.end(), c))
			throw Error(format_cidr(c) + " is not in set '" + std::string(name) + "'");
	std::vector<Cidr> kept;
	kept.reserve(set.prefixes.size() - gone.size());
	std::set_difference(set.prefixes.begin(), set.prefixes.end(), gone.begin(), gone.end(), std::back_inserter(kept));
	set.prefixes = std::move(kept);
	return replace_set(inst, name, std::move(set));
}

void delete_set(const Instance &inst, std::string_view name)
{
	SetStore store = store_of(inst);
	store.read(name); // names a missing set
	auto rules = rules_using(inst, name);
	if (!rules.empty())
		throw Error("set '" + std::string(name) + "' is used by rule '" + rules.front().spec.name +
			    "'; delete the rule first");
	store.remove(name);
}

} // namespace sluice
