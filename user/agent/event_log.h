// SPDX-License-Identifier: GPL-2.0-only
// The agent's event log: it owns the ring buffer of throttle events while it
// runs, writes each event as a JSON line on standard output (the journal,
// under systemd), and serves the same lines to `sluice events` over a local
// socket.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent.h"
#include "events.h"

namespace sluice::agent {

class EventLog : public Component {
public:
	/// pin_dir: the state to follow; socket_path: where `sluice events` connects.
	EventLog(std::string pin_dir, std::string socket_path);
	~EventLog() override;

	std::string name() const override { return "events"; }
	void start() override;
	std::vector<int> watched_fds() const override;
	void on_readable(int fd) override;
	void tick() override;
	void stop() noexcept override;

private:
	void open_ring();
	void publish(const struct sluice_event &e);

	std::string pin_dir_, socket_path_;
	UniqueFd listener_;
	std::vector<UniqueFd> clients_;
	std::unique_ptr<MapSet> maps_;
	std::unique_ptr<EventNamer> namer_;
	std::unique_ptr<EventReader> reader_;
	std::unique_ptr<RingReaderLock> ring_lock_; ///< held while reader_ reads
	uint32_t rules_word_ = 0;                   ///< struct sluice_active's set when the namer last read the rules
	uint32_t ring_id_ = 0; ///< the ring buffer read now: an upgrade brings a new one
	std::string last_problem_;
};

} // namespace sluice::agent
