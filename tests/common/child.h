// SPDX-License-Identifier: GPL-2.0-only
// Child processes the end-to-end tests read from: a process whose stderr the
// test waits on line by line, and `sluice agent` on a port the kernel picks.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

namespace sluice::test {

/// A free TCP port on 127.0.0.1, as the kernel picks one.
uint16_t free_port();

/// A child process whose stderr the test reads; killed when it goes.
class Child {
public:
	explicit Child(const std::vector<std::string> &argv, const std::string &stdout_path = "/dev/null");
	~Child();
	Child(const Child &) = delete;
	Child &operator=(const Child &) = delete;

	/// Everything the child wrote to stderr until `pattern` matched a line,
	/// or until it exited or `limit` passed; empty if no line matched.
	std::string wait_for_line(const std::regex &pattern, std::chrono::seconds limit = std::chrono::seconds(10));
	const std::string &seen() const { return seen_; }

	/// Sends sig and waits, up to 20 s before SIGKILL; the exit code, or
	/// -signal if killed by one.
	int stop(int sig);
	bool running() const;
	/// Its process id, -1 once stopped. A command run through `env` is
	/// env's pid, and env execs the command: the same process.
	pid_t pid() const { return pid_; }

private:
	pid_t pid_ = -1;
	int err_ = -1;
	std::string pending_, seen_;
};

/// `sluice agent` on a port the kernel picks: `sluice` is the binary,
/// `prefix` goes before it (e.g. {"env", "SLUICE_PIN_DIR=..."}), `args`
/// after "agent --metrics 127.0.0.1:0".
class AgentProcess {
public:
	AgentProcess(const std::string &sluice, const std::vector<std::string> &args,
		     const std::vector<std::string> &prefix = {}, const std::string &stdout_path = "/dev/null");
	uint16_t port() const { return port_; }
	Child &child() { return child_; }

	/// The metrics as a scraper reads them.
	std::string scrape() const;

private:
	static std::vector<std::string> argv(const std::string &sluice, const std::vector<std::string> &args,
					     const std::vector<std::string> &prefix);
	Child child_;
	uint16_t port_ = 0;
};

/// The value of the sample `series` (name and labels, as exposed) in a
/// scrape; NaN if absent.
double metric_sample(const std::string &scrape, const std::string &series);

} // namespace sluice::test
