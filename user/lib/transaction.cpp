// SPDX-License-Identifier: GPL-2.0-only
// The one writer of the rule maps. A commit: stage (apply the steps to the
// rules as read), prepare (validate and compile the whole result; nothing
// written yet), write the idle sets, switch (one word), retire the buckets
// no rule uses. See transaction.h for the live-set word and its sync field.
#include "transaction.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "bans.h"
#include "dir4.h"
#include "sets.h"
#include "events.h"
#include "state_dirs.h"
#include "trie6.h"
#include "name_index.h"
#include "rule_maps.h"
#include "sources.h"
#include "text_table.h"

namespace sluice {

using namespace rule_maps;

void fail_point(const std::string &step)
{
	static std::map<std::string, int> reached;
	const char *at = std::getenv("SLUICE_APPLY_FAIL_AT");
	if (!at || !*at)
		return;
	int n = ++reached[step];
	std::string want = at;
	if (want == step || want == step + ":" + std::to_string(n))
		throw Error("injected failure at " + want);
}

/// The address sets a commit's rules use: those the transaction was given
/// (with_sets: a set being replaced), else the store's, read once each.
struct SetSource {
	SetContents sets;
	std::vector<std::string> given;

	const AddressSet &get(const std::string &name)
	{
		auto it = sets.find(name);
		if (it == sets.end())
			it = sets.emplace(name, SetStore::for_default_instance().read(name)).first;
		return it->second;
	}
	/// Gives a rule on a set its set's family.
	void resolve(RuleSpec &spec)
	{
		if (!spec.set.empty())
			resolve_set_family(spec, get(spec.set).family);
	}
	/// Loads every set `rules` use.
	void load(const std::vector<InstalledRule> &rules)
	{
		for (const auto &r : rules)
			if (!r.spec.set.empty())
				get(r.spec.set);
	}
};

/// A change ready to write into the idle set.
struct CompiledRules {
	uint32_t set = 0;       ///< the idle lookup set: lists, IPv4 table, IPv6 prefixes
	uint32_t rules_set = 0; ///< the idle rule set
	uint32_t block_base = 0, blocks_per_set = 0;
	MatchLists lists;
	/// The IPv4 prefixes and their lists, checked to fit: the writer builds
	/// the table straight into the idle set.
	std::vector<std::pair<Cidr, uint32_t>> prefixes4;
	uint32_t blocks = 0; ///< how many that takes
};

struct PreparedRules {
	RuleRoom room;   ///< of the empty table prepare_empty assumed
	Snapshot before; ///< an empty table's, as prepare_empty assumed it
	std::vector<InstalledRule> after;
	uint32_t next_id = 1;
	CompiledRules compiled;
};

struct TransactionStep {
	enum class Kind { add, import, remove, edit, flush, replace, restore, install };
	explicit TransactionStep(Kind k) : kind(k) {}
	Kind kind;
	RuleSpec spec;
	std::string where; ///< add, import: the prefix of its errors
	std::string key;   ///< remove, edit
	RuleEdit change;
	std::vector<RuleSpec> desired;
	std::vector<InstalledRule> rules;
	uint32_t next_id = 0;
	std::shared_ptr<const PreparedRules> prepared;
};

/// The rules a commit is to write, before ids and slots are given.
struct StagedRules {
	Snapshot before;
	std::vector<InstalledRule> after;
	std::vector<std::string> where; ///< of each rule of `after`: its errors' prefix
	uint32_t next_id = 1;
	std::unordered_set<uint32_t> edited; ///< ids of running rules an edit step named
	/// Running rules of `after` by selector, for import (built on demand;
	/// cleared by any step that moves rules).
	std::map<std::tuple<Cidr, std::string, Proto, uint16_t, uint16_t, uint16_t, uint16_t, uint8_t, uint8_t>, size_t> by_selector;
	bool indexed = false;
};

namespace {

/// What an import compares of a rule to find it running already: its selector.
auto selector_key(const RuleSpec &r)
{
	return std::tuple{r.cidr, r.set, r.proto, r.dport.lo, r.dport.hi, r.sport.lo, r.sport.hi, r.tcp_flags.mask,
			  r.tcp_flags.value};
}

/// Empties every bucket of a rule id for which doomed(id) holds.
void purge_buckets(const MapSet &maps, const std::function<bool(uint32_t)> &doomed)
{
	SourceTable4(maps.src4.get()).purge_if(doomed);
	SourceTable6(maps.src6.get()).purge_if(doomed);
	LogTable4(maps.logs4.get()).purge_if(doomed);
	LogTable6(maps.logs6.get()).purge_if(doomed);
}

/// True if two rule sets compile to the same lookup tables: the tables
/// depend on each rule's slot, id, prefix, protocol and ports alone.
bool same_lookups(const std::vector<InstalledRule> &a, const std::vector<InstalledRule> &b, uint32_t n)
{
	if (a.size() != b.size())
		return false;
	std::vector<const InstalledRule *> by_slot(n);
	for (const auto &r : a)
		by_slot[r.slot] = &r;
	for (const auto &r : b) {
		if (!r.spec.set.empty())
			return false; // the tables depend on the set's prefixes too, which may have changed
		const InstalledRule *o = by_slot[r.slot];
		if (!o || o->id != r.id || !same_selector(o->spec, r.spec))
			return false;
	}
	return true;
}


/// Waits until every run of the program that may have read the live-set word
/// before now has ended: an RCU grace period (XDP runs inside RCU read-side
/// sections), which membarrier(MEMBARRIER_CMD_GLOBAL) waits for. False, having
/// waited for nothing, where the kernel refuses it (nohz_full) or would return
/// at once (one CPU online, where a preempted run could still be reading).
bool wait_for_packets_in_flight()
{
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return false;
	return syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0;
}

/// Copies rule set `from`'s entries over the other set's, below slot `upto`,
/// where they differ.
void copy_rule_entries(const MappedArray &rules, const MappedArray &infos, uint32_t from, uint32_t upto)
{
	for (uint32_t slot = 0; slot < upto; slot++) {
		uint32_t src = sluice_rule_index(slot, from), dst = sluice_rule_index(slot, from ^ 1);
		rules.put(dst, *rules.at<struct sluice_rule>(src));
		infos.put(dst, *infos.at<struct sluice_rule_info>(src));
	}
}

/// The rule as `e` edits it: its spec, and a new bucket id from next_id if
/// the edit restarts its buckets. Throws if the edit does not apply.
InstalledRule edited(const InstalledRule &r, const RuleEdit &e, uint32_t &next_id)
{
	RuleSpec spec = r.spec;
	spec.name = e.name.value_or(spec.name);
	spec.rate = e.rate.value_or(spec.rate);
	spec.algo = e.algo.value_or(spec.algo);
	bool default_burst_before = r.spec.action == Action::limit && r.spec.has_burst() &&
				    r.spec.burst == default_burst(r.spec.rate);
	if (e.burst)
		spec.burst = *e.burst;
	else if (!spec.has_burst() || default_burst_before)
		spec.burst = 0; // no burst for a window; a default burst follows the rate
	spec.warmup_ns = e.warmup_ns.value_or(spec.warmup_ns);
	spec.shadow = e.shadow.value_or(spec.shadow);
	spec.layered = e.layered.value_or(spec.layered);
	spec.per_prefix = e.per_prefix.value_or(spec.per_prefix);
	spec.scope = e.scope.value_or(spec.scope);
	spec.ban.ns = e.ban.ns.value_or(spec.ban.ns);
	spec.ban.after = e.ban.after.value_or(spec.ban.after);
	if (!spec.ban.ns)
		spec.ban.after = 0; // the ban removed: its threshold with it
	if (e.fallback)
		spec.fallback = *e.fallback;
	else if (spec.scope == Scope::local)
		spec.fallback = {}; // a rule made local has no fallback share
	if (spec.action != Action::limit && (e.rate || e.burst || e.algo || e.warmup_ns || e.per_prefix))
		throw Error("rule '" + r.spec.name + "' is an " + std::string(action_name(spec.action)) +
			    " rule: --rate, --burst, --algo, --warmup and --per apply to --rate rules");
	validate_rule(spec);
	InstalledRule out = r;
	if (e.cluster_hosts)
		out.cluster_hosts = std::max<uint32_t>(*e.cluster_hosts, 1);
	if (spec.scope == Scope::cluster) {
		out.spec = spec;
		compile_limit(local_rate(out), local_burst(out)); // the share for this host count must compile
	}
	if (edit_restarts_buckets(r.spec, spec))
		out.bucket_id = next_id++;
	out.spec = spec;
	return out;
}

/// A policy's rule before it joins a change: named, and validated (its
/// defaults filled) unless it is `running` unchanged.
void check_policy_rule(RuleSpec &spec, const RuleSpec *running)
{
	if (spec.name.empty())
		throw Error("every rule of a policy needs a name");
	// A spec the same as a running rule's is that rule, valid as it
	// stands: only the others are checked (and their defaults filled).
	if (!running || !same_spec(*running, spec))
		validate_rule(spec);
}

/// rule_is for staged rules: a rule still to be added has no id.
bool staged_is(const InstalledRule &r, std::string_view key)
{
	return r.spec.name == key || (r.id != 0 && std::to_string(r.id) == key);
}

/// Gives new rules (id 0) ids, names if they have none, and slots (NO_SLOT).
void place_new_rules(const Snapshot &before, std::vector<InstalledRule> &after, uint32_t &next_id, uint32_t n)
{
	std::vector<bool> live(n), used(n);
	for (const auto &r : before.rules)
		live[r.slot] = true;
	for (const auto &r : after)
		if (r.slot != NO_SLOT)
			used[r.slot] = true;
	// The names given, for naming unnamed rules (built when one needs it).
	std::unordered_set<std::string> names;
	bool names_known = false;
	uint32_t fresh = 0, reused = 0;
	for (InstalledRule &r : after) {
		if (r.id == 0) {
			if (next_id > SLUICE_MAX_RULE_ID)
				throw Error("rule ids are used up (" + std::to_string(SLUICE_MAX_RULE_ID) +
					    " rules were added since the first attach); detach and attach again");
			r.id = next_id++;
			if (r.spec.name.empty()) {
				if (!names_known) {
					for (const auto &o : after)
						if (!o.spec.name.empty())
							names.insert(o.spec.name);
					names_known = true;
				}
				r.spec.name = "rule" + std::to_string(r.id);
				for (int k = 2; names.count(r.spec.name); k++)
					r.spec.name = "rule" + std::to_string(r.id) + "-" + std::to_string(k);
				names.insert(r.spec.name);
			}
		}
		if (r.slot == NO_SLOT) {
			// A slot no live rule holds, so that zeroing its counters
			// touches nobody's; a slot freed by this change only when
			// the table has no other (its last packets may count there).
			while (fresh < n && (used[fresh] || live[fresh]))
				fresh++;
			if (fresh < n) {
				r.slot = fresh;
			} else {
				while (reused < n && used[reused])
					reused++;
				if (reused == n)
					throw Error("the rule table is full (" + std::to_string(n) +
						    " rules); delete rules, or raise the size with `sluice apply` (tables: max_rules)");
				r.slot = reused;
			}
			used[r.slot] = true;
		}
	}
}

/// Names and selectors are unique: the first rule to repeat one is named.
void check_unique(const std::vector<InstalledRule> &after, const std::vector<std::string> &where)
{
	auto at = [&where](size_t i) { return i < where.size() ? where[i] : std::string(); };
	NameIndex seen(after.size());
	auto name_of = [&after](uint32_t j) -> std::string_view { return after[j].spec.name; };
	std::unordered_map<const RuleSpec *, size_t, SelectorHash, SelectorEqual> selectors;
	selectors.reserve(after.size());
	for (size_t i = 0; i < after.size(); i++) {
		const RuleSpec &s = after[i].spec;
		if (seen.insert(s.name, static_cast<uint32_t>(i), name_of) != i)
			throw Error(at(i) + "a rule named '" + s.name + "' exists already");
		auto [it, added] = selectors.emplace(&s, i);
		if (!added)
			throw Error(at(i) + "rule '" + after[it->second].spec.name +
				    "' already selects the same traffic; delete it first");
	}
}

/// Validates `after` as a whole (names, selectors, capacity), gives new rules
/// ids and slots, and compiles the idle set's tables; throws if the change
/// does not fit. Writes nothing: the IPv4 table is only checked to fit here,
/// and the writer builds it in the idle set.
CompiledRules prepare(const Snapshot &before, std::vector<InstalledRule> &after, uint32_t &next_id,
		      const std::vector<std::string> &where, RuleRoom room, SetSource &sets)
{
	const uint32_t n = room.rules;
	place_new_rules(before, after, next_id, n);
	check_unique(after, where);
	sets.load(after);
	CompiledRules c;
	c.set = sluice_lookup_set(before.active.set) ^ 1;
	c.rules_set = sluice_rules_set(before.active.set) ^ 1;
	uint32_t list_capacity = n; // a list holds at least one rule (the prefixes of a set share theirs)
	c.lists = compile_match_lists(after, c.set * (n + 1) + 1, list_capacity, &sets.sets);
	size_t prefixes6 = 0;
	for (const auto &[prefix, first] : c.lists.first) {
		if (prefix.family == 4)
			c.prefixes4.push_back({prefix, first});
		else
			prefixes6++;
	}
	c.blocks_per_set = 2 * n; // enough for any n rules on CIDRs: see sluice_abi.h
	c.block_base = c.set * c.blocks_per_set;
	c.blocks = dir4_blocks_needed(c.prefixes4);
	bool on_sets = std::any_of(after.begin(), after.end(), [](const auto &r) { return !r.spec.set.empty(); });
	// The IPv4 tables are sized by --max-rules: a set's prefixes fill them
	// as that many rules on CIDRs would; the trie by --max-v6-prefixes (see
	// docs/packets.md, "Address sets").
	if (on_sets && c.blocks > c.blocks_per_set)
		throw Error("the rules and sets need " + plural(c.blocks, "IPv4 table block", "IPv4 table blocks") +
			    " and --max-rules " +
			    std::to_string(n) + " holds " + std::to_string(c.blocks_per_set) +
			    " (a block for each /16 that holds a longer prefix, and for each /24 that does, or a sixteenth of "
			    "one where its longer prefixes lead to the same rules); raise it with "
			    "`sluice apply` (tables: max_rules)");
	if (prefixes6 > room.v6_prefixes)
		throw Error("the rules and sets need " + std::to_string(prefixes6) + " IPv6 prefixes and --max-v6-prefixes " +
			    "holds " + std::to_string(room.v6_prefixes) +
			    "; raise it with `sluice apply` (tables: max_v6_prefixes)");
	check_dir4(c.prefixes4, c.blocks_per_set);
	return c;
}

/// What a commit from `before` to `after` (ids given) changes.
ChangeSummary summarize(const Snapshot &before, const std::vector<InstalledRule> &after,
			const std::unordered_set<uint32_t> &edited)
{
	ChangeSummary sum;
	std::unordered_map<uint32_t, const InstalledRule *> was;
	for (const auto &r : before.rules)
		was[r.id] = &r;
	std::unordered_set<uint32_t> kept;
	for (const auto &r : after) {
		auto it = was.find(r.id);
		if (it == was.end()) {
			sum.added.push_back(r);
			continue;
		}
		kept.insert(r.id);
		bool restarted = bucket_id(r) != bucket_id(*it->second);
		if (restarted || edited.count(r.id) || !same_spec(it->second->spec, r.spec)) {
			sum.changed.push_back(r);
			sum.restarted += restarted;
		}
	}
	for (const auto &r : before.rules)
		if (!kept.count(r.id))
			sum.removed.push_back(r);
	return sum;
}

} // namespace

namespace {

/// Applies one staged step to the rules a commit will write. Each throws,
/// naming the step, if it does not apply.
void stage_add(StagedRules &s, const TransactionStep &step)
{
	RuleSpec spec = step.spec;
	try {
		validate_rule(spec);
	} catch (const Error &e) {
		throw Error(step.where + e.what());
	}
	if (step.kind == TransactionStep::Kind::import) {
		// A rule present already, as asked, is not added twice: an import
		// can be run again. (An unnamed one is compared without its name.)
		if (!s.indexed) {
			s.by_selector.clear();
			for (size_t i = 0; i < s.after.size(); i++) {
				const RuleSpec &r = s.after[i].spec;
				if (s.after[i].id != 0)
					s.by_selector[selector_key(r)] = i;
			}
			s.indexed = true;
		}
		auto same = s.by_selector.find(selector_key(spec));
		if (same != s.by_selector.end()) {
			const RuleSpec &running = s.after[same->second].spec;
			RuleSpec named = spec;
			if (named.name.empty())
				named.name = running.name;
			if (same_spec(running, named))
				return;
		}
	}
	s.after.push_back({0, NO_SLOT, std::move(spec)});
	s.where.push_back(step.where);
}

std::vector<InstalledRule>::iterator staged_rule(StagedRules &s, std::string_view key)
{
	auto it = std::find_if(s.after.begin(), s.after.end(), [&](const auto &r) { return staged_is(r, key); });
	if (it == s.after.end())
		no_rule(key);
	return it;
}

void stage_replace(StagedRules &s, std::vector<RuleSpec> desired)
{
	// The running rules and the kept ones by name.
	const std::vector<InstalledRule> running_rules = std::move(s.after);
	NameIndex running(running_rules.size()), kept(desired.size());
	auto running_name = [&](uint32_t j) -> std::string_view { return running_rules[j].spec.name; };
	auto desired_name = [&](uint32_t j) -> std::string_view { return desired[j].name; };
	for (uint32_t i = 0; i < running_rules.size(); i++)
		running.insert(running_rules[i].spec.name, i, running_name);
	s.after.clear();
	s.after.reserve(desired.size());
	for (uint32_t j = 0; j < desired.size(); j++) {
		RuleSpec &spec = desired[j];
		uint32_t at = spec.name.empty() ? NameIndex::NONE : running.find(spec.name, running_name);
		check_policy_rule(spec, at == NameIndex::NONE ? nullptr : &running_rules[at].spec);
		if (at == NameIndex::NONE) {
			s.after.push_back({0, NO_SLOT, spec});
			continue;
		}
		if (kept.insert(spec.name, j, desired_name) != j)
			throw Error("two rules are named '" + spec.name + "'");
		InstalledRule r = running_rules[at];
		if (!same_spec(r.spec, spec)) {
			if (edit_restarts_buckets(r.spec, spec) && r.id != 0)
				r.bucket_id = s.next_id++;
			r.spec = spec;
		}
		s.after.push_back(r);
	}
	s.where.assign(s.after.size(), "");
}

void stage(StagedRules &s, const TransactionStep &step)
{
	using Kind = TransactionStep::Kind;
	if (step.kind != Kind::add && step.kind != Kind::import)
		s.indexed = false;
	switch (step.kind) {
	case Kind::add:
	case Kind::import:
		stage_add(s, step);
		break;
	case Kind::remove: {
		auto it = staged_rule(s, step.key);
		s.where.erase(s.where.begin() + (it - s.after.begin()));
		s.after.erase(it);
		break;
	}
	case Kind::edit: {
		auto it = staged_rule(s, step.key);
		uint32_t id = it->id, next = s.next_id;
		*it = edited(*it, step.change, next);
		if (id != 0) // a rule added by this transaction has no buckets to restart
			s.next_id = next;
		else
			it->bucket_id = 0;
		if (id != 0)
			s.edited.insert(id);
		break;
	}
	case Kind::flush:
		s.after.clear();
		s.where.clear();
		break;
	case Kind::replace:
		stage_replace(s, step.desired);
		break;
	case Kind::restore:
		if (!s.after.empty())
			throw Error("cannot restore rules into a table that holds rules");
		s.after = step.rules;
		s.where.assign(s.after.size(), "");
		s.next_id = step.next_id;
		break;
	case Kind::install:
		throw Error("an install is the only step of its transaction");
	}
}

} // namespace

Transaction::Transaction(const MapSet &maps)
	: own_(std::make_unique<RuleTable>(maps)), table_(*own_), maps_(maps)
{
}

Transaction::Transaction(const RuleTable &table) : table_(table), maps_(table.maps_) {}

Transaction::~Transaction() = default;

Transaction &Transaction::add(RuleSpec spec, std::string where)
{
	TransactionStep s{TransactionStep::Kind::add};
	s.spec = std::move(spec);
	s.where = where.empty() ? where : where + ": ";
	steps_.push_back(std::move(s));
	return *this;
}

Transaction &Transaction::import(RuleSpec spec, std::string where)
{
	add(std::move(spec), std::move(where));
	steps_.back().kind = TransactionStep::Kind::import;
	return *this;
}

Transaction &Transaction::remove(std::string name_or_id)
{
	TransactionStep s{TransactionStep::Kind::remove};
	s.key = std::move(name_or_id);
	steps_.push_back(std::move(s));
	return *this;
}

Transaction &Transaction::edit(std::string name_or_id, RuleEdit edit)
{
	TransactionStep s{TransactionStep::Kind::edit};
	s.key = std::move(name_or_id);
	s.change = std::move(edit);
	steps_.push_back(std::move(s));
	return *this;
}

Transaction &Transaction::flush()
{
	steps_.push_back(TransactionStep{TransactionStep::Kind::flush});
	return *this;
}

Transaction &Transaction::replace(std::vector<RuleSpec> desired)
{
	TransactionStep s{TransactionStep::Kind::replace};
	s.desired = std::move(desired);
	steps_.push_back(std::move(s));
	return *this;
}

Transaction &Transaction::restore(std::vector<InstalledRule> rules, uint32_t next_id)
{
	TransactionStep s{TransactionStep::Kind::restore};
	s.rules = std::move(rules);
	s.next_id = next_id;
	steps_.push_back(std::move(s));
	return *this;
}

Transaction &Transaction::with_sets(SetContents sets)
{
	for (auto &[name, set] : sets)
		sets_.insert_or_assign(name, std::move(set));
	return *this;
}

Transaction &Transaction::install(std::shared_ptr<const PreparedRules> prepared)
{
	TransactionStep s{TransactionStep::Kind::install};
	s.prepared = std::move(prepared);
	steps_.push_back(std::move(s));
	return *this;
}

ChangeSummary Transaction::commit() { return run(true); }

ChangeSummary Transaction::check() { return run(false); }

ChangeSummary Transaction::run(bool write_it)
{
	if (done_)
		throw Error("a transaction commits once");
	done_ = true;
	if (steps_.size() == 1 && steps_[0].kind == TransactionStep::Kind::install) {
		const PreparedRules &p = *steps_[0].prepared;
		if (write_it)
			install_prepared(p);
		return summarize(p.before, p.after, {});
	}
	if (write_it && steps_.size() == 1 && steps_[0].kind == TransactionStep::Kind::edit)
		if (auto done = commit_one_edit(steps_[0]))
			return *done;
	StagedRules s;
	s.before = read(maps_);
	s.next_id = std::max<uint32_t>(s.before.meta.next_rule_id, 1);
	s.after = s.before.rules;
	s.where.assign(s.after.size(), "");
	SetSource source;
	source.sets = std::move(sets_);
	for (auto &step : steps_) {
		source.resolve(step.spec);
		for (auto &spec : step.desired)
			source.resolve(spec);
		stage(s, step);
	}
	CompiledRules c = prepare(s.before, s.after, s.next_id, s.where, maps_.rule_room(), source);
	if (write_it)
		write(s, c, false);
	return summarize(s.before, s.after, s.edited);
}

void Transaction::install_prepared(const PreparedRules &p)
{
	StagedRules s;
	s.before = read(maps_);
	if (!s.before.rules.empty() || s.before.active.set != p.before.active.set || s.before.meta.next_rule_id > 1 ||
	    maps_.rule_room() != p.room)
		throw Error("rules prepared for an empty table of " + plural(p.room.rules, "rule", "rules") + " and " +
			    plural(p.room.v6_prefixes, "IPv6 prefix", "IPv6 prefixes") + " cannot go into this one");
	s.after = p.after;
	s.next_id = p.next_id;
	write(s, p.compiled, true);
}

namespace {

/// The idle rule set's entries of a one-edit commit: the edited slot, and
/// what else makes the idle set the live one but for that slot.
void write_one_slot(const MapSet &maps, const struct sluice_active &active, const MappedArray &infos, uint32_t reach,
		    const InstalledRule &after)
{
	int rules = maps.rules.get();
	uint32_t live = sluice_rules_set(active.set), idle = live ^ 1;
	// Written with syscalls: a few, where mapping the arrays costs a
	// page-table entry per page of them.
	auto put = [&](uint32_t s, const struct sluice_rule &dp, const struct sluice_rule_info &info) {
		uint32_t i = sluice_rule_index(s, idle);
		map_update(rules, &i, &dp, "a rule");
		map_update(maps.rule_info.get(), &i, &info, "a rule's name");
	};
	uint32_t other = (active.sync & SLUICE_SYNC_SLOT);
	if (!(active.sync & SLUICE_SYNC_RULES)) {
		// After a change of many rules, or a killed one: the idle entries
		// are caught up with the live ones where they differ first.
		copy_rule_entries(MappedArray(rules, 0, 2 * reach), infos, live, reach);
	} else if (other && other - 1 != after.slot) {
		uint32_t k = other - 1, i = sluice_rule_index(k, live);
		put(k, read_entry<struct sluice_rule>(rules, i, "a rule"),
		    read_entry<struct sluice_rule_info>(maps.rule_info.get(), i, "a rule's name"));
	}
	put(after.slot, to_datapath(after), to_info(after));
}

} // namespace

std::optional<ChangeSummary> Transaction::commit_one_edit(const TransactionStep &step)
{
	// The rule entries flip alone, on the live lookups (an edit keeps every
	// selector, so they hold as they are); the idle rule set is made the
	// live one but for the edited slot (see write_one_slot).
	struct sluice_active active = read_active(maps_);
	struct sluice_meta meta = read_meta(maps_);
	uint32_t upto = reach(maps_, active);
	const MappedArray &infos = table_.infos_upto(upto);
	int rules = maps_.rules.get();
	uint32_t slot = locate(rules, infos, active, upto, step.key);
	if (slot == NO_SLOT)
		no_rule(step.key);
	uint32_t live = sluice_rules_set(active.set), idle = live ^ 1;
	InstalledRule before = from_maps(read_entry<struct sluice_rule>(rules, sluice_rule_index(slot, live), "a rule"),
					 *infos.at<struct sluice_rule_info>(sluice_rule_index(slot, live)));
	before.slot = slot;
	uint32_t next_id = meta.next_rule_id;
	InstalledRule after = edited(before, step.change, next_id);

	// What the whole-set check (prepare) would look at, and could refuse,
	// goes the long way: a layered rule more (the per-address limit) and a
	// new name (uniqueness). The selector, id and slot never change here.
	if (after.spec.layered && !before.spec.layered)
		return std::nullopt;
	if (after.spec.name != before.spec.name && locate(rules, infos, active, upto, after.spec.name) != NO_SLOT)
		return std::nullopt;

	// Nothing is known of the idle set while it is written.
	uint32_t zero = 0;
	struct sluice_active writing = active;
	writing.sync = 0;
	write_active(maps_, writing);
	if (next_id != meta.next_rule_id) {
		meta.next_rule_id = next_id;
		map_update(maps_.meta.get(), &zero, &meta, "sluice metadata");
	}
	write_one_slot(maps_, active, infos, upto, after);
	fail_point("rules-written");
	if (after.spec.ban.ns)
		bans_before_switch(maps_, {after});

	// The switch. The rule set left idle is the old one: it differs in this
	// slot. The lookups stay, and so does what is known of their idle set.
	std::atomic_thread_fence(std::memory_order_seq_cst);
	struct sluice_active next = active;
	next.set = sluice_sets_switch(active.set, idle, sluice_lookup_set(active.set));
	next.slots[idle] = active.slots[live];
	next.sync = (active.sync & SLUICE_SYNC_LOOKUPS) | SLUICE_SYNC_RULES | (slot + 1);
	write_active(maps_, next);
	trie6_rules_switched(maps_.match6.get(), default_run_dir(), active.set, next.set);
	if (before.spec.ban.ns && !after.spec.ban.ns)
		bans_after_switch(maps_, table_.list()); // its bans are lifted with its --ban

	Snapshot was;
	was.meta = meta;
	was.rules = {before};
	retire_buckets(was, {after});
	ChangeSummary sum;
	sum.changed = {after};
	sum.restarted = bucket_id(after) != bucket_id(before);
	sum.in_place = true;
	return sum;
}

void Transaction::write(const StagedRules &s, const CompiledRules &c, bool unused)
{
	const Snapshot &before = s.before;
	// Nothing is known of the idle sets while they are written; packets
	// and readers use the live ones.
	uint32_t zero = 0;
	if (before.active.sync) {
		struct sluice_active writing = before.active;
		writing.sync = 0;
		write_active(maps_, writing);
	}
	struct sluice_meta meta = before.meta;
	meta.next_rule_id = s.next_id;
	map_update(maps_.meta.get(), &zero, &meta, "sluice metadata");

	// The idle set is written in place (the maps are mapped into this
	// process), entry by entry where it differs: the live set is never
	// touched. Only what this change may touch is mapped: slots below both
	// high-water marks, and the idle set's ranges of lists and blocks.
	uint32_t upto = reach(maps_, before.active), high = 0;
	for (const auto &r : s.after)
		high = std::max(high, r.slot + 1);
	uint32_t bound = std::max(upto, high);
	MappedArray rules(maps_.rules.get(), 0, 2 * bound), infos(maps_.rule_info.get(), 0, 2 * bound);
	write_idle_rules(s, unused, rules, infos, c.rules_set, upto, high);
	Trie6Writer trie6(maps_.match6.get(), default_run_dir(), before.active.set);
	write_idle_lookups(c, trie6);
	fail_point("rules-written");
	bans_before_switch(maps_, s.after);
	trie6.switched(switch_sets(s, c, unused, rules, infos, bound, high));
	bans_after_switch(maps_, s.after); // a deleted rule's bans go with it
	retire_buckets(before, s.after);
}

void Transaction::write_idle_rules(const StagedRules &s, bool unused, const MappedArray &rules,
				   const MappedArray &infos, uint32_t rset, uint32_t upto, uint32_t high)
{
	uint32_t n = maps_.max_rules();
	std::vector<uint32_t> new_slots;
	std::vector<bool> in_after(n);
	std::vector<uint32_t> id_in_slot(n); // the live set's rule id of each slot
	for (const auto &r : s.before.rules)
		id_in_slot[r.slot] = r.id;
	for (const auto &r : s.after) {
		in_after[r.slot] = true;
		// A slot whose rule is new gets zeroed counters; a kept rule keeps its own.
		if (id_in_slot[r.slot] != r.id)
			new_slots.push_back(r.slot);
		rules.put(sluice_rule_index(r.slot, rset), to_datapath(r));
		infos.put(sluice_rule_index(r.slot, rset), to_info(r));
	}
	// Slots the idle set may hold leftovers in: those read as used, and any
	// beyond what was read (a killed change may have written there) up to
	// the new high-water mark, which bounds what later reads look at.
	uint32_t bound = std::max(upto, high);
	for (uint32_t slot = 0; slot < bound; slot++) {
		if ((s.before.idle_used[slot] || (slot >= upto && slot < high)) && !in_after[slot]) {
			rules.put(sluice_rule_index(slot, rset), sluice_rule{});
			infos.put(sluice_rule_index(slot, rset), sluice_rule_info{});
		}
	}
	if (!unused) {
		std::vector<uint8_t> zero_counters(sizeof(struct sluice_rule_counters) * possible_cpus() *
						   new_slots.size());
		map_update_batch(maps_.rule_counters.get(), new_slots.data(), zero_counters.data(), new_slots.size(),
				 "rule counters");
	}
}

void Transaction::write_idle_lookups(const CompiledRules &c, Trie6Writer &trie6)
{
	const MatchLists &lists = c.lists;
	uint32_t set = c.set;
	uint32_t list_count = static_cast<uint32_t>(lists.lists.size());
	MappedArray list_map(maps_.lists.get(), lists.base, lists.base + list_count),
		blocks(maps_.dir4_blocks.get(), c.block_base, c.block_base + c.blocks),
		top(maps_.dir4_top.get(), set * SLUICE_DIR_TOP_SIZE, (set + 1) * SLUICE_DIR_TOP_SIZE);
	for (size_t i = 0; i < lists.lists.size(); i++)
		list_map.put(lists.base + static_cast<uint32_t>(i), lists.lists[i]);
	// The IPv4 table's blocks are built where they go, in the idle set's
	// range (checked to fit by prepare; never the live set's). The top
	// level is built apart: an array's entries are 8 bytes apart in the
	// mapping, and its values 4.
	blocks.check_writable();
	std::vector<uint32_t> top_level(SLUICE_DIR_TOP_SIZE);
	build_dir4_into(c.prefixes4, c.block_base, c.blocks_per_set, top_level.data(),
			blocks.at<struct sluice_dir_block>(c.block_base));
	for (uint32_t i = 0; i < SLUICE_DIR_TOP_SIZE; i++)
		top.put(set * SLUICE_DIR_TOP_SIZE + i, top_level[i]);
	trie6.write(set, lists);
}

namespace {

/// How many slots below `bound` (0, 1, or 2 meaning more) hold rule entries
/// that differ between the two rule sets, and the last such slot + 1.
std::pair<uint32_t, uint32_t> differing_slots(const MappedArray &rules, const MappedArray &infos, uint32_t rset,
					      uint32_t bound)
{
	uint32_t differing = 0, count = 0;
	for (uint32_t slot = 0; slot < bound && count < 2; slot++) {
		const auto *a = rules.at<struct sluice_rule>(sluice_rule_index(slot, rset));
		const auto *b = rules.at<struct sluice_rule>(sluice_rule_index(slot, rset ^ 1));
		if (a->id == 0 && b->id == 0)
			continue;
		if (std::memcmp(a, b, sizeof(*a)) == 0 &&
		    std::memcmp(infos.at<struct sluice_rule_info>(sluice_rule_index(slot, rset)),
				infos.at<struct sluice_rule_info>(sluice_rule_index(slot, rset ^ 1)),
				sizeof(struct sluice_rule_info)) == 0)
			continue;
		count++;
		differing = slot + 1;
	}
	return {count, differing};
}

} // namespace

uint32_t Transaction::switch_sets(const StagedRules &s, const CompiledRules &c, bool unused, const MappedArray &rules,
				  const MappedArray &infos, uint32_t bound, uint32_t high)
{
	// One word, and the new rule set is live. The sets left idle hold the
	// rules and lookups it replaced: what the next change can skip.
	uint32_t rset = c.rules_set;
	std::atomic_thread_fence(std::memory_order_seq_cst); // every write above before the flip
	struct sluice_active active = s.before.active;
	active.set = sluice_sets_switch(active.set, rset, c.set);
	active.slots[rset] = high;
	active.sync = 0;
	if (same_lookups(s.before.rules, s.after, maps_.max_rules()))
		active.sync |= SLUICE_SYNC_LOOKUPS;
	// With one differing slot at most, the next edit writes two slots and
	// flips the rules alone, whatever this change did to the lookups.
	auto [count, differing] = differing_slots(rules, infos, rset, bound);
	if (count < 2 && differing <= SLUICE_SYNC_SLOT)
		active.sync |= SLUICE_SYNC_RULES | differing;
	write_active(maps_, active);

	// With many rule entries apart, the retired ones are brought up to date
	// once no packet can still be reading them, so that the next edit goes
	// in place without copying them itself (a command killed in between
	// leaves the word without SLUICE_SYNC_RULES, and that edit copies them).
	if (count >= 2 && (unused || wait_for_packets_in_flight())) {
		copy_rule_entries(rules, infos, rset, bound);
		std::atomic_thread_fence(std::memory_order_seq_cst);
		active.sync |= SLUICE_SYNC_RULES;
		write_active(maps_, active);
	}
	return active.set;
}

void Transaction::retire_buckets(const Snapshot &before, const std::vector<InstalledRule> &after)
{
	// A command killed before this leaves buckets of ids that are never
	// used again, which age out.
	std::unordered_set<uint32_t> gone;
	for (const auto &r : before.rules)
		gone.insert(bucket_id(r));
	for (const auto &r : after)
		gone.erase(bucket_id(r));
	std::vector<InstalledRule> retired; // their events still in flight keep their names
	for (const auto &r : before.rules)
		if (gone.count(bucket_id(r)))
			retired.push_back(r);
	if (retired.empty())
		return;
	record_retired_rules(before.meta.loaded_ns, retired);
	purge_buckets(maps_, [&gone](uint32_t id) { return gone.count(id) > 0; });
}

std::shared_ptr<const PreparedRules> Transaction::prepare_empty(std::vector<RuleSpec> desired, RuleRoom room,
								 const SetContents *sets)
{
	auto p = std::make_shared<PreparedRules>();
	p->room = room;
	p->before.idle_used.assign(room.rules, false);
	p->after.reserve(desired.size());
	SetSource source;
	if (sets)
		source.sets = *sets;
	for (auto &spec : desired) {
		source.resolve(spec);
		check_policy_rule(spec, nullptr);
		p->after.push_back({0, NO_SLOT, std::move(spec)});
	}
	p->compiled = prepare(p->before, p->after, p->next_id, {}, room, source);
	return p;
}

void Transaction::check_fits(const std::vector<RuleSpec> &rules, RuleRoom room, const SetContents *sets)
{
	prepare_empty(rules, room, sets);
}

ChangeSummary Transaction::check_adds_on_empty(const std::vector<RuleSpec> &rules,
					       const std::vector<std::string> &where, bool import, RuleRoom room)
{
	// run() on a snapshot of an empty table of that size, as load() makes it.
	StagedRules s;
	s.before.idle_used.assign(room.rules, false);
	SetSource source;
	for (size_t i = 0; i < rules.size(); i++) {
		TransactionStep step{import ? TransactionStep::Kind::import : TransactionStep::Kind::add};
		step.spec = rules[i];
		step.where = i < where.size() && !where[i].empty() ? where[i] + ": " : "";
		source.resolve(step.spec);
		stage(s, step);
	}
	prepare(s.before, s.after, s.next_id, s.where, room, source);
	return summarize(s.before, s.after, s.edited);
}

std::vector<InstalledRule> Transaction::prepared_rules(const PreparedRules &prepared)
{
	// What the writer puts in the maps and read() takes back out of them.
	std::vector<InstalledRule> out;
	out.reserve(prepared.after.size());
	for (const auto &r : prepared.after) {
		InstalledRule back = from_maps(to_datapath(r), to_info(r));
		back.slot = r.slot;
		out.push_back(std::move(back));
	}
	std::sort(out.begin(), out.end(), match_order);
	return out;
}

// RuleTable's shorthands: each a transaction of one step.

InstalledRule RuleTable::add(RuleSpec spec) { return Transaction(*this).add(std::move(spec)).commit().added.front(); }

std::vector<InstalledRule> RuleTable::add_many(std::vector<RuleSpec> specs, const std::vector<std::string> &where)
{
	Transaction t(*this);
	for (size_t i = 0; i < specs.size(); i++)
		t.import(std::move(specs[i]), i < where.size() ? where[i]
					      : specs.size() > 1 ? "rule " + std::to_string(i + 1)
								 : "");
	return t.commit().added;
}

InstalledRule RuleTable::remove(std::string_view name_or_id)
{
	return Transaction(*this).remove(std::string(name_or_id)).commit().removed.front();
}

size_t RuleTable::flush() { return Transaction(*this).flush().commit().removed.size(); }

InstalledRule RuleTable::edit(std::string_view name_or_id, const RuleEdit &e)
{
	return Transaction(*this).edit(std::string(name_or_id), e).commit().changed.front();
}

std::optional<InstalledRule> RuleTable::edit_in_place(std::string_view name_or_id, const RuleEdit &e)
{
	Transaction t(*this);
	t.edit(std::string(name_or_id), e);
	t.done_ = true;
	if (auto sum = t.commit_one_edit(t.steps_[0]))
		return sum->changed.front();
	return std::nullopt;
}

void RuleTable::restore(std::vector<InstalledRule> rules, uint32_t next_id)
{
	Transaction(*this).restore(std::move(rules), next_id).commit();
}

} // namespace sluice
