// The rule set held in the data plane's maps: list, add and remove rules,
// keeping every other rule's buckets and counters as they are.
#pragma once

#include <map>
#include <string_view>
#include <vector>

#include "maps.h"
#include "rule.h"

namespace sluice {

/// Rules stored in the pinned maps. Every change is computed in full first and
/// only then written, so a rejected change leaves the maps untouched.
class RuleTable {
public:
	explicit RuleTable(const MapSet &maps) : maps_(maps) {}

	/// All installed rules, oldest first.
	std::vector<InstalledRule> list() const;

	/// Validates and installs a rule; it takes effect for the next packet.
	InstalledRule add(RuleSpec spec);

	/// Installs many rules at once (all or none), with one compilation of the
	/// match lists: the way to load thousands of rules.
	/// `where` names each spec in errors (e.g. "rules.txt line 4"); by
	/// default "rule N" in the list.
	std::vector<InstalledRule> add_many(std::vector<RuleSpec> specs, const std::vector<std::string> &where = {});

	/// Removes a rule by name or id, with its buckets and counters.
	InstalledRule remove(std::string_view name_or_id);

	/// Finds a rule by name or id; throws if there is none.
	InstalledRule find(std::string_view name_or_id) const;

	/// The rule's counters summed over CPUs.
	struct sluice_rule_counters counters(uint32_t slot) const;

private:
	/// Writes the compiled lists of the new rule set; `before` gives the old
	/// ones, so that only changed IPv6 trie entries are written.
	void write_match_lists(const std::vector<InstalledRule> &before,
			       const std::map<Cidr, std::vector<uint32_t>> &new_lists);
	void write_v4_tables(const std::map<Cidr, std::vector<uint32_t>> &lists);
	void purge_buckets(uint32_t rule_id);

	const MapSet &maps_;
};

} // namespace sluice
