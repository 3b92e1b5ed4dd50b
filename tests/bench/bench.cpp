// SPDX-License-Identifier: GPL-2.0-only
// sluice-bench: the figures behind Sluice's performance claims, measured in
// one run on one machine, every headline a ratio against a baseline taken in
// the same run. Prints Markdown tables.
//   1. per-packet cost of the real program (BPF_PROG_TEST_RUN, one pinned CPU,
//      median of 5 interleaved runs) next to XDP_DROP and parse-only baselines;
//   2. the peers: frames injected with BPF_F_TEST_XDP_LIVE_FRAMES into a veth in
//      a namespace, through Sluice, an nftables dynamic-set meter and iptables
//      hashlimit, with the share each one dropped read from its own counters;
//   3. kernel memory per tracked source (slab, vmalloc and per-CPU growth);
//   4. control plane: importing 10,000 rules, reading 1,000,000 sources' stats;
//   5. what a flood of spoofed sources sending k packets each costs limited
//      sources (the test-clock program, one packet per BPF_PROG_TEST_RUN);
//   6. one TCP flow through a byte limit (iperf3 over veth): the share of the
//      rate it gets with the default burst, and with a burst of 100 ms.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <linux/bpf.h>
#include <pthread.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <atomic>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "baselines_bpf.skel.h"
#include "bench_timing.h"
#include "child.h"
#include "datapath.h"
#include "packet.h"
#include "process.h"
#include "replay.h"
#include "rule_table.h"
#include "sets.h"
#include "transaction.h"
#include "sluice_bench_bpf.skel.h"
#include "sources.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int BENCH_CPU = 1;
const std::string NETNS = "sluice-bench", DEV = "bench0", PEER = "bench1";
const std::string PIN_DIR = "/sys/fs/bpf/sluice-bench";

struct Options {
	uint32_t repeat = 10000000; // per test run, section 1
	uint32_t live_repeat = 2000000; // per test run, section 2
	int rounds = 5;
	bool quick = false;
	std::string rows; // --rows: only the rows of sections 1 and 2 whose name holds this
	bool hold = false; // --hold: set up the first such row of section 1, and hold it for --side-by-side
	std::set<int> sections = {1, 2, 3, 4, 5, 6};

	/// Whether a row of sections 1 or 2 is measured in this run.
	bool wanted(const std::string &row) const { return rows.empty() || row.find(rows) != std::string::npos; }
};

std::string fixed(double v, int digits)
{
	char buf[64];
	std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
	return buf;
}

/// A ratio as a signed percentage: 1.039 -> "+3.9 %".
std::string percent(double ratio)
{
	char buf[64];
	std::snprintf(buf, sizeof(buf), "%+.1f %%", (ratio - 1) * 100);
	return buf;
}

std::string fixed_hex(uint8_t b)
{
	char buf[3];
	std::snprintf(buf, sizeof(buf), "%02x", b);
	return buf;
}

/// Points an object's source generator at `count` sources (0: leave frames alone).
void set_generator(struct bpf_object *obj, uint32_t count, bool sequential = false)
{
	struct bpf_map *m = bpf_object__find_map_by_name(obj, "bench_gen");
	if (!m)
		throw Error("no source generator in this object");
	struct Gen {
		__u64 state;
		__u32 count, sequential;
	};
	std::vector<Gen> per_cpu(possible_cpus());
	for (size_t i = 0; i < per_cpu.size(); i++)
		per_cpu[i] = {sequential ? 0 : 0x9e3779b97f4a7c15ULL * (i + 1), count, sequential};
	uint32_t zero = 0;
	map_update(bpf_map__fd(m), &zero, per_cpu.data(), "source generator");
}

/// A program under measurement, and what to do before each of its runs.
struct Subject {
	std::string name;
	int fd;
	std::vector<uint8_t> frame;
	std::function<void()> before = [] {};
	std::vector<double> samples;
};

/// --hold: the row's Sluice program, set up, stays loaded; its id and the
/// row's frame go to stderr as one line, "held PROG_ID FRAME_HEX", for
/// --side-by-side to run it; the process then waits for a signal.
[[noreturn]] void hold(const std::vector<Subject> &subjects)
{
	for (const auto &s : subjects) {
		if (s.name != "sluice")
			continue;
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);
		if (bpf_obj_get_info_by_fd(s.fd, &info, &len))
			throw_errno("cannot read the held program's id", errno);
		std::string hex;
		for (uint8_t b : s.frame)
			hex += fixed_hex(b);
		std::cerr << "held " << info.id << " " << hex << std::endl;
		for (;;)
			pause();
	}
	throw Error("--hold: this row measures no single Sluice program");
}

/// Runs every subject `rounds` times, interleaved, and keeps the medians
/// (with --hold, holds the row instead).
void measure(std::vector<Subject> &subjects, const Options &o)
{
	if (o.hold)
		hold(subjects);
	for (int r = 0; r < o.rounds; r++)
		for (auto &s : subjects) {
			s.before();
			s.samples.push_back(test_run_ns(s.fd, s.frame, o.repeat));
		}
}

double med(const std::vector<Subject> &subjects, const std::string &name)
{
	for (const auto &s : subjects)
		if (s.name == name)
			return median(s.samples);
	throw Error("no subject " + name);
}

/// The production or bench program with one limit rule, tables sized for the run.
struct Loaded {
	std::unique_ptr<LoadedProgram> prog;
	MapSet maps;

	Loaded(ObjectImage image, uint32_t max_sources, uint32_t max_rules = 1024)
	{
		prog = std::make_unique<LoadedProgram>(TableSizes{max_sources, max_rules, 1024}, image);
		maps = prog->maps();
	}
	void add(const char *cidr, const char *rate, uint64_t burst = 0, Action action = Action::limit)
	{
		RuleSpec r;
		r.cidr = parse_cidr(cidr);
		r.action = action;
		if (action == Action::limit) {
			r.rate = parse_rate(rate);
			r.burst = burst;
		}
		RuleTable(maps).add(r);
	}
};

bool rule_reads_coarse_clock(const MapSet &maps)
{
	RuleTable table(maps);
	for (const auto &r : table.list()) {
		if (table.datapath_rule(r.slot).flags & SLUICE_RULE_COARSE_CLOCK)
			return true;
	}
	return false;
}

ObjectImage bench_image()
{
	ObjectImage img;
	img.data = sluice_bench_bpf__elf_bytes(&img.size);
	return img;
}

/// A many-source row of section 1: `sources` random sources of `family`.
struct Many {
	std::string name;
	int family;
	uint32_t sources;
};

void section_per_packet(const Options &o, struct baselines_bpf *base)
{
	std::cout << "\n## 1. Per-packet cost through BPF_PROG_TEST_RUN\n\n"
		  << o.repeat << " repeats per run, median of " << o.rounds
		  << " interleaved runs, pinned to CPU " << BENCH_CPU << ". Rules: one limit rule of 1000/s "
		  << "(so a flooding source is mostly dropped). Many-source scenarios rewrite each frame's "
		  << "source first; their baseline is that generator followed by XDP_DROP.\n\n";
	std::cout << "| scenario | baseline | baseline ns | Sluice ns | Sluice − baseline | Sluice / baseline |\n"
		  << "| --- | --- | ---: | ---: | ---: | ---: |\n";
	int drop = bpf_program__fd(base->progs.bench_xdp_drop);
	int parse = bpf_program__fd(base->progs.bench_parse_only);
	int clock = bpf_program__fd(base->progs.bench_clock_drop);
	int coarse = bpf_program__fd(base->progs.bench_coarse_clock_drop);
	int gen_drop = bpf_program__fd(base->progs.bench_gen_drop);
	auto row = [](const std::string &scenario, const std::string &base_name, double b, double s) {
		std::cout << "| " << scenario << " | " << base_name << " | " << fixed(b, 1) << " | " << fixed(s, 1)
			  << " | " << fixed(s - b, 1) << " | " << fixed(s / b, 2) << "x |\n";
	};

	// Sluice's and the baseline's ns of the rows the closing ratios read, by row name.
	std::map<std::string, std::pair<double, double>> measured;

	// Many sources, each row with a table of 1M buckets.
	auto many_rows = [&](const std::vector<Many> &rows) {
		for (const auto &m : rows) {
			if (!o.wanted(m.name))
				continue;
			Loaded sl(bench_image(), 1000000);
			sl.add(m.family == 4 ? "10.0.0.0/8" : "2001:db8::/32", "1000/s");
			auto frame = build_packet({.src = m.family == 4 ? "10.0.0.1" : "2001:db8::1"});
			set_generator(sl.prog->object(), m.sources);
			set_generator(base->obj, m.sources);
			test_run_ns(sl.prog->prog_fd(), frame, 3 * m.sources); // fill the table first
			std::vector<Subject> s = {{"gen_drop", gen_drop, frame}, {"sluice", sl.prog->prog_fd(), frame}};
			measure(s, o);
			Stats st = collect_stats(sl.maps, {1, ""});
			row(m.name, "generator + XDP_DROP", med(s, "gen_drop"), med(s, "sluice"));
			measured[m.name] = {med(s, "sluice"), med(s, "gen_drop")};
			std::cout << "|  | (" << st.tracked_sources << " buckets tracked; "
				  << st.global[SLUICE_CNT_INFO_NEW_BUCKET].packets << " created, "
				  << st.global[SLUICE_CNT_INFO_EVICTED].packets << " evicting another) | | | | |\n";
		}
	};
	// Hot source, IPv4 and IPv6.
	for (int family : {4, 6}) {
		std::string sc = std::string("one hot source, IPv") + (family == 4 ? "4" : "6");
		if (!o.wanted(sc))
			continue;
		Loaded sl(production_object(), 65536);
		sl.add(family == 4 ? "192.0.2.0/24" : "2001:db8::/32", "1000/s");
		auto frame = build_packet({.src = family == 4 ? "192.0.2.10" : "2001:db8::10"});
		std::vector<Subject> s = {{"drop", drop, frame},
					  {"parse", parse, frame},
					  {"clock", clock, frame},
					  {"coarse", coarse, frame},
					  {"sluice", sl.prog->prog_fd(), frame}};
		set_generator(base->obj, 0);
		measure(s, o);
		row(sc, "XDP_DROP", med(s, "drop"), med(s, "sluice"));
		row(sc, "parse-only", med(s, "parse"), med(s, "sluice"));
		if (family == 4)
			std::cout << "|  | (reading a clock alone, over XDP_DROP: precise "
				  << fixed(med(s, "clock") - med(s, "drop"), 1) << " ns, coarse "
				  << fixed(med(s, "coarse") - med(s, "drop"), 1) << " ns; this rule reads the "
				  << (rule_reads_coarse_clock(sl.maps) ? "coarse" : "precise") << " one) | | | | |\n";
	}

	// A --syn rule against a plain TCP rule, one hot source sending SYNs:
	// over the limit (both rules' drops repeat from the drop memo, the --syn
	// rule's tagged with the flags under its mask) and under it (both decided
	// on the fast path: the flag match alone). A difference this small is
	// within what the place the kernel loads a program's code at moves its
	// time (scripts/bench-hot.sh), so each program is loaded SYN_LOADS times,
	// every load measured in the same interleaved rounds: the median over
	// the loads of each load's median.
	constexpr int SYN_LOADS = 3;
	for (const char *rate : {"1000/s", "1000000000/s"}) {
		bool over = std::string(rate) == "1000/s";
		std::string sc = std::string("one hot source's SYNs, --syn rule, ") +
				 (over ? "over its limit" : "under its limit");
		if (!o.wanted(sc))
			continue;
		auto loaded = [&](bool syn) {
			auto sl = std::make_unique<Loaded>(production_object(), 65536);
			RuleSpec r;
			r.cidr = parse_cidr("192.0.2.0/24");
			r.rate = parse_rate(rate);
			r.burst = over ? 0 : 100000000;
			r.proto = Proto::tcp;
			if (syn)
				r.tcp_flags = SYN_ONLY;
			RuleTable(sl->maps).add(r);
			return sl;
		};
		auto frame = build_packet({.src = "192.0.2.10", .proto = 6, .dport = 22, .tcp_flags = 0x02});
		std::vector<std::unique_ptr<Loaded>> programs;
		std::vector<Subject> s;
		for (int i = 0; i < SYN_LOADS; i++)
			for (bool syn : {false, true}) {
				programs.push_back(loaded(syn));
				s.push_back({(syn ? "syn" : "plain") + std::to_string(i), programs.back()->prog->prog_fd(),
					     frame});
			}
		measure(s, o);
		auto over_loads = [&](const std::string &name) {
			std::vector<double> v;
			for (int i = 0; i < SYN_LOADS; i++)
				v.push_back(med(s, name + std::to_string(i)));
			return median(v);
		};
		row(sc, "--proto tcp rule", over_loads("plain"), over_loads("syn"));
	}

	// One source flooded from both CPUs at once (two pinned threads), as a
	// multi-queue NIC spreads a flood: each CPU's ns per packet against one CPU
	// alone. Over the limit (1000/s: nearly every packet dropped) and under it
	// (10^9/s: every packet passes, so every packet writes the bucket).
	for (const char *rate : {"1000/s", "1000000000/s"}) {
		std::string sc = std::string("one source from two CPUs at once, ") +
				 (std::string(rate) == "1000/s" ? "over its limit" : "under its limit");
		if (!o.wanted(sc))
			continue;
		Loaded sl(production_object(), 65536);
		sl.add("192.0.2.0/24", rate, std::string(rate) == "1000/s" ? 0 : 100000000);
		auto frame = build_packet({.src = "192.0.2.10"});
		std::vector<double> alone, cpu0, cpu1;
		for (int r = 0; r < o.rounds; r++) {
			alone.push_back(test_run_ns(sl.prog->prog_fd(), frame, o.repeat));
			double t[2] = {0, 0};
			run_on_two_cpus([&](int cpu) { t[cpu] = test_run_ns(sl.prog->prog_fd(), frame, o.repeat); });
			cpu0.push_back(t[0]);
			cpu1.push_back(t[1]);
		}
		Stats st = collect_stats(sl.maps, {});
		double one = median(alone), c0 = median(cpu0), c1 = median(cpu1);
		std::cout << "| " << sc << ", CPU 0 / CPU 1 | one CPU alone | " << fixed(one, 1) << " | "
			  << fixed(c0, 1) << " / " << fixed(c1, 1) << " | " << fixed(c0 - one, 1) << " / "
			  << fixed(c1 - one, 1) << " | " << fixed(c0 / one, 2) << "x / " << fixed(c1 / one, 2)
			  << "x |\n";
		std::cout << "|  | (" << st.global[SLUICE_CNT_PASS_LIMIT].packets << " passed, "
			  << st.global[SLUICE_CNT_DROP_RATE].packets << " dropped, "
			  << st.global[SLUICE_CNT_PASS_CONTENTION].packets << " forced passes) | | | | |\n";
	}
	pin_to_cpu(BENCH_CPU);

	// Many sources: a table of 1M with all present, and one 4x oversubscribed.
	const std::vector<Many> many = {{"random of 1M present sources, IPv4", 4, 1000000},
					{"random of 1M present sources, IPv6", 6, 1000000},
					{"random of 4M sources, table of 1M (insert + evict), IPv4", 4, 4000000},
					{"random of 256 sources over their limits, IPv4", 4, 256}};
	many_rows(many);

	// A rule lookup's two rows: sources random across 10/8, then one hot
	// source (the generator's first).
	struct Lookup {
		std::string random, hot;
		bool wanted(const Options &o) const { return o.wanted(random) || o.wanted(hot); }
	};
	auto lookup = [](const std::string &what, const char *across) {
		return Lookup{what + ", random sources across " + across, what + ", one hot source"};
	};
	auto lookup_rows = [&](Loaded &sl, const Lookup &rows) {
		auto frame = build_packet({.src = "10.0.0.1"});
		for (uint32_t sources : {1u << 24, 1u}) {
			const std::string &name = sources == 1 ? rows.hot : rows.random;
			if (!o.wanted(name))
				continue;
			set_generator(sl.prog->object(), sources);
			set_generator(base->obj, sources);
			std::vector<Subject> s = {{"gen_drop", gen_drop, frame}, {"sluice", sl.prog->prog_fd(), frame}};
			measure(s, o);
			measured[name] = {med(s, "sluice"), med(s, "gen_drop")};
			row(name, "generator + XDP_DROP", med(s, "gen_drop"), med(s, "sluice"));
		}
	};

	// Rule lookup: random sources over 10.0.0.0/8 against 1, 1,000 and 100,000
	// allow rules of random lengths /16-/28 inside it (no buckets: the lookup alone).
	auto rules_rows = [&](uint32_t n) { return lookup(std::to_string(n) + " CIDR rule" + (n > 1 ? "s" : ""), "them"); };
	for (uint32_t n : {1u, 1000u, 100000u}) {
		if ((o.quick && n > 1000) || !rules_rows(n).wanted(o))
			continue;
		Loaded sl(bench_image(), 65536, 131072);
		std::mt19937 rng(n);
		std::vector<RuleSpec> rules;
		std::set<std::string> seen;
		while (rules.size() < n) {
			int len = 16 + static_cast<int>(rng() % 13);
			uint32_t addr = (0x0a000000 | (rng() & 0x00ffffff)) & (~0u << (32 - len));
			std::string cidr = std::to_string(addr >> 24) + "." + std::to_string((addr >> 16) & 255) + "." +
					   std::to_string((addr >> 8) & 255) + "." + std::to_string(addr & 255) + "/" +
					   std::to_string(len);
			if (!seen.insert(cidr).second)
				continue;
			RuleSpec r;
			r.cidr = parse_cidr(cidr);
			r.action = Action::allow;
			rules.push_back(r);
		}
		if (n == 1)
			rules[0].cidr = parse_cidr("10.0.0.0/8");
		RuleTable(sl.maps).add_many(rules);
		lookup_rows(sl, rules_rows(n));
	}
	// A rule on an address set of 1,000,000 host prefixes scattered over
	// 10.0.0.0/8 (allow, as the CIDR rules above: the lookup alone), against
	// one CIDR rule. The set compiles into the same tables (docs/packets.md,
	// "Address sets"); 1,000,000 /32s over 65,536 /24s take 256 blocks and
	// 65,536 bitmaps of 64 bytes, sixteen to a block (4 MiB).
	uint32_t members = o.quick ? 100000 : 1000000;
	Lookup set_rows = lookup("a rule on a set of " + std::to_string(members) + " /32s in 10/8", "it");
	if (set_rows.wanted(o)) {
		Loaded sl(bench_image(), 65536, 65536);
		std::mt19937 rng(29);
		AddressSet big{4, {}};
		std::unordered_set<uint32_t> seen;
		while (seen.size() < members)
			seen.insert(0x0a000000 | (rng() & 0x00ffffff));
		for (uint32_t a : seen) {
			Cidr c;
			c.addr = {0x0a, uint8_t(a >> 16), uint8_t(a >> 8), uint8_t(a)};
			big.prefixes.push_back(c);
		}
		normalize(big.prefixes);
		RuleSpec r;
		r.set = "big";
		r.cidr = Cidr{4, {}, 0};
		r.action = Action::allow;
		SetContents sets;
		sets.emplace("big", std::move(big));
		Transaction(sl.maps).with_sets(std::move(sets)).add(r).commit();
		lookup_rows(sl, set_rows);
	}

	// The ratios of rows to rows, where this run measured both.
	auto ratio = [&](const std::string &row, const std::string &over, bool less_baselines = false) {
		auto a = measured.at(row), b = measured.at(over);
		return fixed(less_baselines ? (a.first - a.second) / (b.first - b.second) : a.first / b.first, 2) + "x";
	};
	auto have = [&](const std::vector<std::string> &rows) {
		return std::all_of(rows.begin(), rows.end(), [&](const std::string &r) { return measured.count(r) > 0; });
	};
	if (have({many[0].name, many[1].name}))
		std::cout << "\nRandom lookups over 1M IPv6 sources cost " << ratio(many[1].name, many[0].name)
			  << " what IPv4's do per packet (" << ratio(many[1].name, many[0].name, true)
			  << " over their baselines; target: at most 1.2x).\n";
	Lookup one = rules_rows(1), many_rules = rules_rows(100000);
	if (have({one.random, one.hot, many_rules.random, many_rules.hot}))
		std::cout << "\n100,000 rules cost " << ratio(many_rules.random, one.random)
			  << " what one rule costs per packet with random sources across them, and "
			  << ratio(many_rules.hot, one.hot) << " with one hot source (target: at most 1.5x).\n";
	if (have({one.random, one.hot, set_rows.random, set_rows.hot}))
		std::cout << "\nA rule on a set of 1,000,000 prefixes costs " << ratio(set_rows.random, one.random)
			  << " what one CIDR rule costs per packet with random sources, and "
			  << ratio(set_rows.hot, one.hot) << " with one hot source (target: at most 1.5x).\n";
}

// ---- Section 2: the peers, through the kernel stack.

std::string sh(const std::string &cmd)
{
	CommandResult r = run_command({"sh", "-c", cmd});
	if (r.exit_code != 0)
		throw Error("`" + cmd + "` failed: " + r.err);
	return r.out;
}

std::string in_ns(const std::string &cmd) { return sh("ip netns exec " + NETNS + " " + cmd); }

uint64_t first_number_after(const std::string &text, const std::string &re)
{
	std::smatch m;
	if (!std::regex_search(text, m, std::regex(re)))
		throw Error("cannot find /" + re + "/ in: " + text.substr(0, 300));
	return std::stoull(m[1]);
}

struct LiveResult {
	double ns = 0;
	double dropped_share = 0;
};

/// Injects `repeat` frames as if received on DEV, through `prog_fd`; wall time per frame.
double live_run_ns(int prog_fd, const std::vector<uint8_t> &frame, uint32_t repeat, int ifindex)
{
	struct xdp_md ctx = {};
	ctx.data_end = static_cast<__u32>(frame.size());
	ctx.ingress_ifindex = static_cast<__u32>(ifindex);
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
		    .data_size_in = static_cast<__u32>(frame.size()), .ctx_in = &ctx, .ctx_size_in = sizeof(ctx));
	opts.repeat = static_cast<int>(repeat);
	opts.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
	auto t0 = std::chrono::steady_clock::now();
	if (bpf_prog_test_run_opts(prog_fd, &opts))
		throw_errno("BPF_PROG_TEST_RUN with live frames", errno);
	return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / repeat;
}

const char *NFT_RULESET = R"(table netdev sluicebench {
  set srcs {
    type ipv4_addr; size 1048576; flags dynamic,timeout; timeout 60s;
  }
  chain limiter {
    type filter hook ingress device bench0 priority 0;
    update @srcs { ip saddr limit rate over 1000/second burst 5 packets } counter drop
  }
})";

const char *NFT_DROP_ALL = R"(table netdev sluicebench {
  chain limiter {
    type filter hook ingress device bench0 priority 0;
    counter drop
  }
})";

void clear_peers()
{
	run_command({"ip", "netns", "exec", NETNS, "nft", "flush", "ruleset"});
	run_command({"ip", "netns", "exec", NETNS, "iptables-legacy", "-t", "raw", "-F"});
}

void setup_netns()
{
	run_command({"ip", "netns", "del", NETNS});
	sh("ip netns add " + NETNS);
	sh("ip -n " + NETNS + " link add " + DEV + " address 02:00:00:00:00:02 type veth peer name " + PEER);
	sh("ip -n " + NETNS + " link set " + DEV + " up");
	sh("ip -n " + NETNS + " link set " + PEER + " up");
	// No address and no forwarding: a passed frame goes through ingress and
	// PREROUTING, finds no route and is dropped. That path is common to all.
	in_ns("sysctl -qw net.ipv4.ip_forward=0");
}

void section_peers(const Options &o, struct baselines_bpf *base, int ifindex)
{
	std::cout << "\n## 2. Sluice, nftables and iptables hashlimit on the same frames\n\n"
		  << o.live_repeat << " IPv4 UDP frames per run injected with BPF_F_TEST_XDP_LIVE_FRAMES as if "
		  << "received on a veth in a namespace, one CPU, median of " << o.rounds << " interleaved runs. Limit: 1000/s, burst 5, per "
		  << "source address, in each system. Sluice drops in XDP; the others see frames an XDP "
		  << "program passed (the same source generator) in the kernel stack: nftables in a netdev "
		  << "ingress chain (`update @srcs { ip saddr limit rate over 1000/second burst 5 packets } "
		  << "drop`), hashlimit in raw PREROUTING (`iptables-legacy -m hashlimit --hashlimit-mode srcip "
		  << "--hashlimit-above 1000/sec --hashlimit-burst 5`). A frame any of them passes finds no "
		  << "route and is dropped by the stack. Each system's drop share is read from its own "
		  << "counters.\n\n";
	std::cout << "| sources | system | ns per frame | Mpps | dropped (own counters) | cost vs Sluice |\n"
		  << "| ---: | --- | ---: | ---: | ---: | ---: |\n";
	auto frame = build_packet({.src = "10.0.0.1"});
	int gen_pass = bpf_program__fd(base->progs.bench_gen_pass);
	int gen_drop = bpf_program__fd(base->progs.bench_gen_drop);
	struct OwnCost {
		uint32_t sources;
		double sluice, nft, hashlimit;
	};
	std::vector<OwnCost> own_rows;
	bool coarse = false;
	// With --rows, Sluice's rows alone: the peers are the same for two builds.
	bool peers = o.rows.empty();
	for (uint32_t sources : {1u, 256u, 1000000u}) {
		if (!o.wanted(std::to_string(sources) + (sources == 1 ? " source" : " sources")))
			continue;
		std::map<std::string, std::vector<LiveResult>> results;
		for (int round = 0; round < o.rounds; round++) {
			// Sluice: a fresh program each run, so every system starts empty.
			{
				clear_peers();
				Loaded sl(bench_image(), 1000000);
				sl.add("10.0.0.0/8", "1000/s", 5);
				set_generator(sl.prog->object(), sources);
				double ns = live_run_ns(sl.prog->prog_fd(), frame, o.live_repeat, ifindex);
				Stats st = collect_stats(sl.maps, {1, ""});
				double dropped = double(st.global[SLUICE_CNT_DROP_RATE].packets) / o.live_repeat;
				coarse = rule_reads_coarse_clock(sl.maps);
				results["Sluice (XDP)"].push_back({ns, dropped});
			}
			if (!peers)
				continue;
			set_generator(base->obj, sources);
			{
				clear_peers();
				std::ofstream("/tmp/sluice-bench.nft") << NFT_RULESET;
				in_ns("nft -f /tmp/sluice-bench.nft");
				double ns = live_run_ns(gen_pass, frame, o.live_repeat, ifindex);
				uint64_t drops = first_number_after(in_ns("nft list chain netdev sluicebench limiter"),
								    "counter packets ([0-9]+)");
				results["nftables meter"].push_back({ns, double(drops) / o.live_repeat});
			}
			{
				clear_peers();
				in_ns("iptables-legacy -t raw -A PREROUTING -i " + DEV +
				      " -m hashlimit --hashlimit-mode srcip --hashlimit-above 1000/sec "
				      "--hashlimit-burst 5 --hashlimit-name sluicebench --hashlimit-htable-size 1048576 "
				      "--hashlimit-htable-max 1048576 --hashlimit-htable-expire 60000 -j DROP");
				double ns = live_run_ns(gen_pass, frame, o.live_repeat, ifindex);
				uint64_t drops = first_number_after(in_ns("iptables-legacy -t raw -L PREROUTING -v -x -n"),
								    "\\n\\s*([0-9]+)\\s+[0-9]+\\s+DROP");
				results["iptables hashlimit"].push_back({ns, double(drops) / o.live_repeat});
			}
			{
				clear_peers();
				double ns = live_run_ns(gen_pass, frame, o.live_repeat, ifindex);
				results["(stack alone, no limiter)"].push_back({ns, 0});
			}
			// What dropping every frame costs at each system's hook, no limiter.
			results["(XDP_DROP)"].push_back({live_run_ns(gen_drop, frame, o.live_repeat, ifindex), 1});
			{
				clear_peers();
				std::ofstream("/tmp/sluice-bench.nft") << NFT_DROP_ALL;
				in_ns("nft -f /tmp/sluice-bench.nft");
				results["(nftables ingress drop)"].push_back(
					{live_run_ns(gen_pass, frame, o.live_repeat, ifindex), 1});
			}
			{
				clear_peers();
				in_ns("iptables-legacy -t raw -A PREROUTING -i " + DEV + " -j DROP");
				results["(iptables raw drop)"].push_back(
					{live_run_ns(gen_pass, frame, o.live_repeat, ifindex), 1});
			}
		}
		clear_peers();
		auto mid = [](std::vector<LiveResult> v) {
			std::sort(v.begin(), v.end(), [](auto &a, auto &b) { return a.ns < b.ns; });
			return v[v.size() / 2];
		};
		double sluice_ns = mid(results["Sluice (XDP)"]).ns;
		for (const char *name : {"Sluice (XDP)", "nftables meter", "iptables hashlimit", "(stack alone, no limiter)",
					 "(XDP_DROP)", "(nftables ingress drop)", "(iptables raw drop)"}) {
			if (!results.count(name))
				continue;
			LiveResult r = mid(results[name]);
			std::cout << "| " << sources << " | " << name << " | " << fixed(r.ns, 1) << " | "
				  << fixed(1000.0 / r.ns, 2) << " | "
				  << (std::string(name)[0] == '(' ? "-" : fixed(100 * r.dropped_share, 2) + " %") << " | "
				  << fixed(r.ns / sluice_ns, 2) << "x |\n";
		}
		if (!peers)
			continue;
		// A limiter's own cost: its time per frame less what the same verdicts
		// cost at its hook with no limiter (drops there, passes up the stack).
		double pass_ns = mid(results["(stack alone, no limiter)"]).ns;
		auto own = [&](const char *name, const char *drop_base) {
			LiveResult r = mid(results[name]);
			double base = r.dropped_share * mid(results[drop_base]).ns + (1 - r.dropped_share) * pass_ns;
			return r.ns - base;
		};
		double s_own = own("Sluice (XDP)", "(XDP_DROP)");
		own_rows.push_back({sources, s_own, own("nftables meter", "(nftables ingress drop)"),
				    own("iptables hashlimit", "(iptables raw drop)")});
	}
	if (!peers)
		return;
	std::cout << "\n**The limiters' own cost.** Each system's ns per frame above, less what its verdicts "
		  << "cost at its hook with no limiter: the drop share times the drop-only baseline at that hook "
		  << "(XDP_DROP; an nftables ingress chain that drops; an iptables raw rule that drops), plus the "
		  << "pass share times the stack alone.\n\n"
		  << "| sources | Sluice ns | nftables ns | hashlimit ns | nftables / Sluice | hashlimit / Sluice |\n"
		  << "| ---: | ---: | ---: | ---: | ---: | ---: |\n";
	for (const auto &r : own_rows)
		std::cout << "| " << r.sources << " | " << fixed(r.sluice, 1) << " | " << fixed(r.nft, 1) << " | "
			  << fixed(r.hashlimit, 1) << " | " << fixed(r.nft / r.sluice, 2) << "x | "
			  << fixed(r.hashlimit / r.sluice, 2) << "x |\n";
	std::cout << "\nSluice's rule read the " << (coarse ? "coarse" : "precise") << " clock (a tick is "
		  << fixed(double(coarse_clock_tick_ns()) / 1e6, 1) << " ms; a burst of 5 at 1000/s holds "
		  << (coarse ? "at least" : "less than") << " a tick's worth). hashlimit counts jiffies.\n";
}

// ---- Section 3: memory per tracked source.

/// Slab + VmallocUsed + Percpu, in bytes: what the kernel holds for data
/// structures like these.
int64_t kernel_memory()
{
	std::ifstream in("/proc/meminfo");
	std::string key;
	int64_t value, total = 0;
	std::string unit;
	while (in >> key >> value) {
		if (key == "Slab:" || key == "VmallocUsed:" || key == "Percpu:")
			total += value * 1024;
		std::getline(in, unit);
	}
	return total;
}

void settle()
{
	std::ofstream("/proc/sys/vm/drop_caches") << "3";
	usleep(300000);
}

void section_memory(const Options &o, struct baselines_bpf *base, int ifindex)
{
	const uint32_t n = o.quick ? 100000 : 1000000;
	std::cout << "\n## 3. Kernel memory per tracked source\n\n"
		  << "Growth of Slab + VmallocUsed + Percpu in /proc/meminfo while " << n
		  << " distinct sources are tracked, divided by " << n << ". Sluice preallocates its table "
		  << "when it loads (the growth is measured across creating it); nftables and hashlimit "
		  << "allocate per source as frames arrive.\n\n"
		  << "| system | bytes per IPv4 source | bytes per IPv6 source |\n| --- | ---: | ---: |\n";
	// The tables exactly as the program declares them, for n sources.
	auto probe = [&](enum bpf_map_type type, uint32_t key_size, uint32_t value_size, uint32_t entries,
			 uint32_t flags) {
		settle();
		int64_t before = kernel_memory();
		LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = flags);
		int fd = bpf_map_create(type, "memprobe", key_size, value_size, entries, &opts);
		if (fd < 0)
			throw_errno("cannot create a probe table", errno);
		int64_t grown = kernel_memory() - before;
		close(fd);
		return double(grown) / n;
	};
	double v4 = probe(BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_set_v4), n / SLUICE_SET_WAYS, BPF_F_MMAPABLE);
	double v6 = probe(BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_set_v6), n / SLUICE_SET_WAYS, BPF_F_MMAPABLE);
	std::cout << "| Sluice (" << SLUICE_SET_WAYS << "-way sets of " << sizeof(struct sluice_source_state)
		  << "-byte buckets; IPv6 adds each set a line of addresses) | " << fixed(v4, 1) << " | "
		  << fixed(v6, 1) << " |\n";

	auto frame = build_packet({.src = "10.0.0.1"});
	int gen_pass = bpf_program__fd(base->progs.bench_gen_pass);
	auto peer = [&](const std::function<void()> &install) {
		clear_peers();
		settle();
		install();
		int64_t before = kernel_memory();
		set_generator(base->obj, n, true);
		live_run_ns(gen_pass, frame, n, ifindex);
		int64_t grown = kernel_memory() - before;
		return double(grown) / n;
	};
	double nft = peer([] {
		std::ofstream("/tmp/sluice-bench.nft") << NFT_RULESET;
		in_ns("nft -f /tmp/sluice-bench.nft");
	});
	std::cout << "| nftables dynamic set with limit | " << fixed(nft, 1) << " | |\n";
	double hl = peer([] {
		in_ns("iptables-legacy -t raw -A PREROUTING -i " + DEV +
		      " -m hashlimit --hashlimit-mode srcip --hashlimit-above 1000/sec --hashlimit-burst 5 "
		      "--hashlimit-name sluicebench --hashlimit-htable-size 1048576 --hashlimit-htable-max 1048576 "
		      "--hashlimit-htable-expire 60000 -j DROP");
	});
	std::cout << "| iptables hashlimit | " << fixed(hl, 1) << " | |\n";
	clear_peers();
}

// ---- Section 4: control plane, through the sluice command.

double timed(const std::vector<std::string> &argv)
{
	auto t0 = std::chrono::steady_clock::now();
	CommandResult r = run_command(argv);
	double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	if (r.exit_code != 0)
		throw Error(argv[1] + " failed: " + r.err);
	return s;
}

void section_control(const Options &o)
{
	std::cout << "\n## 4. Control plane, through the sluice command\n\n| operation | seconds |\n| --- | ---: |\n";
	setenv("SLUICE_PIN_DIR", PIN_DIR.c_str(), 1);
	run_command({SLUICE_BIN, "detach", "--all"});
	const uint32_t n = o.quick ? 100000 : 1000000;
	// Room for n buckets: two choices of four ways hold about 92 % of a full
	// table of random sources, so the table has a quarter more.
	CommandResult a = run_command({"nsenter", "--net=/run/netns/" + NETNS, SLUICE_BIN, "attach", DEV,
				       "--max-sources", std::to_string(n / 4 * 5), "--max-rules", "16384"});
	if (a.exit_code != 0)
		throw Error("attach failed: " + a.err);

	std::ofstream rules("/tmp/sluice-bench-rules");
	for (int i = 0; i < 10000; i++)
		rules << "172." << 16 + i / 256 << "." << i % 256 << ".0/24 --rate 100/s --name bulk" << i << "\n";
	rules.close();
	std::cout << "| `sluice rule import` of 10,000 rules (process start to exit) | "
		  << fixed(timed({SLUICE_BIN, "rule", "import", "/tmp/sluice-bench-rules"}), 3) << " |\n";

	// Fill the source table with n buckets of one rule, as a flood would.
	MapSet maps = MapSet::open_pinned(PIN_DIR);
	uint32_t rule_id = RuleTable(maps).find("bulk0").id;
	struct sluice_config cfg = {};
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(maps.config.get(), &zero, &cfg))
		throw_errno("cannot read the configuration", errno);
	SourceTable4 table(maps.src4.get());
	uint32_t placed = 0;
	for (uint32_t i = 0; placed < n && i < 2 * n; i++) {
		struct sluice_source_state st = {};
		st.cnt.passed_packets = i % 7;
		st.cnt.dropped_packets = i % 13;
		uint32_t addr = htonl(0xac100000 + i);
		placed += table.insert(rule_id, reinterpret_cast<const uint8_t *>(&addr), st, cfg.hash_seed);
	}
	std::cout << "| `sluice stats --top 20` over " << placed << " sources | "
		  << fixed(timed({SLUICE_BIN, "stats", "--top", "20"}), 3) << " |\n";
	std::cout << "| `sluice stats --json` of all " << placed << " sources (to /dev/null) | "
		  << fixed(timed({"sh", "-c", std::string(SLUICE_BIN) + " stats --json > /dev/null"}), 3) << " |\n";
	run_command({SLUICE_BIN, "detach", "--all"});
	rmdir(PIN_DIR.c_str());
	unlink("/tmp/sluice-bench-rules");
}

// ---- Section 5: what a flood of spoofed sources costs limited sources.

/// One limited source's passes against its bound.
struct Established {
	std::vector<uint8_t> frame;
	uint64_t first = 0, last = 0, passed = 0, sent = 0;
};

struct FloodScenario {
	const char *table;
	RuleSpec rule;
	int family;
	uint8_t proto;
	uint16_t dport;
	double established_pps; ///< each established source sends at this rate, well over its limit
};

/// A frame from `src`, whose source address can be rewritten in place.
std::vector<uint8_t> flood_frame(const FloodScenario &f, const std::string &src)
{
	return build_packet({.src = src, .proto = f.proto, .dport = f.dport});
}

/// Writes source index i into a frame built by flood_frame: 10.0.0.0 + i + 1
/// for IPv4 (the program does not check the header checksum), or
/// 2001:db8:<i>::1 (its own /64) for IPv6.
void set_spoofed_source(std::vector<uint8_t> &frame, int family, uint32_t i)
{
	uint32_t word = htonl(family == 4 ? 0x0a000000 + i + 1 : i + 1);
	std::memcpy(frame.data() + (family == 4 ? 14 + 12 : 14 + 8 + 4), &word, 4);
}

void section_spoofed(const Options &o)
{
	const uint32_t table = o.quick ? 4096 : 16384, sources = 4 * table, established = 256;
	const double flood_pps = 1e6, before_s = 6.0, after_s = 2.0;
	std::cout << "\n## 5. Spoofed floods against limited sources\n\n"
		  << established << " established sources, each sending at twice its limit for " << before_s
		  << " s (so they are limited and off probation), keep sending while " << sources
		  << " spoofed sources (4x the table of " << table << " buckets) send k packets each, back to back, "
		  << "at " << flood_pps / 1e6 << " Mpps in all, and for " << after_s
		  << " s after. The test-clock build of the program, one packet "
		  << "per BPF_PROG_TEST_RUN, the clock set by the benchmark. Extra passes: what the established "
		  << "sources passed beyond their bound (burst + rate x T, or the log's limit per window) over the "
		  << "whole run; a source that lost its bucket gets a fresh burst.\n\n"
		  << "| table | rule | k | flood packets | flood s | established passed / bound | extra passes | "
		  << "sources given a fresh burst | evicted (active) | wall s |\n"
		  << "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
	auto rule = [](const char *cidr, const char *rate, uint64_t burst, Algo algo, Proto proto, uint16_t port) {
		RuleSpec r;
		r.cidr = parse_cidr(cidr);
		r.rate = parse_rate(rate);
		r.burst = burst;
		r.algo = algo;
		r.proto = proto;
		if (port)
			r.dport = {port, port};
		validate_rule(r);
		return r;
	};
	std::vector<FloodScenario> scenarios = {
		{"IPv4", rule("10.0.0.0/8", "1/s", 5, Algo::gcra, Proto::any, 0), 4, 17, 53, 2},
		{"IPv6", rule("2001:db8::/32", "1/s", 5, Algo::gcra, Proto::any, 0), 6, 17, 53, 2},
		{"sliding log, IPv4", rule("0.0.0.0/0", "5/min", 0, Algo::sliding_log, Proto::tcp, 22), 4, 6, 22, 1},
	};
	for (const auto &f : scenarios) {
		for (int k : {1, 2, 10}) {
			auto wall0 = std::chrono::steady_clock::now();
			Replayer kernel(f.rule, TableSizes{table, 64, table});
			std::vector<Established> est(established);
			for (uint32_t j = 0; j < established; j++) {
				char src[64];
				if (f.family == 4)
					std::snprintf(src, sizeof(src), "10.200.%u.%u", j / 250, j % 250 + 1);
				else
					std::snprintf(src, sizeof(src), "2001:db8:ffff:%x::1", j + 1);
				est[j].frame = flood_frame(f, src);
			}
			const uint64_t start = TRACE_START_NS + 10000000000ULL, quantum = 10000; // 10 us
			const uint64_t gap = uint64_t(1e9 / (f.established_pps * established));
			uint64_t next_est = start, turn = 0;
			auto established_until = [&](uint64_t t) {
				for (; next_est <= t; next_est += gap, turn++) {
					Established &e = est[turn % established];
					if (!e.sent)
						e.first = next_est;
					e.last = next_est;
					e.sent++;
					e.passed += kernel.send(e.frame, next_est / quantum * quantum);
				}
			};
			established_until(start + uint64_t(before_s * 1e9));
			std::vector<uint8_t> spoof = flood_frame(f, f.family == 4 ? "10.0.0.1" : "2001:db8::1");
			uint64_t t = start + uint64_t(before_s * 1e9);
			const uint64_t flood_start = t, per_packet = uint64_t(1e9 / flood_pps);
			for (uint32_t i = 0; i < sources; i++) {
				set_spoofed_source(spoof, f.family, i);
				for (int j = 0; j < k; j++) {
					t += per_packet;
					established_until(t);
					kernel.send(spoof, t / quantum * quantum);
				}
			}
			double flood_s = double(t - flood_start) / 1e9;
			// The established sources go on: one whose bucket the flood
			// took shows it now, with a fresh burst.
			established_until(t + uint64_t(after_s * 1e9));
			uint64_t passed = 0, bound_sum = 0, extra = 0, fresh = 0;
			for (const auto &e : est) {
				double seconds = double(e.last - e.first) / 1e9;
				uint64_t bound;
				if (f.rule.has_burst()) {
					bound = f.rule.burst + uint64_t(double(f.rule.rate.amount) * seconds * 1e9 /
									 double(f.rule.rate.period_ns)) + 1;
				} else {
					uint64_t windows = uint64_t(seconds * 1e9 / double(f.rule.rate.period_ns)) + 1;
					bound = f.rule.rate.amount * windows;
				}
				passed += e.passed;
				bound_sum += bound;
				if (e.passed > bound) {
					extra += e.passed - bound;
					fresh++;
				}
			}
			Stats st = collect_stats(kernel.maps(), {1, ""});
			double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
			std::cout << "| " << f.table << " | " << format_rate(f.rule.rate)
				  << (f.rule.has_burst() ? " burst " + std::to_string(f.rule.burst) : "") << " | " << k
				  << " | " << uint64_t(sources) * k << " | " << fixed(flood_s, 3) << " | " << passed << " / "
				  << bound_sum << " | " << extra << " | " << fresh << " of " << established << " | "
				  << st.global[SLUICE_CNT_INFO_EVICTED].packets << " ("
				  << st.global[SLUICE_CNT_INFO_EVICTED_ACTIVE].packets << ") | " << fixed(wall, 1) << " |\n";
		}
	}
}

} // namespace

// ---- Section 6: one TCP flow through a byte limit.

void section_tcp(const Options &o)
{
	const std::string src_ns = "sluice-bench-ta", dst_ns = "sluice-bench-tb";
	const int seconds = o.quick ? 4 : 10, omit = 2;
	std::cout << "\n## 6. One TCP flow through a byte limit\n\n"
		  << "iperf3 (cubic) from one namespace to another over veth, sluice on the receiving veth in "
		  << "native mode, one rule limiting the sender's address; " << seconds << " s measured after "
		  << omit << " s left out (slow start and the first burst). Received is iperf3's goodput (TCP "
		  << "payload); the limit counts IP bytes, about 3.5 % more. The default burst of a byte rate "
		  << "is 500 ms of it; a burst of 100 ms of it is shown beside it.\n\n"
		  << "| rate | burst | received Mbit/s | share of the rate | retransmits |\n"
		  << "| --- | --- | ---: | ---: | ---: |\n";
	auto cleanup = [&] {
		run_command({SLUICE_BIN, "detach", "--all"});
		run_command({"ip", "netns", "del", src_ns});
		run_command({"ip", "netns", "del", dst_ns});
		rmdir(PIN_DIR.c_str());
	};
	// iperf3's two ends and the stack run on any CPU, not on the one the
	// other sections pin themselves to.
	cpu_set_t pinned, all;
	sched_getaffinity(0, sizeof(pinned), &pinned);
	CPU_ZERO(&all);
	for (long i = 0; i < sysconf(_SC_NPROCESSORS_ONLN); i++)
		CPU_SET(i, &all);
	sched_setaffinity(0, sizeof(all), &all);
	setenv("SLUICE_PIN_DIR", PIN_DIR.c_str(), 1);
	cleanup();
	try {
		VethPair{src_ns, dst_ns, "benchtcp0", "benchtcp1", "10.213.0.1/24", {"10.213.0.2/24"}, "02:00:00:00:0b"}
			.create();
		CommandResult a = run_command({"nsenter", "--net=/run/netns/" + dst_ns, SLUICE_BIN, "attach", "benchtcp1",
					       "--mode", "native"});
		if (a.exit_code != 0)
			throw Error("attach failed: " + a.err);
		struct Case {
			double mbit;
			bool default_burst;
		};
		std::vector<Case> cases;
		for (double mbit : o.quick ? std::vector<double>{10} : std::vector<double>{1, 10, 100})
			for (bool d : {true, false})
				cases.push_back({mbit, d});
		for (const Case &c : cases) {
			std::string rate = fixed(c.mbit, 0) + "mbit";
			std::vector<std::string> add = {SLUICE_BIN, "rule", "add", "10.213.0.2", "--rate", rate, "--name", "tcp"};
			std::string burst = fixed(c.mbit * 1e6 / 8 / 10, 0); // 100 ms
			if (!c.default_burst)
				add.insert(add.end(), {"--burst", burst});
			CommandResult r = run_command(add);
			if (r.exit_code != 0)
				throw Error("rule add failed: " + r.err);
			if (c.default_burst)
				burst = std::to_string(
					nlohmann::json::parse(run_command({SLUICE_BIN, "rule", "list", "--json"}).out)
						.at(0)
						.at("burst")
						.get<uint64_t>());
			Child server({"ip", "netns", "exec", dst_ns, "iperf3", "--server", "--one-off", "--bind", "10.213.0.1"});
			CommandResult client;
			for (int attempt = 0; attempt < 50; attempt++) {
				std::this_thread::sleep_for(std::chrono::milliseconds(100));
				client = run_command({"ip", "netns", "exec", src_ns, "iperf3", "--client", "10.213.0.1", "--time",
						      std::to_string(seconds), "--omit", std::to_string(omit), "--json"});
				if (client.exit_code == 0 || client.out.find("Connection refused") == std::string::npos)
					break;
			}
			server.stop(SIGTERM);
			run_command({SLUICE_BIN, "rule", "del", "tcp"});
			if (client.exit_code != 0)
				throw Error("iperf3 failed: " + client.out.substr(0, 300) + client.err);
			// The receiver's figure and the sender's retransmits, for the measured seconds.
			nlohmann::json report = nlohmann::json::parse(client.out);
			double received = report["end"]["sum_received"]["bits_per_second"].get<double>();
			uint64_t retransmits = report["end"]["sum_sent"].value("retransmits", uint64_t(0));
			std::cout << "| " << rate << " | " << burst << " B" << (c.default_burst ? " (default)" : " (100 ms)")
				  << " | " << fixed(received / 1e6, 2) << " | " << fixed(100 * received / (c.mbit * 1e6), 1)
				  << " % | " << retransmits << " |\n";
		}
	} catch (...) {
		cleanup();
		sched_setaffinity(0, sizeof(pinned), &pinned);
		throw;
	}
	cleanup();
	sched_setaffinity(0, sizeof(pinned), &pinned);
}

/// One build's row held by its own sluice-bench (--hold), and the program it names.
struct Held {
	std::unique_ptr<Child> child;
	int fd = -1;
	std::vector<uint8_t> frame;

	Held(const std::string &bench, const std::string &rows)
	{
		child = std::make_unique<Child>(std::vector<std::string>{bench, "--sections", "1", "--rows", rows, "--hold"});
		const std::regex held("^held ([0-9]+) ([0-9a-f]+)$");
		const std::string line = child->wait_for_line(held, std::chrono::seconds(900));
		std::smatch m;
		if (!std::regex_match(line, m, held)) {
			std::string said = child->seen();
			while (!said.empty() && said.back() == '\n')
				said.pop_back();
			said = said.substr(said.rfind('\n') + 1); // its last line
			throw Error(bench + " --hold held no row named '" + rows + "'" + (said.empty() ? "" : " (" + said + ")"));
		}
		fd = bpf_prog_get_fd_by_id(static_cast<__u32>(std::stoul(m[1])));
		if (fd < 0)
			throw_errno("cannot open the program " + bench + " holds", errno);
		const std::string hex = m[2];
		for (size_t i = 0; i + 1 < hex.size(); i += 2)
			frame.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
	}
	~Held()
	{
		if (fd >= 0)
			close(fd);
		child->stop(SIGTERM);
	}
};

/// --side-by-side OTHER: this build's and another build's sluice-bench each
/// set up the row (--hold), and this process runs the two programs in
/// alternation on CPU BENCH_CPU, `turns` test runs of each, the order swapped
/// every turn; again for `loads` fresh loads, the build loaded first swapped
/// every load (where the kernel places a program moves its time by a few
/// per cent). Prints each load's medians and the median over the loads of
/// this build against the other, per turn.
void side_by_side(const Options &o, const std::string &other, int loads, int turns)
{
	const std::string self = std::filesystem::read_symlink("/proc/self/exe");
	constexpr uint32_t REPEAT = 1000000;
	std::cout << "\n## Side by side: " << o.rows << "\n\nThis build (" << self << ") against " << other << ": "
		  << loads << " loads of each, " << turns << " test runs of each per load in alternation, " << REPEAT
		  << " repeats each, on CPU " << BENCH_CPU << ".\n\n"
		  << "| load | loaded first | other ns | this ns | this vs other, median of the turns | turns this was slower |\n"
		  << "| ---: | --- | ---: | ---: | ---: | ---: |\n";
	pin_to_cpu(BENCH_CPU);
	std::vector<double> per_load;
	for (int l = 0; l < loads; l++) {
		const bool self_first = l % 2 == 0;
		std::unique_ptr<Held> first = std::make_unique<Held>(self_first ? self : other, o.rows);
		std::unique_ptr<Held> second = std::make_unique<Held>(self_first ? other : self, o.rows);
		const Held &mine = self_first ? *first : *second, &theirs = self_first ? *second : *first;
		if (mine.frame != theirs.frame)
			throw Error("the two builds' rows named '" + o.rows + "' send different frames");
		std::vector<double> theirs_ns, mine_ns, ratio;
		int slower = 0;
		for (int t = 0; t < turns; t++) {
			double x = 0, y = 0;
			if (t % 2) {
				y = test_run_ns(theirs.fd, theirs.frame, REPEAT);
				x = test_run_ns(mine.fd, mine.frame, REPEAT);
			} else {
				x = test_run_ns(mine.fd, mine.frame, REPEAT);
				y = test_run_ns(theirs.fd, theirs.frame, REPEAT);
			}
			theirs_ns.push_back(y);
			mine_ns.push_back(x);
			ratio.push_back(x / y);
			slower += x > y;
		}
		const double r = median(ratio);
		per_load.push_back(r);
		std::cout << "| " << l + 1 << " | " << (self_first ? "this" : "other") << " | " << fixed(median(theirs_ns), 1)
			  << " | " << fixed(median(mine_ns), 1) << " | " << percent(r) << " | " << slower << " of " << turns
			  << " |" << std::endl;
	}
	const double mid = median(per_load);
	std::sort(per_load.begin(), per_load.end());
	std::cout << "\nThis build against the other, median over the loads: " << percent(mid)
		  << " (loads from " << percent(per_load.front()) << " to " << percent(per_load.back()) << ")\n";
}

int main(int argc, char **argv)
{
	CLI::App app{"sluice-bench: Sluice's per-packet cost, peers, memory and control plane"};
	Options o;
	app.add_flag("--quick", o.quick, "Fewer repeats and smaller tables, for a smoke run");
	std::vector<int> sections;
	app.add_option("--sections", sections,
		       "Only these sections (1 per-packet, 2 peers, 3 memory, 4 control, 5 spoofed floods, "
		       "6 TCP through a byte limit)")
		->delimiter(',')
		->check(CLI::Range(1, 6));
	app.add_option("--rows", o.rows,
		       "Sections 1 and 2 measure only the rows whose name holds TEXT (section 1's scenarios; "
		       "section 2's \"1 source\", \"256 sources\", \"1000000 sources\", Sluice's row alone): "
		       "a few rows, to compare two builds run in turns");
	app.add_flag("--hold", o.hold,
		     "Set up the first row of section 1 that --rows names, then hold it loaded (for --side-by-side)");
	std::string other;
	int loads = 8, turns = 30;
	auto *side = app.add_option("--side-by-side", other,
				    "Run the row --rows names, held by this build and by the other build's sluice-bench "
				    "(which must know --hold), in alternation in this process, over fresh loads")
			     ->check(CLI::ExistingFile);
	app.add_option("--loads", loads, "--side-by-side: loads of each build")->check(CLI::Range(1, 100));
	app.add_option("--turns", turns, "--side-by-side: test runs of each program per load")->check(CLI::Range(1, 1000));
	CLI11_PARSE(app, argc, argv);
	if ((o.hold || *side) && o.rows.empty()) {
		std::cerr << "sluice-bench: " << (o.hold ? "--hold" : "--side-by-side") << " needs --rows TEXT, the row\n";
		return 2;
	}
	if (*side) {
		try {
			side_by_side(o, other, loads, turns);
			return 0;
		} catch (const std::exception &e) {
			std::cerr << "sluice-bench: " << e.what() << "\n";
			return 1;
		}
	}
	if (!sections.empty())
		o.sections = std::set<int>(sections.begin(), sections.end());
	if (o.quick) {
		o.repeat = 1000000;
		o.live_repeat = 200000;
		o.rounds = 3;
	}

	try {
		if (geteuid() != 0)
			throw Error("run as root: the benchmark loads XDP programs and builds a namespace");
		set_libbpf_verbose(false);
		struct utsname u;
		uname(&u);
		std::cout << "# Sluice benchmark\n\nMachine: " << cpu_model() << ", " << sysconf(_SC_NPROCESSORS_ONLN)
			  << " CPUs, kernel " << u.release << ". Every figure below was measured in this run.\n";
		pin_to_cpu(BENCH_CPU);
		struct baselines_bpf *base = baselines_bpf__open_and_load();
		if (!base)
			throw_errno("cannot load the baseline programs", errno);

		if (o.sections.count(1))
			section_per_packet(o, base);
		if (o.hold)
			throw Error("--hold: no row of section 1 named '" + o.rows + "' to hold");

		// The namespace only for the sections that send frames through it.
		bool need_netns = o.sections.count(2) || o.sections.count(3) || o.sections.count(4);
		if (need_netns) {
			setup_netns();
			int self = open("/proc/self/ns/net", O_RDONLY);
			int ns = open(("/run/netns/" + NETNS).c_str(), O_RDONLY);
			if (self < 0 || ns < 0 || setns(ns, CLONE_NEWNET))
				throw Error("cannot enter namespace " + NETNS);
			int ifindex = static_cast<int>(if_nametoindex(DEV.c_str()));
			if (o.sections.count(2))
				section_peers(o, base, ifindex);
			if (o.sections.count(3))
				section_memory(o, base, ifindex);
			setns(self, CLONE_NEWNET);
		}

		if (o.sections.count(4))
			section_control(o);
		if (o.sections.count(5))
			section_spoofed(o);
		if (o.sections.count(6))
			section_tcp(o);
		if (need_netns)
			run_command({"ip", "netns", "del", NETNS});
		baselines_bpf__destroy(base);
		return 0;
	} catch (const std::exception &e) {
		if (o.sections.count(2) || o.sections.count(3) || o.sections.count(4))
			run_command({"ip", "netns", "del", NETNS});
		std::cerr << "sluice-bench: " << e.what() << "\n";
		return 1;
	}
}
