// SPDX-License-Identifier: GPL-2.0-only
#include "rule_table.h"
#include "bans.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "dir4.h"
#include "events.h"
#include "name_index.h"
#include "sources.h"

namespace sluice {

struct RuleTable::Snapshot {
	struct sluice_active active = {}; ///< the live set, and how far each set's slots go
	std::vector<InstalledRule> rules;
	struct sluice_meta meta = {};
	std::vector<bool> idle_used; ///< slots the idle set holds a rule in (stale entries to clear)
};

namespace {

struct sluice_active read_active(const MapSet &maps)
{
	uint32_t zero = 0;
	struct sluice_active active = {};
	if (bpf_map_lookup_elem(maps.active.get(), &zero, &active))
		throw_errno("cannot read the live rule set's number", errno);
	return active;
}

template <class Key> Key lpm_key(const Cidr &c, uint32_t set)
{
	Key k = {};
	k.prefixlen = SLUICE_LPM_SET_BITS + static_cast<__u32>(c.prefix_len);
	k.set = static_cast<__u8>(set);
	std::memcpy(k.addr, c.addr.data(), sizeof(k.addr));
	return k;
}

/// An IPv6 trie key's bytes, padding included, as the kernel compares them.
/// A fixed-size array, not a vector: GCC 12 at -O3 warns falsely
/// (-Wstringop-overread) on comparing two vectors' bytes.
using LpmV6Bytes = std::array<uint8_t, sizeof(struct sluice_lpm_v6)>;

LpmV6Bytes key_bytes(const struct sluice_lpm_v6 &k)
{
	LpmV6Bytes b;
	std::memcpy(b.data(), &k, sizeof(k));
	return b;
}

bool same_list(const struct sluice_match_list &a, const struct sluice_match_list &b)
{
	return std::memcmp(&a, &b, sizeof(a)) == 0;
}

/// Writes one set's IPv6 prefixes: the trie ends up holding exactly each
/// prefix's first list (the list itself, so that a packet reads it with the
/// lookup) under that set, whatever it held there before.
void write_v6(int fd, uint32_t set, const MatchLists &lists)
{
	// What the set should hold, by key.
	std::map<LpmV6Bytes, struct sluice_match_list> wanted;
	for (const auto &[prefix, first] : lists.first)
		if (prefix.family == 6)
			wanted.emplace(key_bytes(lpm_key<struct sluice_lpm_v6>(prefix, set)), lists.at(first));
	// What the set held before (a change two transactions old, or a killed
	// one's leftovers): whatever is not wanted goes, and what it holds as
	// wanted is not written again.
	std::vector<struct sluice_lpm_v6> stale;
	std::set<LpmV6Bytes> held;
	auto check = [&](const struct sluice_lpm_v6 &k, const struct sluice_match_list *value) {
		if (k.set != set)
			return;
		auto it = wanted.find(key_bytes(k));
		if (it == wanted.end())
			stale.push_back(k);
		else if (value && same_list(*value, it->second))
			held.insert(it->first);
	};
	// The keys in batches of a syscall each where the kernel reads a trie
	// in batches, else one syscall a key.
	constexpr uint32_t BATCH = 4096;
	std::vector<struct sluice_lpm_v6> batch(BATCH);
	std::vector<struct sluice_match_list> batch_values(BATCH);
	struct sluice_lpm_v6 cursor = {};
	bool batched = true;
	for (bool first = true;; first = false) {
		uint32_t count = BATCH;
		LIBBPF_OPTS(bpf_map_batch_opts, opts);
		int err = bpf_map_lookup_batch(fd, first ? nullptr : &cursor, &cursor, batch.data(), batch_values.data(),
					       &count, &opts);
		int saved = errno;
		if (err && saved != ENOENT && first) {
			batched = false;
			break;
		}
		for (uint32_t i = 0; i < count; i++)
			check(batch[i], &batch_values[i]);
		if (err) {
			if (saved != ENOENT)
				throw_errno("cannot read the IPv6 match lists", saved);
			break;
		}
	}
	struct sluice_lpm_v6 cur, next;
	for (int err = batched ? -1 : bpf_map_get_next_key(fd, nullptr, &next); !err;
	     err = bpf_map_get_next_key(fd, &cur, &next)) {
		cur = next;
		check(cur, nullptr);
	}
	for (const auto &k : stale)
		if (bpf_map_delete_elem(fd, &k) && errno != ENOENT)
			throw_errno("cannot remove an IPv6 match list", errno);
	std::vector<struct sluice_lpm_v6> keys;
	std::vector<struct sluice_match_list> values;
	for (const auto &[bytes, list] : wanted) {
		if (held.count(bytes))
			continue;
		struct sluice_lpm_v6 k;
		std::memcpy(&k, bytes.data(), sizeof(k));
		keys.push_back(k);
		values.push_back(list);
	}
	__u32 n = static_cast<__u32>(keys.size());
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	if (n == 0 || bpf_map_update_batch(fd, keys.data(), values.data(), &n, &opts) == 0)
		return;
	for (size_t i = 0; i < keys.size(); i++) // kernels without batch updates on LPM tries
		map_update(fd, &keys[i], &values[i], "IPv6 match list");
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
		const InstalledRule *o = by_slot[r.slot];
		if (!o || o->id != r.id || !same_selector(o->spec, r.spec))
			return false;
	}
	return true;
}

constexpr uint32_t NO_SLOT = ~0u;

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

} // namespace

RuleTable::Snapshot RuleTable::read() const
{
	Snapshot s;
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(maps_.meta.get(), &zero, &s.meta))
		throw_errno("cannot read sluice metadata", errno);
	s.active = read_active(maps_);
	uint32_t n = maps_.max_rules();
	// Both sets' entries up to the higher of their high-water marks: the
	// live set's rules, and the idle set's leftovers to clear.
	uint32_t reach = std::min(n, std::max(s.active.slots[0], s.active.slots[1]));
	MappedArray dps(maps_.rules.get(), 0, 2 * reach), infos(maps_.rule_info.get(), 0, 2 * reach);
	s.idle_used.assign(n, false);
	for (uint32_t slot = 0; slot < reach; slot++) {
		s.idle_used[slot] = dps.at<struct sluice_rule>(sluice_rule_index(slot, s.active.set ^ 1))->id != 0;
		uint32_t i = sluice_rule_index(slot, s.active.set);
		struct sluice_rule dp = *dps.at<struct sluice_rule>(i);
		if (dp.id == 0)
			continue;
		InstalledRule r = from_maps(dp, *infos.at<struct sluice_rule_info>(i));
		r.slot = slot;
		s.rules.push_back(r);
	}
	return s;
}

std::vector<InstalledRule> RuleTable::list() const
{
	auto rules = read().rules;
	std::sort(rules.begin(), rules.end(), match_order);
	return rules;
}

namespace {

/// One entry of an array map, read with a syscall.
template <class V> V read_entry(int fd, uint32_t index, const char *what)
{
	V v = {};
	if (bpf_map_lookup_elem(fd, &index, &v))
		throw_errno(std::string("cannot read ") + what, errno);
	return v;
}

/// The live set's slot of the rule that `key` names (rule_is: its name, or
/// its id in decimal), the first in slot order as read() lists them; NO_SLOT
/// if none. Reads the names in place and one rule entry, building nothing.
uint32_t locate(int rules_fd, const MappedArray &infos, const struct sluice_active &active, uint32_t reach,
		std::string_view key)
{
	// An id is written as std::to_string writes it: digits, no leading zero.
	uint64_t id = 0;
	bool by_id = !key.empty() && key.size() <= 10 && (key[0] != '0' || key.size() == 1);
	for (char c : key)
		by_id = by_id && c >= '0' && c <= '9';
	if (by_id)
		std::from_chars(key.data(), key.data() + key.size(), id);
	for (uint32_t slot = 0; slot < reach; slot++) {
		uint32_t i = sluice_rule_index(slot, active.set);
		const auto *info = infos.at<struct sluice_rule_info>(i);
		size_t len = strnlen(info->name, sizeof(info->name));
		if (!(len == key.size() && std::memcmp(info->name, key.data(), len) == 0) &&
		    !(by_id && info->rule_id == id))
			continue;
		// An empty slot (id 0) holds no rule, whatever its name says.
		if (read_entry<struct sluice_rule>(rules_fd, i, "a rule").id != 0)
			return slot;
	}
	return NO_SLOT;
}

[[noreturn]] void no_rule(std::string_view key)
{
	throw Error("no rule named '" + std::string(key) + "' (see `sluice rule list`)");
}

} // namespace

const MappedArray &RuleTable::infos_upto(uint32_t reach) const
{
	if (!infos_ || infos_->size() < 2 * reach)
		infos_ = std::make_unique<MappedArray>(maps_.rule_info.get(), 0, 2 * reach);
	return *infos_;
}

InstalledRule RuleTable::find(std::string_view key) const
{
	struct sluice_active active = read_active(maps_);
	uint32_t reach = std::min(maps_.max_rules(), std::max(active.slots[0], active.slots[1]));
	const MappedArray &infos = infos_upto(reach);
	uint32_t slot = locate(maps_.rules.get(), infos, active, reach, key);
	if (slot == NO_SLOT)
		no_rule(key);
	uint32_t i = sluice_rule_index(slot, active.set);
	InstalledRule r = from_maps(read_entry<struct sluice_rule>(maps_.rules.get(), i, "a rule"),
				    *infos.at<struct sluice_rule_info>(i));
	r.slot = slot;
	return r;
}

struct sluice_rule RuleTable::datapath_rule(uint32_t slot) const
{
	uint32_t index = sluice_rule_index(slot, read_active(maps_).set);
	struct sluice_rule dp = {};
	if (bpf_map_lookup_elem(maps_.rules.get(), &index, &dp))
		throw_errno("cannot read rule slot " + std::to_string(slot), errno);
	return dp;
}

InstalledRule RuleTable::add(RuleSpec spec)
{
	return add_many({std::move(spec)}, {}, false).front();
}

std::vector<InstalledRule> RuleTable::add_many(std::vector<RuleSpec> specs, const std::vector<std::string> &where_of,
						bool skip_present)
{
	Snapshot before = read();
	uint32_t next_id = std::max<uint32_t>(before.meta.next_rule_id, 1);
	std::vector<InstalledRule> after = before.rules;
	std::vector<std::string> where(after.size());
	std::map<std::tuple<Cidr, Proto, uint16_t, uint16_t>, const RuleSpec *> by_selector;
	for (const auto &r : before.rules)
		by_selector[{r.spec.cidr, r.spec.proto, r.spec.dport.lo, r.spec.dport.hi}] = &r.spec;
	for (size_t i = 0; i < specs.size(); i++) {
		where.push_back(i < where_of.size() ? where_of[i] + ": "
				: specs.size() > 1   ? "rule " + std::to_string(i + 1) + ": "
						     : "");
		try {
			validate_rule(specs[i]);
		} catch (const Error &e) {
			throw Error(where.back() + e.what());
		}
		// A rule present already, as asked, is not added twice: an import
		// can be run again. (An unnamed one is compared without its name.)
		RuleSpec &spec = specs[i];
		auto same = by_selector.find({spec.cidr, spec.proto, spec.dport.lo, spec.dport.hi});
		bool present = false;
		if (same != by_selector.end()) {
			RuleSpec named = spec;
			if (named.name.empty())
				named.name = same->second->name;
			present = same_spec(*same->second, named);
		}
		if (present && skip_present) {
			where.pop_back();
			continue;
		}
		after.push_back({0, NO_SLOT, std::move(spec)});
	}
	commit(before, after, next_id, where);
	return {after.begin() + static_cast<long>(before.rules.size()), after.end()};
}

InstalledRule RuleTable::remove(std::string_view name_or_id)
{
	Snapshot before = read();
	std::vector<InstalledRule> after;
	std::optional<InstalledRule> gone;
	for (const auto &r : before.rules) {
		if (!gone && rule_is(r, name_or_id))
			gone = r;
		else
			after.push_back(r);
	}
	if (!gone)
		throw Error("no rule named '" + std::string(name_or_id) + "' (see `sluice rule list`)");
	commit(before, after, before.meta.next_rule_id);
	return *gone;
}

size_t RuleTable::flush()
{
	Snapshot before = read();
	std::vector<InstalledRule> after;
	commit(before, after, before.meta.next_rule_id);
	return before.rules.size();
}

namespace {

/// The rule as `e` edits it: its spec, and a new bucket id from next_id if
/// the edit restarts its buckets. Throws if the edit does not apply.
InstalledRule edited(const InstalledRule &r, const RuleEdit &e, uint32_t &next_id)
{
	RuleSpec spec = r.spec;
	if (e.name)
		spec.name = *e.name;
	if (e.rate)
		spec.rate = *e.rate;
	if (e.algo)
		spec.algo = *e.algo;
	bool default_burst_before = r.spec.action == Action::limit && r.spec.has_burst() &&
				    r.spec.burst == default_burst(r.spec.rate);
	if (e.burst)
		spec.burst = *e.burst;
	else if (!spec.has_burst() || default_burst_before)
		spec.burst = 0; // no burst for a window; a default burst follows the rate
	if (e.warmup_ns)
		spec.warmup_ns = *e.warmup_ns;
	if (e.shadow)
		spec.shadow = *e.shadow;
	if (e.layered)
		spec.layered = *e.layered;
	if (e.per_prefix)
		spec.per_prefix = *e.per_prefix;
	if (e.scope)
		spec.scope = *e.scope;
	if (e.ban.ns)
		spec.ban.ns = *e.ban.ns;
	if (e.ban.after)
		spec.ban.after = *e.ban.after;
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

} // namespace

std::optional<InstalledRule> RuleTable::edit_in_place(std::string_view name_or_id, const RuleEdit &e)
{
	// The rule entries flip alone, on the live lookups (an edit keeps every
	// selector, so they hold as they are). When the idle rule set is known
	// to be the live one but for one slot, the change is that slot and the
	// edited rule's, nothing else; otherwise (after a change of many rules,
	// or a killed one) the idle entries are first caught up with the live
	// ones where they differ, which the lookups never need.
	struct sluice_active active = read_active(maps_);
	bool in_step = active.sync & SLUICE_SYNC_RULES;
	uint32_t zero = 0;
	struct sluice_meta meta = {};
	if (bpf_map_lookup_elem(maps_.meta.get(), &zero, &meta))
		throw_errno("cannot read sluice metadata", errno);
	uint32_t reach = std::min(maps_.max_rules(), std::max(active.slots[0], active.slots[1]));
	const MappedArray &infos = infos_upto(reach);
	int rules = maps_.rules.get();
	uint32_t slot = locate(rules, infos, active, reach, name_or_id);
	if (slot == NO_SLOT)
		no_rule(name_or_id);
	uint32_t live = sluice_rules_set(active.set), idle = live ^ 1;
	InstalledRule before = from_maps(read_entry<struct sluice_rule>(rules, sluice_rule_index(slot, live), "a rule"),
					 *infos.at<struct sluice_rule_info>(sluice_rule_index(slot, live)));
	before.slot = slot;
	uint32_t next_id = meta.next_rule_id;
	InstalledRule after = edited(before, e, next_id);

	// What the whole-set check (prepare) would look at, and could refuse,
	// goes the long way: a layered rule more (the per-address limit) and a
	// new name (uniqueness). The selector, id and slot never change here.
	if (after.spec.layered && !before.spec.layered)
		return std::nullopt;
	if (after.spec.name != before.spec.name && locate(rules, infos, active, reach, after.spec.name) != NO_SLOT)
		return std::nullopt;

	// Nothing is known of the idle set while it is written. Its entries are
	// written with syscalls: a few, where mapping the arrays costs a
	// page-table entry per page of them.
	struct sluice_active writing = active;
	writing.sync = 0;
	map_update(maps_.active.get(), &zero, &writing, "the live rule set's number");
	if (next_id != meta.next_rule_id) {
		meta.next_rule_id = next_id;
		map_update(maps_.meta.get(), &zero, &meta, "sluice metadata");
	}
	auto write = [&](uint32_t s, const struct sluice_rule &dp, const struct sluice_rule_info &info) {
		uint32_t i = sluice_rule_index(s, idle);
		map_update(rules, &i, &dp, "a rule");
		map_update(maps_.rule_info.get(), &i, &info, "a rule's name");
	};
	uint32_t other = (active.sync & SLUICE_SYNC_SLOT);
	if (!in_step) {
		copy_rule_entries(MappedArray(rules, 0, 2 * reach), infos, live, reach);
	} else if (other && other - 1 != slot) {
		uint32_t k = other - 1, i = sluice_rule_index(k, live);
		write(k, read_entry<struct sluice_rule>(rules, i, "a rule"),
		      read_entry<struct sluice_rule_info>(maps_.rule_info.get(), i, "a rule's name"));
	}
	write(slot, to_datapath(after), to_info(after));
	if (after.spec.ban.ns)
		bans_before_switch(maps_, {after});

	// The switch. The rule set left idle is the old one: it differs in this
	// slot. The lookups stay, and so does what is known of their idle set.
	std::atomic_thread_fence(std::memory_order_seq_cst);
	struct sluice_active next = active;
	next.set = sluice_sets_switch(active.set, idle, sluice_lookup_set(active.set));
	next.slots[idle] = active.slots[live];
	next.sync = (active.sync & SLUICE_SYNC_LOOKUPS) | SLUICE_SYNC_RULES | (slot + 1);
	map_update(maps_.active.get(), &zero, &next, "the live rule set's number");
	if (before.spec.ban.ns && !after.spec.ban.ns)
		bans_after_switch(maps_, list()); // its bans are lifted with its --ban

	if (bucket_id(after) != bucket_id(before)) {
		uint32_t gone = bucket_id(before);
		record_retired_rules(meta.loaded_ns, {before}); // its events still in flight keep its name
		purge_buckets(maps_, [gone](uint32_t id) { return id == gone; });
	}
	return after;
}

InstalledRule RuleTable::edit(std::string_view name_or_id, const RuleEdit &e)
{
	if (auto r = edit_in_place(name_or_id, e))
		return *r;
	Snapshot before = read();
	uint32_t next_id = before.meta.next_rule_id;
	std::vector<InstalledRule> after = before.rules;
	auto it = std::find_if(after.begin(), after.end(), [&](const auto &r) { return rule_is(r, name_or_id); });
	if (it == after.end())
		no_rule(name_or_id);
	*it = edited(*it, e, next_id);
	InstalledRule result = *it;
	commit(before, after, next_id);
	return result;
}

ChangeSummary RuleTable::replace(std::vector<RuleSpec> desired, bool dry_run)
{
	Snapshot before = read();
	uint32_t next_id = std::max<uint32_t>(before.meta.next_rule_id, 1);
	// The running rules and the kept ones by name.
	NameIndex running(before.rules.size()), kept(desired.size());
	auto running_name = [&before](uint32_t j) -> std::string_view { return before.rules[j].spec.name; };
	auto desired_name = [&desired](uint32_t j) -> std::string_view { return desired[j].name; };
	for (uint32_t i = 0; i < before.rules.size(); i++)
		running.insert(before.rules[i].spec.name, i, running_name);

	ChangeSummary sum;
	std::vector<InstalledRule> after;
	after.reserve(desired.size());
	for (uint32_t j = 0; j < desired.size(); j++) {
		RuleSpec &spec = desired[j];
		uint32_t at = spec.name.empty() ? NameIndex::NONE : running.find(spec.name, running_name);
		check_policy_rule(spec, at == NameIndex::NONE ? nullptr : &before.rules[at].spec);
		if (at == NameIndex::NONE) {
			after.push_back({0, NO_SLOT, spec});
			continue;
		}
		if (kept.insert(spec.name, j, desired_name) != j)
			throw Error("two rules are named '" + spec.name + "'");
		InstalledRule r = before.rules[at];
		if (!same_spec(r.spec, spec)) {
			if (edit_restarts_buckets(r.spec, spec)) {
				r.bucket_id = next_id++;
				sum.restarted++;
			}
			r.spec = spec;
			sum.changed.push_back(r);
		}
		after.push_back(r);
	}
	for (const auto &r : before.rules)
		if (kept.find(r.spec.name, desired_name) == NameIndex::NONE)
			sum.removed.push_back(r);
	commit(before, after, next_id, {}, dry_run);
	for (const auto &r : after)
		if (running.find(r.spec.name, running_name) == NameIndex::NONE)
			sum.added.push_back(r);
	return sum;
}

void RuleTable::check_policy_rule(RuleSpec &spec, const RuleSpec *running)
{
	if (spec.name.empty())
		throw Error("every rule of a policy needs a name");
	// A spec the same as a running rule's is that rule, valid as it
	// stands: only the others are checked (and their defaults filled).
	if (!running || !same_spec(*running, spec))
		validate_rule(spec);
}

void RuleTable::restore(std::vector<InstalledRule> rules, uint32_t next_id)
{
	Snapshot before = read();
	if (!before.rules.empty())
		throw Error("cannot restore rules into a table that holds rules");
	commit(before, rules, next_id);
}

struct sluice_rule_counters RuleTable::counters(uint32_t slot) const
{
	struct sluice_rule_counters sum = {};
	for (const auto &c : lookup_percpu<struct sluice_rule_counters>(maps_.rule_counters.get(), slot)) {
		sum.passed_packets += c.passed_packets;
		sum.passed_bytes += c.passed_bytes;
		sum.dropped_packets += c.dropped_packets;
		sum.dropped_bytes += c.dropped_bytes;
		sum.failopen_table += c.failopen_table;
		sum.passed_contention += c.passed_contention;
	}
	return sum;
}

/// A change ready to write into the idle set.
struct RuleTable::Compiled {
	uint32_t set = 0;       ///< the idle lookup set: lists, IPv4 table, IPv6 prefixes
	uint32_t rules_set = 0; ///< the idle rule set
	uint32_t block_base = 0, blocks_per_set = 0;
	MatchLists lists;
	/// The IPv4 prefixes and their lists, checked to fit: commit builds
	/// the table straight into the idle set.
	std::vector<std::pair<Cidr, uint32_t>> prefixes4;
	uint32_t blocks = 0; ///< how many that takes
};

namespace {


} // namespace

RuleTable::Compiled RuleTable::prepare(const Snapshot &before, std::vector<InstalledRule> &after, uint32_t &next_id,
				       const std::vector<std::string> &where, uint32_t n)
{
	// 1. Validate the whole new rule set and give new rules ids and slots.
	//    Nothing has been written yet: any error leaves the maps as they are.
	auto at = [&where](size_t i) { return i < where.size() ? where[i] : std::string(); };
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
	for (size_t i = 0; i < after.size(); i++) {
		InstalledRule &r = after[i];
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
						    " rules); delete rules, or raise --max-rules with `sluice apply`");
				r.slot = reused;
			}
			used[r.slot] = true;
		}
	}
	// Names and selectors are unique: the first rule to repeat one is named.
	// (The keys point into `after`, which stays put from here on.)
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

	// 2. Compile the idle set's lookup tables (throws if they do not fit).
	Compiled c;
	c.set = sluice_lookup_set(before.active.set) ^ 1;
	c.rules_set = sluice_rules_set(before.active.set) ^ 1;
	uint32_t list_capacity = n; // a list holds at least one rule
	c.lists = compile_match_lists(after, c.set * (n + 1) + 1, list_capacity);
	for (const auto &[prefix, first] : c.lists.first)
		if (prefix.family == 4)
			c.prefixes4.push_back({prefix, first});
	c.blocks_per_set = 2 * n; // enough for any n rules: see sluice_abi.h
	c.block_base = c.set * c.blocks_per_set;
	c.blocks = dir4_blocks_needed(c.prefixes4);
	check_dir4(c.prefixes4, c.blocks_per_set);
	return c;
}

void RuleTable::check_fits(const std::vector<RuleSpec> &rules, uint32_t max_rules) { prepare_empty(rules, max_rules); }

struct RuleTable::Prepared {
	Snapshot before; ///< an empty table's, as prepare_empty assumed it
	std::vector<InstalledRule> after;
	uint32_t next_id = 1;
	Compiled compiled;
};

std::shared_ptr<const RuleTable::Prepared> RuleTable::prepare_empty(std::vector<RuleSpec> desired, uint32_t max_rules)
{
	auto p = std::make_shared<Prepared>();
	p->before.idle_used.assign(max_rules, false);
	p->after.reserve(desired.size());
	for (auto &spec : desired) {
		check_policy_rule(spec, nullptr);
		p->after.push_back({0, NO_SLOT, std::move(spec)});
	}
	p->compiled = prepare(p->before, p->after, p->next_id, {}, max_rules);
	return p;
}

std::vector<InstalledRule> RuleTable::prepared_rules(const Prepared &prepared)
{
	// What write() puts in the maps and read() takes back out of them.
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

void RuleTable::install(const Prepared &prepared)
{
	Snapshot before = read();
	if (!before.rules.empty() || before.active.set != prepared.before.active.set ||
	    before.meta.next_rule_id > 1 || maps_.max_rules() != prepared.before.idle_used.size())
		throw Error("rules prepared for an empty table of " + std::to_string(prepared.before.idle_used.size()) +
			    " rules cannot go into this one");
	write(before, prepared.after, prepared.next_id, prepared.compiled, true);
}

void RuleTable::commit(const Snapshot &before, std::vector<InstalledRule> &after, uint32_t next_id,
		       const std::vector<std::string> &where, bool dry_run)
{
	Compiled c = prepare(before, after, next_id, where, maps_.max_rules());
	if (!dry_run)
		write(before, after, next_id, c);
}

void RuleTable::write(const Snapshot &before, const std::vector<InstalledRule> &after, uint32_t next_id,
		      const Compiled &c, bool unused)
{
	uint32_t n = maps_.max_rules();
	uint32_t set = c.set, rset = c.rules_set, block_base = c.block_base;
	const MatchLists &lists = c.lists;

	// 3. Write the idle sets in full: rules and lookups. Packets and readers
	//    use the live ones. Nothing is known of the idle sets while they are
	//    written.
	uint32_t zero = 0;
	if (before.active.sync) {
		struct sluice_active writing = before.active;
		writing.sync = 0;
		map_update(maps_.active.get(), &zero, &writing, "the live rule set's number");
	}
	struct sluice_meta meta = before.meta;
	meta.next_rule_id = next_id;
	map_update(maps_.meta.get(), &zero, &meta, "sluice metadata");

	std::vector<uint32_t> new_slots;
	std::vector<bool> in_after(n);
	std::vector<uint32_t> id_in_slot(n); // the live set's rule id of each slot
	for (const auto &r : before.rules)
		id_in_slot[r.slot] = r.id;
	// The idle set is written in place (the maps are mapped into this
	// process), entry by entry where it differs: the live set is never touched.
	uint32_t reach = std::min(n, std::max(before.active.slots[0], before.active.slots[1])), high = 0;
	for (const auto &r : after)
		high = std::max(high, r.slot + 1);
	// Only what this change may touch is mapped: slots below both marks,
	// and the idle set's ranges of lists and blocks.
	uint32_t bound = std::max(reach, high);
	MappedArray rules(maps_.rules.get(), 0, 2 * bound), infos(maps_.rule_info.get(), 0, 2 * bound);
	for (const auto &r : after) {
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
	for (uint32_t slot = 0; slot < bound; slot++) {
		if ((before.idle_used[slot] || (slot >= reach && slot < high)) && !in_after[slot]) {
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

	uint32_t list_count = static_cast<uint32_t>(lists.lists.size());
	MappedArray list_map(maps_.lists.get(), lists.base, lists.base + list_count),
		blocks(maps_.dir4_blocks.get(), block_base, block_base + c.blocks),
		top(maps_.dir4_top.get(), set * SLUICE_DIR_TOP_SIZE, (set + 1) * SLUICE_DIR_TOP_SIZE);
	for (size_t i = 0; i < lists.lists.size(); i++)
		list_map.put(lists.base + static_cast<uint32_t>(i), lists.lists[i]);
	// The IPv4 table's blocks are built where they go, in the idle set's
	// range (checked to fit by prepare; never the live set's). The top
	// level is built apart: an array's entries are 8 bytes apart in the
	// mapping, and its values 4.
	blocks.check_writable();
	std::vector<uint32_t> top_level(SLUICE_DIR_TOP_SIZE);
	build_dir4_into(c.prefixes4, block_base, c.blocks_per_set, top_level.data(),
			blocks.at<struct sluice_dir_block>(block_base));
	for (uint32_t i = 0; i < SLUICE_DIR_TOP_SIZE; i++)
		top.put(set * SLUICE_DIR_TOP_SIZE + i, top_level[i]);
	write_v6(maps_.match6.get(), set, lists);

	bans_before_switch(maps_, after);

	// 4. The switch: one word, and the new rule set is live. The sets left
	//    idle hold the rules and lookups it replaced: what the next change
	//    can skip.
	std::atomic_thread_fence(std::memory_order_seq_cst); // every write above before the flip
	struct sluice_active active = before.active;
	active.set = sluice_sets_switch(active.set, rset, set);
	active.slots[rset] = high;
	active.sync = 0;
	if (same_lookups(before.rules, after, n))
		active.sync |= SLUICE_SYNC_LOOKUPS;
	// Slots whose rule entries differ between the sets, below both marks:
	// with one at most, the next edit writes two slots and flips the rules
	// alone, whatever this change did to the lookups.
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
	if (count < 2 && differing <= SLUICE_SYNC_SLOT)
		active.sync |= SLUICE_SYNC_RULES | differing;
	map_update(maps_.active.get(), &zero, &active, "the live rule set's number");
	bans_after_switch(maps_, after); // a deleted rule's bans go with it

	// With many rule entries apart, the retired ones are brought up to date
	// once no packet can still be reading them, so that the next edit goes
	// in place without copying them itself (a command killed in between
	// leaves the word without SLUICE_SYNC_RULES, and that edit copies them).
	if (count >= 2 && (unused || wait_for_packets_in_flight())) {
		copy_rule_entries(rules, infos, rset, bound);
		std::atomic_thread_fence(std::memory_order_seq_cst);
		active.sync |= SLUICE_SYNC_RULES;
		map_update(maps_.active.get(), &zero, &active, "the live rule set's number");
	}

	// 5. Buckets no rule uses any more. A command killed before this leaves
	//    buckets of ids that are never used again, which age out.
	std::unordered_set<uint32_t> gone;
	for (const auto &r : before.rules)
		gone.insert(bucket_id(r));
	for (const auto &r : after)
		gone.erase(bucket_id(r));
	std::vector<InstalledRule> retired; // their events still in flight keep their names
	for (const auto &r : before.rules)
		if (gone.count(bucket_id(r)))
			retired.push_back(r);
	record_retired_rules(before.meta.loaded_ns, retired);
	if (!gone.empty())
		purge_buckets(maps_, [&gone](uint32_t id) { return gone.count(id) > 0; });
}

} // namespace sluice
