#include "rule_table.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "dir4.h"
#include "sources.h"

namespace sluice {

std::vector<InstalledRule> RuleTable::list() const
{
	uint32_t n = maps_.max_rules();
	std::vector<struct sluice_rule> dp(n);
	std::vector<uint32_t> keys(n);
	uint32_t count = n;
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	uint32_t cursor = 0;
	int err = bpf_map_lookup_batch(maps_.rules.get(), nullptr, &cursor, keys.data(), dp.data(),
				       &count, &opts);
	if (err && errno != ENOENT)
		throw_errno("cannot read the rule table", errno);

	std::vector<InstalledRule> rules;
	for (uint32_t i = 0; i < count; i++) {
		if (dp[i].id == 0)
			continue;
		struct sluice_rule_info info = {};
		if (bpf_map_lookup_elem(maps_.rule_info.get(), &keys[i], &info))
			throw_errno("cannot read rule " + std::to_string(dp[i].id), errno);
		rules.push_back({dp[i].id, keys[i], from_maps(dp[i], info)});
	}
	std::sort(rules.begin(), rules.end(),
		  [](const auto &a, const auto &b) { return a.id < b.id; });
	return rules;
}

InstalledRule RuleTable::find(std::string_view key) const
{
	for (const auto &r : list()) {
		if (rule_is(r, key))
			return r;
	}
	throw Error("no rule named '" + std::string(key) + "' (see `sluice rule list`)");
}

InstalledRule RuleTable::add(RuleSpec spec)
{
	return add_many({std::move(spec)}).front();
}

std::vector<InstalledRule> RuleTable::add_many(std::vector<RuleSpec> specs, const std::vector<std::string> &where_of)
{
	// Everything is checked before anything is written: one bad rule, no change.
	std::vector<InstalledRule> before = list();
	uint32_t zero = 0;
	struct sluice_meta meta = {};
	if (bpf_map_lookup_elem(maps_.meta.get(), &zero, &meta))
		throw_errno("cannot read sluice metadata", errno);
	uint32_t next_id = std::max<uint32_t>(meta.next_rule_id, 1);

	using Selector = std::tuple<Cidr, Proto, uint16_t, uint16_t>;
	auto selector = [](const RuleSpec &r) { return Selector{r.cidr, r.proto, r.dport.lo, r.dport.hi}; };
	std::map<Selector, std::string> selectors;
	std::set<std::string> names;
	std::vector<bool> used(maps_.max_rules());
	for (const auto &r : before) {
		used[r.slot] = true;
		names.insert(r.spec.name);
		selectors[selector(r.spec)] = r.spec.name;
	}

	std::vector<InstalledRule> added;
	uint32_t slot = 0;
	for (size_t i = 0; i < specs.size(); i++) {
		RuleSpec &spec = specs[i];
		std::string where = i < where_of.size() ? where_of[i] + ": "
				    : specs.size() > 1 ? "rule " + std::to_string(i + 1) + ": "
						       : "";
		try {
			validate_rule(spec);
		} catch (const Error &e) {
			throw Error(where + e.what());
		}
		if (next_id > SLUICE_MAX_RULE_ID)
			throw Error("rule ids are used up (" + std::to_string(SLUICE_MAX_RULE_ID) +
				    " rules were added since the first attach); detach and attach again");
		uint32_t id = next_id++;
		if (spec.name.empty()) {
			spec.name = "rule" + std::to_string(id);
			for (int n = 2; names.count(spec.name); n++)
				spec.name = "rule" + std::to_string(id) + "-" + std::to_string(n);
		} else if (names.count(spec.name)) {
			throw Error(where + "a rule named '" + spec.name + "' exists already");
		}
		auto [it, fresh] = selectors.emplace(selector(spec), spec.name);
		if (!fresh)
			throw Error(where + "rule '" + it->second + "' already selects the same traffic; delete it first");
		names.insert(spec.name);
		while (slot < used.size() && used[slot])
			slot++;
		if (slot == used.size())
			throw Error("the rule table is full (" + std::to_string(used.size()) +
				    " rules); delete rules or attach again with a larger --max-rules");
		used[slot] = true;
		added.push_back({id, slot, spec});
	}
	std::vector<InstalledRule> after = before;
	after.insert(after.end(), added.begin(), added.end());
	auto new_lists = build_match_lists(after); // throws if too many rules would cover one address

	std::vector<uint32_t> slots;
	std::vector<struct sluice_rule> dps;
	std::vector<struct sluice_rule_info> infos;
	for (const auto &r : added) {
		slots.push_back(r.slot);
		dps.push_back(to_datapath(r));
		infos.push_back(to_info(r.spec));
	}
	std::vector<uint8_t> zero_counters(sizeof(struct sluice_rule_counters) * possible_cpus() * added.size());

	// Write the rules before anything points at them, the match lists last.
	meta.next_rule_id = next_id;
	map_update(maps_.meta.get(), &zero, &meta, "sluice metadata");
	map_update_batch(maps_.rule_info.get(), slots.data(), infos.data(), slots.size(), "rule info");
	map_update_batch(maps_.rule_counters.get(), slots.data(), zero_counters.data(), slots.size(),
			 "rule counters");
	map_update_batch(maps_.rules.get(), slots.data(), dps.data(), slots.size(), "rules");
	write_match_lists(before, new_lists);
	return added;
}

InstalledRule RuleTable::remove(std::string_view name_or_id)
{
	InstalledRule gone = find(name_or_id);
	std::vector<InstalledRule> before = list(), after;
	for (const auto &r : before)
		if (r.id != gone.id)
			after.push_back(r);

	// Unlink first so no new packet reaches the rule, then empty its slot.
	write_match_lists(before, build_match_lists(after));
	struct sluice_rule empty_rule = {};
	struct sluice_rule_info empty_info = {};
	map_update(maps_.rules.get(), &gone.slot, &empty_rule, "rule");
	map_update(maps_.rule_info.get(), &gone.slot, &empty_info, "rule info");
	purge_buckets(gone.id);
	return gone;
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

namespace {

template <class Key> Key lpm_key(const Cidr &c)
{
	Key k = {};
	k.prefixlen = static_cast<__u32>(c.prefix_len);
	std::memcpy(k.addr, c.addr.data(), sizeof(k.addr));
	return k;
}

struct sluice_match_list match_list(const std::vector<uint32_t> &slots)
{
	struct sluice_match_list list = {};
	list.count = static_cast<__u32>(slots.size());
	std::copy(slots.begin(), slots.end(), list.slots);
	return list;
}

/// Match-list entries of one family, written with one batch call where the
/// kernel supports batches on LPM tries, one by one where it does not.
template <class Key> struct LpmWrites {
	std::vector<Key> keys;
	std::vector<struct sluice_match_list> lists;

	void flush(int fd, const char *what)
	{
		__u32 n = static_cast<__u32>(keys.size());
		LIBBPF_OPTS(bpf_map_batch_opts, opts);
		if (n == 0 || bpf_map_update_batch(fd, keys.data(), lists.data(), &n, &opts) == 0)
			return;
		for (size_t i = 0; i < keys.size(); i++)
			map_update(fd, &keys[i], &lists[i], what);
	}
};

} // namespace

void RuleTable::write_match_lists(const std::vector<InstalledRule> &before,
				  const std::map<Cidr, std::vector<uint32_t>> &new_lists)
{
	auto old_lists = build_match_lists(before);
	write_v4_tables(new_lists);

	// IPv6: the LPM trie, entry by entry where a list changed.
	LpmWrites<struct sluice_lpm_v6> v6;
	for (const auto &[prefix, slots] : new_lists) {
		if (prefix.family != 6)
			continue;
		auto old = old_lists.find(prefix);
		if (old != old_lists.end() && old->second == slots)
			continue;
		v6.keys.push_back(lpm_key<struct sluice_lpm_v6>(prefix));
		v6.lists.push_back(match_list(slots));
	}
	v6.flush(maps_.match6.get(), "IPv6 match list");
	for (const auto &[prefix, slots] : old_lists) {
		if (prefix.family != 6 || new_lists.count(prefix))
			continue;
		auto key = lpm_key<struct sluice_lpm_v6>(prefix);
		if (bpf_map_delete_elem(maps_.match6.get(), &key) && errno != ENOENT)
			throw_errno("cannot remove match list for " + format_cidr(prefix), errno);
	}
}

void RuleTable::write_v4_tables(const std::map<Cidr, std::vector<uint32_t>> &lists)
{
	// Build the set not in use, write all of it, then make it the live one: a
	// packet sees either the old tables or the new, never a mixture.
	uint32_t zero = 0;
	struct sluice_dir_sel sel = {};
	if (bpf_map_lookup_elem(maps_.dir4_sel.get(), &zero, &sel))
		throw_errno("cannot read the IPv4 table selector", errno);
	uint32_t set = sel.set ^ 1, rules = maps_.max_rules();
	uint32_t list_base = set * (rules + 1), block_base = set * rules;

	std::vector<std::pair<Cidr, uint32_t>> prefixes;
	std::vector<uint32_t> list_keys;
	std::vector<struct sluice_match_list> list_values;
	for (const auto &[prefix, slots] : lists) {
		if (prefix.family != 4)
			continue;
		uint32_t index = list_base + 1 + static_cast<uint32_t>(list_values.size());
		prefixes.push_back({prefix, index});
		list_keys.push_back(index);
		list_values.push_back(match_list(slots));
	}
	Dir4Tables t = build_dir4(prefixes, block_base, rules);

	std::vector<uint32_t> block_keys(t.blocks.size()), top_keys(SLUICE_DIR_TOP_SIZE);
	for (size_t i = 0; i < block_keys.size(); i++)
		block_keys[i] = block_base + static_cast<uint32_t>(i);
	for (uint32_t i = 0; i < SLUICE_DIR_TOP_SIZE; i++)
		top_keys[i] = set * SLUICE_DIR_TOP_SIZE + i;
	map_update_batch(maps_.lists4.get(), list_keys.data(), list_values.data(), list_keys.size(),
			 "IPv4 match lists");
	map_update_batch(maps_.dir4_blocks.get(), block_keys.data(), t.blocks.data(), block_keys.size(),
			 "IPv4 rule table blocks");
	map_update_batch(maps_.dir4_top.get(), top_keys.data(), t.top.data(), top_keys.size(), "IPv4 rule table");
	sel.set = set;
	map_update(maps_.dir4_sel.get(), &zero, &sel, "IPv4 table selector");
}

void RuleTable::purge_buckets(uint32_t rule_id)
{
	SourceTable4(maps_.src4.get()).purge(rule_id);
	SourceTable6(maps_.src6.get()).purge(rule_id);
	LogTable4(maps_.logs4.get()).purge(rule_id);
	LogTable6(maps_.logs6.get()).purge(rule_id);
}

} // namespace sluice
