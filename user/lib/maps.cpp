// SPDX-License-Identifier: GPL-2.0-only
#include "maps.h"
#include "fnv.h"
#include "upgrade.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>

namespace sluice {

namespace {

/// A map of the ABI: its name, where MapSet keeps it, and the layout this
/// binary expects of it. MapSet::from_object checks a loaded program against
/// these, so they cannot drift from bpf/sluice.bpf.c unnoticed.
struct MapRef {
	const char *name;
	UniqueFd MapSet::*field;
	enum bpf_map_type type;
	uint32_t key_size, value_size;
	uint32_t flags = 0; ///< the map flags the controller relies on (BPF_F_MMAPABLE)
};

const MapRef MAP_REFS[] = {
	{SLUICE_STR(SLUICE_MAP_ACTIVE), &MapSet::active, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_active)},
	{SLUICE_STR(SLUICE_MAP_RULES), &MapSet::rules, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_rule), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_RULE_INFO), &MapSet::rule_info, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_rule_info), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_RULE_COUNTERS), &MapSet::rule_counters, BPF_MAP_TYPE_PERCPU_ARRAY, 4,
	 sizeof(struct sluice_rule_counters)},
	{SLUICE_STR(SLUICE_MAP_DIR4_TOP), &MapSet::dir4_top, BPF_MAP_TYPE_ARRAY, 4, 4, BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_DIR4_BLOCKS), &MapSet::dir4_blocks, BPF_MAP_TYPE_ARRAY, 4,
	 sizeof(struct sluice_dir_block), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_LISTS), &MapSet::lists, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_match_list), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_MATCH_V6), &MapSet::match6, BPF_MAP_TYPE_LPM_TRIE, sizeof(struct sluice_lpm_v6),
	 sizeof(struct sluice_match_list)},
	{SLUICE_STR(SLUICE_MAP_SOURCES_V4), &MapSet::src4, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_set_v4), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_SOURCES_V6), &MapSet::src6, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_set_v6), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_LOGS_V4), &MapSet::logs4, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_log_set_v4), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_LOGS_V6), &MapSet::logs6, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_log_set_v6), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_COUNTERS), &MapSet::counters, BPF_MAP_TYPE_PERCPU_ARRAY, 4,
	 sizeof(struct sluice_counter)},
	{SLUICE_STR(SLUICE_MAP_META), &MapSet::meta, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_meta)},
	{SLUICE_STR(SLUICE_MAP_CONFIG), &MapSet::config, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_config)},
	{SLUICE_STR(SLUICE_MAP_PENDING), &MapSet::pending, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_pending_drops),
	 BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_FRAGS), &MapSet::frags, BPF_MAP_TYPE_LRU_HASH, sizeof(struct sluice_frag_key),
	 sizeof(struct sluice_frag_info)},
	{SLUICE_STR(SLUICE_MAP_IFACE_MTU), &MapSet::iface_mtu, BPF_MAP_TYPE_HASH, 4, 4},
	{SLUICE_STR(SLUICE_MAP_EVENTS), &MapSet::events, BPF_MAP_TYPE_RINGBUF, 0, 0},
	{SLUICE_STR(SLUICE_MAP_THROTTLED), &MapSet::throttled, BPF_MAP_TYPE_HASH, sizeof(struct sluice_throttle_key),
	 sizeof(struct sluice_throttle)},
	{SLUICE_STR(SLUICE_MAP_THEN), &MapSet::then, BPF_MAP_TYPE_PROG_ARRAY, 4, 4},
	{SLUICE_STR(SLUICE_MAP_OWED), &MapSet::owed, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct sluice_owed), BPF_F_MMAPABLE},
	{SLUICE_STR(SLUICE_MAP_GRANTS), &MapSet::grants, BPF_MAP_TYPE_LRU_HASH, sizeof(struct sluice_grant_key),
	 sizeof(struct sluice_grant)},
	{SLUICE_STR(SLUICE_MAP_BANS), &MapSet::bans, BPF_MAP_TYPE_LPM_TRIE, sizeof(struct sluice_ban_key),
	 sizeof(struct sluice_ban)},
	{SLUICE_STR(SLUICE_MAP_STRIKES), &MapSet::strikes, BPF_MAP_TYPE_LRU_HASH, sizeof(struct sluice_throttle_key),
	 sizeof(struct sluice_strike)},
};


/// Why a map does not have the layout ABI `abi` gives it; empty if it does.
std::string layout_mismatch(const MapRef &ref, int fd)
{
	struct bpf_map_info info = map_info(fd);
	const uint32_t value_size = ref.value_size;
	if (info.type != ref.type || info.key_size != ref.key_size || info.value_size != value_size ||
	    (info.map_flags & ref.flags) != ref.flags)
		return std::string("map ") + ref.name + " has type " + std::to_string(info.type) + ", key " +
		       std::to_string(info.key_size) + ", value " + std::to_string(info.value_size) +
		       " bytes and flags " + std::to_string(info.map_flags) + "; this sluice expects type " +
		       std::to_string(ref.type) + ", key " + std::to_string(ref.key_size) + ", value " +
		       std::to_string(value_size) + " bytes and flags " + std::to_string(ref.flags);
	return {};
}

} // namespace

struct bpf_map_info map_info(int fd)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(fd, &info, &len))
		throw_errno("cannot read map info", errno);
	return info;
}

int open_pinned_object(const std::string &path)
{
	int fd = bpf_obj_get(path.c_str());
	if (fd < 0 && errno == EROFS) {
		LIBBPF_OPTS(bpf_obj_get_opts, opts, .file_flags = BPF_F_RDONLY);
		fd = bpf_obj_get_opts(path.c_str(), &opts);
	}
	return fd;
}

uint64_t layout_hash(std::span<const MapLayout> maps)
{
	// Over every map's name (with its NUL), type, key and value size and
	// flags (host byte order), in ABI order.
	Fnv1a64 h;
	for (const auto &m : maps) {
		h.add(m.name, std::strlen(m.name) + 1);
		uint32_t fields[] = {m.type, m.key_size, m.value_size, m.flags};
		h.add(fields, sizeof(fields));
	}
	return h.value();
}

uint64_t layout_hash()
{
	std::vector<MapLayout> maps;
	for (const auto &ref : MAP_REFS)
		maps.push_back({ref.name, static_cast<uint32_t>(ref.type), ref.key_size, ref.value_size, ref.flags});
	return layout_hash(maps);
}

std::optional<std::string> foreign_layout(const std::string &dir)
{
	auto another = [&dir](const std::string &what, const std::string &way_out) {
		return "the state pinned in " + dir + " has another layout than this sluice's (ABI " +
		       std::to_string(SLUICE_ABI_VERSION) + "): " + what + "; " + way_out;
	};
	const std::string afresh = "`sluice detach --all` to start afresh";
	std::string meta_path = dir + "/" SLUICE_STR(SLUICE_MAP_META);
	UniqueFd meta(open_pinned_object(meta_path));
	if (!meta)
		throw_errno("cannot open pinned map " + meta_path, errno);
	struct bpf_map_info info = map_info(meta.get());
	if (info.type != BPF_MAP_TYPE_ARRAY || info.value_size < 4)
		return another("it has no layout record", "run " + afresh);
	std::vector<uint8_t> raw(std::max<size_t>(info.value_size, sizeof(struct sluice_meta)));
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(meta.get(), &zero, raw.data()))
		throw_errno("cannot read " + meta_path, errno);
	struct sluice_meta record = {};
	std::memcpy(&record, raw.data(), sizeof(record)); // abi_version is every record's first field
	if (info.value_size != sizeof(struct sluice_meta)) {
		if (auto older = upgrade_refusal(info.value_size, record.abi_version)) // too old for `sluice upgrade`
			return older;
		return another("it records ABI " + std::to_string(record.abi_version) + " in a record of " +
				       std::to_string(info.value_size) + " bytes",
			       "run `sluice upgrade` to migrate it, or " + afresh);
	}
	if (record.abi_version == SLUICE_ABI_VERSION && record.layout_hash == layout_hash())
		return std::nullopt;
	const std::string what = "it records ABI " + std::to_string(record.abi_version) + ", layout " +
				 hex64(record.layout_hash) + " (this sluice: " + hex64(layout_hash()) + ")";
	if (record.abi_version == SLUICE_ABI_VERSION) // another build of this release, before a change to its layout
		return another(what + ", of another build of this release",
			       "`sluice upgrade` cannot migrate it: export the rules with the sluice that pinned it if "
			       "you need them, then run " +
				       afresh);
	if (record.abi_version > SLUICE_ABI_VERSION)
		return another(what + ", of a newer sluice", "use that sluice, or run " + afresh);
	return another(what, "run `sluice upgrade` to migrate it, or " + afresh);
}

MapSet MapSet::open_pinned(const std::string &dir)
{
	// The layout record first: state of another layout is refused before
	// any of its maps is read into this binary's structs.
	if (auto why = foreign_layout(dir))
		throw Error(*why);
	// A record of this layout over maps of another: not state any sluice made.
	auto refuse = [&dir](const std::string &what) {
		return Error("the state pinned in " + dir + " has another layout than this sluice's (ABI " +
			     std::to_string(SLUICE_ABI_VERSION) + "): " + what +
			     ", under a record of this layout; run `sluice detach --all` to start afresh");
	};
	MapSet m;
	for (const auto &ref : MAP_REFS) {
		std::string path = dir + "/" + ref.name;
		int fd = open_pinned_object(path);
		if (fd < 0 && errno == ENOENT)
			throw refuse(std::string("map ") + ref.name + " is missing");
		if (fd < 0)
			throw_errno("cannot open pinned map " + path, errno);
		(m.*ref.field).reset(fd);
		if (std::string why = layout_mismatch(ref, fd); !why.empty())
			throw refuse(why);
	}
	return m;
}

MapSet MapSet::from_object(struct bpf_object *obj)
{
	MapSet m;
	for (const auto &ref : MAP_REFS) {
		struct bpf_map *map = bpf_object__find_map_by_name(obj, ref.name);
		if (!map)
			throw Error(std::string("BPF object has no map ") + ref.name);
		int fd = fcntl(bpf_map__fd(map), F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			throw_errno(std::string("cannot duplicate map ") + ref.name, errno);
		(m.*ref.field).reset(fd);
		if (std::string why = layout_mismatch(ref, fd); !why.empty())
			throw Error("the BPF object does not match the ABI: " + why);
	}
	return m;
}

void MapSet::for_each(const std::function<void(const char *, int)> &f) const
{
	for (const auto &ref : MAP_REFS)
		f(ref.name, (this->*ref.field).get());
}

uint32_t MapSet::max_rules() const { return map_max_entries(rule_counters.get()); }
uint32_t MapSet::max_sources() const { return map_max_entries(src6.get()) * SLUICE_SET_WAYS; }
uint32_t MapSet::max_log_sources() const { return map_max_entries(logs4.get()) * SLUICE_SET_WAYS; }
uint32_t MapSet::max_bans() const { return map_max_entries(bans.get()); }
uint32_t MapSet::max_v6_prefixes() const { return map_max_entries(match6.get()) / 2; }

int possible_cpus()
{
	static int n = libbpf_num_possible_cpus();
	if (n <= 0)
		throw_errno("cannot count possible CPUs", n);
	return n;
}

uint32_t map_max_entries(int fd) { return map_info(fd).max_entries; }

namespace {

/// Every CPU's slot of `fd` (SLUICE_PENDING_SLOTS per CPU, CPU after CPU:
/// sluice_cpu_slot) for which keep(value) holds.
template <class V> std::vector<V> read_slots(int fd, bool (*keep)(const V &))
{
	const MappedArray slots(fd);
	std::vector<V> out;
	for (uint32_t i = 0; i < slots.size(); i++)
		if (const V &v = *slots.at<V>(i); keep(v))
			out.push_back(v);
	return out;
}

} // namespace

std::vector<struct sluice_pending_drops> read_pending(int fd)
{
	return read_slots<struct sluice_pending_drops>(fd, [](const struct sluice_pending_drops &p) { return p.packets != 0; });
}

std::vector<struct sluice_owed> read_owed(int fd)
{
	if (fd < 0)
		return {};
	return read_slots<struct sluice_owed>(fd, [](const struct sluice_owed &o) { return o.packets != 0; });
}

MappedArray::MappedArray(int fd, uint32_t begin, uint32_t end)
{
	struct bpf_map_info info = map_info(fd);
	entries_ = std::min(info.max_entries, end);
	begin = std::min(begin, entries_);
	if (entries_ == begin) // nothing asked: one entry, so that the mapping is valid
		entries_ = std::min(info.max_entries, begin + 1);
	begin = std::min(begin, entries_ - 1);
	stride_ = (info.value_size + 7) & ~size_t(7);
	size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	offset_ = size_t(begin) * stride_ / page * page;
	length_ = (size_t(entries_) * stride_ + page - 1) / page * page - offset_;
	void *p = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset_));
	if (p != MAP_FAILED) {
		base_ = static_cast<uint8_t *>(p);
		return;
	}
	// A pin opened read-only (a read-only bpffs) cannot be mapped: read a
	// copy, which serves every reader; writing it is refused.
	int err = errno;
	offset_ = 0;
	copy_.resize(size_t(entries_) * stride_);
	std::vector<uint32_t> keys(entries_);
	uint32_t count = entries_, cursor = 0;
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	if (bpf_map_lookup_batch(fd, nullptr, &cursor, keys.data(), copy_.data(), &count, &opts) && errno != ENOENT)
		throw_errno("cannot map an array map", err);
	base_ = copy_.data();
	length_ = 0;
}

MappedArray::~MappedArray()
{
	if (length_)
		munmap(base_, length_);
}

void MappedArray::refuse_write() const
{
	throw Error("cannot write a map opened read-only (is bpffs mounted read-only?)");
}

std::string hex64(uint64_t v)
{
	char buf[19];
	std::snprintf(buf, sizeof(buf), "%#018llx", static_cast<unsigned long long>(v));
	return buf;
}

void map_update(int fd, const void *key, const void *value, const char *what)
{
	if (bpf_map_update_elem(fd, key, value, BPF_ANY))
		throw_errno(std::string("cannot update ") + what, errno);
}

void map_update_batch(int fd, const void *keys, const void *values, size_t count, const char *what)
{
	if (count == 0)
		return;
	__u32 n = static_cast<__u32>(count);
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	if (bpf_map_update_batch(fd, keys, values, &n, &opts))
		throw_errno(std::string("cannot update ") + what, errno);
}


} // namespace sluice
