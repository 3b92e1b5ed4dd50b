// SPDX-License-Identifier: GPL-2.0-only
// The IPv6 trie's writer and its record: see trie6.h.
#include "trie6.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <optional>
#include <type_traits>
#include <unordered_map>

#include "error.h"
#include "fd.h"
#include "maps.h"
#include "state_dirs.h"

namespace sluice {

namespace {

static_assert(sizeof(Trie6Set::Entry) == 28 && std::is_trivially_copyable_v<Trie6Set::Entry>,
	      "a set file holds the entries as they lie in memory");

constexpr char INDEX_MAGIC[8] = {'S', 'L', 'C', '6', 'I', 'D', 'X', '1'};
constexpr char SET_MAGIC[8] = {'S', 'L', 'C', '6', 'S', 'E', 'T', '1'};

/// ipv6-trie.index: what the set files describe, and when that held.
struct Index {
	char magic[8];
	uint32_t map_id;   ///< the trie's
	uint32_t word;     ///< the live-set word after the switch that wrote it
	uint64_t memlock;  ///< the trie's memlock then: its entries times their size
	uint64_t size[2];  ///< each set file's size
	uint32_t crc[2];   ///< each set file's CRC-32
	uint32_t self_crc; ///< of the bytes above
	uint32_t pad;
};
static_assert(sizeof(Index) == 56);

/// A set file's head; then its values, then its entries.
struct SetHead {
	char magic[8];
	uint32_t set;
	uint32_t values;
	uint64_t entries;
};
static_assert(sizeof(SetHead) == 24);

Trie6WriteReport last_report;

/// The order of a set's keys: by address, then prefix length (as the
/// compiled lists hold their prefixes, so a set comes sorted), then the rest
/// of the key's bytes, so that keys are equal only when all their bytes are.
bool key_less(const struct sluice_lpm_v6 &a, const struct sluice_lpm_v6 &b)
{
	if (int c = std::memcmp(a.addr, b.addr, sizeof(a.addr)))
		return c < 0;
	if (a.prefixlen != b.prefixlen)
		return a.prefixlen < b.prefixlen;
	if (a.set != b.set)
		return a.set < b.set;
	return std::memcmp(a.pad, b.pad, sizeof(a.pad)) < 0;
}

bool entry_less(const Trie6Set::Entry &a, const Trie6Set::Entry &b) { return key_less(a.key, b.key); }

bool same_list(const struct sluice_match_list &a, const struct sluice_match_list &b)
{
	return std::memcmp(&a, &b, sizeof(a)) == 0;
}

uint32_t crc_of(const void *data, size_t n)
{
	return static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), static_cast<const Bytef *>(data), n));
}

/// A match list's bytes hashed, for sharing equal values.
struct ListHash {
	size_t operator()(const struct sluice_match_list &l) const
	{
		uint64_t w[sizeof(l) / 8];
		std::memcpy(w, &l, sizeof(l));
		uint64_t h = 0x9e3779b97f4a7c15ULL;
		for (uint64_t x : w)
			h = (h ^ x) * 0x100000001b3ULL;
		return static_cast<size_t>(h ^ (h >> 29));
	}
};
struct ListEqual {
	bool operator()(const struct sluice_match_list &a, const struct sluice_match_list &b) const
	{
		return same_list(a, b);
	}
};

/// The trie's memlock as the kernel reports it (/proc/self/fdinfo): for an
/// LPM trie, its entries times an entry's size, so it moves with any insert
/// or delete of an entry.
std::optional<uint64_t> memlock_of(int fd)
{
	std::string path = "/proc/self/fdinfo/" + std::to_string(fd);
	FILE *f = fopen(path.c_str(), "re");
	if (!f)
		return std::nullopt;
	char line[256];
	std::optional<uint64_t> out;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;
		if (sscanf(line, "memlock: %llu", &v) == 1) {
			out = v;
			break;
		}
	}
	fclose(f);
	return out;
}

std::optional<std::vector<uint8_t>> read_bytes(const std::string &path, size_t max)
{
	UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
	struct stat st;
	if (!fd || fstat(fd.get(), &st) || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > max)
		return std::nullopt;
	std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
	if (read_exact(fd.get(), bytes.data(), bytes.size()))
		return std::nullopt;
	return bytes;
}

/// Writes `path` whole: aside, then renamed over it.
void write_bytes(const std::string &path, const void *data, size_t n)
{
	std::string tmp = path + ".tmp";
	UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
	if (!fd)
		throw_errno("cannot write " + tmp, errno);
	const auto *p = static_cast<const uint8_t *>(data);
	while (n) {
		ssize_t w = ::write(fd.get(), p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int err = w < 0 ? errno : EIO;
			unlink(tmp.c_str());
			throw_errno("cannot write " + tmp, err);
		}
		p += w;
		n -= static_cast<size_t>(w);
	}
	fd.reset();
	if (rename(tmp.c_str(), path.c_str())) {
		int err = errno;
		unlink(tmp.c_str());
		throw_errno("cannot replace " + path, err);
	}
}

std::vector<uint8_t> encode(const Trie6Set &s, uint32_t set)
{
	SetHead h = {};
	std::memcpy(h.magic, SET_MAGIC, sizeof(h.magic));
	h.set = set;
	h.values = static_cast<uint32_t>(s.values.size());
	h.entries = s.entries.size();
	size_t vbytes = s.values.size() * sizeof(struct sluice_match_list);
	size_t ebytes = s.entries.size() * sizeof(Trie6Set::Entry);
	std::vector<uint8_t> out(sizeof(h) + vbytes + ebytes);
	std::memcpy(out.data(), &h, sizeof(h));
	if (vbytes)
		std::memcpy(out.data() + sizeof(h), s.values.data(), vbytes);
	if (ebytes)
		std::memcpy(out.data() + sizeof(h) + vbytes, s.entries.data(), ebytes);
	return out;
}

/// A set file's entries, if it is one of set `set` whole: keys of that set,
/// sorted and unique, each with a value it holds.
std::optional<Trie6Set> decode(const std::vector<uint8_t> &bytes, uint32_t set)
{
	SetHead h;
	if (bytes.size() < sizeof(h))
		return std::nullopt;
	std::memcpy(&h, bytes.data(), sizeof(h));
	const uint64_t rest = bytes.size() - sizeof(h);
	if (std::memcmp(h.magic, SET_MAGIC, sizeof(h.magic)) || h.set != set ||
	    uint64_t(h.values) * sizeof(struct sluice_match_list) > rest ||
	    (rest - uint64_t(h.values) * sizeof(struct sluice_match_list)) != h.entries * sizeof(Trie6Set::Entry) ||
	    h.entries > rest)
		return std::nullopt;
	Trie6Set s;
	s.values.resize(h.values);
	s.entries.resize(h.entries);
	size_t vbytes = s.values.size() * sizeof(struct sluice_match_list);
	if (vbytes)
		std::memcpy(s.values.data(), bytes.data() + sizeof(h), vbytes);
	if (!s.entries.empty())
		std::memcpy(s.entries.data(), bytes.data() + sizeof(h) + vbytes,
			    s.entries.size() * sizeof(Trie6Set::Entry));
	for (size_t i = 0; i < s.entries.size(); i++) {
		const auto &e = s.entries[i];
		if (e.key.set != set || e.key.prefixlen < SLUICE_LPM_SET_BITS || e.key.prefixlen > SLUICE_LPM_SET_BITS + 128 ||
		    e.value >= h.values || (i && !key_less(s.entries[i - 1].key, e.key)))
			return std::nullopt;
	}
	return s;
}

std::optional<Index> read_index(const std::string &dir)
{
	auto bytes = read_bytes(trie6_index_path(dir), sizeof(Index));
	Index idx;
	if (!bytes || bytes->size() != sizeof(idx))
		return std::nullopt;
	std::memcpy(&idx, bytes->data(), sizeof(idx));
	if (std::memcmp(idx.magic, INDEX_MAGIC, sizeof(idx.magic)) ||
	    idx.self_crc != crc_of(&idx, offsetof(Index, self_crc)))
		return std::nullopt;
	return idx;
}

void write_index(const std::string &dir, Index idx)
{
	std::memcpy(idx.magic, INDEX_MAGIC, sizeof(idx.magic));
	idx.pad = 0;
	idx.self_crc = crc_of(&idx, offsetof(Index, self_crc));
	write_bytes(trie6_index_path(dir), &idx, sizeof(idx));
}

/// The index, if it describes this trie as it stands with live word `word`.
std::optional<Index> current_index(int fd, const std::string &dir, uint32_t word)
{
	if (dir.empty())
		return std::nullopt;
	auto idx = read_index(dir);
	if (!idx || idx->word != word)
		return std::nullopt;
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	auto memlock = memlock_of(fd);
	if (bpf_obj_get_info_by_fd(fd, &info, &len) || info.id != idx->map_id || !memlock || *memlock != idx->memlock)
		return std::nullopt;
	return idx;
}

template <class Key> Key lpm_key(const Cidr &c, uint32_t set)
{
	Key k = {};
	k.prefixlen = SLUICE_LPM_SET_BITS + static_cast<__u32>(c.prefix_len);
	k.set = static_cast<__u8>(set);
	std::memcpy(k.addr, c.addr.data(), sizeof(k.addr));
	return k;
}

/// What set `set` is to hold: each IPv6 prefix with its first list. Sorted
/// by key (the lists' prefixes come in that order), which the trie's inserts
/// are quicker in than another (a hash table's order cost a million inserts
/// 0.4 s more).
Trie6Set wanted_set(uint32_t set, const MatchLists &lists)
{
	Trie6Set w;
	std::unordered_map<uint32_t, uint32_t> value_of; // a list's index -> its value's
	for (const auto &[prefix, first] : lists.first) {
		if (prefix.family != 6)
			continue;
		auto [it, added] = value_of.emplace(first, static_cast<uint32_t>(w.values.size()));
		if (added)
			w.values.push_back(lists.at(first));
		w.entries.push_back({lpm_key<struct sluice_lpm_v6>(prefix, set), it->second});
	}
	if (!std::is_sorted(w.entries.begin(), w.entries.end(), entry_less))
		std::sort(w.entries.begin(), w.entries.end(), entry_less);
	return w;
}

/// Both sets' entries, read from the trie: in batches of a syscall each
/// where the kernel reads a trie in batches, else a key at a time. Keys of
/// no set (a number above 1) are left out.
std::array<Trie6Set, 2> read_trie(int fd)
{
	std::array<Trie6Set, 2> sets;
	std::array<std::unordered_map<struct sluice_match_list, uint32_t, ListHash, ListEqual>, 2> value_of;
	auto take = [&](const struct sluice_lpm_v6 &k, const struct sluice_match_list &v) {
		if (k.set > 1)
			return;
		Trie6Set &s = sets[k.set];
		auto [it, added] = value_of[k.set].emplace(v, static_cast<uint32_t>(s.values.size()));
		if (added)
			s.values.push_back(v);
		s.entries.push_back({k, it->second});
	};
	constexpr uint32_t BATCH = 4096;
	std::vector<struct sluice_lpm_v6> keys(BATCH);
	std::vector<struct sluice_match_list> values(BATCH);
	struct sluice_lpm_v6 cursor = {};
	bool batched = true;
	for (bool first = true;; first = false) {
		uint32_t count = BATCH;
		LIBBPF_OPTS(bpf_map_batch_opts, opts);
		int err = bpf_map_lookup_batch(fd, first ? nullptr : &cursor, &cursor, keys.data(), values.data(), &count,
					       &opts);
		int saved = errno;
		if (err && saved != ENOENT && first) {
			batched = false;
			break;
		}
		for (uint32_t i = 0; i < count; i++)
			take(keys[i], values[i]);
		if (err) {
			if (saved != ENOENT)
				throw_errno("cannot read the IPv6 match lists", saved);
			break;
		}
	}
	// A key's own value: a lookup of a key stops at prefixes no longer than
	// the key's, so it finds the key's entry, not a longer one under it.
	struct sluice_lpm_v6 cur, next;
	for (int err = batched ? -1 : bpf_map_get_next_key(fd, nullptr, &next); !err;
	     err = bpf_map_get_next_key(fd, &cur, &next)) {
		cur = next;
		struct sluice_match_list v;
		if (bpf_map_lookup_elem(fd, &cur, &v) == 0)
			take(cur, v);
		else if (errno != ENOENT)
			throw_errno("cannot read the IPv6 match lists", errno);
	}
	for (auto &s : sets)
		std::sort(s.entries.begin(), s.entries.end(), entry_less);
	return sets;
}

/// `dir` if the record may be kept there, else "": only the instance's own
/// run directory, where it is one, so that the record is never where another
/// user could have written it; a commit does not make the directory for it.
std::string record_place(std::string dir)
{
	if (dir.empty())
		return "";
	try {
		// Made if missing: the first load of a boot, or the first after
		// `detach --all` removed it, keeps its record too.
		make_private_dir(dir, "run directory");
	} catch (const Error &) {
		return "";
	}
	struct stat st;
	if (lstat(dir.c_str(), &st) || !S_ISDIR(st.st_mode))
		return "";
	return dir;
}

} // namespace

std::string trie6_index_path(const std::string &run_dir) { return run_dir + "/ipv6-trie.index"; }

std::string trie6_set_path(const std::string &run_dir, uint32_t set)
{
	return run_dir + "/ipv6-trie." + std::to_string(set & 1);
}

Trie6WriteReport last_trie6_write() { return last_report; }

Trie6Writer::Trie6Writer(int fd, std::string record_dir, uint32_t word)
	: fd_(fd), dir_(record_place(std::move(record_dir))), word_(word)
{
}

void Trie6Writer::write(uint32_t set, const MatchLists &lists)
{
	set_ = set & 1;
	const uint32_t live = set_ ^ 1;
	report_ = {};
	Trie6Set want = wanted_set(set_, lists);

	// What the idle set holds: the record's, where it checks out; else read.
	std::optional<Trie6Set> idle;
	if (auto idx = current_index(fd_, dir_, word_)) {
		auto bytes = read_bytes(trie6_set_path(dir_, set_), idx->size[set_]);
		if (bytes && bytes->size() == idx->size[set_] && crc_of(bytes->data(), bytes->size()) == idx->crc[set_])
			idle = decode(*bytes, set_);
		if (idle) {
			live_file_kept_ = live_known_ = true;
			live_size_ = idx->size[live];
			live_crc_ = idx->crc[live];
		}
	}
	// From here the trie's set differs from any record: none is left to a
	// commit killed before its switch.
	if (!dir_.empty() && unlink(trie6_index_path(dir_).c_str()) && errno != ENOENT)
		throw_errno("cannot remove " + trie6_index_path(dir_), errno);
	report_.from_record = idle.has_value();
	if (!idle) {
		auto both = read_trie(fd_);
		idle = std::move(both[set_]);
		live_ = std::move(both[live]);
		live_known_ = true;
	}

	// What is not wanted goes; what the set holds as wanted stays.
	std::vector<struct sluice_lpm_v6> stale, keys;
	std::vector<struct sluice_match_list> values;
	auto put = [&](const Trie6Set::Entry &e) {
		keys.push_back(e.key);
		values.push_back(want.values[e.value]);
	};
	size_t i = 0, j = 0;
	const auto &held = idle->entries;
	while (i < held.size() || j < want.entries.size()) {
		if (j == want.entries.size() || (i < held.size() && key_less(held[i].key, want.entries[j].key))) {
			stale.push_back(held[i++].key);
		} else if (i == held.size() || key_less(want.entries[j].key, held[i].key)) {
			put(want.entries[j++]);
		} else {
			if (!same_list(idle->values[held[i].value], want.values[want.entries[j].value]))
				put(want.entries[j]);
			i++;
			j++;
		}
	}
	report_.removed = stale.size();
	report_.written = keys.size();
	last_report = report_;

	// The stale keys in one syscall where the kernel deletes from a trie in
	// batches; from the first it did not delete, one syscall a key.
	__u32 deleted = static_cast<__u32>(stale.size());
	LIBBPF_OPTS(bpf_map_batch_opts, delete_opts);
	if (deleted && bpf_map_delete_batch(fd_, stale.data(), &deleted, &delete_opts) && deleted >= stale.size())
		deleted = 0; // not supported: the count is not written
	for (size_t k = deleted; k < stale.size(); k++)
		if (bpf_map_delete_elem(fd_, &stale[k]) && errno != ENOENT)
			throw_errno("cannot remove an IPv6 match list", errno);
	__u32 n = static_cast<__u32>(keys.size());
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	if (n && bpf_map_update_batch(fd_, keys.data(), values.data(), &n, &opts))
		for (size_t k = 0; k < keys.size(); k++) // kernels without batch updates on LPM tries
			map_update(fd_, &keys[k], &values[k], "IPv6 match list");
	written_ = std::move(want);
	wrote_ = true;
}

void Trie6Writer::switched(uint32_t word) noexcept
{
	if (!wrote_ || dir_.empty() || !live_known_)
		return;
	try {
		Index idx = {};
		struct bpf_map_info info = {};
		__u32 len = sizeof(info);
		auto memlock = memlock_of(fd_);
		if (bpf_obj_get_info_by_fd(fd_, &info, &len) || !memlock)
			return;
		idx.map_id = info.id;
		idx.word = word;
		idx.memlock = *memlock;
		const uint32_t live = set_ ^ 1;
		auto put = [&](uint32_t set, const Trie6Set &s) {
			std::vector<uint8_t> bytes = encode(s, set);
			write_bytes(trie6_set_path(dir_, set), bytes.data(), bytes.size());
			idx.size[set] = bytes.size();
			idx.crc[set] = crc_of(bytes.data(), bytes.size());
		};
		put(set_, written_);
		if (live_file_kept_) {
			idx.size[live] = live_size_;
			idx.crc[live] = live_crc_;
		} else {
			put(live, live_);
		}
		write_index(dir_, idx);
	} catch (const std::exception &) {
		unlink(trie6_index_path(dir_).c_str());
	}
}

void trie6_rules_switched(int fd, const std::string &record_dir, uint32_t before, uint32_t after) noexcept
{
	std::string dir = record_place(record_dir);
	try {
		if (auto idx = current_index(fd, dir, before)) {
			idx->word = after;
			write_index(dir, *idx);
		}
	} catch (const std::exception &) {
		if (!dir.empty())
			unlink(trie6_index_path(dir).c_str());
	}
}

void remove_trie6_record(const std::string &run_dir)
{
	for (const std::string &p : {trie6_index_path(run_dir), trie6_set_path(run_dir, 0), trie6_set_path(run_dir, 1)})
		for (const std::string &f : {p, p + ".tmp"}) // and what a killed command left aside
			if (unlink(f.c_str()) && errno != ENOENT)
				throw_errno("cannot remove " + f, errno);
}

} // namespace sluice
