// SPDX-License-Identifier: GPL-2.0-only
// A test keeps its records in directories of its own, never in the
// operator's: the library writes the instance's run directory (retired rules,
// the IPv6 trie's record) even for a program a test loads unpinned, and the
// default one is /run/sluice, where a later `sluice` would find the test's
// stale records. The binaries' main gives each test its own (own_state_dirs.h).
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fixture.h"
#include "own_state_dirs.h"
#include "sluice_abi.h"

namespace sluice::test {
namespace {

/// The Datapath fixture with the default directories' listing taken before
/// the program is loaded.
class OwnStateDirectories : public Datapath {
protected:
	void SetUp() override
	{
		before_ = default_state_listing();
		Datapath::SetUp();
	}
	std::string before_;
};

/// The names in `dir`, one a line; empty if there is no such directory.
std::string names_in(const std::string &dir)
{
	std::string out;
	std::error_code ec;
	for (const auto &e : std::filesystem::directory_iterator(dir, ec))
		out += e.path().filename().string() + "\n";
	return out;
}

TEST_F(OwnStateDirectories, RuleChangesLeaveTheDefaultRunAndPinDirectoriesAsTheyWere)
{
	const char *run = std::getenv("SLUICE_RUN_DIR");
	ASSERT_NE(run, nullptr) << "no run directory of the test's own: records go to /run/sluice";
	ASSERT_EQ(std::string(run).rfind("/tmp/", 0), 0u) << run;
	const char *pin = std::getenv("SLUICE_PIN_DIR");
	ASSERT_NE(pin, nullptr) << "no pin directory of the test's own";
	ASSERT_NE(std::string(pin), SLUICE_PIN_DIR);

	add("10.9.0.0/16", "10/s", 5, "v4");
	add("2001:db8:9::/48", "10/s", 5, "v6");
	table_->remove("v4"); // recorded, for its events' names
	table_->remove("v6");
	table_.reset();
	prog_.reset();

	// What the changes wrote, in the test's own directory: without it, the
	// comparison below would prove nothing.
	std::string own = names_in(run);
	EXPECT_NE(own.find("retired-rules-"), std::string::npos) << own;
	EXPECT_NE(own.find("ipv6-trie.index"), std::string::npos) << own;
	EXPECT_EQ(default_state_listing(), before_) << "the test wrote into the operator's directories";
}

} // namespace
} // namespace sluice::test
