// SPDX-License-Identifier: GPL-2.0-only
#include "events.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "error.h"
#include "net.h"
#include "rule_table.h"
#include "state_dirs.h"

namespace sluice {

namespace {

int64_t clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

/// CLOCK_MONOTONIC (the program's clock) to the wall clock, as of now.
int64_t to_unix_ns(uint64_t mono_ns)
{
	return clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC) + int64_t(mono_ns);
}

std::string iso_time(int64_t unix_ns)
{
	time_t secs = unix_ns / 1000000000;
	struct tm tm;
	gmtime_r(&secs, &tm);
	char buf[40];
	size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	std::snprintf(buf + n, sizeof(buf) - n, ".%03dZ", int((unix_ns / 1000000) % 1000));
	return buf;
}

} // namespace

namespace {

/// How far a record of retired rules grows before it starts again (about
/// 80,000 rules; the one before is kept beside it).
constexpr off_t RETIRED_RECORD_BYTES = 8 << 20;

/// The instance's run directory (the pin directory's, unless
/// $SLUICE_RUN_DIR names another).
std::string run_dir() { return default_run_dir(); }

/// run_dir(), made 0700 if missing and checked: for the writers.
std::string made_run_dir()
{
	std::string dir = run_dir();
	make_private_dir(dir, "run directory");
	return dir;
}

} // namespace

EventNamer::EventNamer(const MapSet &maps) : maps_(maps)
{
	uint32_t zero = 0;
	struct sluice_meta meta = {};
	if (bpf_map_lookup_elem(maps_.meta.get(), &zero, &meta) == 0)
		loaded_ns_ = meta.loaded_ns;
	refresh();
}

void EventNamer::refresh()
{
	// Added to, never cleared: the rules gone since keep their names.
	for (const auto &r : RuleTable(maps_).list())
		by_bucket_[bucket_id(r)] = r;
}

void EventNamer::read_retired()
{
	// The newer record first: a bucket id is retired once, but what the
	// newer says wins all the same.
	for (const std::string &path : {retired_rules_path(loaded_ns_), retired_rules_path(loaded_ns_) + ".old"})
		read_retired_file(path);
}

void EventNamer::read_retired_file(const std::string &path)
{
	std::ifstream in(path);
	for (std::string line; std::getline(in, line);) {
		try {
			auto j = nlohmann::json::parse(line);
			InstalledRule r;
			r.id = j.at("rule_id").get<uint32_t>();
			r.bucket_id = j.at("bucket").get<uint32_t>();
			r.spec.name = j.at("rule").get<std::string>();
			r.spec.shadow = j.at("shadow").get<bool>();
			r.spec.per_prefix = j.at("per").get<int>();
			by_bucket_.emplace(r.bucket_id, r); // what the live table says comes first
		} catch (const nlohmann::json::exception &) {
			// A line cut short by a killed writer: the others still count.
		}
	}
}

std::string retired_rules_path(uint64_t loaded_ns)
{
	return run_dir() + "/retired-rules-" + std::to_string(loaded_ns);
}

void record_retired_rules(uint64_t loaded_ns, const std::vector<InstalledRule> &rules)
{
	if (rules.empty())
		return;
	std::string text;
	for (const auto &r : rules) {
		nlohmann::ordered_json j = {{"bucket", r.bucket_id ? r.bucket_id : r.id},
					    {"rule_id", r.id},
					    {"rule", r.spec.name},
					    {"shadow", r.spec.shadow},
					    {"per", r.spec.bucket_prefix()}};
		text += j.dump() + "\n";
	}
	// Bounded: past RETIRED_RECORD_BYTES the record moves to ".old" (the
	// one before it goes) and starts again; readers read both.
	try {
		made_run_dir();
	} catch (const Error &) {
		return; // after the change is live: the record is best effort, as a write that fails below
	}
	std::string path = retired_rules_path(loaded_ns);
	if (struct stat st; stat(path.c_str(), &st) == 0 && st.st_size > RETIRED_RECORD_BYTES)
		rename(path.c_str(), (path + ".old").c_str());
	// One write of whole lines, appended: concurrent writers (under the
	// pin directory's lock there are none) never interleave within a line.
	UniqueFd fd(open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
	if (fd)
		[[maybe_unused]] ssize_t n = write(fd.get(), text.data(), text.size());
}

void forget_retired_rules(uint64_t loaded_ns)
{
	unlink(retired_rules_path(loaded_ns).c_str());
	unlink((retired_rules_path(loaded_ns) + ".old").c_str());
}

void forget_event_records(const std::string &run_dir)
{
	remove_files_named(run_dir, "events-", ".lock");
	remove_files_named(run_dir, "retired-rules-", "");
}

RingReaderLock::RingReaderLock(uint32_t ring_id)
{
	std::string path = made_run_dir() + "/events-" + std::to_string(ring_id) + ".lock";
	UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
	if (!fd)
		throw_errno("cannot open " + path, errno);
	if (flock(fd.get(), LOCK_EX | LOCK_NB) == 0)
		fd_ = std::move(fd);
	else if (errno != EWOULDBLOCK)
		throw_errno("cannot lock " + path, errno);
}

ThrottleEvent EventNamer::name(const struct sluice_event &e)
{
	ThrottleEvent out;
	out.throttled = e.kind == SLUICE_EVENT_THROTTLED;
	out.kind = e.kind == SLUICE_EVENT_THROTTLED ? ThrottleEvent::Kind::throttled
		   : e.kind == SLUICE_EVENT_BAN     ? ThrottleEvent::Kind::ban
		   : e.kind == SLUICE_EVENT_UNBAN   ? ThrottleEvent::Kind::unban
						    : ThrottleEvent::Kind::released;
	out.unix_ns = to_unix_ns(e.ns);
	out.since_unix_ns = to_unix_ns(e.since_ns);
	if (!by_bucket_.count(e.key.bucket_id))
		refresh();
	if (!by_bucket_.count(e.key.bucket_id))
		read_retired();
	Cidr c;
	c.family = e.key.family == SLUICE_TABLE_V6 ? 6 : 4;
	std::copy(std::begin(e.key.addr), std::end(e.key.addr), c.addr.begin());
	c.prefix_len = c.max_len();
	if (auto it = by_bucket_.find(e.key.bucket_id); it != by_bucket_.end()) {
		out.rule_id = it->second.id;
		out.rule = it->second.spec.name;
		out.shadow = it->second.spec.shadow;
		c.prefix_len = it->second.spec.bucket_prefix();
	}
	if (e.kind == SLUICE_EVENT_BAN || e.kind == SLUICE_EVENT_UNBAN)
		c.prefix_len = std::min<int>(int(e.pad), c.max_len()); // the ban's own prefix
	out.source = format_cidr(c);
	return out;
}

namespace {

const char *kind_name(ThrottleEvent::Kind k)
{
	switch (k) {
	case ThrottleEvent::Kind::throttled: return "throttled";
	case ThrottleEvent::Kind::released: return "released";
	case ThrottleEvent::Kind::ban: return "ban";
	default: return "unban";
	}
}

} // namespace

std::string format_event(const ThrottleEvent &e)
{
	std::string rule = e.rule_id ? "rule " + e.rule + " (" + std::to_string(e.rule_id) + ")" : "a deleted rule";
	if (e.kind == ThrottleEvent::Kind::ban)
		return iso_time(e.unix_ns) + " banned " + e.source + " by " + rule;
	if (e.kind == ThrottleEvent::Kind::unban) {
		char buf[48];
		std::snprintf(buf, sizeof(buf), " after %.1f s", double(e.unix_ns - e.since_unix_ns) / 1e9);
		return iso_time(e.unix_ns) + " unbanned " + e.source + " (banned by " + rule + ")" + buf;
	}
	std::string line = iso_time(e.unix_ns) + (e.throttled ? " throttled " : " released ") + e.source + " by " + rule;
	if (e.shadow)
		line += " (shadow: would-be drops, all passed)";
	if (!e.throttled) {
		char buf[48];
		std::snprintf(buf, sizeof(buf), " after %.1f s", double(e.unix_ns - e.since_unix_ns) / 1e9);
		line += buf;
	}
	return line;
}

std::string event_json(const ThrottleEvent &e)
{
	nlohmann::ordered_json j;
	j["time"] = iso_time(e.unix_ns);
	j["event"] = kind_name(e.kind);
	j["source"] = e.source;
	j["rule"] = e.rule_id ? nlohmann::ordered_json(e.rule) : nlohmann::ordered_json(nullptr);
	j["rule_id"] = e.rule_id;
	j["shadow"] = e.shadow;
	j["since"] = iso_time(e.since_unix_ns);
	if (e.kind == ThrottleEvent::Kind::unban)
		j["banned_seconds"] = std::round(double(e.unix_ns - e.since_unix_ns) / 1e6) / 1e3;
	else if (e.kind == ThrottleEvent::Kind::released)
		j["throttled_seconds"] = std::round(double(e.unix_ns - e.since_unix_ns) / 1e6) / 1e3;
	j["unix_ns"] = e.unix_ns;
	j["since_unix_ns"] = e.since_unix_ns;
	return j.dump();
}

ThrottleEvent event_from_json(const std::string &line)
{
	try {
		auto j = nlohmann::json::parse(line);
		ThrottleEvent e;
		std::string kind = j.at("event").get<std::string>();
		e.throttled = kind == "throttled";
		e.kind = kind == "throttled" ? ThrottleEvent::Kind::throttled
			 : kind == "ban"     ? ThrottleEvent::Kind::ban
			 : kind == "unban"   ? ThrottleEvent::Kind::unban
					     : ThrottleEvent::Kind::released;
		e.source = j.at("source").get<std::string>();
		e.rule_id = j.at("rule_id").get<uint32_t>();
		e.rule = j.at("rule").is_null() ? "" : j.at("rule").get<std::string>();
		e.shadow = j.at("shadow").get<bool>();
		e.unix_ns = j.at("unix_ns").get<int64_t>();
		e.since_unix_ns = j.at("since_unix_ns").get<int64_t>();
		return e;
	} catch (const nlohmann::json::exception &) {
		throw Error("the agent sent a line that is no event: " + line.substr(0, 80));
	}
}

std::string default_events_socket()
{
	return default_run_dir() + "/agent.sock";
}

EventReader::EventReader(int ring_fd, Handler handler) : handler_(std::move(handler))
{
	ring_ = ring_buffer__new(ring_fd, on_sample, this, nullptr);
	if (!ring_)
		throw_errno("cannot open the throttle events' ring buffer", errno);
}

EventReader::~EventReader() { ring_buffer__free(ring_); }

int EventReader::on_sample(void *ctx, void *data, size_t size)
{
	if (size >= sizeof(struct sluice_event))
		static_cast<EventReader *>(ctx)->handler_(*static_cast<const struct sluice_event *>(data));
	return 0;
}

int EventReader::poll(std::chrono::milliseconds timeout)
{
	int n = ring_buffer__poll(ring_, static_cast<int>(timeout.count()));
	if (n < 0 && n != -EINTR)
		throw_errno("cannot read the throttle events", -n);
	return n < 0 ? 0 : n;
}

int EventReader::fd() const { return ring_buffer__epoll_fd(ring_); }

} // namespace sluice
