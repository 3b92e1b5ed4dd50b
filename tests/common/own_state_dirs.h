// SPDX-License-Identifier: GPL-2.0-only
// Every test's own Sluice state directories. The library keeps records in
// the instance's run directory ($SLUICE_RUN_DIR, else the pin directory's:
// /run/sluice for the default /sys/fs/bpf/sluice) even for a program that a
// test loads unpinned; without a directory of the test's own, a test's
// records (retired rules, the IPv6 trie's, counter resets) would be left in
// the operator's. The test binaries' main (test_main.cpp) gives each test its
// own pin and run directories, and removes them after it.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace sluice::test {

/// Sets (or, with nullopt, unsets) an environment variable for its
/// lifetime, and puts back the value it replaced.
class ScopedEnv {
public:
	ScopedEnv(std::string name, const std::optional<std::string> &value);
	~ScopedEnv();
	ScopedEnv(const ScopedEnv &) = delete;
	ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
	std::string name_;
	std::optional<std::string> saved_;
};

/// The listener test_main.cpp installs: before each test, SLUICE_RUN_DIR is
/// a directory of the test's own under /tmp (not made yet, as /run/sluice on
/// a fresh host) and SLUICE_PIN_DIR a pin directory of its own in bpffs
/// (for a test that names none); after it, both are removed with anything
/// the test left in them (and the run directory its pin directory's name
/// gives, for a test that unset SLUICE_RUN_DIR), and the variables are put
/// back as they were.
class OwnStateDirs : public ::testing::EmptyTestEventListener {
public:
	void OnTestStart(const ::testing::TestInfo &) override;
	void OnTestEnd(const ::testing::TestInfo &) override;

private:
	std::string base_, pin_dir_;
	std::optional<ScopedEnv> run_env_, pin_env_;
};

/// What the operator's default directories hold (/run/sluice,
/// /sys/fs/bpf/sluice and its lock beside it): one line per entry with its
/// type, size and modification time, sorted, to compare before and after.
std::string default_state_listing();

} // namespace sluice::test
