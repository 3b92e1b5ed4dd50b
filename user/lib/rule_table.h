// SPDX-License-Identifier: GPL-2.0-only
// The rule set held in the data plane's maps, as read: list and find rules,
// read their counters. Changes go through a Transaction (transaction.h).
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "maps.h"
#include "rule.h"

namespace sluice {

/// What `rule set` changes; an unset field stays as it is.
struct RuleEdit {
	std::optional<std::string> name;
	std::optional<Rate> rate;
	std::optional<uint64_t> burst;
	std::optional<Algo> algo;
	std::optional<uint64_t> warmup_ns;
	std::optional<bool> shadow;
	std::optional<bool> layered;
	std::optional<int> per_prefix;
	std::optional<Scope> scope;
	std::optional<Rate> fallback;          ///< amount 0: back to the default share
	std::optional<uint32_t> cluster_hosts; ///< the agent's: the host count it learnt
	/// The ban: its duration (0: no ban) and threshold (0: the default).
	struct {
		std::optional<uint64_t> ns;
		std::optional<uint32_t> after;
	} ban;
};

/// What a transaction did, rule by rule.
struct ChangeSummary {
	std::vector<InstalledRule> added;   ///< as installed, in the order staged
	std::vector<InstalledRule> removed; ///< as they were
	std::vector<InstalledRule> changed; ///< as they are now (spec or buckets changed)
	size_t restarted = 0;               ///< of the changed, those whose buckets started afresh
	bool in_place = false;              ///< one edit written as one slot (see Transaction)
};

/// Rules stored in the pinned maps (two rule sets and the word naming the
/// live one: see Transaction), read from the live set.
///
/// The mutating members are shorthands for a Transaction of one step,
/// committed (for tests, benchmarks and the upgrade's restore): the
/// transaction is the one path that writes.
class RuleTable {
public:
	explicit RuleTable(const MapSet &maps) : maps_(maps) {}

	/// All installed rules, in match order (see match_order).
	std::vector<InstalledRule> list() const;

	/// Finds a rule by name or id; throws if there is none.
	InstalledRule find(std::string_view name_or_id) const;

	/// The rule's counters summed over CPUs.
	struct sluice_rule_counters counters(uint32_t slot) const;

	/// The live set's data-plane entry of a slot.
	struct sluice_rule datapath_rule(uint32_t slot) const;

	/// Transaction::add, committed.
	InstalledRule add(RuleSpec spec);
	/// Transaction::import of each spec, committed; the rules added.
	/// `where` names each spec in errors; by default "rule N".
	std::vector<InstalledRule> add_many(std::vector<RuleSpec> specs, const std::vector<std::string> &where = {});
	/// Transaction::remove, committed; the rule removed.
	InstalledRule remove(std::string_view name_or_id);
	/// Transaction::flush, committed; how many rules there were.
	size_t flush();
	/// Transaction::edit, committed; the rule as edited.
	InstalledRule edit(std::string_view name_or_id, const RuleEdit &edit);
	/// edit() if it goes in place (one slot written, the rule entries
	/// flipped alone); else empty, having written nothing.
	std::optional<InstalledRule> edit_in_place(std::string_view name_or_id, const RuleEdit &edit);
	/// Transaction::restore, committed.
	void restore(std::vector<InstalledRule> rules, uint32_t next_id);

private:
	friend class Transaction;
	/// The rule_info array's entries of slots below `reach`, both sets,
	/// mapped once for this object (for finding a rule by name).
	const MappedArray &infos_upto(uint32_t reach) const;

	const MapSet &maps_;
	mutable std::unique_ptr<MappedArray> infos_;
};

} // namespace sluice
