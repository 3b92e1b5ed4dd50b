// SPDX-License-Identifier: GPL-2.0-only
// sluice-cluster-bench: what cluster rules cost, the figures the issue asks
// for. Prints Markdown; asserts nothing; exits non-zero only if it cannot run.
//   1. The sync: on each host (a program loaded and pinned in its own
//      directory, attached nowhere) 1,000 cluster rules and 10,000 IPv4
//      buckets spread over them, every one "dropping now" (an entry in the
//      throttled-source table, its drop time kept fresh) and its counters
//      moving; a real redis-server and the real `sluice agent` on loopback.
//      Over a steady window: the agent's rounds per second, time per round,
//      store commands per round and CPU; Redis's commands per second
//      (EVALSHA among them) and CPU. One host, then three on one Redis.
//   2. The data plane: per-packet cost of a cluster rule against the same
//      rule local (BPF_PROG_TEST_RUN; one program whose rule's scope is
//      edited between runs, which keeps its bucket), a second local run as
//      the noise floor, and cluster runs whose bucket is granted every 5 ms
//      as the agent grants it. Medians and minima of interleaved runs.
#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <signal.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>

#include "grants.h"
#include "bench_timing.h"
#include "child.h"
#include "datapath.h"
#include "maps.h"
#include "packet.h"
#include "redis_server.h"
#include "rate.h"
#include "rule_table.h"
#include "sluice_algos.h"
#include "sources.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

struct Options {
	uint32_t rules = 1000;
	uint32_t sources = 10000; ///< buckets per host
	std::vector<int> hosts = {1, 3};
	std::string interval = "100ms";
	double seconds = 10;      ///< the measured window
	double settle = 2;        ///< after the buckets are synced, before the window
	uint32_t repeat = 500000;
	int rounds = 21;
	bool sync = true, dataplane = true;
};

/// Cluster rules as the bench states them: the rate is shared by the hosts,
/// the local share (each host's fallback) a third of it.
const char *const RULE_RATE = "300/s", *const RULE_FALLBACK = "100/s";
/// Traffic as the feeder makes it: every FEED_EVERY each bucket passes a
/// packet (its local share, 100/s) and drops some more: 20-200/s, so that
/// it offers 120-300/s, over the local share. Every NOTE_EVERY its drop is
/// noted in the throttled-source table, as the data plane notes it.
constexpr milliseconds FEED_EVERY{10};
constexpr int NOTE_EVERY = 5; ///< feeds: 50 ms

std::atomic<bool> interrupted{false};

void on_signal(int) { interrupted = true; }

/// Sleeps, but gives up (and unwinds, cleaning up) on SIGINT or SIGTERM.
void nap(Clock::duration d)
{
	Clock::time_point end = Clock::now() + d;
	while (Clock::now() < end) {
		if (interrupted)
			throw Error("interrupted");
		std::this_thread::sleep_for(std::min<Clock::duration>(end - Clock::now(), milliseconds(50)));
	}
}

std::string fixed(double v, int digits)
{
	char buf[64];
	std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
	return buf;
}

double wall_seconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

uint64_t monotonic_ns(clockid_t clock = CLOCK_MONOTONIC)
{
	struct timespec ts = {};
	clock_gettime(clock, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

// ---- Part 1: the sync.

/// The address of bucket j: round robin over the rules' /24s (10.R/256.R%256.0/24).
uint32_t bucket_addr(uint32_t j, uint32_t rules)
{
	uint32_t r = j % rules, host = 1 + j / rules;
	return htonl((10u << 24) | (r / 256) << 16 | (r % 256) << 8 | host);
}

/// One host: its program pinned in its own directory with the bench's rules
/// and buckets, the agent that syncs it, and what the feeder writes.
class Host {
public:
	Host(int index, const Options &o)
		: pin_dir_("/sys/fs/bpf/slcb_h" + std::to_string(index)), inst_(pin_dir_)
	{
		try {
			set_up(o);
		} catch (...) {
			tear_down();
			throw;
		}
	}
	~Host() { tear_down(); }
	Host(const Host &) = delete;
	Host &operator=(const Host &) = delete;

	/// Keeps every bucket "dropping now" and its counters moving, feed
	/// `n`: a packet passed and some dropped, and every NOTE_EVERY feeds a
	/// drop noted now in the throttled-source table.
	void feed(uint64_t n)
	{
		if (n % NOTE_EVERY == 0) {
			struct sluice_throttle t = {};
			t.last_drop_ns = monotonic_ns();
			t.last_event_ns = t.since_ns = t.last_drop_ns;
			std::fill(drops_.begin(), drops_.end(), t);
			map_update_batch(maps_.throttled.get(), throttled_.data(), drops_.data(), throttled_.size(),
					 "the throttled-source table");
		}
		for (size_t i = 0; i < counters_.size(); i++) {
			// 1-10 drops every NOTE_EVERY feeds, spread over them.
			uint64_t per_note = 1 + i % 10, phase = n % NOTE_EVERY;
			uint64_t drops = (phase + 1) * per_note / NOTE_EVERY - phase * per_note / NOTE_EVERY;
			__atomic_fetch_add(&counters_[i]->passed_packets, 1, __ATOMIC_RELAXED);
			if (drops)
				__atomic_fetch_add(&counters_[i]->dropped_packets, drops, __ATOMIC_RELAXED);
		}
	}

	void start_agent(const std::string &redis, int index, const std::string &interval)
	{
		agent_ = std::make_unique<AgentProcess>(
			SLUICE_BIN,
			std::vector<std::string>{"--redis", redis, "--node-id", "bench" + std::to_string(index),
						 "--sync-interval", interval},
			std::vector<std::string>{"env", "SLUICE_PIN_DIR=" + pin_dir_, "SLUICE_RUN_DIR=" + run_dir_});
	}
	AgentProcess &agent() { return *agent_; }

private:
	void set_up(const Options &o)
	{
		char tmpl[] = "/tmp/slcb-run-XXXXXX";
		if (!mkdtemp(tmpl))
			throw_errno("cannot make a run directory", errno);
		run_dir_ = tmpl;
		{
			// Leftovers of an interrupted run: unloading removes the pin
			// directory and its lock, so the load takes the lock anew.
			{
				auto leftovers = inst_.lock(true, true);
				inst_.unload();
			}
			auto lock = inst_.lock(true, true);
			// Four times the buckets: their sets never both fill.
			inst_.load({std::max<uint32_t>(4 * o.sources, 4096), std::max<uint32_t>(2 * o.rules, 64), 0});
		}
		maps_ = inst_.maps();
		std::vector<RuleSpec> specs;
		for (uint32_t i = 0; i < o.rules; i++) {
			RuleSpec s;
			s.name = "c" + std::to_string(i);
			s.cidr = parse_cidr("10." + std::to_string(i / 256) + "." + std::to_string(i % 256) + ".0/24");
			s.rate = parse_rate(RULE_RATE);
			s.fallback = parse_rate(RULE_FALLBACK);
			s.scope = Scope::cluster;
			specs.push_back(s);
		}
		std::vector<InstalledRule> added = RuleTable(maps_).add_many(specs);
		if (added.size() != o.rules)
			throw Error("added " + std::to_string(added.size()) + " rules of " + std::to_string(o.rules));

		uint32_t zero = 0;
		struct sluice_config cfg = {};
		if (bpf_map_lookup_elem(maps_.config.get(), &zero, &cfg))
			throw_errno("cannot read the configuration", errno);
		SourceTable4 table(maps_.src4.get());
		// Round robin over the rules' /24s. Insertion takes the first empty
		// way of a bucket's two sets, so now and then both are full even in
		// a table this empty: that address is skipped for the next.
		for (uint32_t j = 0; throttled_.size() < o.sources; j++) {
			if (j >= o.rules * 254)
				throw Error("the IPv4 table has no room for " + std::to_string(o.sources) + " buckets");
			const InstalledRule &r = added[j % o.rules];
			uint32_t bucket_id = r.bucket_id ? r.bucket_id : r.id;
			uint32_t addr = bucket_addr(j, o.rules);
			struct sluice_source_state st = {};
			if (!table.insert(bucket_id, reinterpret_cast<const uint8_t *>(&addr), st, cfg.hash_seed))
				continue;
			struct sluice_throttle_key k = {};
			k.bucket_id = bucket_id;
			k.family = SLUICE_TABLE_V4;
			std::memcpy(k.addr, &addr, 4);
			throttled_.push_back(k);
		}
		// The counters of every bucket placed, where the data plane counts:
		// in the mapped table, a way holding a key.
		src4_ = std::make_unique<MappedArray>(maps_.src4.get());
		src4_->check_writable();
		for (uint32_t s = 0; s < src4_->size(); s++) {
			auto *set = src4_->at<struct sluice_set_v4>(s);
			for (int w = 0; w < SLUICE_SET_WAYS; w++) {
				uint64_t key = __atomic_load_n(&set->tag.key[w], __ATOMIC_ACQUIRE);
				if (key != SLUICE_KEY_EMPTY && key != SLUICE_KEY_BUSY)
					counters_.push_back(&set->way[w].cnt);
			}
		}
		if (counters_.size() != o.sources)
			throw Error("found " + std::to_string(counters_.size()) + " buckets in the table, placed " +
				    std::to_string(o.sources));
		drops_.resize(throttled_.size());
		feed(0);
	}

	void tear_down() noexcept
	{
		agent_.reset();
		src4_.reset();
		maps_ = MapSet{};
		try {
			auto lock = inst_.lock(true);
			inst_.unload();
		} catch (...) {
		}
		rmdir(pin_dir_.c_str());
		if (!run_dir_.empty()) {
			std::error_code ignored;
			std::filesystem::remove_all(run_dir_, ignored);
		}
	}

	std::string pin_dir_, run_dir_;
	Instance inst_;
	MapSet maps_;
	std::unique_ptr<MappedArray> src4_;
	std::vector<struct sluice_source_counters *> counters_;
	std::vector<struct sluice_throttle_key> throttled_;
	std::vector<struct sluice_throttle> drops_;
	std::unique_ptr<AgentProcess> agent_;
};

/// Feeds every host every FEED_EVERY from a thread; counts its own CPU.
class Feeder {
public:
	explicit Feeder(std::vector<std::unique_ptr<Host>> &hosts)
		: thread_([this, &hosts] {
			  Clock::time_point next = Clock::now();
			  for (uint64_t n = 1; !stop_; n++) {
				  uint64_t c0 = monotonic_ns(CLOCK_THREAD_CPUTIME_ID);
				  try {
					  for (auto &h : hosts)
						  h->feed(n);
				  } catch (const std::exception &e) {
					  std::lock_guard hold(mutex_);
					  error_ = e.what();
				  }
				  cpu_ns_ += monotonic_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
				  next = std::max(next + FEED_EVERY, Clock::now() - FEED_EVERY); // no catching up in a rush
				  std::this_thread::sleep_until(next);
			  }
		  })
	{
	}
	~Feeder()
	{
		stop_ = true;
		thread_.join();
	}
	double cpu_seconds() const { return double(cpu_ns_.load()) / 1e9; }
	/// Throws what went wrong in the thread, if anything did.
	void check() const
	{
		std::lock_guard hold(mutex_);
		if (!error_.empty())
			throw Error("feeding the buckets: " + error_);
	}

private:
	std::atomic<bool> stop_{false};
	std::atomic<uint64_t> cpu_ns_{0};
	mutable std::mutex mutex_;
	std::string error_;
	std::thread thread_;
};

/// CPU seconds (user and system) of a process and of each of its threads.
struct ProcessCpu {
	double total = 0;
	std::map<int, std::pair<std::string, double>> threads; ///< by thread id: name, seconds
};

/// utime + stime of a /proc/.../stat file, in seconds.
double stat_cpu_seconds(const std::string &path)
{
	std::ifstream in(path);
	std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	size_t paren = text.rfind(')'); // the command name may hold spaces
	if (paren == std::string::npos)
		throw Error("cannot read " + path);
	std::istringstream fields(text.substr(paren + 2));
	std::vector<std::string> f;
	for (std::string s; fields >> s;)
		f.push_back(s);
	if (f.size() < 13)
		throw Error("cannot read " + path);
	// After the name: state is field 3, utime field 14, stime field 15.
	return double(std::stoull(f[11]) + std::stoull(f[12])) / double(sysconf(_SC_CLK_TCK));
}

ProcessCpu process_cpu(pid_t pid)
{
	ProcessCpu c;
	std::string dir = "/proc/" + std::to_string(pid);
	c.total = stat_cpu_seconds(dir + "/stat");
	for (const auto &e : std::filesystem::directory_iterator(dir + "/task")) {
		try {
			std::string name;
			std::getline(std::ifstream(e.path() / "comm"), name);
			c.threads[std::stoi(e.path().filename().string())] = {
				name, stat_cpu_seconds((e.path() / "stat").string())};
		} catch (const std::exception &) {
			// a thread that ended meanwhile
		}
	}
	return c;
}

/// A scrape's figures of the sync.
struct SyncSample {
	double rounds_ok = 0, rounds_failed = 0, round_seconds_total = 0, commands = 0, synced = 0, hosts = 0,
	       degraded = 0, last_round = 0;
};

/// The first sample of a family whatever its labels; NaN if absent.
double any_sample(const std::string &scrape, const std::string &name)
{
	std::smatch m;
	if (std::regex_search(scrape, m, std::regex("(^|\n)" + name + "(\\{[^}]*\\})? ([^\n]+)")))
		return std::stod(m[3]);
	return NAN;
}

SyncSample sync_sample(const AgentProcess &agent)
{
	std::string s = agent.scrape();
	SyncSample x;
	x.rounds_ok = metric_sample(s, "sluice_cluster_rounds_total{result=\"ok\"}");
	x.rounds_failed = metric_sample(s, "sluice_cluster_rounds_total{result=\"failed\"}");
	x.round_seconds_total = metric_sample(s, "sluice_cluster_round_seconds_total");
	x.commands = metric_sample(s, "sluice_cluster_store_commands_total");
	x.synced = metric_sample(s, "sluice_cluster_synced_buckets");
	x.hosts = metric_sample(s, "sluice_cluster_hosts");
	x.degraded = any_sample(s, "sluice_cluster_degraded");
	x.last_round = metric_sample(s, "sluice_cluster_round_seconds");
	if (std::isnan(x.rounds_ok) || std::isnan(x.round_seconds_total))
		throw Error("the agent does not export the sync's round figures");
	return x;
}

/// What Redis counted, from INFO.
struct RedisSample {
	double commands = 0;     ///< total_commands_processed: those scripts run included
	double evalsha = 0, evalsha_usec = 0, cpu = 0;
};

RedisSample redis_sample(const RedisServer &redis)
{
	std::string info = redis.checked({"INFO", "all"}).str;
	RedisSample r;
	std::istringstream in(info);
	for (std::string line; std::getline(in, line);) {
		if (!line.empty() && line.back() == '\r')
			line.pop_back();
		size_t colon = line.find(':');
		if (colon == std::string::npos)
			continue;
		std::string key = line.substr(0, colon), value = line.substr(colon + 1);
		if (key == "total_commands_processed")
			r.commands = std::stod(value);
		else if (key == "used_cpu_sys" || key == "used_cpu_user")
			r.cpu += std::stod(value);
		else if (key.rfind("cmdstat_", 0) == 0) {
			std::smatch m;
			if (!std::regex_search(value, m, std::regex("calls=([0-9]+),usec=([0-9]+)")))
				continue;
			if (key == "cmdstat_evalsha" || key == "cmdstat_eval") {
				r.evalsha += std::stod(m[1]);
				r.evalsha_usec += std::stod(m[2]);
			}
		}
	}
	return r;
}

/// One configuration's figures.
struct SyncResult {
	int hosts = 0;
	double reach_seconds = 0, synced_start = 0, synced_end = 0, window = 0;
	double rounds_per_s = 0, mean_round_ms = 0, last_round_ms = 0, commands_per_round = 0, failed = 0;
	double agent_cpu = 0, agent_cpu_max = 0, cpu_ms_per_round = 0;
	std::vector<std::pair<std::string, double>> busiest_threads; ///< the first agent's: name, share of one CPU
	double redis_commands = 0, evalsha = 0, evalsha_usec = 0, redis_cpu = 0;
	double store_hosts = 0, degraded = 0, feeder_cpu = 0;
};

SyncResult run_sync(const Options &o, int nhosts)
{
	SyncResult res;
	res.hosts = nhosts;
	std::vector<std::unique_ptr<Host>> hosts;
	double t_setup = wall_seconds();
	for (int i = 0; i < nhosts; i++)
		hosts.push_back(std::make_unique<Host>(i + 1, o));
	std::cerr << "sluice-cluster-bench: " << nhosts << " host(s) set up in " << fixed(wall_seconds() - t_setup, 1)
		  << " s\n";
	Feeder feeder(hosts);
	RedisServer redis;
	for (int i = 0; i < nhosts; i++)
		hosts[i]->start_agent(redis.endpoint(), i + 1, o.interval);

	// Until every agent syncs every bucket, or stops finding more.
	double t0 = wall_seconds(), grew_at = t0, best = 0;
	std::string progress;
	for (;;) {
		nap(milliseconds(500));
		feeder.check();
		double least = INFINITY;
		progress.clear();
		for (auto &h : hosts) {
			if (!h->agent().child().running())
				throw Error("the agent exited: " + h->agent().child().seen());
			double synced = sync_sample(h->agent()).synced;
			least = std::min(least, synced);
			progress += " " + fixed(synced, 0);
		}
		double now = wall_seconds();
		if (least > best) {
			best = least;
			grew_at = now;
		}
		if (least >= o.sources || now - grew_at > 5 || now - t0 > 60)
			break;
	}
	res.reach_seconds = wall_seconds() - t0;
	std::cerr << "sluice-cluster-bench: buckets synced per agent:" << progress << " after "
		  << fixed(res.reach_seconds, 1) << " s\n";
	nap(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.settle)));

	// The window: scrapes only at its ends, outside the CPU counted.
	std::vector<SyncSample> s0, s1;
	std::vector<ProcessCpu> c0, c1;
	for (auto &h : hosts)
		s0.push_back(sync_sample(h->agent()));
	for (auto &h : hosts)
		c0.push_back(process_cpu(h->agent().child().pid()));
	RedisSample r0 = redis_sample(redis);
	double feed0 = feeder.cpu_seconds(), w0 = wall_seconds();
	nap(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds)));
	double w1 = wall_seconds(), feed1 = feeder.cpu_seconds();
	RedisSample r1 = redis_sample(redis);
	for (auto &h : hosts)
		c1.push_back(process_cpu(h->agent().child().pid()));
	for (auto &h : hosts)
		s1.push_back(sync_sample(h->agent()));
	feeder.check();

	double dt = w1 - w0;
	res.window = dt;
	res.synced_start = res.synced_end = INFINITY;
	double rounds = 0, round_seconds = 0, commands = 0, cpu = 0, last = 0;
	for (int i = 0; i < nhosts; i++) {
		double n = s1[i].rounds_ok + s1[i].rounds_failed - s0[i].rounds_ok - s0[i].rounds_failed;
		rounds += n;
		round_seconds += s1[i].round_seconds_total - s0[i].round_seconds_total;
		commands += s1[i].commands - s0[i].commands;
		res.failed += s1[i].rounds_failed - s0[i].rounds_failed;
		double c = c1[i].total - c0[i].total;
		cpu += c;
		res.agent_cpu_max = std::max(res.agent_cpu_max, c / dt);
		res.synced_start = std::min(res.synced_start, s0[i].synced);
		res.synced_end = std::min(res.synced_end, s1[i].synced);
		last = std::max(last, s1[i].last_round);
		res.store_hosts = std::max(res.store_hosts, s1[i].hosts);
		res.degraded = std::max(res.degraded, s1[i].degraded);
	}
	for (const auto &[tid, thread] : c1[0].threads) {
		auto before = c0[0].threads.find(tid);
		double d = thread.second - (before == c0[0].threads.end() ? 0 : before->second.second);
		if (d > 0.005 * dt)
			res.busiest_threads.emplace_back(thread.first, d / dt);
	}
	std::sort(res.busiest_threads.begin(), res.busiest_threads.end(),
		  [](const auto &a, const auto &b) { return a.second > b.second; });
	res.rounds_per_s = rounds / nhosts / dt;
	res.mean_round_ms = rounds ? round_seconds / rounds * 1000 : 0;
	res.last_round_ms = last * 1000;
	res.commands_per_round = rounds ? commands / rounds : 0;
	res.agent_cpu = cpu / nhosts / dt;
	res.cpu_ms_per_round = rounds ? cpu / rounds * 1000 : 0;
	res.redis_commands = (r1.commands - r0.commands) / dt;
	res.evalsha = (r1.evalsha - r0.evalsha) / dt;
	res.evalsha_usec = r1.evalsha > r0.evalsha ? (r1.evalsha_usec - r0.evalsha_usec) / (r1.evalsha - r0.evalsha) : 0;
	res.redis_cpu = (r1.cpu - r0.cpu) / dt;
	res.feeder_cpu = (feed1 - feed0) / dt;
	for (auto &h : hosts)
		if (h->agent().child().stop(SIGTERM) != 0)
			std::cerr << "sluice-cluster-bench: an agent exited with an error: " << h->agent().child().seen();
	return res;
}

void part_sync(const Options &o)
{
	std::cout << "\n## 1. The cluster sync at " << o.rules << " rules and " << o.sources << " buckets per host\n\n"
		  << "Each host is a program loaded and pinned in its own directory (attached nowhere) with " << o.rules
		  << " cluster rules (--rate " << RULE_RATE << " --fallback " << RULE_FALLBACK << ", one /24 each) and "
		  << o.sources << " IPv4 buckets spread over them round robin, all dropping now: each has an entry in the "
		  << "throttled-source table whose last drop is kept at most " << FEED_EVERY.count() * NOTE_EVERY
		  << " ms old, and its counters grow every " << FEED_EVERY.count()
		  << " ms: 100 packets passed a second (the local share) and 20-200 dropped. One redis-server and the real `sluice agent --sync-interval "
		  << o.interval << "` per host on loopback. Figures over " << fixed(o.seconds, 0)
		  << " s once every agent synced its buckets (and " << fixed(o.settle, 0) << " s more); "
		  << "per agent where it says so, else summed. Everything shares this machine's "
		  << sysconf(_SC_NPROCESSORS_ONLN) << " CPUs.\n\n";
	std::vector<SyncResult> results;
	for (int n : o.hosts)
		results.push_back(run_sync(o, n));

	std::cout << "| figure |";
	for (const auto &r : results)
		std::cout << " " << r.hosts << (r.hosts == 1 ? " host" : " hosts") << " |";
	std::cout << "\n| --- |";
	for (size_t i = 0; i < results.size(); i++)
		std::cout << " ---: |";
	std::cout << "\n";
	auto row = [&](const std::string &name, const std::function<std::string(const SyncResult &)> &cell) {
		std::cout << "| " << name << " |";
		for (const auto &r : results)
			std::cout << " " << cell(r) << " |";
		std::cout << "\n";
	};
	row("buckets synced per agent at the window's start / end (least)", [&](auto &r) {
		return fixed(r.synced_start, 0) + " / " + fixed(r.synced_end, 0) + " of " + std::to_string(o.sources);
	});
	row("seconds until synced (from the agents' start)", [](auto &r) { return fixed(r.reach_seconds, 1); });
	row("hosts the store counts", [](auto &r) { return fixed(r.store_hosts, 0); });
	row("sync rounds per second, per agent", [](auto &r) { return fixed(r.rounds_per_s, 2); });
	row("failed rounds in the window (all agents)", [](auto &r) { return fixed(r.failed, 0); });
	row("mean time per round, ms", [](auto &r) { return fixed(r.mean_round_ms, 1); });
	row("last round, ms (slowest agent)", [](auto &r) { return fixed(r.last_round_ms, 1); });
	row("store commands per round (EVALSHA)", [](auto &r) { return fixed(r.commands_per_round, 0); });
	row("agent CPU, % of one CPU (mean / most)", [](auto &r) {
		return fixed(100 * r.agent_cpu, 1) + " / " + fixed(100 * r.agent_cpu_max, 1);
	});
	row("agent CPU per round, ms (every thread)", [](auto &r) { return fixed(r.cpu_ms_per_round, 1); });
	row("first agent's busiest threads, % of one CPU", [](auto &r) {
		std::string s;
		for (size_t i = 0; i < r.busiest_threads.size() && i < 3; i++)
			s += (i ? ", " : "") + r.busiest_threads[i].first + " " +
			     fixed(100 * r.busiest_threads[i].second, 1);
		return s.empty() ? std::string("-") : s;
	});
	row("Redis: EVALSHA per second (the agents' commands)", [](auto &r) { return fixed(r.evalsha, 0); });
	row("Redis: commands per second, the scripts' own included", [](auto &r) { return fixed(r.redis_commands, 0); });
	row("Redis: µs per EVALSHA, in the server", [](auto &r) { return fixed(r.evalsha_usec, 1); });
	row("Redis: busy per round of one agent, ms", [](auto &r) {
		return fixed(r.evalsha_usec * r.commands_per_round / 1000, 1);
	});
	row("Redis CPU, % of one CPU", [](auto &r) { return fixed(100 * r.redis_cpu, 1); });
	// What Redis would be busy for if every agent made its round every interval.
	double interval_s = double(parse_duration_ns(o.interval, "--sync-interval")) / 1e9;
	row("Redis busy if every agent rounds every interval, % of one CPU", [&](auto &r) {
		return fixed(100 * r.evalsha_usec / 1e6 * r.commands_per_round * r.hosts / interval_s, 0);
	});
	row("degraded at the end", [](auto &r) { return std::string(r.degraded > 0 ? "yes" : "no"); });
	row("(this program feeding the buckets, % of one CPU)", [](auto &r) { return fixed(100 * r.feeder_cpu, 1); });
	std::cout << "\nAn agent sends one EVALSHA per rule per round (up to 500 buckets each) and one for the "
		     "host registry, and between rounds moves every granted bucket's arrival time every 5 ms "
		     "(cluster-apply). A round that takes longer than the interval delays the next: below one "
		     "round per interval, the agent or Redis is the bottleneck (the last two Redis rows tell "
		     "which).\n";
}

// ---- Part 2: the data plane.

constexpr const char *DP_SOURCE = "192.0.2.10";

/// What a run measures: the rule local or cluster, and whether its bucket's
/// arrival time is being shifted meanwhile, as the agent shifts it.
struct Subject {
	const char *name;
	Scope scope;
	bool shifted;
};
const Subject SUBJECTS[] = {{"local", Scope::local, false},
			    {"cluster", Scope::cluster, false},
			    {"cluster, shifted", Scope::cluster, true},
			    {"local again", Scope::local, false}};
constexpr size_t NSUBJECTS = sizeof(SUBJECTS) / sizeof(SUBJECTS[0]);

/// One program with one rule on 192.0.2.0/24, whose scope each run sets.
struct Verdict {
	const char *name;
	bool passing;
	std::unique_ptr<LoadedProgram> prog;
	MapSet maps;
	uint32_t bucket_id = 0;
	uint64_t seed = 0;
	Scope scope = Scope::local;
	std::vector<double> samples[NSUBJECTS]; ///< by subject, a sample per round

	Verdict(const char *n, bool pass) : name(n), passing(pass)
	{
		prog = std::make_unique<LoadedProgram>(TableSizes{4096, 64, 1024});
		maps = prog->maps();
		RuleSpec r;
		r.name = "dp";
		r.cidr = parse_cidr("192.0.2.0/24");
		// Passing: every packet passes, and so writes the bucket. Dropping:
		// nearly every packet is over the rate.
		r.rate = parse_rate(passing ? "1000000000/s" : "1000/s");
		r.burst = passing ? 100000000 : 0;
		InstalledRule in = RuleTable(maps).add(r);
		bucket_id = in.bucket_id ? in.bucket_id : in.id;
		uint32_t zero = 0;
		struct sluice_config cfg = {};
		if (bpf_map_lookup_elem(maps.config.get(), &zero, &cfg))
			throw_errno("cannot read the configuration", errno);
		seed = cfg.hash_seed;
	}
	/// The rule's scope: an edit that keeps its bucket (and the program,
	/// maps and memory), so that only the scope differs between runs.
	void set_scope(Scope to)
	{
		if (to == scope)
			return;
		RuleEdit e;
		e.scope = to;
		InstalledRule r = RuleTable(maps).edit("dp", e);
		if ((r.bucket_id ? r.bucket_id : r.id) != bucket_id)
			throw Error("changing the rule's scope restarted its bucket");
		scope = to;
	}
};

void part_dataplane(const Options &o)
{
	int cpu = int(sysconf(_SC_NPROCESSORS_ONLN)) - 1;
	std::cout << "\n## 2. The data plane: a cluster rule against the same rule local\n\n"
		  << "BPF_PROG_TEST_RUN of one IPv4 UDP frame from " << DP_SOURCE << ", " << o.repeat
		  << " repeats per run, pinned to CPU " << cpu << ". Two programs, each with one rule on "
		  << "192.0.2.0/24: passing (10^9/s, burst 10^8: every packet passes and writes its bucket) and "
		  << "dropping (1000/s: nearly every packet is over the rate). Before each run the rule's scope is "
		  << "set by an edit that keeps its bucket, so that local and cluster runs share the program, its "
		  << "maps and the bucket: only the scope differs. \"local again\" is a second local run in the "
		  << "same round, the difference two identical runs show; \"cluster, shifted\" has the bucket's "
		  << "arrival time granted every 5 ms from another CPU meanwhile, as the agent grants it (by a "
		  << "grant three times the local share). " << o.rounds << " rounds, the four runs in a rotating "
		  << "order. Per packet, in ns (the kernel reports whole ns per run): the median of the runs "
		  << "(min-max), its differences the median of each round's difference; and the minimum, the "
		  << "estimate a busy machine moves least.\n\n";
	pin_to_cpu(cpu);
	auto frame = build_packet({.src = DP_SOURCE});
	std::vector<std::unique_ptr<Verdict>> verdicts;
	verdicts.push_back(std::make_unique<Verdict>("passed", true));
	verdicts.push_back(std::make_unique<Verdict>("dropped", false));
	for (auto &v : verdicts)
		for (Scope scope : {Scope::cluster, Scope::local}) {
			v->set_scope(scope);
			test_run_ns(v->prog->prog_fd(), frame, o.repeat); // the bucket made, caches warm
		}

	// The agent's apply loop, for the bucket of the run in progress when
	// it is a shifted one.
	std::atomic<bool> stop{false};
	std::atomic<Verdict *> shifting{nullptr};
	std::atomic<uint64_t> shifts{0};
	std::vector<std::unique_ptr<SourceTable4>> tables;
	GrantLedger ledgers[2];
	for (auto &v : verdicts)
		tables.push_back(std::make_unique<SourceTable4>(v->maps.src4.get()));
	std::thread shifter([&] {
		try {
			if (cpu > 0)
				pin_to_cpu(0); // off the measuring CPU
		} catch (const std::exception &) {
		}
		in_addr a{};
		inet_pton(AF_INET, DP_SOURCE, &a);
		// (share / local - 1) * 5 ms, in ticks: a grant of three times the local share.
		int64_t ticks = int64_t(2 * 5000000LL) << SLUICE_TICK_SHIFT;
		while (!stop) {
			Verdict *v = shifting;
			if (v) {
				size_t which = v == verdicts[0].get() ? 0 : 1;
				SourceTable4 &t = *tables[which];
				// A grant in the grants map, as the agent writes it; the
				// program applies it at the bucket's next charge.
				if (auto p = t.grant_place(v->bucket_id, reinterpret_cast<uint8_t *>(&a), v->seed)) {
					write_grants(v->maps.grants.get(), {p->key},
						     {ledgers[which].grant(p->name, p->taken, ticks)});
					shifts++;
				}
			}
			std::this_thread::sleep_for(milliseconds(5));
		}
	});
	double t0 = wall_seconds();
	try {
		for (int r = 0; r < o.rounds; r++)
			for (auto &v : verdicts)
				for (size_t k = 0; k < NSUBJECTS; k++) {
					if (interrupted)
						throw Error("interrupted");
					size_t i = (size_t(r) + k) % NSUBJECTS;
					v->set_scope(SUBJECTS[i].scope);
					shifting = SUBJECTS[i].shifted ? v.get() : nullptr;
					v->samples[i].push_back(test_run_ns(v->prog->prog_fd(), frame, o.repeat));
					shifting = nullptr;
				}
	} catch (...) {
		stop = true;
		shifter.join();
		throw;
	}
	stop = true;
	shifter.join();
	double elapsed = wall_seconds() - t0;

	// Medians, and minima: interference only ever adds time, so the best of
	// many runs is the estimate least moved by a busy machine.
	std::cout << "| verdict | estimate | local ns | local again ns | cluster ns | cluster, shifted ns | "
		     "local again − local | cluster − local | shifted − local |\n"
		     "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
	const size_t columns[] = {0, 3, 1, 2};
	for (const auto &v : verdicts) {
		auto paired = [&](size_t i) {
			std::vector<double> d;
			for (size_t r = 0; r < v->samples[0].size(); r++)
				d.push_back(v->samples[i][r] - v->samples[0][r]);
			return median(d);
		};
		auto least = [&](size_t i) { return *std::min_element(v->samples[i].begin(), v->samples[i].end()); };
		std::cout << "| " << v->name << " | median (min-max) |";
		for (size_t i : columns) {
			auto [lo, hi] = std::minmax_element(v->samples[i].begin(), v->samples[i].end());
			std::cout << " " << fixed(median(v->samples[i]), 0) << " (" << fixed(*lo, 0) << "-" << fixed(*hi, 0)
				  << ") |";
		}
		std::cout << " " << fixed(paired(3), 0) << " | " << fixed(paired(1), 0) << " | " << fixed(paired(2), 0)
			  << " |\n| " << v->name << " | minimum |";
		for (size_t i : columns)
			std::cout << " " << fixed(least(i), 0) << " |";
		std::cout << " " << fixed(least(3) - least(0), 0) << " | " << fixed(least(1) - least(0), 0) << " | "
			  << fixed(least(2) - least(0), 0) << " |\n";
	}
	std::cout << "\nWhat each program decided (its own counters, warm-up runs included):";
	for (const auto &v : verdicts) {
		Stats st = collect_stats(v->maps, {});
		double passed = double(st.global[SLUICE_CNT_PASS_LIMIT].packets);
		double dropped = double(st.global[SLUICE_CNT_DROP_RATE].packets);
		std::cout << " " << v->name << ": " << fixed(100 * passed / (passed + dropped), 3) << " % passed;";
	}
	std::cout << " the granter wrote " << shifts.load() << " grants in " << fixed(elapsed, 1)
		  << " s of runs.\n";
	std::cout << "\nA cluster rule is compiled with its local share and decided by the walk, which "
		     "takes the agent's grants for its bucket from the grants map before charging it; a local "
		     "rule takes the fast path. Target: a cluster rule within 5 ns of a local one; read the "
		     "differences against \"local again\".\n";
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{"sluice-cluster-bench: what cluster rules cost: the sync (agent, Redis) and the data plane"};
	Options o;
	bool quick = false;
	std::string only;
	app.add_option("--rules", o.rules, "Cluster rules per host (default 1000)")->check(CLI::Range(1, 65536));
	app.add_option("--sources", o.sources, "Buckets per host, all dropping (default 10000)")
		->check(CLI::Range(1, 1000000));
	app.add_option("--hosts", o.hosts, "Host counts to run, one configuration each (default 1 3)")
		->check(CLI::Range(1, 8));
	app.add_option("--sync-interval", o.interval, "The agents' --sync-interval (default 100ms)");
	app.add_option("--seconds", o.seconds, "The measured window per configuration (default 10)")
		->check(CLI::Range(1.0, 600.0));
	app.add_option("--repeat", o.repeat, "Data plane: repeats per run (default 500000)")
		->check(CLI::Range(1000u, 100000000u));
	app.add_option("--rounds", o.rounds, "Data plane: rounds of runs (default 21)")->check(CLI::Range(1, 101));
	app.add_option("--only", only, "Run one part: sync or dataplane")->check(CLI::IsMember({"sync", "dataplane"}));
	app.add_flag("--quick", quick, "A smoke run: one host, 3 s, 3 rounds of 200000");
	CLI11_PARSE(app, argc, argv);
	if (quick) {
		o.hosts = {1};
		o.seconds = 3;
		o.settle = 1;
		o.rounds = 3;
		o.repeat = 200000;
	}
	o.sync = only != "dataplane";
	o.dataplane = only != "sync";
	if (o.rules > 65536 || uint64_t(o.sources) > uint64_t(o.rules) * 254) {
		std::cerr << "sluice-cluster-bench: at most 254 buckets per rule (one /24 each)\n";
		return 2;
	}
	struct sigaction sa = {};
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);

	try {
		parse_duration_ns(o.interval, "--sync-interval"); // refused before anything is set up
		if (geteuid() != 0)
			throw Error("run as root: the benchmark loads and pins the XDP program");
		set_libbpf_verbose(false);
		struct utsname u;
		uname(&u);
		std::cout << "# Cluster rules: what they cost\n\nKernel " << u.release << ", "
			  << sysconf(_SC_NPROCESSORS_ONLN) << " CPUs.\n";
		if (o.sync)
			part_sync(o);
		if (o.dataplane)
			part_dataplane(o);
		return 0;
	} catch (const std::exception &e) {
		std::cerr << "sluice-cluster-bench: " << e.what() << "\n";
		return 1;
	}
}
