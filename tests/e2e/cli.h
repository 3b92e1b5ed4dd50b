// SPDX-License-Identifier: GPL-2.0-only
// What the end-to-end test files share: the sluice binary under test run as
// a command (here, or inside a network namespace), the test's own pin and
// run directories, and the check that a test leaves nothing of its instance
// in bpffs. A test that names no directories has its own all the same, from
// the binaries' main (own_state_dirs.h).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "own_state_dirs.h"
#include "process.h"

namespace sluice::test {

/// `sluice ARGS` with the binary under test, in this network namespace.
inline CommandResult cli(std::vector<std::string> args)
{
	args.insert(args.begin(), SLUICE_BIN);
	return run_command(args);
}

/// The command line of `sluice ARGS` run in network namespace `ns`: its
/// interfaces resolve there, while nsenter --net keeps the mount namespace,
/// so bpffs pins stay shared.
inline std::vector<std::string> sluice_in_netns(const std::string &ns, std::vector<std::string> args)
{
	args.insert(args.begin(), {"nsenter", "--net=/run/netns/" + ns, SLUICE_BIN});
	return args;
}

/// `sluice ARGS` run in network namespace `ns`.
inline CommandResult cli_in(const std::string &ns, std::vector<std::string> args)
{
	return run_command(sluice_in_netns(ns, std::move(args)));
}

/// The output of `sluice ARGS` parsed as JSON; a test failure (and null) if
/// the command fails.
inline nlohmann::json cli_json(std::vector<std::string> args)
{
	CommandResult r = cli(std::move(args));
	EXPECT_EQ(r.exit_code, 0) << r.err;
	return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

/// A rule's line of `stats --json` (by its name); a test failure (and an
/// empty object) if there is none.
inline nlohmann::json stats_rule_line(const std::string &name)
{
	nlohmann::json stats = cli_json({"stats", "--json"});
	if (stats.is_object())
		for (const auto &line : stats["rules"])
			if (line["name"] == name)
				return line;
	ADD_FAILURE() << "no rule " << name << " in " << stats.dump();
	return nlohmann::json::object();
}

/// A pin directory of this test process's own: /sys/fs/bpf/NAME-PID.
inline std::string test_pin_dir(const std::string &name)
{
	return "/sys/fs/bpf/" + name + "-" + std::to_string(getpid());
}

/// A run directory of this test process's own: /tmp/NAME-run-PID.
inline std::string test_run_dir(const std::string &name)
{
	return "/tmp/" + name + "-run-" + std::to_string(getpid());
}

/// The teardown of an instance pinned in `pin_dir` (SLUICE_PIN_DIR of the
/// test): `detach --all` as an operator runs it, which leaves nothing of
/// Sluice's in bpffs; anything still there (the pin directory, its lock or
/// an upgrade's staging directory) fails the test, which left it (say, state
/// of an earlier release this binary does not remove), and is removed so
/// that no program or map stays loaded on the machine.
inline void remove_instance_expecting_nothing_left(const std::string &pin_dir)
{
	run_command({"env", "SLUICE_PIN_DIR=" + pin_dir, SLUICE_BIN, "detach", "--all"});
	for (const std::string &d : {pin_dir, pin_dir + "-lock", pin_dir + "-next"}) {
		if (access(d.c_str(), F_OK) != 0)
			continue;
		ADD_FAILURE() << "the test left " << d << " behind (`sluice detach --all` did not remove it): "
			      << run_command({"find", d}).out;
		run_command({"rm", "-rf", d});
	}
}

/// A fixture of the test's own sluice instance, attached in native mode to the
/// receiving end of `topology` (made anew for each test) with the pin and run
/// directories test_pin_dir(name) and test_run_dir(name) in SLUICE_PIN_DIR and
/// SLUICE_RUN_DIR; `sluice ...` through cli() reaches it. Torn down with
/// `detach --all`, both directories and the topology removed.
class AttachedToVeth : public ::testing::Test {
protected:
	AttachedToVeth(const VethPair &topology, const std::string &name)
		: topology_(topology), pin_dir_(test_pin_dir(name)), run_dir_(test_run_dir(name))
	{
	}

	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "end-to-end tests create namespaces and attach XDP: run as root";
		setenv("SLUICE_PIN_DIR", pin_dir_.c_str(), 1);
		setenv("SLUICE_RUN_DIR", run_dir_.c_str(), 1);
		topology_.remove(); // leftovers of an interrupted run
		topology_.create();
		CommandResult r = cli_in(topology_.dst_ns, {"attach", topology_.dst_if, "--mode", "native"});
		ASSERT_EQ(r.exit_code, 0) << r.err;
	}

	void TearDown() override
	{
		cli({"detach", "--all"});
		rmdir(pin_dir_.c_str());
		rmdir((pin_dir_ + "-lock").c_str()); // the instance's lock, beside it
		run_command({"rm", "-rf", run_dir_});
		topology_.remove();
		unsetenv("SLUICE_RUN_DIR");
	}

	const std::string &run_dir() const { return run_dir_; }

private:
	const VethPair &topology_;
	std::string pin_dir_, run_dir_;
};

} // namespace sluice::test
