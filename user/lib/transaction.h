// SPDX-License-Identifier: GPL-2.0-only
// The one way rules change: a Transaction stages changes (add, delete, edit,
// flush, replace by a policy, restore, install) and commit() writes them all
// or none. Every command that changes rules builds one; nothing else writes
// the rule maps or the live-set word.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rule_maps.h"
#include "rule_table.h"
#include "sets.h"

namespace sluice {

/// A rule set validated and compiled with no maps, for a table of a given
/// size that holds no rule yet (Transaction::prepare_empty).
struct PreparedRules;
/// The transaction's insides (transaction.cpp).
struct TransactionStep;
struct StagedRules;
struct CompiledRules;
class Trie6Writer;

/// Changes to the rule table, staged, then written all or none by commit().
///
/// The maps hold two rule sets and one word naming the live one (struct
/// sluice_active). commit() applies the staged steps, in order, to the live
/// rules as read (a step that names a rule finds the first of that name: the
/// running rules, then those this transaction adds, in order), validates and
/// compiles the result as a whole (names and selectors unique, capacity),
/// writes it into the idle set and makes it live by writing that word: a
/// packet, a reader or a killed writer sees the old rule set or the new,
/// never a mixture. A step that does not apply (no such rule, an invalid
/// edit) or a result that does not (a name taken, a table full) fails the
/// commit with nothing changed.
///
/// The word's `sync` field is what this writer knows of the idle set, so
/// that the next commit writes only what differs: cleared before the idle
/// set is touched, set again with the switch. SLUICE_SYNC_LOOKUPS says the
/// idle lookups equal the live ones; SLUICE_SYNC_RULES says the idle rule
/// entries equal the live ones except at most slot (sync & SLUICE_SYNC_SLOT)
/// - 1. A commit of one edit that keeps every selector (no new name, no rule
/// made layered) uses that: it writes that slot and the edited one and flips
/// the rule entries alone, on the live lookups; without SLUICE_SYNC_RULES it
/// first copies the live entries over the idle ones. A commit of many rules,
/// once live, waits until no packet can read the retired entries (an RCU
/// grace period, by membarrier) and copies the live ones over them, so that
/// the next edit need not. A commit killed midway leaves sync 0, so the next
/// one trusts nothing of the idle set.
///
/// Other map writes are not rule-state writes and stay where they are:
/// zeroing counters (`stats --reset`, reset_counters) and refilling a
/// source's buckets (`release`, release_source) touch per-slot counters and
/// the source tables, never the rule sets or the word; the cluster sync
/// writes its grants (SLUICE_MAP_GRANTS), never a bucket; `upgrade` copies
/// counters and buckets into the new program's maps and its rules through
/// restore(); loading writes the configuration and metadata of maps no
/// program reads yet, and attaching writes an
/// interface's MTU and the program arrays (`--then`, `--prog-array`).
/// Bans (bans.h) are the data plane's entries, as buckets are: a commit
/// sets the ban switch (struct sluice_active's bans, which the commit's own
/// writes of the entry keep: rule_maps::write_active) before the switch
/// when a rule bans, and lifts the bans of rules that no longer ban after
/// it; outside a commit,
/// `ban del` (remove_ban) deletes one entry, the agent and `sluice events`
/// delete entries run out (sweep_bans), `upgrade` writes the carried ones
/// into the new program's empty table (restore_bans), and each lifted ban's
/// UNBAN goes into the ring buffer through bpf/event_note.bpf.c: none is a
/// rule or the live-set word.
class Transaction {
public:
	explicit Transaction(const MapSet &maps);
	/// Reads through `table` (sharing its mapping of the rule names).
	explicit Transaction(const RuleTable &table);
	~Transaction();
	Transaction(const Transaction &) = delete;
	Transaction &operator=(const Transaction &) = delete;

	/// Adds a rule; one present already is an error. `where` names it in
	/// errors (e.g. "rules.txt line 4").
	Transaction &add(RuleSpec spec, std::string where = {});
	/// Adds a rule unless one equal to it (its name aside, if it has none)
	/// is present: an import can be run again.
	Transaction &import(RuleSpec spec, std::string where = {});
	/// Removes a rule (name or id) with its buckets and counters.
	Transaction &remove(std::string name_or_id);
	/// Changes a rule in place: same id and counters, and the same buckets
	/// unless edit_restarts_buckets says otherwise.
	Transaction &edit(std::string name_or_id, RuleEdit edit);
	/// Removes every rule.
	Transaction &flush();
	/// Makes the rules equal `desired` (a policy's): rules are matched by
	/// name; an unchanged one keeps everything, a changed one is edited in
	/// place, the others are added or removed. Every rule needs a name.
	Transaction &replace(std::vector<RuleSpec> desired);
	/// Rules carried from another program (ids, slots and bucket ids as
	/// given), into an empty table; the next id to give is `next_id`.
	Transaction &restore(std::vector<InstalledRule> rules, uint32_t next_id);
	/// A rule set prepare_empty made, into the tables of a program just
	/// loaded and attached nowhere (no counter to zero, no packet to wait
	/// for). The only step of its transaction; the table must be empty and
	/// of the prepared size.
	Transaction &install(std::shared_ptr<const PreparedRules> prepared);
	/// The contents of address sets to compile the rules with, in place of
	/// the store's (sets.h): a set being replaced is compiled from here and
	/// written to the store once the commit is live. Sets not given are read
	/// from the store when a rule uses them.
	Transaction &with_sets(SetContents sets);

	/// Writes the staged changes and makes them live, all or none; throws,
	/// having changed nothing the data plane or a reader sees, if any does
	/// not apply or the result does not fit. A Transaction commits once.
	ChangeSummary commit();
	/// commit() without writing: what it would do, or its error.
	ChangeSummary check();

	/// Validates and compiles `desired` with no maps, for an empty table of
	/// that room, as replace() would; throws as commit() does. `apply`
	/// prepares its rules while the program loads, then installs them.
	static std::shared_ptr<const PreparedRules> prepare_empty(std::vector<RuleSpec> desired, RuleRoom room,
								   const SetContents *sets = nullptr);
	/// prepare_empty with its result dropped: checks that a rule set fits.
	static void check_fits(const std::vector<RuleSpec> &rules, RuleRoom room, const SetContents *sets = nullptr);
	/// What a transaction of add() steps (import() steps with `import`),
	/// `where[i]` naming rule i, would commit into an empty table of that
	/// room, found with no maps: its summary, or the error commit()
	/// would throw. A command that loads the program for its rules checks
	/// them so first, so that a refused rule loads nothing, and a rule an
	/// empty table takes is the rule a loaded one does (unnamed ones named
	/// `rule<ID>`), unlike a policy's (check_fits: names required).
	static ChangeSummary check_adds_on_empty(const std::vector<RuleSpec> &rules,
						 const std::vector<std::string> &where, bool import, RuleRoom room);
	/// The rules a prepared set installs, as list() will read them back.
	static std::vector<InstalledRule> prepared_rules(const PreparedRules &prepared);

private:
	friend class RuleTable;
	ChangeSummary run(bool write);
	void install_prepared(const PreparedRules &prepared);
	/// The one-edit commit that writes one slot (see above); empty, having
	/// written nothing, where it cannot go so.
	std::optional<ChangeSummary> commit_one_edit(const TransactionStep &step);
	/// The writes of a commit: the idle sets, then the switch, then the
	/// buckets no rule uses any more. `unused`: the tables were never used
	/// (a program just loaded, attached nowhere): their counters are zero
	/// and no packet reads them.
	void write(const StagedRules &s, const CompiledRules &c, bool unused);
	void write_idle_rules(const StagedRules &s, bool unused, const MappedArray &rules, const MappedArray &infos,
			      uint32_t rules_set, uint32_t reach, uint32_t high);
	void write_idle_lookups(const CompiledRules &c, Trie6Writer &trie6);
	/// The switch; returns the live-set word it wrote.
	uint32_t switch_sets(const StagedRules &s, const CompiledRules &c, bool unused, const MappedArray &rules,
			 const MappedArray &infos, uint32_t bound, uint32_t high);
	void retire_buckets(const rule_maps::Snapshot &before, const std::vector<InstalledRule> &after);

	std::unique_ptr<RuleTable> own_;
	const RuleTable &table_;
	const MapSet &maps_;
	std::vector<TransactionStep> steps_;
	SetContents sets_;
	bool done_ = false;
};

/// Stops a commit at a named point, for tests: $SLUICE_APPLY_FAIL_AT=STEP
/// (every time) or STEP:N (the Nth time this process reaches STEP). Points:
/// `apply`'s steps (load, detach, move, attach, resize, rules) and the
/// commit's `rules-written` (the idle set written, not yet live).
void fail_point(const std::string &step);

} // namespace sluice
