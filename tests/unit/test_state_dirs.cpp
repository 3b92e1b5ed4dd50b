// SPDX-License-Identifier: GPL-2.0-only
// Where an instance keeps its things (user/lib/state_dirs.h): the default
// instance keeps /run/sluice, and no two pin directories share a run
// directory, over generated pin directories.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "fnv.h"
#include "state_dirs.h"

using namespace sluice;

namespace {

/// Unsets SLUICE_RUN_DIR for a test, and puts back what was there.
class NoRunDirVariable {
public:
	NoRunDirVariable()
	{
		if (const char *v = std::getenv("SLUICE_RUN_DIR"))
			saved_ = v, had_ = true;
		unsetenv("SLUICE_RUN_DIR");
	}
	~NoRunDirVariable()
	{
		if (had_)
			setenv("SLUICE_RUN_DIR", saved_.c_str(), 1);
		else
			unsetenv("SLUICE_RUN_DIR");
	}

private:
	std::string saved_;
	bool had_ = false;
};

} // namespace

TEST(RunDir, TheDefaultInstanceKeepsRunSluiceAndAnotherUnderSysFsBpfIsNamedAfterIt)
{
	NoRunDirVariable guard;
	EXPECT_EQ(run_dir_for("/sys/fs/bpf/sluice"), "/run/sluice");
	EXPECT_EQ(run_dir_for("/sys/fs/bpf/sluice/"), "/run/sluice");
	EXPECT_EQ(run_dir_for("/sys/fs/bpf/edge"), "/run/sluice-edge");
	EXPECT_EQ(run_dir_for("/sys/fs/bpf//edge"), "/run/sluice-edge");
	EXPECT_EQ(lock_dir_for("/sys/fs/bpf/sluice"), "/sys/fs/bpf/sluice-lock");
	EXPECT_EQ(lock_dir_for("/sys/fs/bpf/edge/"), "/sys/fs/bpf/edge-lock");
	setenv("SLUICE_RUN_DIR", "/srv/sluice-run", 1);
	EXPECT_EQ(run_dir_for("/sys/fs/bpf/edge"), "/srv/sluice-run") << "the variable wins";
}

// bpffs names take no dots; a pin directory anywhere else gets its path's
// hash after a dot. Generated pin directories: names of the letters bpffs
// takes, at depths 1 to 3, under /sys/fs/bpf and under other mounts, with
// the same names in several places, spelled with stray slashes too: each
// spelling of one directory has the same run directory.
TEST(RunDir, NoTwoPinDirectoriesShareARunDirectory)
{
	NoRunDirVariable guard;
	std::mt19937 rng(20261127);
	const std::string letters = "abcdefghijklmnopqrstuvwxyz0123456789_-";
	const std::vector<std::string> roots = {"/sys/fs/bpf", "/sys/fs/bpf/sluice", "/mnt/bpf", "/tmp/b", "/run/bpf", ""};
	auto name = [&] {
		std::string n;
		for (size_t k = 1 + rng() % 6; k; k--)
			n += letters[rng() % letters.size()];
		return n;
	};
	std::map<std::string, std::string> owner;  // run directory -> the pin directory it serves
	std::map<std::string, std::string> run_of; // pin directory -> its run directory
	for (int i = 0; i < 200000; i++) {
		// `dir` is the directory meant, spelled once; `pin` spells it as
		// given, with a stray slash here and there.
		std::string dir = roots[rng() % roots.size()], pin = dir;
		for (size_t depth = 1 + rng() % 3; depth; depth--) {
			const std::string slash = rng() % 8 ? "/" : "//", n = name();
			dir += "/" + n;
			pin += slash + n;
		}
		if (rng() % 8 == 0)
			pin += "/";
		std::string run = run_dir_for(pin);
		ASSERT_EQ(run.rfind("/run/sluice", 0), 0u) << pin << " -> " << run;
		ASSERT_EQ(run.find('/', 5), std::string::npos) << "one directory under /run: " << pin << " -> " << run;
		auto [it, fresh] = owner.emplace(run, dir);
		ASSERT_EQ(it->second, dir) << "two pin directories share " << run << " (" << pin << ")";
		auto [first, new_dir] = run_of.emplace(dir, run);
		ASSERT_EQ(first->second, run) << "two spellings of " << dir << " have two run directories (" << pin << ")";
		if (dir == "/sys/fs/bpf/sluice")
			ASSERT_EQ(run, "/run/sluice");
		else
			ASSERT_NE(run, "/run/sluice") << pin;
	}
}

namespace sluice {
namespace {

// The one FNV-1a (fnv.h) gives the published test vectors, so the values kept
// with it (the stored layout hash: Upgrade.*; run directory names; the rule-set
// digest hosts compare) stay what they were.
TEST(Fnv1a, GivesThePublishedVectorsAndKeepsRunDirectoryNames)
{
	EXPECT_EQ(Fnv1a64().value(), 0xcbf29ce484222325ULL);
	EXPECT_EQ(Fnv1a64().add("a").value(), 0xaf63dc4c8601ec8cULL);
	EXPECT_EQ(Fnv1a64().add("foobar").value(), 0x85944171f73967e8ULL);
	EXPECT_EQ(Fnv1a64().add("foo").add("bar").value(), 0x85944171f73967e8ULL) << "fed in pieces";
	EXPECT_EQ(Fnv1a32().value(), 0x811c9dc5u);
	EXPECT_EQ(Fnv1a32().add("a").value(), 0xe40c292cu);
	EXPECT_EQ(Fnv1a32().add("foobar").value(), 0xbf9cf968u);
	unsetenv("SLUICE_RUN_DIR");
	EXPECT_EQ(run_dir_for("/srv/bpf/edge"), "/run/sluice-edge.9ebac20c");
}

} // namespace
} // namespace sluice
