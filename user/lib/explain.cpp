// SPDX-License-Identifier: GPL-2.0-only
#include "explain.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "error.h"
#include "rule_table.h"
#include "sluice_algos.h"
#include "sources.h"
#include "stats.h"
#include "tick_clock.h"

namespace sluice {

namespace {

using u128 = unsigned __int128;

constexpr uint64_t TICKS_PER_NS = 1ULL << SLUICE_TICK_SHIFT;

uint64_t ticks_to_ns_up(uint64_t ticks) { return (ticks + TICKS_PER_NS - 1) >> SLUICE_TICK_SHIFT; }

/// Units (packets or bytes) that `ticks` of credit are worth, rounded down.
uint64_t ticks_to_units(const struct sluice_rule &dp, uint64_t ticks)
{
	if (!dp.bucket.inc_mult)
		return 0;
	u128 units = (u128(ticks) << dp.inc_shift) / dp.bucket.inc_mult;
	return units > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(units);
}

/// The program's decision of a multi-word algorithm (sluice_decide_locked), on a copy.
bool admit_locked(union sluice_algo_state s, const struct sluice_rule &dp, uint64_t now, uint64_t cost,
		  union sluice_algo_state *after = nullptr)
{
	int ok = sluice_decide_locked(&s, &dp, now, cost);
	if (after)
		*after = s;
	return ok;
}

/// The earliest time in [now, now + horizon] at which admits(t) holds, for
/// a predicate that, once true, stays true as time goes on (every algorithm
/// only earns credit while nothing is charged). None if it never holds there.
template <class F> std::optional<uint64_t> earliest(uint64_t now, uint64_t horizon, F admits)
{
	if (admits(now))
		return now;
	if (!admits(now + horizon))
		return std::nullopt;
	uint64_t lo = now, hi = now + horizon; // admits(lo) false, admits(hi) true
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		(admits(mid) ? hi : lo) = mid;
	}
	return hi;
}

/// The largest u in [0, limit] for which admits(u) holds (admits(0) does).
template <class F> uint64_t largest(uint64_t limit, F admits)
{
	uint64_t lo = 0, hi = limit;
	while (lo < hi) {
		uint64_t mid = hi - (hi - lo) / 2;
		if (admits(mid))
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

void retry(BucketState &s, uint64_t now, std::optional<uint64_t> when)
{
	s.passes = when && *when == now;
	s.never = !when;
	s.retry_after_ns = when ? *when - now : 0;
}

struct sluice_source_counters counts_of(const struct sluice_source_counters &c)
{
	return {sluice_cnt_value(c.passed_packets), sluice_cnt_value(c.passed_bytes),
		sluice_cnt_value(c.dropped_packets), sluice_cnt_value(c.dropped_bytes)};
}

/// The program's rule_matches.
Match rule_match(const RuleSpec &r, const ExplainPacket &p)
{
	Match m = Match::yes;
	if (r.proto != Proto::any) {
		if (!p.proto)
			m = Match::maybe;
		else if (static_cast<uint8_t>(r.proto) != *p.proto)
			return Match::no;
	}
	if (!r.dport.any()) {
		if (!p.dport)
			m = Match::maybe;
		else if (*p.dport < r.dport.lo || *p.dport > r.dport.hi)
			return Match::no;
	}
	if (!r.sport.any()) {
		if (!p.sport)
			m = Match::maybe;
		else if (*p.sport < r.sport.lo || *p.sport > r.sport.hi)
			return Match::no;
	}
	if (!r.tcp_flags.any()) {
		if (!p.tcp_flags)
			m = Match::maybe;
		else if (!r.tcp_flags.matches(*p.tcp_flags))
			return Match::no;
	}
	return m;
}

long parse_number(std::string_view text, const char *what)
{
	long v = -1;
	auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
	if (text.empty() || ec != std::errc() || end != text.data() + text.size())
		throw Error(std::string("invalid ") + what + " '" + std::string(text) + "'");
	return v;
}

} // namespace

ExplainPacket make_explain_packet(std::string_view src, std::string_view proto, std::optional<long> dport,
				  std::optional<long> bytes)
{
	ExplainPacket p;
	if (src.find('/') != std::string_view::npos)
		throw Error("explain takes a source address, not a prefix: '" + std::string(src) + "'");
	Cidr c;
	try {
		c = parse_cidr(src);
	} catch (const Error &) {
		throw Error("invalid source address '" + std::string(src) + "'");
	}
	p.family = c.family;
	p.src = c.addr;
	if (!proto.empty()) {
		if (proto == "tcp" || proto == "udp" || proto == "icmp" || proto == "icmpv6") {
			p.proto = static_cast<uint8_t>(parse_proto(proto));
		} else {
			long n = -1;
			try {
				n = parse_number(proto, "protocol");
			} catch (const Error &) {
			}
			if (n < 0 || n > 255)
				throw Error("unknown protocol '" + std::string(proto) +
					    "' (use tcp, udp, icmp or a protocol number 0-255)");
			// As the program reads them: ICMPv6 is ICMP to rules.
			p.proto = static_cast<uint8_t>(n == 58 ? int(SLUICE_PROTO_ICMP) : int(n));
		}
	}
	if (dport) {
		if (!p.proto || (*p.proto != SLUICE_PROTO_TCP && *p.proto != SLUICE_PROTO_UDP))
			throw Error("--dport needs --proto tcp or --proto udp");
		if (*dport < 0 || *dport > 65535)
			throw Error("port " + std::to_string(*dport) + " is out of range (0-65535)");
		p.dport = static_cast<uint16_t>(*dport);
	}
	if (bytes) {
		if (*bytes < 1 || *bytes > 65535)
			throw Error("--bytes " + std::to_string(*bytes) + " is out of range: an IP length of 1-65535 bytes");
		p.bytes = static_cast<uint64_t>(*bytes);
	}
	return p;
}

void add_explain_l4(ExplainPacket &p, std::optional<long> sport, const std::string &tcp_flags)
{
	if (!tcp_flags.empty()) {
		if (p.proto && *p.proto != SLUICE_PROTO_TCP)
			throw Error("--syn and --tcp-flags describe a TCP packet, not --proto " +
				    std::string(proto_name(static_cast<Proto>(*p.proto))));
		p.proto = SLUICE_PROTO_TCP;
		p.tcp_flags = parse_tcp_flag_set(tcp_flags, "--tcp-flags");
	}
	if (sport) {
		if (!p.proto || (*p.proto != SLUICE_PROTO_TCP && *p.proto != SLUICE_PROTO_UDP))
			throw Error("--sport needs --proto tcp or --proto udp");
		if (*sport < 0 || *sport > 65535)
			throw Error("port " + std::to_string(*sport) + " is out of range (0-65535)");
		p.sport = static_cast<uint16_t>(*sport);
	}
}

std::string describe_packet(const ExplainPacket &p)
{
	std::string out = format_address(p.family, p.src.data()) + ", ";
	if (!p.proto)
		out += "protocol unknown";
	else if (*p.proto == SLUICE_PROTO_TCP || *p.proto == SLUICE_PROTO_UDP || *p.proto == SLUICE_PROTO_ICMP)
		out += std::string(proto_name(static_cast<Proto>(*p.proto)));
	else
		out += "protocol " + std::to_string(*p.proto);
	if (p.proto && (*p.proto == SLUICE_PROTO_TCP || *p.proto == SLUICE_PROTO_UDP))
		out += p.dport ? " port " + std::to_string(*p.dport) : " port unknown";
	if (p.sport)
		out += " from port " + std::to_string(*p.sport);
	if (p.tcp_flags)
		out += ", flags " + format_tcp_flag_set(*p.tcp_flags);
	return out + ", " + std::to_string(p.bytes) + " bytes";
}

std::string_view match_name(Match m)
{
	switch (m) {
	case Match::no: return "no";
	case Match::maybe: return "maybe";
	case Match::yes: break;
	}
	return "yes";
}

std::string_view role_name(Role r)
{
	switch (r) {
	case Role::no_match: return "no match";
	case Role::allow_unknown: return "skipped: an allow never matches an unknown selector";
	case Role::layered: return "layered: charged, the walk goes on";
	case Role::layered_drop: return "layered: drops it, the walk ends";
	case Role::unknown: return "may match: charged, the walk goes on";
	case Role::unknown_drop: return "may match: drops it, the walk ends";
	case Role::weighed: return "weighed: a stricter candidate decides";
	case Role::decides: return "decides";
	case Role::not_reached: break;
	}
	return "not reached";
}

std::string_view role_key(Role r)
{
	switch (r) {
	case Role::no_match: return "no_match";
	case Role::allow_unknown: return "allow_unknown";
	case Role::layered: return "layered";
	case Role::layered_drop: return "layered_drop";
	case Role::unknown: return "unknown";
	case Role::unknown_drop: return "unknown_drop";
	case Role::weighed: return "weighed";
	case Role::decides: return "decides";
	case Role::not_reached: break;
	}
	return "not_reached";
}

RuleWalk walk_rules(const std::vector<InstalledRule> &rules, const ExplainPacket &pkt, const SetContents *sets)
{
	RuleWalk walk;
	std::vector<InstalledRule> family;
	for (const auto &r : rules)
		if (r.spec.cidr.family == pkt.family)
			family.push_back(r);
	// A set stands for its outermost prefix over the source, the one its
	// rule meets the packet at (none if the source is outside the set).
	Cidr host{pkt.family, pkt.src, pkt.family == 4 ? 32 : 128};
	SetContents near;
	for (const auto &name : sets_used(family, [](const InstalledRule &r) -> const RuleSpec & { return r.spec; })) {
		AddressSet s = sets && sets->count(name) ? sets->at(name) : SetStore::for_default_instance().read(name);
		AddressSet one{s.family, {}};
		for (const Cidr &c : s.prefixes)
			if (cidr_contains(c, host) && (one.prefixes.empty() || c.prefix_len < one.prefixes[0].prefix_len))
				one.prefixes = {c};
		near.emplace(name, std::move(one));
	}
	// The lists the program walks, compiled as the controller compiles them.
	MatchLists lists = compile_match_lists(family, 1, UINT32_MAX / 2, &near);
	Cidr at{pkt.family, pkt.src, 0};
	for (int len = at.max_len(); len >= 0 && !walk.prefix; len--) {
		Cidr c = at;
		c.prefix_len = len;
		mask_address(c.addr, len);
		if (lists.first.count(c))
			walk.prefix = c;
	}
	if (!walk.prefix)
		return walk;
	for (uint32_t slot : lists.walk(*walk.prefix)) {
		auto it = std::find_if(family.begin(), family.end(), [&](const auto &r) { return r.slot == slot; });
		walk.candidates.push_back({*it, rule_match(it->spec, pkt), Role::not_reached, std::nullopt});
		if (!it->spec.set.empty())
			walk.candidates.back().set_prefix = near.at(it->spec.set).prefixes.at(0);
	}

	// The program's walk_list, candidate by candidate.
	std::optional<size_t> best;
	uint64_t best_strictness = 0;
	unsigned charged_unknown = 0;
	for (size_t i = 0; i < walk.candidates.size(); i++) {
		Candidate &c = walk.candidates[i];
		const RuleSpec &s = c.rule.spec;
		if (c.match == Match::no) {
			c.role = Role::no_match;
			continue;
		}
		if (c.match == Match::maybe && s.action == Action::allow) {
			c.role = Role::allow_unknown;
			continue;
		}
		if (s.layered) {
			c.role = Role::layered;
			walk.applied.push_back(i);
			continue;
		}
		if (c.match == Match::maybe && charged_unknown < SLUICE_MAX_UNKNOWN_CHARGED) {
			c.role = Role::unknown;
			walk.applied.push_back(i);
			charged_unknown++;
			continue;
		}
		c.role = Role::weighed;
		uint64_t st = strictness(s);
		if (!best || st > best_strictness) {
			best = i;
			best_strictness = st;
		}
		if (c.match == Match::yes)
			break;
	}
	if (best) {
		walk.candidates[*best].role = Role::decides;
		walk.decider = best;
		walk.applied.push_back(*best);
	}
	return walk;
}

ClockReading ClockReading::now()
{
	auto read = [](clockid_t id) {
		struct timespec ts;
		if (clock_gettime(id, &ts))
			throw_errno("cannot read the clock", errno);
		return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
	};
	return {read(CLOCK_MONOTONIC), program_coarse_ns()};
}

BucketState bucket_state(const struct sluice_rule &dp, const std::optional<struct sluice_source_state> &b,
			 uint64_t now, uint64_t cost)
{
	BucketState s;
	s.exists = b.has_value();
	if (b)
		s.counters = counts_of(b->cnt);

	if (sluice_gcra_form(&dp)) {
		// One arrival time: tokens = capacity - (TAT - now). A new bucket starts at now.
		uint64_t now_t = sluice_ns_to_ticks(now), cap = dp.bucket.capacity;
		uint64_t tat = b ? b->word - b->algo.gcra.off : now_t;
		uint64_t debt = static_cast<int64_t>(tat - now_t) > 0 ? tat - now_t : 0;
		uint64_t credit = debt < cap ? cap - debt : 0, inc = sluice_rule_cost_ticks(&dp, cost);
		__u64 next;
		s.tokens = ticks_to_units(dp, credit);
		s.capacity = ticks_to_units(dp, cap);
		s.remaining = inc ? credit / inc : 0;
		if (sluice_gcra_admit(tat, now_t, inc, cap, &next)) {
			s.passes = true;
		} else if (inc > cap) {
			s.never = true;
		} else {
			// It passes once TAT + inc - t <= capacity.
			uint64_t base = debt ? tat : now_t;
			s.retry_after_ns = ticks_to_ns_up(base + inc - cap - now_t);
		}
		return s;
	}

	union sluice_algo_state state = {};
	if (b) {
		state = b->algo;
	} else if (dp.algo == SLUICE_ALGO_TOKEN_BUCKET) {
		sluice_tb_init(&state.tb.tokens, &state.tb.last, &state.tb.cold, sluice_ns_to_ticks(now),
			       dp.bucket.capacity, dp.bucket.warmup);
	}
	auto admits = [&](uint64_t t) { return admit_locked(state, dp, t, cost); };
	union sluice_algo_state at_now;
	admit_locked(state, dp, now, 0, &at_now); // refilled, or rolled to now's window: charges nothing

	if (dp.algo == SLUICE_ALGO_TOKEN_BUCKET) { // with a warm-up
		s.tokens = ticks_to_units(dp, at_now.tb.tokens);
		s.capacity = ticks_to_units(dp, dp.bucket.capacity);
		// Back to back, each packet costs less as the bucket warms: count them.
		union sluice_algo_state run = at_now;
		for (uint64_t n = 0; n < (1u << 24) && admit_locked(run, dp, now, cost, &run); n++)
			s.remaining++;
		// Tokens only grow until it is full, and a full bucket admits any packet.
		retry(s, now, earliest(now, ticks_to_ns_up(dp.bucket.capacity) + 1, admits));
		return s;
	}

	uint64_t w = dp.window.window_ns;
	s.capacity = dp.window.limit;
	s.tokens = largest(dp.window.limit, [&](uint64_t u) { return admit_locked(at_now, dp, now, u); });
	s.remaining = cost ? s.tokens / cost : 0;
	uint64_t window = dp.algo == SLUICE_ALGO_FIXED_WINDOW ? at_now.fixed.window : at_now.sliding.window;
	// Windows are aligned since boot, a fresh bucket's too.
	s.resets_in_ns = (window + 1) * w > now ? (window + 1) * w - now : 0;
	retry(s, now, earliest(now, 2 * w + 1, admits));
	return s;
}

BucketState log_state(const struct sluice_rule &dp, const std::optional<struct sluice_log_state> &b,
		      uint64_t now, uint64_t cost)
{
	BucketState s;
	s.exists = b.has_value();
	struct sluice_log_state st = {};
	if (b) {
		st = *b;
		s.counters = counts_of(b->cnt);
	}
	uint32_t limit = static_cast<uint32_t>(dp.window.limit);
	uint64_t w = dp.window.window_ns;
	auto admits_at = [&](uint64_t t, uint64_t c) {
		struct sluice_log_state copy = st;
		return sluice_log_admit(copy.ring, &copy.head, t, w, limit, c) == 1;
	};
	s.capacity = limit;
	s.tokens = largest(limit, [&](uint64_t k) { return k == 0 || admits_at(now, k); });
	s.remaining = cost ? s.tokens / cost : 0;
	// The oldest pass still inside the window leaves it first.
	for (uint32_t i = 0; i < limit && i < SLUICE_MAX_LOG; i++) {
		uint64_t t = st.ring[i];
		if (t && static_cast<int64_t>(now - t) < static_cast<int64_t>(w)) {
			uint64_t leaves = t + w - now;
			s.resets_in_ns = s.resets_in_ns ? std::min(s.resets_in_ns, leaves) : leaves;
		}
	}
	retry(s, now, earliest(now, w + 1, [&](uint64_t t) { return admits_at(t, cost); }));
	return s;
}

Explanation explain(const MapSet &maps, const ExplainPacket &pkt, const ClockReading &clock)
{
	Explanation e;
	e.packet = pkt;
	RuleTable table(maps);
	e.walk = walk_rules(table.list(), pkt);
	Cidr src{pkt.family, pkt.src, pkt.family == 4 ? 32 : 128};
	// Bans are kept on the coarse clock: the program reads jiffies.
	if ((e.ban = covering_ban(maps, src, clock.coarse_ns))) {
		e.verdict = SLUICE_CNT_DROP_BAN;
		return e;
	}
	if (!e.walk.prefix)
		return e;

	struct sluice_config cfg = {};
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(maps.config.get(), &zero, &cfg))
		throw_errno("cannot read the program's configuration", errno);
	const PendingDrops pending = read_accounts(maps); // less what a counters reset zeroed

	e.verdict = SLUICE_CNT_PASS_NO_MATCH;
	for (size_t index : e.walk.applied) {
		const Candidate &c = e.walk.candidates[index];
		AppliedRule a;
		a.candidate = index;
		a.dp = table.datapath_rule(c.rule.slot);
		const RuleSpec &s = c.rule.spec;
		bool shadow = a.dp.flags & SLUICE_RULE_SHADOW;
		int verdict;
		if (s.action == Action::allow) {
			verdict = SLUICE_CNT_PASS_ALLOW;
		} else if (s.action == Action::deny) {
			a.drops = true;
			verdict = shadow ? SLUICE_CNT_PASS_SHADOW : SLUICE_CNT_DROP_DENY;
		} else {
			// The bucket's address: the source masked to the rule's per-prefix.
			Cidr bucket{pkt.family, pkt.src, a.dp.per_prefix};
			mask_address(bucket.addr, bucket.prefix_len);
			a.bucket = bucket;
			uint64_t now = clock.for_rule(a.dp);
			uint64_t cost = a.dp.unit == SLUICE_UNIT_BYTES ? pkt.bytes : 1;
			uint32_t filed_under = bucket_id(c.rule); // not the rule's id once an edit restarted them
			if (a.dp.algo == SLUICE_ALGO_SLIDING_LOG) {
				std::optional<struct sluice_log_state> found;
				if (pkt.family == 4)
					found = LogTable4(maps.logs4.get()).find(filed_under, bucket.addr.data(), cfg.hash_seed);
				else
					found = LogTable6(maps.logs6.get()).find(filed_under, bucket.addr.data(), cfg.hash_seed);
				a.state = log_state(a.dp, found, now, cost);
			} else {
				std::optional<struct sluice_source_state> found;
				if (pkt.family == 4)
					found = SourceTable4(maps.src4.get())
							.find(filed_under, bucket.addr.data(), cfg.hash_seed, pending);
				else
					found = SourceTable6(maps.src6.get())
							.find(filed_under, bucket.addr.data(), cfg.hash_seed, pending);
				a.state = bucket_state(a.dp, found, now, cost);
			}
			a.drops = !a.state->passes;
			verdict = !a.drops ? SLUICE_CNT_PASS_LIMIT : shadow ? SLUICE_CNT_PASS_SHADOW : SLUICE_CNT_DROP_RATE;
		}
		e.applied.push_back(a);
		e.decided_by = e.applied.size() - 1;
		e.verdict = verdict;
		// A layered rule, or one charged as it may match, that drops ends
		// the walk: no later rule sees the packet.
		Role &role = e.walk.candidates[index].role;
		if (((SLUICE_DROP_VERDICTS >> verdict) & 1) && (role == Role::layered || role == Role::unknown)) {
			role = role == Role::layered ? Role::layered_drop : Role::unknown_drop;
			for (size_t i = index + 1; i < e.walk.candidates.size(); i++)
				e.walk.candidates[i].role = Role::not_reached;
			break;
		}
	}
	return e;
}

} // namespace sluice
