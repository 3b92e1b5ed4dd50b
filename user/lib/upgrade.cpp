// SPDX-License-Identifier: GPL-2.0-only
#include "upgrade.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>

#include <ctime>
#include <unordered_map>

#include "rule_table.h"
#include "sources.h"

namespace sluice {

namespace {

bool per_cpu(uint32_t type)
{
	return type == BPF_MAP_TYPE_PERCPU_ARRAY || type == BPF_MAP_TYPE_PERCPU_HASH ||
	       type == BPF_MAP_TYPE_LRU_PERCPU_HASH;
}

size_t stride(const RawMap &m)
{
	return per_cpu(m.type) ? ((m.value_size + 7) & ~size_t(7)) * possible_cpus() : m.value_size;
}

RawMap read_raw(int fd, const std::string &name)
{
	struct bpf_map_info info = map_info(fd);
	RawMap m;
	m.name = name;
	m.type = info.type;
	m.key_size = info.key_size;
	m.value_size = info.value_size;
	m.max_entries = info.max_entries;
	const uint32_t batch = 4096;
	std::vector<uint8_t> keys(size_t(batch) * m.key_size), values(size_t(batch) * stride(m));
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
		m.values.insert(m.values.end(), values.begin(), values.begin() + long(count * stride(m)));
		m.count += count;
		if (err) {
			if (saved == ENOENT)
				return m;
			throw_errno("cannot read map " + name, saved);
		}
	}
}

/// Writes a raw map's entries into `fd`, whose layout must be the same.
void write_raw(int fd, const RawMap &m, const char *what)
{
	map_update_batch(fd, m.keys.data(), m.values.data(), m.count, what);
}

/// True if `fd`'s map takes `m`'s entries as they are: same type, key and
/// value size, and for arrays the same number of entries.
bool same_shape(int fd, const RawMap &m)
{
	struct bpf_map_info info = map_info(fd);
	bool array = m.type == BPF_MAP_TYPE_ARRAY || m.type == BPF_MAP_TYPE_PERCPU_ARRAY;
	return info.type == m.type && info.key_size == m.key_size && info.value_size == m.value_size &&
	       (!array || info.max_entries == m.max_entries);
}

UniqueFd open_map(const std::string &dir, const std::string &name)
{
	std::string path = dir + "/" + name;
	UniqueFd fd(open_pinned_object(path));
	if (!fd)
		throw_errno("cannot open pinned map " + path, errno);
	return fd;
}

/// Before ABI 4 a rule's info was 80 bytes: today's first 80, the rest zero
/// (every rule local).
constexpr uint32_t RULE_INFO_BEFORE_4 = 80;

/// An info entry of the layout before ABI 4, as today's struct.
struct sluice_rule_info read_info_before_4(int fd, uint32_t index)
{
	struct sluice_rule_info ri = {};
	uint8_t raw[RULE_INFO_BEFORE_4];
	if (bpf_map_lookup_elem(fd, &index, raw))
		throw_errno("cannot read rule info " + std::to_string(index), errno);
	std::memcpy(&ri, raw, sizeof(raw));
	return ri;
}

[[noreturn]] void unknown_layout(const std::string &dir)
{
	throw Error("the state pinned in " + dir + " is of an unknown layout; detach it with the sluice "
		    "that attached it");
}

/// Rules of sluice 0.2 (ABI 1): one set, indexed by slot; the data-plane
/// entry's id is the rule's id, and struct sluice_rule was today's first 48 bytes.
std::vector<InstalledRule> read_rules_abi1(const std::string &dir)
{
	UniqueFd rules = open_map(dir, "sluice_rules"), info = open_map(dir, "sluice_rinfo");
	if (map_info(rules.get()).value_size != SLUICE_RULE_ABI7_SIZE ||
	    map_info(info.get()).value_size != RULE_INFO_BEFORE_4)
		unknown_layout(dir);
	uint32_t n = map_info(rules.get()).max_entries;
	std::vector<InstalledRule> out;
	for (uint32_t slot = 0; slot < n; slot++) {
		struct sluice_rule dp = {};
		if (bpf_map_lookup_elem(rules.get(), &slot, &dp) || dp.id == 0)
			continue;
		struct sluice_rule_info ri = read_info_before_4(info.get(), slot);
		ri.rule_id = 0; // padding in ABI 1
		InstalledRule r = from_maps(dp, ri);
		r.id = dp.id;
		r.bucket_id = dp.id;
		r.slot = slot;
		out.push_back(r);
	}
	return out;
}

/// Rules of ABI 2 and 3: two sets and the word naming the live one, as today;
/// the info entries of 80 bytes.
std::vector<InstalledRule> read_rules_abi2_3(const std::string &dir, uint32_t &max_rules)
{
	UniqueFd active = open_map(dir, SLUICE_STR(SLUICE_MAP_ACTIVE)), rules = open_map(dir, SLUICE_STR(SLUICE_MAP_RULES)),
		 info = open_map(dir, SLUICE_STR(SLUICE_MAP_RULE_INFO)),
		 counters = open_map(dir, SLUICE_STR(SLUICE_MAP_RULE_COUNTERS));
	if (map_info(active.get()).value_size != sizeof(struct sluice_active) ||
	    map_info(rules.get()).value_size != SLUICE_RULE_ABI7_SIZE ||
	    map_info(info.get()).value_size != RULE_INFO_BEFORE_4)
		unknown_layout(dir);
	max_rules = map_info(counters.get()).max_entries;
	uint32_t zero = 0;
	struct sluice_active live = {};
	if (bpf_map_lookup_elem(active.get(), &zero, &live))
		throw_errno("cannot read the live rule set's number in " + dir, errno);
	std::vector<InstalledRule> out;
	for (uint32_t slot = 0; slot < max_rules; slot++) {
		uint32_t i = sluice_rule_index(slot, live.set);
		struct sluice_rule dp = {};
		if (bpf_map_lookup_elem(rules.get(), &i, &dp))
			throw_errno("cannot read rule slot " + std::to_string(slot), errno);
		if (dp.id == 0)
			continue;
		InstalledRule r = from_maps(dp, read_info_before_4(info.get(), i));
		r.slot = slot;
		out.push_back(r);
	}
	std::sort(out.begin(), out.end(), match_order);
	return out;
}

// The maps whose contents are carried as they are, where their shape allows.
const char *const CARRIED[] = {
	SLUICE_STR(SLUICE_MAP_RULE_COUNTERS), SLUICE_STR(SLUICE_MAP_COUNTERS), SLUICE_STR(SLUICE_MAP_CONFIG),
	SLUICE_STR(SLUICE_MAP_SOURCES_V4),    SLUICE_STR(SLUICE_MAP_PENDING),  SLUICE_STR(SLUICE_MAP_SOURCES_V6),
	SLUICE_STR(SLUICE_MAP_LOGS_V4),       SLUICE_STR(SLUICE_MAP_LOGS_V6),  SLUICE_STR(SLUICE_MAP_FRAGS),
	SLUICE_STR(SLUICE_MAP_IFACE_MTU),
};

} // namespace

const RawMap *CarriedState::find(const std::string &name) const
{
	for (const auto &m : maps)
		if (m.name == name)
			return &m;
	return nullptr;
}

uint32_t pinned_abi(const std::string &dir)
{
	UniqueFd meta = open_map(dir, SLUICE_STR(SLUICE_MAP_META));
	struct bpf_map_info info = map_info(meta.get());
	if (info.value_size == 16)
		return 1; // sluice 0.2: {next_rule_id, pad, loaded_ns}
	std::vector<uint8_t> value(info.value_size);
	uint32_t zero = 0, abi = 0;
	if (info.value_size < 4 || bpf_map_lookup_elem(meta.get(), &zero, value.data()))
		throw_errno("cannot read the layout record in " + dir, errno ? errno : EINVAL);
	std::memcpy(&abi, value.data(), 4); // abi_version is every layout's first field
	return abi;
}

CarriedState read_state(const std::string &dir)
{
	CarriedState s;
	s.abi = pinned_abi(dir);
	if (s.abi == 1) {
		UniqueFd meta = open_map(dir, SLUICE_STR(SLUICE_MAP_META));
		struct {
			__u32 next_rule_id, pad;
			__u64 loaded_ns;
		} old = {};
		uint32_t zero = 0;
		if (bpf_map_lookup_elem(meta.get(), &zero, &old))
			throw_errno("cannot read " + dir + "/" SLUICE_STR(SLUICE_MAP_META), errno);
		s.next_rule_id = old.next_rule_id;
		s.rules = read_rules_abi1(dir);
		s.max_rules = map_info(open_map(dir, "sluice_rcnt").get()).max_entries;
	} else if (s.abi == 2 || s.abi == 3) {
		UniqueFd meta = open_map(dir, SLUICE_STR(SLUICE_MAP_META));
		struct sluice_meta record = {};
		uint32_t zero = 0;
		if (bpf_map_lookup_elem(meta.get(), &zero, &record))
			throw_errno("cannot read " + dir + "/" SLUICE_STR(SLUICE_MAP_META), errno);
		s.next_rule_id = record.next_rule_id;
		s.rules = read_rules_abi2_3(dir, s.max_rules);
	} else if (s.abi >= 4 && s.abi <= SLUICE_ABI_VERSION) {
		// ABI 4's and 5's maps are this one's but for the pending-drops
		// slots (read raw, pending_of); ABI 4's live-set word, 0 or 1, names
		// the rule entries and the lookups together, as this one's reads.
		MapSet maps = MapSet::open_pinned(dir, s.abi); // checks the layout in full
		uint32_t zero = 0;
		struct sluice_meta meta = {};
		if (bpf_map_lookup_elem(maps.meta.get(), &zero, &meta))
			throw_errno("cannot read sluice metadata", errno);
		s.next_rule_id = meta.next_rule_id;
		s.rules = RuleTable(maps).list();
		s.max_rules = maps.max_rules();
	} else {
		throw Error("the state pinned in " + dir + " has ABI " + std::to_string(s.abi) +
			    ", which this sluice (ABI " + std::to_string(SLUICE_ABI_VERSION) +
			    ") does not know; upgrade with a sluice at least as new as the one that made it");
	}
	// Before ABI 3 the IPv6 and log tables were hashes of that many entries;
	// since, every source table is an array of sets.
	uint32_t ways = s.abi < 3 ? 1 : SLUICE_SET_WAYS;
	s.max_sources = map_info(open_map(dir, SLUICE_STR(SLUICE_MAP_SOURCES_V6)).get()).max_entries * ways;
	s.max_log_sources = map_info(open_map(dir, SLUICE_STR(SLUICE_MAP_LOGS_V4)).get()).max_entries * ways;
	for (const char *name : CARRIED)
		s.maps.push_back(read_raw(open_map(dir, name).get(), name));
	if (s.abi >= 7) // the passes each CPU owed its buckets, since ABI 7
		s.maps.push_back(read_raw(open_map(dir, SLUICE_STR(SLUICE_MAP_OWED)).get(), SLUICE_STR(SLUICE_MAP_OWED)));
	return s;
}

namespace {

/// A sliding-log bucket as ABI 1 and 2 kept it: a 32-bit lock.
struct LogStateAbi2 {
	__u32 lock;
	__u32 head;
	__u64 ring[SLUICE_MAX_LOG];
	struct sluice_source_counters cnt;
};
static_assert(sizeof(LogStateAbi2) == 552);

template <class Bucket> void drop_tags(Bucket &b)
{
	b.cnt.passed_packets = sluice_cnt_value(b.cnt.passed_packets);
	b.cnt.passed_bytes = sluice_cnt_value(b.cnt.passed_bytes);
	b.cnt.dropped_packets = sluice_cnt_value(b.cnt.dropped_packets);
	b.cnt.dropped_bytes = sluice_cnt_value(b.cnt.dropped_bytes);
}

/// Every CPU's pending-drops slots that hold drops, as carried (one per CPU,
/// or 1,024, of 48 bytes, before ABI 6).
std::vector<struct sluice_pending_drops> pending_of(const CarriedState &state)
{
	std::vector<struct sluice_pending_drops> out;
	const RawMap *m = state.find(SLUICE_STR(SLUICE_MAP_PENDING));
	// ABI 1 and 2 kept the first 24 bytes only (a 16-bit way: table 0, IPv4).
	const size_t counted = offsetof(struct sluice_pending_drops, note_want);
	if (!m || m->value_size < counted || m->count == 0)
		return out;
	size_t step = (m->value_size + 7) & ~size_t(7);
	for (size_t off = 0; off + step <= m->values.size(); off += step) {
		struct sluice_pending_drops p = {};
		std::memcpy(&p, &m->values[off], counted);
		if (p.packets)
			out.push_back(p);
	}
	return out;
}

/// Every CPU's owed slots that hold passes, as carried (none before ABI 7).
std::vector<struct sluice_owed> owed_of(const CarriedState &state)
{
	std::vector<struct sluice_owed> out;
	const RawMap *m = state.find(SLUICE_STR(SLUICE_MAP_OWED));
	if (!m || m->value_size != sizeof(struct sluice_owed))
		return out;
	for (size_t off = 0; off + sizeof(struct sluice_owed) <= m->values.size(); off += sizeof(struct sluice_owed)) {
		struct sluice_owed o = {};
		std::memcpy(&o, &m->values[off], sizeof(o));
		if (o.packets)
			out.push_back(o);
	}
	return out;
}

/// A carried pending-drops map with values of `value_size` bytes: each
/// slot's counts as they were (the first bytes, which every layout shares),
/// the rest zero (no drop memo).
RawMap resized_pending(const RawMap &m, uint32_t value_size)
{
	if (m.value_size == value_size)
		return m;
	const size_t cpus = static_cast<size_t>(possible_cpus());
	const size_t from = (m.value_size + 7) & ~size_t(7), to = (value_size + 7) & ~size_t(7);
	const size_t kept = std::min<size_t>(offsetof(struct sluice_pending_drops, memo), m.value_size);
	RawMap out = m;
	out.value_size = value_size;
	out.values.assign(size_t(m.count) * cpus * to, 0);
	for (size_t v = 0; v < size_t(m.count) * cpus && (v + 1) * from <= m.values.size(); v++)
		std::memcpy(&out.values[v * to], &m.values[v * from], kept);
	return out;
}

/// Calls f(rule id, address, bucket) for every bucket of a carried set table
/// (any ABI: the IPv4 table kept its layout), its counts untagged and its
/// pending drops added.
template <class Set, class F>
void for_each_in_sets(const RawMap &m, const PendingDrops &pending, F f)
{
	using Bucket = typename SetTraits<Set>::Bucket;
	for (uint32_t i = 0; i < m.count; i++) {
		uint32_t idx;
		std::memcpy(&idx, &m.keys[size_t(i) * 4], 4);
		Set set;
		std::memcpy(&set, &m.values[size_t(i) * m.value_size], sizeof(set));
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = set.tag.key[w];
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY)
				continue;
			uint8_t addr[16] = {};
			if constexpr (SetTraits<Set>::family == 4) {
				uint32_t word = static_cast<uint32_t>(key);
				std::memcpy(addr, &word, 4);
			} else {
				std::memcpy(addr, &set.addr[w], 16);
			}
			Bucket b;
			std::memcpy(&b, &set.way[w], sizeof(b));
			drop_tags(b);
			pending.add_to(b.cnt, SetTraits<Set>::table, idx, w, set.tag.gen[w]);
			f(static_cast<uint32_t>(key >> 32), addr, b);
		}
	}
}

/// Calls f(rule id, address, value) for every entry of a carried hash table
/// keyed by struct sluice_src_v4 or sluice_src_v6 (ABI 1 and 2).
template <class Value, class F> void for_each_in_hash(const RawMap &m, F f)
{
	if (m.value_size != sizeof(Value) || (m.key_size != 8 && m.key_size != 20))
		return;
	for (uint32_t i = 0; i < m.count; i++) {
		const uint8_t *k = &m.keys[size_t(i) * m.key_size];
		uint32_t rule_id;
		uint8_t addr[16] = {};
		std::memcpy(&rule_id, k, 4);
		std::memcpy(addr, k + 4, m.key_size - 4);
		Value v;
		std::memcpy(&v, &m.values[size_t(i) * m.value_size], sizeof(v));
		f(rule_id, addr, v);
	}
}

/// Places every carried bucket of a rule that still exists in the fresh
/// set tables, whatever table layout it came from.
void place_buckets(const CarriedState &state, const std::vector<InstalledRule> &rules, const MapSet &fresh,
		   std::vector<std::string> &restarted)
{
	std::unordered_map<uint32_t, bool> gcra; // bucket id -> kept in GCRA form
	for (const auto &r : rules)
		gcra[r.bucket_id ? r.bucket_id : r.id] =
			r.spec.algo == Algo::gcra || (r.spec.algo == Algo::token_bucket && r.spec.warmup_ns == 0);
	struct sluice_config cfg = {};
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(fresh.config.get(), &zero, &cfg))
		throw_errno("cannot read the new program's configuration", errno);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
	const PendingDrops pending(pending_of(state), owed_of(state));

	auto move = [&]<class Set>(const char *name, int fd) {
		const RawMap *m = state.find(name);
		if (!m || m->count == 0)
			return;
		SetTable<Set> table(fd);
		uint64_t lost = 0;
		auto put = [&](uint32_t rule_id, const uint8_t *addr, const typename SetTraits<Set>::Bucket &b) {
			auto it = gcra.find(rule_id);
			if (it != gcra.end() && !table.place(rule_id, addr, b, it->second, cfg.hash_seed, now))
				lost++;
		};
		bool hash = m->type == BPF_MAP_TYPE_LRU_HASH || m->type == BPF_MAP_TYPE_HASH;
		if (!hash && m->value_size == sizeof(Set)) {
			for_each_in_sets<Set>(*m, pending, put);
		} else if (hash && std::is_same_v<typename SetTraits<Set>::Bucket, struct sluice_source_state>) {
			for_each_in_hash<struct sluice_source_state>(*m, [&](uint32_t id, const uint8_t *a, auto v) {
				if constexpr (std::is_same_v<typename SetTraits<Set>::Bucket, decltype(v)>) {
					drop_tags(v);
					put(id, a, v);
				}
			});
		} else if (hash) {
			for_each_in_hash<LogStateAbi2>(*m, [&](uint32_t id, const uint8_t *a, const LogStateAbi2 &old) {
				if constexpr (std::is_same_v<typename SetTraits<Set>::Bucket, struct sluice_log_state>) {
					struct sluice_log_state v = {};
					v.head = old.head;
					std::memcpy(v.ring, old.ring, sizeof(v.ring));
					v.cnt = old.cnt;
					drop_tags(v);
					put(id, a, v);
				}
			});
		} else {
			lost = m->count; // a layout this binary does not know
		}
		if (lost)
			restarted.push_back(std::to_string(lost) + " buckets of " + name);
	};
	move.template operator()<struct sluice_set_v4>(SLUICE_STR(SLUICE_MAP_SOURCES_V4), fresh.src4.get());
	move.template operator()<struct sluice_set_v6>(SLUICE_STR(SLUICE_MAP_SOURCES_V6), fresh.src6.get());
	move.template operator()<struct sluice_log_set_v4>(SLUICE_STR(SLUICE_MAP_LOGS_V4), fresh.logs4.get());
	move.template operator()<struct sluice_log_set_v6>(SLUICE_STR(SLUICE_MAP_LOGS_V6), fresh.logs6.get());
}

} // namespace

std::vector<std::string> restore_state(const CarriedState &state, const MapSet &fresh)
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

	std::vector<std::string> restarted;
	auto carry = [&](const char *name, int fd) {
		const RawMap *m = state.find(name);
		if (m && same_shape(fd, *m)) {
			write_raw(fd, *m, name);
			return true;
		}
		return false;
	};
	// Rule counters follow their rule's slot.
	if (const RawMap *c = state.find(SLUICE_STR(SLUICE_MAP_RULE_COUNTERS))) {
		size_t step = stride(*c);
		std::vector<uint32_t> keys;
		std::vector<uint8_t> values;
		for (uint32_t i = 0; i < c->count; i++) {
			uint32_t old;
			std::memcpy(&old, &c->keys[size_t(i) * 4], 4);
			auto it = new_slot.find(old);
			if (it == new_slot.end())
				continue;
			keys.push_back(it->second);
			values.insert(values.end(), c->values.begin() + long(i * step),
				      c->values.begin() + long((i + 1) * step));
		}
		map_update_batch(fresh.rule_counters.get(), keys.data(), values.data(), keys.size(), "rule counters");
	}
	carry(SLUICE_STR(SLUICE_MAP_COUNTERS), fresh.counters.get());
	carry(SLUICE_STR(SLUICE_MAP_IFACE_MTU), fresh.iface_mtu.get());
	carry(SLUICE_STR(SLUICE_MAP_FRAGS), fresh.frags.get());
	// The set tables' places depend on their sizes and the hash seed: they,
	// their pending drops and the configuration go together as they are, or
	// every bucket is placed afresh in the new tables.
	const char *const tables[] = {SLUICE_STR(SLUICE_MAP_SOURCES_V4), SLUICE_STR(SLUICE_MAP_SOURCES_V6),
				      SLUICE_STR(SLUICE_MAP_LOGS_V4), SLUICE_STR(SLUICE_MAP_LOGS_V6),
				      SLUICE_STR(SLUICE_MAP_CONFIG)};
	const int fds[] = {fresh.src4.get(), fresh.src6.get(), fresh.logs4.get(), fresh.logs6.get(),
			   fresh.config.get()};
	bool as_they_are = state.abi >= 3; // the set tables' layout since ABI 3
	for (size_t i = 0; i < std::size(tables); i++) {
		const RawMap *m = state.find(tables[i]);
		as_they_are = as_they_are && m && same_shape(fds[i], *m);
	}
	if (as_they_are) {
		for (size_t i = 0; i < std::size(tables); i++)
			carry(tables[i], fds[i]);
		// Slots where they are: from a program of one slot per CPU, that
		// one (slot 0), which readers count and the program flushes as
		// any; from one of smaller slots (ABI 5), each slot's counts.
		const RawMap *p = state.find(SLUICE_STR(SLUICE_MAP_PENDING));
		struct bpf_map_info info = map_info(fresh.pending.get());
		if (p && p->type == info.type && p->key_size == info.key_size && p->max_entries <= info.max_entries)
			write_raw(fresh.pending.get(), resized_pending(*p, info.value_size), SLUICE_STR(SLUICE_MAP_PENDING));
		// What each CPU owed a bucket stays with it (from ABI 7; none before).
		if (const RawMap *o = state.find(SLUICE_STR(SLUICE_MAP_OWED)); o && same_shape(fresh.owed.get(), *o))
			carry(SLUICE_STR(SLUICE_MAP_OWED), fresh.owed.get());
	} else {
		place_buckets(state, rules, fresh, restarted);
	}
	return restarted;
}

} // namespace sluice
