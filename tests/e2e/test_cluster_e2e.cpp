// SPDX-License-Identifier: GPL-2.0-only
// Cluster rules end to end: three hosts on one machine (three network
// namespaces, each with its own sluice, pin directory and agent), one real
// redis-server or a three-master Redis Cluster on loopback, and one source
// that sends to all three hosts. What arrives at each host's socket is what
// its sluice passed; the test sums it per host and cluster-wide, in time
// windows, and holds it to the shared rate.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "child.h"
#include "fake_resp.h"
#include "process.h"
#include "redis_server.h"
#include "share_scripts.h"
#include "sockaddr.h"
#include "store.h"

using namespace sluice::test;
namespace resp = sluice::test::resp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr int HOSTS = 3;
constexpr double RATE = 300;      // per second, cluster-wide
constexpr int BURST = 30;         // cluster-wide; a host's is a third
constexpr uint16_t PORT = 9000;
constexpr double INTERVAL = 0.1;  // the agents' --sync-interval, seconds
constexpr double LEASE = 1.0;     // their default lease at that interval
const std::string SRC_NS = "slce-src", SOURCE = "10.242.0.1";

std::string host_ns(int i) { return "slce-h" + std::to_string(i + 1); }
std::string pin_dir(int i) { return "/sys/fs/bpf/slce_h" + std::to_string(i + 1); }
std::string run_dir(int i) { return "/tmp/slce-run-" + std::to_string(getpid()) + "-h" + std::to_string(i + 1); }
std::string host_addr(int i) { return "10.243." + std::to_string(i + 1) + ".1"; }

/// sluice on host i: inside its namespace, with its pin and run directories.
CommandResult on_host(int i, std::vector<std::string> args)
{
	args.insert(args.begin(), {"nsenter", "--net=/run/netns/" + host_ns(i), "env", "SLUICE_PIN_DIR=" + pin_dir(i),
				   "SLUICE_RUN_DIR=" + run_dir(i), SLUICE_BIN});
	return run_command(args);
}

/// Moves the calling thread into a network namespace (each thread has its own).
void enter_netns(const std::string &ns)
{
	int fd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET))
		throw std::runtime_error("cannot enter network namespace " + ns);
	close(fd);
}

/// A host's socket: when each datagram that sluice passed arrived.
class Receiver {
public:
	explicit Receiver(int host)
	{
		std::promise<void> bound;
		auto ready = bound.get_future();
		thread_ = std::thread([this, host, &bound] {
			enter_netns(host_ns(host));
			int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			sockaddr_storage a{};
			socklen_t len = 0;
			make_sockaddr(host_addr(host), PORT, a, len);
			timeval tv{0, 50000};
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			int big = 4 << 20;
			setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
			if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&a), len)) {
				bound.set_exception(std::make_exception_ptr(std::runtime_error("cannot bind the receiver")));
				return;
			}
			bound.set_value();
			char buf[2048];
			while (!stop_) {
				if (recv(fd, buf, sizeof(buf), 0) < 0)
					continue;
				std::lock_guard hold(mutex_);
				times_.push_back(Clock::now());
			}
			close(fd);
		});
		ready.get();
	}
	~Receiver()
	{
		stop_ = true;
		thread_.join();
	}
	/// Datagrams that arrived in [from, to).
	size_t between(Clock::time_point from, Clock::time_point to) const
	{
		std::lock_guard hold(mutex_);
		return size_t(std::count_if(times_.begin(), times_.end(),
					    [&](Clock::time_point t) { return t >= from && t < to; }));
	}

private:
	std::thread thread_;
	std::atomic<bool> stop_{false};
	mutable std::mutex mutex_;
	std::vector<Clock::time_point> times_;
};

/// A stretch of traffic: for `seconds`, `pps[i]` datagrams a second to host i.
struct Phase {
	double seconds;
	std::array<double, HOSTS> pps;
};

/// Sends the phases from SOURCE, one paced thread per host; returns when
/// each phase began (and, last, when the traffic ended). `at` runs actions
/// at given offsets from the start, on the caller's thread.
std::vector<Clock::time_point> send_phases(const std::vector<Phase> &phases,
					   const std::vector<std::pair<double, std::function<void()>>> &at = {})
{
	Clock::time_point start = Clock::now() + milliseconds(50);
	std::vector<Clock::time_point> begins;
	double offset = 0;
	for (const auto &p : phases) {
		begins.push_back(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offset)));
		offset += p.seconds;
	}
	begins.push_back(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offset)));
	std::vector<std::thread> threads;
	for (int h = 0; h < HOSTS; h++) {
		threads.emplace_back([&, h] {
			enter_netns(SRC_NS);
			int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			sockaddr_storage src{}, dst{};
			socklen_t slen = 0, dlen = 0;
			make_sockaddr(SOURCE, 0, src, slen);
			make_sockaddr(host_addr(h), PORT, dst, dlen);
			if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&src), slen))
				return;
			char payload[64] = {};
			for (size_t i = 0; i < phases.size(); i++) {
				double pps = phases[i].pps[h];
				if (pps <= 0)
					continue;
				auto gap = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / pps));
				for (auto due = begins[i]; due < begins[i + 1]; due += gap) {
					std::this_thread::sleep_until(due);
					sendto(fd, payload, sizeof(payload), 0, reinterpret_cast<sockaddr *>(&dst), dlen);
				}
			}
			close(fd);
		});
	}
	for (const auto &[when, action] : at) {
		std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
							      std::chrono::duration<double>(when)));
		action();
	}
	for (auto &t : threads)
		t.join();
	std::this_thread::sleep_for(milliseconds(200)); // the last datagrams arrive
	return begins;
}

Clock::time_point after(Clock::time_point t, double seconds)
{
	return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

class Cluster : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "the cluster tests load XDP and create namespaces: run as root";
		TearDown();
		shell("ip netns add " + SRC_NS);
		shell("ip -n " + SRC_NS + " link set lo up");
		shell("ip -n " + SRC_NS + " addr add " + SOURCE + "/32 dev lo");
		for (int i = 0; i < HOSTS; i++) {
			std::string n = std::to_string(i + 1), ns = host_ns(i), s_if = "slce-s" + n, h_if = "slce-h" + n;
			std::filesystem::create_directories(run_dir(i));
			shell("ip netns add " + ns);
			shell("ip -n " + ns + " link set lo up");
			shell("ip link add " + s_if + " netns " + SRC_NS + " address 02:00:00:00:e" + n +
			      ":01 type veth peer name " + h_if + " netns " + ns + " address 02:00:00:00:e" + n + ":02");
			shell("ip -n " + ns + " addr add 10.243." + n + ".1/24 dev " + h_if);
			shell("ip -n " + SRC_NS + " link set " + s_if + " up");
			shell("ip -n " + ns + " link set " + h_if + " up");
			shell("ip -n " + SRC_NS + " route add 10.243." + n + ".0/24 dev " + s_if + " src " + SOURCE);
			shell("ip -n " + SRC_NS + " neigh replace 10.243." + n + ".1 lladdr 02:00:00:00:e" + n + ":02 dev " +
			      s_if + " nud permanent");
			shell("ip -n " + ns + " route add " + SOURCE + "/32 dev " + h_if);
			shell("ip -n " + ns + " neigh replace " + SOURCE + " lladdr 02:00:00:00:e" + n + ":01 dev " + h_if +
			      " nud permanent");
			CommandResult r = on_host(i, {"attach", h_if});
			ASSERT_EQ(r.exit_code, 0) << r.err;
			r = on_host(i, {"rule", "add", "10.242.0.0/16", "--rate", std::to_string(int(RATE)) + "/s", "--burst",
					std::to_string(BURST), "--scope", "cluster", "--name", "shared"});
			ASSERT_EQ(r.exit_code, 0) << r.err;
			receivers_.push_back(std::make_unique<Receiver>(i));
		}
	}
	void TearDown() override
	{
		agents_.clear();
		receivers_.clear();
		for (int i = 0; i < HOSTS; i++) {
			run_command({"env", "SLUICE_PIN_DIR=" + pin_dir(i), SLUICE_BIN, "detach", "--all"});
			rmdir(pin_dir(i).c_str());
			rmdir((pin_dir(i) + "-lock").c_str()); // the instance's lock, beside it
			run_command({"ip", "netns", "del", host_ns(i)});
			std::filesystem::remove_all(run_dir(i));
		}
		run_command({"ip", "netns", "del", SRC_NS});
	}

	/// Starts the three agents with the store options and waits until each
	/// counts three hosts and has made its local share a third of the rate.
	void start_agents(const std::vector<std::string> &store)
	{
		for (int i = 0; i < HOSTS; i++) {
			std::vector<std::string> args = store;
			args.insert(args.end(), {"--node-id", "h" + std::to_string(i + 1), "--sync-interval", "100ms"});
			agents_.push_back(std::make_unique<AgentProcess>(
				SLUICE_BIN, args,
				std::vector<std::string>{"env", "SLUICE_PIN_DIR=" + pin_dir(i), "SLUICE_RUN_DIR=" + run_dir(i)}));
		}
		auto end = Clock::now() + std::chrono::seconds(15);
		for (int i = 0; i < HOSTS; i++) {
			while (metric(i, "sluice_cluster_rule_local_rate{rule=\"shared\"}") != RATE / HOSTS) {
				ASSERT_LT(Clock::now(), end) << "agent h" << i + 1 << " never learnt of three hosts:\n"
							     << agents_[i]->scrape() << agents_[i]->child().seen();
				std::this_thread::sleep_for(milliseconds(100));
			}
		}
	}
	double metric(int i, const std::string &series) { return metric_sample(agents_[i]->scrape(), series); }

	/// Datagrams passed cluster-wide, or by host `only`, in [from, to).
	size_t passed(Clock::time_point from, Clock::time_point to, int only = -1) const
	{
		size_t n = 0;
		for (int i = 0; i < HOSTS; i++)
			if (only < 0 || only == i)
				n += receivers_[i]->between(from, to);
		return n;
	}
	/// The rate passed in [from, to), per second.
	double rate(Clock::time_point from, Clock::time_point to, int only = -1) const
	{
		return double(passed(from, to, only)) / std::chrono::duration<double>(to - from).count();
	}

	/// One source at three times the rate, spread evenly: cluster-wide
	/// within 5 % of the rate (with the burst) over 10 s. `at` runs during it.
	void expect_the_shared_rate_over_ten_seconds(const std::vector<std::pair<double, std::function<void()>>> &at)
	{
		auto t = send_phases({{10, {RATE, RATE, RATE}}}, at);
		size_t got = passed(t[0], after(t[1], 0.2));
		double want = RATE * 10 + BURST;
		std::printf("one source at 3x %.0f/s over three hosts for 10 s: %zu passed cluster-wide "
			    "(%.0f/s; %zu, %zu, %zu per host), want %.0f within 5%%\n",
			    RATE, got, double(got) / 10, passed(t[0], t[1], 0), passed(t[0], t[1], 1),
			    passed(t[0], t[1], 2), want);
		EXPECT_NEAR(double(got), want, 0.05 * RATE * 10);
	}

	/// Traffic moving from one host to three and back: each time, within
	/// two sync intervals of the move, the hosts pass their fair shares.
	void expect_convergence_as_traffic_moves()
	{
		auto t = send_phases({{3, {3 * RATE, 0, 0}}, {3, {RATE, RATE, RATE}}, {3, {3 * RATE, 0, 0}}});
		const double settle = 2 * INTERVAL;
		double one = rate(after(t[0], settle), t[1], 0);
		double spread[HOSTS], total = rate(after(t[1], settle), t[2]);
		for (int i = 0; i < HOSTS; i++)
			spread[i] = rate(after(t[1], settle), t[2], i);
		double back = rate(after(t[2], settle), t[3], 0);
		std::printf("traffic on h1 alone: h1 passes %.0f/s; on all three: %.0f, %.0f, %.0f (%.0f/s cluster-wide); "
			    "back on h1: %.0f/s; each from two sync intervals after the move\n",
			    one, spread[0], spread[1], spread[2], total, back);
		EXPECT_NEAR(one, RATE, 0.05 * RATE) << "h1 alone does not get the whole rate";
		for (int i = 0; i < HOSTS; i++)
			EXPECT_NEAR(spread[i], RATE / HOSTS, 0.1 * RATE / HOSTS) << "h" << i + 1;
		EXPECT_NEAR(total, RATE, 0.05 * RATE);
		EXPECT_NEAR(back, RATE, 0.05 * RATE) << "h1 does not get the rate back";
	}

	std::vector<std::unique_ptr<Receiver>> receivers_;
	std::vector<std::unique_ptr<AgentProcess>> agents_;
};

std::vector<std::string> cluster_seeds(const RedisCluster &c)
{
	std::string seeds;
	for (const auto &s : c.seeds())
		seeds += (seeds.empty() ? "" : ",") + s;
	return {"--redis-cluster", seeds};
}

} // namespace

// Without the agents each host holds the rule on its own: three times the
// rate passes. With them, the rate holds cluster-wide.
TEST_F(Cluster, OneSourceOverThreeHostsIsHeldToTheSharedRate)
{
	auto t = send_phases({{2, {RATE, RATE, RATE}}});
	double alone = rate(t[0], t[1]);
	std::printf("without the agents: %.0f/s pass cluster-wide (3 x %.0f/s)\n", alone, RATE);
	EXPECT_GT(alone, 2.5 * RATE) << "each host alone should pass the whole rate";

	RedisServer redis;
	start_agents({"--redis", redis.endpoint()});
	expect_the_shared_rate_over_ten_seconds({});
}

TEST_F(Cluster, TrafficMovingBetweenHostsConvergesWithinTwoSyncIntervals)
{
	RedisServer redis;
	start_agents({"--redis", redis.endpoint()});
	expect_convergence_as_traffic_moves();
}

// Redis killed: each host keeps its share for the lease, then falls back to
// a third of the rate (never to nothing), and says it is degraded; Redis
// back: the shares return within two sync intervals.
TEST_F(Cluster, RedisDownFallsBackToTheLocalShareAndConvergesWhenItReturns)
{
	RedisServer redis;
	start_agents({"--redis", redis.endpoint()});
	double killed_at = 2, back_at = 5;
	auto t = send_phases({{8, {3 * RATE, 0, 0}}}, {{killed_at, [&] { redis.kill(); }},
						       {back_at, [&] { redis.restart(); }}});
	double before = rate(after(t[0], 2 * INTERVAL), after(t[0], killed_at));
	double held = rate(after(t[0], killed_at), after(t[0], killed_at + LEASE - 0.1));
	double fallback = rate(after(t[0], killed_at + LEASE + 0.2), after(t[0], back_at));
	// Back within a retry (at most an interval) and two sync intervals.
	double again = rate(after(t[0], back_at + 3 * INTERVAL), t[1]);
	std::printf("all traffic on h1: %.0f/s synced; Redis killed: %.0f/s for the lease, then %.0f/s (the "
		    "fallback, a third); Redis back: %.0f/s\n",
		    before, held, fallback, again);
	EXPECT_NEAR(before, RATE, 0.05 * RATE);
	EXPECT_NEAR(held, RATE, 0.1 * RATE) << "the share is kept until its lease ends";
	EXPECT_NEAR(fallback, RATE / HOSTS, 0.1 * RATE / HOSTS) << "no fallback, or a black hole";
	EXPECT_NEAR(again, RATE, 0.05 * RATE) << "no convergence after Redis returned";
	EXPECT_GE(metric(0, "sluice_cluster_degraded_total"), 1);
	EXPECT_EQ(metric(0, "sluice_cluster_degraded{store=\"redis " + redis.endpoint() + "\",node=\"h1\"}"), 0);
}

TEST_F(Cluster, StatusAndMetricsSayDegradedWhileRedisIsDown)
{
	RedisServer redis;
	start_agents({"--redis", redis.endpoint()});
	CommandResult r = on_host(0, {"status"});
	EXPECT_NE(r.out.find("cluster: ok, redis " + redis.endpoint() + " as node 'h1', 3 hosts"), std::string::npos)
		<< r.out;
	redis.kill();
	std::this_thread::sleep_for(milliseconds(500));
	r = on_host(0, {"status"});
	EXPECT_NE(r.out.find("cluster: degraded"), std::string::npos) << r.out;
	EXPECT_NE(r.out.find("connection refused"), std::string::npos) << r.out;
	EXPECT_EQ(metric(0, "sluice_cluster_degraded{store=\"redis " + redis.endpoint() + "\",node=\"h1\"}"), 1);
	r = on_host(0, {"status", "--json"});
	EXPECT_NE(nlohmann::json::parse(r.out)["cluster"].get<std::string>().find("degraded"), std::string::npos);
	redis.restart();
	std::this_thread::sleep_for(milliseconds(500));
	EXPECT_EQ(metric(0, "sluice_cluster_degraded{store=\"redis " + redis.endpoint() + "\",node=\"h1\"}"), 0);
}

// The same through a three-master Redis Cluster, with the rule's slot
// migrated to another master in the middle of the run.
TEST_F(Cluster, ThroughARedisClusterWithTheRulesSlotMigratedMidRun)
{
	RedisCluster redis(3);
	uint16_t slot = sluice::cluster::key_slot("{sluice:shared}");
	int to = (redis.owner_of(slot) + 1) % redis.size();
	start_agents(cluster_seeds(redis));
	expect_the_shared_rate_over_ten_seconds(
		{{3.0, [&] { redis.begin_migration(slot, to); }}, {5.0, [&] { redis.finish_migration(slot); }}});
	EXPECT_EQ(redis.owner_of(slot), to);
	expect_convergence_as_traffic_moves();
}

TEST_F(Cluster, ThroughARedisClusterWhoseMasterOfTheRuleGoesDown)
{
	RedisCluster redis(3);
	int owner = redis.owner_of(sluice::cluster::key_slot("{sluice:shared}"));
	start_agents(cluster_seeds(redis));
	// Restarting waits for the cluster to say it is whole again (Redis
	// holds a master back about 2 s); the shares return after that.
	Clock::time_point whole;
	// h1's sync figures as the first phase ends: if it reads short, they say
	// whether a round failed (degraded) or ran slow.
	std::string first_phase;
	auto t = send_phases({{9, {3 * RATE, 0, 0}}}, {{1.5,
							[&] {
								first_phase = agents_[0]->scrape();
								redis.kill(owner);
							}},
						       {4, [&] {
								redis.restart(owner);
								whole = Clock::now();
							}}});
	double before = rate(after(t[0], 2 * INTERVAL), after(t[0], 1.5));
	double fallback = rate(after(t[0], 1.5 + LEASE + 0.2), after(t[0], 4));
	ASSERT_LT(after(whole, 0.5), t[1]) << "the cluster took too long to be whole again";
	double again = rate(after(whole, 3 * INTERVAL), t[1]);
	std::printf("through the cluster, all traffic on h1: %.0f/s; the rule's master killed: %.0f/s after the "
		    "lease; restarted: %.0f/s\n",
		    before, fallback, again);
	EXPECT_NEAR(before, RATE, 0.05 * RATE)
		<< "h1 at the first phase's end: degraded_total "
		<< metric_sample(first_phase, "sluice_cluster_degraded_total") << ", rounds ok "
		<< metric_sample(first_phase, "sluice_cluster_rounds_total{result=\"ok\"}") << " and failed "
		<< metric_sample(first_phase, "sluice_cluster_rounds_total{result=\"failed\"}") << ", last round "
		<< metric_sample(first_phase, "sluice_cluster_round_seconds") << " s, rounds' total "
		<< metric_sample(first_phase, "sluice_cluster_round_seconds_total") << " s";
	EXPECT_NEAR(fallback, RATE / HOSTS, 0.1 * RATE / HOSTS);
	EXPECT_NEAR(again, RATE, 0.05 * RATE);
}

// A store that lies: it counts three hosts (so the local share is a third),
// and grants nan, inf, 1e300, negative amounts in turn. The agent applies
// none of it: a flood passes the local share, not the flood (it once passed
// about 970/s through a rule of 50/s), and a source that then sends within
// its limit passes all of it (a share of -1e300 once put it 2^63 ticks in
// debt). The agent says it is degraded, and why.
TEST_F(Cluster, ALyingStoreMovesNoBucketBeyondItsRule)
{
	const std::vector<std::string> lies = {"nan", "inf", "1e300", "-1e300", "-5", "1e999", "-nan", "301"};
	std::atomic<size_t> calls{0};
	FakeRespServer store([&](const std::vector<std::string> &args) {
		if ((args.at(0) == "EVALSHA" || args.at(0) == "EVAL") && args.size() > 3) {
			if (args[3] == sluice::cluster::hosts_key("sluice"))
				return resp::integer(HOSTS);
			std::vector<std::string> out;
			for (int k = 0; k < std::stoi(args[2]); k++)
				for (const std::string &e : {lies[calls++ % lies.size()], std::string("0"), std::string("3")})
					out.push_back(resp::bulk(e));
			return resp::array(out);
		}
		return resp::error("ERR unknown command");
	});
	agents_.push_back(std::make_unique<AgentProcess>(
		SLUICE_BIN,
		std::vector<std::string>{"--redis", store.endpoint(), "--node-id", "h1", "--sync-interval", "100ms"},
		std::vector<std::string>{"env", "SLUICE_PIN_DIR=" + pin_dir(0), "SLUICE_RUN_DIR=" + run_dir(0)}));
	auto end = Clock::now() + std::chrono::seconds(15);
	while (metric(0, "sluice_cluster_rule_local_rate{rule=\"shared\"}") != RATE / HOSTS) {
		ASSERT_LT(Clock::now(), end) << agents_[0]->scrape() << agents_[0]->child().seen();
		std::this_thread::sleep_for(milliseconds(100));
	}
	// A flood of three times the rate at h1, then the same source within
	// its local share (half of it).
	auto t = send_phases({{4, {3 * RATE, 0, 0}}, {3, {RATE / HOSTS / 2, 0, 0}}});
	double flood = rate(after(t[0], 0.5), t[1], 0);
	size_t sent_within = size_t(3 * RATE / HOSTS / 2), within = passed(t[1], after(t[2], 0.2), 0);
	std::printf("a store granting nan, inf, 1e300, -1e300 ...: a flood of %.0f/s passes %.0f/s (the local share "
		    "%.0f/s); then %zu of %zu sent within the limit pass; %zu share calls answered\n",
		    3 * RATE, flood, RATE / HOSTS, within, sent_within, calls.load());
	EXPECT_GT(calls.load(), 20u) << "the agent asked the store";
	EXPECT_NEAR(flood, RATE / HOSTS, 0.1 * RATE / HOSTS) << "a lie moved the bucket";
	EXPECT_GE(double(within), 0.97 * double(sent_within)) << "a source within its limit was put in debt";
	EXPECT_EQ(metric(0, "sluice_cluster_rule_share{rule=\"shared\"}"), 0) << "a lie was applied";
	EXPECT_EQ(metric(0, "sluice_cluster_degraded{store=\"redis " + store.endpoint() + "\",node=\"h1\"}"), 1);
	CommandResult r = on_host(0, {"status"});
	EXPECT_NE(r.out.find("no grant applied"), std::string::npos) << r.out;
}
