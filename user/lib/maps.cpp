#include "maps.h"

#include <cerrno>
#include <fcntl.h>

namespace sluice {

namespace {

struct MapRef {
	const char *name;
	UniqueFd MapSet::*field;
};

const MapRef MAP_REFS[] = {
	{SLUICE_STR(SLUICE_MAP_RULES), &MapSet::rules},
	{SLUICE_STR(SLUICE_MAP_RULE_INFO), &MapSet::rule_info},
	{SLUICE_STR(SLUICE_MAP_RULE_COUNTERS), &MapSet::rule_counters},
	{SLUICE_STR(SLUICE_MAP_DIR4_SEL), &MapSet::dir4_sel},
	{SLUICE_STR(SLUICE_MAP_DIR4_TOP), &MapSet::dir4_top},
	{SLUICE_STR(SLUICE_MAP_DIR4_BLOCKS), &MapSet::dir4_blocks},
	{SLUICE_STR(SLUICE_MAP_LISTS_V4), &MapSet::lists4},
	{SLUICE_STR(SLUICE_MAP_MATCH_V6), &MapSet::match6},
	{SLUICE_STR(SLUICE_MAP_SOURCES_V4), &MapSet::src4},
	{SLUICE_STR(SLUICE_MAP_SOURCES_V6), &MapSet::src6},
	{SLUICE_STR(SLUICE_MAP_LOGS_V4), &MapSet::logs4},
	{SLUICE_STR(SLUICE_MAP_LOGS_V6), &MapSet::logs6},
	{SLUICE_STR(SLUICE_MAP_COUNTERS), &MapSet::counters},
	{SLUICE_STR(SLUICE_MAP_META), &MapSet::meta},
	{SLUICE_STR(SLUICE_MAP_CONFIG), &MapSet::config},
	{SLUICE_STR(SLUICE_MAP_PENDING), &MapSet::pending},
	{SLUICE_STR(SLUICE_MAP_FRAGS), &MapSet::frags},
	{SLUICE_STR(SLUICE_MAP_IFACE_MTU), &MapSet::iface_mtu},
};

} // namespace

int open_pinned_object(const std::string &path)
{
	int fd = bpf_obj_get(path.c_str());
	if (fd < 0 && errno == EROFS) {
		LIBBPF_OPTS(bpf_obj_get_opts, opts, .file_flags = BPF_F_RDONLY);
		fd = bpf_obj_get_opts(path.c_str(), &opts);
	}
	return fd;
}

MapSet MapSet::open_pinned(const std::string &dir)
{
	MapSet m;
	for (const auto &ref : MAP_REFS) {
		std::string path = dir + "/" + ref.name;
		int fd = open_pinned_object(path);
		if (fd < 0)
			throw_errno("cannot open pinned map " + path, errno);
		(m.*ref.field).reset(fd);
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
	}
	return m;
}

void MapSet::for_each(const std::function<void(const char *, int)> &f) const
{
	for (const auto &ref : MAP_REFS)
		f(ref.name, (this->*ref.field).get());
}

uint32_t MapSet::max_rules() const { return map_max_entries(rules.get()); }
uint32_t MapSet::max_sources() const { return map_max_entries(src6.get()) * SLUICE_SET_WAYS; }
uint32_t MapSet::max_log_sources() const { return map_max_entries(logs4.get()) * SLUICE_SET_WAYS; }

int possible_cpus()
{
	static int n = libbpf_num_possible_cpus();
	if (n <= 0)
		throw_errno("cannot count possible CPUs", n);
	return n;
}

uint32_t map_max_entries(int fd)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(fd, &info, &len))
		throw_errno("cannot read map info", errno);
	return info.max_entries;
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
