// SPDX-License-Identifier: GPL-2.0-only
#include "rule_lines.h"

#include <CLI/CLI.hpp>

#include <stdexcept>

#include "rule.h"
#include "rule_args.h"

namespace sluice::test {
namespace {

std::vector<DeclaredOption> declared(const CLI::App &app)
{
	std::vector<DeclaredOption> out;
	for (const CLI::Option *opt : app.get_options()) {
		if (opt->get_name() == "--help")
			continue;
		out.push_back({opt->get_name(), opt->get_positional(), opt->get_expected_max() == 0});
	}
	return out;
}

} // namespace

std::vector<DeclaredOption> rule_add_options()
{
	CLI::App app;
	RuleArgs a;
	add_rule_options(&app, a);
	return declared(app);
}

std::vector<DeclaredOption> rule_set_options()
{
	CLI::App app;
	RuleEditArgs a;
	add_edit_options(&app, a);
	return declared(app);
}

std::vector<std::string> algo_names()
{
	std::vector<std::string> out;
	for (int i = 0; i < 256; i++)
		if (algo_name(static_cast<Algo>(i)) != "unknown")
			out.emplace_back(algo_name(static_cast<Algo>(i)));
	return out;
}

std::vector<std::string> scope_names()
{
	std::vector<std::string> out;
	for (Scope s : {Scope::local, Scope::cluster})
		out.emplace_back(scope_name(s));
	return out;
}

int OptionChances::of(const std::string &option) const
{
	auto it = by_option.find(option);
	return it == by_option.end() ? other : it->second;
}

std::string RuleLines::value_for(const std::string &option)
{
	auto it = values_.find(option);
	if (it == values_.end() || it->second.empty())
		throw std::logic_error("the generator gives option " + option +
				       " no values: add them to the test's value table");
	return it->second[below(it->second.size())];
}

std::vector<std::string> RuleLines::words_for(const DeclaredOption &o)
{
	if (o.positional)
		return {value_for(o.name)};
	if (o.flag)
		return {o.name};
	return {o.name, value_for(o.name)};
}

std::string RuleLines::add_line(const OptionChances &chances, const std::string &name)
{
	std::string line;
	for (const DeclaredOption &o : rule_add_options()) {
		if (o.name == "--name" && !name.empty()) {
			line += " --name " + name;
			continue;
		}
		if (o.positional) {
			line = value_for(o.name) + line;
			continue;
		}
		int percent = chances.of(o.name);
		if (auto a = chances.alone.find(o.name);
		    a != chances.alone.end() && line.find(" " + a->second.first + " ") == std::string::npos)
			percent = a->second.second;
		if (chance(percent))
			for (const auto &w : words_for(o))
				line += " " + w;
	}
	return line;
}

std::string RuleLines::set_line(const OptionChances &chances)
{
	std::string line;
	for (const DeclaredOption &o : rule_set_options())
		if (chance(chances.of(o.name)))
			for (const auto &w : words_for(o))
				line += " " + w;
	return line;
}

std::vector<std::string> RuleLines::missing(const std::vector<DeclaredOption> &options) const
{
	std::vector<std::string> out;
	for (const auto &o : options) {
		auto it = values_.find(o.name);
		if (!o.flag && (it == values_.end() || it->second.empty()))
			out.push_back(o.name);
	}
	return out;
}

} // namespace sluice::test
