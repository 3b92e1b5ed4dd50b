#include "upgrade.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "rule_table.h"

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

/// Rules of sluice 0.2 (ABI 1): one set, indexed by slot; the data-plane
/// entry's id is the rule's id, and struct sluice_rule had today's layout.
std::vector<InstalledRule> read_rules_abi1(const std::string &dir)
{
	UniqueFd rules = open_map(dir, "sluice_rules"), info = open_map(dir, "sluice_rinfo");
	if (map_info(rules.get()).value_size != sizeof(struct sluice_rule) ||
	    map_info(info.get()).value_size != sizeof(struct sluice_rule_info))
		throw Error("the state pinned in " + dir + " is of an unknown layout; detach it with the sluice "
			    "that attached it");
	uint32_t n = map_info(rules.get()).max_entries;
	std::vector<InstalledRule> out;
	for (uint32_t slot = 0; slot < n; slot++) {
		struct sluice_rule dp = {};
		struct sluice_rule_info ri = {};
		if (bpf_map_lookup_elem(rules.get(), &slot, &dp) || dp.id == 0)
			continue;
		if (bpf_map_lookup_elem(info.get(), &slot, &ri))
			throw_errno("cannot read rule slot " + std::to_string(slot), errno);
		ri.rule_id = 0; // padding in ABI 1
		InstalledRule r = from_maps(dp, ri);
		r.id = dp.id;
		r.bucket_id = dp.id;
		r.slot = slot;
		out.push_back(r);
	}
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
	} else if (s.abi == SLUICE_ABI_VERSION || s.abi == 2) {
		// ABI 2 has this layout; its sync word is unused, and the rules
		// are read from its live set alone.
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
	s.max_sources = map_info(open_map(dir, SLUICE_STR(SLUICE_MAP_SOURCES_V6)).get()).max_entries;
	s.max_log_sources = map_info(open_map(dir, SLUICE_STR(SLUICE_MAP_LOGS_V4)).get()).max_entries;
	for (const char *name : CARRIED)
		s.maps.push_back(read_raw(open_map(dir, name).get(), name));
	return s;
}

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
	// The IPv4 set table's places depend on its size and hash seed: its
	// buckets, their pending drops and the seed go together or not at all.
	if (carry(SLUICE_STR(SLUICE_MAP_SOURCES_V4), fresh.src4.get())) {
		carry(SLUICE_STR(SLUICE_MAP_CONFIG), fresh.config.get());
		carry(SLUICE_STR(SLUICE_MAP_PENDING), fresh.pending.get());
	} else {
		restarted.push_back(SLUICE_STR(SLUICE_MAP_SOURCES_V4));
	}
	const std::pair<const char *, int> hashes[] = {{SLUICE_STR(SLUICE_MAP_SOURCES_V6), fresh.src6.get()},
						       {SLUICE_STR(SLUICE_MAP_LOGS_V4), fresh.logs4.get()},
						       {SLUICE_STR(SLUICE_MAP_LOGS_V6), fresh.logs6.get()}};
	for (auto [name, fd] : hashes) {
		const RawMap *m = state.find(name);
		struct bpf_map_info info = map_info(fd);
		if (m && info.key_size == m->key_size && info.value_size == m->value_size && m->count <= info.max_entries)
			write_raw(fd, *m, name);
		else if (m && m->count)
			restarted.push_back(name);
	}
	return restarted;
}

} // namespace sluice
