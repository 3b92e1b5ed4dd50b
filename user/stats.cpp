#include "stats.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "rule_table.h"

namespace sluice {

namespace {

const char *const COUNTER_NAMES[] = {
	"pass_not_ip",     "pass_no_match",  "pass_allow",    "pass_limit",
	"pass_shadow",     "drop_rate",      "drop_deny",     "drop_contention",
	"failopen_parse",  "failopen_rule",  "failopen_table", "fragments",
	"l4_unknown",      "new_buckets",
};
static_assert(std::size(COUNTER_NAMES) == SLUICE_CNT_MAX, "a name for every counter");

template <class Key, class Value>
void collect_family(int fd, int family, const std::unordered_map<uint32_t, RuleStats *> &by_id,
		    const StatsQuery &query, std::vector<SourceStats> &out, uint64_t &tracked)
{
	for_each_entry<Key, Value>(
		fd, [&](const Key &k, const Value &v) {
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
			out.push_back({format_cidr(c), rs.rule.spec.name, k.rule_id, rs.rule.spec.shadow,
				       v.cnt.passed_packets, v.cnt.passed_bytes, v.cnt.dropped_packets,
				       v.cnt.dropped_bytes, rs.rule.spec.algo});
		});
}

} // namespace

const char *counter_name(int index) { return COUNTER_NAMES[index]; }

VerdictTotals verdict_totals(const Stats &s)
{
	VerdictTotals t;
	for (int i = SLUICE_CNT_PASS_NOT_IP; i <= SLUICE_CNT_PASS_SHADOW; i++)
		t.passed += s.global[i].packets;
	for (int i = SLUICE_CNT_DROP_RATE; i <= SLUICE_CNT_DROP_CONTENTION; i++)
		t.dropped += s.global[i].packets;
	for (int i = SLUICE_CNT_FAILOPEN_PARSE; i <= SLUICE_CNT_FAILOPEN_TABLE; i++)
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

	collect_family<struct sluice_src_v4, struct sluice_source_state>(maps.src4.get(), 4, by_id, query,
									s.sources, s.tracked_sources);
	collect_family<struct sluice_src_v6, struct sluice_source_state>(maps.src6.get(), 6, by_id, query,
									s.sources, s.tracked_sources);
	collect_family<struct sluice_src_v4, struct sluice_log_state>(maps.logs4.get(), 4, by_id, query,
								     s.sources, s.tracked_sources);
	collect_family<struct sluice_src_v6, struct sluice_log_state>(maps.logs6.get(), 6, by_id, query,
								     s.sources, s.tracked_sources);

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
	j["shadow"] = s.shadow;
	if (s.action == Action::limit) {
		j["algo"] = algo_name(s.algo);
		j["rate"] = format_rate(s.rate);
		j["unit"] = s.rate.counts_bytes() ? "bytes" : "packets";
		if (s.has_burst())
			j["burst"] = s.burst;
		else
			j["window"] = format_duration(s.rate.period_ns);
		if (s.warmup_ns)
			j["warmup"] = format_duration(s.warmup_ns);
		j["per"] = s.bucket_prefix();
	}
	return j;
}

nlohmann::ordered_json stats_json(const Stats &s)
{
	nlohmann::ordered_json sources = nlohmann::ordered_json::array();
	for (const auto &src : s.sources) {
		// A shadow rule drops nothing: what it would have dropped is reported apart.
		nlohmann::ordered_json j = {{"source", src.source},
					    {"rule", src.rule},
					    {"rule_id", src.rule_id},
					    {"algo", algo_name(src.algo)},
					    {"passed_packets", src.passed_packets + (src.shadow ? src.dropped_packets : 0)},
					    {"passed_bytes", src.passed_bytes + (src.shadow ? src.dropped_bytes : 0)},
					    {"dropped_packets", src.shadow ? 0 : src.dropped_packets},
					    {"dropped_bytes", src.shadow ? 0 : src.dropped_bytes}};
		if (src.shadow) {
			j["would_drop_packets"] = src.dropped_packets;
			j["would_drop_bytes"] = src.dropped_bytes;
		}
		sources.push_back(j);
	}
	nlohmann::ordered_json rules = nlohmann::ordered_json::array();
	for (const auto &rs : s.rules) {
		nlohmann::ordered_json j = rule_json(rs.rule);
		j["sources"] = rs.sources;
		const auto &c = rs.counters;
		bool shadow = rs.rule.spec.shadow;
		j["passed_packets"] = c.passed_packets + (shadow ? c.dropped_packets : 0);
		j["passed_bytes"] = c.passed_bytes + (shadow ? c.dropped_bytes : 0);
		j["dropped_packets"] = shadow ? 0 : c.dropped_packets;
		j["dropped_bytes"] = shadow ? 0 : c.dropped_bytes;
		if (shadow) {
			j["would_drop_packets"] = c.dropped_packets;
			j["would_drop_bytes"] = c.dropped_bytes;
		}
		j["failopen_table"] = rs.counters.failopen_table;
		j["dropped_contention"] = rs.counters.dropped_contention;
		rules.push_back(j);
	}
	nlohmann::ordered_json global = nlohmann::ordered_json::object();
	for (int i = 0; i < SLUICE_CNT_MAX; i++)
		global[counter_name(i)] = {{"packets", s.global[i].packets}, {"bytes", s.global[i].bytes}};
	return {{"sources", sources}, {"tracked_sources", s.tracked_sources}, {"rules", rules},
		{"global", global}};
}

} // namespace sluice
