// SPDX-License-Identifier: GPL-2.0-only
// The rule set held in the data plane's maps: list, add, edit and remove
// rules, each change one transaction that keeps every other rule's buckets
// and counters as they are.
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
	std::vector<InstalledRule> added, removed, changed;
	size_t restarted = 0; ///< of the changed, those whose buckets started afresh
};

/// Rules stored in the pinned maps. The maps hold two rule sets and one word
/// naming the live one (struct sluice_active). A change is validated and
/// compiled in full, written into the other set, and made live by flipping
/// that word: a packet, a reader or a killed writer sees the old rule set or
/// the new, never a mixture, and a killed change leaves nothing to undo. The
/// rule entries and the lookups flip apart: an edit that keeps every
/// selector flips the rule entries alone.
class RuleTable {
public:
	explicit RuleTable(const MapSet &maps) : maps_(maps) {}

	/// All installed rules, in match order (see match_order).
	std::vector<InstalledRule> list() const;

	/// Validates and installs a rule; it takes effect for the next packet.
	/// Unlike add_many, a rule present already is an error.
	InstalledRule add(RuleSpec spec);

	/// Installs many rules in one transaction (all or none). A spec equal to
	/// an installed rule (its name aside, if it has none) is skipped, so an
	/// import can be run again; returns the rules added.
	/// `where` names each spec in errors (e.g. "rules.txt line 4"); by
	/// default "rule N" in the list.
	std::vector<InstalledRule> add_many(std::vector<RuleSpec> specs, const std::vector<std::string> &where = {},
					    bool skip_present = true);

	/// Removes a rule by name or id, with its buckets and counters.
	InstalledRule remove(std::string_view name_or_id);

	/// Removes every rule; returns how many there were.
	size_t flush();

	/// Changes a rule in place: same id and counters, and the same buckets
	/// unless edit_restarts_buckets says otherwise.
	InstalledRule edit(std::string_view name_or_id, const RuleEdit &edit);

	/// edit() without compiling the whole set: when the edit needs no
	/// whole-set check (no new name, no rule made layered), writes the edited
	/// rule's entries into the idle rule set and flips the rule entries
	/// alone, on the live lookups. When the idle rule set is known to differ
	/// from the live one in one slot at most (struct sluice_active's sync
	/// word, which a change of one rule leaves so), that slot is all else it
	/// writes; otherwise it first copies the live entries that differ.
	/// Empty, having written nothing, when it cannot; edit() then goes the
	/// long way. Throws as edit() does.
	std::optional<InstalledRule> edit_in_place(std::string_view name_or_id, const RuleEdit &edit);

	/// Makes the installed rules equal `desired` in one transaction. Rules
	/// are matched by name: a rule whose spec is unchanged keeps everything,
	/// a changed one is edited in place, the others are added or removed.
	/// With dry_run, checks that the change fits and writes nothing.
	ChangeSummary replace(std::vector<RuleSpec> desired, bool dry_run = false);

	/// Checks, with no maps, that a rule set fits tables of `max_rules`
	/// (names, selectors, match lists, the IPv4 table): prepare_empty with
	/// its result dropped; throws if not.
	static void check_fits(const std::vector<RuleSpec> &rules, uint32_t max_rules);

	/// A rule set validated and compiled with no maps, for a table of
	/// `max_rules` that holds no rule yet (a program just loaded), as
	/// replace() would make it; throws as replace() does. `apply` prepares
	/// its rules while the program loads, then installs them.
	struct Prepared;
	static std::shared_ptr<const Prepared> prepare_empty(std::vector<RuleSpec> desired, uint32_t max_rules);
	/// The rules a Prepared set installs, as the maps will hold them and
	/// list() will read them back (ids, slots, canonical specs): what
	/// `export` prints after `apply` into an empty table, without a kernel.
	static std::vector<InstalledRule> prepared_rules(const Prepared &prepared);
	/// Writes and makes live a rule set prepare_empty made, into the tables
	/// of a program just loaded and attached nowhere (so that no counter is
	/// to zero and no packet to wait for); throws, having written nothing,
	/// unless this table holds no rule and is of its size.
	void install(const Prepared &prepared);

	/// Installs rules carried from another program (ids, slots and bucket
	/// ids as given) into an empty table.
	void restore(std::vector<InstalledRule> rules, uint32_t next_id);

	/// Finds a rule by name or id; throws if there is none.
	InstalledRule find(std::string_view name_or_id) const;

	/// The rule's counters summed over CPUs.
	struct sluice_rule_counters counters(uint32_t slot) const;

	/// The live set's data-plane entry of a slot.
	struct sluice_rule datapath_rule(uint32_t slot) const;

private:
	struct Snapshot;
	struct Compiled;
	Snapshot read() const;
	/// Validates `after` as a whole (names, selectors, capacity), gives new
	/// rules ids and slots, and compiles the idle set's tables; throws if the
	/// change does not fit. Writes nothing: the IPv4 table is only checked
	/// to fit here, and commit builds it in the idle set.
	static Compiled prepare(const Snapshot &before, std::vector<InstalledRule> &after, uint32_t &next_id,
				const std::vector<std::string> &where, uint32_t max_rules);
	/// Validates `after` as a whole, writes it into the idle set and makes
	/// it live; then removes the buckets no rule of `after` uses.
	void commit(const Snapshot &before, std::vector<InstalledRule> &after, uint32_t next_id,
		    const std::vector<std::string> &where = {}, bool dry_run = false);
	/// commit's writes, of a change prepared from `before`. `unused`: the
	/// tables were never used (a program just loaded, attached nowhere):
	/// their counters are zero and no packet reads them.
	void write(const Snapshot &before, const std::vector<InstalledRule> &after, uint32_t next_id,
		   const Compiled &c, bool unused = false);
	/// A policy's rule before it joins a change: named, and validated
	/// (its defaults filled) unless it is `running` unchanged.
	static void check_policy_rule(RuleSpec &spec, const RuleSpec *running);

	/// The rule_info array's entries of slots below `reach`, both sets,
	/// mapped once for this object (for finding a rule by name).
	const MappedArray &infos_upto(uint32_t reach) const;

	const MapSet &maps_;
	mutable std::unique_ptr<MappedArray> infos_;
};

} // namespace sluice
