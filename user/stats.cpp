#include "stats.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "rule_table.h"

namespace sluice {

namespace {

const char *const COUNTER_NAMES[] = {
	"pass_not_ip",    "pass_no_match",  "pass_allow",     "pass_limit",
	"drop_rate",      "drop_deny",      "failopen_parse", "failopen_rule",
	"failopen_table", "failopen_contention", "fragments", "l4_unknown",
	"new_buckets",
};
static_assert(std::size(COUNTER_NAMES) == SLUICE_CNT_MAX, "a name for every counter");

template <class Key>
void collect_family(int fd, int family, const std::unordered_map<uint32_t, RuleStats *> &by_id,
		    const StatsQuery &query, std::vector<SourceStats> &out, uint64_t &tracked)
{
	for_each_entry<Key, struct sluice_source_state>(
		fd, [&](const Key &k, const struct sluice_source_state &v) {
			auto it = by_id.find(k.rule_id);
			if (it == by_id.end())
				return; // a bucket of a rule deleted a moment ago
			RuleStats &rs = *it->second;
			rs.sources++;
			tracked++;
			if (!query.rule.empty() && !rule_is(rs.rule, query.rule))
				return;
			Cidr c{family, {}, rs.rule.spec.bucket_prefix()};
			std::memcpy(c.addr.data(), k.addr, sizeof(k.addr));
			out.push_back({format_cidr(c), rs.rule.spec.name, k.rule_id, v.passed_packets,
				       v.passed_bytes, v.dropped_packets, v.dropped_bytes});
		});
}

} // namespace

const char *counter_name(int index) { return COUNTER_NAMES[index]; }

VerdictTotals verdict_totals(const Stats &s)
{
	VerdictTotals t;
	for (int i = SLUICE_CNT_PASS_NOT_IP; i <= SLUICE_CNT_PASS_LIMIT; i++)
		t.passed += s.global[i].packets;
	for (int i = SLUICE_CNT_DROP_RATE; i <= SLUICE_CNT_DROP_DENY; i++)
		t.dropped += s.global[i].packets;
	for (int i = SLUICE_CNT_FAILOPEN_PARSE; i <= SLUICE_CNT_FAILOPEN_CONTENTION; i++)
		t.failopen += s.global[i].packets;
	return t;
}

Stats collect_stats(const MapSet &maps, const StatsQuery &query)
{
	Stats s;
	RuleTable table(maps);
	if (!query.rule.empty())
		table.find(query.rule); // a clear error for an unknown rule

	for (auto &r : table.list())
		s.rules.push_back({r, table.counters(r.slot), 0});
	std::unordered_map<uint32_t, RuleStats *> by_id;
	for (auto &rs : s.rules)
		by_id[rs.rule.id] = &rs;

	collect_family<struct sluice_src_v4>(maps.src4.get(), 4, by_id, query, s.sources, s.tracked_sources);
	collect_family<struct sluice_src_v6>(maps.src6.get(), 6, by_id, query, s.sources, s.tracked_sources);

	auto order = [](const SourceStats &a, const SourceStats &b) {
		if (a.dropped_packets != b.dropped_packets)
			return a.dropped_packets > b.dropped_packets;
		if (a.passed_packets != b.passed_packets)
			return a.passed_packets > b.passed_packets;
		return a.source < b.source;
	};
	if (query.top && query.top < s.sources.size()) {
		std::partial_sort(s.sources.begin(), s.sources.begin() + query.top, s.sources.end(), order);
		s.sources.resize(query.top);
	} else {
		std::sort(s.sources.begin(), s.sources.end(), order);
	}

	for (int i = 0; i < SLUICE_CNT_MAX; i++) {
		for (const auto &c : lookup_percpu<struct sluice_counter>(maps.counters.get(), i)) {
			s.global[i].packets += c.packets;
			s.global[i].bytes += c.bytes;
		}
	}
	return s;
}

nlohmann::ordered_json rule_json(const InstalledRule &r)
{
	const RuleSpec &s = r.spec;
	nlohmann::ordered_json j = {
		{"id", r.id},
		{"name", s.name},
		{"cidr", format_cidr(s.cidr)},
		{"action", action_name(s.action)},
		{"proto", proto_name(s.proto)},
		{"dport", format_ports(s.dport)},
	};
	if (s.action == Action::limit) {
		j["rate"] = format_rate(s.rate);
		j["unit"] = s.rate.counts_bytes() ? "bytes" : "packets";
		j["burst"] = s.burst;
		j["per"] = s.bucket_prefix();
	}
	return j;
}

nlohmann::ordered_json stats_json(const Stats &s)
{
	nlohmann::ordered_json sources = nlohmann::ordered_json::array();
	for (const auto &src : s.sources)
		sources.push_back({{"source", src.source},
				   {"rule", src.rule},
				   {"rule_id", src.rule_id},
				   {"passed_packets", src.passed_packets},
				   {"passed_bytes", src.passed_bytes},
				   {"dropped_packets", src.dropped_packets},
				   {"dropped_bytes", src.dropped_bytes}});
	nlohmann::ordered_json rules = nlohmann::ordered_json::array();
	for (const auto &rs : s.rules) {
		nlohmann::ordered_json j = rule_json(rs.rule);
		j["sources"] = rs.sources;
		j["passed_packets"] = rs.counters.passed_packets;
		j["passed_bytes"] = rs.counters.passed_bytes;
		j["dropped_packets"] = rs.counters.dropped_packets;
		j["dropped_bytes"] = rs.counters.dropped_bytes;
		j["failopen_table"] = rs.counters.failopen_table;
		j["failopen_contention"] = rs.counters.failopen_contention;
		rules.push_back(j);
	}
	nlohmann::ordered_json global = nlohmann::ordered_json::object();
	for (int i = 0; i < SLUICE_CNT_MAX; i++)
		global[counter_name(i)] = {{"packets", s.global[i].packets}, {"bytes", s.global[i].bytes}};
	return {{"sources", sources}, {"tracked_sources", s.tracked_sources}, {"rules", rules},
		{"global", global}};
}

} // namespace sluice
