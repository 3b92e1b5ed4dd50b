// SPDX-License-Identifier: GPL-2.0-only
// The agent: a long-running, optional process beside the data plane. It only
// reads the pinned state; enforcement never depends on it. Its work is done
// by components (the metrics exporter; later the event log and the cluster
// sync) that one main loop starts, feeds and stops.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "fd.h"

namespace sluice::agent {

/// One part of the agent. The main loop calls start() once, then tick()
/// about once per tick interval and on_readable(fd) whenever one of its
/// watched descriptors is readable, then stop() once.
class Component {
public:
	virtual ~Component() = default;
	virtual std::string name() const = 0;
	/// Starts serving; throws if it cannot (the agent then exits with the reason).
	virtual void start() = 0;
	/// Descriptors the main loop waits on for this component.
	virtual std::vector<int> watched_fds() const { return {}; }
	virtual void on_readable(int /*fd*/) {}
	virtual void tick() {}
	/// Stops serving; called in the reverse order of start().
	virtual void stop() noexcept {}
};

/// The main loop and the components it runs.
class Agent {
public:
	explicit Agent(std::chrono::milliseconds tick = std::chrono::seconds(1));
	Agent(const Agent &) = delete;
	Agent &operator=(const Agent &) = delete;

	void add(std::unique_ptr<Component> component);

	/// Blocks SIGTERM and SIGINT (so every thread a component starts leaves
	/// them to the loop), starts the components in order and runs until one
	/// of those signals arrives or stop() is called; then stops them. Returns
	/// the signal that ended it, or 0.
	int run();

	/// Makes run() return; safe from any thread.
	void stop();

private:
	std::vector<std::unique_ptr<Component>> components_;
	std::chrono::milliseconds tick_;
	UniqueFd wake_; ///< an eventfd that stop() writes
};

/// Writes "sluice agent: <line>" to stderr as one write, so lines of
/// several threads do not interleave.
void log_line(const std::string &line);

} // namespace sluice::agent
