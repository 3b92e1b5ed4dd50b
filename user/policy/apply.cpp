// SPDX-License-Identifier: GPL-2.0-only
#include "apply.h"

#include <net/if.h>

#include <algorithm>
#include <functional>
#include <cstdio>
#include <fstream>
#include <optional>

#include "error.h"
#include "rule_table.h"
#include "sets.h"
#include "text_table.h"
#include "transaction.h"

namespace sluice {

namespace {

/// The sizes a policy asks for, its omitted ones filled from `base`.
TableSizes wanted_sizes(const TableSizes &asked, const TableSizes &base)
{
	return {asked.max_sources ? asked.max_sources : base.max_sources,
		asked.max_rules ? asked.max_rules : base.max_rules,
		asked.max_log_sources ? asked.max_log_sources : base.max_log_sources,
		asked.max_bans ? asked.max_bans : base.max_bans,
		asked.max_v6_prefixes ? asked.max_v6_prefixes : base.max_v6_prefixes};
}

TableSizes default_sizes()
{
	return {SLUICE_DEFAULT_MAX_SOURCES, SLUICE_DEFAULT_MAX_RULES, SLUICE_DEFAULT_MAX_LOG_SOURCES,
		SLUICE_DEFAULT_MAX_BANS};
}

TableSizes loaded_sizes(const MapSet &maps) { return TableSizes::loaded(maps); }

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

/// The policy with each rule on a set the policy does not state given the
/// family of the set kept (the store's, which a missing set makes an error
/// at commit).
Policy resolve_kept_sets(const Instance &inst, const Policy &p)
{
	Policy q = p;
	SetContents stated = policy_sets(p);
	SetStore store(inst.run_dir());
	for (auto &r : q.rules)
		if (!r.set.empty() && !stated.count(r.set) && store.exists(r.set))
			resolve_set_family(r, store.read(r.set).family);
	return q;
}

/// The changes the policy's sets make to the store's, one line each.
std::vector<std::string> diff_sets(const Instance &inst, const Policy &p)
{
	std::vector<std::string> out;
	SetStore store(inst.run_dir());
	for (const auto &s : p.sets) {
		size_t n = s.set.prefixes.size();
		if (!store.exists(s.name)) {
			out.push_back("+ set " + s.name + ": " + plural(n, "prefix", "prefixes"));
			continue;
		}
		AddressSet have = store.read(s.name);
		if (have == s.set)
			continue;
		std::vector<Cidr> added, removed;
		std::set_difference(s.set.prefixes.begin(), s.set.prefixes.end(), have.prefixes.begin(),
				    have.prefixes.end(), std::back_inserter(added));
		std::set_difference(have.prefixes.begin(), have.prefixes.end(), s.set.prefixes.begin(),
				    s.set.prefixes.end(), std::back_inserter(removed));
		out.push_back("~ set " + s.name + ": " + std::to_string(have.prefixes.size()) + " -> " +
			      plural(n, "prefix", "prefixes") + " (+" + std::to_string(added.size()) + " -" +
			      std::to_string(removed.size()) + ")");
	}
	return out;
}

} // namespace

bool ApplyPlan::empty() const
{
	return !load && !resize.max_sources && !resize.max_rules && !resize.max_log_sources && !resize.max_bans &&
	       !resize.max_v6_prefixes &&
	       rules.empty() && attach.empty() && move.empty() && detach.empty() && sets.empty();
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
							    {"max_log_sources", resize.max_log_sources},
							    {"max_bans", resize.max_bans},
							    {"max_v6_prefixes", resize.max_v6_prefixes}};
	for (auto [key, n] : sizes)
		if (n)
			out += "~ tables " + std::string(key) + " -> " + std::to_string(n) +
			       " (rules and counters kept; buckets too, where they fit)\n";
	for (const auto &line : sets)
		out += line + "\n";
	if (!rules.empty())
		out += format_diff(rules);
	for (const auto &i : attach)
		out += "+ attach " + i.name + " (" + std::string(mode_name(i.mode)) + " mode)\n";
	for (const auto &m : move)
		out += "~ move " + m.link.ifname + " from " + std::string(mode_name(m.link.mode)) + " to " +
		       std::string(mode_name(m.to)) + " mode (detached for the moment of one attach)\n";
	for (const auto &l : detach)
		out += "- detach " + l.ifname + " (" + std::string(mode_name(l.mode)) + " mode)\n";
	return out;
}

namespace {

/// plan_apply; with check_rules false it leaves checking the rules against
/// the table size to the caller.
ApplyPlan make_plan(const Instance &inst, const Policy &stated, const ApplyOptions &options, bool check_rules)
{
	const Policy p = resolve_kept_sets(inst, stated);
	const SetContents sets = policy_sets(p);
	if (p.rules.empty() && p.interfaces.empty() && !options.allow_empty)
		throw Error("the policy has no rules and no interfaces: applied, it would remove every rule and detach "
			    "every interface; to do that, run `sluice apply --allow-empty FILE` (or `sluice detach "
			    "--all`, which also unloads)");
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
		if (want.max_bans != have.max_bans)
			plan.resize.max_bans = want.max_bans;
		// The trie's room as it will be: a size that follows max_rules
		// changes with it.
		if (want.rule_room().v6_prefixes != have.rule_room().v6_prefixes)
			plan.resize.max_v6_prefixes = want.rule_room().v6_prefixes;
	}
	plan.rules = diff_rules(specs_of(running), p.rules);
	// The rules must fit the tables they will have; ids and slots are the
	// transaction's to give, so check the whole set against the size.
	if (check_rules)
		Transaction::check_fits(p.rules, want.rule_room(), &sets);
	plan.sets = diff_sets(inst, p);

	auto here = [](const AttachedLink &l) { return l.this_netns && l.ifindex; };
	for (const auto &i : p.interfaces) {
		auto same = std::find_if(st.links.begin(), st.links.end(), [&](const AttachedLink &l) {
			return here(l) && l.ifname == i.name && l.mode == i.mode;
		});
		if (same != st.links.end())
			continue;
		auto other = std::find_if(st.links.begin(), st.links.end(),
					  [&](const AttachedLink &l) { return here(l) && l.ifname == i.name; });
		check_attachable(i.name, i.mode, st);
		if (other != st.links.end())
			plan.move.push_back({*other, i.mode});
		else
			plan.attach.push_back(i);
	}
	for (const auto &l : st.links) {
		if (!here(l))
			continue; // another namespace's, or a gone interface's: not this file's to judge
		bool listed = std::any_of(p.interfaces.begin(), p.interfaces.end(),
					  [&l](const PolicyInterface &i) { return i.name == l.ifname; });
		if (listed)
			continue;
		if (l.dispatcher)
			throw Error("cannot detach from " + l.ifname + ": sluice runs there through libxdp's dispatcher, "
				    "which a policy does not describe; list it, or `sluice detach " + l.ifname + "` first");
		plan.detach.push_back(l);
	}
	return plan;
}

/// Undo steps of an apply, run newest first; returns what could not be undone.
std::string undo_all(std::vector<std::pair<std::string, std::function<void()>>> &undo)
{
	std::string lost;
	for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
		try {
			it->second();
		} catch (const std::exception &e) {
			lost += (lost.empty() ? "" : "; ") + it->first + ": " + e.what();
		}
	}
	undo.clear();
	return lost;
}

} // namespace

ApplyPlan plan_apply(const Instance &inst, const Policy &p, const ApplyOptions &options)
{
	return make_plan(inst, p, options, true);
}

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

ApplyPlan apply_policy(Instance &inst, const Policy &stated, ProgramPreload preload, const ApplyOptions &options)
{
	const Policy p = resolve_kept_sets(inst, stated);
	const SetContents sets = policy_sets(p);
	// The sets' files are written aside now, and replace the sets once the
	// rules compiled with them are live; a failure drops them.
	SetStore store(inst.run_dir());
	std::vector<SetStore::Pending> set_files;
	for (const auto &s : p.sets)
		set_files.push_back(store.stage(s.name, s.set));
	// Everything is checked before the first write, the host's interfaces
	// included. A program loaded here gets its rules before it is pinned.
	// Then every step that changes something leaves an undo step, so that a
	// failure later restores the state found: interfaces first (the step
	// the host can still refuse), then the tables, then the rules, whose
	// transaction checks them in full before it writes.
	ApplyPlan plan = make_plan(inst, p, options, false);
	std::vector<std::pair<std::string, std::function<void()>>> undo;
	try {
		if (plan.load) {
			TableSizes want = wanted_sizes(p.tables, default_sizes());
			// The rules are compiled while the preload's thread makes the
			// tables, and written while it verifies the program.
			auto prepared = Transaction::prepare_empty(p.rules, want.rule_room(), &sets);
			std::unique_ptr<LoadedProgram> fresh;
			if (std::optional<MapSet> tables = preload.tables(want)) {
				Transaction(*tables).install(prepared).commit();
				fresh = preload.take();
			} else {
				fresh = std::make_unique<LoadedProgram>(want);
				MapSet maps = fresh->maps();
				Transaction(maps).install(prepared).commit();
			}
			fail_point("load");
			inst.adopt(*fresh);
			undo.emplace_back("unload", [&inst] { inst.unload(); });
		}
		for (const auto &l : plan.detach) {
			fail_point("detach");
			inst.detach_link(l.pin);
			undo.emplace_back("attach " + l.ifname + " again", [&inst, l] { inst.reattach(l); });
		}
		for (const auto &m : plan.move) {
			fail_point("move");
			inst.change_mode(m.link, m.to);
			undo.emplace_back("move " + m.link.ifname + " back", [&inst, m] {
				for (const auto &now : inst.status().links)
					if (now.this_netns && now.ifname == m.link.ifname && now.mode == m.to)
						inst.change_mode(now, m.link.mode);
			});
		}
		for (const auto &i : plan.attach) {
			fail_point("attach");
			inst.attach(i.name, i.mode, {});
			undo.emplace_back("detach " + i.name, [&inst, i] { inst.detach(i.name); });
		}
		if (!plan.load && (plan.resize.max_sources || plan.resize.max_rules || plan.resize.max_log_sources ||
				   plan.resize.max_bans || plan.resize.max_v6_prefixes)) {
			TableSizes have = loaded_sizes(inst.maps());
			TableSizes want = wanted_sizes(p.tables, have);
			Transaction::check_fits(p.rules, want.rule_room(), &sets);
			fail_point("resize");
			inst.upgrade(want);
			// Back to the trie's size as it was, not to one that follows
			// max_rules from the new size: stated in full.
			TableSizes was = have;
			was.max_v6_prefixes = have.rule_room().v6_prefixes;
			undo.emplace_back("resize the tables back", [&inst, was] { inst.upgrade(was); });
		}
		if (!plan.load) {
			fail_point("rules");
			MapSet maps = inst.maps();
			Transaction(maps).with_sets(sets).replace(p.rules).commit();
		}
		for (auto &f : set_files)
			f.commit();
	} catch (const std::exception &e) {
		if (undo.empty())
			throw;
		std::string lost = undo_all(undo);
		if (lost.empty())
			throw Error(std::string(e.what()) + "; nothing was changed (the steps done were undone)");
		throw Error(std::string(e.what()) + "; undoing the steps done failed too (" + lost +
			    "): see `sluice status`, and apply the previous policy");
	}
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
	p.tables.max_bans = have.max_bans == def.max_bans ? 0 : have.max_bans;
	p.tables.max_v6_prefixes = have.max_v6_prefixes; // 0 where it follows max_rules
	p.rules = specs_of(RuleTable(maps).list());
	SetStore store(inst.run_dir());
	for (const auto &name : store.names())
		p.sets.push_back({name, "", store.read(name)});
	for (const auto &l : inst.status().links)
		if (l.this_netns && l.ifindex)
			p.interfaces.push_back({l.ifname, l.mode});
	// By name: the links directory's order is the order of creation, which
	// a detach and attach again (an apply undone) changes.
	std::sort(p.interfaces.begin(), p.interfaces.end(),
		  [](const PolicyInterface &a, const PolicyInterface &b) { return a.name < b.name; });
	return p;
}

} // namespace sluice
