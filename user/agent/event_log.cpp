// SPDX-License-Identifier: GPL-2.0-only
#include "event_log.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "bans.h"
#include "datapath.h"
#include "error.h"

namespace sluice::agent {

EventLog::EventLog(std::string pin_dir, std::string socket_path)
	: pin_dir_(std::move(pin_dir)), socket_path_(std::move(socket_path))
{
}

EventLog::~EventLog() { stop(); }

void EventLog::start()
{
	sockaddr_un addr{};
	addr.sun_family = AF_UNIX;
	if (socket_path_.size() >= sizeof(addr.sun_path))
		throw Error("the events socket path is too long: " + socket_path_);
	std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
	std::string dir = socket_path_.substr(0, socket_path_.rfind('/'));
	if (!dir.empty())
		mkdir(dir.c_str(), 0755); // EEXIST is fine; bind says what else is wrong
	// A socket left by an agent that died is taken over; a live agent's is not.
	UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (connect(probe.get(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0)
		throw Error("another agent serves events at " + socket_path_);
	unlink(socket_path_.c_str());
	listener_.reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
	if (!listener_ || bind(listener_.get(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) ||
	    listen(listener_.get(), 16))
		throw_errno("cannot serve events at " + socket_path_, errno);
	open_ring();
}

void EventLog::open_ring()
{
	try {
		Instance inst(pin_dir_);
		if (!inst.loaded()) {
			reader_.reset();
			ring_lock_.reset();
			ring_id_ = 0;
			return;
		}
		auto lock = inst.lock(false);
		auto maps = std::make_unique<MapSet>(inst.maps());
		uint32_t id = map_info(maps->events.get()).id;
		if (id == ring_id_ && reader_)
			return;
		// One reader per ring: a `sluice events` that read it before the
		// agent started keeps it until it exits (then the next tick takes it).
		auto ring_lock = std::make_unique<RingReaderLock>(id);
		if (!ring_lock->held())
			throw Error("the ring buffer of events is read by another process (a `sluice events` started "
				    "before the agent, or another agent); waiting for it to stop");
		ring_lock_ = std::move(ring_lock);
		namer_ = std::make_unique<EventNamer>(*maps);
		reader_ = std::make_unique<EventReader>(maps->events.get(),
							[this](const struct sluice_event &e) { publish(e); });
		maps_ = std::move(maps);
		ring_id_ = id;
		last_problem_.clear();
	} catch (const std::exception &e) {
		reader_.reset();
		ring_lock_.reset();
		ring_id_ = 0;
		if (last_problem_ != e.what())
			log_line(std::string("events: ") + e.what());
		last_problem_ = e.what();
	}
}

void EventLog::publish(const struct sluice_event &e)
{
	std::string line = event_json(namer_->name(e)) + "\n";
	std::cout << line << std::flush;
	// A reader that cannot keep up is dropped, never waited for.
	for (auto it = clients_.begin(); it != clients_.end();) {
		ssize_t n = send(it->get(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n == static_cast<ssize_t>(line.size()))
			++it;
		else
			it = clients_.erase(it);
	}
}

std::vector<int> EventLog::watched_fds() const
{
	std::vector<int> fds;
	if (listener_)
		fds.push_back(listener_.get());
	if (reader_)
		fds.push_back(reader_->fd());
	return fds;
}

void EventLog::on_readable(int fd)
{
	if (listener_ && fd == listener_.get()) {
		UniqueFd c(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
		if (c)
			clients_.push_back(std::move(c));
		return;
	}
	if (reader_)
		reader_->poll(std::chrono::milliseconds(0));
}

void EventLog::tick()
{
	// The program may have been loaded, replaced (`sluice upgrade`) or
	// removed since: follow its ring buffer.
	UniqueFd pinned(open_pinned_object(pin_dir_ + "/" SLUICE_STR(SLUICE_MAP_EVENTS)));
	uint32_t id = pinned ? map_info(pinned.get()).id : 0;
	if (id != ring_id_ || !reader_)
		open_ring();
	if (reader_) {
		// The rules changed: learn them now, so that a rule deleted later
		// keeps its name in its events.
		uint32_t zero = 0;
		struct sluice_active active = {};
		if (bpf_map_lookup_elem(maps_->active.get(), &zero, &active) == 0 && active.set != rules_word_) {
			rules_word_ = active.set;
			try {
				namer_->refresh();
			} catch (const std::exception &e) {
				log_line(std::string("events: ") + e.what());
			}
		}
		try {
			sweep_bans(*maps_, ban_clock_ns()); // bans run out of sources gone quiet: their unban
		} catch (const std::exception &e) {
			log_line(std::string("events: ") + e.what());
		}
		reader_->poll(std::chrono::milliseconds(0));
	}
}

void EventLog::stop() noexcept
{
	if (listener_) {
		listener_.reset();
		unlink(socket_path_.c_str());
	}
	clients_.clear();
	reader_.reset();
	ring_lock_.reset();
}

} // namespace sluice::agent
