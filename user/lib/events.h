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

#include "maps.h"
#include "rule.h"

namespace sluice {

/// One event as a user reads it.
struct ThrottleEvent {
	bool throttled = true;      ///< false: released
	int64_t unix_ns = 0;        ///< when, on the wall clock
	int64_t since_unix_ns = 0;  ///< when the episode began
	std::string source;         ///< the bucket's address or prefix ("203.0.113.7", "2001:db8:1::/64")
	uint32_t rule_id = 0;       ///< 0: the rule is gone
	std::string rule;           ///< its name
	bool shadow = false;        ///< a shadow rule: would-be drops, nothing was dropped
};

/// Names events' buckets after the installed rules (bucket id -> rule);
/// refreshed when an event names a bucket it does not know.
class EventNamer {
public:
	explicit EventNamer(const MapSet &maps) : maps_(maps) {}
	ThrottleEvent name(const struct sluice_event &e);

private:
	void refresh();
	const MapSet &maps_;
	std::map<uint32_t, InstalledRule> by_bucket_;
};

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

/// Consumes the ring buffer of throttle events. Only one consumer should
/// read it at a time (each event goes to one): the agent while it runs,
/// otherwise `sluice events`.
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
