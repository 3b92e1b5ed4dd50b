// SPDX-License-Identifier: GPL-2.0-only
// End to end, the control plane's promises: a change killed at any instant
// leaves the old rule set or the new (what `rule list` shows is what real
// packets meet), edits in place keep ids, counters and buckets, layered
// limits all apply, capacity is what --max-rules says, and tables can be
// resized by `apply` keeping the rules.
#include <gtest/gtest.h>
#include <bpf/bpf.h>
#include <cstring>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "child.h"
#include "cli.h"
#include "process.h"
#include "sluice_abi.h"
#include "sockaddr.h"

using nlohmann::json;
using namespace sluice::test;

namespace {

const std::string SRC_NS = "sllc-src", DST_NS = "sllc-dst";
const std::string SRC_IF = "sllc-s", DST_IF = "sllc-d";
const std::string DST = "10.210.0.1";
constexpr uint16_t PORT = 9000;
// Probe sources: the first, a middle and the last address of the 20,000
// denied by the big rule set below.
const std::vector<std::string> PROBES = {"10.211.0.1", "10.211.39.17", "10.211.78.32"};
const std::string OUTSIDER = "10.212.0.1"; // covered by no rule at all
constexpr int BIG = 20000;

std::string pin_dir() { return test_pin_dir("sluice-lc"); }

/// The command line of sluice run in the receiving namespace.
std::vector<std::string> in_dst(std::vector<std::string> args) { return sluice_in_netns(DST_NS, std::move(args)); }

CommandResult cli_dst(std::vector<std::string> args) { return cli_in(DST_NS, std::move(args)); }

std::string big_address(int i) // 10.211.0.1 + i
{
	uint32_t a = (10u << 24 | 211u << 16) + 1 + uint32_t(i);
	return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." + std::to_string((a >> 8) & 255) +
	       "." + std::to_string(a & 255);
}

/// Runs a command in the background; kill_after() kills it with SIGKILL.
class Background {
public:
	explicit Background(const std::vector<std::string> &args)
	{
		std::vector<char *> argv;
		for (const auto &a : args)
			argv.push_back(const_cast<char *>(a.c_str()));
		argv.push_back(nullptr);
		pid_ = fork();
		if (pid_ == 0) {
			int devnull = open("/dev/null", O_RDWR);
			dup2(devnull, 0);
			dup2(devnull, 1);
			dup2(devnull, 2);
			execvp(argv[0], argv.data()); // nsenter execs sluice: the pid killed is sluice's
			_exit(127);
		}
	}
	/// Waits for it to exit; its exit code (-1 if a signal ended it).
	int wait()
	{
		int status = 0;
		if (pid_ < 0 || waitpid(pid_, &status, 0) != pid_)
			return -1;
		pid_ = -1;
		return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	}
	/// Kills it after `delay`; true if it was still running then.
	bool kill_after(std::chrono::microseconds delay)
	{
		std::this_thread::sleep_for(delay);
		int status = 0;
		bool running = waitpid(pid_, &status, WNOHANG) == 0;
		if (running) {
			kill(pid_, SIGKILL);
			waitpid(pid_, &status, 0);
		}
		return running;
	}

private:
	pid_t pid_ = -1;
};

class Lifecycle : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "end-to-end tests create namespaces and attach XDP: run as root";
		setenv("SLUICE_PIN_DIR", pin_dir().c_str(), 1);
		remove_topology();
		shell("ip netns add " + SRC_NS);
		shell("ip netns add " + DST_NS);
		// No IPv6 here: its neighbour discovery would land in the counters
		// the checks read.
		for (const auto &ns : {SRC_NS, DST_NS})
			shell("ip netns exec " + ns + " sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
			      "net.ipv6.conf.default.disable_ipv6=1");
		shell("ip link add " + SRC_IF + " netns " + SRC_NS + " address 02:00:00:00:01:01 type veth peer name " +
		      DST_IF + " netns " + DST_NS + " address 02:00:00:00:01:02");
		shell("ip -n " + DST_NS + " addr add " + DST + "/16 dev " + DST_IF);
		for (const auto &a : PROBES)
			shell("ip -n " + SRC_NS + " addr add " + a + "/32 dev " + SRC_IF);
		shell("ip -n " + SRC_NS + " addr add " + OUTSIDER + "/32 dev " + SRC_IF);
		for (const auto &ns : {SRC_NS, DST_NS})
			shell("ip -n " + ns + " link set lo up");
		shell("ip -n " + SRC_NS + " link set " + SRC_IF + " up");
		shell("ip -n " + DST_NS + " link set " + DST_IF + " up");
		shell("ip -n " + SRC_NS + " route add 10.210.0.0/16 dev " + SRC_IF);
		shell("ip -n " + SRC_NS + " neigh replace " + DST + " lladdr 02:00:00:00:01:02 dev " + SRC_IF +
		      " nud permanent");
	}

	void TearDown() override
	{
		remove_instance_expecting_nothing_left(pin_dir());
		remove_topology();
		for (const auto &f : files_)
			unlink(f.c_str());
	}

	static void remove_topology()
	{
		run_command({"ip", "netns", "del", SRC_NS});
		run_command({"ip", "netns", "del", DST_NS});
	}

	void attach(std::vector<std::string> extra = {})
	{
		std::vector<std::string> args = {"attach", DST_IF};
		args.insert(args.end(), extra.begin(), extra.end());
		CommandResult r = cli_dst(args);
		ASSERT_EQ(r.exit_code, 0) << r.err;
	}

	std::string write_file(const std::string &name, const std::string &text)
	{
		std::string path = "/tmp/sluice-lc-" + std::to_string(getpid()) + "-" + name;
		std::ofstream(path) << text;
		files_.push_back(path);
		return path;
	}

	/// Sends `n` datagrams from each source; returns the global verdict
	/// counters' packet increases (name -> packets).
	std::map<std::string, uint64_t> send_and_count(const std::vector<std::string> &sources, int n)
	{
		json before = cli_json({"stats", "--json"})["global"];
		for (const auto &src : sources)
			EXPECT_EQ(send_udp_in(SRC_NS, src, DST, PORT, n, 32), n) << src;
		// XDP has run for every frame once sendto returned on a veth.
		json after = cli_json({"stats", "--json"})["global"];
		std::map<std::string, uint64_t> delta;
		for (auto it = after.begin(); it != after.end(); ++it) {
			uint64_t d = it.value()["packets"].get<uint64_t>() - before[it.key()]["packets"].get<uint64_t>();
			if (d)
				delta[it.key()] = d;
		}
		return delta;
	}

	/// A rule's entry in `stats --json`.
	json rule_stats(const std::string &name)
	{
		json stats = cli_json({"stats", "--json"}); // kept: the loop reads into it
		for (const auto &r : stats["rules"])
			if (r["name"] == name)
				return r;
		ADD_FAILURE() << "no rule " << name << " in stats";
		return json::object();
	}

	void flood_and_upgrade(const std::string &binary);

	/// An earlier binary run in the receiving namespace; fails the test if
	/// it was not built.
	std::function<CommandResult(std::vector<std::string>)> older_cli(const std::string &binary)
	{
		EXPECT_EQ(access(binary.c_str(), X_OK), 0)
			<< binary << " is missing: scripts/build-previous.sh builds it (scripts/test.sh runs it)";
		return [binary](std::vector<std::string> args) {
			args.insert(args.begin(), {"nsenter", "--net=/run/netns/" + DST_NS, binary});
			return run_command(args);
		};
	}

	/// Pins `record` as the layout record (SLUICE_MAP_META) of the state
	/// under pin_dir(), in place of the one pinned there: state as another
	/// sluice leaves it.
	void pin_layout_record(const std::vector<uint8_t> &record)
	{
		const std::string meta = pin_dir() + "/" + SLUICE_STR(SLUICE_MAP_META);
		ASSERT_EQ(unlink(meta.c_str()), 0);
		int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "sluice_meta", 4, uint32_t(record.size()), 1, nullptr);
		ASSERT_GE(fd, 0);
		uint32_t zero = 0;
		ASSERT_EQ(bpf_map_update_elem(fd, &zero, record.data(), 0), 0);
		ASSERT_EQ(bpf_obj_pin(fd, meta.c_str()), 0);
		close(fd);
	}

	std::vector<std::string> rule_names()
	{
		std::vector<std::string> names;
		for (const auto &r : cli_json({"rule", "list", "--json"}))
			names.push_back(r["name"].get<std::string>());
		return names;
	}

	/// What a user would check after a killed change: the listed rules are
	/// exactly the old set or the new, and packets meet exactly those.
	void expect_old_or_new(size_t old_count, size_t new_count, const std::string &new_rule_on_probes,
			       const std::string &where)
	{
		SCOPED_TRACE(where);
		std::vector<std::string> names = rule_names();
		ASSERT_TRUE(names.size() == old_count || names.size() == new_count)
			<< names.size() << " rules listed: neither the old " << old_count << " nor the new " << new_count;
		bool is_new = names.size() == new_count;
		bool listed = std::find(names.begin(), names.end(), new_rule_on_probes) != names.end();
		EXPECT_EQ(listed, is_new);
		auto d = send_and_count(PROBES, 5);
		if (is_new)
			EXPECT_EQ(d["drop_deny"], 15u) << "the probes are listed as denied: every packet must drop";
		else
			EXPECT_EQ(d["drop_deny"], 0u) << "the probes are not listed: nothing may drop them";
		EXPECT_EQ(d["drop_deny"] + d["pass_no_match"] + d["pass_limit"], 15u) << "every probe is accounted";
	}

	std::vector<std::string> files_;
};

std::string big_import_file()
{
	std::string text;
	for (int i = 0; i < BIG; i++)
		text += big_address(i) + " --deny --name big" + std::to_string(i) + "\n";
	return text;
}

std::string policy_text(bool big, const std::string &rate)
{
	std::string text = "interfaces:\n  - name: " + DST_IF + "\ntables:\n  max_rules: 25000\nrules:\n"
			   "  - name: base\n    cidr: 10.213.0.0/16\n    rate: " + rate + "\n";
	if (big)
		for (int i = 0; i < BIG; i++)
			text += "  - {name: big" + std::to_string(i) + ", cidr: " + big_address(i) + ", action: deny}\n";
	return text;
}

/// Kill instants for a change that takes about `span`: spread over all of it
/// (van der Corput order, so any prefix of them covers it evenly), every
/// third one in its last 15 %, where it writes and switches. A kill that
/// comes after the change finished shortens the span for the next ones, so
/// that at least 30 land while the command runs, however fast this machine.
class KillPlan {
public:
	explicit KillPlan(std::chrono::microseconds span) : span_(span) {}
	std::chrono::microseconds next()
	{
		double u = 0, f = 0.5;
		for (unsigned n = ++k_; n; n >>= 1, f /= 2)
			u += (n & 1) * f;
		if (k_ % 3 == 0)
			u = 0.85 + 0.15 * u;
		return std::chrono::microseconds(static_cast<long long>(span_.count() * u));
	}
	void finished_before_kill() { span_ = span_ * 9 / 10; }
	bool more(int landed) const { return landed < 32 && k_ < 96; }

private:
	std::chrono::microseconds span_;
	unsigned k_ = 0;
};

} // namespace

TEST_F(Lifecycle, KillNineDuringAnImportLeavesTheOldRulesOrTheNewAndTheNextCommandWorks)
{
	attach({"--max-rules", "25000"});
	ASSERT_EQ(cli({"rule", "add", "10.213.0.0/16", "--rate", "1000/s", "--name", "base"}).exit_code, 0);
	std::string file = write_file("big.txt", big_import_file());

	// How long the import takes here, to spread the kills over it.
	auto t0 = std::chrono::steady_clock::now();
	ASSERT_EQ(cli({"rule", "import", file}).exit_code, 0);
	auto span = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
	ASSERT_EQ(cli({"rule", "flush"}).exit_code, 0);
	ASSERT_EQ(cli({"rule", "add", "10.213.0.0/16", "--rate", "1000/s", "--name", "base"}).exit_code, 0);

	int killed = 0, old_seen = 0, new_seen = 0;
	for (KillPlan plan(span); plan.more(killed);) {
		auto at = plan.next();
		std::string where = "killed " + std::to_string(at.count()) + " us into a " +
				    std::to_string(span.count()) + " us import";
		if (Background(in_dst({"rule", "import", file})).kill_after(at))
			killed++;
		else
			plan.finished_before_kill();
		size_t listed = rule_names().size();
		(listed == 1 ? old_seen : new_seen)++;
		expect_old_or_new(1, BIG + 1, "big0", where);
		// The next command works: the import again (nothing left to clean
		// up, no duplicate names), then a flush back to the start.
		CommandResult again = cli({"rule", "import", file});
		ASSERT_EQ(again.exit_code, 0) << where << ": " << again.err;
		expect_old_or_new(1, BIG + 1, "big0", where + ", then imported again");
		EXPECT_EQ(rule_names().size(), size_t(BIG + 1));
		ASSERT_EQ(cli({"rule", "flush"}).exit_code, 0);
		ASSERT_EQ(cli({"rule", "add", "10.213.0.0/16", "--rate", "1000/s", "--name", "base"}).exit_code, 0);
	}
	std::printf("import of %d rules took %lld us; %d kills landed while it ran; after them (and the runs that "
		    "finished first) %d times the old rules, %d times the new\n",
		    BIG, static_cast<long long>(span.count()), killed, old_seen, new_seen);
	EXPECT_GE(killed, 30) << "kills that landed while the import ran";
}

TEST_F(Lifecycle, KillNineDuringAnApplyLeavesTheOldPolicyOrTheNew)
{
	std::string small = write_file("small.yaml", policy_text(false, "1000/s"));
	std::string big = write_file("big.yaml", policy_text(true, "2000/s"));
	ASSERT_EQ(cli_dst({"apply", small}).exit_code, 0) << "apply loads and attaches";
	auto t0 = std::chrono::steady_clock::now();
	ASSERT_EQ(cli_dst({"apply", big}).exit_code, 0);
	auto span = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
	ASSERT_EQ(cli_dst({"apply", small}).exit_code, 0);

	int killed = 0, old_seen = 0, new_seen = 0;
	for (KillPlan plan(span); plan.more(killed);) {
		auto at = plan.next();
		std::string where = "killed " + std::to_string(at.count()) + " us into a " +
				    std::to_string(span.count()) + " us apply";
		if (Background(in_dst({"apply", big})).kill_after(at))
			killed++;
		else
			plan.finished_before_kill();
		(rule_names().size() == 1 ? old_seen : new_seen)++;
		expect_old_or_new(1, BIG + 1, "big0", where);
		// base's rate is the old policy's or the new's, with the rule set it belongs to.
		json rules = cli_json({"rule", "list", "--json"});
		for (const auto &r : rules) {
			if (r["name"] == "base") {
				EXPECT_EQ(r["rate"], rules.size() == 1 ? "1000/s" : "2000/s") << where;
			}
		}
		ASSERT_EQ(cli_dst({"apply", small}).exit_code, 0) << where;
		EXPECT_EQ(cli_dst({"apply", "--diff", small}).out, "no changes\n") << where;
	}
	std::printf("apply of %d rules took %lld us; %d kills landed while it ran; after them (and the runs that "
		    "finished first) %d times the old policy, %d times the new\n",
		    BIG + 1, static_cast<long long>(span.count()), killed, old_seen, new_seen);
	EXPECT_GE(killed, 30) << "kills that landed while the apply ran";
}

// An apply into nothing loaded loads the program while it parses the file and
// pins it only once it holds every rule: killed at any instant, it leaves
// nothing loaded or the whole rule set; the next apply completes it. (A kill
// within the pinning itself, a millisecond, may leave map pins with no program
// pin: not loaded, and removed by the next load.)
TEST_F(Lifecycle, KillNineDuringAnApplyThatLoadsLeavesNothingOrTheWholeRuleSet)
{
	std::string big = write_file("big.yaml", policy_text(true, "2000/s"));
	auto t0 = std::chrono::steady_clock::now();
	ASSERT_EQ(cli_dst({"apply", big}).exit_code, 0);
	auto span = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
	ASSERT_EQ(cli({"detach", "--all"}).exit_code, 0);

	int killed = 0, nothing = 0, whole = 0;
	for (KillPlan plan(span); plan.more(killed);) {
		auto at = plan.next();
		std::string where = "killed " + std::to_string(at.count()) + " us into a " +
				    std::to_string(span.count()) + " us apply";
		SCOPED_TRACE(where);
		if (Background(in_dst({"apply", big})).kill_after(at))
			killed++;
		else
			plan.finished_before_kill();
		CommandResult listed = cli({"rule", "list", "--json"});
		if (listed.exit_code != 0) {
			nothing++;
			EXPECT_NE(listed.err.find("not attached"), std::string::npos) << listed.err;
			EXPECT_NE(access((pin_dir() + "/prog").c_str(), F_OK), 0) << "no program pinned";
		} else {
			whole++;
			EXPECT_EQ(json::parse(listed.out).size(), BIG + 1u) << "every rule, or none";
		}
		ASSERT_EQ(cli_dst({"apply", big}).exit_code, 0) << "the next apply completes it";
		EXPECT_EQ(send_and_count(PROBES, 5)["drop_deny"], 15u) << "and the rules hold";
		ASSERT_EQ(cli({"detach", "--all"}).exit_code, 0);
	}
	std::printf("apply of %d rules into nothing loaded took %lld us; %d kills landed while it ran; after them "
		    "(and the runs that finished first) %d times nothing loaded, %d times every rule\n",
		    BIG + 1, static_cast<long long>(span.count()), killed, nothing, whole);
	EXPECT_GE(killed, 30) << "kills that landed while the apply ran";
}

TEST_F(Lifecycle, RuleSetKeepsTheIdCountersAndBucketWithNoGap)
{
	attach();
	ASSERT_EQ(cli({"rule", "add", PROBES[0], "--rate", "1/min", "--burst", "5", "--name", "lim"}).exit_code, 0);
	auto d = send_and_count({PROBES[0]}, 20);
	EXPECT_EQ(d["pass_limit"], 5u);
	EXPECT_EQ(d["drop_rate"], 15u);
	json before = cli_json({"rule", "list", "--json"})[0];

	// A new rate and burst: the bucket is empty and stays so; a del + add
	// would have let a fresh burst through.
	CommandResult set = cli({"rule", "set", "lim", "--rate", "2/min", "--burst", "6"});
	ASSERT_EQ(set.exit_code, 0) << set.err;
	d = send_and_count({PROBES[0]}, 20);
	EXPECT_LE(d["pass_limit"], 1u) << "at most the one packet's credit a larger burst adds";
	json after = cli_json({"rule", "list", "--json"})[0];
	EXPECT_EQ(after["id"], before["id"]);
	EXPECT_EQ(after["rate"], "2/min");
	json lim = rule_stats("lim");
	EXPECT_EQ(lim["passed_packets"].get<uint64_t>() + lim["dropped_packets"].get<uint64_t>(), 40u)
		<< "the counters went on";

	// A new algorithm restarts the bucket, and says so in `apply --diff`'s terms.
	ASSERT_EQ(cli({"rule", "set", "lim", "--algo", "gcra"}).exit_code, 0);
	d = send_and_count({PROBES[0]}, 20);
	EXPECT_EQ(d["pass_limit"], 6u) << "a restarted bucket starts full";

	// Bad edits: one line, non-zero, nothing changed.
	std::string list = cli({"rule", "list", "--json"}).out;
	for (const auto &args : std::vector<std::vector<std::string>>{{"rule", "set", "lim"},
								      {"rule", "set", "nosuch", "--rate", "1/s"},
								      {"rule", "set", "lim", "--rate", "0/s"},
								      {"rule", "set", "lim", "--algo", "fixed-window", "--burst", "3"}}) {
		CommandResult r = cli(args);
		EXPECT_NE(r.exit_code, 0) << args.back();
		EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
		EXPECT_EQ(cli({"rule", "list", "--json"}).out, list);
	}
}

TEST_F(Lifecycle, LayeredLimitsAllApplyInMatchOrder)
{
	attach();
	// Per source (UDP): a burst of 5, layered; per /16 (both probes below): a burst of 8.
	ASSERT_EQ(cli({"rule", "add", "10.211.0.0/16", "--rate", "1/min", "--burst", "5", "--proto", "udp",
		       "--continue", "--name", "per-source"})
			  .exit_code,
		  0);
	ASSERT_EQ(cli({"rule", "add", "10.211.0.0/16", "--rate", "1/min", "--burst", "8", "--per", "16", "--name",
		       "aggregate"})
			  .exit_code,
		  0);
	json list = cli_json({"rule", "list", "--json"});
	ASSERT_EQ(list.size(), 2u);
	EXPECT_EQ(list[0]["name"], "per-source") << "a protocol selector comes first at one prefix";

	auto a = send_and_count({PROBES[0]}, 20); // 5 pass both; the aggregate keeps 3
	auto b = send_and_count({PROBES[1]}, 20); // 5 pass its own, 3 of them the aggregate
	EXPECT_EQ(a["pass_limit"], 5u);
	EXPECT_EQ(a["drop_rate"], 15u);
	EXPECT_EQ(b["pass_limit"], 3u);
	EXPECT_EQ(b["drop_rate"], 17u);
	json stats = cli_json({"stats", "--json"});
	for (const auto &r : stats["rules"]) {
		if (r["name"] == "per-source") {
			EXPECT_EQ(r["passed_packets"], 10u) << "a layered rule counts what it passed on";
			EXPECT_EQ(r["dropped_packets"], 30u);
		} else {
			EXPECT_EQ(r["passed_packets"], 8u);
			EXPECT_EQ(r["dropped_packets"], 2u);
		}
	}
}

TEST_F(Lifecycle, MaxRulesHoldsThatManyScatteredAddressesAndRefusesOneMore)
{
	attach({"--max-rules", "2000"});
	std::mt19937 rng(7);
	std::set<uint32_t> addrs;
	while (addrs.size() < 2001)
		addrs.insert(uint32_t(rng()) | 0x01000000u); // anywhere, in 2,000 different /16s or so
	std::string text;
	int i = 0;
	for (uint32_t a : addrs) {
		if (i == 2000)
			break;
		text += std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." +
			std::to_string((a >> 8) & 255) + "." + std::to_string(a & 255) + " --deny --name s" +
			std::to_string(i++) + "\n";
	}
	CommandResult r = cli({"rule", "import", write_file("scattered.txt", text)});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	EXPECT_EQ(rule_names().size(), 2000u);
	r = cli({"rule", "add", "10.214.0.1", "--deny"});
	EXPECT_NE(r.exit_code, 0);
	EXPECT_NE(r.err.find("the rule table is full (2000 rules)"), std::string::npos) << r.err;
	// The way on names what exists: `apply` takes the size from the policy's tables:, it has no --max-rules.
	EXPECT_NE(r.err.find("with `sluice apply` (tables: max_rules)"), std::string::npos) << r.err;
	EXPECT_EQ(rule_names().size(), 2000u) << "a refused change leaves nothing behind";
	EXPECT_EQ(cli({"rule", "del", "s0"}).exit_code, 0) << "and the next command works";
	EXPECT_EQ(cli({"rule", "add", "10.214.0.1", "--deny"}).exit_code, 0);
}

TEST_F(Lifecycle, ApplyResizesTheTablesKeepingRulesAndCountersAndExportRoundTrips)
{
	std::string small = write_file("small.yaml", policy_text(false, "1000/s"));
	ASSERT_EQ(cli_dst({"apply", small}).exit_code, 0);
	ASSERT_EQ(cli({"rule", "add", PROBES[0], "--deny", "--name", "probe"}).exit_code, 0);
	send_and_count({PROBES[0]}, 7);
	ASSERT_EQ(cli({"rule", "add", PROBES[1], "--rate", "1/min", "--burst", "3", "--name", "held"}).exit_code, 0);
	EXPECT_EQ(send_and_count({PROBES[1]}, 5)["pass_limit"], 3u);

	// Export, change the table size, apply: the rules and counters stay.
	CommandResult exported = cli_dst({"export"});
	ASSERT_EQ(exported.exit_code, 0) << exported.err;
	EXPECT_EQ(cli_dst({"apply", "--diff", write_file("same.yaml", exported.out)}).out, "no changes\n");
	std::string resized = exported.out;
	ASSERT_NE(resized.find("max_rules: 25000"), std::string::npos) << resized;
	resized.replace(resized.find("max_rules: 25000"), 16, "max_rules: 30000\n  max_sources: 50000");
	CommandResult r = cli_dst({"apply", write_file("resized.yaml", resized)});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	json status = cli_json({"status", "--json"});
	EXPECT_EQ(status["max_rules"], 30000u);
	EXPECT_EQ(status["max_sources"], 50000u);
	EXPECT_EQ(rule_names(), (std::vector<std::string>{"probe", "held", "base"}));
	EXPECT_EQ(rule_stats("probe")["dropped_packets"], 7u) << "counters kept across the resize";
	EXPECT_EQ(send_and_count({PROBES[0]}, 3)["drop_deny"], 3u) << "and the rule enforced";
	EXPECT_EQ(send_and_count({PROBES[1]}, 4)["pass_limit"], 0u) << "a limited source's bucket moved to the resized table";
	EXPECT_EQ(cli_dst({"export"}).out, resized) << "export gives back what was applied";
}

// A deployment made by the previous release (sluice 0.2.7, state ABI 7) is
// refused by this binary with one line, then upgraded in place: every rule
// comes along field by field (every algorithm, both families, every option:
// `export` prints the same bytes), the limited sources stay limited under
// every algorithm, the denied one never gets a packet through while the
// program is replaced, the link and the counters (global, per rule, per
// source with the drops its CPUs still held) go on.
TEST_F(Lifecycle, UpgradeFromThePreviousReleaseKeepsEveryRuleLimitsCountersAndTheLinkWithNoGap)
{
	auto old_cli = older_cli(SLUICE_PREVIOUS_BIN);
	CommandResult version = old_cli({"--version"});
	ASSERT_EQ(version.out.rfind("sluice 0.2.7 (state ABI 7, ", 0), 0u) << version.out;
	// A source of its own for each algorithm charged before and after.
	const std::vector<std::pair<std::string, std::string>> algos = {
		{"10.211.100.1", "gcra"},
		{"10.211.100.2", "fixed-window"},
		{"10.211.100.3", "sliding-window"},
		{"10.211.100.4", "token-bucket"},
	};
	for (const auto &[addr, algo] : algos)
		shell("ip -n " + SRC_NS + " addr add " + addr + "/32 dev " + SRC_IF);
	ASSERT_EQ(old_cli({"attach", DST_IF}).exit_code, 0);
	ASSERT_EQ(old_cli({"rule", "add", PROBES[0], "--rate", "1/min", "--burst", "5", "--name", "lim"}).exit_code, 0);
	ASSERT_EQ(old_cli({"rule", "add", PROBES[1], "--deny", "--name", "deny"}).exit_code, 0);
	ASSERT_EQ(old_cli({"rule", "add", PROBES[2], "--rate", "2/min", "--algo", "sliding-log", "--name", "log"})
			  .exit_code,
		  0);
	// Windows of a day: no window ends within the test. A bucket of 3.
	for (const auto &[addr, algo] : algos) {
		std::vector<std::string> args = {"rule", "add", addr, "--rate", "3/day", "--algo", algo, "--name", algo};
		if (algo == "gcra" || algo == "token-bucket")
			args.insert(args.end(), {"--burst", "3"});
		CommandResult r = old_cli(args);
		ASSERT_EQ(r.exit_code, 0) << r.err;
	}
	// IPv6 rules of every algorithm and option (no IPv6 traffic here: the
	// rules themselves must come along).
	const std::vector<std::vector<std::string>> v6 = {
		{"2001:db8:1::/48", "--rate", "10/s", "--burst", "30", "--warmup", "30s", "--name", "v6tb"},
		{"2001:db8:2::/48", "--rate", "1mbit/s", "--algo", "gcra", "--per", "56", "--name", "v6gcra"},
		{"2001:db8:3::/64", "--rate", "100/min", "--algo", "fixed-window", "--proto", "tcp", "--dport", "80-443",
		 "--name", "v6fw"},
		{"2001:db8:4::/64", "--rate", "5/s", "--algo", "sliding-log", "--shadow", "--name", "v6log"},
		{"2001:db8:5::/64", "--rate", "50/s", "--algo", "sliding-window", "--continue", "--name", "v6sw"},
		{"2001:db8:6::/64", "--rate", "1000/s", "--scope", "cluster", "--fallback", "100/s", "--name", "v6cl"},
		{"2001:db8::/32", "--allow", "--proto", "icmp", "--name", "v6allow"},
	};
	for (auto args : v6) {
		args.insert(args.begin(), {"rule", "add"});
		CommandResult r = old_cli(args);
		ASSERT_EQ(r.exit_code, 0) << r.err;
	}
	EXPECT_EQ(send_udp_in(SRC_NS, PROBES[0], DST, PORT, 20, 32), 20);
	EXPECT_EQ(send_udp_in(SRC_NS, PROBES[2], DST, PORT, 6, 32), 6);
	for (const auto &[addr, algo] : algos)
		EXPECT_EQ(send_udp_in(SRC_NS, addr, DST, PORT, 6, 32), 6) << algo;
	CommandResult exported = old_cli({"export"});
	ASSERT_EQ(exported.exit_code, 0) << exported.err;
	CommandResult old_stats = old_cli({"stats", "--json"});
	ASSERT_EQ(old_stats.exit_code, 0) << old_stats.err;
	json global_before = json::parse(old_stats.out)["global"];

	CommandResult refused = cli_dst({"status"});
	EXPECT_NE(refused.exit_code, 0);
	EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
	EXPECT_NE(refused.err.find("run `sluice upgrade`"), std::string::npos) << refused.err;
	std::string old_link = run_command({"ip", "-n", DST_NS, "-d", "link", "show", DST_IF}).out;

	// A denied source floods while the program is replaced; a receiver
	// counts what arrives (nothing may: no instant without the program).
	int arrived = -1;
	std::thread receiver([&] { arrived = count_udp_arrivals(DST_NS, DST, PORT + 1, 1500); });
	std::atomic<bool> stop{false};
	std::atomic<int> flooded{0};
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	std::thread flood([&] {
		while (!stop)
			flooded += send_udp_in(SRC_NS, PROBES[1], DST, PORT + 1, 200, 32);
	});
	CommandResult up = cli_dst({"upgrade"});
	stop = true;
	flood.join();
	receiver.join();
	ASSERT_EQ(up.exit_code, 0) << up.err;
	EXPECT_GT(flooded.load(), 0);
	EXPECT_EQ(arrived, 0) << "of " << flooded.load() << " datagrams from the denied source during the upgrade";

	// Same link, now running this binary's program; every rule kept as it was.
	json status = cli_json({"status", "--json"});
	ASSERT_EQ(status["links"].size(), 1u);
	EXPECT_NE(old_link.find("prog/xdp id"), std::string::npos) << old_link;
	std::string new_link = run_command({"ip", "-n", DST_NS, "-d", "link", "show", DST_IF}).out;
	EXPECT_NE(new_link.find("prog/xdp id " + std::to_string(status["prog_id"].get<uint32_t>())), std::string::npos)
		<< new_link;
	EXPECT_EQ(cli_dst({"export"}).out, exported.out) << "every rule, field by field";
	EXPECT_EQ(status["max_v6_prefixes"], status["max_rules"]) << "0.2.7's IPv6 trie held max_rules prefixes a set";
	json global_after = cli_json({"stats", "--json"})["global"];
	for (const char *c : {"pass_limit", "drop_rate"})
		EXPECT_EQ(global_after[c]["packets"], global_before[c]["packets"]) << c << ": the global counters go on";

	// Every limited source is still limited (its bucket came along), and
	// the counters go on from the old program's.
	auto d = send_and_count({PROBES[0]}, 10);
	EXPECT_EQ(d["pass_limit"], 0u);
	EXPECT_EQ(d["drop_rate"], 10u);
	json lim = rule_stats("lim");
	EXPECT_EQ(lim["passed_packets"], 5u);
	EXPECT_EQ(lim["dropped_packets"], 25u);
	auto l = send_and_count({PROBES[2]}, 6);
	EXPECT_EQ(l["pass_limit"], 0u);
	EXPECT_EQ(l["drop_rate"], 6u);
	EXPECT_EQ(rule_stats("log")["passed_packets"], 2u);
	for (const auto &[addr, algo] : algos) {
		SCOPED_TRACE(algo);
		auto a = send_and_count({addr}, 3);
		EXPECT_EQ(a["pass_limit"], 0u);
		EXPECT_EQ(a["drop_rate"], 3u);
		json r = rule_stats(algo);
		EXPECT_EQ(r["passed_packets"], 3u);
		EXPECT_EQ(r["dropped_packets"], 6u);
	}
	// The source's own counters: the drops its CPUs still held in their
	// pending slots were settled into its bucket, once.
	json source, stats = cli_json({"stats", "--json"});
	for (const auto &s : stats["sources"])
		if (s["source"] == PROBES[0])
			source = s;
	ASSERT_FALSE(source.is_null()) << "no stats for " << PROBES[0] << " in " << stats.dump();
	EXPECT_EQ(source["passed_packets"], 5u);
	EXPECT_EQ(source["dropped_packets"], 25u) << "15 dropped before the upgrade, 10 after";
	std::printf("upgraded from sluice 0.2.7 while %d datagrams of a denied source were sent: %d arrived\n",
		    flooded.load(), arrived);
}

/// A deployment made by the previous release: a limit (whose source then
/// floods 20 packets: 5 pass), a deny and a wide limit, upgraded in place.
/// Rules, buckets and counters come along, exactly.
void Lifecycle::flood_and_upgrade(const std::string &binary)
{
	auto old_cli = older_cli(binary);
	ASSERT_EQ(old_cli({"attach", DST_IF}).exit_code, 0);
	ASSERT_EQ(old_cli({"rule", "add", PROBES[0], "--rate", "1/min", "--burst", "5", "--name", "lim"}).exit_code, 0);
	ASSERT_EQ(old_cli({"rule", "add", PROBES[1], "--deny", "--name", "deny"}).exit_code, 0);
	ASSERT_EQ(old_cli({"rule", "add", PROBES[2], "--rate", "1000/s", "--name", "wide"}).exit_code, 0);
	EXPECT_EQ(send_udp_in(SRC_NS, PROBES[0], DST, PORT, 20, 32), 20);

	CommandResult refused = cli_dst({"rule", "list"});
	EXPECT_NE(refused.exit_code, 0);
	EXPECT_NE(refused.err.find("run `sluice upgrade`"), std::string::npos) << refused.err;
	CommandResult up = cli_dst({"upgrade"});
	ASSERT_EQ(up.exit_code, 0) << up.err;
	EXPECT_EQ(rule_names(), (std::vector<std::string>{"lim", "deny", "wide"}));
	auto d = send_and_count({PROBES[0], PROBES[1]}, 10);
	EXPECT_EQ(d["pass_limit"], 0u) << "the limited source's bucket was not carried";
	EXPECT_EQ(d["drop_rate"], 10u);
	EXPECT_EQ(d["drop_deny"], 10u);
	json lim = rule_stats("lim");
	EXPECT_EQ(lim["passed_packets"], 5u);
	EXPECT_EQ(lim["dropped_packets"], 25u);
}

// Upgraded from the previous release, the state is this release's own: an
// edit goes in place, a rule can be made cluster-wide, and an upgrade within
// the release (same layout) keeps the counts and the limits.
TEST_F(Lifecycle, UpgradeFromThePreviousReleaseThenEditsInPlaceAndUpgradesAgainWithinTheRelease)
{
	flood_and_upgrade(SLUICE_PREVIOUS_BIN);

	CommandResult set = cli({"rule", "set", "deny", "--shadow"});
	ASSERT_EQ(set.exit_code, 0) << set.err;
	auto s = send_and_count({PROBES[1]}, 4);
	EXPECT_EQ(s["pass_shadow"], 4u);
	EXPECT_EQ(s["drop_deny"], 0u);
	EXPECT_EQ(send_and_count({PROBES[0]}, 3)["drop_rate"], 3u) << "the limited source stays limited";

	CommandResult scope = cli({"rule", "set", "lim", "--scope", "cluster"});
	ASSERT_EQ(scope.exit_code, 0) << scope.err;
	EXPECT_NE(scope.out.find("1/min (cluster)"), std::string::npos) << scope.out;
	EXPECT_EQ(send_and_count({PROBES[0]}, 3)["drop_rate"], 3u) << "made cluster-wide, the bucket stays limited";

	CommandResult again = cli_dst({"upgrade"});
	ASSERT_EQ(again.exit_code, 0) << again.err;
	json lim = rule_stats("lim");
	EXPECT_EQ(lim["passed_packets"], 5u);
	EXPECT_EQ(lim["dropped_packets"], 31u);
	EXPECT_EQ(send_and_count({PROBES[0]}, 2)["drop_rate"], 2u) << "still limited after a same-layout upgrade";
}

// State older than the previous release (ABI 1-6 of the 0.2 series, whose
// layout records this binary crafts in place of 0.2.7's, and 0.2's pin
// directory with no record) is refused by `upgrade`, and by every other
// command, with one line naming the release to go through; nothing changes:
// the same pins holding the same objects, the link on the old program, the
// record as it was, no staging directory; the old binary reads its state as
// before once its record is back.
TEST_F(Lifecycle, UpgradeRefusesStateOlderThanThePreviousReleaseWithOneLineAndChangesNothing)
{
	auto old_cli = older_cli(SLUICE_PREVIOUS_BIN);
	ASSERT_EQ(old_cli({"attach", DST_IF}).exit_code, 0);
	ASSERT_EQ(old_cli({"rule", "add", PROBES[1], "--deny", "--name", "deny"}).exit_code, 0);
	const std::string listed = old_cli({"rule", "list"}).out;
	const std::string meta = pin_dir() + "/" + SLUICE_STR(SLUICE_MAP_META);
	int real = bpf_obj_get(meta.c_str());
	ASSERT_GE(real, 0) << "0.2.7's layout record";
	auto snapshot = [&] {
		std::string pins = run_command({"find", pin_dir(), pin_dir() + "-lock", "-printf", "%P %i %m\n"}).out;
		std::string link = run_command({"ip", "-n", DST_NS, "-d", "link", "show", DST_IF}).out;
		return pins + link.substr(link.find("prog/xdp"));
	};
	struct Case {
		uint32_t record_size, abi;
		std::string made_by;
	};
	std::vector<Case> cases = {{16, 0, "sluice 0.2, which recorded no layout"}};
	for (uint32_t abi = 1; abi <= 6; abi++)
		cases.push_back({24, abi, "sluice 0.2.x (ABI " + std::to_string(abi) + ")"});
	for (const auto &c : cases) {
		SCOPED_TRACE(c.made_by);
		std::vector<uint8_t> record(c.record_size, 0x5a);
		std::memcpy(record.data(), &c.abi, 4);
		ASSERT_NO_FATAL_FAILURE(pin_layout_record(record));
		uint32_t zero = 0;
		const std::string before = snapshot();
		const std::string line = "sluice: this state was made by " + c.made_by +
					 "; upgrade it with sluice 0.2.7 first, then with this binary\n";
		for (const std::vector<std::string> &command :
		     {std::vector<std::string>{"upgrade"}, {"status"}, {"rule", "list"}}) {
			CommandResult r = cli_dst(command);
			EXPECT_NE(r.exit_code, 0) << command[0];
			EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
			EXPECT_EQ(r.err, line) << command[0];
		}
		EXPECT_EQ(snapshot(), before) << "the refused upgrade changed what is pinned or attached";
		EXPECT_NE(access((pin_dir() + "-next").c_str(), F_OK), 0) << "a staging directory was left";
		int again = bpf_obj_get(meta.c_str());
		ASSERT_GE(again, 0);
		std::vector<uint8_t> now(c.record_size);
		EXPECT_EQ(bpf_map_lookup_elem(again, &zero, now.data()), 0);
		EXPECT_EQ(now, record) << "the layout record was rewritten";
		close(again);
	}
	ASSERT_EQ(unlink(meta.c_str()), 0);
	ASSERT_EQ(bpf_obj_pin(real, meta.c_str()), 0);
	close(real);
	EXPECT_EQ(old_cli({"rule", "list"}).out, listed) << "0.2.7 reads its state as before";
	// This binary refuses 0.2.7's state, `detach --all` included: 0.2.7
	// removes it, or it would stay loaded after the test.
	CommandResult removed = old_cli({"detach", "--all"});
	EXPECT_EQ(removed.exit_code, 0) << removed.err;
}

// State this binary cannot read: the refusal says, in one line, what reads it
// or removes it, and `detach --all`, its way out, removes it, detaching the
// program. Layout records of every kind this binary meets: another build of
// this release (another layout hash under this ABI), a newer sluice's (a
// higher ABI), an older 0.2's (ABI 1 to 6, or no layout record), and the
// previous release's real state (0.2.7, ABI 7, which `upgrade` migrates).
TEST_F(Lifecycle, DetachAllRemovesStateOfAnyLayoutAndTheRefusalSaysWhatReadsIt)
{
	const std::string meta = pin_dir() + "/" + SLUICE_STR(SLUICE_MAP_META);
	struct Case {
		std::string kind, says;
		std::function<void(struct sluice_meta &)> change; ///< of this binary's record; none: 0.2.7's state
		uint32_t record_size = sizeof(struct sluice_meta);
	};
	std::vector<Case> cases = {
		{"another build of this release", "of another build of this release; `sluice upgrade` cannot migrate it",
		 [](struct sluice_meta &m) { m.layout_hash ^= 0x1000; }},
		{"a newer sluice", "of a newer sluice; use that sluice, or run `sluice detach --all` to start afresh",
		 [](struct sluice_meta &m) { m.abi_version += 1 + uint32_t(m.loaded_ns % 5); }},
		{"0.2.7 (ABI 7)", "run `sluice upgrade` to migrate it, or `sluice detach --all` to start afresh", nullptr},
	};
	for (uint32_t abi = 1; abi <= 6; abi++)
		cases.push_back({"0.2.x (ABI " + std::to_string(abi) + ")", "upgrade it with sluice 0.2.7 first",
				 [abi](struct sluice_meta &m) { m.abi_version = abi; }, 24});
	cases.push_back({"0.2 (no layout)", "sluice 0.2, which recorded no layout; upgrade it with sluice 0.2.7 first",
			 [](struct sluice_meta &m) { m.abi_version = 0; }, 16});
	for (const auto &c : cases) {
		SCOPED_TRACE(c.kind);
		if (c.change) {
			attach();
			ASSERT_EQ(cli({"rule", "add", PROBES[0], "--deny", "--name", "deny"}).exit_code, 0);
			int fd = bpf_obj_get(meta.c_str());
			ASSERT_GE(fd, 0);
			struct sluice_meta record = {};
			uint32_t zero = 0;
			ASSERT_EQ(bpf_map_lookup_elem(fd, &zero, &record), 0);
			close(fd);
			c.change(record);
			std::vector<uint8_t> raw(c.record_size, 0);
			std::memcpy(raw.data(), &record, std::min<size_t>(raw.size(), sizeof(record)));
			ASSERT_NO_FATAL_FAILURE(pin_layout_record(raw));
		} else {
			auto old_cli = older_cli(SLUICE_PREVIOUS_BIN);
			ASSERT_EQ(old_cli({"attach", DST_IF}).exit_code, 0);
			ASSERT_EQ(old_cli({"rule", "add", PROBES[0], "--deny", "--name", "deny"}).exit_code, 0);
		}
		EXPECT_EQ(send_udp_in(SRC_NS, PROBES[0], DST, PORT, 3, 32), 3);
		for (const std::vector<std::string> &command : {std::vector<std::string>{"status"}, {"rule", "list"}}) {
			CommandResult r = cli_dst(command);
			EXPECT_NE(r.exit_code, 0) << command[0];
			EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
			EXPECT_NE(r.err.find(c.says), std::string::npos) << command[0] << ": " << r.err;
		}
		CommandResult removed = cli_dst({"detach", "--all"});
		ASSERT_EQ(removed.exit_code, 0) << removed.err;
		EXPECT_NE(removed.out.find("sluice detached from 1 place (" + DST_IF + ") and unloaded"), std::string::npos)
			<< removed.out;
		EXPECT_NE(access(pin_dir().c_str(), F_OK), 0) << "the pin directory is left";
		std::string link = run_command({"ip", "-n", DST_NS, "-d", "link", "show", DST_IF}).out;
		EXPECT_EQ(link.find("prog/xdp"), std::string::npos) << "a program is left on the interface: " << link;
	}
}

// What an operator checks after `detach --all`: nothing of Sluice's is left in
// bpffs, neither the pin directory nor the lock directory beside it. A second
// `detach --all` has nothing to remove, says so, succeeds and makes nothing;
// one run where an earlier sluice left both directories empty removes them.
TEST_F(Lifecycle, DetachAllLeavesNothingInBpffsAndASecondMakesNothing)
{
	const std::string lock = pin_dir() + "-lock";
	auto nothing_left = [&](const std::string &after) {
		EXPECT_NE(access(pin_dir().c_str(), F_OK), 0) << "the pin directory is left after " << after;
		EXPECT_NE(access(lock.c_str(), F_OK), 0) << "the lock directory is left after " << after;
	};
	attach();
	ASSERT_EQ(cli({"rule", "add", PROBES[0], "--deny", "--name", "deny"}).exit_code, 0);
	CommandResult first = cli({"detach", "--all"});
	ASSERT_EQ(first.exit_code, 0) << first.err;
	nothing_left("detach --all");
	for (int round = 0; round < 2; round++) {
		if (round == 1) { // as an earlier sluice's `detach --all` left them
			ASSERT_EQ(mkdir(pin_dir().c_str(), 0700), 0);
			ASSERT_EQ(mkdir(lock.c_str(), 0700), 0);
		}
		CommandResult again = cli({"detach", "--all"});
		EXPECT_EQ(again.exit_code, 0) << again.err;
		EXPECT_EQ(again.out, "nothing to remove: sluice is not loaded under " + pin_dir() + "\n");
		nothing_left(round ? "detach --all on empty directories" : "a second detach --all");
	}
	// And the next attach makes the instance anew.
	attach();
	EXPECT_EQ(send_and_count({PROBES[0]}, 3)["drop_deny"], 0u) << "the rules went with the first detach --all";
}

// `detach --all` leaves nothing of the program's in the run directory
// either: the event readers' locks, the records of retired rules and of
// counters a reset zeroed on CPUs' accounts (the locks and reset records
// used to stay, one set per program loaded), and then the directory itself.
TEST_F(Lifecycle, DetachAllLeavesNothingOfTheProgramInTheRunDirectory)
{
	attach();
	const std::string run_dir = cli_json({"status", "--json"})["run_dir"];
	ASSERT_FALSE(run_dir.empty());
	ASSERT_EQ(cli({"rule", "add", "10.211.0.0/16", "--rate", "1/h", "--burst", "2", "--name", "lim"}).exit_code, 0);
	send_and_count({PROBES[0]}, 3);
	// A reader of the ring (no agent runs: it locks the ring itself).
	run_command({"timeout", "1", SLUICE_BIN, "events"});
	// A deleted rule with buckets is recorded, so that its events are named.
	ASSERT_EQ(cli({"rule", "del", "lim"}).exit_code, 0);
	// A reset writes its record only while CPUs hold counts on account,
	// which traffic cannot make on demand: one written as such a reset would.
	std::ofstream(run_dir + "/counters-reset-0123456789abcdef.json") << "{\"buckets\":[]}\n";
	for (const char *kind : {"events-", "retired-rules-", "counters-reset-"}) {
		std::string found = run_command({"sh", "-c", "ls " + run_dir + " | grep '^" + kind + "'"}).out;
		EXPECT_FALSE(found.empty()) << "no " << kind << " file was made in " << run_dir << ": the test proves nothing";
	}
	CommandResult r = cli({"detach", "--all"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	EXPECT_NE(access(run_dir.c_str(), F_OK), 0)
		<< "detach --all left the run directory: " << run_command({"ls", "-A", run_dir}).out;
	run_command({"rm", "-rf", run_dir});
}

// A message that gives a count gives the noun that agrees with it: `apply
// --check` said "1 interfaces". Counts 0 to 3 of rules and 0 or 1 interface
// through apply --check, and 1 to 3 rules through rule import and flush.
TEST_F(Lifecycle, CountsInMessagesAgreeWithTheirNouns)
{
	auto counted = [](size_t n, const std::string &one, const std::string &many) {
		return std::to_string(n) + " " + (n == 1 ? one : many);
	};
	for (size_t rules = 0; rules <= 3; rules++) {
		for (size_t ifaces = 0; ifaces <= 1; ifaces++) {
			std::string text = ifaces ? "interfaces:\n  - name: " + DST_IF + "\n" : "";
			text += "rules:\n";
			for (size_t i = 0; i < rules; i++)
				text += "  - {name: r" + std::to_string(i) + ", cidr: 10.21" + std::to_string(i) +
					".0.0/16, rate: 5/s}\n";
			std::string file = write_file("count.yaml", text);
			CommandResult r = cli_dst({"apply", "--check", file, "--allow-empty"});
			ASSERT_EQ(r.exit_code, 0) << r.err;
			EXPECT_EQ(r.out, file + ": ok (" + counted(rules, "rule", "rules") + ", " +
						 counted(ifaces, "interface", "interfaces") + ")\n");
		}
	}
	attach();
	for (size_t n = 1; n <= 3; n++) {
		std::string lines;
		for (size_t i = 0; i < n; i++)
			lines += "10.21" + std::to_string(i) + ".0.0/16 --rate 5/s --name r" + std::to_string(i) + "\n";
		std::string file = write_file("rules.txt", lines);
		CommandResult r = cli({"rule", "import", file});
		ASSERT_EQ(r.exit_code, 0) << r.err;
		// Each file holds the one before and one rule more.
		std::string present = n == 1 ? "" : "; " + std::to_string(n - 1) + (n == 2 ? " was" : " were") + " present already";
		EXPECT_TRUE(std::regex_match(r.out, std::regex(R"(imported 1 rule \(id \d+\))" + present + "\n"))) << r.out;
	}
	CommandResult flushed = cli({"rule", "flush"});
	EXPECT_EQ(flushed.out, "deleted 3 rules\n");
	ASSERT_EQ(cli({"rule", "add", "10.210.0.0/16", "--rate", "5/s", "--name", "one"}).exit_code, 0);
	flushed = cli({"rule", "flush"});
	EXPECT_EQ(flushed.out, "deleted 1 rule\n");
	std::string two = write_file("two.txt", "10.220.0.0/16 --rate 5/s --name a\n10.221.0.0/16 --rate 5/s --name b\n");
	CommandResult r = cli({"rule", "import", two});
	EXPECT_TRUE(std::regex_match(r.out, std::regex(R"(imported 2 rules \(ids \d+-\d+\)\n)"))) << r.out;
}

TEST_F(Lifecycle, ABadPolicyIsOneLineForCheckDiffAndApplyAndChangesNothing)
{
	std::string small = write_file("small.yaml", policy_text(false, "1000/s"));
	ASSERT_EQ(cli_dst({"apply", small}).exit_code, 0);
	std::string rules = cli({"rule", "list", "--json"}).out, status = cli_dst({"status", "--json"}).out;
	std::string too_many = "tables:\n  max_rules: 2\nrules:\n";
	for (int i = 0; i < 3; i++)
		too_many += "  - {name: d" + std::to_string(i) + ", cidr: " + big_address(i) + ", action: deny}\n";
	const std::vector<std::pair<std::string, std::string>> bad = {
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n   rate: 5/s\n", "line"},
		{"rules:\n  - {name: a, cidr: 10.0.0.0/8, rat: 5/s}\n", "unknown key 'rat'"},
		{"interfaces:\n  - name: nosuch0\nrules: []\n", "interface nosuch0 does not exist"},
		{"rules:\n  - {name: a, cidr: 10.0.0.0/8, action: allow, shadow: true}\n", "--shadow"},
		{too_many, "3 rules do not fit in max_rules 2"},
		{"rules:\n  - {name: a, cidr: 10.0.0.0/8, rate: 5/s}\n  - {name: a, cidr: 10.1.0.0/16, rate: 5/s}\n",
		 "'a'"},
		// No rules and no interfaces: a wipe, unless asked for (--allow-empty).
		{"rules:\n", "no rules and no interfaces"},
		{"interfaces: []\nrules: []\n", "--allow-empty"},
	};
	for (const auto &[text, message] : bad) {
		std::string file = write_file("bad.yaml", text);
		for (std::vector<std::string> args : {std::vector<std::string>{"apply", "--check", file},
						      {"apply", "--diff", file}, {"apply", file}}) {
			CommandResult r = cli_dst(args);
			SCOPED_TRACE(args[1] + " of:\n" + text);
			EXPECT_NE(r.exit_code, 0);
			EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
			EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
			EXPECT_EQ(cli({"rule", "list", "--json"}).out, rules) << "nothing changed";
			EXPECT_EQ(cli_dst({"status", "--json"}).out, status) << "nothing changed";
		}
	}
}

namespace {

/// One state a policy file can ask for: each interface absent, native or
/// generic; a subset of a pool of rules, each in one of two variants (their
/// rates differ); the rule table's and the IPv6 trie's sizes.
struct PolicyCase {
	std::vector<int> modes; ///< per interface: 0 absent, 1 native, 2 generic
	std::vector<int> rules; ///< per pool rule: 0 absent, 1 or 2 its variant
	uint32_t max_rules = 0; ///< 0: the default
	uint32_t max_v6_prefixes = 0; ///< 0: unstated (as max_rules)

	bool empty() const
	{
		return std::all_of(modes.begin(), modes.end(), [](int m) { return m == 0; }) &&
		       std::all_of(rules.begin(), rules.end(), [](int r) { return r == 0; });
	}

	std::string text(const std::vector<std::string> &interfaces) const
	{
		std::string t;
		if (max_rules || max_v6_prefixes)
			t += "tables:\n";
		if (max_rules)
			t += "  max_rules: " + std::to_string(max_rules) + "\n";
		if (max_v6_prefixes)
			t += "  max_v6_prefixes: " + std::to_string(max_v6_prefixes) + "\n";
		t += "interfaces:";
		bool any = false;
		for (size_t i = 0; i < modes.size(); i++)
			if (modes[i]) {
				t += std::string(any ? "" : "\n") + "  - name: " + interfaces[i] +
				     "\n    mode: " + (modes[i] == 1 ? "native" : "generic") + "\n";
				any = true;
			}
		t += any ? "rules:" : " []\nrules:";
		any = false;
		for (size_t r = 0; r < rules.size(); r++)
			if (rules[r]) {
				t += std::string(any ? "" : "\n") + "  - name: r" + std::to_string(r) + "\n    cidr: 10." +
				     std::to_string(220 + r) + ".0.0/16\n    rate: " + std::to_string(10 * rules[r]) +
				     "/s\n";
				any = true;
			}
		return t + (any ? "" : " []\n");
	}
};

} // namespace

// Required: `apply` is all or none across interfaces, modes, table sizes and
// rules. Transitions between generated policies (interfaces added, removed,
// moved to the other mode; rules added, removed, changed; the table resized;
// from nothing loaded), each applied first with a failure injected at each
// of its steps in turn, then whole: after a failure the state is the old one
// exactly (export, modes, every link on the loaded program), after success
// it is the new file (`apply --diff` says no changes).
TEST_F(Lifecycle, ApplyIsAllOrNoneForGeneratedTransitionsWithAFailureAtEachStep)
{
	const std::vector<std::string> ifaces = {DST_IF, "sllc-x1", "sllc-x2"};
	shell("ip -n " + DST_NS + " link add sllc-x1 type veth peer name sllc-y1");
	shell("ip -n " + DST_NS + " link add sllc-x2 type veth peer name sllc-y2");
	for (const char *i : {"sllc-x1", "sllc-y1", "sllc-x2", "sllc-y2"})
		shell("ip -n " + DST_NS + " link set " + i + " up");

	unsigned seed = std::random_device{}();
	std::printf("seed %u\n", seed);
	std::mt19937 rng(seed);
	auto pick = [&](int n) { return int(rng() % unsigned(n)); };
	auto generate = [&] {
		PolicyCase c;
		for (size_t i = 0; i < ifaces.size(); i++)
			c.modes.push_back(pick(3));
		for (int r = 0; r < 4; r++)
			c.rules.push_back(pick(3));
		c.max_rules = pick(6) == 0 ? 20000 : 0;
		c.max_v6_prefixes = pick(6) == 0 ? 30000 : 0;
		return c;
	};
	// The state as a user checks it: the export, and where the program runs.
	auto state = [&] {
		CommandResult st = cli_dst({"status", "--json"});
		EXPECT_EQ(st.exit_code, 0) << st.err;
		json s = json::parse(st.out);
		std::string where;
		for (const auto &l : s["links"]) {
			EXPECT_EQ(l["prog_id"], s["prog_id"]) << "a link runs another program: " << st.out;
			where += l["interface"].get<std::string>() + ":" + l["mode"].get<std::string>() + " ";
		}
		if (!s["loaded"].get<bool>())
			return std::string("(nothing loaded)");
		CommandResult ex = cli_dst({"export"});
		EXPECT_EQ(ex.exit_code, 0) << ex.err;
		std::vector<std::string> sorted;
		std::istringstream in(where);
		for (std::string w; in >> w;)
			sorted.push_back(w);
		std::sort(sorted.begin(), sorted.end());
		std::string links;
		for (const auto &w : sorted)
			links += w + " ";
		return ex.out + "links: " + links;
	};
	// Each step of an apply, how many times the plan reaches it.
	auto steps_of = [&](const std::string &diff) {
		std::map<std::string, int> steps;
		std::istringstream in(diff);
		for (std::string line; std::getline(in, line);) {
			if (line.rfind("+ load", 0) == 0)
				steps["load"]++;
			else if (line.rfind("+ attach", 0) == 0)
				steps["attach"]++;
			else if (line.rfind("- detach", 0) == 0)
				steps["detach"]++;
			else if (line.rfind("~ move", 0) == 0)
				steps["move"]++;
			else if (line.rfind("~ tables", 0) == 0)
				steps["resize"] = 1;
		}
		if (!steps.count("load"))
			steps["rules"] = 1;
		// Every apply commits a rule transaction (an install, a resize's
		// restore, a replace): stopped with its idle set written.
		steps["rules-written"] = 1;
		return steps;
	};

	int transitions = 0, failures = 0, moves = 0;
	for (int t = 0; t < 30; t++) {
		if (pick(8) == 0)
			cli({"detach", "--all"}); // from nothing loaded
		PolicyCase next = generate();
		std::string file = write_file("next.yaml", next.text(ifaces));
		std::vector<std::string> apply = {"apply", file};
		if (next.empty())
			apply.insert(apply.begin() + 1, "--allow-empty");
		SCOPED_TRACE("transition " + std::to_string(t) + " to:\n" + next.text(ifaces));
		std::string before = state();
		CommandResult check = cli_dst({"apply", "--check", file, "--allow-empty"});
		ASSERT_EQ(check.exit_code, 0) << check.err;
		CommandResult diff = cli_dst({"apply", "--diff", file, "--allow-empty"});
		ASSERT_EQ(diff.exit_code, 0) << diff.err;
		for (const auto &[step, count] : steps_of(diff.out)) {
			for (int k = 1; k <= count; k++) {
				std::string at = step + ":" + std::to_string(k);
				std::vector<std::string> args = {"env", "SLUICE_APPLY_FAIL_AT=" + at, "nsenter",
								 "--net=/run/netns/" + DST_NS, SLUICE_BIN};
				args.insert(args.end(), apply.begin(), apply.end());
				CommandResult r = run_command(args);
				EXPECT_NE(r.exit_code, 0) << "failure at " << at;
				EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
				EXPECT_NE(r.err.find("injected failure at " + at), std::string::npos) << r.err;
				EXPECT_EQ(state(), before) << "a failure at " << at << " left another state: " << r.err;
				failures++;
			}
		}
		moves += steps_of(diff.out)["move"];
		CommandResult r = cli_dst(apply);
		ASSERT_EQ(r.exit_code, 0) << r.err;
		EXPECT_EQ(cli_dst({"apply", "--diff", file, "--allow-empty"}).out, "no changes\n") << state();
		transitions++;
	}
	std::printf("%d transitions, %d injected failures, %d mode changes\n", transitions, failures, moves);
	EXPECT_GT(moves, 0) << "no transition moved an interface to the other mode";
}

// Finding: a file that moved an interface from native to generic mode passed
// --check, then `apply` changed the rules and failed on its own program.
TEST_F(Lifecycle, ApplyMovesAnInterfaceToTheOtherModeAndTheRulesStayEnforced)
{
	auto policy = [&](const std::string &mode, const std::string &action) {
		return write_file(mode + ".yaml", "interfaces:\n  - name: " + DST_IF + "\n    mode: " + mode +
							  "\nrules:\n  - {name: probe, cidr: " + PROBES[0] +
							  "/32, action: " + action + "}\n");
	};
	ASSERT_EQ(cli_dst({"apply", policy("native", "deny")}).exit_code, 0);
	EXPECT_EQ(send_and_count({PROBES[0]}, 5)["drop_deny"], 5u);
	std::string generic = policy("generic", "allow");
	CommandResult check = cli_dst({"apply", "--check", generic});
	ASSERT_EQ(check.exit_code, 0) << check.err;
	CommandResult r = cli_dst({"apply", generic});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	EXPECT_NE(r.out.find("~ move " + DST_IF + " from native to generic mode"), std::string::npos) << r.out;
	json s = cli_json({"status", "--json"});
	ASSERT_EQ(s["links"].size(), 1u);
	EXPECT_EQ(s["links"][0]["mode"], "generic");
	EXPECT_EQ(s["links"][0]["prog_id"], s["prog_id"]);
	EXPECT_EQ(cli_dst({"apply", "--diff", generic}).out, "no changes\n");
	// And back, with the deny rule: enforced in the new mode.
	ASSERT_EQ(cli_dst({"apply", policy("native", "deny")}).exit_code, 0);
	EXPECT_EQ(send_and_count({PROBES[0]}, 5)["drop_deny"], 5u) << "enforced after the move";
}

// --check checks interface changes against this host: an interface whose
// hook runs another XDP program, and native mode where the driver has none,
// are refused by --check, --diff and apply alike, and nothing changes.
TEST_F(Lifecycle, CheckRefusesInterfaceChangesThisHostCannotMake)
{
	std::string base = write_file("base.yaml", "interfaces:\n  - name: " + DST_IF + "\nrules:\n  - {name: a, cidr: " +
							   PROBES[0] + "/32, action: deny}\n");
	ASSERT_EQ(cli_dst({"apply", base}).exit_code, 0);
	std::string before = cli_dst({"export"}).out;
	// Another loader's program on a second interface.
	shell("ip -n " + DST_NS + " link add sllc-x1 type veth peer name sllc-y1");
	shell("ip -n " + DST_NS + " link set sllc-x1 up");
	run_command({"rm", "-rf", "/sys/fs/bpf/sllc-foreign"});
	shell(std::string("bpftool prog loadall ") + CHAIN_TEST_OBJ + " /sys/fs/bpf/sllc-foreign type xdp");
	shell("nsenter --net=/run/netns/" + DST_NS + " ip link set dev sllc-x1 xdpgeneric pinned "
	      "/sys/fs/bpf/sllc-foreign/port_filter");
	std::string taken = write_file("taken.yaml", "interfaces:\n  - name: " + DST_IF + "\n  - name: sllc-x1\n    "
								 "mode: generic\nrules:\n  - {name: a, cidr: " +
								 PROBES[0] + "/32, action: deny}\n");
	for (std::vector<std::string> args :
	     {std::vector<std::string>{"apply", "--check", taken}, {"apply", "--diff", taken}, {"apply", taken}}) {
		CommandResult r = cli_dst(args);
		SCOPED_TRACE(args[1]);
		EXPECT_NE(r.exit_code, 0);
		EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
		EXPECT_NE(r.err.find("runs another XDP program"), std::string::npos) << r.err;
		EXPECT_EQ(cli_dst({"export"}).out, before) << "nothing changed";
	}
	run_command({"rm", "-rf", "/sys/fs/bpf/sllc-foreign"});
	// Loopback has no native XDP.
	std::string lo = write_file("lo.yaml", "interfaces:\n  - name: lo\n    mode: native\nrules: []\n");
	CommandResult r = cli_dst({"apply", "--check", lo});
	EXPECT_NE(r.exit_code, 0) << r.out;
	EXPECT_NE(r.err.find("does not support native XDP"), std::string::npos) << r.err;
}

// Finding: detaching the last interface deleted every rule. Now the rules
// stay loaded and enforced nowhere until the next attach, status says so,
// and only `detach --all` removes them, saying what it removed.
TEST_F(Lifecycle, DetachingTheLastInterfaceKeepsTheRulesUntilDetachAll)
{
	std::string run_dir = "/tmp/sluice-lc-run-" + std::to_string(getpid());
	ScopedEnv own_run_dir("SLUICE_RUN_DIR", run_dir);
	attach();
	ASSERT_EQ(cli({"rule", "add", PROBES[0], "--deny", "--name", "kept"}).exit_code, 0);
	ASSERT_EQ(cli({"rule", "add", PROBES[1], "--deny", "--name", "gone"}).exit_code, 0);
	ASSERT_EQ(cli({"rule", "del", "gone"}).exit_code, 0); // recorded, for its events' names
	EXPECT_EQ(run_command({"sh", "-c", "ls " + run_dir + " | grep -c retired-rules-"}).out, "1\n");
	EXPECT_EQ(send_and_count({PROBES[0]}, 4)["drop_deny"], 4u);
	CommandResult d = cli_dst({"detach", DST_IF});
	ASSERT_EQ(d.exit_code, 0) << d.err;
	EXPECT_NE(d.out.find("attached nowhere now, 1 rule kept loaded"), std::string::npos) << d.out;
	EXPECT_EQ(rule_names(), std::vector<std::string>{"kept"});
	json s = cli_json({"status", "--json"});
	EXPECT_TRUE(s["loaded"].get<bool>());
	EXPECT_FALSE(s["attached"].get<bool>());
	EXPECT_EQ(s["rules"], 1u);
	std::string human = cli({"status"}).out;
	EXPECT_NE(human.find("attached nowhere: 1 rule kept loaded"), std::string::npos) << human;
	EXPECT_EQ(rule_stats("kept")["dropped_packets"], 4u) << "counters kept";

	attach();
	EXPECT_EQ(send_and_count({PROBES[0]}, 3)["drop_deny"], 3u) << "enforced again at the next attach";
	EXPECT_EQ(rule_stats("kept")["dropped_packets"], 7u);

	CommandResult all = cli_dst({"detach", "--all"});
	ASSERT_EQ(all.exit_code, 0) << all.err;
	EXPECT_NE(all.out.find("detached from 1 place (" + DST_IF + ")"), std::string::npos) << all.out;
	EXPECT_NE(all.out.find("1 rule removed"), std::string::npos) << all.out;
	EXPECT_EQ(run_command({"ls", "-A", pin_dir()}).out, "") << "pins left behind";
	EXPECT_FALSE(cli_json({"status", "--json"})["loaded"].get<bool>());
	EXPECT_EQ(run_command({"sh", "-c", "ls " + run_dir + " | grep -c retired-rules-"}).out, "0\n")
		<< "the record of retired rules goes with the state";
	run_command({"rm", "-rf", run_dir});
}

namespace {

/// The command line of sluice run with this environment: SLUICE_PIN_DIR =
/// `pin`, SLUICE_RUN_DIR = `run` (unset if empty), ended after 10 s (a
/// command that should have been refused may serve forever: the agent).
std::vector<std::string> sluice_in(const std::string &pin, const std::string &run, std::vector<std::string> args)
{
	std::vector<std::string> argv = {"timeout", "10", "env", "-u", "SLUICE_RUN_DIR", "SLUICE_PIN_DIR=" + pin};
	if (!run.empty())
		argv.push_back("SLUICE_RUN_DIR=" + run);
	argv.push_back(SLUICE_BIN);
	argv.insert(argv.end(), args.begin(), args.end());
	return argv;
}

/// Runs `f` when it goes, whatever the test's outcome.
class AtExit {
public:
	explicit AtExit(std::function<void()> f) : f_(std::move(f)) {}
	~AtExit() { f_(); }
	AtExit(const AtExit &) = delete;
	AtExit &operator=(const AtExit &) = delete;

private:
	std::function<void()> f_;
};

/// Runs a command as user nobody (uid 65534), as any local user could.
CommandResult as_nobody(std::vector<std::string> args)
{
	args.insert(args.begin(), {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"});
	return run_command(args);
}

/// Owner, mode and type of everything under these paths: what a refused
/// command must leave as it was.
std::string snapshot(const std::vector<std::string> &paths)
{
	std::vector<std::string> argv = {"find"};
	argv.insert(argv.end(), paths.begin(), paths.end());
	argv.insert(argv.end(), {"-printf", "%p %U %m %y %i\n"});
	std::string out = run_command(argv).out;
	std::vector<std::string> lines;
	std::istringstream in(out);
	for (std::string line; std::getline(in, line);)
		lines.push_back(line);
	std::sort(lines.begin(), lines.end());
	std::string sorted;
	for (const auto &l : lines)
		sorted += l + "\n";
	return sorted;
}

} // namespace

namespace {

/// Waits (up to 60 s) until another process holds an flock on directory `dir`.
bool wait_until_locked(const std::string &dir)
{
	for (auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
	     std::chrono::steady_clock::now() < limit;) {
		int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
			close(fd); // releases it if this took it
			if (held)
				return true;
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
	return false;
}

} // namespace

// Finding: the lock was an flock on the pin directory, which `sluice upgrade`
// (and an `apply` that changes `tables:`) swaps for a new one. With 60,000
// rules, a `rule add` waiting behind the change (on the old directory) and
// one started just after the swap (on the new one) ran at once: both exited
// 0 and one rule was lost, 15 times in 15.
TEST_F(Lifecycle, ACommandWaitingBehindAnUpgradeOrATablesChangeAndOneStartedAfterNeverRunAtOnce)
{
	constexpr int RULES = 60000, TRIALS = 15;
	ASSERT_EQ(cli({"apply", write_file("race-tables.yaml", "tables:\n  max_rules: 65536\nrules:\n"
							     "  - {name: base, cidr: 10.213.0.0/16, rate: 1000/s}\n")})
			  .exit_code,
		  0);
	std::string lines;
	for (int i = 0; i < RULES; i++)
		lines += big_address(i) + " --deny --name big" + std::to_string(i) + "\n";
	ASSERT_EQ(cli({"rule", "import", write_file("race.txt", lines)}).exit_code, 0);

	size_t expected = RULES + 1;
	int lost = 0;
	for (int t = 0; t < TRIALS; t++) {
		std::vector<std::string> change = {"upgrade"};
		if (t % 2) { // the state as it is, in tables of another size
			CommandResult exported = cli({"export"});
			ASSERT_EQ(exported.exit_code, 0) << exported.err;
			std::string policy = exported.out;
			size_t at = policy.find("max_rules: "), end = policy.find('\n', at);
			ASSERT_NE(at, std::string::npos) << policy.substr(0, 200);
			bool small = policy.substr(at, end - at) == "max_rules: 65536";
			policy.replace(at, end - at, small ? "max_rules: 65600" : "max_rules: 65536");
			change = {"apply", write_file("race.yaml", policy)};
		}
		SCOPED_TRACE("trial " + std::to_string(t) + ": " + change[0]);
		struct stat before = {};
		ASSERT_EQ(stat(pin_dir().c_str(), &before), 0);
		change.insert(change.begin(), SLUICE_BIN);
		Background changer(change);
		// Reading 60,000 rules and loading the new tables takes the change
		// seconds: the first add starts once it holds the lock (an `apply`
		// reads its file first: a rule added before it locks is not in the
		// file, and goes), the second as soon as the new pin directory is in place.
		EXPECT_TRUE(wait_until_locked(pin_dir() + "-lock")) << "the change never took the lock";
		std::string waited = "waited" + std::to_string(t), after = "after" + std::to_string(t);
		std::string net = "10.214." + std::to_string(t) + ".";
		Background first({SLUICE_BIN, "rule", "add", net + "1", "--deny", "--name", waited});
		bool swapped = false;
		for (auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
		     !swapped && std::chrono::steady_clock::now() < limit;) {
			struct stat now = {};
			swapped = stat(pin_dir().c_str(), &now) == 0 && now.st_ino != before.st_ino;
			if (!swapped)
				std::this_thread::sleep_for(std::chrono::milliseconds(1));
		}
		EXPECT_TRUE(swapped) << "the pin directory was never swapped";
		Background second({SLUICE_BIN, "rule", "add", net + "2", "--deny", "--name", after});
		EXPECT_EQ(changer.wait(), 0);
		EXPECT_EQ(first.wait(), 0);
		EXPECT_EQ(second.wait(), 0);
		std::vector<std::string> names = rule_names();
		bool both = std::find(names.begin(), names.end(), waited) != names.end() &&
			    std::find(names.begin(), names.end(), after) != names.end();
		expected += 2;
		EXPECT_TRUE(both) << "a rule added beside the change was lost";
		EXPECT_EQ(names.size(), expected);
		lost += !both;
		expected = names.size();
	}
	std::printf("%d of %d trials lost a rule\n", lost, TRIALS);
	EXPECT_EQ(lost, 0);
}

// Finding: an existing pin directory was accepted whoever owned it. With
// bpffs mounted 1777, user nobody made it first, held its lock, removed the
// program pin, and root's next rule "succeeded" into a program no interface
// ran. The pin, lock and run directories must be root's, writable by no one
// else, under parents no one else can swap them out of; every command refuses
// otherwise, with one line, and changes nothing.
TEST_F(Lifecycle, DirectoriesAnotherUserMadeOrMayWriteAreRefusedByEveryCommandAndNothingChanges)
{
	const std::string p = pin_dir(), tmp = "/tmp/sluice-lc-" + std::to_string(getpid());
	const std::string policy = write_file("dirs.yaml", "rules:\n  - {name: a, cidr: 10.214.0.0/16, action: deny}\n");
	const std::string import = write_file("dirs.txt", "10.214.0.1 --deny\n");
	struct Case {
		std::string name;
		std::function<void()> make;
		std::string pin, run;     ///< SLUICE_PIN_DIR and SLUICE_RUN_DIR (empty: derived)
		std::string refused, why; ///< the directory the line names, and why
	};
	auto nobody_mkdir = [](const std::string &d) {
		CommandResult r = as_nobody({"mkdir", d});
		ASSERT_EQ(r.exit_code, 0) << r.err;
	};
	const std::string mnt = tmp + "-mnt";
	std::vector<Case> cases = {
		{"a pin directory nobody made", [&] { nobody_mkdir(p); }, p, "", p, "it is owned by uid 65534, not root"},
		{"a lock directory nobody made", [&] { nobody_mkdir(p + "-lock"); }, p, "", p + "-lock",
		 "it is owned by uid 65534, not root"},
		{"a run directory nobody made", [&] { nobody_mkdir(tmp + "-run"); }, p, tmp + "-run", tmp + "-run",
		 "it is owned by uid 65534, not root"},
		{"a pin directory others may write", [&] { shell("mkdir " + p + " && chmod 0777 " + p); }, p, "", p,
		 "others may write it (mode 0777)"},
		{"a pin directory that is nobody's symbolic link",
		 [&] {
			 shell("mkdir -m 0700 " + p + "-target");
			 ASSERT_EQ(as_nobody({"ln", "-s", p + "-target", p}).exit_code, 0);
		 },
		 p, "", p, "it is a symbolic link owned by uid 65534"},
		// (a bpffs root is always sticky: a directory in it that is not)
		{"a pin directory in a bpffs directory others may write, not sticky",
		 [&] { shell("mkdir -m 0777 " + p + "-ww && chmod 0777 " + p + "-ww && mkdir -m 0700 " + p + "-ww/pins"); },
		 p + "-ww/pins", "", p + "-ww/pins", "it is under " + p + "-ww, which others may write (mode 0777) and is not sticky"},
		{"a run directory under a directory others may write, not sticky",
		 [&] { shell("mkdir -m 0777 " + tmp + "-ww && chmod 0777 " + tmp + "-ww && mkdir -m 0700 " + tmp + "-ww/run"); },
		 p, tmp + "-ww/run", tmp + "-ww/run", "it is under " + tmp + "-ww, which others may write (mode 0777)"},
	};
	auto clean = [&] {
		run_command({"umount", mnt});
		run_command({"rm", "-rf", p, p + "-lock", p + "-target", p + "-ww", mnt, tmp + "-run", tmp + "-ww"});
	};
	AtExit at_exit([&] {
		run_command(sluice_in(mnt + "/pins", "", {"detach", "--all"}));
		clean();
	});
	const std::vector<std::vector<std::string>> commands = {
		{"rule", "add", "10.214.0.1", "--deny"}, {"rule", "import", import}, {"rule", "list"},
		{"rule", "del", "a"}, {"status"}, {"stats"}, {"export"}, {"apply", policy}, {"apply", "--check", policy},
		{"upgrade"}, {"detach", "--all"}, {"explain", "10.214.0.1"}, {"top", "--once"},
		{"events", "--count", "1", "--timeout", "1s"}, {"agent", "--metrics", "127.0.0.1:0"}, {"attach", DST_IF}};
	for (const auto &c : cases) {
		SCOPED_TRACE(c.name);
		clean();
		c.make();
		const std::vector<std::string> watched = {c.pin, c.pin + "-lock", c.pin + "-next", p + "-target",
							  c.run.empty() ? "/run/sluice-" + c.pin.substr(c.pin.rfind('/') + 1) : c.run};
		const std::string before = snapshot(watched);
		for (const auto &args : commands) {
			SCOPED_TRACE(args[0] + (args.size() > 1 ? " " + args[1] : ""));
			std::vector<std::string> argv = sluice_in(c.pin, c.run, args);
			if (args[0] == "attach") // where the interface is
				argv.insert(argv.begin() + 2, {"nsenter", "--net=/run/netns/" + DST_NS});
			CommandResult r = run_command(argv);
			EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
			EXPECT_EQ(r.err.rfind("sluice: refusing the ", 0), 0u) << r.err;
			EXPECT_NE(r.err.find(" " + c.refused + ": " + c.why), std::string::npos) << r.err;
			EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
			EXPECT_EQ(r.out, "");
			EXPECT_EQ(snapshot(watched), before) << "nothing changed";
		}
		EXPECT_EQ(run_command({"ip", "-n", DST_NS, "link", "show", DST_IF}).out.find("xdp"), std::string::npos)
			<< "nothing attached";
	}
	clean();

	// A pin directory of root's, 0700, under a sticky parent that anyone may
	// write (bpffs mounted 1777) is sluice's own: no one else can open its
	// lock or remove a pin.
	shell("mkdir -m 0700 " + mnt + " && mount -t bpf -o mode=1777 bpf " + mnt);
	const std::string sticky = mnt + "/pins";
	CommandResult r = run_command(sluice_in(sticky, "", {"rule", "add", "10.214.0.1", "--deny", "--name", "a"}));
	EXPECT_EQ(r.exit_code, 0) << r.err;
	EXPECT_NE(run_command(sluice_in(sticky, "", {"rule", "list"})).out.find("10.214.0.1"), std::string::npos);
	struct stat st = {};
	ASSERT_EQ(stat(sticky.c_str(), &st), 0);
	EXPECT_EQ(st.st_mode & 07777, 0700u);
	ASSERT_EQ(stat((sticky + "-lock").c_str(), &st), 0);
	EXPECT_EQ(st.st_mode & 07777, 0700u);
	EXPECT_NE(as_nobody({"flock", "-n", sticky + "-lock", "true"}).exit_code, 0) << "nobody took the lock";
	EXPECT_NE(as_nobody({"flock", "-n", sticky, "true"}).exit_code, 0) << "nobody took the old lock";
	EXPECT_NE(as_nobody({"rm", "-f", sticky + "/prog"}).exit_code, 0);
	EXPECT_EQ(access((sticky + "/prog").c_str(), F_OK), 0) << "nobody removed the program pin";
	EXPECT_EQ(run_command(sluice_in(sticky, "", {"detach", "--all"})).exit_code, 0);
	EXPECT_NE(access((sticky + "-lock").c_str(), F_OK), 0) << "detach --all leaves no lock directory behind";
	EXPECT_EQ(run_command(sluice_in(sticky, "", {"status"})).exit_code, 0);
	EXPECT_NE(access((sticky + "-lock").c_str(), F_OK), 0) << "nor does a reader of nothing make one";
}

// An upgrade stages the new state beside the pin directory, in PIN-next,
// and empties whatever is there first: one that another user made (or a
// link of theirs to another instance's state) is refused, and nothing of
// either instance is removed.
TEST_F(Lifecycle, AnUpgradeRefusesAStagingDirectoryAnotherUserMadeAndRemovesNothing)
{
	const std::string p = pin_dir(), other = pin_dir() + "-other";
	auto clean = [&] {
		run_command(sluice_in(other, "", {"detach", "--all"}));
		run_command({"rm", "-rf", p + "-next", other, other + "-lock"});
	};
	clean();
	AtExit at_exit(clean);
	ASSERT_EQ(cli({"rule", "add", "10.214.0.1", "--deny", "--name", "mine"}).exit_code, 0);
	ASSERT_EQ(run_command(sluice_in(other, "", {"rule", "add", "10.214.0.2", "--deny", "--name", "theirs"})).exit_code,
		  0);
	for (bool link : {false, true}) {
		SCOPED_TRACE(link ? "a link to another instance" : "a directory");
		CommandResult made = as_nobody(link ? std::vector<std::string>{"ln", "-s", other, p + "-next"}
						    : std::vector<std::string>{"mkdir", p + "-next"});
		ASSERT_EQ(made.exit_code, 0) << made.err;
		std::string mine = cli({"rule", "list"}).out;
		std::string theirs = run_command(sluice_in(other, "", {"rule", "list"})).out;
		CommandResult r = cli({"upgrade"});
		EXPECT_EQ(r.exit_code, 1) << r.out;
		EXPECT_EQ(r.err, "sluice: refusing the upgrade's staging directory " + p + "-next: it " +
					 (link ? "is a symbolic link owned by uid 65534, not root; remove it (rm " + p +
							 "-next) and run the command again\n"
					       : "is owned by uid 65534, not root, who can change or remove what sluice "
						 "keeps there; check what it holds, remove it (rm -r " + p +
							 "-next) and run the command again\n"));
		EXPECT_EQ(cli({"rule", "list"}).out, mine);
		EXPECT_EQ(run_command(sluice_in(other, "", {"rule", "list"})).out, theirs) << "the other instance is whole";
		EXPECT_NE(theirs.find("theirs"), std::string::npos);
		run_command({"rm", "-rf", p + "-next"});
	}
	EXPECT_EQ(cli({"upgrade"}).exit_code, 0) << "and once it is gone, the upgrade runs";
}

// Finding: two instances on one host, each with its own SLUICE_PIN_DIR,
// shared /run/sluice/agent.sock: the second agent exited ("another agent
// serves events at ..."). The run directory follows the pin directory.
TEST_F(Lifecycle, TwoInstancesEachWithItsPinDirectoryRunAnAgentEachInItsOwnRunDirectory)
{
	ScopedEnv derived_run_dirs("SLUICE_RUN_DIR", std::nullopt); // till the teardown, which has the test's own
	const std::vector<std::string> pins = {pin_dir() + "-a", pin_dir() + "-b"};
	auto run_dir_of = [](const std::string &pin) { return "/run/sluice-" + pin.substr(pin.rfind('/') + 1); };
	auto clean = [&] {
		for (const auto &pin : pins) {
			run_command(sluice_in(pin, "", {"detach", "--all"}));
			run_command({"rm", "-rf", pin, run_dir_of(pin)});
		}
	};
	clean();
	AtExit at_exit(clean);
	for (size_t i = 0; i < pins.size(); i++) {
		CommandResult r = run_command(sluice_in(pins[i], "", {"rule", "add", "10.214.0." + std::to_string(i + 1),
								      "--deny", "--name", "rule" + std::to_string(i)}));
		ASSERT_EQ(r.exit_code, 0) << r.err;
		json status = json::parse(run_command(sluice_in(pins[i], "", {"status", "--json"})).out);
		EXPECT_EQ(status["run_dir"], run_dir_of(pins[i]));
	}
	{
		std::vector<std::unique_ptr<AgentProcess>> agents;
		for (const auto &pin : pins)
			agents.push_back(std::make_unique<AgentProcess>(SLUICE_BIN, std::vector<std::string>{},
									std::vector<std::string>{"env", "-u", "SLUICE_RUN_DIR",
												 "SLUICE_PIN_DIR=" + pin}));
		for (size_t i = 0; i < pins.size(); i++) {
			SCOPED_TRACE(pins[i]);
			std::string sock = run_dir_of(pins[i]) + "/agent.sock";
			for (int k = 0; k < 100 && access(sock.c_str(), F_OK) != 0; k++)
				std::this_thread::sleep_for(std::chrono::milliseconds(20));
			EXPECT_EQ(access(sock.c_str(), F_OK), 0) << agents[i]->child().seen();
			struct stat st = {};
			ASSERT_EQ(stat(run_dir_of(pins[i]).c_str(), &st), 0);
			EXPECT_EQ(st.st_mode & 07777, 0700u) << "the run directory is made 0700";
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(500));
		for (size_t i = 0; i < pins.size(); i++) {
			SCOPED_TRACE(pins[i]);
			EXPECT_TRUE(agents[i]->child().running()) << agents[i]->child().seen();
			std::string scrape;
			EXPECT_NO_THROW(scrape = agents[i]->scrape());
			EXPECT_EQ(metric_sample(scrape, "sluice_up"), 1) << scrape;
			EXPECT_EQ(metric_sample(scrape, "sluice_rules"), 1) << scrape;
			EXPECT_EQ(agents[i]->child().stop(SIGTERM), 0) << agents[i]->child().seen();
		}
	}
}

// Finding: `--version` printed "sluice 0.2" for builds five ABIs apart.
TEST(Version, NamesTheReleaseTheStateAbiAndTheCommit)
{
	CommandResult r = run_command({SLUICE_BIN, "--version"});
	EXPECT_EQ(r.exit_code, 0);
	std::smatch m;
	ASSERT_TRUE(std::regex_match(r.out, m, std::regex("sluice ([0-9]+\\.[0-9]+\\.[0-9]+) \\(state ABI ([0-9]+), "
							  "commit ([0-9a-f]{7,}(-dirty)?|[^ ]+-g[0-9a-f]+(-dirty)?|unknown)\\)\n")))
		<< r.out;
	EXPECT_EQ(m[1].str(), SLUICE_VERSION);
	EXPECT_EQ(m[2].str(), std::to_string(SLUICE_ABI_VERSION));
}

// Finding: for a pin directory on /tmp, a hint said `mount -t bpf bpf /tmp`,
// which would hide everything in /tmp. No hint suggests a mount: a pin
// directory whose parent is not bpffs names /sys/fs/bpf instead, for every
// command and every such parent (the system's directories among them).
TEST(PinDirectoryHints, APinDirectoryOffBpffsNamesSysFsBpfAndNeverSuggestsAMount)
{
	const std::string name = "sluice-hint-" + std::to_string(getpid());
	const std::vector<std::string> parents = {"/tmp", "/etc", "/run", "/var", "/usr", "/home", "/root", "/opt",
						  "/srv", "/boot", "/dev", "/proc", "/sys/fs", "/sys", "/var/tmp", ""};
	const std::vector<std::vector<std::string>> commands = {
		{"rule", "add", "10.214.0.1", "--deny"}, {"attach", "lo"}, {"status"}, {"stats"}, {"rule", "list"},
		{"upgrade"}, {"detach", "--all"}, {"export"}};
	for (const auto &parent : parents) {
		if (access((parent.empty() ? "/" : parent).c_str(), F_OK) != 0)
			continue;
		const std::string dir = parent + "/" + name;
		for (const auto &args : commands) {
			SCOPED_TRACE(dir + ": " + args[0]);
			CommandResult r = run_command(sluice_in(dir, "", args));
			EXPECT_EQ(r.err.find("mount -t"), std::string::npos) << r.err;
			EXPECT_EQ(r.err.find("mount bpf"), std::string::npos) << r.err;
			EXPECT_EQ(r.err.find("`mount"), std::string::npos) << r.err;
			EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
			if (args[0] == "rule" && args[1] == "add") { // a change: refused, naming the way on
				EXPECT_EQ(r.exit_code, 1);
				EXPECT_EQ(r.err, "sluice: cannot keep sluice's state in " + dir + ": " +
							 (parent.empty() ? "/" : parent) +
							 " is not on a BPF filesystem; choose a pin directory under "
							 "/sys/fs/bpf, such as /sys/fs/bpf/" + name + "\n");
			}
			EXPECT_NE(access(dir.c_str(), F_OK), 0) << "nothing made";
		}
	}
}

// A rule refused on a host with nothing loaded leaves nothing loaded: the
// rule is checked before the program (about 270 MiB of maps) is loaded and
// pinned, by `rule add` and `rule import` alike.
TEST_F(Lifecycle, ARuleRefusedWithNothingLoadedLoadsNothing)
{
	ASSERT_FALSE(cli_json({"status", "--json"})["loaded"].get<bool>());
	const std::vector<std::vector<std::string>> refused = {
		{"10.0.0.0/8", "--rate", "10/s", "--name", "123"},                      // a name that reads as an id
		{"10.0.0.0/8", "--rate", "10/s", "--burst", "2", "--warmup", "10s"},   // too small a burst to warm up
		{"10.0.0.0/8", "--rate", "10/s", "--per", "33"},                       // longer than the address
		{"10.0.0.0/8", "--rate", "10/s", "--algo", "gcra", "--warmup", "10s"}, // warm-up of the token bucket only
		{"10.0.0.0/8", "--allow", "--shadow"},                                 // shadow of a limit only
	};
	for (const auto &args : refused) {
		std::vector<std::string> add = {"rule", "add"};
		add.insert(add.end(), args.begin(), args.end());
		std::string line;
		for (const auto &a : args)
			line += a + " ";
		std::string file = write_file("import.txt", "10.9.0.0/16 --deny\n" + line + "\n");
		for (const auto &cmd : {add, std::vector<std::string>{"rule", "import", file}}) {
			SCOPED_TRACE(cmd[1] + " " + line);
			CommandResult r = cli(cmd);
			EXPECT_EQ(r.exit_code, 1) << r.out;
			EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
			EXPECT_FALSE(cli_json({"status", "--json"})["loaded"].get<bool>()) << "a program was left loaded";
			EXPECT_NE(access(pin_dir().c_str(), F_OK), 0) << "the pin directory was made";
			EXPECT_NE(access((pin_dir() + "-lock").c_str(), F_OK), 0) << "the lock directory was made";
		}
	}
	// A file whose rules are each valid but not together (a name twice) is
	// refused whole, before anything is loaded or made.
	std::string twice = write_file("twice.txt", "10.1.0.0/16 --deny --name x\n10.2.0.0/16 --deny --name x\n");
	CommandResult r = cli({"rule", "import", twice});
	EXPECT_EQ(r.exit_code, 1) << r.out;
	EXPECT_EQ(r.err, "sluice: " + twice + " line 2: a rule named 'x' exists already\n");
	EXPECT_FALSE(cli_json({"status", "--json"})["loaded"].get<bool>()) << "a program was left loaded";
	EXPECT_NE(access(pin_dir().c_str(), F_OK), 0) << "the pin directory was made";

	// An unnamed rule is taken before anything is loaded, as after: named rule<ID>.
	r = cli({"rule", "add", "10.0.0.0/8", "--rate", "10mbit", "--per", "24"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	auto rules = cli_json({"rule", "list", "--json"});
	ASSERT_EQ(rules.size(), 1u) << rules.dump();
	EXPECT_EQ(rules[0]["name"], "rule1");
}
