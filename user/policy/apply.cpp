// SPDX-License-Identifier: GPL-2.0-only
#include "apply.h"

#include <net/if.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>

#include "error.h"
#include "rule_table.h"

namespace sluice {

namespace {

/// The sizes a policy asks for, its omitted ones filled from `base`.
TableSizes wanted_sizes(const TableSizes &asked, const TableSizes &base)
{
	return {asked.max_sources ? asked.max_sources : base.max_sources,
		asked.max_rules ? asked.max_rules : base.max_rules,
		asked.max_log_sources ? asked.max_log_sources : base.max_log_sources};
}

TableSizes default_sizes()
{
	return {SLUICE_DEFAULT_MAX_SOURCES, SLUICE_DEFAULT_MAX_RULES, SLUICE_DEFAULT_MAX_LOG_SOURCES};
}

TableSizes loaded_sizes(const MapSet &maps)
{
	return {maps.max_sources(), maps.max_rules(), maps.max_log_sources()};
}

/// MemAvailable of /proc/meminfo, in bytes; 0 if it cannot be read.
uint64_t available_memory()
{
	std::ifstream meminfo("/proc/meminfo");
	unsigned long long kib = 0;
	for (std::string line; std::getline(meminfo, line);)
		if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1)
			return kib * 1024;
	return 0;
}

std::vector<RuleSpec> specs_of(const std::vector<InstalledRule> &rules)
{
	std::vector<RuleSpec> specs;
	for (const auto &r : rules)
		specs.push_back(r.spec);
	return specs;
}

} // namespace

bool ApplyPlan::empty() const
{
	return !load && !resize.max_sources && !resize.max_rules && !resize.max_log_sources && rules.empty() &&
	       attach.empty() && detach.empty();
}

std::string ApplyPlan::format() const
{
	if (empty())
		return "no changes\n";
	std::string out;
	if (load)
		out += "+ load the program (nothing is loaded)\n";
	const std::pair<const char *, uint32_t> sizes[] = {{"max_rules", resize.max_rules},
							    {"max_sources", resize.max_sources},
							    {"max_log_sources", resize.max_log_sources}};
	for (auto [key, n] : sizes)
		if (n)
			out += "~ tables " + std::string(key) + " -> " + std::to_string(n) +
			       (std::string_view(key) == "max_sources"
					? " (rules and counters kept; the IPv4 buckets start afresh)\n"
					: " (rules and counters kept; buckets too, where they fit)\n");
	if (!rules.empty())
		out += format_diff(rules);
	for (const auto &i : attach)
		out += "+ attach " + i.name + " (" + std::string(mode_name(i.mode)) + " mode)\n";
	for (const auto &l : detach)
		out += "- detach " + l.ifname + " (" + std::string(mode_name(l.mode)) + " mode)\n";
	return out;
}

namespace {

/// plan_apply; with check_rules false it leaves checking the rules against
/// the table size to the caller.
ApplyPlan make_plan(const Instance &inst, const Policy &p, bool check_rules)
{
	ApplyPlan plan;
	for (const auto &i : p.interfaces)
		if (!if_nametoindex(i.name.c_str()))
			throw Error("interface " + i.name + " does not exist in this network namespace");

	std::vector<InstalledRule> running;
	TableSizes have = default_sizes();
	Status st;
	plan.load = !inst.loaded();
	if (!plan.load) {
		MapSet maps = inst.maps();
		have = loaded_sizes(maps);
		running = RuleTable(maps).list();
		st = inst.status();
	}
	TableSizes want = wanted_sizes(p.tables, have);
	if (!plan.load) {
		if (want.max_sources != have.max_sources)
			plan.resize.max_sources = want.max_sources;
		if (want.max_rules != have.max_rules)
			plan.resize.max_rules = want.max_rules;
		if (want.max_log_sources != have.max_log_sources)
			plan.resize.max_log_sources = want.max_log_sources;
	}
	plan.rules = diff_rules(specs_of(running), p.rules);
	// The rules must fit the tables they will have; ids and slots are the
	// transaction's to give, so check the whole set against the size.
	if (check_rules)
		RuleTable::check_fits(p.rules, want.max_rules);

	for (const auto &i : p.interfaces) {
		auto it = std::find_if(st.links.begin(), st.links.end(), [&i](const AttachedLink &l) {
			return l.this_netns && l.ifname == i.name && l.mode == i.mode;
		});
		if (it == st.links.end())
			plan.attach.push_back(i);
	}
	for (const auto &l : st.links) {
		if (!l.this_netns || !l.ifindex)
			continue; // another namespace's, or a gone interface's: not this file's to judge
		bool listed = std::any_of(p.interfaces.begin(), p.interfaces.end(), [&l](const PolicyInterface &i) {
			return i.name == l.ifname && i.mode == l.mode;
		});
		if (!listed)
			plan.detach.push_back(l);
	}
	return plan;
}

} // namespace

ApplyPlan plan_apply(const Instance &inst, const Policy &p) { return make_plan(inst, p, true); }

ProgramPreload::ProgramPreload(const Instance &inst, std::string_view policy_text)
{
	if (inst.loaded())
		return;
	std::optional<TableSizes> guess = peek_table_sizes(policy_text);
	if (!guess)
		return;
	sizes_ = wanted_sizes(*guess, default_sizes());
	// The file is not checked yet: tables that would take more than half
	// the memory available wait for it to be (a bad file then makes none).
	if (LoadedProgram::table_bytes(sizes_) > available_memory() / 2)
		return;
	std::promise<MapSet> made;
	tables_ = made.get_future();
	program_ = std::async(std::launch::async, [sizes = sizes_, made = std::move(made)]() mutable {
		std::unique_ptr<LoadedProgram> prog;
		try {
			prog = LoadedProgram::tables_only(sizes);
			made.set_value(prog->maps());
		} catch (...) {
			made.set_exception(std::current_exception());
			throw;
		}
		prog->load_program();
		return prog;
	});
}

ProgramPreload::~ProgramPreload()
{
	if (program_.valid())
		program_.wait();
}

std::optional<MapSet> ProgramPreload::tables(const TableSizes &sizes)
{
	if (!tables_.valid() || wanted_sizes(sizes, default_sizes()) != sizes_)
		return std::nullopt;
	return tables_.get();
}

std::unique_ptr<LoadedProgram> ProgramPreload::take() { return program_.get(); }

ApplyPlan apply_policy(Instance &inst, const Policy &p, ProgramPreload preload)
{
	// Everything is checked before the first write. That write is the rule
	// transaction's, which checks the rules in full before it writes: they
	// are not compiled twice. A program loaded here gets its rules before
	// it is pinned: until then nothing is changed.
	ApplyPlan plan = make_plan(inst, p, false);
	if (plan.load) {
		TableSizes want = wanted_sizes(p.tables, default_sizes());
		// The rules are compiled while the preload's thread makes the
		// tables, and written while it verifies the program.
		auto prepared = RuleTable::prepare_empty(p.rules, want.max_rules);
		std::unique_ptr<LoadedProgram> fresh;
		if (std::optional<MapSet> tables = preload.tables(want)) {
			RuleTable(*tables).install(*prepared);
			fresh = preload.take();
		} else {
			fresh = std::make_unique<LoadedProgram>(want);
			MapSet maps = fresh->maps();
			RuleTable(maps).install(*prepared);
		}
		inst.adopt(*fresh);
	} else {
		if (plan.resize.max_sources || plan.resize.max_rules || plan.resize.max_log_sources) {
			TableSizes want = wanted_sizes(p.tables, loaded_sizes(inst.maps()));
			RuleTable::check_fits(p.rules, want.max_rules);
			inst.upgrade(want);
		}
		MapSet maps = inst.maps();
		RuleTable(maps).replace(p.rules);
	}
	// A mode change attaches the new mode first: both hooks run for a moment,
	// never neither.
	for (const auto &i : plan.attach)
		inst.attach(i.name, i.mode, {}, true);
	for (const auto &l : plan.detach)
		inst.detach_link(l.pin);
	return plan;
}

Policy export_policy(const Instance &inst)
{
	Policy p;
	MapSet maps = inst.maps();
	TableSizes have = loaded_sizes(maps), def = default_sizes();
	p.tables.max_rules = have.max_rules == def.max_rules ? 0 : have.max_rules;
	p.tables.max_sources = have.max_sources == def.max_sources ? 0 : have.max_sources;
	p.tables.max_log_sources = have.max_log_sources == def.max_log_sources ? 0 : have.max_log_sources;
	p.rules = specs_of(RuleTable(maps).list());
	for (const auto &l : inst.status().links)
		if (l.this_netns && l.ifindex)
			p.interfaces.push_back({l.ifname, l.mode});
	return p;
}

} // namespace sluice
