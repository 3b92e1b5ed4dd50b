// SPDX-License-Identifier: GPL-2.0-only
// End to end, the block-list recipe of docs/operations.md run as written (its
// two shell blocks, read from the page): a set loaded from a file and a deny
// rule on it, then the cron job refreshing it from a published list. Real
// UDP over veth says who is dropped; a malformed list changes nothing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "process.h"
#include "sockaddr.h"
#include "trie6.h"

using nlohmann::json;
using namespace sluice::test;

namespace {

const std::string SRC_NS = "slst-src", DST_NS = "slst-dst";
const std::string SRC_IF = "slst-s", DST_IF = "slst-d";
const std::string DST = "10.212.0.1", SOURCE = "10.212.0.11", SECOND = "10.212.0.12";
const VethPair TOPOLOGY{SRC_NS, DST_NS, SRC_IF, DST_IF, DST + "/24", {SOURCE + "/24", SECOND + "/24"},
			"02:00:00:00:0c"};
constexpr uint16_t UDP_PORT = 9000;

std::string work_dir() { return "/tmp/sluice-e2e-sets-work-" + std::to_string(getpid()); }

/// The shell block of docs/operations.md whose first comment line is
/// "# recipe: NAME" (after a "#!" line, if any).
std::string recipe(const std::string &name)
{
	std::ifstream page(std::string(SLUICE_SOURCE_DIR) + "/docs/operations.md");
	std::string line, block;
	bool in = false, found = false;
	while (std::getline(page, line)) {
		if (!in && line == "```sh") {
			in = true;
			block.clear();
			continue;
		}
		if (in && line == "```") {
			in = false;
			if (found)
				return block;
			continue;
		}
		if (in) {
			block += line + "\n";
			found = found || line == "# recipe: " + name;
		}
	}
	ADD_FAILURE() << "no recipe " << name << " in docs/operations.md";
	return "";
}

/// Runs a recipe as written, but for the state directory (/var/lib/sluice,
/// here the test's own) and with `sluice` being the binary under test.
CommandResult run_recipe(const std::string &name, const std::string &url)
{
	std::string text = recipe(name);
	for (size_t at; (at = text.find("/var/lib/sluice")) != std::string::npos;)
		text.replace(at, 15, work_dir());
	std::string bin_dir = std::filesystem::path(SLUICE_BIN).parent_path();
	return run_command({"env", "PATH=" + bin_dir + ":" + std::getenv("PATH"), "SLUICE_DROP_URL=" + url, "sh", "-c", text});
}

void write_file(const std::string &path, const std::string &text)
{
	std::ofstream out(path);
	out << text;
}

std::string read_file(const std::string &path)
{
	std::ifstream in(path);
	std::stringstream s;
	s << in.rdbuf();
	return s.str();
}

class BlocklistRecipe : public AttachedToVeth {
protected:
	BlocklistRecipe() : AttachedToVeth(TOPOLOGY, "sluice-e2e-sets") {}

	void SetUp() override
	{
		std::filesystem::create_directories(work_dir());
		AttachedToVeth::SetUp();
	}

	void TearDown() override
	{
		AttachedToVeth::TearDown();
		std::filesystem::remove_all(work_dir());
	}

	/// Sends `count` datagrams from `src`; returns how many the rule dropped.
	static uint64_t dropped_of(const std::string &src, int count)
	{
		uint64_t before = drops();
		EXPECT_EQ(send_udp_in(SRC_NS, src, DST, UDP_PORT, count, 64), count);
		return drops() - before;
	}

	static uint64_t drops() { return stats_rule_line("drop").value("dropped_packets", uint64_t(0)); }
};

} // namespace

TEST_F(BlocklistRecipe, LoadsRefreshesAndRefusesABadListAsTheDocsSay)
{
	// A list as Spamhaus publishes it: "; comments", a prefix and an SBL id.
	const std::string published = work_dir() + "/published.txt", url = "file://" + published;
	write_file(published, "; Spamhaus DROP List 2026/11/27\n; Last-Modified: Fri, 27 Nov 2026\n"
			      "192.0.2.0/24 ; SBL1\n10.212.0.11/32 ; SBL2\n198.51.100.0/22 ; SBL3\n");
	write_file(work_dir() + "/drop.txt", read_file(published));

	CommandResult setup = run_recipe("blocklist-setup", url);
	ASSERT_EQ(setup.exit_code, 0) << setup.out << setup.err;
	EXPECT_EQ(dropped_of(SOURCE, 10), 10u) << "a listed source is dropped";
	EXPECT_EQ(dropped_of(SECOND, 10), 0u) << "its unlisted neighbour passes";

	// The hourly refresh: SOURCE delisted, SECOND listed.
	write_file(published, "; Spamhaus DROP List\n192.0.2.0/24 ; SBL1\n10.212.0.12 ; SBL4\n");
	CommandResult refresh = run_recipe("blocklist-refresh", url);
	ASSERT_EQ(refresh.exit_code, 0) << refresh.out << refresh.err;
	EXPECT_EQ(dropped_of(SOURCE, 10), 0u);
	EXPECT_EQ(dropped_of(SECOND, 10), 10u);
	EXPECT_EQ(read_file(work_dir() + "/drop.txt"), read_file(published)) << "the job keeps the list it loaded";
	CommandResult show = cli({"set", "show", "drop"});
	EXPECT_EQ(show.out, "10.212.0.12\n192.0.2.0/24\n");

	// A list broken on line 3: the job fails naming it, and nothing changes.
	const std::string good = read_file(published);
	write_file(published, "; Spamhaus DROP List\n192.0.2.0/24 ; SBL1\n10.212.0.300 ; SBL5\n");
	refresh = run_recipe("blocklist-refresh", url);
	EXPECT_NE(refresh.exit_code, 0);
	EXPECT_NE(refresh.err.find("line 3: invalid address '10.212.0.300'"), std::string::npos) << refresh.err;
	EXPECT_EQ(std::count(refresh.err.begin(), refresh.err.end(), '\n'), 1) << "one line: " << refresh.err;
	EXPECT_EQ(cli({"set", "show", "drop"}).out, show.out);
	EXPECT_EQ(read_file(work_dir() + "/drop.txt"), good);
	EXPECT_EQ(dropped_of(SECOND, 10), 10u);
	EXPECT_EQ(dropped_of(SOURCE, 10), 0u);

	// The set and its rule, as `set list` and `explain` show them.
	CommandResult list = cli({"set", "list", "--json"});
	ASSERT_EQ(list.exit_code, 0) << list.err;
	json sets = json::parse(list.out);
	ASSERT_EQ(sets.size(), 1u);
	EXPECT_EQ(sets[0]["size"], 2u);
	EXPECT_EQ(sets[0]["rules"], json::array({"drop"}));
	CommandResult why = cli({"explain", SECOND, "--json"});
	ASSERT_EQ(why.exit_code, 0) << why.err;
	EXPECT_EQ(json::parse(why.out)["candidates"][0]["set_prefix"], SECOND);
	// `export` writes the set and the rule; applied back, it changes nothing.
	CommandResult exported = cli({"export"});
	ASSERT_EQ(exported.exit_code, 0) << exported.err;
	EXPECT_NE(exported.out.find("sets:\n  - name: drop\n    prefixes:\n      - 10.212.0.12\n      - 192.0.2.0/24\n"),
		  std::string::npos)
		<< exported.out;
	EXPECT_NE(exported.out.find("cidr: \"@drop\""), std::string::npos) << exported.out;
	write_file(work_dir() + "/export.yaml", exported.out);
	CommandResult diff = cli({"apply", "--diff", work_dir() + "/export.yaml"});
	EXPECT_EQ(diff.out, "no changes\n") << diff.err;

	// `upgrade` keeps the rule on its set, enforced.
	CommandResult up = cli({"upgrade"});
	ASSERT_EQ(up.exit_code, 0) << up.err;
	EXPECT_EQ(dropped_of(SECOND, 10), 10u) << "after the upgrade";
	EXPECT_EQ(dropped_of(SOURCE, 10), 0u);
	EXPECT_EQ(cli({"set", "show", "drop"}).out, show.out);

	CommandResult del = cli({"set", "del", "drop"});
	EXPECT_EQ(del.exit_code, 1);
	EXPECT_EQ(del.err, "sluice: set 'drop' is used by rule 'drop'; delete the rule first\n");
}

namespace {

/// The program loaded by `apply`, attached nowhere: table sizes and set
/// loads through the CLI, in a pin directory of the test's own.
class V6Room : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "end-to-end tests load the program: run as root";
		setenv("SLUICE_PIN_DIR", pin().c_str(), 1);
		setenv("SLUICE_RUN_DIR", run().c_str(), 1);
		std::filesystem::create_directories(work());
	}

	void TearDown() override
	{
		remove_instance_expecting_nothing_left(pin());
		run_command({"rm", "-rf", run(), work()});
		unsetenv("SLUICE_RUN_DIR");
	}

	static std::string pin() { return test_pin_dir("sluice-e2e-v6room"); }
	static std::string run() { return test_run_dir("sluice-e2e-v6room"); }
	static std::string work() { return "/tmp/sluice-e2e-v6room-work-" + std::to_string(getpid()); }

	/// A file of `n` distinct IPv6 /64s and /128s, none inside another.
	static std::string prefixes(size_t n, uint64_t seed)
	{
		std::mt19937_64 rng(seed);
		std::set<std::pair<uint32_t, uint64_t>> seen;
		std::string text = "# generated\n";
		while (seen.size() < n) {
			uint32_t net = static_cast<uint32_t>(rng());
			bool host = rng() % 2;
			uint64_t low = host ? rng() | 1 : 0; // a /128 never lies in a /64 of the set: its /64s end in 0
			if ((net & 1) != host || !seen.insert({net, low}).second)
				continue;
			char line[96];
			std::snprintf(line, sizeof(line), "2001:db8:%x:%x:%x:%x:%x:%x%s\n", net >> 16, net & 0xffff,
				      unsigned(low >> 48), unsigned(low >> 32 & 0xffff), unsigned(low >> 16 & 0xffff),
				      unsigned(low & 0xffff), host ? "" : "/64");
			text += line;
		}
		return text;
	}

	std::string file(const std::string &name, const std::string &text)
	{
		std::string path = work() + "/" + name;
		write_file(path, text);
		return path;
	}

	static std::string policy(const std::string &tables)
	{
		return tables + "rules:\n  - {name: six, cidr: \"@six\", action: deny}\n"
				"  - {name: lab, cidr: \"2001:db8:ffff::/48\", action: allow}\n";
	}
};

const std::string TOO_MANY = "sluice: the rules and sets need 1001 IPv6 prefixes and --max-v6-prefixes holds 1000; "
			     "raise it with `sluice apply` (tables: max_v6_prefixes)\n";

} // namespace

// `tables: max_v6_prefixes` (attach's --max-v6-prefixes) sizes the IPv6
// trie apart from max_rules: status and export show it, a `set load` that
// fits it loads, one prefix more is refused with one line and nothing
// changed, `upgrade` keeps it and `apply` changes it (refusing a size the
// rules and sets do not fit). Left unstated, it follows max_rules.
TEST_F(V6Room, TheIPv6TrieHasASizeOfItsOwnThatSetLoadKeepsToAndUpgradeAndApplyKeep)
{
	// The set is stated once, empty, to make it IPv6; later policies leave it as it is.
	CommandResult r = cli({"apply", file("p1.yaml", policy("tables:\n  max_v6_prefixes: 1000\nsets:\n"
								 "  - {name: six, family: 6, prefixes: []}\n"))});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	json status = cli_json({"status", "--json"});
	EXPECT_EQ(status["max_v6_prefixes"], 1000u);
	EXPECT_EQ(status["max_rules"], 16384u) << "the IPv4 table keeps its default size";
	EXPECT_NE(cli({"status"}).out.find("\nIPv6 prefixes of rules and sets: up to 1000\n"), std::string::npos);

	// 999 prefixes and the CIDR rule's: the room exactly.
	const std::string fits = prefixes(999, 1), over = prefixes(1000, 1);
	r = cli({"set", "load", "six", file("fits.txt", fits)});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	const std::string shown = cli({"set", "show", "six"}).out, exported = cli({"export"}).out;
	EXPECT_EQ(std::count(shown.begin(), shown.end(), '\n'), 999);
	EXPECT_NE(exported.find("tables:\n  max_v6_prefixes: 1000\n"), std::string::npos) << exported;
	const std::string status_before = cli({"status", "--json"}).out;
	r = cli({"set", "load", "six", file("over.txt", over)});
	EXPECT_EQ(r.exit_code, 1);
	EXPECT_EQ(r.err, TOO_MANY);
	EXPECT_EQ(cli({"set", "show", "six"}).out, shown) << "the set is as it was";
	EXPECT_EQ(cli({"export"}).out, exported) << "and so are the rules and tables";
	EXPECT_EQ(cli({"status", "--json"}).out, status_before);
	r = cli({"apply", "--diff", file("export.yaml", exported)});
	EXPECT_EQ(r.out, "no changes\n") << r.err;

	ASSERT_EQ(cli({"upgrade"}).exit_code, 0);
	EXPECT_EQ(cli_json({"status", "--json"})["max_v6_prefixes"], 1000u) << "upgrade keeps the size";
	r = cli({"set", "load", "six", file("over.txt", over)});
	EXPECT_EQ(r.err, TOO_MANY) << "and refuses as before";

	// `apply` resizes it: the set loads then; a size it does not fit is refused.
	r = cli({"apply", "--diff", file("p2.yaml", policy("tables:\n  max_v6_prefixes: 2000\n"))});
	EXPECT_EQ(r.out, "~ tables max_v6_prefixes -> 2000 (rules and counters kept; buckets too, where they fit)\n")
		<< r.err;
	ASSERT_EQ(cli({"apply", file("p2.yaml", policy("tables:\n  max_v6_prefixes: 2000\n"))}).exit_code, 0);
	EXPECT_EQ(cli_json({"status", "--json"})["max_v6_prefixes"], 2000u);
	r = cli({"set", "load", "six", file("over.txt", over)});
	EXPECT_EQ(r.exit_code, 0) << r.err;
	r = cli({"apply", file("p3.yaml", policy("tables:\n  max_v6_prefixes: 1000\n"))});
	EXPECT_EQ(r.exit_code, 1);
	EXPECT_EQ(r.err, TOO_MANY);
	EXPECT_EQ(cli_json({"status", "--json"})["max_v6_prefixes"], 2000u) << "nothing changed";

	// Bad sizes: one line each, nothing changed.
	r = cli({"attach", "lo", "--max-v6-prefixes", "0"});
	EXPECT_EQ(r.exit_code, 2);
	EXPECT_EQ(r.err, "sluice: --max-v6-prefixes: a count from 1 to 16777216, not 0\n");
	r = cli({"attach", "lo", "--max-v6-prefixes", "-5"});
	EXPECT_EQ(r.err, "sluice: --max-v6-prefixes: a count from 1 to 16777216, not -5\n");
	r = cli({"apply", file("p4.yaml", policy("tables:\n  max_v6_prefixes: 16777217\n"))});
	EXPECT_EQ(r.exit_code, 1);
	EXPECT_EQ(r.err, "sluice: " + work() +
				 "/p4.yaml line 2: tables: 'max_v6_prefixes' is a number from 1 to 16777216, not "
				 "'16777217'\n");
	EXPECT_EQ(cli_json({"status", "--json"})["max_v6_prefixes"], 2000u);

	// Unstated, it is max_rules's, and follows it. (And detach removes the
	// trie's record in the run directory with the rest of the state.)
	for (uint32_t set : {0u, 1u})
		EXPECT_EQ(access(sluice::trie6_set_path(run(), set).c_str(), F_OK), 0) << "the IPv6 trie's record is kept";
	EXPECT_EQ(access(sluice::trie6_index_path(run()).c_str(), F_OK), 0);
	ASSERT_EQ(cli({"detach", "--all"}).exit_code, 0);
	for (const auto &p :
	     {sluice::trie6_index_path(run()), sluice::trie6_set_path(run(), 0), sluice::trie6_set_path(run(), 1)})
		EXPECT_NE(access(p.c_str(), F_OK), 0) << p << " left by detach --all";
	ASSERT_EQ(cli({"apply", file("p5.yaml", policy("tables:\n  max_rules: 2000\nsets:\n"
							  "  - {name: six, family: 6, prefixes: []}\n"))})
			  .exit_code,
		  0);
	EXPECT_EQ(cli_json({"status", "--json"})["max_v6_prefixes"], 2000u);
	ASSERT_EQ(cli({"apply", file("p6.yaml", policy("tables:\n  max_rules: 3000\n"))}).exit_code, 0);
	EXPECT_EQ(cli_json({"status", "--json"})["max_v6_prefixes"], 3000u);
	EXPECT_NE(cli({"export"}).out.find("tables:\n  max_rules: 3000\nsets:"), std::string::npos)
		<< "export states no max_v6_prefixes: " << cli({"export"}).out;
}
