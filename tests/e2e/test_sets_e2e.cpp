// SPDX-License-Identifier: GPL-2.0-only
// End to end, the block-list recipe of docs/operations.md run as written (its
// two shell blocks, read from the page): a set loaded from a file and a deny
// rule on it, then the cron job refreshing it from a published list. Real
// UDP over veth says who is dropped; a malformed list changes nothing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "process.h"
#include "sockaddr.h"

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
