// sluice: the command-line front end. It parses arguments, calls the library
// and prints; every error becomes one line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "agent.h"
#include "apply.h"
#include "datapath.h"
#include "metrics.h"
#include "rule_args.h"
#include "rule_table.h"
#include "stats.h"

using namespace sluice;

namespace {

/// Left-aligned columns sized to their widest cell.
void print_table(const std::vector<std::string> &header, const std::vector<std::vector<std::string>> &rows)
{
	std::vector<size_t> width(header.size());
	for (size_t i = 0; i < header.size(); i++)
		width[i] = header[i].size();
	for (const auto &r : rows)
		for (size_t i = 0; i < r.size(); i++)
			width[i] = std::max(width[i], r[i].size());
	auto line = [&](const std::vector<std::string> &cells) {
		std::string out;
		for (size_t i = 0; i < cells.size(); i++) {
			out += cells[i];
			if (i + 1 < cells.size())
				out += std::string(width[i] - cells[i].size() + 2, ' ');
		}
		std::cout << out << "\n";
	};
	line(header);
	for (const auto &r : rows)
		line(r);
}

std::string human_bytes(uint64_t b)
{
	const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = static_cast<double>(b);
	int u = 0;
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	std::ostringstream s;
	s.precision(u ? 1 : 0);
	s << std::fixed << v << " " << units[u];
	return s.str();
}

std::string action_cell(const RuleSpec &s)
{
	std::string cell(action_name(s.action));
	if (s.shadow)
		cell += " (shadow)";
	if (s.layered)
		cell += " (continue)";
	return cell;
}

std::string algo_cell(const RuleSpec &s)
{
	if (s.action != Action::limit)
		return "-";
	std::string a(algo_name(s.algo));
	return s.warmup_ns ? a + " (warm-up " + format_duration(s.warmup_ns) + ")" : a;
}

std::vector<std::string> rule_cells(const InstalledRule &r)
{
	const RuleSpec &s = r.spec;
	bool limit = s.action == Action::limit;
	return {std::to_string(r.id),
		s.name,
		format_cidr(s.cidr),
		std::string(proto_name(s.proto)),
		format_ports(s.dport),
		action_cell(s),
		algo_cell(s),
		limit ? format_rate(s.rate) : "-",
		limit && s.has_burst() ? std::to_string(s.burst) + (s.rate.counts_bytes() ? "B" : "") : "-",
		limit ? "/" + std::to_string(s.bucket_prefix()) : "-"};
}

const std::vector<std::string> RULE_HEADER = {"ID",     "NAME", "CIDR", "PROTO", "DPORT",
					      "ACTION", "ALGO", "RATE", "BURST", "PER"};

/// Opens a `rule import` file ("-" for stdin) and reads its rules.
std::vector<RuleSpec> read_rule_file(const std::string &path, std::vector<std::string> &where)
{
	if (path == "-")
		return read_rule_lines(std::cin, path, &where);
	std::ifstream file(path);
	if (!file)
		throw Error("cannot read " + path + ": " + std::strerror(errno));
	return read_rule_lines(file, path, &where);
}

void cmd_status(const Instance &inst, bool json)
{
	auto lock = inst.lock(false);
	Status s = inst.status();
	if (json) {
		nlohmann::ordered_json links = nlohmann::ordered_json::array();
		for (const auto &l : s.links)
			links.push_back({{"interface", l.ifname},
					 {"ifindex", l.ifindex},
					 {"netns", l.netns},
					 {"mode", mode_name(l.mode)},
					 {"link_id", l.link_id},
					 {"prog_id", l.prog_id},
					 {"gone", l.ifindex == 0},
					 {"pin", l.pin}});
		nlohmann::ordered_json j = {{"loaded", s.loaded}, {"pin_dir", inst.pin_dir()}, {"links", links}};
		if (s.loaded) {
			j["loaded_at"] = s.loaded_ns / 1000000000ULL; // Unix time
			j["prog_id"] = s.prog_id;
			j["max_sources"] = s.max_sources;
			j["max_log_sources"] = s.max_log_sources;
			j["max_rules"] = s.max_rules;
			j["map_memory_bytes"] = s.map_memory_bytes;
			j["rules"] = RuleTable(inst.maps()).list().size();
		}
		std::cout << j.dump(2) << "\n";
		return;
	}
	if (!s.loaded) {
		std::cout << "sluice is not attached to any interface; run `sluice attach IFACE`\n";
		return;
	}
	MapSet maps = inst.maps();
	std::time_t loaded = static_cast<std::time_t>(s.loaded_ns / 1000000000ULL);
	char when[64];
	std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", std::localtime(&loaded));
	std::cout << "sluice: XDP program id " << s.prog_id << ", loaded " << when << ", state pinned in "
		  << inst.pin_dir() << "\n";
	std::cout << "interfaces:" << (s.links.empty() ? " none (the rules are kept; `sluice attach IFACE`)" : "")
		  << "\n";
	for (const auto &l : s.links) {
		std::cout << "  ";
		if (!l.ifindex)
			std::cout << "(interface or its namespace gone; `sluice detach " << l.pin << "` removes it)";
		else if (!l.this_netns)
			std::cout << "ifindex " << l.ifindex << " in network namespace " << l.netns;
		else
			std::cout << l.ifname << " (ifindex " << l.ifindex << ")";
		std::cout << "  " << mode_name(l.mode) << " mode, link id " << l.link_id;
		if (l.ifindex && l.prog_id != s.prog_id)
			std::cout << " (runs program id " << l.prog_id
				  << ", not the loaded one: `sluice upgrade` moves it)";
		std::cout << "\n";
	}
	Stats st = collect_stats(maps, {});
	VerdictTotals t = verdict_totals(st);
	std::cout << "rules: " << st.rules.size() << " of " << s.max_rules << "\n";
	std::cout << "sources: " << st.tracked_sources << " tracked, tables of " << s.max_sources
		  << " buckets and " << s.max_log_sources << " sliding-log buckets per address family\n";
	std::cout << "map memory: " << human_bytes(s.map_memory_bytes) << "\n";
	std::cout << "packets: " << t.passed << " passed, " << t.dropped << " dropped, " << t.failopen
		  << " passed by fail-open\n";
}

void cmd_rule_list(const Instance &inst, bool json)
{
	auto lock = inst.lock(false);
	MapSet maps = inst.maps();
	auto rules = RuleTable(maps).list();
	if (json) {
		nlohmann::ordered_json j = nlohmann::ordered_json::array();
		for (const auto &r : rules)
			j.push_back(rule_json(r));
		std::cout << j.dump(2) << "\n";
		return;
	}
	if (rules.empty()) {
		std::cout << "no rules; add one with `sluice rule add CIDR --rate RATE`\n";
		return;
	}
	std::vector<std::vector<std::string>> rows;
	for (const auto &r : rules)
		rows.push_back(rule_cells(r));
	print_table(RULE_HEADER, rows);
}

void cmd_stats(const Instance &inst, const StatsQuery &q, bool json)
{
	auto lock = inst.lock(false);
	MapSet maps = inst.maps();
	Stats s = collect_stats(maps, q);
	if (json) {
		write_stats_json(std::cout, s);
		return;
	}
	// A shadow rule's "drops" were passed: the table says "would drop" for them.
	std::vector<std::vector<std::string>> rows;
	for (const auto &src : s.sources)
		rows.push_back({src.source, src.rule + (src.shadow ? " (shadow)" : ""),
				std::string(algo_name(src.algo)), std::to_string(src.passed_packets),
				std::to_string(src.dropped_packets), std::to_string(src.passed_bytes),
				std::to_string(src.dropped_bytes)});
	print_table({"SOURCE", "RULE", "ALGO", "PASSED_PKTS", "DROPPED_PKTS", "PASSED_BYTES", "DROPPED_BYTES"},
		    rows);
	if (std::any_of(s.rules.begin(), s.rules.end(), [](const auto &rs) { return rs.rule.spec.shadow; }))
		std::cout << "(for shadow rules, DROPPED counts packets that would have been dropped; "
			     "they were passed)\n";
	std::cout << "(" << s.sources.size() << " of " << s.tracked_sources << " tracked sources shown)\n\n";

	rows.clear();
	for (const auto &rs : s.rules) {
		if (!q.rule.empty() && !rule_is(rs.rule, q.rule))
			continue;
		const auto &c = rs.counters;
		rows.push_back({rs.rule.spec.name, action_cell(rs.rule.spec), algo_cell(rs.rule.spec),
				std::to_string(rs.sources), std::to_string(c.passed_packets),
				std::to_string(c.dropped_packets), std::to_string(c.passed_bytes),
				std::to_string(c.dropped_bytes),
				std::to_string(c.failopen_table)});
	}
	print_table({"RULE", "ACTION", "ALGO", "SOURCES", "PASSED_PKTS", "DROPPED_PKTS", "PASSED_BYTES",
		     "DROPPED_BYTES", "FAILOPEN"},
		    rows);
	std::cout << "\n";

	rows.clear();
	for (int i = 0; i < SLUICE_CNT_MAX; i++)
		rows.push_back({counter_name(i), std::to_string(s.global[i].packets),
				std::to_string(s.global[i].bytes)});
	print_table({"GLOBAL", "PACKETS", "BYTES"}, rows);
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{"sluice: per-source rate limiting in XDP"};
	app.require_subcommand(1);
	app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);
	bool verbose = false;
	app.add_flag("-v,--verbose", verbose, "Show libbpf's messages (verifier log included)");

	std::string ifname, mode_text = "native";
	uint32_t max_sources = 0, max_rules = 0, max_log_sources = 0;
	auto *attach = app.add_subcommand("attach", "Attach to an interface (loads on first use)");
	attach->add_option("IFACE", ifname, "Interface")->required();
	attach->add_option("--mode", mode_text, "native (driver) or generic (skb); no silent fallback");
	attach->add_option("--max-sources", max_sources, "Buckets per address family (default 1000000)");
	attach->add_option("--max-rules", max_rules, "Rule table size (default 16384)");
	attach->add_option("--max-log-sources", max_log_sources,
			   "Sliding-log buckets per address family (default 16384, 552 bytes each)");

	bool detach_all = false;
	auto *detach = app.add_subcommand("detach", "Detach from an interface (the last one unloads)");
	auto *detach_if = detach->add_option("IFACE", ifname, "Interface");
	detach->add_flag("--all", detach_all, "Detach from every interface and remove all state")
		->excludes(detach_if);

	bool json = false;
	auto *status = app.add_subcommand("status", "Show where sluice is attached and its tables");
	status->add_flag("--json", json, "JSON output");

	auto *rule = app.add_subcommand("rule", "Manage rules");
	rule->require_subcommand(1);
	RuleArgs rule_args;
	std::string key, import_path;
	auto *add = rule->add_subcommand("add", "Add a rule; it applies at once");
	add_rule_options(add, rule_args);
	auto *import = rule->add_subcommand("import", "Add many rules at once, all or none");
	import->add_option("FILE", import_path, "One `rule add` argument list per line; - for stdin")
		->required();
	auto *del = rule->add_subcommand("del", "Delete a rule with its buckets");
	del->add_option("NAME|ID", key, "Rule name or id")->required();
	RuleEditArgs edit_args;
	auto *set = rule->add_subcommand("set", "Change a rule in place: same id, counters and (mostly) buckets");
	set->add_option("NAME|ID", key, "Rule name or id")->required();
	add_edit_options(set, edit_args);
	auto *flush = rule->add_subcommand("flush", "Delete every rule");
	auto *list = rule->add_subcommand("list", "List rules in match order");
	list->add_flag("--json", json, "JSON output");

	std::string policy_path;
	bool check_only = false, diff_only = false;
	auto *apply = app.add_subcommand("apply", "Make the running state equal to a policy file, in one transaction");
	apply->add_option("FILE", policy_path, "YAML policy (see sluice(8)); - for stdin")->required();
	auto *check_flag = apply->add_flag("--check", check_only, "Validate the file against this host; change nothing");
	apply->add_flag("--diff", diff_only, "Print what would change; change nothing")->excludes(check_flag);
	auto *export_cmd = app.add_subcommand("export", "Print the running state as a policy file");
	auto *upgrade = app.add_subcommand(
		"upgrade", "Replace the loaded program with this binary's, keeping rules, buckets and counters");

	StatsQuery query;
	auto *stats = app.add_subcommand("stats", "Per-source, per-rule and global counters");
	stats->add_option("--top", query.top, "Show the N sources with most drops")
		->check(CLI::Validator(
			[](std::string &v) {
				return v.empty() || v[0] == '-' ? std::string("a count of 0 or more, not ") + v
								 : std::string();
			},
			"N"));
	stats->add_option("--rule", query.rule, "Only this rule's sources");
	stats->add_flag("--json", json, "JSON output");

	std::string metrics_text = agent::ListenAddress().text();
	size_t top_sources = agent::DEFAULT_TOP_SOURCES;
	auto *agent_cmd = app.add_subcommand(
		"agent", "Serve Prometheus metrics read from the pinned state (optional; enforcement never needs it)");
	agent_cmd->add_option("--metrics", metrics_text, "ADDR:PORT to serve /metrics on (default " + metrics_text + ")");
	agent_cmd
		->add_option("--top-sources", top_sources,
			     "Per-source series for the N sources with most drops (default " +
				     std::to_string(agent::DEFAULT_TOP_SOURCES) + ", at most " +
				     std::to_string(agent::MAX_TOP_SOURCES) + ")")
		->check(CLI::Validator(
			[](std::string &v) {
				return v.empty() || v[0] == '-' ? std::string("a count from 0 to ") +
									  std::to_string(agent::MAX_TOP_SOURCES) + ", not " + v
								: std::string();
			},
			"N"));

	try {
		app.parse(argc, argv);
	} catch (const CLI::CallForHelp &e) {
		return app.exit(e);
	} catch (const CLI::CallForAllHelp &e) {
		return app.exit(e);
	} catch (const CLI::CallForVersion &e) {
		return app.exit(e);
	} catch (const CLI::ParseError &e) {
		std::string msg = e.what();
		if (msg.empty())
			msg = "a subcommand is required (attach, detach, status, rule, stats, apply, export, upgrade, "
			      "agent); "
			      "see --help";
		std::cerr << "sluice: " << msg << "\n";
		return 2;
	}

	set_libbpf_verbose(verbose);
	try {
		Instance inst;
		if (*agent_cmd) {
			agent::MetricsOptions options;
			options.listen = agent::parse_listen_address(metrics_text);
			if (top_sources > agent::MAX_TOP_SOURCES)
				throw Error("--top-sources: at most " + std::to_string(agent::MAX_TOP_SOURCES) +
					    " (each source adds series), not " + std::to_string(top_sources));
			options.top_sources = top_sources;
			options.pin_dir = inst.pin_dir();
			agent::Agent a;
			a.add(std::make_unique<agent::MetricsExporter>(options));
			int sig = a.run();
			agent::log_line(std::string("stopped") + (sig ? std::string(" by ") + strsignal(sig) : ""));
		} else if (*attach) {
			XdpMode mode = parse_mode(mode_text);
			auto lock = inst.lock(true, true);
			inst.attach(ifname, mode, {max_sources, max_rules, max_log_sources});
			std::cout << "sluice attached to " << ifname << " (" << mode_name(mode) << " mode)\n";
		} else if (*detach) {
			auto lock = inst.lock(true);
			if (detach_all) {
				inst.unload();
				std::cout << "sluice detached from every interface and unloaded\n";
			} else if (ifname.empty()) {
				throw Error("detach needs an interface, or --all");
			} else {
				inst.detach(ifname);
				std::cout << "sluice detached from " << ifname
					  << (inst.loaded() ? "" : "; no interface left, state removed") << "\n";
			}
		} else if (*status) {
			cmd_status(inst, json);
		} else if (*add) {
			RuleSpec spec = to_spec(rule_args, add->count("--per") > 0);
			auto lock = inst.lock(true, true);
			inst.load({}); // rules may come before the first attach
			MapSet maps = inst.maps();
			InstalledRule r = RuleTable(maps).add(spec);
			print_table(RULE_HEADER, {rule_cells(r)});
		} else if (*import) {
			std::vector<std::string> where;
			std::vector<RuleSpec> specs = read_rule_file(import_path, where);
			auto lock = inst.lock(true, true);
			inst.load({});
			MapSet maps = inst.maps();
			size_t asked = specs.size();
			auto added = RuleTable(maps).add_many(std::move(specs), where);
			std::cout << "imported " << added.size() << " rules";
			if (!added.empty())
				std::cout << " (ids " << added.front().id << "-" << added.back().id << ")";
			if (added.size() < asked)
				std::cout << "; " << asked - added.size() << " were present already";
			std::cout << "\n";
		} else if (*del) {
			auto lock = inst.lock(true);
			MapSet maps = inst.maps();
			InstalledRule r = RuleTable(maps).remove(key);
			std::cout << "deleted rule " << r.id << " (" << r.spec.name << ")\n";
		} else if (*set) {
			auto lock = inst.lock(true);
			MapSet maps = inst.maps();
			RuleTable table(maps);
			RuleEdit edit = to_edit(edit_args, *set, table.find(key).spec.rate.counts_bytes());
			InstalledRule r = table.edit(key, edit);
			print_table(RULE_HEADER, {rule_cells(r)});
		} else if (*flush) {
			auto lock = inst.lock(true);
			MapSet maps = inst.maps();
			size_t n = RuleTable(maps).flush();
			std::cout << "deleted " << n << " rules\n";
		} else if (*list) {
			cmd_rule_list(inst, json);
		} else if (*stats) {
			cmd_stats(inst, query, json);
		} else if (*apply) {
			Policy p = read_policy_file(policy_path);
			if (check_only || diff_only) {
				auto lock = inst.lock(false);
				ApplyPlan plan = plan_apply(inst, p);
				if (diff_only)
					std::cout << plan.format();
				else
					std::cout << policy_path << ": ok (" << p.rules.size() << " rules, "
						  << p.interfaces.size() << " interfaces)\n";
			} else {
				auto lock = inst.lock(true, true);
				ApplyPlan plan = apply_policy(inst, p);
				std::cout << (plan.empty() ? "no changes\n" : plan.format());
			}
		} else if (*export_cmd) {
			auto lock = inst.lock(false);
			std::cout << write_policy(export_policy(inst));
		} else if (*upgrade) {
			auto lock = inst.lock(true);
			auto restarted = inst.upgrade();
			std::cout << "sluice upgraded in place: rules, counters and buckets kept";
			for (const auto &name : restarted)
				std::cout << "; " << name << " started afresh (its layout changed)";
			std::cout << "\n";
		}
	} catch (const std::exception &e) {
		std::cerr << "sluice: " << e.what() << "\n";
		return 1;
	}
	return 0;
}
