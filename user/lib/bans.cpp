// SPDX-License-Identifier: GPL-2.0-only
#include "bans.h"

#include <cerrno>
#include <ctime>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "error.h"
#include "event_note_bpf.skel.h"
#include "rule_maps.h"

namespace sluice {

namespace {

const uint8_t V4_MAPPED[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

Ban to_ban(const struct sluice_ban_key &k, const struct sluice_ban &v)
{
	return {ban_prefix(k), v.slot, v.bucket_id, v.since_ns, v.until_ns, v.drops};
}

bool in_force(const struct sluice_ban &v, uint64_t now_ns) { return int64_t(now_ns - v.until_ns) < 0; }

/// The event of ban `b` (as bpf/lib/bans.h's emit_ban_event makes it).
struct sluice_event ban_event(const struct sluice_ban &b, uint32_t kind, uint64_t now_ns)
{
	struct sluice_event e = {};
	Cidr c = ban_prefix(b.key);
	e.ns = now_ns;
	e.since_ns = b.since_ns;
	e.kind = kind;
	e.pad = uint32_t(c.prefix_len);
	e.key.bucket_id = b.bucket_id;
	e.key.family = c.family == 4 ? SLUICE_TABLE_V4 : SLUICE_TABLE_V6;
	std::memcpy(e.key.addr, c.addr.data(), c.family == 4 ? 4 : 16);
	return e;
}

/// Writes the controller's events into the program's ring buffer
/// (bpf/event_note.bpf.c), loaded once for all it writes.
class EventNote {
public:
	explicit EventNote(const MapSet &maps) : skel_(event_note_bpf__open(), event_note_bpf__destroy)
	{
		if (!skel_)
			throw_errno("cannot open the event writer", errno);
		if (int err = bpf_map__reuse_fd(skel_->maps.SLUICE_MAP_EVENTS, maps.events.get()))
			throw_errno("cannot share the event ring buffer", -err);
		if (int err = bpf_map__reuse_fd(skel_->maps.SLUICE_MAP_COUNTERS, maps.counters.get()))
			throw_errno("cannot share the counters", -err);
		if (int err = event_note_bpf__load(skel_.get()))
			throw_errno("cannot load the event writer", -err);
	}

	/// Writes `e` and adds one to `counter` (a SLUICE_CNT_INFO_UNBANS_* reason).
	void write(const struct sluice_event &e, enum sluice_counter_index counter)
	{
		struct sluice_event_note n = {};
		n.event = e;
		n.counter = counter;
		LIBBPF_OPTS(bpf_test_run_opts, run, .ctx_in = &n, .ctx_size_in = sizeof(n));
		if (bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.sluice_event_note), &run))
			throw_errno("cannot write an event", errno);
		if (run.retval)
			throw Error("cannot write an event: the ring buffer is full");
	}

private:
	std::unique_ptr<struct event_note_bpf, void (*)(struct event_note_bpf *)> skel_;
};

/// Removes the entries of `fd` that `gone` picks (it returns the reason, a
/// SLUICE_CNT_INFO_UNBANS_* counter, or nothing to keep the ban), each with
/// its UNBAN event and counted under its reason when this delete is the one
/// that removed it (the program's, or another command's, may have come
/// first: one event a ban). Returns how many.
template <class Pick> size_t lift_bans(const MapSet &maps, uint64_t now_ns, const Pick &gone)
{
	std::unique_ptr<EventNote> note;
	size_t lifted = 0;
	for (const auto &[k, v] : read_ban_entries(maps.bans.get())) {
		std::optional<enum sluice_counter_index> reason = gone(v);
		if (!reason)
			continue;
		if (bpf_map_delete_elem(maps.bans.get(), &k)) {
			if (errno == ENOENT)
				continue;
			throw_errno("cannot remove the ban of " + format_cidr(ban_prefix(k)), errno);
		}
		lifted++;
		if (!note)
			note = std::make_unique<EventNote>(maps);
		note->write(ban_event(v, SLUICE_EVENT_UNBAN, now_ns), *reason);
	}
	return lifted;
}

} // namespace

struct sluice_ban_key ban_key(const Cidr &prefix)
{
	struct sluice_ban_key k = {};
	if (prefix.family == 4) {
		std::memcpy(k.addr, V4_MAPPED, 12);
		std::memcpy(k.addr + 12, prefix.addr.data(), 4);
		k.prefixlen = 96 + uint32_t(prefix.prefix_len);
	} else {
		std::memcpy(k.addr, prefix.addr.data(), 16);
		k.prefixlen = uint32_t(prefix.prefix_len);
	}
	return k;
}

Cidr ban_prefix(const struct sluice_ban_key &k)
{
	Cidr c;
	if (k.prefixlen >= 96 && std::memcmp(k.addr, V4_MAPPED, 12) == 0) {
		c.family = 4;
		std::memcpy(c.addr.data(), k.addr + 12, 4);
		c.prefix_len = int(k.prefixlen - 96);
	} else {
		c.family = 6;
		std::memcpy(c.addr.data(), k.addr, 16);
		c.prefix_len = int(std::min<uint32_t>(k.prefixlen, 128));
	}
	return c;
}

uint64_t ban_clock_ns()
{
	struct timespec ts = {};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

std::string monotonic_to_utc(uint64_t mono_ns, uint64_t mono_now, int64_t wall_now_s)
{
	// Signed: a ban's end lies ahead, its start behind.
	int64_t delta_ns = int64_t(mono_ns - mono_now);
	time_t t = time_t(wall_now_s + delta_ns / 1000000000LL);
	struct tm tm = {};
	gmtime_r(&t, &tm);
	char buf[32];
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

std::vector<std::pair<struct sluice_ban_key, struct sluice_ban>> read_ban_entries(int fd)
{
	std::vector<std::pair<struct sluice_ban_key, struct sluice_ban>> out;
	struct sluice_ban_key key = {}, next = {};
	const void *prev = nullptr;
	// The table is small and bounded; its keys are walked one by one.
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		struct sluice_ban v = {};
		if (bpf_map_lookup_elem(fd, &next, &v) == 0)
			out.emplace_back(next, v);
		key = next;
		prev = &key;
	}
	if (errno != ENOENT)
		throw_errno("cannot read the ban table", errno);
	return out;
}

std::vector<Ban> list_bans(const MapSet &maps, uint64_t now_ns)
{
	std::vector<Ban> out;
	for (const auto &[k, v] : read_ban_entries(maps.bans.get()))
		if (in_force(v, now_ns))
			out.push_back(to_ban(k, v));
	std::sort(out.begin(), out.end(), [](const Ban &a, const Ban &b) {
		return a.since_ns != b.since_ns ? a.since_ns > b.since_ns : a.prefix < b.prefix;
	});
	return out;
}

std::optional<Ban> covering_ban(const MapSet &maps, const Cidr &addr, uint64_t now_ns)
{
	std::optional<Ban> found;
	for (const auto &[key, val] : read_ban_entries(maps.bans.get())) {
		Cidr p = ban_prefix(key);
		if (!in_force(val, now_ns) || !cidr_contains(p, addr))
			continue;
		if (!found || p.prefix_len > found->prefix.prefix_len)
			found = to_ban(key, val);
	}
	return found;
}

std::optional<Ban> remove_ban(const MapSet &maps, const Cidr &addr, uint64_t now_ns)
{
	int fd = maps.bans.get();
	std::optional<Ban> found = covering_ban(maps, addr, now_ns);
	if (!found)
		return std::nullopt;
	struct sluice_ban_key k = ban_key(found->prefix);
	if (bpf_map_delete_elem(fd, &k)) {
		if (errno != ENOENT)
			throw_errno("cannot remove the ban of " + format_cidr(found->prefix), errno);
		return found; // it ran out and went a moment ago, reported by whoever removed it
	}
	struct sluice_ban v = {};
	v.since_ns = found->since_ns;
	v.bucket_id = found->bucket_id;
	v.key = k;
	EventNote(maps).write(ban_event(v, SLUICE_EVENT_UNBAN, now_ns), SLUICE_CNT_INFO_UNBANS_DELETED);
	return found;
}

void bans_before_switch(const MapSet &maps, const std::vector<InstalledRule> &after)
{
	if (std::any_of(after.begin(), after.end(), [](const InstalledRule &r) { return r.spec.ban.ns != 0; }))
		rule_maps::write_ban_switch(maps, 1);
}

void bans_after_switch(const MapSet &maps, const std::vector<InstalledRule> &after)
{
	std::vector<bool> bans(maps.max_rules());
	bool any = false;
	for (const auto &r : after)
		if (r.spec.ban.ns && r.slot < bans.size())
			bans[r.slot] = any = true;
	uint64_t now = ban_clock_ns();
	size_t left = 0;
	// A rule that bans no more lifts its bans, and a ban run out goes.
	lift_bans(maps, now, [&](const struct sluice_ban &v) -> std::optional<enum sluice_counter_index> {
		if (!in_force(v, now))
			return SLUICE_CNT_INFO_UNBANS_EXPIRED;
		if (v.slot >= bans.size() || !bans[v.slot])
			return SLUICE_CNT_INFO_UNBANS_RULE;
		left++;
		return std::nullopt;
	});
	if (!any && !left)
		rule_maps::write_ban_switch(maps, 0);
}

size_t sweep_bans(const MapSet &maps, uint64_t now_ns)
{
	if (!rule_maps::read_active(maps).bans)
		return 0;
	return lift_bans(maps, now_ns, [now_ns](const struct sluice_ban &v) -> std::optional<enum sluice_counter_index> {
		if (in_force(v, now_ns))
			return std::nullopt;
		return SLUICE_CNT_INFO_UNBANS_EXPIRED;
	});
}

void restore_bans(const MapSet &maps, const std::vector<std::pair<struct sluice_ban_key, struct sluice_ban>> &bans)
{
	if (bans.empty())
		return;
	rule_maps::write_ban_switch(maps, 1);
	for (const auto &[k, v] : bans)
		map_update(maps.bans.get(), &k, &v, "a ban");
}

} // namespace sluice
