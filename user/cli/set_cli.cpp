// SPDX-License-Identifier: GPL-2.0-only
#include "set_cli.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "error.h"
#include "set_commands.h"
#include "text_table.h"

namespace sluice {

namespace {

void add_name(CLI::App &cmd, SetArgs &a) { cmd.add_option("NAME", a.name, "Set name")->required(); }

std::string family_text(int family) { return "ipv" + std::to_string(family); }

void print_change(std::string_view name, const SetChange &c)
{
	std::cout << "set " << name << ": " << c.after << (c.after == 1 ? " prefix" : " prefixes");
	if (c.created)
		std::cout << " (new)";
	else
		std::cout << " (was " << c.before << ")";
	if (c.rules)
		std::cout << "; " << c.rules << (c.rules == 1 ? " rule" : " rules") << " recompiled";
	std::cout << "\n";
}

} // namespace

void setup_set_add(CLI::App &cmd, SetArgs &a)
{
	add_name(cmd, a);
	cmd.add_option("PREFIX", a.prefixes, "Prefixes or addresses to add (the set is made if new)")->required();
}

void setup_set_del(CLI::App &cmd, SetArgs &a)
{
	add_name(cmd, a);
	cmd.add_option("PREFIX", a.prefixes, "Prefixes to remove; none: delete the set (no rule may use it)");
}

void setup_set_list(CLI::App &cmd, SetArgs &a) { cmd.add_flag("--json", a.json, "JSON output"); }

void setup_set_show(CLI::App &cmd, SetArgs &a)
{
	add_name(cmd, a);
	cmd.add_flag("--json", a.json, "JSON output");
}

void setup_set_load(CLI::App &cmd, SetArgs &a)
{
	add_name(cmd, a);
	cmd.add_option("FILE", a.file, "One prefix a line, '#' comments; - for stdin. Replaces the set atomically")
		->required();
}

int run_set_add(Instance &inst, const SetArgs &a)
{
	auto lock = inst.lock(true, true);
	print_change(a.name, add_to_set(inst, a.name, a.prefixes));
	return 0;
}

int run_set_del(Instance &inst, const SetArgs &a)
{
	auto lock = inst.lock(true, true);
	if (a.prefixes.empty()) {
		delete_set(inst, a.name);
		std::cout << "deleted set " << a.name << "\n";
		return 0;
	}
	print_change(a.name, delete_from_set(inst, a.name, a.prefixes));
	return 0;
}

int run_set_list(Instance &inst, const SetArgs &a)
{
	auto lock = inst.lock(false); // a reader: with nothing loaded, it makes no pin or lock directory
	auto sets = list_sets(inst);
	if (a.json) {
		nlohmann::ordered_json j = nlohmann::ordered_json::array();
		for (const auto &s : sets)
			j.push_back({{"name", s.name}, {"family", s.family}, {"size", s.size}, {"rules", s.rules}});
		std::cout << j.dump(2) << "\n";
		return 0;
	}
	std::vector<std::vector<std::string>> rows;
	for (const auto &s : sets) {
		std::string rules;
		for (const auto &r : s.rules)
			rules += (rules.empty() ? "" : ",") + r;
		rows.push_back({s.name, family_text(s.family), std::to_string(s.size), rules.empty() ? "-" : rules});
	}
	print_table({"NAME", "FAMILY", "PREFIXES", "RULES"}, rows);
	return 0;
}

int run_set_show(Instance &inst, const SetArgs &a)
{
	auto lock = inst.lock(false);
	AddressSet s = SetStore(inst.run_dir()).read(a.name);
	if (a.json) {
		nlohmann::ordered_json prefixes = nlohmann::ordered_json::array();
		for (const auto &c : s.prefixes)
			prefixes.push_back(format_cidr(c));
		nlohmann::ordered_json j = {{"name", a.name}, {"family", s.family}, {"prefixes", prefixes}};
		std::cout << j.dump(2) << "\n";
		return 0;
	}
	// One prefix a line: what `set load` reads back.
	std::string out;
	for (const auto &c : s.prefixes)
		out += format_cidr(c) + "\n";
	std::cout << out;
	return 0;
}

int run_set_load(Instance &inst, const SetArgs &a)
{
	check_set_name(a.name);
	auto lock = inst.lock(true, true);
	int family = required_family(inst, a.name);
	AddressSet set;
	if (a.file == "-") {
		set = read_set_lines(std::cin, "stdin", family);
	} else {
		std::ifstream in(a.file);
		if (!in)
			throw Error("cannot read " + a.file + ": " + std::strerror(errno));
		set = read_set_lines(in, a.file, family);
	}
	print_change(a.name, replace_set(inst, a.name, std::move(set)));
	return 0;
}

} // namespace sluice
