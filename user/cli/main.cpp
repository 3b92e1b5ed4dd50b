// SPDX-License-Identifier: GPL-2.0-only
// sluice: the command-line front end. It parses arguments, calls the library
// and prints; every error becomes one line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "agent.h"
#include "apply.h"
#include "bans.h"
#include "chain.h"
#include "cluster_args.h"
#include "datapath.h"
#include "events.h"
#include "rate.h"
#include "explain.h"
#include "multiprog.h"
#include "event_log.h"
#include "metrics.h"
#include "rule_args.h"
#include "rule_table.h"
#include "set_cli.h"
#include "transaction.h"
#include "trie6.h"
#include "sluice_build.h"
#include "stats.h"
#include "text_table.h"
#include "top.h"
#include "top_view.h"

using namespace sluice;

namespace {

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
	if (s.ban.ns)
		cell += " (ban " + format_duration(s.ban.ns) + " after " + std::to_string(s.ban.after) + ")";
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
		format_source(s),
		std::string(proto_name(s.proto)),
		format_ports(s.dport),
		format_ports(s.sport),
		format_tcp_flags(s.tcp_flags),
		action_cell(s),
		algo_cell(s),
		!limit ? "-" : s.scope == Scope::cluster ? format_rate(s.rate) + " (cluster)" : format_rate(s.rate),
		limit && s.has_burst() ? std::to_string(s.burst) + (s.rate.counts_bytes() ? "B" : "") : "-",
		limit ? "/" + std::to_string(s.bucket_prefix()) : "-"};
}

const std::vector<std::string> RULE_HEADER = {"ID",     "NAME", "CIDR", "PROTO", "DPORT", "SPORT", "FLAGS",
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

/// Other XDP programs on an interface's hook, as the kernel reports them (a
/// libxdp dispatcher's components included, when libxdp's dispatcher runs there).
void print_hook_neighbours(uint32_t ifindex, uint32_t sluice_prog)
{
	if (auto programs = dispatcher_programs(ifindex); !programs.empty()) {
		for (const auto &p : programs)
			std::cout << "    libxdp dispatcher: " << p.name << " (id " << p.id << "), priority " << p.priority
				  << "\n";
		return;
	}
	LIBBPF_OPTS(bpf_xdp_query_opts, q);
	if (bpf_xdp_query(static_cast<int>(ifindex), 0, &q))
		return;
	for (uint32_t id : {q.drv_prog_id, q.skb_prog_id, q.hw_prog_id})
		if (id && id != sluice_prog)
			std::cout << "    also on this hook: " << describe_prog(id) << "\n";
}

/// "; attached nowhere now, N rules kept ..." after a detach that left no
/// link; empty otherwise.
std::string attached_nowhere_note(const Instance &inst)
{
	Status s = inst.status();
	if (!s.loaded || !s.links.empty() || !s.arrays.empty())
		return "";
	size_t rules = RuleTable(inst.maps()).list().size();
	return "; attached nowhere now, " + plural(rules, "rule", "rules") + " kept loaded (enforced at the next `sluice attach`; `sluice detach --all` removes them)";
}

/// What `detach --all` removes from the run directory besides the sets and
/// the IPv6 trie's record: event readers' locks, records of retired rules
/// and of reset counters, of any program the instance had; then the run
/// directory itself if that left it empty (a running agent's socket, or
/// sets kept with nothing loaded, keep it).
void forget_program_records(const Instance &inst)
{
	forget_event_records(inst.run_dir());
	forget_reset_records(inst.run_dir());
	rmdir(inst.run_dir().c_str());
}

/// `detach --all`: detaches everywhere, removes every pin, and says what it removed.
std::string unload_everything(Instance &inst)
{
	if (!inst.loaded()) {
		inst.remove_leftovers();
		forget_program_records(inst);
		return "nothing to remove: sluice is not loaded under " + inst.pin_dir();
	}
	// State of another layout goes too (its maps are not read: its rules
	// are not counted), so that the refusal's way out holds.
	Status s = inst.attachments();
	const bool foreign = foreign_layout(inst.pin_dir()).has_value();
	const size_t rules = foreign ? 0 : RuleTable(inst.maps()).list().size();
	std::vector<std::string> places;
	for (const auto &l : s.links)
		places.push_back(l.ifname.empty() ? l.pin : l.ifname);
	for (const auto &a : s.arrays)
		places.push_back("program array slot " + a.pin);
	inst.unload();
	SetStore sets(inst.run_dir());
	size_t set_count = sets.names().size();
	sets.remove_all();
	remove_trie6_record(inst.run_dir());
	forget_program_records(inst);
	std::string where;
	for (const auto &p : places)
		where += (where.empty() ? " (" : ", ") + p;
	if (!where.empty())
		where += ")";
	return (places.empty() ? std::string("sluice was attached nowhere; unloaded: ")
			       : "sluice detached from " + plural(places.size(), "place", "places") + where +
					 " and unloaded: ") +
	       (foreign ? std::string("the rules, counters and buckets of another layout removed unread, ")
			: plural(rules, "rule removed with its", "rules removed with their") + " counters and buckets, ") +
	       (set_count ? plural(set_count, "address set", "address sets") + ", " : "") +
	       "state under " + inst.pin_dir() + " removed";
}

/// `status --json`: where the program is attached and its tables.
nlohmann::ordered_json status_json(const Instance &inst, const Status &s)
{
	nlohmann::ordered_json links = nlohmann::ordered_json::array();
	for (const auto &l : s.links)
		links.push_back({{"interface", l.ifname},
				 {"ifindex", l.ifindex},
				 {"netns", l.netns},
				 {"mode", mode_name(l.mode)},
				 {"link_id", l.link_id},
				 {"prog_id", l.prog_id},
				 {"gone", l.ifindex == 0},
				 {"pin", l.pin},
				 {"then_prog_id", l.then_prog_id}});
	nlohmann::ordered_json arrays = nlohmann::ordered_json::array();
	for (const auto &a : s.arrays)
		arrays.push_back({{"map_id", a.map_id},
				  {"map_name", a.map_name},
				  {"index", a.index},
				  {"prog_id", a.prog_id},
				  {"pin", a.pin}});
	nlohmann::ordered_json j = {{"loaded", s.loaded}, {"pin_dir", inst.pin_dir()}, {"run_dir", inst.run_dir()}, {"links", links},
				    {"prog_arrays", arrays}};
	if (s.loaded) {
		j["loaded_at"] = s.loaded_ns / 1000000000ULL; // Unix time
		j["prog_id"] = s.prog_id;
		j["max_sources"] = s.max_sources;
		j["max_log_sources"] = s.max_log_sources;
		j["max_rules"] = s.max_rules;
		j["max_bans"] = s.max_bans;
		j["max_v6_prefixes"] = s.max_v6_prefixes;
		j["map_memory_bytes"] = s.map_memory_bytes;
		j["rules"] = RuleTable(inst.maps()).list().size();
		j["attached"] = !s.links.empty() || !s.arrays.empty();
	}
	std::string cluster_line = cluster::read_status_line(cluster::default_status_path());
	j["cluster"] = cluster_line.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(cluster_line);
	return j;
}

/// `status`'s line of one interface link, then its hook's other programs.
void print_status_link(const AttachedLink &l, uint32_t loaded_prog)
{
	std::cout << "  ";
	if (!l.ifindex)
		std::cout << "(interface or its namespace gone; `sluice detach " << l.pin << "` removes it)";
	else if (!l.this_netns)
		std::cout << "ifindex " << l.ifindex << " in network namespace " << l.netns;
	else
		std::cout << l.ifname << " (ifindex " << l.ifindex << ")";
	std::cout << "  " << mode_name(l.mode) << " mode, link id " << l.link_id;
	if (l.dispatcher)
		std::cout << ", in libxdp's dispatcher as program id " << l.prog_id;
	else if (l.ifindex && l.prog_id != loaded_prog)
		std::cout << " (runs program id " << l.prog_id << ", not the loaded one: `sluice upgrade` moves it)";
	if (l.then_prog_id)
		std::cout << ", then " << describe_prog(l.then_prog_id);
	std::cout << "\n";
	if (l.ifindex && l.this_netns)
		print_hook_neighbours(l.ifindex, loaded_prog);
}

/// `status`'s lines of where the loaded program runs: interfaces, program arrays.
void print_status_places(const Status &s, size_t rules)
{
	if (s.links.empty() && s.arrays.empty())
		std::cout << "attached nowhere: " << rules << (rules == 1 ? " rule" : " rules")
			  << " kept loaded, enforced on no interface (`sluice attach IFACE` enforces them; "
			     "`sluice detach --all` removes them)\n";
	std::cout << "interfaces:" << (s.links.empty() ? " none" : "") << "\n";
	for (const auto &l : s.links)
		print_status_link(l, s.prog_id);
	for (const auto &a : s.arrays) {
		std::cout << "  program array " << (a.map_name.empty() ? "" : a.map_name + " ") << "(map id " << a.map_id
			  << "), index " << a.index;
		if (a.prog_id != s.prog_id)
			std::cout << (a.prog_id ? " (now holds " + describe_prog(a.prog_id) + ", not sluice)"
						: " (emptied by its owner)");
		std::cout << "  [" << a.pin << "]\n";
	}
}

void cmd_status(const Instance &inst, bool json)
{
	auto lock = inst.lock(false);
	Status s = inst.status();
	if (json) {
		std::cout << status_json(inst, s).dump(2) << "\n";
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
	Stats st = collect_stats(maps, {});
	print_status_places(s, st.rules.size());
	VerdictTotals t = verdict_totals(st);
	std::cout << "rules: " << st.rules.size() << " of " << s.max_rules << "\n";
	std::cout << "IPv6 prefixes of rules and sets: up to " << s.max_v6_prefixes << "\n";
	std::cout << "sources: " << st.tracked_sources << " tracked, tables of " << s.max_sources
		  << " buckets and " << s.max_log_sources << " sliding-log buckets per address family\n";
	std::cout << "bans: " << st.bans << " of " << s.max_bans << "\n";
	std::cout << "map memory: " << human_bytes(s.map_memory_bytes) << "\n";
	std::cout << "packets: " << t.passed << " passed, " << t.dropped << " dropped, " << t.failopen
		  << " passed by fail-open\n";
	if (std::string line = cluster::read_status_line(cluster::default_status_path()); !line.empty())
		std::cout << line << "\n";
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

void print_stats(const Stats &s, bool json, bool with_global, bool with_rules);

/// A source as `stats --source` and `release` take it: an address or a prefix.
Cidr parse_source(const std::string &text)
{
	try {
		return parse_cidr(text);
	} catch (const Error &e) {
		throw Error(std::string(e.what()) + " (a source: an address or a prefix)");
	}
}

/// `sluice stats`: with --rule, that rule's lines only; with --source, the
/// buckets of that source only. With --reset, prints the counters as they
/// were and then zeroes them (as `nft reset counters` lists what it resets).
void cmd_stats(const Instance &inst, const StatsQuery &q, bool json, bool reset, const std::string &source_text)
{
	std::optional<Cidr> source;
	if (!source_text.empty())
		source = parse_source(source_text);
	auto lock = inst.lock(reset);
	MapSet maps = inst.maps();
	Stats s = collect_stats(maps, q);
	if (!q.rule.empty() || source) {
		std::erase_if(s.rules, [&](const RuleStats &rs) { return !q.rule.empty() && !rule_is(rs.rule, q.rule); });
		uint64_t tracked = 0;
		for (const auto &rs : s.rules)
			tracked += rs.sources;
		s.tracked_sources = tracked;
	}
	if (source)
		std::erase_if(s.sources, [&](const SourceStats &src) {
			Cidr c = parse_cidr(src.source);
			return !cidr_contains(c, *source) && !cidr_contains(*source, c);
		});
	ResetSummary done;
	if (reset)
		done = reset_counters(maps, {q.rule, source});
	print_stats(s, json, q.rule.empty() && !source, !source);
	if (reset && !json)
		std::cout << "\ncounters zeroed: " << (done.global ? "global, " : "") << plural(done.rules, "rule", "rules")
			  << ", " << plural(done.buckets, "bucket", "buckets") << "; buckets kept\n";
}

void print_stats(const Stats &s, bool json, bool with_global, bool with_rules)
{
	if (json) {
		write_stats_json(std::cout, s, with_global, with_rules);
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
	std::cout << "(" << s.sources.size() << " of " << s.tracked_sources << " tracked sources shown)\n";
	if (!with_rules)
		return;
	std::cout << "\n";

	rows.clear();
	for (const auto &rs : s.rules) {
		const auto &c = rs.counters;
		rows.push_back({rs.rule.spec.name, format_selector(rs.rule.spec), action_cell(rs.rule.spec),
				algo_cell(rs.rule.spec),
				std::to_string(rs.sources), std::to_string(c.passed_packets),
				std::to_string(c.dropped_packets), std::to_string(c.passed_bytes),
				std::to_string(c.dropped_bytes),
				std::to_string(c.failopen_table)});
	}
	print_table({"RULE", "SELECTOR", "ACTION", "ALGO", "SOURCES", "PASSED_PKTS", "DROPPED_PKTS", "PASSED_BYTES",
		     "DROPPED_BYTES", "FAILOPEN"},
		    rows);
	if (!with_global)
		return;
	std::cout << "\n";

	rows.clear();
	for (int i = 0; i < SLUICE_CNT_MAX; i++)
		rows.push_back({counter_name(i), std::to_string(s.global[i].packets),
				std::to_string(s.global[i].bytes)});
	print_table({"GLOBAL", "PACKETS", "BYTES"}, rows);
	if (s.bans)
		std::cout << "\n" << plural(s.bans, "source", "sources") << " banned now (`sluice bans`)\n";
}

/// `sluice release ADDR [--rule R]`: refills the source's buckets.
void cmd_release(const Instance &inst, const std::string &source_text, const std::string &rule)
{
	Cidr source = parse_source(source_text);
	auto lock = inst.lock(true);
	MapSet maps = inst.maps();
	for (const ReleasedBucket &b : release_source(maps, source, rule))
		std::cout << "released " << b.bucket << " from rule " << b.rule << " (" << algo_name(b.algo)
			  << "): its bucket is full again\n";
}

/// Seconds, rounded up, as a duration ("9m58s" reads "598s": one unit).
std::string format_seconds(uint64_t ns)
{
	return std::to_string((ns + 999999999ULL) / 1000000000ULL) + "s";
}

/// A CLOCK_MONOTONIC time, past or future, as UTC wall-clock time, to the second.
std::string format_monotonic(uint64_t mono_ns, uint64_t mono_now)
{
	struct timespec real = {};
	clock_gettime(CLOCK_REALTIME, &real);
	return monotonic_to_utc(mono_ns, mono_now, int64_t(real.tv_sec));
}

/// `sluice bans`: the bans in force, with the rule that banned each.
void cmd_bans(const Instance &inst, bool json)
{
	auto lock = inst.lock(false);
	MapSet maps = inst.maps();
	uint64_t now = ban_clock_ns();
	std::vector<Ban> bans = list_bans(maps, now);
	std::unordered_map<uint32_t, InstalledRule> by_slot;
	for (auto &r : RuleTable(maps).list())
		by_slot.emplace(r.slot, r);
	auto rule_of = [&](const Ban &b) {
		auto it = by_slot.find(b.slot);
		return it == by_slot.end() ? std::string("-") : it->second.spec.name;
	};
	if (json) {
		nlohmann::ordered_json out = nlohmann::ordered_json::array();
		for (const Ban &b : bans) {
			auto it = by_slot.find(b.slot);
			out.push_back({{"source", format_cidr(b.prefix)},
				       {"rule", rule_of(b)},
				       {"rule_id", it == by_slot.end() ? 0 : it->second.id},
				       {"banned_at", format_monotonic(b.since_ns, now)},
				       {"expires_in_s", (b.until_ns - now + 999999999ULL) / 1000000000ULL},
				       {"drops", b.drops}});
		}
		std::cout << out.dump(2) << "\n";
		return;
	}
	if (bans.empty()) {
		std::cout << "no source is banned\n";
		return;
	}
	std::vector<std::vector<std::string>> rows;
	for (const Ban &b : bans)
		rows.push_back({format_cidr(b.prefix), rule_of(b), format_monotonic(b.since_ns, now),
				format_seconds(b.until_ns - now), std::to_string(b.drops)});
	print_table({"SOURCE", "RULE", "BANNED AT", "EXPIRES IN", "DROPS"}, rows);
}

/// `sluice ban del ADDR`: lifts the ban covering ADDR.
void cmd_ban_del(const Instance &inst, const std::string &text)
{
	Cidr addr = parse_cidr(text);
	auto lock = inst.lock(true);
	MapSet maps = inst.maps();
	std::optional<Ban> b = remove_ban(maps, addr, ban_clock_ns());
	if (!b)
		throw Error("no ban covers " + format_cidr(addr) + " (see `sluice bans`)");
	std::cout << "lifted the ban of " << format_cidr(b->prefix) << " after " << b->drops << " drops\n";
}

/// The agent's events socket, connected; empty if no agent serves it.
UniqueFd connect_events_socket(const std::string &path)
{
	sockaddr_un addr{};
	addr.sun_family = AF_UNIX;
	if (path.size() >= sizeof(addr.sun_path))
		return UniqueFd();
	std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
	UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (!fd || connect(fd.get(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)))
		return UniqueFd();
	return fd;
}

/// `sluice events`: follows the agent's stream of throttle events when an
/// agent serves `socket` (every reader gets every event, in order), else
/// reads the ring buffer itself, until `count` events (0: no limit) or
/// `timeout_ns` (0: none) have passed. Says on stderr which it reads.
/// `socket_named`: the socket was given (--socket); no agent there is an error.
void cmd_events(const Instance &inst, bool json, uint64_t count, uint64_t timeout_ns, const std::string &socket,
		bool socket_named)
{
	auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
	UniqueFd agent = connect_events_socket(socket);
	if (!agent && socket_named)
		throw Error("no agent serves events at " + socket + " (`sluice agent --events-socket " + socket + "`)");
	if (agent) {
		std::cerr << "sluice events: following the agent's events at " << socket << "\n";
		uint64_t seen = 0;
		std::string pending;
		char buf[4096];
		while (!count || seen < count) {
			int wait = 200;
			if (timeout_ns) {
				auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
					deadline - std::chrono::steady_clock::now());
				if (left.count() <= 0)
					break;
				wait = static_cast<int>(std::min<int64_t>(wait, left.count()));
			}
			pollfd p = {agent.get(), POLLIN, 0};
			if (poll(&p, 1, wait) <= 0)
				continue;
			ssize_t n = read(agent.get(), buf, sizeof(buf));
			if (n <= 0)
				throw Error("the agent closed the events socket (stopped, or this reader fell behind)");
			pending.append(buf, size_t(n));
			for (size_t nl; (nl = pending.find('\n')) != std::string::npos && (!count || seen < count);) {
				std::string line = pending.substr(0, nl);
				pending.erase(0, nl + 1);
				std::cout << (json ? line : format_event(event_from_json(line))) << std::endl;
				seen++;
			}
		}
		return;
	}
	MapSet maps = [&] {
		auto lock = inst.lock(false);
		return inst.maps();
	}();
	// Each event of the ring goes to one reader: read it only if no other
	// process does (an agent serving another socket, or another `sluice events`).
	RingReaderLock ring_lock(map_info(maps.events.get()).id);
	if (!ring_lock.held())
		throw Error("another process reads the ring buffer of events (an agent with another --events-socket, "
			    "or another `sluice events`): follow the agent with `sluice events --socket PATH`, or "
			    "start `sluice agent` so that any number of readers get every event");
	std::cerr << "sluice events: no agent serves " << socket
		  << "; reading the ring buffer (this reader alone: `sluice agent` serves several)\n";
	EventNamer namer(maps);
	uint64_t seen = 0;
	EventReader reader(maps.events.get(), [&](const struct sluice_event &e) {
		if (count && seen >= count)
			return;
		ThrottleEvent named = namer.name(e);
		std::cout << (json ? event_json(named) : format_event(named)) << std::endl;
		seen++;
	});
	while (!count || seen < count) {
		auto wait = std::chrono::milliseconds(200);
		if (timeout_ns) {
			auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
											   std::chrono::steady_clock::now());
			if (left.count() <= 0)
				break;
			wait = std::min(wait, left);
		}
		sweep_bans(maps, ban_clock_ns()); // bans run out of sources gone quiet: their unban
		reader.poll(wait);
	}
}

/// "12.5ms", "3s", "0": how long until the next such packet passes.
std::string wait_text(uint64_t ns)
{
	if (ns == 0)
		return "0";
	std::ostringstream s;
	s.precision(ns < 1000 ? 0 : 1);
	s << std::fixed;
	if (ns < 1000)
		s << ns << "ns";
	else if (ns < 1000000)
		s << double(ns) / 1e3 << "us";
	else if (ns < 1000000000)
		s << double(ns) / 1e6 << "ms";
	else
		s << double(ns) / 1e9 << "s";
	return s.str();
}

/// "12 of 20 packets", "3000 of 15000 bytes".
std::string units_text(const RuleSpec &s, uint64_t n, uint64_t of)
{
	return std::to_string(n) + " of " + (s.rate.counts_bytes() ? plural(of, "byte", "bytes") : plural(of, "packet", "packets"));
}

nlohmann::ordered_json explanation_json(const Explanation &e)
{
	const ExplainPacket &p = e.packet;
	nlohmann::ordered_json pkt = {{"source", format_address(p.family, p.src.data())}, {"family", p.family}};
	pkt["proto"] = p.proto ? nlohmann::ordered_json(*p.proto) : nlohmann::ordered_json(nullptr);
	pkt["dport"] = p.dport ? nlohmann::ordered_json(*p.dport) : nlohmann::ordered_json(nullptr);
	pkt["sport"] = p.sport ? nlohmann::ordered_json(*p.sport) : nlohmann::ordered_json(nullptr);
	pkt["tcp_flags"] = p.tcp_flags ? nlohmann::ordered_json(format_tcp_flag_set(*p.tcp_flags))
				       : nlohmann::ordered_json(nullptr);
	pkt["bytes"] = p.bytes;
	nlohmann::ordered_json j = {{"packet", pkt}};
	j["prefix"] = e.walk.prefix ? nlohmann::ordered_json(format_cidr(*e.walk.prefix)) : nullptr;
	if (e.ban) {
		uint64_t now = ClockReading::now().coarse_ns;
		j["ban"] = {{"source", format_cidr(e.ban->prefix)},
			    {"until", format_monotonic(e.ban->until_ns, now)},
			    {"expires_in_s", (e.ban->until_ns - now + 999999999ULL) / 1000000000ULL}};
	}
	nlohmann::ordered_json cands = nlohmann::ordered_json::array();
	for (const auto &c : e.walk.candidates) {
		nlohmann::ordered_json r = rule_json(c.rule);
		cands.push_back({{"rule", r}, {"match", match_name(c.match)}, {"role", role_key(c.role)}});
		if (c.set_prefix)
			cands.back()["set_prefix"] = format_cidr(*c.set_prefix);
	}
	j["candidates"] = cands;
	nlohmann::ordered_json applied = nlohmann::ordered_json::array();
	for (size_t i = 0; i < e.applied.size(); i++) {
		const AppliedRule &a = e.applied[i];
		const InstalledRule &r = e.walk.candidates[a.candidate].rule;
		nlohmann::ordered_json x = {{"id", r.id}, {"name", r.spec.name}, {"action", action_name(r.spec.action)},
					    {"layered", r.spec.layered}, {"shadow", r.spec.shadow},
					    {"decides", e.decided_by == i}, {"would_drop", a.drops}};
		if (a.bucket && a.state) {
			const BucketState &b = *a.state;
			x["bucket"] = format_cidr(*a.bucket);
			x["algo"] = algo_name(r.spec.algo);
			x["unit"] = r.spec.rate.counts_bytes() ? "bytes" : "packets";
			x["exists"] = b.exists;
			x["passes"] = b.passes;
			x["tokens"] = b.tokens;
			x["capacity"] = b.capacity;
			x["remaining"] = b.remaining;
			x["retry_after_ns"] = b.never ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(b.retry_after_ns);
			x["never"] = b.never;
			if (!r.spec.has_burst())
				x["resets_in_ns"] = b.resets_in_ns;
			x["counters"] = {{"passed_packets", b.counters.passed_packets},
					 {"passed_bytes", b.counters.passed_bytes},
					 {"dropped_packets", b.counters.dropped_packets},
					 {"dropped_bytes", b.counters.dropped_bytes}};
		}
		applied.push_back(x);
	}
	j["applied"] = applied;
	j["verdict"] = counter_name(e.verdict);
	j["dropped"] = e.dropped();
	if (e.decided_by)
		j["decided_by"] = e.walk.candidates[e.applied[*e.decided_by].candidate].rule.id;
	return j;
}

void cmd_explain(const Instance &inst, const ExplainPacket &pkt, bool json)
{
	auto lock = inst.lock(false);
	MapSet maps = inst.maps();
	Explanation e = explain(maps, pkt, ClockReading::now());
	if (json) {
		std::cout << explanation_json(e).dump(2) << "\n";
		return;
	}
	std::cout << "packet: " << describe_packet(pkt) << "\n";
	if (e.ban) {
		uint64_t now = ClockReading::now().coarse_ns;
		auto it = std::find_if(e.walk.candidates.begin(), e.walk.candidates.end(),
				       [&](const Candidate &c) { return c.rule.slot == e.ban->slot; });
		std::string rule = it == e.walk.candidates.end() ? "a rule" : "rule " + std::to_string(it->rule.id) +
			(it->rule.spec.name.empty() ? "" : " (" + it->rule.spec.name + ")");
		std::cout << "banned: " << format_cidr(e.ban->prefix) << " is banned by " << rule << " until "
			  << format_monotonic(e.ban->until_ns, now) << " (in " << format_seconds(e.ban->until_ns - now)
			  << "): every packet from it is dropped before any rule is looked at\n";
		std::cout << "verdict: drop (drop_ban)\n";
		return;
	}
	if (!e.walk.prefix) {
		std::cout << "no rule covers " << format_address(pkt.family, pkt.src.data())
			  << ": it passes untouched (pass_no_match)\n";
		return;
	}
	std::cout << "candidates in match order (from " << format_cidr(*e.walk.prefix) << "):\n";
	std::vector<std::vector<std::string>> rows;
	for (const auto &c : e.walk.candidates) {
		auto cells = rule_cells(c.rule);
		if (c.set_prefix)
			cells[2] += " (" + format_cidr(*c.set_prefix) + ")";
		cells.resize(8); // up to ACTION
		cells.push_back(std::string(match_name(c.match)));
		cells.push_back(std::string(role_name(c.role)));
		rows.push_back(std::move(cells));
	}
	print_table({"ID", "NAME", "CIDR", "PROTO", "DPORT", "SPORT", "FLAGS", "ACTION", "MATCH", "ROLE"}, rows);
	for (size_t i = 0; i < e.applied.size(); i++) {
		const AppliedRule &a = e.applied[i];
		const InstalledRule &r = e.walk.candidates[a.candidate].rule;
		std::cout << "rule " << r.id << (r.spec.name.empty() ? "" : " (" + r.spec.name + ")") << ": ";
		if (!a.state) {
			std::cout << action_name(r.spec.action) << (r.spec.shadow ? " (shadow)" : "") << "\n";
			continue;
		}
		const BucketState &b = *a.state;
		std::cout << algo_name(r.spec.algo) << " " << format_rate(r.spec.rate) << ", bucket "
			  << format_cidr(*a.bucket) << (b.exists ? "" : " (none yet: a fresh one, full)") << "\n";
		if (r.spec.has_burst())
			std::cout << "  tokens left: " << units_text(r.spec, b.tokens, b.capacity) << "\n";
		else
			std::cout << "  left in the window: " << units_text(r.spec, b.tokens, b.capacity)
				  << (b.resets_in_ns ? ", " + std::string(r.spec.algo == Algo::sliding_log
									       ? "the oldest pass leaves it in "
									       : "the window moves on in ") +
							 wait_text(b.resets_in_ns)
						     : "")
				  << "\n";
		std::cout << "  such packets that would pass now: " << b.remaining << "\n";
		std::cout << "  next such packet: "
			  << (b.passes ? "passes now"
				       : b.never ? "never passes: it costs more than the bucket holds"
						 : "passes in " + wait_text(b.retry_after_ns) + " (retry after)")
			  << (!b.passes && r.spec.shadow ? " (shadow: would drop, passes)" : "") << "\n";
		if (b.exists)
			std::cout << "  this bucket: " << plural(b.counters.passed_packets, "packet", "packets") << " passed, "
				  << (r.spec.shadow ? plural(b.counters.dropped_packets, "would-be drop", "would-be drops")
						    : std::to_string(b.counters.dropped_packets) + " dropped")
				  << "; " << plural(b.counters.passed_bytes, "byte", "bytes") << " passed, "
				  << (r.spec.shadow ? plural(b.counters.dropped_bytes, "would-be drop", "would-be drops")
						    : std::to_string(b.counters.dropped_bytes) + " dropped")
				  << "\n";
	}
	std::cout << "verdict: " << (e.dropped() ? "drop" : "pass") << " (" << counter_name(e.verdict) << ")";
	if (e.decided_by) {
		const InstalledRule &r = e.walk.candidates[e.applied[*e.decided_by].candidate].rule;
		std::cout << ", decided by rule " << r.id << (r.spec.name.empty() ? "" : " (" + r.spec.name + ")");
	}
	std::cout << "\n";
}

/// `--top N` and the like: a count of 0 or more (at most `max`, if given).
/// CLI11 reads "-1" into an unsigned option as a huge number: refused here.
CLI::Validator count_check(std::optional<size_t> max = std::nullopt)
{
	return CLI::Validator(
		[max](std::string &v) {
			if (!v.empty() && v[0] != '-')
				return std::string();
			return max ? "a count from 0 to " + std::to_string(*max) + ", not " + v
				   : "a count of 0 or more, not " + v;
		},
		"N");
}

/// `--count N`: a count of 1 or more. CLI::PositiveNumber's refusal of 0
/// read "Value 0 not in range 0.000000 to 1.79...e308".
CLI::Validator positive_count_check()
{
	return CLI::Validator(
		[](std::string &v) {
			bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
			if (digits && v.find_first_not_of('0') != std::string::npos)
				return std::string();
			return "a count of 1 or more, not " + v;
		},
		"POSITIVE");
}

/// A table size: a count from 1 to `max`, in decimal.
CLI::Validator size_check(uint32_t max)
{
	return CLI::Validator(
		[max](std::string &v) {
			uint64_t n = 0;
			auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
			if (!v.empty() && ec == std::errc() && end == v.data() + v.size() && n >= 1 && n <= max)
				return std::string();
			return "a count from 1 to " + std::to_string(max) + ", not " + v;
		},
		"N");
}

/// Every option of every subcommand: each subcommand's setup binds its own
/// fields, and its handler reads them.
struct Args {
	bool verbose = false, json = false;
	std::string pin_dir, run_dir;
	// attach, detach
	std::string ifname, mode_text = "native", then_prog, prog_array_path;
	uint32_t max_sources = 0, max_rules = 0, max_log_sources = 0, max_bans = 0, max_v6_prefixes = 0,
		 prog_array_index = 0;
	bool multiprog = false, detach_all = false;
	int priority = 50;
	// rule
	RuleArgs rule;
	RuleEditArgs edit;
	// set
	SetArgs set;
	std::string key, import_path;
	// apply
	std::string policy_path;
	bool check_only = false, diff_only = false;
	ApplyOptions apply;
	// stats, release
	StatsQuery query;
	std::string stats_source, release_source, release_rule;
	bool stats_reset = false;
	// ban del
	std::string ban_addr;
	// events, top, explain
	uint64_t event_count = 0;
	std::string event_timeout, events_from = default_events_socket();
	TopOptions top;
	std::string interval_text = "1", sort_text = "drop-pps";
	std::string explain_src, explain_proto, explain_flags;
	std::optional<long> explain_dport, explain_sport, explain_bytes;
	bool explain_syn = false;
	// agent
	std::string metrics_text = agent::ListenAddress().text(), events_socket = default_events_socket();
	size_t top_sources = agent::DEFAULT_TOP_SOURCES;
	ClusterArgs cluster;
};

/// A row of the command table: a subcommand, the setup of its options, and
/// its handler (which returns the exit status; errors are thrown).
struct Command {
	const char *name;
	const char *help;
	void (*setup)(CLI::App &cmd, Args &a);
	int (*run)(Instance &inst, const CLI::App &cmd, Args &a);
	const std::vector<Command> *subcommands = nullptr; ///< chosen among after parsing
};

TableSizes table_sizes(const Args &a)
{
	return {a.max_sources, a.max_rules, a.max_log_sources, a.max_bans, a.max_v6_prefixes};
}

void setup_attach(CLI::App &cmd, Args &a)
{
	auto *attach_if = cmd.add_option("IFACE", a.ifname, "Interface");
	auto *then_opt = cmd.add_option("--then", a.then_prog,
					"Hand the packets sluice passes to this XDP program: a pinned program, or FILE.o[:NAME]")
				 ->needs(attach_if);
	auto *attach_array = cmd.add_option("--prog-array", a.prog_array_path,
					    "Install sluice in this pinned program array instead of an interface")
				     ->excludes(attach_if);
	auto *attach_index = cmd.add_option("--index", a.prog_array_index, "The program array's slot (with --prog-array)")
				     ->needs(attach_array);
	attach_array->needs(attach_index); // no slot taken by default: another loader owns the array
	auto *multi = cmd.add_flag("--multiprog", a.multiprog,
				   "Share the hook through libxdp's dispatcher (needs BPF trampolines)")
			      ->excludes(then_opt)
			      ->excludes(attach_array);
	cmd.add_option("--priority", a.priority, "libxdp run priority, lower first (with --multiprog)")->needs(multi);
	cmd.add_option("--mode", a.mode_text, "native (driver) or generic (skb); no silent fallback");
	cmd.add_option("--max-sources", a.max_sources, "Buckets per address family (default 1000000)");
	cmd.add_option("--max-rules", a.max_rules, "Rule table size (default 16384)");
	cmd.add_option("--max-log-sources", a.max_log_sources,
		       "Sliding-log buckets per address family (default 16384, 576 bytes each for IPv4, 592 for IPv6)");
	cmd.add_option("--max-bans", a.max_bans,
		       "Ban table size: sources under a temporary ban at once (default 65536; full, a new ban is refused)");
	cmd.add_option("--max-v6-prefixes", a.max_v6_prefixes,
		       "IPv6 prefixes of rules and address sets a rule set holds (default: as --max-rules)")
		->check(size_check(SLUICE_MAX_MAX_V6_PREFIXES));
}

int run_attach(Instance &inst, const CLI::App &, Args &a)
{
	XdpMode mode = parse_mode(a.mode_text);
	if (a.prog_array_path.empty() && a.ifname.empty())
		throw Error("attach needs an interface, or --prog-array MAP --index N");
	auto lock = inst.lock(true, true);
	if (a.multiprog) {
		if (a.priority < 0)
			throw Error("--priority: 0 or more, not " + std::to_string(a.priority));
		inst.attach_multiprog(a.ifname, mode, table_sizes(a), static_cast<uint32_t>(a.priority));
		std::cout << "sluice attached to " << a.ifname << " through libxdp's dispatcher, priority " << a.priority
			  << " (" << mode_name(mode) << " mode)\n";
	} else if (!a.prog_array_path.empty()) {
		inst.attach_to_prog_array(a.prog_array_path, a.prog_array_index, table_sizes(a));
		std::cout << "sluice installed at index " << a.prog_array_index << " of " << a.prog_array_path << "\n";
	} else {
		inst.attach(a.ifname, mode, table_sizes(a), a.then_prog);
		std::cout << "sluice attached to " << a.ifname << " (" << mode_name(mode) << " mode)";
		if (!a.then_prog.empty())
			std::cout << ", then " << a.then_prog;
		std::cout << "\n";
	}
	return 0;
}

void setup_detach(CLI::App &cmd, Args &a)
{
	auto *detach_if = cmd.add_option("IFACE", a.ifname, "Interface, or a link's or slot's name from status");
	auto *detach_array = cmd.add_option("--prog-array", a.prog_array_path, "Take sluice out of this program array")
				     ->excludes(detach_if);
	auto *detach_index = cmd.add_option("--index", a.prog_array_index, "The program array's slot")->needs(detach_array);
	detach_array->needs(detach_index);
	cmd.add_flag("--all", a.detach_all, "Detach from every interface and remove all state")
		->excludes(detach_if)
		->excludes(detach_array);
}

int run_detach(Instance &inst, const CLI::App &, Args &a)
{
	if (a.detach_all && access(inst.pin_dir().c_str(), F_OK) != 0 && errno == ENOENT) {
		// Nothing pinned (or an earlier --all removed it): a no-op that makes
		// nothing, and removes what an earlier release's --all left in the run directory.
		forget_program_records(inst);
		std::cout << "nothing to remove: sluice is not loaded under " << inst.pin_dir() << "\n";
		return 0;
	}
	auto lock = inst.lock(true);
	if (!a.prog_array_path.empty()) {
		inst.detach_from_prog_array(a.prog_array_path, a.prog_array_index);
		std::cout << "sluice removed from index " << a.prog_array_index << " of " << a.prog_array_path
			  << attached_nowhere_note(inst) << "\n";
	} else if (a.detach_all) {
		std::cout << unload_everything(inst) << "\n";
	} else if (a.ifname.empty()) {
		throw Error("detach needs an interface, or --all");
	} else {
		inst.detach(a.ifname);
		std::cout << "sluice detached from " << a.ifname << attached_nowhere_note(inst) << "\n";
	}
	return 0;
}

void setup_json(CLI::App &cmd, Args &a) { cmd.add_flag("--json", a.json, "JSON output"); }

int run_status(Instance &inst, const CLI::App &, Args &a)
{
	cmd_status(inst, a.json);
	return 0;
}

/// The exclusive lock of a command that loads the program if it is not
/// loaded. `check` throws if what the command writes does not go into an
/// empty table (the program as it would load): run before the lock when
/// nothing is loaded, so that a refused command loads nothing and makes no
/// pin or lock directory, and again under the lock if the program went
/// meanwhile (`detach --all`).
template <class Check> Instance::Lock lock_to_load(const Instance &inst, const Check &check)
{
	bool checked = false;
	if (!inst.loaded()) {
		check();
		checked = true;
	}
	auto lock = inst.lock(true, true);
	if (!checked && !inst.loaded())
		check();
	return lock;
}

void setup_rule_add(CLI::App &cmd, Args &a) { add_rule_options(&cmd, a.rule); }

int run_rule_add(Instance &inst, const CLI::App &cmd, Args &a)
{
	RuleSpec spec = to_spec(a.rule, cmd.count("--per") > 0);
	auto lock = lock_to_load(inst, [&] {
		Transaction::check_adds_on_empty({spec}, {}, false, TableSizes{}.rule_room());
	});
	inst.load({}); // rules may come before the first attach
	MapSet maps = inst.maps();
	InstalledRule r = Transaction(maps).add(spec).commit().added.front();
	print_table(RULE_HEADER, {rule_cells(r)});
	return 0;
}

void setup_rule_import(CLI::App &cmd, Args &a)
{
	cmd.add_option("FILE", a.import_path, "One `rule add` argument list per line; - for stdin")->required();
}

int run_rule_import(Instance &inst, const CLI::App &, Args &a)
{
	std::vector<std::string> where;
	std::vector<RuleSpec> specs = read_rule_file(a.import_path, where);
	auto lock = lock_to_load(inst, [&] {
		Transaction::check_adds_on_empty(specs, where, true, TableSizes{}.rule_room());
	});
	inst.load({});
	MapSet maps = inst.maps();
	size_t asked = specs.size();
	Transaction txn(maps);
	for (size_t i = 0; i < specs.size(); i++)
		txn.import(std::move(specs[i]), i < where.size() ? where[i] : "");
	auto added = txn.commit().added;
	std::cout << "imported " << plural(added.size(), "rule", "rules");
	if (added.size() == 1)
		std::cout << " (id " << added.front().id << ")";
	else if (!added.empty())
		std::cout << " (ids " << added.front().id << "-" << added.back().id << ")";
	if (added.size() < asked)
		std::cout << "; " << asked - added.size() << (asked - added.size() == 1 ? " was" : " were")
			  << " present already";
	std::cout << "\n";
	return 0;
}

void setup_rule_key(CLI::App &cmd, Args &a) { cmd.add_option("NAME|ID", a.key, "Rule name or id")->required(); }

int run_rule_del(Instance &inst, const CLI::App &, Args &a)
{
	auto lock = inst.lock(true);
	MapSet maps = inst.maps();
	InstalledRule r = Transaction(maps).remove(a.key).commit().removed.front();
	std::cout << "deleted rule " << r.id << " (" << r.spec.name << ")\n";
	return 0;
}

void setup_rule_set(CLI::App &cmd, Args &a)
{
	setup_rule_key(cmd, a);
	add_edit_options(&cmd, a.edit);
}

int run_rule_set(Instance &inst, const CLI::App &cmd, Args &a)
{
	auto lock = inst.lock(true);
	MapSet maps = inst.maps();
	RuleTable table(maps);
	InstalledRule was = table.find(a.key);
	RuleEdit edit = to_edit(a.edit, cmd, was.spec.rate.counts_bytes());
	InstalledRule r = Transaction(table).edit(a.key, edit).commit().changed.front();
	print_table(RULE_HEADER, {rule_cells(r)});
	if (bucket_id(r) != bucket_id(was))
		std::cout << "its buckets restart: " << bucket_change_reason(bucket_change(was.spec, r.spec)) << "\n";
	return 0;
}

void setup_nothing(CLI::App &, Args &) {}

int run_rule_flush(Instance &inst, const CLI::App &, Args &)
{
	auto lock = inst.lock(true);
	MapSet maps = inst.maps();
	size_t n = Transaction(maps).flush().commit().removed.size();
	std::cout << "deleted " << plural(n, "rule", "rules") << "\n";
	return 0;
}

int run_rule_list(Instance &inst, const CLI::App &, Args &a)
{
	cmd_rule_list(inst, a.json);
	return 0;
}

const std::vector<Command> RULE_COMMANDS = {
	{"add", "Add a rule; it applies at once", setup_rule_add, run_rule_add},
	{"import", "Add many rules at once, all or none", setup_rule_import, run_rule_import},
	{"del", "Delete a rule with its buckets", setup_rule_key, run_rule_del},
	{"set", "Change a rule in place: same id, counters and (mostly) buckets", setup_rule_set, run_rule_set},
	{"flush", "Delete every rule", setup_nothing, run_rule_flush},
	{"list", "List rules in match order", setup_json, run_rule_list},
};

// `set`: the handlers live in set_cli.cpp.
const std::vector<Command> SET_COMMANDS = {
	{"add", "Add prefixes to an address set (made if new); rules on it change at once",
	 [](CLI::App &cmd, Args &a) { setup_set_add(cmd, a.set); },
	 [](Instance &inst, const CLI::App &, Args &a) { return run_set_add(inst, a.set); }},
	{"del", "Remove prefixes from a set, or delete a set no rule uses",
	 [](CLI::App &cmd, Args &a) { setup_set_del(cmd, a.set); },
	 [](Instance &inst, const CLI::App &, Args &a) { return run_set_del(inst, a.set); }},
	{"list", "List sets: family, size and the rules using each",
	 [](CLI::App &cmd, Args &a) { setup_set_list(cmd, a.set); },
	 [](Instance &inst, const CLI::App &, Args &a) { return run_set_list(inst, a.set); }},
	{"show", "Print a set's prefixes, one a line",
	 [](CLI::App &cmd, Args &a) { setup_set_show(cmd, a.set); },
	 [](Instance &inst, const CLI::App &, Args &a) { return run_set_show(inst, a.set); }},
	{"load", "Replace a set with a file's prefixes, atomically (build, then switch)",
	 [](CLI::App &cmd, Args &a) { setup_set_load(cmd, a.set); },
	 [](Instance &inst, const CLI::App &, Args &a) { return run_set_load(inst, a.set); }},
};

void setup_apply(CLI::App &cmd, Args &a)
{
	cmd.add_option("FILE", a.policy_path, "YAML policy (see sluice(8)); - for stdin")->required();
	auto *check_flag = cmd.add_flag("--check", a.check_only, "Validate the file against this host; change nothing");
	cmd.add_flag("--diff", a.diff_only, "Print what would change; change nothing")->excludes(check_flag);
	cmd.add_flag("--allow-empty", a.apply.allow_empty,
		     "Take a policy with no rules and no interfaces (it removes every rule and detaches everywhere)");
}

int run_apply(Instance &inst, const CLI::App &, Args &a)
{
	PolicyText file = read_policy_text(a.policy_path);
	// An apply that will load the program begins loading it now, beside
	// the parsing; one that fails leaves nothing.
	ProgramPreload preload;
	if (!a.check_only && !a.diff_only)
		preload = ProgramPreload(inst, file.text);
	Policy p = parse_policy_text(file);
	if (a.check_only || a.diff_only) {
		auto lock = inst.lock(false);
		ApplyPlan plan = plan_apply(inst, p, a.apply);
		if (a.diff_only)
			std::cout << plan.format();
		else
			std::cout << a.policy_path << ": ok (" << plural(p.rules.size(), "rule", "rules") << ", "
				  << plural(p.interfaces.size(), "interface", "interfaces") << ")\n";
	} else {
		auto lock = inst.lock(true, true);
		ApplyPlan plan = apply_policy(inst, p, std::move(preload), a.apply);
		std::cout << (plan.empty() ? "no changes\n" : plan.format());
	}
	return 0;
}

int run_export(Instance &inst, const CLI::App &, Args &)
{
	auto lock = inst.lock(false);
	std::cout << write_policy(export_policy(inst));
	return 0;
}

int run_upgrade(Instance &inst, const CLI::App &, Args &)
{
	auto lock = inst.lock(true);
	auto restarted = inst.upgrade();
	std::cout << "sluice upgraded in place: rules, counters and buckets kept";
	for (const auto &what : restarted)
		std::cout << "; " << what << " started afresh (no room in the new table)";
	std::cout << "\n";
	return 0;
}

void setup_stats(CLI::App &cmd, Args &a)
{
	cmd.add_option("--top", a.query.top, "Show the N sources with most drops")->check(count_check());
	cmd.add_option("--rule", a.query.rule, "Only this rule's lines");
	cmd.add_option("--source", a.stats_source, "Only the buckets of this address or prefix");
	cmd.add_flag("--reset", a.stats_reset,
		     "Print the counters, then zero them (all, --rule's, or --source's); buckets are kept");
	setup_json(cmd, a);
}

int run_stats(Instance &inst, const CLI::App &, Args &a)
{
	cmd_stats(inst, a.query, a.json, a.stats_reset, a.stats_source);
	return 0;
}

void setup_release(CLI::App &cmd, Args &a)
{
	cmd.add_option("ADDR", a.release_source, "Source address or prefix")->required();
	cmd.add_option("--rule", a.release_rule, "Only this rule's bucket");
}

int run_release(Instance &inst, const CLI::App &, Args &a)
{
	cmd_release(inst, a.release_source, a.release_rule);
	return 0;
}

int run_bans(Instance &inst, const CLI::App &, Args &a)
{
	cmd_bans(inst, a.json);
	return 0;
}

void setup_ban_del(CLI::App &cmd, Args &a)
{
	cmd.add_option("ADDR", a.ban_addr, "Banned address or prefix")->required();
}

int run_ban_del(Instance &inst, const CLI::App &, Args &a)
{
	cmd_ban_del(inst, a.ban_addr);
	return 0;
}

const std::vector<Command> BAN_COMMANDS = {
	{"del", "Lift the ban covering an address (exit 1 if none)", setup_ban_del, run_ban_del},
};

void setup_events(CLI::App &cmd, Args &a)
{
	cmd.add_flag("--json", a.json, "One JSON object per line");
	cmd.add_option("--count", a.event_count, "Exit after N events")->check(positive_count_check());
	cmd.add_option("--timeout", a.event_timeout, "Exit after this long (e.g. 30s, 2min)");
	cmd.add_option("--socket", a.events_from,
		       "Follow the agent serving this socket (default " + a.events_from +
			       "; without an agent there, the ring buffer is read)");
}

int run_events(Instance &inst, const CLI::App &cmd, Args &a)
{
	uint64_t timeout_ns = a.event_timeout.empty() ? 0 : parse_duration_ns(a.event_timeout, "--timeout");
	cmd_events(inst, a.json, a.event_count, timeout_ns, a.events_from, cmd.count("--socket") > 0);
	return 0;
}

void setup_top(CLI::App &cmd, Args &a)
{
	cmd.add_option("--interval", a.interval_text, "Seconds between refreshes (1, 0.5, 500ms, 2s; default 1)");
	cmd.add_flag("--once", a.top.once, "Print one report of rates over one interval and exit");
	cmd.add_option("--top", a.top.top, "Show at most N sources (default: as many as fit)")->check(count_check());
	cmd.add_option("--sort", a.sort_text, "name, pass-pps, pass-bps, drop-pps (default) or drop-bps");
}

int run_top_command(Instance &inst, const CLI::App &, Args &a)
{
	a.top.interval_ns = parse_interval_ns(a.interval_text);
	a.top.key = parse_rate_key(a.sort_text);
	return run_top(inst, a.top);
}

void setup_explain(CLI::App &cmd, Args &a)
{
	cmd.add_option("SRC", a.explain_src, "Source address")->required();
	cmd.add_option("--proto", a.explain_proto, "tcp, udp, icmp or a protocol number (default: unknown)");
	cmd.add_option("--dport", a.explain_dport, "Destination port (with --proto tcp or udp; default: unknown)");
	cmd.add_option("--sport", a.explain_sport, "Source port (with --proto tcp or udp; default: unknown)");
	auto *syn = cmd.add_flag("--syn", a.explain_syn, "A connection attempt: TCP flags syn alone (--tcp-flags syn)");
	cmd.add_option("--tcp-flags", a.explain_flags,
		       "The packet's TCP flags: names joined by commas, e.g. syn,ack, or none (default: unknown)")
		->excludes(syn);
	cmd.add_option("--bytes", a.explain_bytes, "IP length charged to byte rates (default 1500)");
	setup_json(cmd, a);
}

int run_explain(Instance &inst, const CLI::App &, Args &a)
{
	ExplainPacket pkt = make_explain_packet(a.explain_src, a.explain_proto, a.explain_dport, a.explain_bytes);
	add_explain_l4(pkt, a.explain_sport, a.explain_syn ? std::string("syn") : a.explain_flags);
	cmd_explain(inst, pkt, a.json);
	return 0;
}

void setup_agent(CLI::App &cmd, Args &a)
{
	cmd.add_option("--metrics", a.metrics_text, "ADDR:PORT to serve /metrics on (default " + a.metrics_text + ")");
	cmd.add_option("--events-socket", a.events_socket,
		       "Where `sluice events` follows the agent's events (default " + a.events_socket + ")");
	add_cluster_options(&cmd, a.cluster);
	cmd.add_option("--top-sources", a.top_sources,
		       "Per-source series for the N sources with most drops (default " +
			       std::to_string(agent::DEFAULT_TOP_SOURCES) + ", at most " +
			       std::to_string(agent::MAX_TOP_SOURCES) + ")")
		->check(count_check(agent::MAX_TOP_SOURCES));
}

int run_agent(Instance &inst, const CLI::App &cmd, Args &a)
{
	// The default socket follows $SLUICE_RUN_DIR, which --run-dir set.
	if (!cmd.count("--events-socket"))
		a.events_socket = default_events_socket();
	agent::MetricsOptions options;
	options.listen = agent::parse_listen_address(a.metrics_text);
	if (a.top_sources > agent::MAX_TOP_SOURCES)
		throw Error("--top-sources: at most " + std::to_string(agent::MAX_TOP_SOURCES) +
			    " (each source adds series), not " + std::to_string(a.top_sources));
	options.top_sources = a.top_sources;
	options.pin_dir = inst.pin_dir();
	std::unique_ptr<cluster::ClusterSync> sync;
	if (wants_cluster(a.cluster)) {
		sync = std::make_unique<cluster::ClusterSync>(to_sync_options(a.cluster, inst.pin_dir()));
		options.extra = [s = sync.get()] { return cluster::sync_metric_families(s->figures()); };
	}
	inst.make_run_dir();
	agent::Agent agent;
	agent.add(std::make_unique<agent::MetricsExporter>(options));
	agent.add(std::make_unique<agent::EventLog>(inst.pin_dir(), a.events_socket));
	if (sync)
		agent.add(std::move(sync));
	int sig = agent.run();
	agent::log_line(std::string("stopped") + (sig ? std::string(" by ") + strsignal(sig) : ""));
	return 0;
}

/// The subcommands, in --help's order.
const std::vector<Command> COMMANDS = {
	{"attach", "Attach to an interface (loads on first use)", setup_attach, run_attach},
	{"detach", "Detach from an interface (the rules stay loaded); --all detaches everywhere and unloads",
	 setup_detach, run_detach},
	{"status", "Show where sluice is attached and its tables", setup_json, run_status},
	{"rule", "Manage rules", setup_nothing, nullptr, &RULE_COMMANDS},
	{"set", "Manage address sets (named prefix lists a rule takes as @NAME)", setup_nothing, nullptr,
	 &SET_COMMANDS},
	{"apply", "Make the running state equal to a policy file, in one transaction", setup_apply, run_apply},
	{"export", "Print the running state as a policy file", setup_nothing, run_export},
	{"upgrade", "Replace the loaded program with this binary's, keeping rules, buckets and counters", setup_nothing,
	 run_upgrade},
	{"stats", "Per-source, per-rule and global counters", setup_stats, run_stats},
	{"release", "Refill a throttled source's buckets so that it passes its burst again at once", setup_release,
	 run_release},
	{"bans", "List the sources under a temporary ban (rules with --ban)", setup_json, run_bans},
	{"ban", "Manage temporary bans", setup_nothing, nullptr, &BAN_COMMANDS},
	{"events", "Follow throttle events: a rule starts or stops dropping a source", setup_events, run_events},
	{"top", "Live pass and drop rates per rule and per source; q quits", setup_top, run_top_command},
	{"explain", "Which rule would decide a packet, and its bucket's state; sends nothing, changes nothing",
	 setup_explain, run_explain},
	{"agent", "Serve Prometheus metrics read from the pinned state (optional; enforcement never needs it)",
	 setup_agent, run_agent},
};

/// The options before the subcommand.
void setup_global(CLI::App &app, Args &a)
{
	// At most one subcommand; none is refused after parsing, so that an
	// unknown option is named as such rather than reported as a missing
	// subcommand.
	app.require_subcommand(0, 1);
	app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION + " (state ABI " +
					       std::to_string(SLUICE_ABI_VERSION) + ", commit " + SLUICE_COMMIT + ")");
	app.add_flag("-v,--verbose", a.verbose, "Show libbpf's messages (verifier log included)");
	app.add_option("--pin-dir", a.pin_dir,
		       "The instance's state in bpffs (default $SLUICE_PIN_DIR, else " SLUICE_PIN_DIR ")");
	app.add_option("--run-dir", a.run_dir,
		       "The instance's agent socket and status files (default $SLUICE_RUN_DIR, else derived from "
		       "the pin directory: /run/sluice for " SLUICE_PIN_DIR ", /run/sluice-NAME for /sys/fs/bpf/NAME)");
}

/// Adds `table`'s subcommands to `parent`.
void add_commands(CLI::App &parent, const std::vector<Command> &table, Args &a)
{
	for (const Command &c : table) {
		CLI::App *cmd = parent.add_subcommand(c.name, c.help);
		c.setup(*cmd, a);
		if (c.subcommands) {
			cmd->require_subcommand(0, 1);
			add_commands(*cmd, *c.subcommands, a);
		}
	}
}

/// The row `parent`'s parsed subcommand stands for, and that subcommand.
std::pair<const Command *, const CLI::App *> chosen(const CLI::App &parent, const std::vector<Command> &table)
{
	for (const Command &c : table)
		if (const CLI::App *cmd = parent.get_subcommand(c.name); cmd->parsed())
			return {&c, cmd};
	return {nullptr, nullptr};
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{"sluice: per-source rate limiting in XDP"};
	Args a;
	setup_global(app, a);
	add_commands(app, COMMANDS, a);
	try {
		app.parse(argc, argv);
	} catch (const CLI::CallForHelp &e) {
		return app.exit(e);
	} catch (const CLI::CallForAllHelp &e) {
		return app.exit(e);
	} catch (const CLI::CallForVersion &e) {
		return app.exit(e);
	} catch (const CLI::ParseError &e) {
		// CLI11 checks requirements (an argument, an option another needs)
		// before it reports what it could not place: an unknown option
		// beside a missing argument is named first.
		auto extras = app.remaining(true);
		bool missing = dynamic_cast<const CLI::RequiredError *>(&e) || dynamic_cast<const CLI::RequiresError *>(&e);
		std::cerr << "sluice: " << (missing && !extras.empty() ? CLI::ExtrasError(extras).what() : e.what()) << "\n";
		return 2;
	}
	auto [command, cmd] = chosen(app, COMMANDS);
	if (!command) {
		std::cerr << "sluice: a subcommand is required (attach, detach, status, rule, set, stats, release, bans, ban, "
			     "top, events, explain, apply, export, upgrade, agent); see --help\n";
		return 2;
	}
	if (const Command *parent = command; command->subcommands) {
		std::tie(command, cmd) = chosen(*cmd, *command->subcommands);
		if (!command) {
			std::string names;
			for (const Command &c : *parent->subcommands)
				names += (names.empty() ? "" : ", ") + std::string(c.name);
			std::cerr << "sluice: " << parent->name << " needs a subcommand (" << names << "); see "
				  << parent->name << " --help\n";
			return 2;
		}
	}

	set_libbpf_verbose(a.verbose);
	// The options stand for the variables, which every default the library
	// computes reads (the run directory, the events socket, the status file).
	if (!a.pin_dir.empty())
		setenv("SLUICE_PIN_DIR", a.pin_dir.c_str(), 1);
	if (!a.run_dir.empty())
		setenv("SLUICE_RUN_DIR", a.run_dir.c_str(), 1);
	try {
		Instance inst;
		inst.check_dirs(); // every command, before it reads or writes anything
		return command->run(inst, *cmd, a);
	} catch (const std::exception &e) {
		std::cerr << "sluice: " << e.what() << "\n";
		return 1;
	}
}
