// SPDX-License-Identifier: GPL-2.0-only
// Typed access to the data plane's maps, whether pinned or freshly loaded.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "error.h"
#include "fd.h"
#include "sluice_abi.h"

namespace sluice {

/// What one rule set can hold: rule slots (each with two IPv4 table blocks
/// and a match list) and IPv6 prefixes. The maps hold two sets of each.
struct RuleRoom {
	uint32_t rules = SLUICE_DEFAULT_MAX_RULES;
	uint32_t v6_prefixes = SLUICE_DEFAULT_MAX_RULES;

	bool operator==(const RuleRoom &) const = default;
};

/// Descriptors of every map the program uses, in one place.
struct MapSet {
	UniqueFd active, rules, rule_info, rule_counters, dir4_top, dir4_blocks, lists, match6, src4, src6,
		logs4, logs6, counters, meta, config, pending, frags, iface_mtu, events, throttled, then, owed, grants, bans,
		strikes;

	/// Opens the maps pinned under dir (by their ABI names). Refuses, with
	/// one line, state whose layout record (foreign_layout) or maps differ
	/// from this binary's (`sluice upgrade` reads the previous release's:
	/// upgrade.h).
	static MapSet open_pinned(const std::string &dir);
	/// Duplicates the descriptors of a loaded object's maps.
	static MapSet from_object(struct bpf_object *obj);

	/// Calls f(name, fd) for every map, in a fixed order.
	void for_each(const std::function<void(const char *, int)> &f) const;

	uint32_t max_rules() const;       ///< rules of one set (each map holds two)
	uint32_t max_sources() const;     ///< per family, as configured, rounded up to whole sets
	uint32_t max_log_sources() const; ///< per family, rounded up to whole sets
	uint32_t max_bans() const;        ///< the ban table's size
	uint32_t max_v6_prefixes() const; ///< IPv6 prefixes of one set (the trie holds two)
	RuleRoom rule_room() const { return {max_rules(), max_v6_prefixes()}; }
};

/// A map's layout as struct sluice_meta's layout_hash covers it.
struct MapLayout {
	const char *name;
	uint32_t type, key_size, value_size, flags;
};

/// The layout hash of `maps`, in their order (FNV-1a over each one's name,
/// type, key and value size and flags).
uint64_t layout_hash(std::span<const MapLayout> maps);

/// The layout hash of every map as this binary expects them: recorded in
/// struct sluice_meta when the program loads.
uint64_t layout_hash();

/// "0x" and 16 hex digits.
std::string hex64(uint64_t v);

/// An array map (BPF_F_MMAPABLE) mapped into this process: entry i at
/// i * stride bytes (the kernel rounds values up to 8 bytes). Reads and
/// writes go straight to the map's memory, as the program's do.
class MappedArray {
public:
	/// Maps entries [begin, end) (all by default), whole pages of them:
	/// mapping costs a page-table entry per page, so a user of few entries
	/// maps few. Indices stay the map's own; use only those mapped.
	explicit MappedArray(int fd, uint32_t begin = 0, uint32_t end = UINT32_MAX);
	~MappedArray();
	MappedArray(const MappedArray &) = delete;
	MappedArray &operator=(const MappedArray &) = delete;

	template <class V> V *at(uint32_t i) const
	{
		return reinterpret_cast<V *>(base_ + (size_t(i) * stride_ - offset_));
	}
	uint32_t size() const { return entries_; }
	/// Throws unless the entries may be written through at() (a mapping,
	/// not a read-only copy).
	void check_writable() const
	{
		if (!length_)
			refuse_write();
	}
	/// Writes `value` at i unless it is there already; true if it wrote.
	template <class V> bool put(uint32_t i, const V &value) const
	{
		if (!length_)
			refuse_write();
		V *p = at<V>(i);
		if (std::memcmp(p, &value, sizeof(V)) == 0)
			return false;
		std::memcpy(p, &value, sizeof(V));
		return true;
	}

private:
	[[noreturn]] void refuse_write() const;

	uint8_t *base_ = nullptr;
	size_t length_ = 0, stride_ = 0; ///< length_ 0: a read-only copy in copy_
	size_t offset_ = 0; ///< the byte in the map that base_ points at
	uint32_t entries_ = 0;
	std::vector<uint8_t> copy_;
};

/// Number of possible CPUs, as per-CPU maps count them.
int possible_cpus();

uint32_t map_max_entries(int fd);

/// The kernel's description of a map (type, sizes, flags, entries).
struct bpf_map_info map_info(int fd);

/// Opens a pinned object; on a read-only bpffs, read-only (so that reading
/// commands still work there, and writes fail clearly). -1 and errno on failure.
int open_pinned_object(const std::string &path);

/// Why the layout record pinned in `dir` is not this binary's, as one line
/// that says what reads it or removes it; nothing if it is this binary's.
std::optional<std::string> foreign_layout(const std::string &dir);

void map_update(int fd, const void *key, const void *value, const char *what);

/// Updates `count` entries with one BPF_MAP_UPDATE_BATCH call.
void map_update_batch(int fd, const void *keys, const void *values, size_t count, const char *what);

/// Reads one per-CPU slot and returns the per-CPU values.
template <class V> std::vector<V> lookup_percpu(int fd, uint32_t key)
{
	std::vector<V> values(possible_cpus());
	int err = bpf_map_lookup_elem(fd, &key, values.data());
	if (err)
		throw_errno("cannot read per-CPU map entry " + std::to_string(key), errno);
	return values;
}

/// Every CPU's pending-drops slots (SLUICE_MAP_PENDING) that hold drops:
/// what readers add to the buckets the slots name.
std::vector<struct sluice_pending_drops> read_pending(int fd);

/// Every CPU's owed slots (SLUICE_MAP_OWED) that hold passes: what readers
/// add to the buckets the slots name.
std::vector<struct sluice_owed> read_owed(int fd);

/// Calls f(key, value) for every entry of a hash map, reading it in batches.
template <class K, class V>
void for_each_entry(int fd, const std::function<void(const K &, const V &)> &f)
{
	constexpr uint32_t BATCH = 8192;
	std::vector<K> keys(BATCH);
	std::vector<V> values(BATCH);
	uint64_t cursor = 0;
	bool first = true;
	for (;;) {
		uint32_t count = BATCH;
		LIBBPF_OPTS(bpf_map_batch_opts, opts);
		int err = bpf_map_lookup_batch(fd, first ? nullptr : &cursor, &cursor, keys.data(),
					       values.data(), &count, &opts);
		int saved = errno;
		first = false;
		for (uint32_t i = 0; i < count; i++)
			f(keys[i], values[i]);
		if (err) {
			if (saved == ENOENT)
				return;
			throw_errno("cannot read map", saved);
		}
	}
}

} // namespace sluice
