// SPDX-License-Identifier: GPL-2.0-only
// sluice-agent-bench: what one scrape of the agent costs at scale. The
// program is loaded and pinned (attached nowhere), given 10,000 rules, and its
// IPv4 table is filled through the library with 1,000,000 buckets spread over
// them; then the agent's scrape path (read the pinned state, build the
// metric families, render the text) is timed, CPU and wall, several times.
// Prints figures; asserts nothing.
#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "datapath.h"
#include "metrics.h"
#include "rule_args.h"
#include "rule_table.h"
#include "sources.h"

using namespace sluice;

namespace {

const std::string PIN_DIR = "/sys/fs/bpf/slag-bench";

double thread_cpu_seconds()
{
	timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

double wall_seconds()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Cost {
	double cpu = 0, wall = 0;
};

template <class F> Cost measure(F &&f)
{
	double c0 = thread_cpu_seconds(), w0 = wall_seconds();
	f();
	return {thread_cpu_seconds() - c0, wall_seconds() - w0};
}

std::string fixed(double v, int digits)
{
	std::ostringstream s;
	s << std::fixed << std::setprecision(digits) << v;
	return s.str();
}

/// `rules` rules (172.16.0.0/24 onwards) and up to `sources` buckets spread
/// evenly over them, each with some passes and drops; returns the buckets placed.
uint64_t fill(const Instance &inst, uint32_t rules, uint32_t sources)
{
	std::ostringstream lines;
	for (uint32_t i = 0; i < rules; i++)
		lines << "172." << 16 + i / 256 << "." << i % 256 << ".0/24 --rate 100/s --name bulk" << i << "\n";
	std::istringstream in(lines.str());
	MapSet maps = inst.maps();
	auto added = RuleTable(maps).add_many(read_rule_lines(in, "bench rules", nullptr));

	struct sluice_config cfg = {};
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(maps.config.get(), &zero, &cfg))
		throw_errno("cannot read the configuration", errno);
	SourceTable4 table(maps.src4.get());
	// Round robin over the rules' /24s, until the table holds `sources`.
	uint64_t placed = 0;
	for (uint32_t i = 0; placed < sources && i < rules * 256; i++) {
		uint32_t r = i % rules, host = i / rules;
		struct sluice_source_state st = {};
		st.cnt.passed_packets = 1 + i % 7;
		st.cnt.dropped_packets = i % 13;
		uint32_t addr = htonl((172u << 24) | ((16 + r / 256) << 16) | ((r % 256) << 8) | host);
		placed += table.insert(added[r].id, reinterpret_cast<const uint8_t *>(&addr), st, cfg.hash_seed);
	}
	return placed;
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{"sluice-agent-bench: the CPU and time of one agent scrape at scale"};
	uint32_t sources = 1000000, rules = 10000;
	int rounds = 5;
	size_t top = agent::DEFAULT_TOP_SOURCES;
	app.add_option("--sources", sources, "Buckets to fill the IPv4 table with (default 1000000)");
	app.add_option("--rules", rules, "Rules (default 10000)")->check(CLI::Range(1, 16384));
	app.add_option("--rounds", rounds, "Scrapes timed (default 5)")->check(CLI::Range(1, 100));
	app.add_option("--top-sources", top, "As `sluice agent --top-sources` (default 10)");
	CLI11_PARSE(app, argc, argv);

	Instance inst(PIN_DIR);
	try {
		if (geteuid() != 0)
			throw Error("run as root: the benchmark loads and pins the XDP program");
		set_libbpf_verbose(false);
		{
			// Leftovers of an interrupted run: unloading removes the pin
			// directory and its lock, so the load takes the lock anew.
			{
				auto leftovers = inst.lock(true, true);
				inst.unload();
			}
			auto lock = inst.lock(true, true);
			// Room for every bucket: with two choices of four ways a table
			// fills to about 92 % before a source finds both sets full, so
			// the table has half as many again.
			inst.load({sources / 2 * 3, 16384, 0});
		}
		double t0 = wall_seconds();
		uint64_t placed = fill(inst, rules, sources);
		struct utsname u;
		uname(&u);
		std::cout << "# Agent scrape cost\n\nKernel " << u.release << ", " << sysconf(_SC_NPROCESSORS_ONLN)
			  << " CPUs. " << rules << " rules, " << placed << " IPv4 buckets placed (filled in "
			  << fixed(wall_seconds() - t0, 1) << " s), top " << top << " sources.\n\n";

		std::cout << "| round | read state (CPU s) | build families (CPU s) | render text (CPU s) | total CPU s | "
			     "wall s | text bytes |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
		std::vector<double> totals;
		for (int round = 1; round <= rounds; round++) {
			agent::Reading r;
			std::vector<prometheus::MetricFamily> families;
			std::string text;
			Cost read = measure([&] { r = agent::read_state(inst, top); });
			if (!r.readable)
				throw Error("the agent could not read the state: " + r.error);
			Cost build = measure([&] { families = agent::metric_families(r); });
			Cost render = measure([&] { text = agent::render_text(families); });
			double cpu = read.cpu + build.cpu + render.cpu;
			totals.push_back(cpu);
			std::cout << "| " << round << " | " << fixed(read.cpu, 3) << " | " << fixed(build.cpu, 3) << " | "
				  << fixed(render.cpu, 3) << " | " << fixed(cpu, 3) << " | "
				  << fixed(read.wall + build.wall + render.wall, 3) << " | " << text.size() << " |\n";
		}
		std::sort(totals.begin(), totals.end());
		double median = totals[totals.size() / 2];
		std::cout << "\nMedian CPU per scrape: " << fixed(median, 3) << " s; at one scrape per 15 s that is "
			  << fixed(median / 15 * 100, 2) << " % of one CPU.\n";

		// The exporter itself: a scrape that arrives while another is reading
		// is answered with the last figures, at once.
		agent::MetricsOptions options;
		options.listen = agent::parse_listen_address("127.0.0.1:0");
		options.top_sources = top;
		options.pin_dir = PIN_DIR;
		agent::MetricsExporter exporter(options);
		exporter.start();
		std::string url = "http://127.0.0.1:" + std::to_string(exporter.port()) + "/metrics";
		auto curl_seconds = [&url] {
			double w0 = wall_seconds();
			if (std::system(("curl -sf -o /dev/null " + url).c_str()) != 0)
				throw Error("cannot scrape " + url);
			return wall_seconds() - w0;
		};
		double first = curl_seconds(); // nothing to serve yet: waits for the reading
		auto slow = std::async(std::launch::async, curl_seconds);
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		double overlapping = curl_seconds();
		double reading = slow.get();
		std::cout << "Over HTTP: first scrape " << fixed(first, 3) << " s; a scrape " << fixed(reading, 3)
			  << " s long, and one sent 50 ms into it answered from the last figures in "
			  << fixed(overlapping, 3) << " s.\n";
		exporter.stop();

		auto lock = inst.lock(true);
		inst.unload();
		rmdir(PIN_DIR.c_str());
		return 0;
	} catch (const std::exception &e) {
		std::cerr << "sluice-agent-bench: " << e.what() << "\n";
		try {
			auto lock = inst.lock(true);
			inst.unload();
			rmdir(PIN_DIR.c_str());
		} catch (...) {
		}
		return 1;
	}
}
