// SPDX-License-Identifier: GPL-2.0-only
#include "rule.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <ctime>
#include <set>
#include <unordered_map>

#include "error.h"
#include "sluice_algos.h"

namespace sluice {

namespace {

constexpr std::pair<Algo, std::string_view> ALGO_NAMES[] = {
	{Algo::token_bucket, "token-bucket"}, {Algo::gcra, "gcra"},
	{Algo::fixed_window, "fixed-window"}, {Algo::sliding_log, "sliding-log"},
	{Algo::sliding_window, "sliding-window"},
};

} // namespace

Algo parse_algo(std::string_view text)
{
	for (auto [a, name] : ALGO_NAMES)
		if (name == text)
			return a;
	throw Error("unknown algorithm '" + std::string(text) +
		    "' (use token-bucket, gcra, fixed-window, sliding-log or sliding-window)");
}

std::string_view algo_name(Algo a)
{
	for (auto [algo, name] : ALGO_NAMES)
		if (algo == a)
			return name;
	return "unknown";
}

Proto parse_proto(std::string_view text)
{
	if (text == "tcp")
		return Proto::tcp;
	if (text == "udp")
		return Proto::udp;
	if (text == "icmp" || text == "icmpv6")
		return Proto::icmp;
	throw Error("unknown protocol '" + std::string(text) + "' (use tcp, udp or icmp)");
}

std::string_view proto_name(Proto p)
{
	switch (p) {
	case Proto::tcp: return "tcp";
	case Proto::udp: return "udp";
	case Proto::icmp: return "icmp";
	case Proto::any: break;
	}
	return "any";
}

std::string_view action_name(Action a)
{
	switch (a) {
	case Action::allow: return "allow";
	case Action::deny: return "deny";
	case Action::limit: break;
	}
	return "limit";
}

namespace {

uint16_t parse_port(std::string_view s, std::string_view whole)
{
	unsigned v = 0;
	auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
	if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v > 65535)
		throw Error("invalid port '" + std::string(s) + "' in '" + std::string(whole) + "' (0-65535)");
	return static_cast<uint16_t>(v);
}

} // namespace

PortRange parse_port_range(std::string_view text)
{
	size_t dash = text.find('-');
	PortRange p;
	p.lo = parse_port(text.substr(0, dash), text);
	p.hi = dash == std::string_view::npos ? p.lo : parse_port(text.substr(dash + 1), text);
	if (p.lo > p.hi)
		throw Error("port range '" + std::string(text) + "' is reversed");
	return p;
}

std::string format_ports(const PortRange &p)
{
	if (p.any())
		return "any";
	if (p.lo == p.hi)
		return std::to_string(p.lo);
	return std::to_string(p.lo) + "-" + std::to_string(p.hi);
}

namespace {

const std::pair<const char *, uint8_t> TCP_FLAG_NAMES[] = {
	{"fin", SLUICE_TCP_FIN}, {"syn", SLUICE_TCP_SYN}, {"rst", SLUICE_TCP_RST}, {"psh", SLUICE_TCP_PSH},
	{"ack", SLUICE_TCP_ACK}, {"urg", SLUICE_TCP_URG}, {"ece", SLUICE_TCP_ECE}, {"cwr", SLUICE_TCP_CWR},
};

/// Flag names joined by commas (`all`; `none` where allowed) as a bit set.
uint8_t parse_flag_names(std::string_view list, std::string_view whole, bool none_ok)
{
	std::string lower(list);
	std::transform(lower.begin(), lower.end(), lower.begin(),
		       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
	if (lower == "all")
		return 0xff;
	if (lower == "none") {
		if (!none_ok)
			throw Error("a TCP flag mask of none in '" + std::string(whole) + "' selects nothing: leave "
				    "--tcp-flags out for any flags");
		return 0;
	}
	uint8_t bits = 0;
	std::string_view rest = lower;
	for (;;) {
		size_t comma = rest.find(',');
		std::string_view name = rest.substr(0, comma);
		auto it = std::find_if(std::begin(TCP_FLAG_NAMES), std::end(TCP_FLAG_NAMES),
				       [&](const auto &f) { return name == f.first; });
		if (it == std::end(TCP_FLAG_NAMES))
			throw Error("unknown TCP flag '" + std::string(name) + "' in '" + std::string(whole) +
				    "' (fin, syn, rst, psh, ack, urg, ece, cwr, all" + (none_ok ? ", none)" : ")"));
		if (bits & it->second)
			throw Error("TCP flag '" + std::string(name) + "' twice in '" + std::string(whole) + "'");
		bits |= it->second;
		if (comma == std::string_view::npos)
			break;
		rest.remove_prefix(comma + 1);
	}
	return bits;
}

std::string flag_names(uint8_t bits)
{
	std::string out;
	for (const auto &[name, bit] : TCP_FLAG_NAMES)
		if (bits & bit)
			out += (out.empty() ? "" : ",") + std::string(name);
	return out;
}

} // namespace

TcpFlags parse_tcp_flags(std::string_view text)
{
	size_t eq = text.find('=');
	if (eq == std::string_view::npos)
		throw Error("TCP flags '" + std::string(text) + "' need the form MASK=VALUE, e.g. syn,ack=syn "
			    "(SYN set, ACK clear)");
	TcpFlags f;
	f.mask = parse_flag_names(text.substr(0, eq), text, false);
	f.value = parse_flag_names(text.substr(eq + 1), text, true);
	if (f.value & ~f.mask)
		throw Error("TCP flags '" + std::string(text) + "': " + flag_names(f.value & ~f.mask) +
			    " in the value but not in the mask, so no packet could match");
	return f;
}

std::string format_tcp_flags(const TcpFlags &f)
{
	if (f.any())
		return "any";
	return (f.mask == 0xff ? std::string("all") : flag_names(f.mask)) + "=" +
	       (f.value == 0 ? std::string("none") : f.value == 0xff ? std::string("all") : flag_names(f.value));
}

std::string format_selector(const RuleSpec &spec)
{
	std::string s;
	auto add = [&s](const std::string &word) { s += (s.empty() ? "" : " ") + word; };
	if (spec.proto != Proto::any)
		add(std::string(proto_name(spec.proto)));
	if (!spec.dport.any())
		add("dport " + format_ports(spec.dport));
	if (!spec.sport.any())
		add("sport " + format_ports(spec.sport));
	if (!spec.tcp_flags.any())
		add("flags " + format_tcp_flags(spec.tcp_flags));
	return s.empty() ? "any" : s;
}

uint8_t parse_tcp_flag_set(std::string_view text, std::string_view what)
{
	try {
		return parse_flag_names(text, text, true);
	} catch (const Error &e) {
		throw Error(std::string(what) + ": " + e.what());
	}
}

std::string format_tcp_flag_set(uint8_t flags)
{
	return flags ? flag_names(flags) : "none";
}

void check_rule_name(std::string_view name)
{
	bool all_digits = !name.empty();
	for (char c : name) {
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && c != '.' && c != '_' && c != '-')
			throw Error("invalid rule name '" + std::string(name) +
				    "' (letters, digits, '.', '_' and '-' only)");
		all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
	}
	if (name.empty() || name.size() >= SLUICE_NAME_LEN)
		throw Error("rule name must be 1 to " + std::to_string(SLUICE_NAME_LEN - 1) + " characters");
	// "--name --deny" must not take an option for a name.
	if (!std::isalnum(static_cast<unsigned char>(name[0])))
		throw Error("rule name '" + std::string(name) + "' must start with a letter or a digit");
	if (all_digits)
		throw Error("rule name '" + std::string(name) + "' is all digits and would read as a rule id");
}

std::string format_source(const RuleSpec &spec)
{
	return spec.set.empty() ? format_cidr(spec.cidr) : "@" + spec.set;
}

void parse_source(std::string_view text, RuleSpec &spec)
{
	if (!text.empty() && text[0] == '@') {
		check_set_name(text.substr(1));
		spec.set = std::string(text.substr(1));
		spec.cidr = Cidr{4, {}, 0};
		return;
	}
	spec.set.clear();
	spec.cidr = parse_cidr(text);
}

void resolve_set_family(RuleSpec &spec, int family)
{
	if (spec.set.empty())
		return;
	spec.cidr = Cidr{family, {}, 0};
	if (spec.per_prefix > spec.cidr.max_len())
		throw Error("--per " + std::to_string(spec.per_prefix) + " is longer than an IPv" +
			    std::to_string(family) + " address (set '" + spec.set + "' holds IPv" +
			    std::to_string(family) + " prefixes)");
}

namespace {

/// A rule's ban options: an enforcing limit's, within range; the default
/// threshold filled in.
void validate_ban(RuleSpec &spec)
{
	if (!spec.ban.ns) {
		if (spec.ban.after)
			throw Error("--ban-after needs --ban DURATION");
		return;
	}
	if (spec.action != Action::limit)
		throw Error("--ban applies to --rate rules: a " + std::string(action_name(spec.action)) +
			    " rule has no drops to count");
	if (spec.shadow)
		throw Error("--ban and --shadow do not go together: a shadow rule drops nothing");
	if (spec.ban.ns < BanSpec::RANGE.min_ns || spec.ban.ns > BanSpec::RANGE.max_ns)
		throw Error(BanSpec::RANGE.refusal("--ban", format_duration(spec.ban.ns)));
	if (spec.ban.ns % 1000000000ULL)
		throw Error("--ban " + format_duration(spec.ban.ns) + " is not a whole number of seconds");
	if (spec.ban.after > BanSpec::MAX_AFTER)
		throw Error("--ban-after " + std::to_string(spec.ban.after) + " is out of range (1 to " +
			    std::to_string(BanSpec::MAX_AFTER) + ")");
	if (!spec.ban.after)
		spec.ban.after = BanSpec::DEFAULT_AFTER;
}

} // namespace

void validate_rule(RuleSpec &spec)
{
	if (!spec.set.empty()) {
		check_set_name(spec.set);
		spec.cidr.addr = {};
		spec.cidr.prefix_len = 0;
	}
	if (!spec.name.empty())
		check_rule_name(spec.name);
	if (!spec.tcp_flags.any()) {
		// A flag selector selects TCP packets: it says the protocol.
		if (spec.proto != Proto::any && spec.proto != Proto::tcp)
			throw Error("--syn and --tcp-flags select TCP packets, not --proto " +
				    std::string(proto_name(spec.proto)));
		spec.proto = Proto::tcp;
		if (spec.tcp_flags.value & ~spec.tcp_flags.mask)
			throw Error("TCP flags " + format_tcp_flag_set(spec.tcp_flags.value) +
				    " in the value but not in the mask: no packet could match");
	}
	if (!spec.dport.any() && spec.proto != Proto::tcp && spec.proto != Proto::udp)
		throw Error("--dport needs --proto tcp or --proto udp");
	if (!spec.sport.any() && spec.proto != Proto::tcp && spec.proto != Proto::udp)
		throw Error("--sport needs --proto tcp or --proto udp");
	if (spec.shadow && spec.action == Action::allow)
		throw Error("--shadow applies to --rate and --deny rules: an allow rule drops nothing");
	if (spec.layered && spec.action != Action::limit)
		throw Error("--continue applies to limit rules only");
	if (spec.scope == Scope::local && spec.fallback.amount)
		throw Error("--fallback applies to --scope cluster rules");
	if (spec.scope == Scope::cluster) {
		if (!spec.set.empty())
			throw Error("--scope cluster does not take an address set: the hosts share one limit by its rule's "
				    "prefix; use a local rule on @" + spec.set);
		if (spec.action != Action::limit)
			throw Error("--scope cluster applies to --rate rules: an " +
				    std::string(action_name(spec.action)) + " rule holds on every host as it is");
		if (spec.name.empty())
			throw Error("a --scope cluster rule needs --name: the hosts find its shared limit by name");
		if (spec.algo != Algo::token_bucket && spec.algo != Algo::gcra)
			throw Error("--scope cluster shares token-bucket and gcra limits, not " +
				    std::string(algo_name(spec.algo)));
		if (spec.warmup_ns)
			throw Error("--scope cluster and --warmup do not go together: a shared limit has no warm-up");
		if (spec.fallback.amount) {
			if (spec.fallback.counts_bytes() != spec.rate.counts_bytes())
				throw Error("--fallback " + format_rate(spec.fallback) + " and --rate " +
					    format_rate(spec.rate) + " must both count packets or both bytes");
			if ((unsigned __int128)spec.fallback.amount * spec.rate.period_ns >
			    (unsigned __int128)spec.rate.amount * spec.fallback.period_ns)
				throw Error("--fallback " + format_rate(spec.fallback) + " is above the rule's --rate " +
					    format_rate(spec.rate) + ": it is this host's share of it");
		}
	}
	validate_ban(spec);
	if (spec.action != Action::limit) {
		if (spec.rate.amount)
			throw Error("--rate applies to limit rules, not --" + std::string(action_name(spec.action)));
		if (spec.burst || spec.per_prefix >= 0 || spec.warmup_ns || spec.algo != Algo::token_bucket)
			throw Error(std::string("--burst, --per, --algo and --warmup apply to --rate rules, not --") +
				    std::string(action_name(spec.action)));
		return;
	}
	if (spec.rate.amount == 0)
		throw Error("a limit rule needs --rate");
	// A rule on a set is checked against its set's family when that is known
	// (resolve_set_family).
	if (spec.per_prefix > (spec.set.empty() ? spec.cidr.max_len() : 128))
		throw Error("--per " + std::to_string(spec.per_prefix) + " is longer than an IPv" +
			    std::to_string(spec.cidr.family) + " address (at most " +
			    std::to_string(spec.cidr.max_len()) + ")");
	std::string algo(algo_name(spec.algo));
	if (spec.warmup_ns && spec.algo != Algo::token_bucket)
		throw Error("--warmup applies to the token bucket, not " + algo);
	if (!spec.has_burst()) {
		if (spec.burst)
			throw Error("--burst does not apply to " + algo + ": its limit is the rate itself, "
				    "e.g. --rate 100/10s for 100 per 10-second window");
		if (spec.algo == Algo::sliding_log && spec.rate.counts_bytes())
			throw Error("sliding-log remembers packets, not bytes: use sliding-window for a byte limit");
		WindowParams w = compile_window(spec.rate);
		if (spec.algo == Algo::sliding_log && w.limit > SLUICE_MAX_LOG)
			throw Error("sliding-log keeps at most " + std::to_string(SLUICE_MAX_LOG) +
				    " packets per window, not " + std::to_string(w.limit) +
				    ": use sliding-window for larger limits");
		return;
	}
	if (spec.burst == 0)
		spec.burst = default_burst(spec.rate);
	compile_limit(spec.rate, spec.burst); // throws if out of range
	if (spec.scope == Scope::cluster) {
		InstalledRule alone{0, 0, spec};
		compile_limit(local_rate(alone), local_burst(alone));
	}
	if (spec.warmup_ns) {
		if (spec.warmup_ns < WARMUP_RANGE.min_ns || spec.warmup_ns > WARMUP_RANGE.max_ns)
			throw Error(WARMUP_RANGE.refusal("--warmup", format_duration(spec.warmup_ns)));
		uint64_t need = 3 * min_burst(spec.rate);
		if (spec.burst < need)
			throw Error("--warmup needs a burst of at least " + std::to_string(need) +
				    (spec.rate.counts_bytes() ? " bytes" : " packets") +
				    ": a cold bucket charges three times the cost");
	}
}

bool same_selector(const RuleSpec &a, const RuleSpec &b)
{
	return a.cidr == b.cidr && a.set == b.set && a.proto == b.proto && a.dport == b.dport && a.sport == b.sport &&
	       a.tcp_flags == b.tcp_flags;
}

size_t SelectorHash::operator()(const RuleSpec *s) const
{
	uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a over the selector's words
	auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
	uint64_t a, b;
	std::memcpy(&a, s->cidr.addr.data(), 8);
	std::memcpy(&b, s->cidr.addr.data() + 8, 8);
	mix(a);
	mix(b);
	mix(uint64_t(s->cidr.prefix_len) << 8 | uint64_t(s->cidr.family) << 16 | uint64_t(s->proto) << 24 |
	    uint64_t(s->dport.lo) << 32 | uint64_t(s->dport.hi) << 48);
	mix(uint64_t(s->sport.lo) | uint64_t(s->sport.hi) << 16 | uint64_t(s->tcp_flags.mask) << 32 |
	    uint64_t(s->tcp_flags.value) << 40);
	if (!s->set.empty())
		mix(std::hash<std::string>{}(s->set));
	return h ^ (h >> 29);
}

RuleSpec canonical(RuleSpec s)
{
	if (!s.tcp_flags.any())
		s.proto = Proto::tcp; // a flag selector is a TCP selector
	if (s.action != Action::limit) {
		RuleSpec defaults;
		s.rate = defaults.rate;
		s.algo = defaults.algo;
		s.burst = defaults.burst;
		s.per_prefix = defaults.per_prefix;
		s.warmup_ns = defaults.warmup_ns;
		s.layered = defaults.layered;
		s.ban = defaults.ban;
		s.scope = defaults.scope;
		s.fallback = defaults.fallback;
		return s;
	}
	if (!s.has_burst())
		s.burst = 0;
	else if (s.burst == 0 && s.rate.period_ns)
		s.burst = default_burst(s.rate);
	// The default is the family's (and a long IPv6 prefix's own), not the
	// address length: an IPv6 rule's /128 is a choice to keep.
	if (s.per_prefix < 0 || s.per_prefix == s.default_bucket_prefix())
		s.per_prefix = -1;
	if (s.algo != Algo::token_bucket)
		s.warmup_ns = 0;
	if (s.scope == Scope::local)
		s.fallback = {};
	if (!s.ban.ns)
		s.ban.after = 0;
	else if (!s.ban.after)
		s.ban.after = BanSpec::DEFAULT_AFTER;
	return s;
}

bool same_spec(const RuleSpec &a, const RuleSpec &b)
{
	// Most comparisons are of rules left as they were: the cheap fields first.
	if (a.name != b.name || a.action != b.action || a.shadow != b.shadow || !same_selector(a, b))
		return false;
	return canonical(a) == canonical(b);
}

uint32_t bucket_id(const InstalledRule &r) { return r.bucket_id ? r.bucket_id : r.id; }

namespace {

/// A warm-up token bucket's capacity in ticks (its stored tokens are ticks
/// up to it); 0 for any other rule.
uint64_t warm_capacity(const RuleSpec &s)
{
	if (s.action != Action::limit || s.algo != Algo::token_bucket || !s.warmup_ns || !s.burst)
		return 0;
	try {
		return compile_limit(s.rate, s.burst).capacity;
	} catch (const Error &) {
		return 0; // not a rule that runs: nothing is stored under it
	}
}

} // namespace

BucketChange bucket_change(const RuleSpec &before_spec, const RuleSpec &after_spec)
{
	const RuleSpec b = canonical(before_spec), a = canonical(after_spec);
	if (!same_selector(b, a))
		return b.action == Action::limit || a.action == Action::limit ? BucketChange::selector
									      : BucketChange::keep;
	if (b.action != Action::limit || a.action != Action::limit)
		return b.action != a.action && (b.action == Action::limit || a.action == Action::limit)
			       ? BucketChange::action
			       : BucketChange::keep;
	if (b.bucket_prefix() != a.bucket_prefix())
		return BucketChange::per;
	if (b.algo != a.algo)
		return BucketChange::algorithm;
	if (b.rate.counts_bytes() != a.rate.counts_bytes())
		return BucketChange::unit;
	if (b.algo == Algo::token_bucket && (b.warmup_ns != 0) != (a.warmup_ns != 0))
		return BucketChange::warmup_on_off;
	// A fixed or sliding window's state holds the index of its window since
	// boot: under another window length that index means nothing.
	bool windowed = a.algo == Algo::fixed_window || a.algo == Algo::sliding_window;
	if (windowed && b.rate.period_ns != a.rate.period_ns)
		return BucketChange::window;
	if (a.algo == Algo::sliding_log && compile_window(b.rate).limit != compile_window(a.rate).limit)
		return BucketChange::log_limit;
	// The token bucket's refill stops at the capacity only from below: tokens
	// stored above a smaller one would grow without bound.
	if (warm_capacity(a) < warm_capacity(b))
		return BucketChange::warm_capacity;
	return BucketChange::keep;
}

bool edit_restarts_buckets(const RuleSpec &before, const RuleSpec &after)
{
	return bucket_change(before, after) != BucketChange::keep;
}

std::string_view bucket_change_reason(BucketChange c)
{
	switch (c) {
	case BucketChange::keep: return "kept";
	case BucketChange::selector: return "the selector changes";
	case BucketChange::action: return "the action changes";
	case BucketChange::per: return "the aggregation prefix changes";
	case BucketChange::algorithm: return "the algorithm changes";
	case BucketChange::unit: return "packets <-> bytes";
	case BucketChange::warmup_on_off: return "warm-up on <-> off";
	case BucketChange::window: return "the window length changes";
	case BucketChange::log_limit: return "the log's packets per window change";
	case BucketChange::warm_capacity: return "a warm-up bucket's burst shrinks";
	}
	return "unknown";
}

bool rule_is(const InstalledRule &r, std::string_view key)
{
	return r.spec.name == key || std::to_string(r.id) == key;
}

uint64_t strictness(const RuleSpec &s)
{
	if (s.action == Action::allow)
		return 0;
	if (s.shadow)
		return 1; // passes everything
	if (s.action == Action::deny)
		return UINT64_MAX;
	// Nanoseconds per packet at the sustained rate; a byte rate's packet is
	// 1,500 bytes (12,000 bits).
	unsigned __int128 unit = s.rate.unit == RateUnit::packets ? 1 : s.rate.unit == RateUnit::bytes ? 1500 : 12000;
	unsigned __int128 ns = unit * s.rate.period_ns / std::max<uint64_t>(s.rate.amount, 1);
	return static_cast<uint64_t>(std::clamp<unsigned __int128>(ns, 2, UINT64_MAX - 1));
}

struct sluice_rule to_datapath(const InstalledRule &r)
{
	struct sluice_rule dp = {};
	const RuleSpec &s = r.spec;
	dp.id = bucket_id(r);
	dp.action = static_cast<__u8>(s.action);
	dp.proto = static_cast<__u8>(s.proto);
	dp.dport_lo = s.dport.lo;
	dp.dport_hi = s.dport.hi;
	dp.flags = (s.shadow ? SLUICE_RULE_SHADOW : 0) | (s.layered ? SLUICE_RULE_CONTINUE : 0);
	if (s.scope == Scope::cluster && s.action == Action::limit)
		dp.flags |= SLUICE_RULE_CLUSTER; // its buckets take the cluster sync's grants
	if (!s.sport.any()) {
		dp.flags |= SLUICE_RULE_SPORT;
		dp.sport_lo = s.sport.lo;
		dp.sport_hi = s.sport.hi;
	}
	dp.tcp_flags_mask = s.tcp_flags.mask;
	dp.tcp_flags_value = s.tcp_flags.value & s.tcp_flags.mask;
	dp.strictness = strictness(s);
	if (s.action != Action::limit)
		return dp;
	dp.algo = static_cast<__u8>(s.algo);
	dp.unit = s.rate.counts_bytes() ? SLUICE_UNIT_BYTES : SLUICE_UNIT_PACKETS;
	dp.per_prefix = static_cast<__u8>(s.bucket_prefix());
	if (s.ban.ns) {
		dp.ban.secs = static_cast<__u32>(s.ban.ns / 1000000000ULL); // whole seconds (validate_ban)
		dp.ban.after = s.ban.after ? s.ban.after : BanSpec::DEFAULT_AFTER;
	}
	if (s.has_burst()) {
		LimitParams p = compile_limit(local_rate(r), local_burst(r));
		dp.bucket.inc_mult = p.inc_mult;
		dp.inc_shift = p.inc_shift;
		dp.bucket.capacity = p.capacity;
		dp.bucket.warmup = sluice_ns_to_ticks(s.warmup_ns);
	} else {
		WindowParams w = compile_window(s.rate);
		dp.window.limit = w.limit;
		dp.window.window_ns = w.window_ns;
	}
	if (coarse_clock_suits(dp, coarse_clock_tick_ns()))
		dp.flags |= SLUICE_RULE_COARSE_CLOCK;
	return dp;
}

uint64_t coarse_clock_tick_ns()
{
	static const uint64_t tick = []() -> uint64_t {
		struct timespec res = {};
		if (clock_getres(CLOCK_MONOTONIC_COARSE, &res))
			return uint64_t(0);
		return uint64_t(res.tv_sec) * 1000000000ULL + uint64_t(res.tv_nsec);
	}();
	return tick;
}

bool coarse_clock_suits(const struct sluice_rule &dp, uint64_t tick_ns)
{
	if (tick_ns == 0 || dp.action != SLUICE_ACTION_LIMIT)
		return false;
	switch (dp.algo) {
	case SLUICE_ALGO_TOKEN_BUCKET:
	case SLUICE_ALGO_GCRA:
		// Credit arrives a tick at a time: the burst must hold a tick of it.
		return dp.bucket.capacity >= sluice_ns_to_ticks(tick_ns);
	case SLUICE_ALGO_FIXED_WINDOW:
	case SLUICE_ALGO_SLIDING_WINDOW:
		return dp.window.window_ns >= 100 * tick_ns; // a boundary moves by at most 1 %
	default:
		return false; // the sliding log promises exact times
	}
}

struct sluice_rule_info to_info(const InstalledRule &r)
{
	const RuleSpec &s = r.spec;
	struct sluice_rule_info info = {};
	info.rule_id = r.id;
	std::memcpy(info.name, s.name.data(), std::min(s.name.size(), sizeof(info.name) - 1));
	info.family = static_cast<__u8>(s.cidr.family);
	if (s.set.empty()) {
		std::memcpy(info.addr, s.cidr.addr.data(), 16);
		info.prefix_len = static_cast<__u8>(s.cidr.prefix_len);
	} else {
		std::memcpy(info.addr, s.set.data(), std::min(s.set.size(), SET_NAME_MAX));
		info.prefix_len = SLUICE_INFO_SET;
	}
	info.rate_unit = static_cast<__u8>(s.rate.unit);
	info.rate_amount = s.rate.amount;
	info.rate_period_ns = s.rate.period_ns;
	info.burst = s.burst;
	info.scope = static_cast<__u8>(s.scope);
	info.fallback_amount = s.fallback.amount;
	info.fallback_period_ns = s.fallback.period_ns;
	info.fallback_unit = static_cast<__u8>(s.fallback.unit);
	info.cluster_hosts = r.cluster_hosts;
	return info;
}

InstalledRule from_maps(const struct sluice_rule &dp, const struct sluice_rule_info &info)
{
	InstalledRule r;
	r.id = info.rule_id;
	r.bucket_id = dp.id;
	RuleSpec &s = r.spec;
	s.name.assign(info.name, strnlen(info.name, sizeof(info.name)));
	s.cidr.family = info.family;
	if (info.prefix_len == SLUICE_INFO_SET) {
		s.set.assign(reinterpret_cast<const char *>(info.addr), strnlen(reinterpret_cast<const char *>(info.addr), SET_NAME_MAX));
		s.cidr.prefix_len = 0;
	} else {
		std::memcpy(s.cidr.addr.data(), info.addr, 16);
		s.cidr.prefix_len = info.prefix_len;
	}
	s.action = static_cast<Action>(dp.action);
	s.proto = static_cast<Proto>(dp.proto);
	s.dport = {dp.dport_lo, dp.dport_hi};
	if (dp.flags & SLUICE_RULE_SPORT)
		s.sport = {dp.sport_lo, dp.sport_hi};
	if (dp.tcp_flags_mask)
		s.tcp_flags = {dp.tcp_flags_mask, static_cast<uint8_t>(dp.tcp_flags_value & dp.tcp_flags_mask)};
	s.shadow = dp.flags & SLUICE_RULE_SHADOW;
	s.layered = dp.flags & SLUICE_RULE_CONTINUE;
	if (s.action == Action::limit) {
		s.rate = {info.rate_amount, info.rate_period_ns, static_cast<RateUnit>(info.rate_unit)};
		s.algo = static_cast<Algo>(dp.algo);
		s.burst = info.burst;
		s.per_prefix = dp.per_prefix == s.default_bucket_prefix() ? -1 : dp.per_prefix;
		if (s.algo == Algo::token_bucket)
			s.warmup_ns = dp.bucket.warmup >> SLUICE_TICK_SHIFT;
		s.ban = {uint64_t(dp.ban.secs) * 1000000000ULL, dp.ban.secs ? dp.ban.after : 0};
		s.scope = info.scope == SLUICE_SCOPE_CLUSTER ? Scope::cluster : Scope::local;
		s.fallback = {info.fallback_amount, info.fallback_period_ns, static_cast<RateUnit>(info.fallback_unit)};
		r.cluster_hosts = std::max<uint32_t>(info.cluster_hosts, 1);
	}
	r.spec = canonical(std::move(r.spec));
	return r;
}

Rate local_rate(const InstalledRule &r)
{
	const RuleSpec &s = r.spec;
	if (s.scope == Scope::local)
		return s.rate;
	if (s.fallback.amount)
		return s.fallback;
	// A period n times as long: exact, where dividing the amount would round.
	return {s.rate.amount, s.rate.period_ns * std::max<uint32_t>(r.cluster_hosts, 1), s.rate.unit};
}

uint64_t local_burst(const InstalledRule &r)
{
	const RuleSpec &s = r.spec;
	uint64_t burst = s.burst ? s.burst : default_burst(s.rate);
	if (s.scope == Scope::local)
		return burst;
	Rate l = local_rate(r);
	// burst * (l.amount / l.period) / (rate.amount / rate.period), rounded up
	unsigned __int128 num = (unsigned __int128)burst * l.amount * s.rate.period_ns;
	unsigned __int128 den = (unsigned __int128)l.period_ns * s.rate.amount;
	uint64_t scaled = static_cast<uint64_t>(std::min<unsigned __int128>((num + den - 1) / den, burst));
	return std::max(scaled, min_burst(s.rate));
}

std::string_view scope_name(Scope s)
{
	return s == Scope::cluster ? "cluster" : "local";
}

Scope parse_scope(std::string_view text)
{
	if (text == "local")
		return Scope::local;
	if (text == "cluster")
		return Scope::cluster;
	throw Error("unknown scope '" + std::string(text) + "': use local or cluster");
}

bool match_order(const InstalledRule &a, const InstalledRule &b)
{
	const RuleSpec &x = a.spec, &y = b.spec;
	if (x.cidr.family != y.cidr.family)
		return x.cidr.family < y.cidr.family; // the families never meet: IPv4's first
	if (x.cidr.prefix_len != y.cidr.prefix_len)
		return x.cidr.prefix_len > y.cidr.prefix_len;
	int wx = x.dport.hi - x.dport.lo, wy = y.dport.hi - y.dport.lo;
	if (wx != wy)
		return wx < wy;
	int sx = x.sport.hi - x.sport.lo, sy = y.sport.hi - y.sport.lo;
	if (sx != sy)
		return sx < sy;
	int fx = std::popcount(x.tcp_flags.mask), fy = std::popcount(y.tcp_flags.mask);
	if (fx != fy)
		return fx > fy;
	if ((x.proto != Proto::any) != (y.proto != Proto::any))
		return x.proto != Proto::any;
	return a.id < b.id;
}

std::vector<uint32_t> MatchLists::walk(const Cidr &prefix) const
{
	std::vector<uint32_t> slots;
	auto it = first.find(prefix);
	for (uint32_t i = it == first.end() ? 0 : it->second; i; i = at(i).next) {
		const auto &l = at(i);
		slots.insert(slots.end(), l.slots, l.slots + l.count);
	}
	return slots;
}

namespace {

/// A prefix as two big-endian words and its length: ordered as Cidr's own
/// comparison orders it (family, address bytes, length), compared in
/// integers rather than bytes.
struct PrefixKey {
	uint64_t hi = 0, lo = 0;
	uint16_t family_len = 0; ///< family << 8 | prefix length

	explicit PrefixKey(const Cidr &c)
	{
		for (int i = 0; i < 8; i++) {
			hi = hi << 8 | c.addr[i];
			lo = lo << 8 | c.addr[8 + i];
		}
		family_len = static_cast<uint16_t>(c.family << 8 | c.prefix_len);
	}
	int family() const { return family_len >> 8; }
	int len() const { return family_len & 0xff; }
	bool same_prefix(const PrefixKey &o) const { return hi == o.hi && lo == o.lo && family_len == o.family_len; }
	bool before(const PrefixKey &o) const
	{
		if (family() != o.family())
			return family() < o.family();
		if (hi != o.hi)
			return hi < o.hi;
		if (lo != o.lo)
			return lo < o.lo;
		return len() < o.len();
	}
	/// True if this prefix covers `o` (same family, no longer, o's address
	/// under it).
	bool covers(const PrefixKey &o) const
	{
		if (family() != o.family() || len() > o.len())
			return false;
		// IPv4 addresses sit in hi's top 32 bits, so one rule serves both.
		int l = len();
		uint64_t mhi = l == 0 ? 0 : l >= 64 ? ~0ULL : ~0ULL << (64 - l);
		uint64_t mlo = l <= 64 ? 0 : ~0ULL << (128 - l);
		return (o.hi & mhi) == hi && (o.lo & mlo) == lo;
	}
};

} // namespace

MatchLists compile_match_lists(const std::vector<InstalledRule> &rules, uint32_t base, uint32_t capacity,
			       const SetContents *sets)
{
	// The rules by prefix, in Cidr order, each prefix's own in match order.
	// A rule on a set stands at each outermost prefix of its set.
	struct Item {
		PrefixKey key;
		const Cidr *cidr;
		const InstalledRule *rule;
	};
	std::map<std::string, std::vector<Cidr>> set_prefixes;
	size_t count = 0;
	for (const auto &r : rules) {
		if (r.spec.set.empty()) {
			count++;
			continue;
		}
		auto [it, added] = set_prefixes.try_emplace(r.spec.set);
		if (added) {
			auto s = sets ? sets->find(r.spec.set) : SetContents::const_iterator();
			if (!sets || s == sets->end())
				throw Error("rule '" + r.spec.name + "' uses set '" + r.spec.set +
					    "', which does not exist; see `sluice set list`");
			if (s->second.family != r.spec.cidr.family)
				throw Error("rule '" + r.spec.name + "' is an IPv" + std::to_string(r.spec.cidr.family) +
					    " rule, and set '" + r.spec.set + "' holds IPv" +
					    std::to_string(s->second.family) + " prefixes");
			it->second = outermost(s->second.prefixes);
		}
		count += it->second.size();
	}
	std::vector<Item> items;
	items.reserve(count);
	for (const auto &r : rules) {
		if (r.spec.set.empty()) {
			items.push_back({PrefixKey(r.spec.cidr), &r.spec.cidr, &r});
			continue;
		}
		for (const Cidr &c : set_prefixes.at(r.spec.set))
			items.push_back({PrefixKey(c), &c, &r});
	}
	// At one prefix, match order (match_order) less the prefix itself.
	auto same_prefix_order = [](const InstalledRule &a, const InstalledRule &b) {
		const RuleSpec &x = a.spec, &y = b.spec;
		int wx = x.dport.hi - x.dport.lo, wy = y.dport.hi - y.dport.lo;
		if (wx != wy)
			return wx < wy;
		if ((x.proto != Proto::any) != (y.proto != Proto::any))
			return x.proto != Proto::any;
		return a.id < b.id;
	};
	std::sort(items.begin(), items.end(), [&](const Item &a, const Item &b) {
		if (!a.key.same_prefix(b.key))
			return a.key.before(b.key);
		return same_prefix_order(*a.rule, *b.rule);
	});

	// Each prefix's own rules.
	struct Prefix {
		PrefixKey key;
		const Cidr *cidr;
		size_t from, to; ///< its items
		uint32_t first = 0, lists = 0, layered = 0; ///< its first list; its own lists and layered rules
		int32_t parent = -1; ///< the nearest covering prefix with rules
	};
	std::vector<Prefix> prefixes;
	for (size_t i = 0; i < items.size();) {
		size_t j = i;
		uint32_t layered = 0;
		while (j < items.size() && items[j].key.same_prefix(items[i].key))
			layered += items[j++].rule->spec.layered;
		Prefix p{items[i].key, items[i].cidr, i, j};
		p.lists = static_cast<uint32_t>((j - i + SLUICE_LIST_SLOTS - 1) / SLUICE_LIST_SLOTS);
		p.layered = layered;
		prefixes.push_back(p);
		i = j;
	}

	// Each prefix's nearest covering prefix: in this order a prefix comes
	// after every prefix covering it and before those it covers, so the
	// covering ones are on a stack.
	std::vector<uint32_t> stack;
	for (uint32_t i = 0; i < prefixes.size(); i++) {
		Prefix &p = prefixes[i];
		while (!stack.empty() && !prefixes[stack.back()].key.covers(p.key))
			stack.pop_back();
		if (!stack.empty())
			p.parent = static_cast<int32_t>(stack.back());
		stack.push_back(i);
	}

	// The lists, parents first: a prefix's last list links to its parent's
	// first. A prefix whose rules fit one list shares an equal list (same
	// rules, same parent list) if one was made: the prefixes of a set.
	MatchLists m;
	m.base = base;
	std::unordered_map<std::string, uint32_t> made; // a one-list prefix's list, as bytes -> its index
	auto new_list = [&]() {
		if (m.lists.size() >= capacity)
			throw Error("the rule set needs more than " + std::to_string(capacity) +
				    " match lists; raise --max-rules with `sluice apply` (tables: max_rules)");
		m.lists.push_back({});
		return base + static_cast<uint32_t>(m.lists.size() - 1);
	};
	for (auto &p : prefixes) {
		uint32_t next = p.parent >= 0 ? prefixes[static_cast<size_t>(p.parent)].first : 0;
		if (p.lists == 1) {
			struct sluice_match_list l = {};
			for (size_t k = p.from; k < p.to; k++)
				l.slots[l.count++] = items[k].rule->slot;
			l.next = next;
			std::string bytes(reinterpret_cast<const char *>(&l), sizeof(l));
			auto [it, added] = made.try_emplace(std::move(bytes), 0);
			if (added) {
				it->second = new_list();
				m.lists.back() = l;
			}
			p.first = it->second;
		} else {
			uint32_t last = 0;
			for (size_t k = p.from; k < p.to; k++) {
				if ((k - p.from) % SLUICE_LIST_SLOTS == 0) {
					uint32_t index = new_list();
					if (k == p.from)
						p.first = index;
					else
						m.lists[last - base].next = index;
					last = index;
				}
				auto &l = m.lists[last - base];
				l.slots[l.count++] = items[k].rule->slot;
			}
			m.lists[last - base].next = next;
		}
		m.first.emplace_hint(m.first.end(), *p.cidr, p.first);
	}

	// Lists walked, and layered rules met, from a prefix's first list to the
	// end; parents come first, so theirs are known.
	std::vector<std::pair<uint32_t, uint32_t>> steps(prefixes.size());
	const Prefix *worst = nullptr; // the first to break a limit, shorter prefixes first
	for (size_t i = 0; i < prefixes.size(); i++) {
		const Prefix &p = prefixes[i];
		auto &[n, layered] = steps[i];
		n = p.lists;
		layered = p.layered;
		if (p.parent >= 0) {
			n += steps[p.parent].first;
			layered += steps[p.parent].second;
		}
		if ((layered > SLUICE_MAX_LAYERED || n > SLUICE_MAX_LIST_WALK) &&
		    (!worst || p.key.len() < worst->key.len()))
			worst = &p;
	}
	if (worst) {
		auto [n, layered] = steps[static_cast<size_t>(worst - prefixes.data())];
		const Cidr &prefix = *worst->cidr;
		if (layered > SLUICE_MAX_LAYERED)
			throw Error("too many layered (--continue) rules cover " + format_cidr(prefix) + ": " +
				    std::to_string(layered) + ", and at most " + std::to_string(SLUICE_MAX_LAYERED) +
				    " may apply to one packet");
		throw Error("too many rules cover " + format_cidr(prefix) + ": they fill " + std::to_string(n) +
			    " match lists (" + std::to_string(SLUICE_LIST_SLOTS) +
			    " rules a list, a list at least for each covering prefix), and a packet walks at most " +
			    std::to_string(SLUICE_MAX_LIST_WALK));
	}
	return m;
}

} // namespace sluice
