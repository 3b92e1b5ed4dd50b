// SPDX-License-Identifier: GPL-2.0-only
#include "datapath.h"

#include <dirent.h>
#include <stdio.h>
#include <fcntl.h>
#include <linux/genetlink.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/magic.h>
#include <net/if.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>

#include "sluice_bpf.skel.h"
#include "chain.h"
#include "events.h"
#include "multiprog.h"
#include "tick_clock.h"
#include "upgrade.h"

namespace sluice {

namespace {

constexpr const char *NOT_ATTACHED =
	"sluice is not attached to any interface; run `sluice attach IFACE`";

/// Runs an undo step on scope exit unless dismissed.
class Rollback {
public:
	explicit Rollback(std::function<void()> undo) : undo_(std::move(undo)) {}
	~Rollback()
	{
		if (undo_)
			undo_();
	}
	void dismiss() { undo_ = nullptr; }

private:
	std::function<void()> undo_;
};

std::string parent_dir(const std::string &path)
{
	auto slash = path.find_last_of('/');
	return slash == 0 ? "/" : path.substr(0, slash);
}

bool on_bpffs(const std::string &path)
{
	struct statfs st;
	return statfs(path.c_str(), &st) == 0 && st.f_type == BPF_FS_MAGIC;
}

// True when this process has a mount namespace of its own (`ip netns exec`
// makes one, with a fresh /sys): a bpffs mounted or read here is not the
// host's, and pins made in it vanish with the namespace.
bool private_mount_namespace()
{
	struct stat self, init;
	if (stat("/proc/self/ns/mnt", &self) == 0 && stat("/proc/1/ns/mnt", &init) == 0)
		return self.st_ino != init.st_ino;
	// Where PID 1 cannot be inspected (a container): `ip netns exec NS` mounts
	// a sysfs named NS on /sys.
	std::ifstream mounts("/proc/self/mountinfo");
	for (std::string line; std::getline(mounts, line);) {
		std::istringstream in(line);
		std::string id, parent, dev, root, point, word;
		in >> id >> parent >> dev >> root >> point;
		if (point != "/sys")
			continue;
		while (in >> word && word != "-") {
		}
		std::string fstype, source;
		in >> fstype >> source;
		return fstype == "sysfs" && source != "sysfs" && access(("/run/netns/" + source).c_str(), F_OK) == 0;
	}
	return false;
}

// The pin directory's parent must be a BPF filesystem. A command that changes
// state mounts /sys/fs/bpf when missing, as bpftool and xdp-tools do; a
// command that only reads mounts nothing.
void ensure_bpffs(const std::string &dir, bool may_mount)
{
	std::string parent = parent_dir(dir);
	if (on_bpffs(parent))
		return;
	if (parent == "/sys/fs/bpf" && private_mount_namespace())
		throw Error("no bpffs is mounted at /sys/fs/bpf in this mount namespace (`ip netns exec` makes "
			    "its own), so Sluice's state cannot be seen from here; run `nsenter --net=/run/netns/NS "
			    "sluice ...` instead, which keeps the host's mounts");
	if (!may_mount)
		throw Error(std::string(NOT_ATTACHED) + " (no bpffs is mounted at " + parent + ")");
	if (parent == "/sys/fs/bpf") {
		if (mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"))
			throw_errno("cannot mount bpffs on /sys/fs/bpf", errno);
		return;
	}
	// No mount is suggested: the parent may be a system directory (/tmp),
	// and a bpffs mounted over it would hide what it holds.
	throw Error("cannot keep sluice's state in " + dir + ": " + parent +
		    " is not on a BPF filesystem; choose a pin directory under /sys/fs/bpf, such as /sys/fs/bpf/" +
		    dir.substr(dir.find_last_of('/') + 1));
}

// A change on a read-only bpffs would fail halfway (detach: links gone, pins
// left): every mutating command refuses it before anything changes. A pin
// directory not made yet is of the filesystem it would be made on.
void refuse_read_only(const std::string &dir)
{
	struct statvfs fs;
	bool made = access(dir.c_str(), F_OK) == 0;
	if (statvfs(made ? dir.c_str() : parent_dir(dir).c_str(), &fs) == 0 && (fs.f_flag & ST_RDONLY))
		throw Error("cannot change anything: " + parent_dir(dir) + " is mounted read-only, so the pins and maps in " +
			    dir + " cannot be written; nothing was changed");
}

uint64_t current_netns()
{
	struct stat st;
	if (stat("/proc/self/ns/net", &st))
		throw_errno("cannot read the network namespace", errno);
	return st.st_ino;
}

uint32_t resolve_ifindex(const std::string &ifname, const char *verb)
{
	unsigned idx = if_nametoindex(ifname.c_str());
	if (!idx)
		throw Error(std::string("cannot ") + verb + " " + ifname + ": no such interface");
	return idx;
}

// The interface's MTU: in generic mode the data plane charges a longer frame
// (a GRO or BIG TCP super-packet) as the wire packets it carries.
uint32_t interface_mtu(const std::string &ifname)
{
	UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	struct ifreq req = {};
	if (!sock || ifname.size() >= sizeof(req.ifr_name))
		throw_errno("cannot read the MTU of " + ifname, sock ? ENAMETOOLONG : errno);
	std::memcpy(req.ifr_name, ifname.c_str(), ifname.size());
	if (ioctl(sock.get(), SIOCGIFMTU, &req))
		throw_errno("cannot read the MTU of " + ifname, errno);
	return static_cast<uint32_t>(req.ifr_mtu);
}

// Link pins are named ns<netns inode>-if<ifindex>-<mode>: an ifindex is only
// unique within its network namespace, and the mode is what was asked for.
std::string link_pin_name(uint64_t netns, uint32_t ifindex, XdpMode mode)
{
	return "ns" + std::to_string(netns) + "-if" + std::to_string(ifindex) + "-" +
	       std::string(mode_name(mode));
}

bool parse_link_pin_name(const std::string &name, uint64_t &netns, uint32_t &ifindex,
			 XdpMode &mode)
{
	unsigned long long ns = 0;
	unsigned idx = 0;
	char mode_buf[16] = {};
	if (sscanf(name.c_str(), "ns%llu-if%u-%15s", &ns, &idx, mode_buf) != 3)
		return false;
	netns = ns;
	ifindex = idx;
	mode = std::string_view(mode_buf) == "generic" ? XdpMode::generic : XdpMode::native;
	return true;
}

/// The pin of sluice's program in libxdp's dispatcher: this, then the link's name.
#define DISPATCHED_PREFIX "dispatched-"

/// The record of a program-array slot: the array pinned under this name.
std::string array_pin_name(uint32_t map_id, uint32_t index)
{
	return "array-" + std::to_string(map_id) + "-" + std::to_string(index);
}

bool parse_array_pin_name(const std::string &name, uint32_t &map_id, uint32_t &index)
{
	unsigned id = 0, idx = 0;
	char end = 0;
	if (sscanf(name.c_str(), "array-%u-%u%c", &id, &idx, &end) != 2)
		return false;
	map_id = id;
	index = idx;
	return true;
}

uint32_t object_id(int fd)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
}

uint64_t fd_memlock(int fd)
{
	std::ifstream in("/proc/self/fdinfo/" + std::to_string(fd));
	std::string key;
	uint64_t value = 0;
	while (in >> key) {
		if (key == "memlock:") {
			in >> value;
			return value;
		}
		in.ignore(1 << 20, '\n');
	}
	return 0;
}

int libbpf_quiet(enum libbpf_print_level, const char *, va_list) { return 0; }

int libbpf_all(enum libbpf_print_level, const char *fmt, va_list args)
{
	return vfprintf(stderr, fmt, args);
}

} // namespace

std::string_view mode_name(XdpMode m) { return m == XdpMode::generic ? "generic" : "native"; }

XdpMode parse_mode(std::string_view text)
{
	if (text == "native" || text == "drv")
		return XdpMode::native;
	if (text == "generic" || text == "skb")
		return XdpMode::generic;
	throw Error("unknown XDP mode '" + std::string(text) + "' (use native or generic)");
}

ObjectImage production_object()
{
	ObjectImage image;
	image.data = sluice_bpf__elf_bytes(&image.size);
	return image;
}

RuleRoom TableSizes::rule_room() const
{
	uint32_t rules = max_rules ? max_rules : SLUICE_DEFAULT_MAX_RULES;
	return {rules, max_v6_prefixes ? max_v6_prefixes : rules};
}

TableSizes TableSizes::loaded(const MapSet &m)
{
	return {m.max_sources(), m.max_rules(), m.max_log_sources(), m.max_bans(),
		stated_v6_prefixes(m.max_v6_prefixes(), m.max_rules())};
}

namespace {

/// Sets of the source tables for `sources` buckets (0: the default): whole sets.
uint32_t source_sets(uint32_t sources)
{
	return ((sources ? sources : SLUICE_DEFAULT_MAX_SOURCES) + SLUICE_SET_WAYS - 1) / SLUICE_SET_WAYS;
}

uint32_t log_sets(uint32_t logs)
{
	return ((logs ? logs : SLUICE_DEFAULT_MAX_LOG_SOURCES) + SLUICE_SET_WAYS - 1) / SLUICE_SET_WAYS;
}

/// The object image opened, its tables sized; nothing created yet.
struct bpf_object *open_sized(ObjectImage image, const TableSizes &sizes)
{
	LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = "sluice");
	struct bpf_object *obj = bpf_object__open_mem(image.data, image.size, &opts);
	if (!obj)
		throw_errno("cannot open the embedded BPF object", errno);
	Rollback close_obj([obj] { bpf_object__close(obj); });

	auto size_maps = [obj](std::initializer_list<const char *> names, uint32_t entries) {
		for (const char *name : names) {
			struct bpf_map *m = bpf_object__find_map_by_name(obj, name);
			if (!m || bpf_map__set_max_entries(m, entries))
				throw Error(std::string("cannot size map ") + name);
		}
	};
	RuleRoom room = sizes.rule_room();
	uint32_t rules = room.rules;
	if (rules > SLUICE_MAX_MAX_RULES) // the IPv4 table's entries hold block and list indices of 26 bits
		throw Error("--max-rules " + std::to_string(rules) + " is more than the most, " +
			    std::to_string(SLUICE_MAX_MAX_RULES));
	if (room.v6_prefixes < 1 || room.v6_prefixes > SLUICE_MAX_MAX_V6_PREFIXES)
		throw Error("--max-v6-prefixes is a count from 1 to " + std::to_string(SLUICE_MAX_MAX_V6_PREFIXES) +
			    ", not " + std::to_string(room.v6_prefixes));
	// Two rule sets (struct sluice_active): each holds up to `rules` rules,
	// as many match lists (+ index 0, unused), two IPv4 blocks a rule, and
	// its own room of IPv6 prefixes in the trie. Counters are per slot,
	// shared by both sets.
	size_maps({SLUICE_STR(SLUICE_MAP_RULE_COUNTERS)}, rules);
	size_maps({SLUICE_STR(SLUICE_MAP_RULES), SLUICE_STR(SLUICE_MAP_RULE_INFO)}, 2 * rules);
	size_maps({SLUICE_STR(SLUICE_MAP_MATCH_V6)}, 2 * room.v6_prefixes);
	size_maps({SLUICE_STR(SLUICE_MAP_DIR4_BLOCKS)}, 2 * 2 * rules);
	size_maps({SLUICE_STR(SLUICE_MAP_LISTS)}, 2 * (rules + 1));
	// Every source table is an array of sets: the sizes round up to whole sets.
	size_maps({SLUICE_STR(SLUICE_MAP_SOURCES_V4), SLUICE_STR(SLUICE_MAP_SOURCES_V6)}, source_sets(sizes.max_sources));
	size_maps({SLUICE_STR(SLUICE_MAP_LOGS_V4), SLUICE_STR(SLUICE_MAP_LOGS_V6)}, log_sets(sizes.max_log_sources));
	size_maps({SLUICE_STR(SLUICE_MAP_BANS)}, sizes.max_bans ? sizes.max_bans : SLUICE_DEFAULT_MAX_BANS);
	// SLUICE_PENDING_SLOTS slots per possible CPU (sluice_cpu_slot).
	size_maps({SLUICE_STR(SLUICE_MAP_PENDING), SLUICE_STR(SLUICE_MAP_OWED)},
		  SLUICE_PENDING_SLOTS * static_cast<uint32_t>(possible_cpus()));
	if (!bpf_object__find_program_by_name(obj, SLUICE_STR(SLUICE_PROG_NAME)))
		throw Error("BPF object has no program " SLUICE_STR(SLUICE_PROG_NAME));
	close_obj.dismiss();
	return obj;
}

int map_fd_of(struct bpf_object *obj, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(obj, name);
	if (!m)
		throw Error(std::string("BPF object has no map ") + name);
	return bpf_map__fd(m);
}

/// Writes the configuration and the layout record into tables just made.
void configure(struct bpf_object *obj, const TableSizes &sizes)
{
	// Until this is written the program finds no source table and fails open.
	struct sluice_config cfg = {};
	if (getrandom(&cfg.hash_seed, sizeof(cfg.hash_seed), 0) != sizeof(cfg.hash_seed))
		throw_errno("cannot draw a hash seed", errno);
	cfg.src4_sets = cfg.src6_sets = source_sets(sizes.max_sources);
	cfg.log4_sets = cfg.log6_sets = log_sets(sizes.max_log_sources);
	uint32_t zero = 0;
	map_update(map_fd_of(obj, SLUICE_STR(SLUICE_MAP_CONFIG)), &zero, &cfg, "sluice configuration");

	// The layout record (see struct sluice_meta).
	struct sluice_meta meta = {};
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	meta.abi_version = SLUICE_ABI_VERSION;
	meta.release = SLUICE_RELEASE(SLUICE_VERSION_MAJOR, SLUICE_VERSION_MINOR, SLUICE_VERSION_PATCH);
	meta.layout_hash = layout_hash();
	meta.next_rule_id = 1;
	meta.loaded_ns = static_cast<__u64>(now.tv_sec) * 1000000000ULL + now.tv_nsec;
	map_update(map_fd_of(obj, SLUICE_STR(SLUICE_MAP_META)), &zero, &meta, "sluice metadata");
}

} // namespace

LoadedProgram::LoadedProgram(const TableSizes &sizes, ObjectImage image) : LoadedProgram(image, sizes)
{
	load_program();
}

LoadedProgram::LoadedProgram(ObjectImage image, const TableSizes &sizes) : image_(image), sizes_(sizes)
{
	tables_ = open_sized(image, sizes);
	Rollback close_tables([this] { bpf_object__close(tables_); });
	// The maps alone: the program is loaded by load_program, from a second
	// opening of the image that takes these maps.
	bpf_program__set_autoload(bpf_object__find_program_by_name(tables_, SLUICE_STR(SLUICE_PROG_NAME)), false);
	set_load_constants(tables_); // the program takes these maps, its read-only data too
	int err = bpf_object__load(tables_);
	if (err)
		throw_errno("cannot create the program's tables", err);
	configure(tables_, sizes);
	close_tables.dismiss();
}

uint64_t LoadedProgram::table_bytes(const TableSizes &sizes, ObjectImage image)
{
	struct bpf_object *obj = open_sized(image, sizes);
	uint64_t bytes = 0;
	struct bpf_map *map;
	bpf_object__for_each_map(map, obj) {
		enum bpf_map_type t = bpf_map__type(map);
		uint64_t copies = t == BPF_MAP_TYPE_PERCPU_ARRAY || t == BPF_MAP_TYPE_PERCPU_HASH ? possible_cpus() : 1;
		bytes += uint64_t(bpf_map__value_size(map)) * bpf_map__max_entries(map) * copies;
	}
	bpf_object__close(obj);
	return bytes;
}

std::unique_ptr<LoadedProgram> LoadedProgram::tables_only(const TableSizes &sizes, ObjectImage image)
{
	return std::unique_ptr<LoadedProgram>(new LoadedProgram(image, sizes));
}

void LoadedProgram::load_program()
{
	if (obj_)
		return;
	struct bpf_object *obj = open_sized(image_, sizes_);
	Rollback close_obj([obj] { bpf_object__close(obj); });
	struct bpf_map *map;
	bpf_object__for_each_map(map, obj) {
		int err = bpf_map__reuse_fd(map, map_fd_of(tables_, bpf_map__name(map)));
		if (err)
			throw_errno(std::string("cannot take map ") + bpf_map__name(map), err);
	}
	int err = bpf_object__load(obj);
	if (err)
		throw_errno("cannot load the XDP program (run with -v for the verifier log)", err);
	prog_ = bpf_object__find_program_by_name(obj, SLUICE_STR(SLUICE_PROG_NAME));
	close_obj.dismiss();
	obj_ = obj;
	bpf_object__close(tables_); // obj_ holds the maps now
	tables_ = nullptr;
}

LoadedProgram::~LoadedProgram()
{
	bpf_object__close(obj_);
	bpf_object__close(tables_);
}

int LoadedProgram::prog_fd() const { return prog_ ? bpf_program__fd(prog_) : -1; }
MapSet LoadedProgram::maps() const { return MapSet::from_object(obj_ ? obj_ : tables_); }
struct bpf_object *LoadedProgram::object() const { return obj_; }

namespace {

/// One generic-netlink request and its first answer, as a flat list of the
/// answer's top-level attributes (type -> payload); empty on any failure.
std::vector<std::pair<uint16_t, std::string>> genl_ask(int sock, uint16_t family, uint8_t cmd, uint16_t attr_type,
						       const void *attr, uint16_t attr_len)
{
	std::vector<std::pair<uint16_t, std::string>> out;
	char req[128] = {};
	auto *nlh = reinterpret_cast<struct nlmsghdr *>(req);
	auto *genl = reinterpret_cast<struct genlmsghdr *>(req + NLMSG_HDRLEN);
	auto *nla = reinterpret_cast<struct nlattr *>(req + NLMSG_HDRLEN + GENL_HDRLEN);
	nla->nla_type = attr_type;
	nla->nla_len = static_cast<uint16_t>(NLA_HDRLEN + attr_len);
	std::memcpy(reinterpret_cast<char *>(nla) + NLA_HDRLEN, attr, attr_len);
	nlh->nlmsg_len = NLMSG_HDRLEN + GENL_HDRLEN + NLA_ALIGN(nla->nla_len);
	nlh->nlmsg_type = family;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	nlh->nlmsg_seq = 1;
	genl->cmd = cmd;
	genl->version = 1;
	if (send(sock, req, nlh->nlmsg_len, 0) < 0)
		return out;
	char buf[8192];
	ssize_t n = recv(sock, buf, sizeof(buf), 0);
	auto *ans = reinterpret_cast<struct nlmsghdr *>(buf);
	if (n < ssize_t(NLMSG_HDRLEN + GENL_HDRLEN) || !NLMSG_OK(ans, size_t(n)) || ans->nlmsg_type == NLMSG_ERROR)
		return out;
	size_t at = NLMSG_HDRLEN + GENL_HDRLEN;
	while (at + NLA_HDRLEN <= ans->nlmsg_len) {
		auto *a = reinterpret_cast<struct nlattr *>(buf + at);
		if (a->nla_len < NLA_HDRLEN || at + a->nla_len > ans->nlmsg_len)
			break;
		out.emplace_back(a->nla_type & NLA_TYPE_MASK,
				 std::string(reinterpret_cast<char *>(a) + NLA_HDRLEN, a->nla_len - NLA_HDRLEN));
		at += NLA_ALIGN(a->nla_len);
	}
	return out;
}

/// Whether the interface's driver runs XDP programs itself (native mode),
/// as the kernel's netdev family says (Linux 6.3 and later); nothing where
/// it cannot be told.
std::optional<bool> native_xdp_supported(uint32_t ifindex)
{
	// From <linux/netdev.h>, which not every build host has.
	constexpr uint8_t NETDEV_CMD_DEV_GET = 1;
	constexpr uint16_t NETDEV_A_DEV_IFINDEX = 1, NETDEV_A_DEV_XDP_FEATURES = 3;
	constexpr uint64_t NETDEV_XDP_ACT_BASIC = 1;
	UniqueFd sock(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC));
	if (!sock)
		return std::nullopt;
	struct timeval tv = {1, 0};
	setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	const char family_name[] = "netdev";
	uint16_t family = 0;
	for (const auto &[type, value] :
	     genl_ask(sock.get(), GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME, family_name, sizeof(family_name)))
		if (type == CTRL_ATTR_FAMILY_ID && value.size() >= 2)
			std::memcpy(&family, value.data(), 2);
	if (!family)
		return std::nullopt;
	for (const auto &[type, value] : genl_ask(sock.get(), family, NETDEV_CMD_DEV_GET, NETDEV_A_DEV_IFINDEX,
						  &ifindex, sizeof(ifindex)))
		if (type == NETDEV_A_DEV_XDP_FEATURES && value.size() >= 8) {
			uint64_t features = 0;
			std::memcpy(&features, value.data(), 8);
			return (features & NETDEV_XDP_ACT_BASIC) != 0;
		}
	return std::nullopt;
}

} // namespace

namespace {

/// struct sluice_meta's loaded_ns of the state pinned under `dir`; 0 if none.
uint64_t pinned_loaded_ns(const std::string &dir)
{
	UniqueFd meta(open_pinned_object(dir + "/" SLUICE_STR(SLUICE_MAP_META)));
	uint32_t zero = 0;
	struct sluice_meta m = {};
	if (!meta || bpf_map_lookup_elem(meta.get(), &zero, &m))
		return 0;
	return m.loaded_ns;
}

} // namespace

void check_attachable(const std::string &ifname, XdpMode mode, const Status &st)
{
	unsigned ifindex = if_nametoindex(ifname.c_str());
	if (!ifindex)
		throw Error("cannot attach to " + ifname + ": no such interface in this network namespace");
	if (mode == XdpMode::native && native_xdp_supported(ifindex) == false)
		throw Error("cannot attach to " + ifname + ": its driver does not support native XDP; use "
			    "mode: generic");
	// Sluice's own programs (the loaded one, and those its links of this
	// interface run) may be on the hook: a mode change replaces them.
	std::vector<uint32_t> own = {st.prog_id};
	uint64_t here = 0;
	if (struct stat ns; stat("/proc/self/ns/net", &ns) == 0)
		here = ns.st_ino;
	for (const auto &l : st.links)
		if (l.netns == here && l.ifindex == ifindex) {
			if (l.dispatcher)
				throw Error("cannot change " + ifname + ": sluice runs there through libxdp's dispatcher, "
					    "which a policy does not describe; detach it and attach it again");
			own.push_back(l.prog_id);
		}
	LIBBPF_OPTS(bpf_xdp_query_opts, q);
	if (bpf_xdp_query(static_cast<int>(ifindex), 0, &q))
		return; // the kernel cannot say: attach will
	for (uint32_t id : {q.drv_prog_id, q.skb_prog_id, q.hw_prog_id})
		if (id && std::find(own.begin(), own.end(), id) == own.end())
			throw Error("cannot attach to " + ifname + ": it runs another XDP program, " + describe_prog(id) +
				    "; to run both, chain it after sluice (detach it, then `sluice attach " + ifname +
				    " --then PROG`), or share the hook through libxdp's dispatcher (`--multiprog`)");
}

Instance::Instance(std::string pin_dir, std::string run_dir)
	: dir_(std::move(pin_dir)), run_dir_(run_dir.empty() ? run_dir_for(dir_) : std::move(run_dir))
{
}

std::string Instance::default_pin_dir() { return sluice::default_pin_dir(); }

void Instance::check_dirs() const
{
	check_private_dir(dir_, "pin directory");
	check_private_dir(lock_dir_for(dir_), "lock directory");
	check_private_dir(run_dir_, "run directory");
}

void Instance::make_run_dir() const { make_private_dir(run_dir_, "run directory"); }

namespace {

/// An flock on directory `dir`, taken once the path still names the
/// directory locked: a command that waited while `detach --all` removed it
/// (or, for the pin directory, an upgrade by a binary before 0.2.7 swapped it)
/// locks the one there now. Empty if there is none (`make`: creates it).
UniqueFd lock_directory(const std::string &dir, bool exclusive, bool make, const char *what)
{
	for (;;) {
		if (make)
			make_private_dir(dir, what);
		UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
		if (!fd && errno == ENOENT && !make)
			return fd;
		if (!fd && errno != ENOENT)
			throw_errno("cannot open " + dir, errno);
		if (!fd)
			continue; // removed between mkdir and open
		if (flock(fd.get(), exclusive ? LOCK_EX : LOCK_SH))
			throw_errno("cannot lock " + dir, errno);
		struct stat held, now;
		if (fstat(fd.get(), &held))
			throw_errno("cannot inspect " + dir, errno);
		if (stat(dir.c_str(), &now) == 0 && now.st_ino == held.st_ino && now.st_dev == held.st_dev)
			return fd;
		if (!make && access(dir.c_str(), F_OK) != 0)
			return UniqueFd();
	}
}

} // namespace

Instance::Lock Instance::lock(bool exclusive, bool create) const
{
	// `detach --all` removes both directories: a command that may load and
	// waited behind it makes them anew.
	for (;;) {
		Lock held = try_lock(exclusive, create);
		if (!create || held.holds_pin_dir())
			return held;
	}
}

Instance::Lock Instance::try_lock(bool exclusive, bool create) const
{
	ensure_bpffs(dir_, create);
	check_dirs(); // before anything is made
	std::vector<std::string> made;
	for (const std::string &d : {dir_, lock_dir_for(dir_)})
		if (create && access(d.c_str(), F_OK) != 0 && errno == ENOENT)
			made.push_back(d);
	if (create) {
		refuse_read_only(dir_); // not the mount's own error from mkdir
		make_private_dir(dir_, "pin directory");
	}
	if (access(dir_.c_str(), F_OK) != 0) {
		if (errno != ENOENT)
			throw_errno("cannot open " + dir_, errno);
		if (exclusive)
			throw Error(NOT_ATTACHED); // nothing was ever pinned here, and this command loads nothing
		return Lock();             // nothing to read, nothing created
	}
	if (exclusive)
		refuse_read_only(dir_); // before anything changes, not halfway
	// The lock directory is made beside a pin directory that has none (one
	// made by an earlier sluice, or emptied by `detach --all`), except on a
	// read-only bpffs, where nothing changes and readers lock the pin
	// directory alone, and for a reader of nothing (no litter after --all).
	struct statvfs fs;
	bool writable = statvfs(dir_.c_str(), &fs) == 0 && !(fs.f_flag & ST_RDONLY);
	UniqueFd stable = lock_directory(lock_dir_for(dir_), exclusive, writable && (create || loaded()),
					 "lock directory");
	UniqueFd pinned = lock_directory(dir_, exclusive, false, "pin directory");
	if (!pinned && exclusive && !create) {
		// Removed while this command waited: the lock directory locked (or
		// made) beside it goes too, if empty.
		stable = UniqueFd();
		rmdir(lock_dir_for(dir_).c_str());
		throw Error(NOT_ATTACHED);
	}
	return Lock(std::move(stable), std::move(pinned), std::move(made));
}

Instance::Lock::~Lock()
{
	if (std::uncaught_exceptions() <= unwinding_)
		return;
	// rmdir removes only an empty directory: the pin directory once the
	// command's own rollback took its pins out; the lock directory only
	// beside a pin directory that is gone. A command waiting on the lock
	// sees the directory go and makes or refuses it anew (lock_directory).
	for (const auto &d : made_)
		if (rmdir(d.c_str()) && errno != ENOENT)
			break;
}

bool Instance::loaded() const { return access(prog_pin().c_str(), F_OK) == 0; }

MapSet Instance::maps() const
{
	if (!loaded())
		throw Error(NOT_ATTACHED);
	return MapSet::open_pinned(dir_);
}

void Instance::pin_program(const LoadedProgram &prog, const std::string &dir)
{
	// Map pins with no program pin are a killed pin_program's: nothing
	// loaded holds them, and they would stand in the way.
	remove_pins(dir);
	Rollback undo([&dir] { remove_pins(dir); });
	if (mkdir((dir + "/links").c_str(), 0700) && errno != EEXIST)
		throw_errno("cannot create " + dir + "/links", errno);
	prog.maps().for_each([&dir](const char *name, int fd) {
		std::string path = dir + "/" + name;
		if (bpf_obj_pin(fd, path.c_str()))
			throw_errno("cannot pin " + path, errno);
	});
	// The program pin goes last: its presence means "loaded".
	if (bpf_obj_pin(prog.prog_fd(), (dir + "/prog").c_str()))
		throw_errno("cannot pin " + dir + "/prog", errno);
	undo.dismiss();
}

void Instance::remove_pins(const std::string &dir)
{
	unlink((dir + "/prog").c_str());
	MapSet().for_each([&dir](const char *name, int) { unlink((dir + "/" + name).c_str()); });
	for (const char *old : {"sluice_d4sel", "sluice_lists4"}) // sluice 0.2's, gone since
		unlink((dir + "/" + old).c_str());
	rmdir((dir + "/links").c_str());
}

std::vector<std::string> Instance::link_pins() const
{
	std::vector<std::string> names;
	DIR *d = opendir(links_dir().c_str());
	if (!d)
		return names;
	while (struct dirent *e = readdir(d)) {
		if (e->d_name[0] != '.')
			names.emplace_back(e->d_name);
	}
	closedir(d);
	return names;
}

bool Instance::load(const TableSizes &sizes)
{
	if (loaded())
		return false;
	LoadedProgram fresh(sizes);
	pin_program(fresh, dir_);
	return true;
}

void Instance::adopt(const LoadedProgram &prog)
{
	if (loaded())
		throw Error("sluice is loaded already under " + dir_);
	pin_program(prog, dir_);
}

void Instance::check_sizes(const MapSet &m, const TableSizes &sizes)
{
	// The source tables hold whole sets: compare sizes as they were rounded.
	auto sets_of = [](uint32_t n) { return (uint64_t(n) + SLUICE_SET_WAYS - 1) / SLUICE_SET_WAYS * SLUICE_SET_WAYS; };
	auto differs = [](uint64_t asked, uint32_t have, const char *option) {
		if (asked && asked != have)
			throw Error("sluice is loaded with " + std::string(option) + " " + std::to_string(have) +
				    "; change it with `sluice apply` (tables:), which keeps the rules, or remove "
				    "everything with `sluice detach --all`");
	};
	differs(sets_of(sizes.max_sources), m.max_sources(), "--max-sources");
	differs(sizes.max_rules, m.max_rules(), "--max-rules");
	differs(sets_of(sizes.max_log_sources), m.max_log_sources(), "--max-log-sources");
	differs(sizes.max_bans, m.max_bans(), "--max-bans");
	differs(sizes.max_v6_prefixes, m.max_v6_prefixes(), "--max-v6-prefixes");
}

bool Instance::attached_in(uint64_t netns, uint32_t ifindex, XdpMode mode) const
{
	std::string name = link_pin_name(netns, ifindex, mode);
	return access((links_dir() + "/" + name).c_str(), F_OK) == 0 ||
	       access((links_dir() + "/" DISPATCHED_PREFIX + name).c_str(), F_OK) == 0;
}

// How the data plane sizes an interface's frames. In native mode the driver
// hands XDP each frame as it came off the wire (GRO comes after XDP, and XDP
// turns LRO off), so a frame is one packet whatever its length: a NIC may
// take a few bytes over its MTU (veth takes MTU + 18). In generic mode a
// frame longer than the MTU is a GRO or BIG TCP super-packet. Both modes on
// one interface: generic's rule, for the frames that mode sees.
void Instance::record_frame_size(const MapSet &m, uint32_t ifindex, const std::string &ifname, XdpMode mode) const
{
	bool generic = mode == XdpMode::generic || attached_in(current_netns(), ifindex, XdpMode::generic);
	uint32_t size = generic ? interface_mtu(ifname) : SLUICE_MTU_WIRE_FRAMES;
	map_update(m.iface_mtu.get(), &ifindex, &size, "interface MTU");
}

void Instance::attach(const std::string &ifname, XdpMode mode, const TableSizes &sizes, const std::string &then)
{
	uint32_t ifindex = resolve_ifindex(ifname, "attach to");
	// The next program first: a bad --then changes nothing.
	UniqueFd next;
	if (!then.empty()) {
		if (ifindex >= SLUICE_MAX_THEN_IFINDEX)
			throw Error("cannot chain a program after sluice on " + ifname + ": its interface index " +
				    std::to_string(ifindex) + " is past the " +
				    std::to_string(SLUICE_MAX_THEN_IFINDEX) + " sluice can chain on");
		next = open_next_program(then);
	}
	attach_link(ifname, ifindex, mode, sizes, std::move(next), then);
}

void Instance::attach_link(const std::string &ifname, uint32_t ifindex, XdpMode mode, const TableSizes &sizes,
			   UniqueFd next, const std::string &then)
{
	std::string pin = links_dir() + "/" + link_pin_name(current_netns(), ifindex, mode);
	for (XdpMode m : {XdpMode::native, XdpMode::generic}) {
		if (access((links_dir() + "/" + link_pin_name(current_netns(), ifindex, m)).c_str(), F_OK) == 0)
			throw Error("sluice is already attached to " + ifname + " (" +
				    std::string(mode_name(m)) + " mode)");
	}

	bool fresh = false;
	UniqueFd prog_fd = program_to_place(sizes, fresh);
	// A program loaded for this attach is unpinned again if the attach fails.
	Rollback unload_fresh([&] {
		if (fresh)
			remove_pins(dir_);
	});
	MapSet m = maps();
	// Chains are kept by interface index: one of another namespace's
	// interfaces may hold this index's.
	uint32_t chained = ifindex < SLUICE_MAX_THEN_IFINDEX ? prog_array_entry(m.then.get(), ifindex) : 0;
	if (chained)
		throw Error("cannot attach to " + ifname + ": its interface index " + std::to_string(ifindex) +
			    " chains " + describe_prog(chained) + " for an interface of another network namespace, "
			    "and sluice keeps one chain per interface index");
	Rollback unchain([&] {
		if (next) {
			__u32 key = ifindex;
			bpf_map_delete_elem(m.then.get(), &key);
		}
	});
	if (next)
		put_in_prog_array(m.then.get(), ifindex, next.get(), "chain " + then + " after sluice on " + ifname);
	record_frame_size(m, ifindex, ifname, mode);

	LIBBPF_OPTS(bpf_link_create_opts, opts,
		    .flags = mode == XdpMode::native ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE);
	UniqueFd link(bpf_link_create(prog_fd.get(), static_cast<int>(ifindex), BPF_XDP, &opts));
	if (!link) {
		int err = errno;
		if (err == EBUSY || err == EEXIST) {
			LIBBPF_OPTS(bpf_xdp_query_opts, q);
			bpf_xdp_query(static_cast<int>(ifindex), 0, &q);
			throw Error("cannot attach to " + ifname + ": it runs another XDP program, " +
				    describe_prog(q.prog_id) + "; to run both, chain it after sluice (detach it, "
				    "then `sluice attach " + ifname + " --then PROG`), or share the hook through "
				    "libxdp's dispatcher (`--multiprog`, on kernels with BPF trampolines)");
		}
		if (err == EOPNOTSUPP && mode == XdpMode::native)
			throw Error("cannot attach to " + ifname +
				    ": its driver does not support native XDP; use --mode generic");
		throw_errno("cannot attach to " + ifname, err);
	}
	if (bpf_obj_pin(link.get(), pin.c_str())) {
		int err = errno;
		bpf_link_detach(link.get());
		throw_errno("cannot pin the XDP link at " + pin, err);
	}
	unchain.dismiss();
	unload_fresh.dismiss();
}

void Instance::attach_multiprog(const std::string &ifname, XdpMode mode, const TableSizes &sizes, uint32_t priority)
{
	uint32_t ifindex = resolve_ifindex(ifname, "attach to");
	std::string name = link_pin_name(current_netns(), ifindex, mode);
	if (access((links_dir() + "/" + name).c_str(), F_OK) == 0 ||
	    access((links_dir() + "/" DISPATCHED_PREFIX + name).c_str(), F_OK) == 0)
		throw Error("sluice is already attached to " + ifname);
	bool fresh = false;
	UniqueFd prog_fd = program_to_place(sizes, fresh);
	Rollback unload_fresh([&] {
		if (fresh)
			remove_pins(dir_);
	});
	record_frame_size(maps(), ifindex, ifname, mode);
	attach_through_dispatcher(maps(), ifindex, ifname, mode == XdpMode::generic, priority,
				  links_dir() + "/" DISPATCHED_PREFIX + name);
	unload_fresh.dismiss();
}

UniqueFd Instance::program_to_place(const TableSizes &sizes, bool &fresh)
{
	fresh = load(sizes);
	if (!fresh)
		check_sizes(maps(), sizes);
	UniqueFd prog_fd(open_pinned_object(prog_pin()));
	if (!prog_fd) {
		int err = errno;
		if (fresh)
			remove_pins(dir_);
		throw_errno("cannot open the pinned program", err);
	}
	return prog_fd;
}

void Instance::attach_to_prog_array(const std::string &array_path, uint32_t index, const TableSizes &sizes)
{
	UniqueFd array = open_prog_array(array_path);
	struct bpf_map_info info = map_info(array.get());
	std::string record = links_dir() + "/" + array_pin_name(info.id, index);
	if (access(record.c_str(), F_OK) == 0)
		throw Error("sluice is already at index " + std::to_string(index) + " of " + array_path);
	bool fresh = false;
	UniqueFd prog_fd = program_to_place(sizes, fresh);
	// A program loaded for this attach is unpinned again if the attach fails.
	Rollback unload_fresh([&] {
		if (fresh)
			remove_pins(dir_);
	});
	if (uint32_t held = prog_array_entry(array.get(), index))
		throw Error("index " + std::to_string(index) + " of " + array_path + " holds " + describe_prog(held) +
			    " already; sluice replaces no one's program");
	put_in_prog_array(array.get(), index, prog_fd.get(),
			  "install sluice at index " + std::to_string(index) + " of " + array_path);
	if (bpf_obj_pin(array.get(), record.c_str())) {
		int err = errno;
		__u32 key = index;
		bpf_map_delete_elem(array.get(), &key);
		throw_errno("cannot record the program array at " + record, err);
	}
	unload_fresh.dismiss();
}

void Instance::detach_from_prog_array(const std::string &array_path, uint32_t index)
{
	if (!loaded())
		throw Error(NOT_ATTACHED);
	refuse_read_only(dir_);
	UniqueFd array = open_prog_array(array_path);
	std::string record = links_dir() + "/" + array_pin_name(map_info(array.get()).id, index);
	if (access(record.c_str(), F_OK) != 0)
		throw Error("sluice is not at index " + std::to_string(index) + " of " + array_path);
	release_array_slot(record, index);
}

void Instance::release_array_slot(const std::string &record, uint32_t index) const
{
	// Only sluice's own program is taken out: another may have replaced it.
	UniqueFd array(open_pinned_object(record));
	UniqueFd prog(open_pinned_object(prog_pin()));
	if (array && prog && prog_array_entry(array.get(), index) == object_id(prog.get())) {
		__u32 key = index;
		bpf_map_delete_elem(array.get(), &key);
	}
	if (unlink(record.c_str()))
		throw_errno("cannot remove " + record, errno);
}

void Instance::unchain(uint32_t ifindex, uint64_t netns) const
{
	// Kept while the interface has a link in the other mode (a mode change).
	for (XdpMode m : {XdpMode::native, XdpMode::generic})
		if (access((links_dir() + "/" + link_pin_name(netns, ifindex, m)).c_str(), F_OK) == 0)
			return;
	if (ifindex >= SLUICE_MAX_THEN_IFINDEX)
		return;
	UniqueFd then(open_pinned_object(dir_ + "/" SLUICE_STR(SLUICE_MAP_THEN)));
	__u32 key = ifindex;
	if (then)
		bpf_map_delete_elem(then.get(), &key);
}

void Instance::detach(const std::string &ifname)
{
	if (!loaded())
		throw Error(NOT_ATTACHED);
	refuse_read_only(dir_);
	std::string pin;
	uint64_t netns = 0;
	uint32_t pinned_ifindex = 0;
	XdpMode pinned_mode;
	if (parse_link_pin_name(ifname, netns, pinned_ifindex, pinned_mode) &&
	    access((links_dir() + "/" + ifname).c_str(), F_OK) == 0) {
		pin = links_dir() + "/" + ifname; // a link named by its pin, as status shows it
	} else if (uint32_t a = 0, b = 0; parse_array_pin_name(ifname, a, b)) {
		if (access((links_dir() + "/" + ifname).c_str(), F_OK) != 0)
			throw Error("sluice has no program-array slot " + ifname);
	} else {
		uint32_t ifindex = resolve_ifindex(ifname, "detach from");
		for (XdpMode m : {XdpMode::native, XdpMode::generic}) {
			std::string p = links_dir() + "/" + link_pin_name(current_netns(), ifindex, m);
			if (access(p.c_str(), F_OK) == 0)
				pin = p;
			std::string d = links_dir() + "/" DISPATCHED_PREFIX + link_pin_name(current_netns(), ifindex, m);
			if (access(d.c_str(), F_OK) == 0) {
				// Through libxdp's dispatcher: only sluice's program leaves it.
				detach_from_dispatcher(ifindex, m == XdpMode::generic, d);
				if (unlink(d.c_str()))
					throw_errno("cannot remove " + d, errno);
				if (m == XdpMode::generic && attached_in(current_netns(), ifindex, XdpMode::native))
					record_frame_size(maps(), ifindex, ifname, XdpMode::native);
				return;
			}
		}
	}
	uint32_t slot_map = 0, slot_index = 0;
	if (pin.empty() && !parse_array_pin_name(ifname, slot_map, slot_index))
		throw Error("sluice is not attached to " + ifname);

	uint32_t array_id = 0, array_index = 0;
	if (parse_array_pin_name(ifname, array_id, array_index) &&
	    access((links_dir() + "/" + ifname).c_str(), F_OK) == 0) {
		release_array_slot(links_dir() + "/" + ifname, array_index); // a program-array slot, by its record
	} else {
		UniqueFd link(open_pinned_object(pin));
		if (link && bpf_link_detach(link.get()) && errno != ENOLINK)
			throw_errno("cannot detach from " + ifname, errno);
		if (unlink(pin.c_str()))
			throw_errno("cannot remove " + pin, errno);
		if (parse_link_pin_name(pin.substr(pin.rfind('/') + 1), netns, pinned_ifindex, pinned_mode)) {
			unchain(pinned_ifindex, netns);
			// Native mode left alone on the interface: its frames are wire packets again.
			if (pinned_mode == XdpMode::generic && netns == current_netns() && !link_pins().empty() &&
			    attached_in(netns, pinned_ifindex, XdpMode::native))
				record_frame_size(maps(), pinned_ifindex, ifname, XdpMode::native);
		}
	}
}

void Instance::detach_link(const std::string &pin_name)
{
	refuse_read_only(dir_);
	std::string pin = links_dir() + "/" + pin_name;
	UniqueFd link(open_pinned_object(pin));
	if (link && bpf_link_detach(link.get()) && errno != ENOLINK)
		throw_errno("cannot detach link " + pin_name, errno);
	if (unlink(pin.c_str()))
		throw_errno("cannot remove " + pin, errno);
	uint64_t netns = 0;
	uint32_t ifindex = 0;
	XdpMode mode;
	if (parse_link_pin_name(pin_name, netns, ifindex, mode))
		unchain(ifindex, netns);
}

namespace {

/// The program chained after sluice on `link` (`--then`); empty if none.
UniqueFd open_chained(const AttachedLink &link)
{
	UniqueFd next;
	if (link.then_prog_id) {
		next.reset(bpf_prog_get_fd_by_id(link.then_prog_id));
		if (!next)
			throw_errno("cannot open " + describe_prog(link.then_prog_id) + ", chained after sluice on " +
					    link.ifname,
				    errno);
	}
	return next;
}

} // namespace

void Instance::reattach(const AttachedLink &link)
{
	uint32_t ifindex = resolve_ifindex(link.ifname, "attach to");
	UniqueFd next = open_chained(link);
	attach_link(link.ifname, ifindex, link.mode, {}, std::move(next), describe_prog(link.then_prog_id));
}

void Instance::change_mode(const AttachedLink &link, XdpMode to)
{
	if (link.dispatcher)
		throw Error("cannot move " + link.ifname + " to " + std::string(mode_name(to)) +
			    " mode: sluice runs there through libxdp's dispatcher; detach it and attach it again");
	refuse_read_only(dir_);
	uint32_t ifindex = resolve_ifindex(link.ifname, "attach to");
	// The kernel runs one mode at a time on an interface: the old link goes
	// first, and comes back if the new one cannot be made. The chain
	// (`--then`) goes with both.
	UniqueFd next = open_chained(link);
	detach_link(link.pin);
	try {
		UniqueFd again(next ? dup(next.get()) : -1);
		attach_link(link.ifname, ifindex, to, {}, std::move(again), describe_prog(link.then_prog_id));
	} catch (const std::exception &e) {
		try {
			attach_link(link.ifname, ifindex, link.mode, {}, std::move(next), describe_prog(link.then_prog_id));
		} catch (const std::exception &again) {
			throw Error(std::string(e.what()) + "; and attaching " + link.ifname + " again in " +
				    std::string(mode_name(link.mode)) + " mode failed too: " + again.what() +
				    " (sluice is detached from it)");
		}
		throw;
	}
}

std::vector<std::string> Instance::upgrade(const TableSizes &sizes)
{
	if (!loaded())
		throw Error(NOT_ATTACHED);
	refuse_read_only(dir_);
	// 1. Everything worth keeping, read from the pinned state of any known
	//    layout, into a program loaded from this binary.
	for (const auto &name : link_pins())
		if (name.rfind(DISPATCHED_PREFIX, 0) == 0)
			throw Error("cannot upgrade in place while sluice runs in libxdp's dispatcher (" + name +
				    "): detach it, upgrade, and attach it again");
	CarriedState state = read_state(dir_);
	TableSizes want = {sizes.max_sources ? sizes.max_sources : state.max_sources,
			   sizes.max_rules ? sizes.max_rules : state.max_rules,
			   sizes.max_log_sources ? sizes.max_log_sources : state.max_log_sources,
			   sizes.max_bans ? sizes.max_bans : state.max_bans,
			   sizes.max_v6_prefixes ? sizes.max_v6_prefixes
						 : TableSizes::stated_v6_prefixes(state.max_v6_prefixes, state.max_rules)};
	LoadedProgram fresh(want);
	std::vector<std::string> restarted = restore_state(state, fresh.maps());
	// A native link's frames are wire packets (record_frame_size), whatever
	// an older program recorded for its interface.
	for (const auto &name : link_pins()) {
		uint64_t netns = 0;
		uint32_t ifindex = 0;
		XdpMode mode;
		bool dispatched = name.rfind(DISPATCHED_PREFIX, 0) == 0;
		std::string bare = dispatched ? name.substr(strlen(DISPATCHED_PREFIX)) : name;
		if (!parse_link_pin_name(bare, netns, ifindex, mode) || mode != XdpMode::native)
			continue;
		if (!attached_in(netns, ifindex, XdpMode::generic)) {
			uint32_t size = SLUICE_MTU_WIRE_FRAMES;
			map_update(fresh.maps().iface_mtu.get(), &ifindex, &size, "interface frame size");
		}
	}
	// Chains (`--then`) hold programs: carried by id, not by bytes.
	if (UniqueFd old_then(open_pinned_object(dir_ + "/" SLUICE_STR(SLUICE_MAP_THEN))); old_then) {
		MapSet fm = fresh.maps();
		for (uint32_t i = 0; i < SLUICE_MAX_THEN_IFINDEX; i++)
			if (uint32_t id = prog_array_entry(old_then.get(), i)) {
				UniqueFd next(bpf_prog_get_fd_by_id(id));
				if (next)
					put_in_prog_array(fm.then.get(), i, next.get(), "carry the chain of interface index " +
												std::to_string(i));
			}
	}

	// 2. Pin it beside the live state, links included (a link may have many
	//    pins), and swap the two directories in one rename: a command sees
	//    the old state or the new. Leftovers of a killed upgrade go first.
	std::string staging = dir_ + "-next"; // bpffs names take no dots
	check_private_dir(staging, "upgrade's staging directory"); // never empty another's directory
	remove_state_dir(staging);
	if (mkdir(staging.c_str(), 0700))
		throw_errno("cannot create " + staging, errno);
	Rollback drop_staging([&staging] { remove_state_dir(staging); });
	pin_program(fresh, staging);
	std::vector<std::pair<std::string, UniqueFd>> links;
	for (const auto &name : link_pins()) {
		UniqueFd link(open_pinned_object(links_dir() + "/" + name));
		if (!link)
			throw_errno("cannot open link " + name, errno);
		std::string path = staging + "/links/" + name;
		if (bpf_obj_pin(link.get(), path.c_str()))
			throw_errno("cannot pin " + path, errno);
		links.emplace_back(name, std::move(link));
	}
	if (renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE))
		throw_errno("cannot swap " + staging + " and " + dir_, errno);

	// 3. Each interface moves to the new program in one step (the link is
	//    updated in place: no packet meets no program). A command killed
	//    here leaves links on the old program: `sluice upgrade` again
	//    finishes (status shows them).
	for (const auto &[name, link] : links) {
		uint32_t array_id = 0, index = 0;
		if (parse_array_pin_name(name, array_id, index)) // a program-array slot: replaced in one write
			put_in_prog_array(link.get(), index, fresh.prog_fd(), "move slot " + name + " to the new program");
		else if (bpf_link_update(link.get(), fresh.prog_fd(), nullptr) && errno != ENOLINK)
			throw_errno("cannot move link " + name + " to the new program", errno);
	}
	if (uint64_t ns = pinned_loaded_ns(staging)) // the old state's: its ring is read no more
		forget_retired_rules(ns);
	return restarted; // drop_staging removes the old state, now at `staging`
}

void Instance::remove_state_dir(const std::string &dir)
{
	DIR *d = opendir((dir + "/links").c_str());
	if (d) {
		while (struct dirent *e = readdir(d))
			if (e->d_name[0] != '.')
				unlink((dir + "/links/" + e->d_name).c_str());
		closedir(d);
	}
	remove_pins(dir);
	rmdir(dir.c_str());
}

void Instance::unload()
{
	refuse_read_only(dir_);
	if (uint64_t ns = pinned_loaded_ns(dir_))
		forget_retired_rules(ns);
	for (const auto &name : link_pins()) {
		std::string pin = links_dir() + "/" + name;
		uint32_t array_id = 0, index = 0;
		if (parse_array_pin_name(name, array_id, index)) {
			release_array_slot(pin, index);
			continue;
		}
		uint64_t netns = 0;
		XdpMode mode;
		if (name.rfind(DISPATCHED_PREFIX, 0) == 0 &&
		    parse_link_pin_name(name.substr(strlen(DISPATCHED_PREFIX)), netns, index, mode)) {
			try {
				detach_from_dispatcher(index, mode == XdpMode::generic, pin);
			} catch (const Error &) {
				// The interface is gone with its dispatcher: nothing left to detach.
			}
			unlink(pin.c_str());
			continue;
		}
		UniqueFd link(open_pinned_object(pin));
		if (link)
			bpf_link_detach(link.get());
		unlink(pin.c_str());
	}
	remove_leftovers();
}

void Instance::remove_leftovers()
{
	refuse_read_only(dir_);
	// Map pins with no program pin are a killed load's: nothing holds them.
	remove_pins(dir_);
	// Nothing is left to lock: the pin directory and the lock directory go
	// too (rmdir: only if empty). A command waiting on either locks the one
	// made after, or finds nothing loaded (see Instance::lock).
	rmdir(dir_.c_str());
	rmdir(lock_dir_for(dir_).c_str());
}

Status Instance::attachments() const
{
	Status s;
	s.loaded = loaded();
	if (!s.loaded)
		return s;
	UniqueFd prog(open_pinned_object(prog_pin()));
	struct bpf_prog_info pinfo = {};
	__u32 plen = sizeof(pinfo);
	if (prog && bpf_obj_get_info_by_fd(prog.get(), &pinfo, &plen) == 0)
		s.prog_id = pinfo.id;

	uint64_t here = current_netns();
	UniqueFd then(open_pinned_object(dir_ + "/" SLUICE_STR(SLUICE_MAP_THEN)));
	for (const auto &name : link_pins()) {
		if (ArraySlot a; parse_array_pin_name(name, a.map_id, a.index)) {
			a.pin = name;
			if (UniqueFd array(open_pinned_object(links_dir() + "/" + name)); array) {
				a.map_name = map_info(array.get()).name;
				a.prog_id = prog_array_entry(array.get(), a.index);
			}
			s.arrays.push_back(a);
			continue;
		}
		AttachedLink l;
		l.pin = name;
		uint32_t pinned_ifindex = 0;
		l.dispatcher = name.rfind(DISPATCHED_PREFIX, 0) == 0;
		if (!parse_link_pin_name(l.dispatcher ? name.substr(strlen(DISPATCHED_PREFIX)) : name, l.netns,
					 pinned_ifindex, l.mode))
			continue;
		if (l.dispatcher) {
			// A program in libxdp's dispatcher, not a link of its own.
			l.ifindex = pinned_ifindex;
			l.this_netns = l.netns == here;
			char buf[IF_NAMESIZE] = {};
			if (l.this_netns && if_indextoname(l.ifindex, buf))
				l.ifname = buf;
			else
				l.ifindex = 0;
			UniqueFd p(open_pinned_object(links_dir() + "/" + name));
			l.prog_id = p ? object_id(p.get()) : 0;
			s.links.push_back(l);
			continue;
		}
		UniqueFd fd(open_pinned_object(links_dir() + "/" + name));
		struct bpf_link_info info = {};
		__u32 len = sizeof(info);
		if (fd && bpf_obj_get_info_by_fd(fd.get(), &info, &len) == 0) {
			l.link_id = info.id;
			l.prog_id = info.prog_id;
			l.ifindex = info.xdp.ifindex; // 0 once the interface is gone
		}
		l.this_netns = l.netns == here;
		if (then && pinned_ifindex < SLUICE_MAX_THEN_IFINDEX)
			l.then_prog_id = prog_array_entry(then.get(), pinned_ifindex);
		char buf[IF_NAMESIZE] = {};
		if (l.ifindex && l.this_netns && if_indextoname(l.ifindex, buf)) {
			l.ifname = buf;
			LIBBPF_OPTS(bpf_xdp_query_opts, q);
			if (bpf_xdp_query(static_cast<int>(l.ifindex), 0, &q) == 0)
				l.mode = q.attach_mode == XDP_ATTACHED_SKB ? XdpMode::generic : XdpMode::native;
		}
		s.links.push_back(l);
	}
	return s;
}

Status Instance::status() const
{
	Status s = attachments();
	if (!s.loaded)
		return s;
	MapSet m = MapSet::open_pinned(dir_);
	s.max_sources = m.max_sources();
	s.max_log_sources = m.max_log_sources();
	s.max_rules = m.max_rules();
	s.max_bans = m.max_bans();
	s.max_v6_prefixes = m.max_v6_prefixes();
	m.for_each([&s](const char *, int fd) { s.map_memory_bytes += fd_memlock(fd); });
	uint32_t zero = 0;
	struct sluice_meta meta = {};
	if (bpf_map_lookup_elem(m.meta.get(), &zero, &meta) == 0) {
		s.loaded_ns = meta.loaded_ns;
		s.abi_version = meta.abi_version;
		s.layout_hash = meta.layout_hash;
	}
	return s;
}

void set_libbpf_verbose(bool verbose)
{
	libbpf_set_print(verbose ? libbpf_all : libbpf_quiet);
	set_libxdp_verbose(verbose);
}

} // namespace sluice
