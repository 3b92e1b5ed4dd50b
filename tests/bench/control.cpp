// SPDX-License-Identifier: GPL-2.0-only
// sluice-bench-control: the control plane at scale, through the real sluice
// command (process start to exit, wall and CPU time), on a generated policy
// of 100,000 rules of mixed shapes: scattered IPv4 /32s, /24s, IPv6 /64s,
// port-scoped rules, layered aggregates, allows and denies. It times
//   - reading the file with plain read() (the baseline) and parsing it in
//     this process (libyaml, yaml-cpp where libyaml refuses);
//   - `sluice apply` of it (loading the program), again with no change, and
//     with one rule changed; `apply --check`; `sluice export`;
//   - `sluice rule set` with 10, 20,000 and 100,000 rules installed, the first
//     one after the apply apart from the ones after it;
//   - `sluice set load` of sets of 1,000,000 IPv4 prefixes (two shapes) and of
//     100,000 and 1,000,000 IPv6 prefixes (`--set-load-only ROWS` runs only
//     these rows);
// and prints Markdown tables, with ratios against baselines of the same run.
// The targets are shown beside the figures; nothing here fails on a
// figure. Run as root; it loads the program, attached nowhere, in its own
// pin directory.
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "error.h"
#include "policy.h"
#include "policy_doc.h"

using namespace sluice;
using sluice::test::cpu_model;

namespace {

struct Timing {
	double wall = 0, cpu = 0; ///< seconds
};

double seconds(const struct timeval &t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; }

/// Runs argv with stdout to `out` ("" for /dev/null); wall time from fork to
/// reaping, CPU time (user + system) from the child's rusage. Throws, with
/// its stderr, if it fails.
Timing run(const std::vector<std::string> &argv, const std::string &out = "")
{
	char err_path[] = "/tmp/sluice-bench-control-err-XXXXXX";
	int err_fd = mkstemp(err_path);
	if (err_fd < 0)
		throw Error("mkstemp failed");
	// posix_spawn, not fork: a child that copies this process's page tables
	// (a parsed policy of 100,000 rules) would charge that copy to sluice.
	posix_spawn_file_actions_t actions;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&actions, 1, out.empty() ? "/dev/null" : out.c_str(),
					 O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
	std::vector<char *> args;
	for (const auto &a : argv)
		args.push_back(const_cast<char *>(a.c_str()));
	args.push_back(nullptr);
	auto t0 = std::chrono::steady_clock::now();
	pid_t pid = 0;
	int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
	posix_spawn_file_actions_destroy(&actions);
	if (spawned) {
		close(err_fd);
		unlink(err_path);
		throw Error("cannot run " + argv[0] + ": " + std::strerror(spawned));
	}
	int status = 0;
	struct rusage ru = {};
	while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
	}
	Timing t;
	t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	t.cpu = seconds(ru.ru_utime) + seconds(ru.ru_stime);
	std::ifstream in(err_path);
	std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	close(err_fd);
	unlink(err_path);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		std::string cmd;
		for (size_t i = 1; i < argv.size(); i++)
			cmd += (i > 1 ? " " : "") + argv[i];
		throw Error("`sluice " + cmd + "` failed: " + err);
	}
	return t;
}

/// The same command `times` times: the median wall and CPU time (each on
/// its own), and the slowest wall time.
struct Series {
	Timing median;
	double max_wall = 0;
};

Series median_of(std::vector<Timing> v)
{
	Series s;
	std::vector<double> wall, cpu;
	for (const auto &t : v) {
		wall.push_back(t.wall);
		cpu.push_back(t.cpu);
	}
	std::sort(wall.begin(), wall.end());
	std::sort(cpu.begin(), cpu.end());
	s.median = {wall[wall.size() / 2], cpu[cpu.size() / 2]};
	s.max_wall = wall.back();
	return s;
}

/// Times fn in this process: wall and this process's CPU time.
template <class F> Timing in_process(F fn)
{
	struct timespec c0, c1;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	auto t0 = std::chrono::steady_clock::now();
	fn();
	Timing t;
	t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
	t.cpu = double(c1.tv_sec - c0.tv_sec) + double(c1.tv_nsec - c0.tv_nsec) / 1e9;
	return t;
}

std::string ms(double s)
{
	char buf[32];
	std::snprintf(buf, sizeof(buf), s < 0.01 ? "%.2f" : s < 1 ? "%.1f" : "%.0f", s * 1000);
	return buf;
}

std::string ratio(double a, double b)
{
	char buf[32];
	std::snprintf(buf, sizeof(buf), a / b < 10 ? "%.2f×" : "%.0f×", a / b);
	return b > 0 ? buf : "-";
}

std::string with_commas(uint64_t n)
{
	std::string s = std::to_string(n);
	for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
		s.insert(static_cast<size_t>(i), ",");
	return s;
}

/// A policy of `n` rules of mixed shapes, the same for the same n. The rule
/// `changed` (if any) has another rate: "the same file with one rule changed".
/// max_rules leaves a quarter to spare, in powers of two (at least the default).
std::string make_policy(uint32_t n, uint32_t changed = UINT32_MAX)
{
	std::mt19937_64 rng(20261122);
	std::set<std::string> selectors;
	std::set<uint32_t> layered16;
	uint32_t max_rules = SLUICE_DEFAULT_MAX_RULES;
	while (max_rules < n + n / 4)
		max_rules *= 2;
	std::string out = "# generated by sluice-bench-control: " + std::to_string(n) + " rules\n";
	if (max_rules != SLUICE_DEFAULT_MAX_RULES)
		out += "tables:\n  max_rules: " + std::to_string(max_rules) + "\n";
	out += "rules:\n";
	auto v4 = [](uint32_t a, int len) {
		return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." +
		       std::to_string((a >> 8) & 255) + "." + std::to_string(a & 255) + "/" + std::to_string(len);
	};
	const char *ports[] = {"22", "53", "80", "443", "8000-8080", "25", "3306", "5432"};
	for (uint32_t i = 0; i < n;) {
		uint64_t r = rng();
		uint32_t a = static_cast<uint32_t>(r);
		std::string name, cidr, body, selector;
		switch (i % 20) {
		case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: // a host anywhere
			name = "host-" + std::to_string(i);
			cidr = v4(a, 32);
			body = "    rate: " + std::string(i == changed ? "120/s" : "100/s") + "\n";
			break;
		case 8: case 9: case 10: case 11: // a /24, per host or as one
			name = "net24-" + std::to_string(i);
			cidr = v4(a & 0xffffff00u, 24);
			body = "    rate: 1000/s\n    burst: 2000\n" + std::string(i % 2 ? "    per: 24\n" : "");
			break;
		case 12: case 13: case 14: case 15: { // an IPv6 /64
			char buf[64];
			std::snprintf(buf, sizeof(buf), "2001:db8:%x:%x::/64", unsigned(r >> 48), unsigned((r >> 32) & 0xffff));
			name = "net64-" + std::to_string(i);
			cidr = buf;
			body = "    rate: 10mbit/s\n    algo: gcra\n";
			break;
		}
		case 16: case 17: { // a service in 10/8
			const char *port = ports[(r >> 40) % 8];
			name = "svc-" + std::to_string(i);
			cidr = v4(0x0a000000u | (a & 0x00ffff00u), 24);
			body = std::string("    proto: ") + (r >> 60 & 1 ? "udp" : "tcp") + "\n    dport: " + port + "\n" +
			       (r >> 61 & 1 ? "    rate: 5/min\n    algo: sliding-log\n"
					    : "    rate: 500/10s\n    algo: sliding-window\n");
			selector = cidr + (r >> 60 & 1 ? " udp " : " tcp ") + port;
			break;
		}
		case 18: // a layered aggregate over a /16
			if (!layered16.insert(a >> 16).second)
				continue;
			name = "agg-" + std::to_string(i);
			cidr = v4(a & 0xffff0000u, 16);
			body = "    rate: 100000/s\n    per: 16\n    continue: true\n";
			break;
		default: // allows and denies
			name = "acl-" + std::to_string(i);
			if (i % 40 == 19) {
				cidr = v4(a, 32);
				body = "    action: allow\n";
			} else {
				char buf[64];
				std::snprintf(buf, sizeof(buf), "2001:db8:%x::/48", unsigned(r >> 48));
				cidr = buf;
				body = "    action: deny\n    shadow: true\n";
			}
		}
		if (!selectors.insert(selector.empty() ? cidr : selector).second)
			continue; // the same traffic twice: draw again
		out += "  - name: " + name + "\n    cidr: " + cidr + "\n" + body;
		i++;
	}
	return out;
}

void write_file(const std::string &path, const std::string &text)
{
	std::ofstream f(path);
	f << text;
	if (!f)
		throw Error("cannot write " + path);
}

std::string read_file(const std::string &path)
{
	int fd = open(path.c_str(), O_RDONLY);
	if (fd < 0)
		throw Error("cannot open " + path);
	std::string text;
	char buf[65536];
	for (ssize_t got; (got = read(fd, buf, sizeof(buf))) > 0;)
		text.append(buf, static_cast<size_t>(got));
	close(fd);
	return text;
}

std::string load_average()
{
	std::ifstream in("/proc/loadavg");
	std::string one, five;
	in >> one >> five;
	return one + " " + five;
}

void row(const std::string &what, const Timing &t, const std::string &vs, const std::string &target = "")
{
	std::cout << "| " << what << " | " << ms(t.wall) << " | " << ms(t.cpu) << " | " << vs << " | " << target
		  << " |\n";
}

std::string target(double wall, double limit)
{
	return (wall < limit ? "under " : "over ") + ms(limit) + " ms";
}

/// Section 4: `sluice set load` of large sets, one row a shape; `rows`
/// (1-based) picks some, empty: all.
void set_load_section(const std::string &bin, const std::string &dir, int repeat, bool quick,
		      const std::vector<int> &rows)
{
	std::cout << "\n## 4. `sluice set load NAME FILE` of a large address set\n\n"
		  << "One deny rule on the set; each load reads the file, compiles the rules with the new set "
		     "into the idle tables, switches, and replaces the set's file. Median of "
		  << repeat << " loads, alternating between two files of the same shape.\n\n"
		  << "| set | tables | wall ms | CPU ms | target |\n| --- | --- | ---: | ---: | --- |\n";
	struct SetShape {
		const char *what;
		uint32_t max_rules, max_v6_prefixes, count; ///< max_v6_prefixes 0: as max_rules
		int family;
		int kind; ///< 0: /24s anywhere; 1: /32s in 4,096 /24s; 2: IPv6 /64s; 3: IPv6 /64s and /128s
	};
	const uint32_t million = quick ? 100000 : 1000000;
	const SetShape shapes[] = {{"IPv4 /24s anywhere", 32768, 0, million, 4, 0},
				   {"IPv4 /32s in 4,096 /24s", 16384, 0, million, 4, 1},
				   {"IPv6 /64s", 16384, 131072, 100000, 6, 2},
				   {"IPv6 /64s and /128s (none inside another)", 16384, million, million, 6, 3}};
	for (size_t row = 0; row < std::size(shapes); row++) {
		const SetShape &shape = shapes[row];
		if (!rows.empty() && std::find(rows.begin(), rows.end(), int(row + 1)) == rows.end())
			continue;
		run({bin, "detach", "--all"});
		std::string files[2];
		for (int v = 0; v < 2; v++) {
			std::mt19937_64 rng(static_cast<uint64_t>(v * 10 + shape.kind));
			std::set<uint64_t> seen;
			std::string text;
			while (seen.size() < shape.count) {
				uint64_t r = rng();
				// Kind 3: a /64's key is its 32 bits of network, even; a
				// /128's its network, odd, and 32 bits of host: none lies
				// in another, and the keys never meet.
				uint64_t key = shape.kind == 0   ? (r & 0xffffff)
					       : shape.kind == 1 ? (r % 4096) << 8 | (r >> 40 & 255)
					       : shape.kind == 3 ? (r & 1 ? r | 1ull << 32 : r >> 32 & ~1ull)
								 : r;
				if (!seen.insert(key).second)
					continue;
				char line[96];
				if (shape.kind == 0)
					snprintf(line, sizeof(line), "%u.%u.%u.0/24\n", unsigned(key >> 16), unsigned(key >> 8 & 255),
						 unsigned(key & 255));
				else if (shape.kind == 1)
					snprintf(line, sizeof(line), "10.%u.%u.%u\n", unsigned(key >> 16 & 255),
						 unsigned(key >> 8 & 255), unsigned(key & 255));
				else if (shape.kind == 2)
					snprintf(line, sizeof(line), "2001:db8:%x:%x::/64\n", unsigned(key >> 16 & 0xffff),
						 unsigned(key & 0xffff));
				else if (key >> 32) // a /128: network key >> 32, host the low 32 bits
					snprintf(line, sizeof(line), "2001:db8:%x:%x::%x:%x\n", unsigned(key >> 48 & 0xffff),
						 unsigned(key >> 32 & 0xffff), unsigned(key >> 16 & 0xffff), unsigned(key & 0xffff));
				else
					snprintf(line, sizeof(line), "2001:db8:%x:%x::/64\n", unsigned(key >> 16 & 0xffff),
						 unsigned(key & 0xffff));
				text += line;
			}
			files[v] = dir + "/set" + std::to_string(v) + ".txt";
			write_file(files[v], text);
		}
		const std::string setup = dir + "/sets.yaml";
		std::string tables = "tables:\n  max_rules: " + std::to_string(shape.max_rules) + "\n";
		if (shape.max_v6_prefixes)
			tables += "  max_v6_prefixes: " + std::to_string(shape.max_v6_prefixes) + "\n";
		write_file(setup, tables + "sets:\n  - {name: big, family: " + std::to_string(shape.family) +
					  ", prefixes: []}\nrules:\n  - {name: big, cidr: \"@big\", action: deny}\n");
		run({bin, "apply", setup});
		std::vector<Timing> loads;
		for (int i = 0; i < repeat; i++)
			loads.push_back(run({bin, "set", "load", "big", files[i % 2]}));
		Timing t = median_of(loads).median;
		std::string sizes = "max_rules " + with_commas(shape.max_rules);
		if (shape.max_v6_prefixes)
			sizes += ", max_v6_prefixes " + with_commas(shape.max_v6_prefixes);
		std::cout << "| " << with_commas(shape.count) << " " << shape.what << " | " << sizes << " | " << ms(t.wall)
			  << " | " << ms(t.cpu) << " | "
			  << (shape.kind != 2 ? target(t.wall, 2) : std::string("(IPv6 may be slower)")) << " |\n";
		for (const auto &f : files)
			unlink(f.c_str());
		unlink(setup.c_str());
	}
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{"sluice-bench-control: the control plane at 100,000 rules, through the sluice command"};
	uint32_t n = 100000;
	int repeat = 5;
	bool quick = false;
	std::string pin_dir = "/sys/fs/bpf/sluice-bench-control";
	app.add_option("--rules", n, "Rules in the large policy (default 100000)")->check(CLI::Range(20, 1000000));
	app.add_flag("--quick", quick, "20,000 rules and fewer repeats, for a smoke run");
	app.add_option("--repeat", repeat, "Runs of each timed command (default 5; the median is shown)")
		->check(CLI::Range(1, 100));
	app.add_option("--pin-dir", pin_dir, "Where the program's state is pinned (SLUICE_PIN_DIR)");
	std::string bin = SLUICE_BIN;
	app.add_option("--sluice", bin, "The sluice binary to time (default: this build's), e.g. an older one");
	std::vector<int> set_rows;
	app.add_option("--set-load-only", set_rows,
		       "Only section 4 (`set load`), and of it only these rows (1-based, comma-separated)")
		->delimiter(',')
		->check(CLI::Range(1, 4));
	std::string write_only;
	app.add_option("--write-policy", write_only, "Only write the generated policy of --rules rules to this file");
	CLI11_PARSE(app, argc, argv);
	if (!write_only.empty()) {
		write_file(write_only, make_policy(n));
		return 0;
	}
	if (quick) {
		n = std::min<uint32_t>(n, 20000);
		repeat = std::min(repeat, 3);
	}
	char dir_template[] = "/tmp/sluice-bench-control-XXXXXX";
	if (!mkdtemp(dir_template)) {
		std::cerr << "sluice-bench-control: cannot make a directory in /tmp\n";
		return 1;
	}
	const std::string dir = dir_template;
	auto cleanup = [&] {
		try {
			run({bin, "detach", "--all"});
		} catch (const std::exception &) {
		}
		rmdir(pin_dir.c_str());
		for (const char *f :
		     {"policy.yaml", "changed.yaml", "export.yaml", "small.yaml", "mid.yaml", "diff.txt", "tables.yaml"})
			unlink((dir + "/" + f).c_str());
		rmdir(dir.c_str());
	};
	try {
		if (geteuid() != 0)
			throw Error("run as root: the benchmark loads the XDP program");
		setenv("SLUICE_PIN_DIR", pin_dir.c_str(), 1);
		try {
			run({bin, "detach", "--all"}); // a previous run's leftovers
		} catch (const std::exception &) {
		}
		struct utsname u;
		uname(&u);
		std::cout << "# Sluice control plane at scale\n\nMachine: " << cpu_model() << ", "
			  << sysconf(_SC_NPROCESSORS_ONLN) << " CPUs, kernel " << u.release << "; load average "
			  << load_average() << " at the start. Binary: " << bin << ". Times are the median of " << repeat
			  << " runs of the `sluice` command, process start to exit: wall clock, and CPU (user + "
			     "system) from the process's rusage.\n";

		if (!set_rows.empty()) {
			set_load_section(bin, dir, repeat, quick, set_rows);
			cleanup();
			return 0;
		}

		// ---- 1. The file.
		const std::string policy = dir + "/policy.yaml", changed = dir + "/changed.yaml";
		write_file(policy, make_policy(n));
		write_file(changed, make_policy(n, 2)); // host-2's rate: 100/s -> 120/s
		struct stat st = {};
		stat(policy.c_str(), &st);
		std::vector<Timing> reads, parses;
		std::string text;
		for (int i = 0; i < repeat; i++)
			reads.push_back(in_process([&] { text = read_file(policy); }));
		Policy parsed;
		for (int i = 0; i < repeat; i++)
			parses.push_back(in_process([&] { parsed = yaml::parse_policy_text(text, policy); }));
		Timing read_t = median_of(reads).median, parse_t = median_of(parses).median;
		size_t rules_read = parsed.rules.size();
		parsed = Policy();
		std::string().swap(text);
		std::cout << "\n## 1. Reading the policy file (" << with_commas(rules_read) << " rules, "
			  << with_commas(static_cast<uint64_t>(st.st_size)) << " bytes), in this process\n\n"
			  << "| step | wall ms | CPU ms | against | |\n| --- | ---: | ---: | --- | --- |\n";
		row("plain read() of the file (baseline)", read_t, "1×");
		row("parse (libyaml) and check", parse_t, ratio(parse_t.wall, read_t.wall) + " the read");

		// ---- 2. apply, export.
		std::vector<Timing> version;
		for (int i = 0; i < repeat; i++)
			version.push_back(run({bin, "--version"}));
		Timing start_t = median_of(version).median;
		// What loading costs alone: the program and tables of the size the
		// policy asks for, with no rules.
		const std::string tables_only = dir + "/tables.yaml";
		{
			std::string text = read_file(policy), head = text.substr(0, text.find("rules:\n"));
			write_file(tables_only, head + "rules: []\n");
		}
		Timing load_t = run({bin, "apply", "--allow-empty", tables_only}); // rules: [] alone is refused without it
		run({bin, "detach", "--all"});
		Timing first = run({bin, "apply", policy});
		std::vector<Timing> again, one, check, exports;
		for (int i = 0; i < repeat; i++)
			again.push_back(run({bin, "apply", policy}));
		for (int i = 0; i < repeat; i++) {
			one.push_back(run({bin, "apply", i % 2 ? policy : changed}));
		}
		run({bin, "apply", policy});
		for (int i = 0; i < repeat; i++)
			check.push_back(run({bin, "apply", "--check", policy}));
		const std::string exported = dir + "/export.yaml";
		for (int i = 0; i < repeat; i++)
			exports.push_back(run({bin, "export"}, exported));
		// The export reads back as the running state: applying it changes nothing.
		run({bin, "apply", "--diff", exported}, dir + "/diff.txt");
		std::string diff = read_file(dir + "/diff.txt");
		if (diff != "no changes\n")
			throw Error("the export does not read back as the running state: " + diff.substr(0, 200));
		Series again_s = median_of(again), one_s = median_of(one);
		std::cout << "\n## 2. `sluice apply` and `sluice export` of " << with_commas(n)
			  << " rules\n\n| command | wall ms | CPU ms | against | target |\n"
			  << "| --- | ---: | ---: | --- | --- |\n";
		row("`sluice --version` (process start and exit: baseline)", start_t, "1×");
		row("`apply` of the tables alone, no rules, into nothing loaded (loading: baseline)", load_t, "");
		row("`apply` into nothing loaded (loads the program, sizes the tables)", first,
		    ratio(first.wall, load_t.wall) + " loading alone", target(first.wall, 1));
		row("`apply` of the same file: no change", again_s.median, ratio(again_s.median.wall, read_t.wall) + " the read",
		    target(again_s.median.wall, 1));
		row("`apply` with one rule's rate changed", one_s.median, ratio(one_s.median.wall, read_t.wall) + " the read",
		    target(one_s.median.wall, 1));
		row("`apply --check`", median_of(check).median, ratio(median_of(check).median.wall, read_t.wall) + " the read");
		row("`export` (to a file)", median_of(exports).median,
		    ratio(median_of(exports).median.wall, read_t.wall) + " the read");

		// ---- 3. rule set.
		std::cout << "\n## 3. `sluice rule set NAME --rate R` with rules installed\n\n"
			  << "Each `rule set` writes the edited rule's entries into the idle rule set and flips the rule "
			     "entries alone (see `struct sluice_active`); the first after an `apply` that changed the "
			     "rule set is timed apart, as it would copy the entries the apply changed had the apply not "
			     "brought them up to date. Each size is applied afresh; the steady figure is the "
			     "median of the "
			  << std::max(repeat * 2, 9) << " `rule set`s after the first.\n\n"
			  << "| rules installed | first after apply: wall ms | CPU ms | steady: wall ms | CPU ms | "
			     "slowest ms | against 10 rules | against `--version` | target |\n"
			  << "| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |\n";
		double base_set = 0;
		std::vector<uint32_t> sizes = {10, 20000, n};
		if (n <= 20000)
			sizes = {10, n};
		for (uint32_t size : sizes) {
			run({bin, "detach", "--all"});
			std::string path = size == n ? policy : dir + (size == 10 ? "/small.yaml" : "/mid.yaml");
			if (size != n)
				write_file(path, make_policy(size));
			run({bin, "apply", path});
			// host-1: a /32 with a token bucket of 100/s; the buckets are kept.
			Timing first_set = run({bin, "rule", "set", "host-1", "--rate", "150/s"});
			std::vector<Timing> sets;
			for (int i = 0; i < std::max(repeat * 2, 9); i++)
				sets.push_back(run({bin, "rule", "set", "host-1", "--rate", i % 2 ? "150/s" : "100/s"}));
			Series s = median_of(sets);
			if (size == 10)
				base_set = s.median.wall;
			std::cout << "| " << with_commas(size) << " | " << ms(first_set.wall) << " | " << ms(first_set.cpu)
				  << " | " << ms(s.median.wall) << " | " << ms(s.median.cpu) << " | " << ms(s.max_wall)
				  << " | " << ratio(s.median.wall, base_set) << " | " << ratio(s.median.wall, start_t.wall)
				  << " | " << target(s.median.wall, 0.01) << " |\n";
		}
		// ---- 4. set load.
		set_load_section(bin, dir, repeat, quick, {});
		std::cout << "\nLoad average at the end: " << load_average() << ".\n";
		cleanup();
		return 0;
	} catch (const std::exception &e) {
		std::cerr << "sluice-bench-control: " << e.what() << "\n";
		cleanup();
		return 1;
	}
}
