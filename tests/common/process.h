// SPDX-License-Identifier: GPL-2.0-only
// Running commands from tests, and doing work inside a network namespace.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace sluice::test {

struct CommandResult {
	int exit_code = -1; ///< -1 if killed by a signal
	std::string out;
	std::string err;
};

/// Runs argv (PATH lookup) and captures its output; the environment is inherited.
CommandResult run_command(const std::vector<std::string> &argv);

/// Runs a shell command line; throws if it fails. For test topology setup.
void shell(const std::string &cmdline);

/// Runs fn in a child process that has joined network namespace `ns`
/// (/run/netns/NAME) and returns the child's exit code. fn returns the exit code.
int in_netns(const std::string &ns, const std::function<int()> &fn);

/// Two network namespaces joined by a veth pair: a sender and a receiver
/// (where sluice attaches), with a permanent neighbour entry so that no ARP
/// runs during a test. Addresses are "A.B.C.D/LEN".
struct VethPair {
	std::string src_ns, dst_ns, src_if, dst_if;
	std::string dst_addr;               ///< with its prefix length
	std::vector<std::string> src_addrs; ///< with their prefix lengths
	std::string mac_prefix;             ///< "02:00:00:00:03": the sender gets :01, the receiver :02

	/// Makes the namespaces, the pair and the addresses; throws if a step fails.
	void create() const;
	/// Deletes both namespaces (and the pair with them); quiet if they are gone.
	void remove() const;
};

/// Runs fn(0) and fn(1) on two threads pinned to CPU 0 and CPU 1, released at
/// the same instant (as a multi-queue NIC spreads one flood), and waits for both.
void run_on_two_cpus(const std::function<void(int cpu)> &fn);

} // namespace sluice::test
