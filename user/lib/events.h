// SPDX-License-Identifier: GPL-2.0-only
// Throttle events (struct sluice_event): read from the program's ring buffer,
// named after the rules they belong to, and written as text or JSON lines.
#pragma once

#include <bpf/libbpf.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fd.h"

#include "maps.h"
#include "rule.h"

namespace sluice {

/// One event as a user reads it.
struct ThrottleEvent {
	/// What happened: a rule began or stopped dropping the source, or banned
	/// it (a rule with --ban), or its ban ran out.
	enum class Kind : uint8_t { throttled, released, ban, unban };
	bool throttled = true;      ///< false: released (or a ban's event)
	Kind kind = Kind::throttled;
	int64_t unix_ns = 0;        ///< when, on the wall clock
	int64_t since_unix_ns = 0;  ///< when the episode began
	std::string source;         ///< the bucket's address or prefix ("203.0.113.7", "2001:db8:1::/64")
	uint32_t rule_id = 0;       ///< 0: the rule is gone
	std::string rule;           ///< its name
	bool shadow = false;        ///< a shadow rule: would-be drops, nothing was dropped
};

/// Names events' buckets after the rules they belonged to (bucket id ->
/// rule): the installed rules, read again when an event names a bucket it
/// does not know, and the rules since deleted (or whose buckets restarted),
/// as they were: those it saw itself, and those the record of retired rules
/// holds (see record_retired_rules). A name once learnt is never forgotten:
/// an event that arrives after its rule's deletion is named all the same.
class EventNamer {
public:
	explicit EventNamer(const MapSet &maps);
	ThrottleEvent name(const struct sluice_event &e);
	/// Reads the installed rules again (the agent does when they change, so
	/// that it knows a rule deleted soon after it was added).
	void refresh();

private:
	void read_retired();
	void read_retired_file(const std::string &path);
	const MapSet &maps_;
	uint64_t loaded_ns_ = 0; ///< the program's: names the record of retired rules
	std::map<uint32_t, InstalledRule> by_bucket_;
};

/// Where the rules retired from the program loaded at `loaded_ns` (struct
/// sluice_meta) are recorded: the instance's run directory (default_run_dir()) /
/// retired-rules-<loaded_ns>, one JSON object a line.
std::string retired_rules_path(uint64_t loaded_ns);
/// Appends the rules whose buckets a change retired (`bucket_id`: the
/// bucket; the rule as it was), so that a reader started later names their
/// events. Best effort: a record that cannot be written fails no change.
/// The record keeps the last 8 to 16 MiB of lines.
void record_retired_rules(uint64_t loaded_ns, const std::vector<InstalledRule> &rules);
/// Removes the record of the program loaded at `loaded_ns` (unloaded, or
/// replaced by an upgrade: its ring buffer is read no more).
void forget_retired_rules(uint64_t loaded_ns);
/// Removes from `run_dir` what event readers keep there for any program of
/// the instance: the ring readers' locks (events-<ring id>.lock) and the
/// records of retired rules. For `detach --all`, which leaves no program
/// whose events these name.
void forget_event_records(const std::string &run_dir);

/// "2026-11-22T13:20:01.123Z throttled 203.0.113.7 by rule web (3)" and
/// "... released ... after 4.2 s".
std::string format_event(const ThrottleEvent &e);
/// One JSON object on one line.
std::string event_json(const ThrottleEvent &e);
/// Back from event_json's line (what the agent serves); throws on another line.
ThrottleEvent event_from_json(const std::string &line);

/// Where a running agent serves events: agent.sock in the run directory
/// (default_run_dir(): $SLUICE_RUN_DIR, else the pin directory's, such as
/// /run/sluice/agent.sock).
std::string default_events_socket();

/// The right to read a ring buffer of throttle events: each event goes to
/// one reader, so one process reads it (the agent, which serves every
/// `sluice events`, or one `sluice events` when no agent runs) and the
/// others follow the agent. An flock on $SLUICE_RUN_DIR/events-<ring id>.lock.
class RingReaderLock {
public:
	/// Takes it without waiting; empty() if another process holds it.
	explicit RingReaderLock(uint32_t ring_id);
	bool held() const { return bool(fd_); }

private:
	UniqueFd fd_;
};

/// Consumes the ring buffer of throttle events. Only one consumer may
/// read it at a time (each event goes to one): the holder of its
/// RingReaderLock.
class EventReader {
public:
	using Handler = std::function<void(const struct sluice_event &)>;
	EventReader(int ring_fd, Handler handler);
	~EventReader();
	EventReader(const EventReader &) = delete;
	EventReader &operator=(const EventReader &) = delete;

	/// Waits up to `timeout` for events and hands each to the handler;
	/// returns how many. Interrupted by a signal: 0.
	int poll(std::chrono::milliseconds timeout);
	/// The ring buffer's epoll descriptor, for an event loop of one's own.
	int fd() const;

private:
	static int on_sample(void *ctx, void *data, size_t size);
	Handler handler_;
	struct ring_buffer *ring_ = nullptr;
};

} // namespace sluice
