#include "rule_table.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "dir4.h"
#include "sources4.h"

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
	active.set &= 1;
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

/// Writes one set's IPv6 prefixes: the trie ends up holding exactly each
/// prefix's first list under that set, whatever it held there before.
void write_v6(int fd, uint32_t set, const MatchLists &lists)
{
	std::vector<struct sluice_lpm_v6> keys;
	std::vector<uint32_t> values;
	std::set<LpmV6Bytes> wanted;
	for (const auto &[prefix, first] : lists.first) {
		if (prefix.family != 6)
			continue;
		auto k = lpm_key<struct sluice_lpm_v6>(prefix, set);
		keys.push_back(k);
		values.push_back(first);
		wanted.insert(key_bytes(k));
	}
	// What the set held before (a change two transactions old, or a killed
	// one's leftovers): whatever is not wanted goes.
	std::vector<struct sluice_lpm_v6> stale;
	struct sluice_lpm_v6 cur, next;
	for (int err = bpf_map_get_next_key(fd, nullptr, &next); !err; err = bpf_map_get_next_key(fd, &cur, &next)) {
		cur = next;
		if (cur.set == set && !wanted.count(key_bytes(cur)))
			stale.push_back(cur);
	}
	for (const auto &k : stale)
		if (bpf_map_delete_elem(fd, &k) && errno != ENOENT)
			throw_errno("cannot remove an IPv6 match list", errno);
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
	auto purge = [&doomed]<class K, class V>(int fd) {
		std::vector<K> gone;
		for_each_entry<K, V>(fd, [&](const K &k, const V &) {
			if (doomed(k.rule_id))
				gone.push_back(k);
		});
		for (const auto &k : gone)
			bpf_map_delete_elem(fd, &k); // ENOENT: evicted meanwhile, fine
	};
	SourceTable4(maps.src4.get()).purge_if(doomed);
	purge.template operator()<struct sluice_src_v6, struct sluice_source_state>(maps.src6.get());
	purge.template operator()<struct sluice_src_v4, struct sluice_log_state>(maps.logs4.get());
	purge.template operator()<struct sluice_src_v6, struct sluice_log_state>(maps.logs6.get());
}

uint32_t bucket_of(const InstalledRule &r) { return r.bucket_id ? r.bucket_id : r.id; }

constexpr uint32_t NO_SLOT = ~0u;

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
	MappedArray dps(maps_.rules.get()), infos(maps_.rule_info.get());
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

InstalledRule RuleTable::find(std::string_view key) const
{
	for (const auto &r : read().rules) {
		if (rule_is(r, key))
			return r;
	}
	throw Error("no rule named '" + std::string(key) + "' (see `sluice rule list`)");
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

InstalledRule RuleTable::edit(std::string_view name_or_id, const RuleEdit &e)
{
	Snapshot before = read();
	uint32_t next_id = before.meta.next_rule_id;
	std::vector<InstalledRule> after = before.rules;
	auto it = std::find_if(after.begin(), after.end(), [&](const auto &r) { return rule_is(r, name_or_id); });
	if (it == after.end())
		throw Error("no rule named '" + std::string(name_or_id) + "' (see `sluice rule list`)");
	RuleSpec spec = it->spec;
	if (e.name)
		spec.name = *e.name;
	if (e.rate)
		spec.rate = *e.rate;
	if (e.algo)
		spec.algo = *e.algo;
	bool default_burst_before = it->spec.action == Action::limit && it->spec.has_burst() &&
				    it->spec.burst == default_burst(it->spec.rate);
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
	if (spec.action != Action::limit && (e.rate || e.burst || e.algo || e.warmup_ns || e.per_prefix))
		throw Error("rule '" + it->spec.name + "' is an " + std::string(action_name(spec.action)) +
			    " rule: --rate, --burst, --algo, --warmup and --per apply to --rate rules");
	validate_rule(spec);
	if (edit_restarts_buckets(it->spec, spec))
		it->bucket_id = next_id++;
	it->spec = spec;
	InstalledRule edited = *it;
	commit(before, after, next_id);
	return edited;
}

ChangeSummary RuleTable::replace(std::vector<RuleSpec> desired, bool dry_run)
{
	Snapshot before = read();
	uint32_t next_id = std::max<uint32_t>(before.meta.next_rule_id, 1);
	std::map<std::string, const InstalledRule *> running;
	for (const auto &r : before.rules)
		running[r.spec.name] = &r;

	ChangeSummary sum;
	std::vector<InstalledRule> after;
	std::set<std::string> kept;
	for (auto &spec : desired) {
		if (spec.name.empty())
			throw Error("every rule of a policy needs a name");
		validate_rule(spec);
		auto it = running.find(spec.name);
		if (it == running.end()) {
			after.push_back({0, NO_SLOT, spec});
			continue;
		}
		if (!kept.insert(spec.name).second)
			throw Error("two rules are named '" + spec.name + "'");
		InstalledRule r = *it->second;
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
		if (!kept.count(r.spec.name))
			sum.removed.push_back(r);
	commit(before, after, next_id, {}, dry_run);
	for (const auto &r : after)
		if (!running.count(r.spec.name))
			sum.added.push_back(r);
	return sum;
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
	uint32_t set = 0, block_base = 0;
	MatchLists lists;
	Dir4Tables dir;
};

namespace {

/// A rule's selector (prefix, protocol, ports) for hashing, as
/// same_selector compares them.
struct SelectorHash {
	size_t operator()(const RuleSpec *s) const
	{
		uint64_t h = 0xcbf29ce484222325ULL;
		auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
		uint64_t a, b;
		std::memcpy(&a, s->cidr.addr.data(), 8);
		std::memcpy(&b, s->cidr.addr.data() + 8, 8);
		mix(a);
		mix(b);
		mix(uint64_t(s->cidr.prefix_len) << 8 | uint64_t(s->cidr.family) << 16 | uint64_t(s->proto) << 24 |
		    uint64_t(s->dport.lo) << 32 | uint64_t(s->dport.hi) << 48);
		return h ^ (h >> 29);
	}
};
struct SelectorEqual {
	bool operator()(const RuleSpec *a, const RuleSpec *b) const { return same_selector(*a, *b); }
};

} // namespace

RuleTable::Compiled RuleTable::prepare(const Snapshot &before, std::vector<InstalledRule> &after, uint32_t &next_id,
				       const std::vector<std::string> &where, uint32_t n, bool build_tables)
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
	std::unordered_map<std::string_view, size_t> seen;
	std::unordered_map<const RuleSpec *, size_t, SelectorHash, SelectorEqual> selectors;
	seen.reserve(after.size());
	selectors.reserve(after.size());
	for (size_t i = 0; i < after.size(); i++) {
		const RuleSpec &s = after[i].spec;
		if (!seen.emplace(s.name, i).second)
			throw Error(at(i) + "a rule named '" + s.name + "' exists already");
		auto [it, added] = selectors.emplace(&s, i);
		if (!added)
			throw Error(at(i) + "rule '" + after[it->second].spec.name +
				    "' already selects the same traffic; delete it first");
	}

	// 2. Compile the idle set's lookup tables (throws if they do not fit).
	Compiled c;
	c.set = before.active.set ^ 1;
	uint32_t list_capacity = n; // a list holds at least one rule
	c.lists = compile_match_lists(after, c.set * (n + 1) + 1, list_capacity);
	std::vector<std::pair<Cidr, uint32_t>> prefixes4;
	for (const auto &[prefix, first] : c.lists.first)
		if (prefix.family == 4)
			prefixes4.push_back({prefix, first});
	uint32_t blocks_per_set = 2 * n; // enough for any n rules: see sluice_abi.h
	c.block_base = c.set * blocks_per_set;
	if (build_tables)
		c.dir = build_dir4(prefixes4, c.block_base, blocks_per_set);
	else
		check_dir4(prefixes4, blocks_per_set);
	return c;
}

void RuleTable::check_fits(const std::vector<RuleSpec> &rules, uint32_t max_rules)
{
	Snapshot empty;
	empty.idle_used.assign(max_rules, false);
	std::vector<InstalledRule> after;
	after.reserve(rules.size());
	for (const auto &spec : rules)
		after.push_back({0, NO_SLOT, spec});
	uint32_t next_id = 1;
	prepare(empty, after, next_id, {}, max_rules, false);
}

void RuleTable::commit(const Snapshot &before, std::vector<InstalledRule> &after, uint32_t next_id,
		       const std::vector<std::string> &where, bool dry_run)
{
	uint32_t n = maps_.max_rules();
	Compiled c = prepare(before, after, next_id, where, n);
	if (dry_run)
		return;
	uint32_t set = c.set, block_base = c.block_base;
	const MatchLists &lists = c.lists;
	const Dir4Tables &dir = c.dir;

	// 3. Write the idle set in full. Packets and readers use the live one.
	uint32_t zero = 0;
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
	MappedArray rules(maps_.rules.get()), infos(maps_.rule_info.get());
	for (const auto &r : after) {
		in_after[r.slot] = true;
		// A slot whose rule is new gets zeroed counters; a kept rule keeps its own.
		if (id_in_slot[r.slot] != r.id)
			new_slots.push_back(r.slot);
		rules.put(sluice_rule_index(r.slot, set), to_datapath(r));
		infos.put(sluice_rule_index(r.slot, set), to_info(r));
	}
	// Slots the idle set may hold leftovers in: those read as used, and any
	// beyond what was read (a killed change may have written there) up to
	// the new high-water mark, which bounds what later reads look at.
	uint32_t reach = std::min(n, std::max(before.active.slots[0], before.active.slots[1])), high = 0;
	for (const auto &r : after)
		high = std::max(high, r.slot + 1);
	for (uint32_t slot = 0; slot < n; slot++) {
		if ((before.idle_used[slot] || (slot >= reach && slot < high)) && !in_after[slot]) {
			rules.put(sluice_rule_index(slot, set), sluice_rule{});
			infos.put(sluice_rule_index(slot, set), sluice_rule_info{});
		}
	}
	std::vector<uint8_t> zero_counters(sizeof(struct sluice_rule_counters) * possible_cpus() * new_slots.size());
	map_update_batch(maps_.rule_counters.get(), new_slots.data(), zero_counters.data(), new_slots.size(),
			 "rule counters");

	MappedArray list_map(maps_.lists.get()), blocks(maps_.dir4_blocks.get()), top(maps_.dir4_top.get());
	for (size_t i = 0; i < lists.lists.size(); i++)
		list_map.put(lists.base + static_cast<uint32_t>(i), lists.lists[i]);
	for (size_t i = 0; i < dir.blocks.size(); i++)
		blocks.put(block_base + static_cast<uint32_t>(i), dir.blocks[i]);
	for (uint32_t i = 0; i < SLUICE_DIR_TOP_SIZE; i++)
		top.put(set * SLUICE_DIR_TOP_SIZE + i, dir.top[i]);
	write_v6(maps_.match6.get(), set, lists);

	// 4. The switch: one word, and the new rule set is live.
	std::atomic_thread_fence(std::memory_order_seq_cst); // every write above before the flip
	struct sluice_active active = before.active;
	active.set = set;
	active.slots[set] = high;
	map_update(maps_.active.get(), &zero, &active, "the live rule set's number");

	// 5. Buckets no rule uses any more. A command killed before this leaves
	//    buckets of ids that are never used again, which age out.
	std::unordered_set<uint32_t> gone;
	for (const auto &r : before.rules)
		gone.insert(bucket_of(r));
	for (const auto &r : after)
		gone.erase(bucket_of(r));
	if (!gone.empty())
		purge_buckets(maps_, [&gone](uint32_t id) { return gone.count(id) > 0; });
}

} // namespace sluice
