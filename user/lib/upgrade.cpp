// SPDX-License-Identifier: GPL-2.0-only
#include "upgrade.h"
#include "bans.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <map>
#include <type_traits>
#include <unordered_map>

#include "rule_table.h"
#include "sluice_algos.h"
#include "sluice_settable.h"
#include "sources.h"
#include "stats.h"
#include "text_table.h"
#include "upgrade_abi7.h"

namespace sluice {

namespace {

// ---------------------------------------------------------------------------
// Reading a pinned map.

bool per_cpu(uint32_t type)
{
	return type == BPF_MAP_TYPE_PERCPU_ARRAY || type == BPF_MAP_TYPE_PERCPU_HASH ||
	       type == BPF_MAP_TYPE_LRU_PERCPU_HASH;
}

/// Every entry of one map, as raw bytes: keys, and values one stride each
/// (all CPUs' for a per-CPU map, each rounded up to 8 bytes).
struct RawMap {
	uint32_t type = 0, key_size = 0, value_size = 0, max_entries = 0, count = 0;
	std::vector<uint8_t> keys, values;
	size_t stride() const
	{
		return per_cpu(type) ? ((value_size + 7) & ~size_t(7)) * possible_cpus() : value_size;
	}
};

RawMap read_raw(int fd, const char *name)
{
	struct bpf_map_info info = map_info(fd);
	RawMap m;
	m.type = info.type;
	m.key_size = info.key_size;
	m.value_size = info.value_size;
	m.max_entries = info.max_entries;
	const uint32_t batch = 4096;
	std::vector<uint8_t> keys(size_t(batch) * m.key_size), values(size_t(batch) * m.stride());
	std::vector<uint8_t> cursor(std::max<uint32_t>(m.key_size, 8));
	bool first = true;
	for (;;) {
		uint32_t count = batch;
		LIBBPF_OPTS(bpf_map_batch_opts, opts);
		int err = bpf_map_lookup_batch(fd, first ? nullptr : cursor.data(), cursor.data(), keys.data(),
					       values.data(), &count, &opts);
		int saved = errno;
		first = false;
		m.keys.insert(m.keys.end(), keys.begin(), keys.begin() + long(count) * m.key_size);
		m.values.insert(m.values.end(), values.begin(), values.begin() + long(count * m.stride()));
		m.count += count;
		if (err) {
			if (saved == ENOENT)
				return m;
			throw_errno(std::string("cannot read map ") + name, saved);
		}
	}
}

/// Calls f(key, value of every CPU in turn) for each entry of a raw map whose
/// values are `Old`s, converted to today's struct.
template <class Key, class Old, class F> void each_entry(const RawMap &m, F f)
{
	const size_t step = (m.value_size + 7) & ~size_t(7), cpus = per_cpu(m.type) ? possible_cpus() : 1;
	for (uint32_t i = 0; i < m.count; i++) {
		Key key;
		std::memcpy(&key, &m.keys[size_t(i) * m.key_size], sizeof(key));
		std::vector<decltype(now(std::declval<Old>()))> values;
		for (size_t c = 0; c < cpus; c++) {
			Old v;
			std::memcpy(&v, &m.values[size_t(i) * m.stride() + c * step], sizeof(v));
			values.push_back(now(v));
		}
		f(key, values);
	}
}

/// An array map's entries, converted, in index order.
template <class Old> auto array_of(int fd, const char *name)
{
	RawMap m = read_raw(fd, name);
	std::vector<decltype(now(std::declval<Old>()))> out(m.max_entries);
	each_entry<uint32_t, Old>(m, [&](uint32_t k, const auto &v) {
		if (k < out.size())
			out[k] = v[0];
	});
	return out;
}

/// The maps read, by role: this binary's (MapSet) or 0.2.7's (by name).
struct Fds {
	int active, rules, rule_info, rule_counters, counters, meta, config, src4, src6, logs4, logs6, pending, owed,
		frags, iface_mtu;
};

/// The four kinds of set (today's), named by the struct 0.2.7 or today has.
template <class Layout> struct Structs;
struct Current {};
struct Previous {};
template <> struct Structs<Current> {
	using active = struct sluice_active;
	using rule = struct sluice_rule;
	using rule_info = struct sluice_rule_info;
	using rule_counters = struct sluice_rule_counters;
	using counter = struct sluice_counter;
	using config = struct sluice_config;
	using set_v4 = struct sluice_set_v4;
	using set_v6 = struct sluice_set_v6;
	using log_set_v4 = struct sluice_log_set_v4;
	using log_set_v6 = struct sluice_log_set_v6;
	using pending = struct sluice_pending_drops;
	using owed = struct sluice_owed;
	using frag_key = struct sluice_frag_key;
	using frag_info = struct sluice_frag_info;
	static int counter_index(uint32_t i) { return i < SLUICE_CNT_MAX ? int(i) : -1; }
};
template <> struct Structs<Previous> {
	using active = abi7::active;
	using rule = abi7::rule;
	using rule_info = abi7::rule_info;
	using rule_counters = abi7::rule_counters;
	using counter = abi7::counter;
	using config = abi7::config;
	using set_v4 = abi7::set_v4;
	using set_v6 = abi7::set_v6;
	using log_set_v4 = abi7::log_set_v4;
	using log_set_v6 = abi7::log_set_v6;
	using pending = abi7::pending_drops;
	using owed = abi7::owed;
	using frag_key = abi7::frag_key;
	using frag_info = abi7::frag_info;
	static int counter_index(uint32_t i) { return i < std::size(abi7::COUNTER_INDEX) ? abi7::COUNTER_INDEX[i] : -1; }
};

/// Reads everything worth keeping from maps of layout L, into today's structs.
template <class Layout> void read_maps(const Fds &fd, CarriedState &s)
{
	using L = Structs<Layout>;
	// Rules: the live set's entries, up to the higher of the two sets'
	// high-water marks (as RuleTable reads them).
	const uint32_t n = map_max_entries(fd.rule_counters);
	s.max_rules = n;
	struct sluice_active active = array_of<typename L::active>(fd.active, "the live-set word").at(0);
	const uint32_t reach = std::min(n, std::max(active.slots[0], active.slots[1]));
	auto dps = array_of<typename L::rule>(fd.rules, "rules");
	auto infos = array_of<typename L::rule_info>(fd.rule_info, "rule info");
	for (uint32_t slot = 0; slot < reach; slot++) {
		uint32_t i = sluice_rule_index(slot, active.set);
		if (i >= dps.size() || i >= infos.size() || dps[i].id == 0)
			continue;
		InstalledRule r = from_maps(dps[i], infos[i]);
		r.slot = slot;
		s.rules.push_back(r);
	}
	std::sort(s.rules.begin(), s.rules.end(), match_order);
	std::vector<bool> used(n, false);
	for (const auto &r : s.rules)
		used[r.slot] = true;
	each_entry<uint32_t, typename L::rule_counters>(read_raw(fd.rule_counters, "rule counters"),
						      [&](uint32_t slot, const auto &cpus) {
							      if (slot < n && used[slot])
								      s.rule_counters.emplace_back(slot, cpus);
						      });
	const size_t cpus = possible_cpus();
	s.counters.assign(size_t(SLUICE_CNT_MAX) * cpus, {});
	each_entry<uint32_t, typename L::counter>(read_raw(fd.counters, "counters"), [&](uint32_t i, const auto &v) {
		int to = L::counter_index(i);
		for (size_t c = 0; to >= 0 && c < v.size(); c++)
			s.counters[size_t(to) * cpus + c] = v[c];
	});
	s.config = array_of<typename L::config>(fd.config, "the configuration").at(0);
	s.src4 = array_of<typename L::set_v4>(fd.src4, "the IPv4 source table");
	s.src6 = array_of<typename L::set_v6>(fd.src6, "the IPv6 source table");
	s.logs4 = array_of<typename L::log_set_v4>(fd.logs4, "the IPv4 sliding-log table");
	s.logs6 = array_of<typename L::log_set_v6>(fd.logs6, "the IPv6 sliding-log table");
	s.max_sources = uint32_t(s.src6.size()) * SLUICE_SET_WAYS;
	s.max_log_sources = uint32_t(s.logs4.size()) * SLUICE_SET_WAYS;
	each_entry<uint32_t, typename L::pending>(read_raw(fd.pending, "pending drops"), [&](uint32_t, const auto &v) {
		for (const auto &p : v)
			if (p.packets)
				s.pending.push_back(p);
	});
	each_entry<uint32_t, typename L::owed>(read_raw(fd.owed, "owed passes"), [&](uint32_t, const auto &v) {
		for (const auto &o : v)
			if (o.packets || o.ticks)
				s.owed.push_back(o);
	});
	each_entry<typename L::frag_key, typename L::frag_info>(
		read_raw(fd.frags, "fragments"), [&](const auto &k, const auto &v) {
			// A claim is settled within one run of the program: one
			// read mid-run holds no datagram yet.
			struct sluice_frag_info f = now(v[0]);
			if (!(f.flags & SLUICE_FRAG_CLAIMED))
				s.frags.emplace_back(now(k), f);
		});
	each_entry<uint32_t, uint32_t>(read_raw(fd.iface_mtu, "interface frame sizes"),
				       [&](uint32_t k, const auto &v) { s.iface_mtu.emplace_back(k, v[0]); });
}

UniqueFd open_map(const std::string &dir, const std::string &name)
{
	std::string path = dir + "/" + name;
	UniqueFd fd(open_pinned_object(path));
	if (!fd)
		throw_errno("cannot open pinned map " + path, errno);
	return fd;
}

/// 0.2.7's state: every map checked against the frozen layout, then read.
void read_previous(const std::string &dir, CarriedState &s)
{
	auto unknown = [&dir](const std::string &why) {
		return Error("the state pinned in " + dir + " records sluice " + PREVIOUS_RELEASE + "'s ABI " +
			     std::to_string(PREVIOUS_RELEASE_ABI) + " but not its layout (" + why +
			     "); detach it with the sluice that attached it");
	};
	std::map<std::string, UniqueFd> fds;
	for (const auto &m : abi7::MAPS) {
		UniqueFd fd(open_pinned_object(dir + "/" + m.name));
		if (!fd)
			throw unknown(std::string("map ") + m.name + " cannot be opened: " + std::strerror(errno));
		struct bpf_map_info info = map_info(fd.get());
		if (info.type != m.type || info.key_size != m.key_size || info.value_size != m.value_size ||
		    (info.map_flags & m.flags) != m.flags)
			throw unknown(std::string("map ") + m.name + " differs");
		fds.emplace(m.name, std::move(fd));
	}
	abi7::meta meta = array_of<abi7::meta>(fds.at("sluice_meta").get(), "the layout record").at(0);
	if (meta.layout_hash != abi7::layout_hash7())
		throw unknown("layout " + hex64(meta.layout_hash) + ", not " + hex64(abi7::layout_hash7()));
	s.next_rule_id = meta.next_rule_id;
	auto f = [&fds](const char *name) { return fds.at(name).get(); };
	read_maps<Previous>({f("sluice_active"), f("sluice_rules"), f("sluice_rinfo"), f("sluice_rcnt"), f("sluice_cnt"),
			     f("sluice_meta"), f("sluice_cfg"), f("sluice_src4"), f("sluice_src6"), f("sluice_log4"),
			     f("sluice_log6"), f("sluice_pend"), f("sluice_owed"), f("sluice_frags"), f("sluice_ifmtu")},
			    s);
}

/// This binary's own state (an upgrade within a release, or a resize).
void read_current(const std::string &dir, CarriedState &s)
{
	MapSet m = MapSet::open_pinned(dir); // checks the layout in full
	uint32_t zero = 0;
	struct sluice_meta meta = {};
	if (bpf_map_lookup_elem(m.meta.get(), &zero, &meta))
		throw_errno("cannot read sluice metadata", errno);
	s.next_rule_id = meta.next_rule_id;
	read_maps<Current>({m.active.get(), m.rules.get(), m.rule_info.get(), m.rule_counters.get(), m.counters.get(),
			    m.meta.get(), m.config.get(), m.src4.get(), m.src6.get(), m.logs4.get(), m.logs6.get(),
			    m.pending.get(), m.owed.get(), m.frags.get(), m.iface_mtu.get()},
			   s);
	s.bans = read_ban_entries(m.bans.get());
	s.max_bans = m.max_bans();
	s.max_v6_prefixes = m.max_v6_prefixes();
}

// ---------------------------------------------------------------------------
// Flushing the CPUs' caches.
//
// What "flushed" means. The old program keeps three per-CPU caches beside
// the buckets, and none is carried into the new program, whose slots start
// empty:
//  - pending drops (SLUICE_MAP_PENDING: packets, bytes): drops already in
//    the global and rule counters but not yet in their bucket's counters.
//    Each slot's counts are added to the dropped counters of the bucket it
//    names, if that bucket's way still holds it (the counters carry its
//    generation's tag), exactly as the program adds them when the slot moves
//    on; a slot naming a bucket evicted since is dropped with it, as the
//    program drops it. So every counted drop is in its bucket once.
//  - owed passes (SLUICE_MAP_OWED): passes already in the global and rule
//    counters whose charge and counts are not yet in their bucket. Each
//    slot is settled as the program's flush settles it: the charge goes onto
//    the bucket's word (sluice_owed_settled_word, at the time of the
//    upgrade), the passes into its passed counters, if its way still holds
//    the bucket (key and generation). Doubt (a charge that may already be
//    in the word, with no packet behind it) is dropped, as the program drops
//    it once spent: charging it again could drop packets within the limit.
//  - the drop memo and the throttle note in each pending slot: caches of a
//    decision (the memo keys on the live-set word, which the new program's
//    rules restart) and of when a drop was last noted for events. Dropped:
//    the new program decides the next packet by the walk and notes it anew.
//  - the cluster sync's grants (SLUICE_MAP_GRANTS, which 0.2.7's layout
//    lacks): not carried; the new program's map starts empty, and the
//    agent's sync writes each bucket's grants again at its next step, based
//    on the record the bucket holds (a bucket placed afresh has taken none).
// A counters reset's record (stats: the counts still on CPUs' accounts when
// it zeroed a bucket) names buckets by place and key: where the buckets stay
// in place with the same seed it stays true of the flushed bucket; where
// they are placed afresh it is taken off each bucket first (place_afresh).
//
// The caches are read from the old program while it runs, each map in one
// batch: a slot it moves into its bucket between the reads of the slot and
// of the bucket is counted twice or not at all, as any count it makes after
// the read and before the links move is lost (see docs/operations.md).

void add_count(__u64 &word, uint16_t gen, uint64_t n)
{
	if ((word & ~SLUICE_CNT_VALUE_MASK) == sluice_gen_tag(gen)) // the bucket of that generation
		word += n;
}

struct sluice_set_tags *tags_of(CarriedState &s, uint32_t table, uint32_t set)
{
	if (table == SLUICE_TABLE_V4)
		return set < s.src4.size() ? &s.src4[set].tag : nullptr;
	return set < s.src6.size() ? &s.src6[set].tag : nullptr;
}

struct sluice_source_state *bucket_of(CarriedState &s, uint32_t table, uint32_t set, int way)
{
	if (table == SLUICE_TABLE_V4)
		return set < s.src4.size() ? &s.src4[set].way[way] : nullptr;
	return set < s.src6.size() ? &s.src6[set].way[way] : nullptr;
}

/// A way the copy caught mid-write: one being claimed holds no bucket the
/// new program could finish (emptied, its frozen word made even again); a
/// bucket whose lock a CPU held keeps the state read, its lock released.
template <class Set> void settle_ways(std::vector<Set> &sets)
{
	for (auto &set : sets)
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			if (set.tag.key[w] == SLUICE_KEY_BUSY) {
				set.tag.key[w] = SLUICE_KEY_EMPTY;
				set.way[w].word += set.way[w].word & 1; // words only grow
			} else if ((set.tag.gen[w] & 1) && (set.way[w].word & 1)) {
				set.way[w].word++;
			}
		}
}

} // namespace

void flush_caches(CarriedState &s, uint64_t now_ns)
{
	for (const auto &p : s.pending) {
		struct sluice_source_state *b = bucket_of(s, p.table, p.set, p.way & (SLUICE_SET_WAYS - 1));
		if (!b)
			continue;
		add_count(b->cnt.dropped_packets, p.gen, p.packets);
		add_count(b->cnt.dropped_bytes, p.gen, p.bytes);
	}
	const uint64_t now_t = sluice_ns_to_ticks(now_ns);
	for (const auto &o : s.owed) {
		if (!o.packets)
			continue; // doubt alone: dropped (see above)
		struct sluice_pending_drops name = {}; // the owed slot names its bucket as a pending slot does
		std::memcpy(&name, &o.name, sizeof(o.name));
		const int way = name.way & (SLUICE_SET_WAYS - 1);
		struct sluice_set_tags *t = tags_of(s, name.table, name.set);
		struct sluice_source_state *b = bucket_of(s, name.table, name.set, way);
		if (!t || !b || t->gen[way] != name.gen || t->key[way] != o.want)
			continue; // evicted: its charges and counts went with it, as in the program
		__u64 doubt = 0;
		// The later of the latest clock a write found the bucket full at and this one.
		const __u64 full_t = std::max<__u64>(b->algo.gcra.full_at & ~SLUICE_OWED_SURE, now_t);
		b->word = sluice_owed_settled_word(&o, b->word, b->algo.gcra.off, full_t, &doubt);
		add_count(b->cnt.passed_packets, name.gen, o.packets);
		add_count(b->cnt.passed_bytes, name.gen, o.bytes);
	}
	s.pending.clear();
	s.owed.clear();
}

uint64_t previous_layout_hash() { return abi7::layout_hash7(); }

std::optional<std::string> upgrade_refusal(uint32_t record_size, uint32_t abi)
{
	const std::string then = std::string("; upgrade it with sluice ") + PREVIOUS_RELEASE +
				 " first, then with this binary";
	if (record_size == 16) // sluice 0.2's {next_rule_id, pad, loaded_ns}
		return "this state was made by sluice 0.2, which recorded no layout" + then;
	if (record_size == sizeof(abi7::meta) && abi >= 1 && abi < PREVIOUS_RELEASE_ABI)
		return "this state was made by sluice 0.2.x (ABI " + std::to_string(abi) + ")" + then;
	return std::nullopt;
}

CarriedState read_state(const std::string &dir)
{
	UniqueFd meta = open_map(dir, SLUICE_STR(SLUICE_MAP_META));
	struct bpf_map_info info = map_info(meta.get());
	std::vector<uint8_t> record(std::max<uint32_t>(info.value_size, 4));
	uint32_t zero = 0, abi = 0;
	if (info.type != BPF_MAP_TYPE_ARRAY || info.value_size < 4 ||
	    bpf_map_lookup_elem(meta.get(), &zero, record.data()))
		throw Error("the state pinned in " + dir + " has no layout record that this sluice can read");
	std::memcpy(&abi, record.data(), 4); // abi_version is every record's first field
	if (auto refusal = upgrade_refusal(info.value_size, abi))
		throw Error(*refusal);

	CarriedState s;
	if (info.value_size == sizeof(abi7::meta) && abi == PREVIOUS_RELEASE_ABI) {
		s.abi = PREVIOUS_RELEASE_ABI;
		read_previous(dir, s);
	} else if (info.value_size == sizeof(struct sluice_meta) && abi == SLUICE_ABI_VERSION) {
		s.abi = SLUICE_ABI_VERSION;
		read_current(dir, s);
	} else {
		struct sluice_meta m = {};
		std::memcpy(&m, record.data(), std::min<size_t>(record.size(), sizeof(m)));
		std::string by = m.release ? "sluice " + std::to_string(m.release >> 16) + "." +
						     std::to_string((m.release >> 8) & 0xff) + "." +
						     std::to_string(m.release & 0xff)
					   : "another sluice";
		throw Error("this state was made by " + by + " (ABI " + std::to_string(abi) +
			    "), which this sluice (ABI " + std::to_string(SLUICE_ABI_VERSION) +
			    ") does not know; upgrade with a sluice at least as new as the one that made it");
	}
	settle_ways(s.src4);
	settle_ways(s.src6);
	settle_ways(s.logs4);
	settle_ways(s.logs6);
	return s;
}

namespace {

/// Calls f(rule id, address, bucket) for every bucket of carried sets.
template <class Set, class F> void for_each_bucket(const std::vector<Set> &sets, F f)
{
	for (uint32_t i = 0; i < sets.size(); i++)
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = sets[i].tag.key[w];
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY)
				continue;
			uint8_t addr[16] = {};
			if constexpr (SetTraits<Set>::family == 4) {
				uint32_t word = static_cast<uint32_t>(key);
				std::memcpy(addr, &word, 4);
			} else {
				std::memcpy(addr, &sets[i].addr[w], 16);
			}
			f(i, w, key, addr, sets[i].way[w], sets[i].tag.gen[w]);
		}
}

/// Places every carried bucket of a rule that still exists in the fresh
/// tables (other sizes, another seed), its counts untagged and any counters
/// reset's record taken off them.
void place_afresh(const CarriedState &state, const std::vector<InstalledRule> &rules, const MapSet &fresh,
		  std::vector<std::string> &restarted)
{
	std::unordered_map<uint32_t, bool> gcra; // bucket id -> kept in GCRA form
	for (const auto &r : rules)
		gcra[bucket_id(r)] =
			r.spec.algo == Algo::gcra || (r.spec.algo == Algo::token_bucket && r.spec.warmup_ns == 0);
	struct sluice_config cfg = {};
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(fresh.config.get(), &zero, &cfg))
		throw_errno("cannot read the new program's configuration", errno);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
	PendingDrops reset; // no caches (flushed): only the reset's record
	reset.subtract(read_reset_debits(state.config.hash_seed));

	auto move = [&]<class Set>(const std::vector<Set> &sets, int fd, const char *name) {
		SetTable<Set> table(fd);
		uint64_t lost = 0;
		for_each_bucket(sets, [&](uint32_t set, int w, uint64_t key, const uint8_t *addr, auto b, uint16_t gen) {
			reset.add_to(b.cnt, SetTraits<Set>::table, set, w, gen, key);
			b.cnt.passed_packets = sluice_cnt_value(b.cnt.passed_packets);
			b.cnt.passed_bytes = sluice_cnt_value(b.cnt.passed_bytes);
			b.cnt.dropped_packets = sluice_cnt_value(b.cnt.dropped_packets);
			b.cnt.dropped_bytes = sluice_cnt_value(b.cnt.dropped_bytes);
			uint32_t rule_id = static_cast<uint32_t>(key >> 32);
			auto it = gcra.find(rule_id);
			if (it != gcra.end() && !table.place(rule_id, addr, b, it->second, cfg.hash_seed, now))
				lost++;
		});
		if (lost)
			restarted.push_back(plural(lost, "bucket", "buckets") + " of " + name);
	};
	move(state.src4, fresh.src4.get(), SLUICE_STR(SLUICE_MAP_SOURCES_V4));
	move(state.src6, fresh.src6.get(), SLUICE_STR(SLUICE_MAP_SOURCES_V6));
	move(state.logs4, fresh.logs4.get(), SLUICE_STR(SLUICE_MAP_LOGS_V4));
	move(state.logs6, fresh.logs6.get(), SLUICE_STR(SLUICE_MAP_LOGS_V6));
}

template <class Set> void write_sets(int fd, const std::vector<Set> &sets, const char *what)
{
	std::vector<uint32_t> keys(sets.size());
	for (uint32_t i = 0; i < keys.size(); i++)
		keys[i] = i;
	map_update_batch(fd, keys.data(), sets.data(), keys.size(), what);
}

} // namespace

std::vector<std::string> restore_state(CarriedState &state, const MapSet &fresh)
{
	// Rules keep their ids, names and bucket ids; their slots too, unless
	// the new table is smaller than a slot, when they are numbered afresh.
	uint32_t n = fresh.max_rules();
	std::vector<InstalledRule> rules = state.rules;
	std::map<uint32_t, uint32_t> new_slot; // old slot -> new slot
	bool renumber = std::any_of(rules.begin(), rules.end(), [n](const auto &r) { return r.slot >= n; });
	std::sort(rules.begin(), rules.end(), [](const auto &a, const auto &b) { return a.id < b.id; });
	for (uint32_t i = 0; i < rules.size(); i++) {
		uint32_t slot = renumber ? i : rules[i].slot;
		new_slot[rules[i].slot] = slot;
		rules[i].slot = slot;
	}
	RuleTable(fresh).restore(rules, state.next_rule_id);

	// Rule counters follow their rule's slot; the global counters stay.
	const size_t cpus = possible_cpus();
	{
		std::vector<uint32_t> keys;
		std::vector<struct sluice_rule_counters> values;
		for (const auto &[slot, per_cpu] : state.rule_counters)
			if (auto it = new_slot.find(slot); it != new_slot.end() && per_cpu.size() == cpus) {
				keys.push_back(it->second);
				values.insert(values.end(), per_cpu.begin(), per_cpu.end());
			}
		static_assert(sizeof(struct sluice_rule_counters) % 8 == 0); // per-CPU values: no padding between
		map_update_batch(fresh.rule_counters.get(), keys.data(), values.data(), keys.size(), "rule counters");
	}
	{
		std::vector<uint32_t> keys(SLUICE_CNT_MAX);
		for (uint32_t i = 0; i < keys.size(); i++)
			keys[i] = i;
		static_assert(sizeof(struct sluice_counter) % 8 == 0);
		if (state.counters.size() == size_t(SLUICE_CNT_MAX) * cpus)
			map_update_batch(fresh.counters.get(), keys.data(), state.counters.data(), keys.size(),
					 "counters");
	}
	// Bans follow their rule's slot; the strikes towards one start afresh.
	{
		std::vector<std::pair<struct sluice_ban_key, struct sluice_ban>> bans;
		for (auto [k, v] : state.bans)
			if (auto it = new_slot.find(v.slot); it != new_slot.end()) {
				v.slot = it->second;
				bans.emplace_back(k, v);
			}
		restore_bans(fresh, bans);
	}
	for (const auto &[k, v] : state.frags)
		map_update(fresh.frags.get(), &k, &v, "a fragment entry");
	for (const auto &[k, v] : state.iface_mtu)
		map_update(fresh.iface_mtu.get(), &k, &v, "an interface frame size");

	// The caches go into the buckets; the new program's start empty.
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	flush_caches(state, uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec));

	// The set tables' places depend on their sizes and the hash seed: the
	// tables and the configuration go together as they are, or every
	// bucket is placed afresh in the new tables.
	struct sluice_config cfg = {};
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(fresh.config.get(), &zero, &cfg))
		throw_errno("cannot read the new program's configuration", errno);
	std::vector<std::string> restarted;
	if (cfg.src4_sets == state.src4.size() && cfg.src6_sets == state.src6.size() &&
	    cfg.log4_sets == state.logs4.size() && cfg.log6_sets == state.logs6.size()) {
		map_update(fresh.config.get(), &zero, &state.config, "sluice configuration");
		write_sets(fresh.src4.get(), state.src4, "the IPv4 source table");
		write_sets(fresh.src6.get(), state.src6, "the IPv6 source table");
		write_sets(fresh.logs4.get(), state.logs4, "the IPv4 sliding-log table");
		write_sets(fresh.logs6.get(), state.logs6, "the IPv6 sliding-log table");
	} else {
		place_afresh(state, rules, fresh, restarted);
	}
	return restarted;
}

} // namespace sluice
