// SPDX-License-Identifier: GPL-2.0-only
// The controller's side of the source tables (sluice_abi.h): each an array of
// sets mapped into this process, read for statistics and edited with the same
// compare-and-swap protocol the XDP program uses (sluice_settable.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice_abi.h"

namespace sluice {

/// What distinguishes the four tables: the bucket a way holds, the address
/// family, and where a bucket's address is kept.
template <class Set> struct SetTraits;
template <> struct SetTraits<struct sluice_set_v4> {
	using Bucket = struct sluice_source_state;
	static constexpr int family = 4;
	static constexpr int table = SLUICE_TABLE_V4; ///< as pending-drops slots name it
};
template <> struct SetTraits<struct sluice_set_v6> {
	using Bucket = struct sluice_source_state;
	static constexpr int family = 6;
	static constexpr int table = SLUICE_TABLE_V6;
};
template <> struct SetTraits<struct sluice_log_set_v4> {
	using Bucket = struct sluice_log_state;
	static constexpr int family = 4;
	static constexpr int table = -1; ///< no pending drops: logs count their own
};
template <> struct SetTraits<struct sluice_log_set_v6> {
	using Bucket = struct sluice_log_state;
	static constexpr int family = 6;
	static constexpr int table = -1;
};

/// Every CPU's pending-drops slots that hold drops (read_pending) and owed
/// slots that hold passes (read_owed), indexed once by the way each names, so
/// that a bucket's are found without a scan.
class PendingDrops {
public:
	PendingDrops() = default;
	explicit PendingDrops(std::vector<struct sluice_pending_drops> slots, std::vector<struct sluice_owed> owed = {});

	/// Adds to `cnt` the drops pending and the passes owed for the bucket of
	/// generation `gen` in way `way` of set `set` of table `table` (enum
	/// sluice_table; -1, a table without either, adds nothing).
	void add_to(struct sluice_source_counters &cnt, int table, uint32_t set, int way, uint16_t gen) const;

	/// As add_to, for the bucket whose key is `key`, then takes away what a
	/// counters reset left on account for it (subtract): the counts read
	/// stay those since the reset. Never below zero.
	void add_to(struct sluice_source_counters &cnt, int table, uint32_t set, int way, uint16_t gen,
		    uint64_t key) const;

	/// A bucket's counts that a reset zeroed while they were still on CPUs'
	/// accounts (pending drops, owed passes): the program adds them to the
	/// bucket's counters later, so readers take them away again. Named as
	/// add_to names a bucket, and by its key.
	struct Debit {
		int table = 0;
		uint32_t set = 0;
		int way = 0;
		uint16_t gen = 0;
		uint64_t key = 0;
		struct sluice_source_counters cnt = {};
	};
	/// Readers take these away from the buckets they name (replacing any earlier ones).
	void subtract(const std::vector<Debit> &debits);

private:

	static uint64_t way_key(int table, uint32_t set, int way)
	{
		return (uint64_t(set) * SLUICE_SET_WAYS + uint64_t(way & (SLUICE_SET_WAYS - 1))) * 2 + uint64_t(table & 1);
	}

	std::vector<struct sluice_pending_drops> slots_;
	std::vector<struct sluice_owed> owed_;
	std::unordered_multimap<uint64_t, size_t> by_way_, owed_by_way_;
	std::vector<Debit> debits_;
	std::unordered_multimap<uint64_t, size_t> debit_by_way_;
};

/// Where a bucket takes the cluster sync's grants (SetTable::grant_place):
/// the grants map's key, its way's name (sluice_way_name) and the seq of the
/// last grant it took.
struct GrantPlace {
	struct sluice_grant_key key = {};
	uint64_t name = 0, taken = 0;
};

/// One source table, mapped: `Set` is one of the four set types of sluice_abi.h.
template <class Set> class SetTable {
public:
	using Bucket = typename SetTraits<Set>::Bucket;
	static constexpr int family = SetTraits<Set>::family;

	/// Maps the table behind `fd` (SLUICE_MAP_SOURCES_V4 and so on).
	explicit SetTable(int fd);
	/// Works on `count` sets at `sets`, memory the caller owns and keeps
	/// (the protocol's stress test runs it on an array in this process).
	SetTable(Set *sets, uint32_t count);
	~SetTable();
	SetTable(const SetTable &) = delete;
	SetTable &operator=(const SetTable &) = delete;

	/// Calls f(rule id, address bytes (4 or 16, network order), bucket) for
	/// every published bucket: a copy, taken while the way held that key (the
	/// data plane reuses ways), with the drops pending in `pending` (every
	/// CPU's slot) added.
	void for_each(const std::function<void(uint32_t, const uint8_t *, const Bucket &)> &f,
		      const PendingDrops &pending = {}) const;

	/// The bucket of `rule_id` for `addr` (4 or 16 bytes, network order,
	/// masked to the rule's prefix), looked up as the program looks it up:
	/// in the key's two sets, an IPv6 way only if its address line holds
	/// `addr`. A copy taken while the way held that key (for a locked
	/// algorithm, between two equal even values of its sequence lock), with
	/// the drops pending in `pending` added; none if the table holds no
	/// such bucket (its source has sent nothing since the rule began, or
	/// its bucket was evicted).
	std::optional<Bucket> find(uint32_t rule_id, const uint8_t *addr, uint64_t seed,
				   const PendingDrops &pending = {}) const;

	/// Where a GCRA-form bucket takes the cluster sync's grants from (struct
	/// sluice_grant): the grant map's key of `rule_id`'s bucket for `addr`,
	/// its way's name (sluice_way_name) and the seq of the last grant it took
	/// (its record, which the program alone writes); none if the table holds
	/// no such bucket, or a locked algorithm's. Read only: the bucket's words
	/// have one writer, the program, which applies the grants itself.
	std::optional<GrantPlace> grant_place(uint32_t rule_id, const uint8_t *addr, uint64_t seed) const
		requires std::is_same_v<typename SetTraits<Set>::Bucket, struct sluice_source_state>;

	/// Empties every way holding a bucket of `rule_id`; returns how many.
	uint64_t purge(uint32_t rule_id);
	/// Empties every way holding a bucket of a rule id for which doomed(id) holds.
	uint64_t purge_if(const std::function<bool(uint32_t)> &doomed);

	/// Zeroes the counters of every bucket for which pick(bucket id,
	/// address bytes) holds, and keeps the buckets: each counter word is
	/// set to its generation tag alone by compare-and-swap, so a count the
	/// program adds at the same moment lands before (and is zeroed) or after.
	/// Calls zeroed(set, way, generation, key) for each; returns how many.
	uint64_t zero_counters(const std::function<bool(uint32_t, const uint8_t *)> &pick,
			       const std::function<void(uint32_t, int, uint16_t, uint64_t)> &zeroed);

	/// Refills the bucket of `rule_id` (a rule's bucket id) for `addr`, as
	/// find looks it up, so that its source passes its burst again: a
	/// GCRA-form bucket is made again in its way, full (its arrival time
	/// now_ticks), with its counters (and the drops pending for it in
	/// `pending`), by the protocol's claim, freeze and publish, the
	/// controller writing it as the claimer; a token bucket with warm-up gets its capacity of
	/// tokens and full coldness (as a new bucket), a window forgets its
	/// counts, a sliding log its passes: the source passes as a new one would. The
	/// locked algorithms are written under their sequence lock, as the
	/// program writes them. `rule` is the rule's data-plane entry. False if
	/// the table holds no such bucket (a source with none passes already).
	bool refill(uint32_t rule_id, const uint8_t *addr, uint64_t seed, const struct sluice_rule &rule,
		    uint64_t now_ticks, const PendingDrops &pending = {});

	/// Buckets the table has room for: its sets times their ways.
	uint64_t capacity() const { return uint64_t(sets_) * SLUICE_SET_WAYS; }

	/// IPv4 source table only: places a bucket of a GCRA-form rule in an
	/// empty way of its two sets, as the program would (for tools that fill
	/// the table): its counters as given, its bucket full. False if both sets
	/// are full.
	bool insert(uint32_t rule_id, const uint8_t addr[4], const struct sluice_source_state &state, uint64_t seed)
		requires std::is_same_v<Set, struct sluice_set_v4>;

	/// Places a bucket carried from another table (an upgrade, or a resize)
	/// in an empty way of its two sets, its state as it was: a GCRA-form
	/// bucket (`gcra`) keeps its arrival time, a locked one its algorithm
	/// state; the counters keep their counts. It is placed settled (off
	/// probation) and seen at `now_ns`. False if both sets are full.
	bool place(uint32_t rule_id, const uint8_t *addr, const Bucket &bucket, bool gcra, uint64_t seed,
		   uint64_t now_ns);

private:
	/// A bucket's key and its two candidate sets, as the program computes them.
	/// Claims and freezes an empty way of sets `first` or `second` and calls
	/// install(set, way, frozen word) to fill and publish it; false if both are full.
	template <class Install> bool claim_empty_way(uint32_t first, uint32_t second, Install install);
	uint64_t place_of(uint32_t rule_id, const uint8_t *addr, uint64_t seed, uint32_t &first,
			  uint32_t &second) const;
	/// Whether way w of `set` holds `key` (and, IPv6, `addr` in its address line).
	bool holds(const Set &set, int w, uint64_t key, const uint8_t *addr) const;
	/// IPv6: whether way w's address line holds `addr`; IPv4: true.
	bool holds_address(const Set &set, int w, const uint8_t *addr) const;
	/// refill of a GCRA-form bucket (its key `key`, way w of set idx): made
	/// again in its way, full, its counters carried; false if it could not
	/// be claimed, or its old charger's lock stayed held.
	bool remake_full(uint32_t idx, int w, uint64_t key, const uint8_t *addr, uint64_t now_ticks,
			 const PendingDrops &pending)
		requires std::is_same_v<typename SetTraits<Set>::Bucket, struct sluice_source_state>;
	/// The set and way holding the bucket of `rule_id` for `addr`, if any,
	/// and its key in `key`: what the way is checked to still hold (a way
	/// may hold another source's bucket a moment after it was found).
	std::optional<std::pair<uint32_t, int>> locate(uint32_t rule_id, const uint8_t *addr, uint64_t seed,
						       uint64_t &key) const;

	Set *sets_ptr_ = nullptr;
	uint32_t sets_ = 0;
	size_t length_ = 0;
};

using SourceTable4 = SetTable<struct sluice_set_v4>;
using SourceTable6 = SetTable<struct sluice_set_v6>;
using LogTable4 = SetTable<struct sluice_log_set_v4>;
using LogTable6 = SetTable<struct sluice_log_set_v6>;

} // namespace sluice
