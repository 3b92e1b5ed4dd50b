#include "rule_table.h"

#include <algorithm>
#include <cstring>
#include <ctime>

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
	validate_rule(spec);
	std::vector<InstalledRule> before = list();

	// Choose the id and slot, and check the rule against the others.
	uint32_t zero = 0;
	struct sluice_meta meta = {};
	if (bpf_map_lookup_elem(maps_.meta.get(), &zero, &meta))
		throw_errno("cannot read sluice metadata", errno);
	uint32_t id = std::max<uint32_t>(meta.next_rule_id, 1);

	std::vector<bool> used(maps_.max_rules());
	for (const auto &r : before) {
		used[r.slot] = true;
		if (!spec.name.empty() && r.spec.name == spec.name)
			throw Error("a rule named '" + spec.name + "' exists already");
		if (same_selector(r.spec, spec))
			throw Error("rule '" + r.spec.name + "' already selects the same traffic; delete it first");
	}
	if (spec.name.empty()) {
		spec.name = "rule" + std::to_string(id);
		for (int n = 2; std::any_of(before.begin(), before.end(),
					    [&](const auto &r) { return r.spec.name == spec.name; });
		     n++)
			spec.name = "rule" + std::to_string(id) + "-" + std::to_string(n);
	}
	auto free_slot = std::find(used.begin(), used.end(), false);
	if (free_slot == used.end())
		throw Error("the rule table is full (" + std::to_string(used.size()) +
			    " rules); delete rules or attach again with a larger --max-rules");

	InstalledRule added{id, static_cast<uint32_t>(free_slot - used.begin()), spec};
	std::vector<InstalledRule> after = before;
	after.push_back(added);
	build_match_lists(after); // throws if too many rules would cover one address
	struct sluice_rule dp = to_datapath(added);
	struct sluice_rule_info info = to_info(spec);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	info.created_ns = static_cast<__u64>(now.tv_sec) * 1000000000ULL + now.tv_nsec;

	// Write the rule before anything points at it, the match lists last.
	meta.next_rule_id = id + 1;
	map_update(maps_.meta.get(), &zero, &meta, "sluice metadata");
	map_update(maps_.rule_info.get(), &added.slot, &info, "rule info");
	zero_percpu(maps_.rule_counters.get(), added.slot, sizeof(struct sluice_rule_counters));
	map_update(maps_.rules.get(), &added.slot, &dp, "rule");
	write_match_lists(before, after);
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
	write_match_lists(before, after);
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
		sum.dropped_contention += c.dropped_contention;
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

} // namespace

void RuleTable::write_match_lists(const std::vector<InstalledRule> &before,
				  const std::vector<InstalledRule> &after)
{
	auto old_lists = build_match_lists(before);
	auto new_lists = build_match_lists(after);

	for (const auto &[prefix, slots] : new_lists) {
		auto old = old_lists.find(prefix);
		if (old != old_lists.end() && old->second == slots)
			continue;
		struct sluice_match_list list = {};
		list.count = static_cast<__u32>(slots.size());
		std::copy(slots.begin(), slots.end(), list.slots);
		if (prefix.family == 4) {
			auto key = lpm_key<struct sluice_lpm_v4>(prefix);
			map_update(maps_.match4.get(), &key, &list, "IPv4 match list");
		} else {
			auto key = lpm_key<struct sluice_lpm_v6>(prefix);
			map_update(maps_.match6.get(), &key, &list, "IPv6 match list");
		}
	}
	for (const auto &[prefix, slots] : old_lists) {
		if (new_lists.count(prefix))
			continue;
		int err;
		if (prefix.family == 4) {
			auto key = lpm_key<struct sluice_lpm_v4>(prefix);
			err = bpf_map_delete_elem(maps_.match4.get(), &key);
		} else {
			auto key = lpm_key<struct sluice_lpm_v6>(prefix);
			err = bpf_map_delete_elem(maps_.match6.get(), &key);
		}
		if (err && errno != ENOENT)
			throw_errno("cannot remove match list for " + format_cidr(prefix), errno);
	}
}

void RuleTable::purge_buckets(uint32_t rule_id)
{
	auto purge = [rule_id]<class K, class V>(int fd) {
		std::vector<K> doomed;
		for_each_entry<K, V>(
			fd, [&](const K &k, const V &) {
				if (k.rule_id == rule_id)
					doomed.push_back(k);
			});
		for (const auto &k : doomed)
			bpf_map_delete_elem(fd, &k); // ENOENT: evicted meanwhile, fine
	};
	purge.template operator()<struct sluice_src_v4, struct sluice_source_state>(maps_.src4.get());
	purge.template operator()<struct sluice_src_v6, struct sluice_source_state>(maps_.src6.get());
	purge.template operator()<struct sluice_src_v4, struct sluice_log_state>(maps_.logs4.get());
	purge.template operator()<struct sluice_src_v6, struct sluice_log_state>(maps_.logs6.get());
}

} // namespace sluice
