// SPDX-License-Identifier: GPL-2.0-only
#include "stats.h"
#include "bans.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <cstring>
#include <functional>
#include <tuple>
#include <ostream>
#include <string_view>
#include <unordered_map>

#include "error.h"
#include "fnv.h"
#include "rule_table.h"
#include "sluice_algos.h"
#include "tick_clock.h"
#include "sources.h"
#include "state_dirs.h"

namespace sluice {

namespace {

const char *const COUNTER_NAMES[] = {
	"pass_not_ip",     "pass_no_match",  "pass_allow",    "pass_limit",
	"pass_shadow",     "pass_contention", "drop_rate",    "drop_deny",
	"failopen_parse",  "failopen_rule",  "failopen_table", "drop_malformed",
	"drop_ban",
	"fragments",       "l4_unknown",     "new_buckets",   "evicted",
	"evicted_active",  "encapsulated",  "events_lost",   "evicted_v6",
	"evicted_active_v6", "bans",          "ban_table_full",
	"unbans_expired",  "unbans_deleted", "unbans_rule",
};
static_assert(std::size(COUNTER_NAMES) == SLUICE_CNT_MAX, "a name for every counter");

/// A bucket as read, before anything is formatted: a million of these sort
/// fast, and only the ones shown become strings.
struct RawSource {
	const RuleStats *rule;
	std::array<uint8_t, 16> addr;
	uint8_t family;
	struct sluice_source_counters cnt;
};

/// Counts a bucket against its rule and keeps it if the query wants it.
void collect_one(uint32_t bucket, const uint8_t *addr, size_t addr_len, int family,
		 const struct sluice_source_counters &cnt, const std::unordered_map<uint32_t, RuleStats *> &by_id,
		 const StatsQuery &query, std::vector<RawSource> &out, uint64_t &tracked)
{
	auto it = by_id.find(bucket);
	if (it == by_id.end())
		return; // a bucket of a rule deleted or restarted a moment ago
	RuleStats &rs = *it->second;
	rs.sources++;
	tracked++;
	if (!query.rule.empty() && !rule_is(rs.rule, query.rule))
		return;
	// Counters carry their bucket's generation in their top bits.
	struct sluice_source_counters value = {sluice_cnt_value(cnt.passed_packets), sluice_cnt_value(cnt.passed_bytes),
					       sluice_cnt_value(cnt.dropped_packets),
					       sluice_cnt_value(cnt.dropped_bytes)};
	RawSource raw{&rs, {}, static_cast<uint8_t>(family), value};
	std::memcpy(raw.addr.data(), addr, addr_len);
	out.push_back(raw);
}

/// Counts every bucket of one source table, with the drops still pending.
template <class Set>
void collect_table(int fd, const PendingDrops &pending,
		   const std::unordered_map<uint32_t, RuleStats *> &by_id, const StatsQuery &query,
		   std::vector<RawSource> &out, uint64_t &tracked)
{
	using Table = SetTable<Set>;
	Table(fd).for_each(
		[&](uint32_t bucket, const uint8_t *addr, const typename Table::Bucket &b) {
			collect_one(bucket, addr, Table::family == 4 ? 4 : 16, Table::family, b.cnt, by_id, query,
				    out, tracked);
		},
		pending);
}

} // namespace

const char *counter_name(int index) { return COUNTER_NAMES[index]; }

VerdictTotals verdict_totals(const Stats &s)
{
	VerdictTotals t;
	for (int i = 0; i < SLUICE_CNT_VERDICT_END; i++) {
		uint64_t n = s.global[i].packets;
		if ((SLUICE_DROP_VERDICTS >> i) & 1)
			t.dropped += n;
		else if (i >= SLUICE_CNT_FAILOPEN_PARSE && i <= SLUICE_CNT_FAILOPEN_TABLE)
			t.failopen += n;
		else
			t.passed += n;
	}
	return t;
}

Stats collect_stats(const MapSet &maps, const StatsQuery &query)
{
	Stats s;
	RuleTable table(maps);
	if (!query.rule.empty())
		table.find(query.rule); // a clear error for an unknown rule
	s.bans = list_bans(maps, ban_clock_ns()).size();

	for (auto &r : table.list())
		s.rules.push_back({r, table.counters(r.slot), 0});
	// Buckets are filed under their rule's bucket id, which an edit that
	// restarts them changes: the rule's own id finds none of them then.
	std::unordered_map<uint32_t, RuleStats *> by_id;
	for (auto &rs : s.rules)
		by_id[bucket_id(rs.rule)] = &rs;

	std::vector<RawSource> raw;
	// Each table's share of the tracked buckets, and its size.
	auto count_table = [&s](int family, bool sliding_log, uint64_t capacity, const std::function<void()> &collect) {
		uint64_t before = s.tracked_sources;
		collect();
		s.tables.push_back({family, sliding_log, s.tracked_sources - before, capacity});
	};
	// Every CPU's drops not yet added to their bucket.
	const PendingDrops pending = read_accounts(maps);
	auto capacity = [](int fd) { return uint64_t(map_max_entries(fd)) * SLUICE_SET_WAYS; };
	count_table(4, false, capacity(maps.src4.get()), [&] {
		collect_table<struct sluice_set_v4>(maps.src4.get(), pending, by_id, query, raw, s.tracked_sources);
	});
	count_table(6, false, capacity(maps.src6.get()), [&] {
		collect_table<struct sluice_set_v6>(maps.src6.get(), pending, by_id, query, raw, s.tracked_sources);
	});
	count_table(4, true, capacity(maps.logs4.get()), [&] {
		collect_table<struct sluice_log_set_v4>(maps.logs4.get(), pending, by_id, query, raw, s.tracked_sources);
	});
	count_table(6, true, capacity(maps.logs6.get()), [&] {
		collect_table<struct sluice_log_set_v6>(maps.logs6.get(), pending, by_id, query, raw, s.tracked_sources);
	});

	// Most dropped first, then most passed, then by address.
	auto order = [](const RawSource &a, const RawSource &b) {
		if (a.cnt.dropped_packets != b.cnt.dropped_packets)
			return a.cnt.dropped_packets > b.cnt.dropped_packets;
		if (a.cnt.passed_packets != b.cnt.passed_packets)
			return a.cnt.passed_packets > b.cnt.passed_packets;
		return std::tie(a.family, a.addr) < std::tie(b.family, b.addr);
	};
	if (query.top && query.top < raw.size()) {
		std::partial_sort(raw.begin(), raw.begin() + query.top, raw.end(), order);
		raw.resize(query.top);
	} else {
		std::sort(raw.begin(), raw.end(), order);
	}
	s.sources.reserve(raw.size());
	for (const RawSource &r : raw) {
		const RuleSpec &spec = r.rule->rule.spec;
		Cidr c{r.family, r.addr, spec.bucket_prefix()};
		s.sources.push_back({format_cidr(c), spec.name, r.rule->rule.id, spec.shadow, r.cnt.passed_packets,
				     r.cnt.passed_bytes, r.cnt.dropped_packets, r.cnt.dropped_bytes, spec.algo,
				     bucket_id(r.rule->rule)});
	}

	for (int i = 0; i < SLUICE_CNT_MAX; i++) {
		for (const auto &c : lookup_percpu<struct sluice_counter>(maps.counters.get(), i)) {
			s.global[i].packets += c.packets;
			s.global[i].bytes += c.bytes;
		}
	}
	return s;
}

uint64_t rule_set_digest(const std::vector<RuleStats> &rules)
{
	// FNV-1a over each rule's JSON form, which names every field of its spec
	// but `continue`, added here. A cluster rule's host count and the local
	// share it gives are state the agent keeps, not policy: left out.
	Fnv1a64 h;
	for (const auto &rs : rules) {
		nlohmann::ordered_json j = rule_json(rs.rule);
		j.erase("hosts");
		j.erase("local_rate");
		h.add(j.dump() + (rs.rule.spec.layered ? " continue\n" : "\n"));
	}
	return h.value();
}

nlohmann::ordered_json rule_json(const InstalledRule &r)
{
	const RuleSpec &s = r.spec;
	nlohmann::ordered_json j = {
		{"id", r.id},
		{"name", s.name},
		{"cidr", format_source(s)},
		{"action", action_name(s.action)},
		{"proto", proto_name(s.proto)},
		{"dport", format_ports(s.dport)},
		{"sport", format_ports(s.sport)},
		{"tcp_flags", format_tcp_flags(s.tcp_flags)},
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
		if (s.ban.ns)
			j["ban"] = {{"duration", format_duration(s.ban.ns)}, {"after", s.ban.after}};
		j["scope"] = scope_name(s.scope);
		if (s.scope == Scope::cluster) {
			j["fallback"] = s.fallback.amount ? format_rate(s.fallback) : "default";
			j["hosts"] = r.cluster_hosts;
			j["local_rate"] = format_rate(local_rate(r));
		}
	}
	return j;
}

namespace {

/// Counters as reported: a shadow rule drops nothing, so its would-be drops
/// count as passed and are reported apart.
void put_counters(nlohmann::ordered_json &j, bool shadow, uint64_t passed_packets, uint64_t passed_bytes,
		  uint64_t dropped_packets, uint64_t dropped_bytes)
{
	j["passed_packets"] = passed_packets + (shadow ? dropped_packets : 0);
	j["passed_bytes"] = passed_bytes + (shadow ? dropped_bytes : 0);
	j["dropped_packets"] = shadow ? 0 : dropped_packets;
	j["dropped_bytes"] = shadow ? 0 : dropped_bytes;
	if (shadow) {
		j["would_drop_packets"] = dropped_packets;
		j["would_drop_bytes"] = dropped_bytes;
	}
}

/// How every JSON text here is dumped: a byte that is not UTF-8 (a name a
/// damaged map holds) becomes U+FFFD rather than an exception halfway
/// through the output.
constexpr auto JSON_ERRORS = nlohmann::json::error_handler_t::replace;

/// Whether `s` between quotes is already its JSON text: printable ASCII
/// without a quote or a backslash, as addresses and rule names are. Any
/// other string is nlohmann-json's to escape.
bool plain_json(std::string_view s)
{
	return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
}

/// The entries of "sources", one per line. nlohmann-json dumps an entry's
/// frame once (its keys, quotes, colons and commas, around null values) and
/// each source's strings into the frame's gaps; integers are their digits.
/// Built as objects and dumped whole, a million entries take more than
/// twice as long: most of it escaping the same keys a million times.
class SourceLines {
public:
	explicit SourceLines(bool shadow)
	{
		nlohmann::ordered_json entry;
		for (const char *key : {"source", "rule", "rule_id", "algo", "passed_packets", "passed_bytes",
					"dropped_packets", "dropped_bytes"})
			entry[key] = nullptr;
		if (shadow) {
			entry["would_drop_packets"] = nullptr;
			entry["would_drop_bytes"] = nullptr;
		}
		std::string frame = entry.dump(); // no key holds the word "null"
		size_t from = 0;
		for (size_t at; (at = frame.find("null", from)) != std::string::npos; from = at + 4)
			frame_.push_back(frame.substr(from, at - from));
		frame_.push_back(frame.substr(from));
	}

	/// The entry of `src`, valid until the next call.
	const std::string &line(const SourceStats &src)
	{
		bool sh = src.shadow;
		line_.clear();
		size_t gap = 0;
		auto text = [&](std::string_view s) {
			line_ += frame_[gap++];
			if (plain_json(s)) {
				line_ += '"';
				line_ += s;
				line_ += '"';
				return;
			}
			text_.get_ref<std::string &>() = s;
			line_ += text_.dump(-1, ' ', false, JSON_ERRORS);
		};
		auto number = [&](uint64_t n) {
			line_ += frame_[gap++];
			line_ += std::to_string(n);
		};
		text(src.source);
		text(src.rule);
		number(src.rule_id);
		text(algo_name(src.algo));
		number(src.passed_packets + (sh ? src.dropped_packets : 0));
		number(src.passed_bytes + (sh ? src.dropped_bytes : 0));
		number(sh ? 0 : src.dropped_packets);
		number(sh ? 0 : src.dropped_bytes);
		if (sh) {
			number(src.dropped_packets);
			number(src.dropped_bytes);
		}
		line_ += frame_[gap];
		return line_;
	}

private:
	std::vector<std::string> frame_; ///< the text before each value, then after the last
	nlohmann::ordered_json text_ = "";
	std::string line_;
};

} // namespace

void write_stats_json(std::ostream &out, const Stats &s, bool with_global, bool with_rules)
{
	nlohmann::ordered_json rules = nlohmann::ordered_json::array();
	for (const auto &rs : s.rules) {
		nlohmann::ordered_json j = rule_json(rs.rule);
		const auto &c = rs.counters;
		j["sources"] = rs.sources;
		put_counters(j, rs.rule.spec.shadow, c.passed_packets, c.passed_bytes, c.dropped_packets,
			     c.dropped_bytes);
		j["failopen_table"] = c.failopen_table;
		j["passed_contention"] = c.passed_contention;
		rules.push_back(j);
	}
	nlohmann::ordered_json doc = {{"sources", nlohmann::ordered_json::array()},
				      {"tracked_sources", s.tracked_sources}};
	if (with_rules) {
		doc["bans"] = s.bans;
		doc["rules"] = rules;
	}
	if (with_global && with_rules) {
		nlohmann::ordered_json global = nlohmann::ordered_json::object();
		for (int i = 0; i < SLUICE_CNT_MAX; i++)
			global[counter_name(i)] = {{"packets", s.global[i].packets}, {"bytes", s.global[i].bytes}};
		doc["global"] = global;
	}
	// A million sources would make a million-node tree: the document is
	// dumped with "sources" empty, and its entries are streamed into that
	// array's brackets, one object per line.
	std::string text = doc.dump(2, ' ', false, JSON_ERRORS) + "\n";
	size_t empty = text.find("[]"); // the first member's value
	out.write(text.data(), static_cast<std::streamsize>(empty + 1));
	if (!s.sources.empty()) {
		SourceLines plain(false), shadow(true);
		for (size_t i = 0; i < s.sources.size(); i++) {
			const SourceStats &src = s.sources[i];
			out << (i ? ",\n    " : "\n    ") << (src.shadow ? shadow : plain).line(src);
		}
		out << "\n  ";
	}
	out << std::string_view(text).substr(empty + 1);
}

namespace {

using Debit = PendingDrops::Debit;

uint64_t hash_seed(const MapSet &maps)
{
	struct sluice_config cfg = {};
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(maps.config.get(), &zero, &cfg))
		throw_errno("cannot read the program's configuration", errno);
	return cfg.hash_seed;
}

std::vector<Debit> read_debits(uint64_t seed)
{
	std::ifstream in(reset_debits_path(seed));
	std::vector<Debit> debits;
	if (!in)
		return debits; // never reset since this program loaded
	nlohmann::json j;
	try {
		j = nlohmann::json::parse(in);
		for (const auto &e : j.at("buckets")) {
			Debit d;
			d.table = e.at(0).get<int>();
			d.set = e.at(1).get<uint32_t>();
			d.way = e.at(2).get<int>();
			d.gen = e.at(3).get<uint16_t>();
			d.key = e.at(4).get<uint64_t>();
			d.cnt = {e.at(5).get<uint64_t>(), e.at(6).get<uint64_t>(), e.at(7).get<uint64_t>(),
				 e.at(8).get<uint64_t>()};
			debits.push_back(d);
		}
	} catch (const nlohmann::json::exception &e) {
		throw Error("cannot read " + reset_debits_path(seed) + ": " + e.what() +
			    " (delete it: the counts since the last reset will include what was pending then)");
	}
	return debits;
}

void write_debits(uint64_t seed, const std::vector<Debit> &debits)
{
	std::string path = reset_debits_path(seed);
	make_private_dir(path.substr(0, path.rfind('/')), "run directory");
	nlohmann::json buckets = nlohmann::json::array();
	for (const Debit &d : debits)
		buckets.push_back({d.table, d.set, d.way, d.gen, d.key, d.cnt.passed_packets, d.cnt.passed_bytes,
				   d.cnt.dropped_packets, d.cnt.dropped_bytes});
	// Written aside and renamed: a reader sees the old list or the new.
	std::string tmp = path + ".tmp";
	{
		std::ofstream out(tmp, std::ios::trunc);
		out << nlohmann::json{{"buckets", buckets}}.dump() << "\n";
		if (!out.flush())
			throw_errno("cannot write " + tmp, errno);
	}
	if (rename(tmp.c_str(), path.c_str()))
		throw_errno("cannot write " + path, errno);
}

/// Whether two prefixes share an address: one holds the other.
bool overlaps(const Cidr &a, const Cidr &b) { return cidr_contains(a, b) || cidr_contains(b, a); }

/// A bucket's prefix: its address masked to its rule's --per length.
Cidr bucket_cidr(int family, const uint8_t *addr, int prefix_len)
{
	Cidr c;
	c.family = family;
	std::memcpy(c.addr.data(), addr, family == 4 ? 4 : 16);
	c.prefix_len = prefix_len;
	return c;
}

} // namespace

std::vector<Debit> read_reset_debits(uint64_t seed) { return read_debits(seed); }

std::string reset_debits_path(uint64_t seed)
{
	return default_run_dir() + "/counters-reset-" + hex64(seed).substr(2) + ".json";
}

void forget_reset_records(const std::string &run_dir)
{
	remove_files_named(run_dir, "counters-reset-", ".json");
	remove_files_named(run_dir, "counters-reset-", ".json.tmp");
}

PendingDrops read_accounts(const MapSet &maps)
{
	PendingDrops accounts(read_pending(maps.pending.get()), read_owed(maps.owed.get()));
	accounts.subtract(read_debits(hash_seed(maps)));
	return accounts;
}

ResetSummary reset_counters(const MapSet &maps, const ResetQuery &query)
{
	ResetSummary summary;
	RuleTable table(maps);
	std::vector<InstalledRule> rules;
	if (!query.rule.empty())
		rules.push_back(table.find(query.rule));
	else
		rules = table.list();
	// The bucket ids whose buckets are zeroed, and each one's --per length.
	std::unordered_map<uint32_t, int> prefix_of;
	for (const auto &r : rules)
		if (r.spec.action == Action::limit)
			prefix_of[r.bucket_id ? r.bucket_id : r.id] = r.spec.bucket_prefix();
	auto pick = [&](int family) {
		return [&prefix_of, &query, family](uint32_t id, const uint8_t *addr) {
			auto it = prefix_of.find(id);
			if (it == prefix_of.end())
				return false;
			return !query.source || overlaps(*query.source, bucket_cidr(family, addr, it->second));
		};
	};

	// What the CPUs hold on account, before and after the counters are
	// zeroed: a count the program moved from an account to its bucket in
	// between is in neither the bucket nor the smaller of the two.
	const PendingDrops before(read_pending(maps.pending.get()), read_owed(maps.owed.get()));
	struct Zeroed {
		int table;
		uint32_t set;
		int way;
		uint16_t gen;
		uint64_t key;
	};
	std::vector<Zeroed> zeroed;
	auto note = [&zeroed](int table) {
		return [&zeroed, table](uint32_t set, int way, uint16_t gen, uint64_t key) {
			zeroed.push_back({table, set, way, gen, key});
		};
	};
	summary.buckets += SourceTable4(maps.src4.get()).zero_counters(pick(4), note(SLUICE_TABLE_V4));
	summary.buckets += SourceTable6(maps.src6.get()).zero_counters(pick(6), note(SLUICE_TABLE_V6));
	summary.buckets += LogTable4(maps.logs4.get()).zero_counters(pick(4), [](uint32_t, int, uint16_t, uint64_t) {});
	summary.buckets += LogTable6(maps.logs6.get()).zero_counters(pick(6), [](uint32_t, int, uint16_t, uint64_t) {});
	const PendingDrops after(read_pending(maps.pending.get()), read_owed(maps.owed.get()));

	uint64_t seed = hash_seed(maps);
	std::map<std::tuple<int, uint32_t, int, uint16_t, uint64_t>, Debit> debits;
	// A reset of everything zeroed every bucket there is: the records of
	// earlier resets are of buckets it zeroed again, or of buckets gone.
	if (!query.rule.empty() || query.source)
		for (const Debit &d : read_debits(seed))
			debits[{d.table, d.set, d.way, d.gen, d.key}] = d;
	for (const Zeroed &z : zeroed) {
		struct sluice_source_counters a = {}, b = {};
		before.add_to(a, z.table, z.set, z.way, z.gen);
		after.add_to(b, z.table, z.set, z.way, z.gen);
		Debit d{z.table, z.set, z.way, z.gen, z.key,
			{std::min(a.passed_packets, b.passed_packets), std::min(a.passed_bytes, b.passed_bytes),
			 std::min(a.dropped_packets, b.dropped_packets), std::min(a.dropped_bytes, b.dropped_bytes)}};
		auto where = std::tuple{z.table, z.set, z.way, z.gen, z.key};
		if (d.cnt.passed_packets || d.cnt.passed_bytes || d.cnt.dropped_packets || d.cnt.dropped_bytes)
			debits[where] = d;
		else
			debits.erase(where); // the bucket's counters hold all its counts: none owed back
	}
	std::vector<Debit> list;
	for (const auto &[where, d] : debits)
		list.push_back(d);
	if (!list.empty() || !read_debits(seed).empty())
		write_debits(seed, list);

	if (query.source)
		return summary; // one source's buckets: its rules' and the global counters stay
	std::vector<uint8_t> zero_rule(sizeof(struct sluice_rule_counters) * possible_cpus(), 0);
	for (const auto &r : rules) {
		map_update(maps.rule_counters.get(), &r.slot, zero_rule.data(), "rule counters");
		summary.rules++;
	}
	if (query.rule.empty()) {
		std::vector<uint8_t> zero(sizeof(struct sluice_counter) * possible_cpus(), 0);
		for (uint32_t i = 0; i < SLUICE_CNT_MAX; i++)
			map_update(maps.counters.get(), &i, zero.data(), "global counters");
		summary.global = true;
	}
	return summary;
}

std::vector<ReleasedBucket> release_source(const MapSet &maps, const Cidr &source, const std::string &rule)
{
	RuleTable table(maps);
	std::vector<InstalledRule> rules;
	if (!rule.empty()) {
		InstalledRule r = table.find(rule);
		if (r.spec.action != Action::limit)
			throw Error("rule " + r.spec.name + " does not limit (" + std::string(action_name(r.spec.action)) +
				    "): it has no buckets to release");
		rules.push_back(r);
	} else {
		rules = table.list();
	}
	struct Target {
		const InstalledRule *rule;
		struct sluice_rule dp;
	};
	std::unordered_map<uint32_t, Target> by_bucket_id;
	for (const auto &r : rules)
		if (r.spec.action == Action::limit)
			by_bucket_id[r.bucket_id ? r.bucket_id : r.id] = {&r, table.datapath_rule(r.slot)};

	uint64_t seed = hash_seed(maps);
	uint64_t now_ticks = sluice_ns_to_ticks(program_coarse_floor_ns());
	std::vector<ReleasedBucket> released;
	// A GCRA-form bucket is made again (SetTable::refill): it carries what
	// CPUs hold for it, less what a counters reset left on account for it
	// (the new bucket's generation is not the one the reset recorded).
	PendingDrops pending(read_pending(maps.pending.get()), read_owed(maps.owed.get()));
	pending.subtract(read_debits(seed));
	auto release_in = [&](auto &&tbl, int family) {
		// Found first, refilled after: the walk copies, the refill writes.
		std::vector<std::pair<uint32_t, std::array<uint8_t, 16>>> found;
		tbl.for_each([&](uint32_t id, const uint8_t *addr, const auto &) {
			auto it = by_bucket_id.find(id);
			if (it == by_bucket_id.end())
				return;
			Cidr c = bucket_cidr(family, addr, it->second.dp.per_prefix);
			if (!overlaps(source, c))
				return;
			std::array<uint8_t, 16> a{};
			std::memcpy(a.data(), addr, family == 4 ? 4 : 16);
			found.push_back({id, a});
		});
		for (const auto &[id, addr] : found) {
			const Target &t = by_bucket_id.at(id);
			if (tbl.refill(id, addr.data(), seed, t.dp, now_ticks, pending))
				released.push_back({t.rule->spec.name,
						    format_cidr(bucket_cidr(family, addr.data(), t.dp.per_prefix)),
						    t.rule->spec.algo});
		}
	};
	if (source.family == 4) {
		release_in(SourceTable4(maps.src4.get()), 4);
		release_in(LogTable4(maps.logs4.get()), 4);
	} else {
		release_in(SourceTable6(maps.src6.get()), 6);
		release_in(LogTable6(maps.logs6.get()), 6);
	}
	if (released.empty())
		throw Error("nothing to release: no bucket of " + format_cidr(source) +
			    (rule.empty() ? std::string(" under any limit rule") : " under rule " + rule) +
			    " (a source without one passes already)");
	return released;
}

} // namespace sluice
