// SPDX-License-Identifier: GPL-2.0-only
// Rules: what an operator asks for, how it is checked, and how a set of rules
// becomes the data plane's per-prefix candidate lists.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "net.h"
#include "rate.h"
#include "sets.h"
#include "sluice_abi.h"

namespace sluice {

enum class Action : uint8_t { limit = SLUICE_ACTION_LIMIT, allow = SLUICE_ACTION_ALLOW, deny = SLUICE_ACTION_DENY };
enum class Algo : uint8_t {
	token_bucket = SLUICE_ALGO_TOKEN_BUCKET,
	gcra = SLUICE_ALGO_GCRA,
	fixed_window = SLUICE_ALGO_FIXED_WINDOW,
	sliding_log = SLUICE_ALGO_SLIDING_LOG,
	sliding_window = SLUICE_ALGO_SLIDING_WINDOW,
};
enum class Scope : uint8_t { local = SLUICE_SCOPE_LOCAL, cluster = SLUICE_SCOPE_CLUSTER };
enum class Proto : uint8_t { any = SLUICE_PROTO_ANY, icmp = SLUICE_PROTO_ICMP, tcp = SLUICE_PROTO_TCP, udp = SLUICE_PROTO_UDP };

/// An inclusive destination port range; 0-65535 means any port.
struct PortRange {
	uint16_t lo = 0;
	uint16_t hi = 65535;

	bool any() const { return lo == 0 && hi == 65535; }
	bool operator==(const PortRange &) const = default;
};

/// The TCP flags a rule selects, as nft's `tcp flags & MASK == VALUE`: a TCP
/// packet matches when its flags masked by `mask` equal `value` (a subset of
/// the mask). Mask 0: any flags, any protocol.
struct TcpFlags {
	uint8_t mask = 0;
	uint8_t value = 0;

	bool any() const { return mask == 0; }
	bool matches(uint8_t flags) const { return (flags & mask) == value; }
	bool operator==(const TcpFlags &) const = default;
};
/// `--syn`: SYN set and ACK clear, a connection attempt.
inline constexpr TcpFlags SYN_ONLY{SLUICE_TCP_SYN | SLUICE_TCP_ACK, SLUICE_TCP_SYN};

/// A rule as the operator states it.
/// A limit rule's temporary ban (bpf/lib/bans.h, docs/packets.md): a
/// source this rule drops `after` times within `ns` (counted from the
/// first), its bucket off probation, is banned for `ns`: all its traffic
/// is dropped. ns 0: the rule bans no one.
struct BanSpec {
	uint64_t ns = 0;
	uint32_t after = 0; ///< 0 with ns: the default, DEFAULT_AFTER
	static constexpr uint32_t DEFAULT_AFTER = 1;
	static constexpr uint32_t MAX_AFTER = 1000000;
	/// How long a ban may last: a second to a year and a day (whole seconds).
	static constexpr DurationRange RANGE{1000000000ULL, SLUICE_MAX_BAN_NS};
	bool operator==(const BanSpec &) const = default;
};

/// How long a warm-up (--warmup) may take.
inline constexpr DurationRange WARMUP_RANGE{1000000ULL, 86400000000000ULL};

struct RuleSpec {
	std::string name;
	Cidr cidr;
	Action action = Action::limit;
	Proto proto = Proto::any;
	PortRange dport;
	PortRange sport;    ///< TCP and UDP: the source port range
	TcpFlags tcp_flags; ///< TCP only (a rule with flags is a TCP rule)
	Rate rate;          ///< limit rules only
	Algo algo = Algo::token_bucket; ///< limit rules only
	uint64_t burst = 0; ///< token bucket and GCRA: packets, or bytes for byte rates
	uint64_t warmup_ns = 0; ///< token bucket only: warm-up period, 0 for none
	int per_prefix = -1; ///< limit rules only: bucket prefix length; -1 = the default (default_bucket_prefix)
	bool shadow = false; ///< count would-be drops but pass them
	BanSpec ban;         ///< limit rules only
	/// `--continue` (limit rules only): a packet this rule passes goes on to
	/// the next matching rule instead of being decided here.
	bool layered = false;
	/// `--scope cluster`: the rate is shared by every host that runs the
	/// rule, through the agents' store (see user/cluster).
	Scope scope = Scope::local;
	/// Cluster rules: the local limit while the store is out of reach;
	/// amount 0 for the default, the rate divided by the host count.
	Rate fallback;
	/// A rule on an address set (`@NAME`, sets.h): the set's name, and
	/// `cidr` is the set's family's /0. Empty for a rule on `cidr`.
	std::string set;

	/// True for the algorithms with a burst (token bucket, GCRA).
	bool has_burst() const { return algo == Algo::token_bucket || algo == Algo::gcra; }

	/// The aggregation prefix length in effect: --per, else the default.
	int bucket_prefix() const { return per_prefix < 0 ? default_bucket_prefix() : per_prefix; }

	/// Without --per: one bucket per IPv4 address, and per IPv6 /64, the
	/// block one host or subnet is given (a rule longer than /64 has one
	/// bucket either way, named by its own prefix).
	int default_bucket_prefix() const
	{
		return cidr.family == 4 ? 32 : cidr.prefix_len > IPV6_DEFAULT_PER ? cidr.prefix_len : IPV6_DEFAULT_PER;
	}
	static constexpr int IPV6_DEFAULT_PER = 64;

	/// Field by field, as written: compare canonical forms (same_spec) to
	/// ask whether two rules mean the same.
	bool operator==(const RuleSpec &) const = default;
};

/// A rule's canonical form: the one way of writing each rule, its defaults
/// filled in and what its action ignores cleared. A limit rule's omitted
/// burst becomes the default burst (a window algorithm's burst 0); `per`
/// equal to the default aggregation (/32 for IPv4, /64 or the rule's own
/// longer prefix for IPv6) becomes -1, any other length stays (an IPv6
/// rule's /128 is not its default); warm-up is kept for the token bucket
/// alone, the fallback for cluster rules alone. An allow or deny rule keeps
/// its name, selector, action and shadow. Two rules mean the same exactly
/// when their canonical forms are equal. Export, diff, apply and `rule list`
/// all read rules in this form.
RuleSpec canonical(RuleSpec spec);

/// A rule held in the maps: its stable id, the id of its buckets (the rule's
/// own id until an edit restarts them) and its slot in the rule arrays.
struct InstalledRule {
	uint32_t id = 0;
	uint32_t slot = 0;
	RuleSpec spec;
	uint32_t bucket_id = 0; ///< 0: the same as id; read it through sluice::bucket_id()
	/// Cluster rules: the host count the agent last learnt from the store,
	/// which divides the rate into the default local share. State, not spec:
	/// edits and policies keep it.
	uint32_t cluster_hosts = 1;
};

/// The id a rule's buckets are filed under in the source and log tables
/// (struct sluice_rule's id, the key's rule part): the rule's own id until an
/// edit restarts its buckets, then a fresh id that no rule ever had. Every
/// reader of the bucket tables (stats, top, the agent's metrics, explain,
/// events, the cluster sync) finds a rule's buckets through this, never
/// through the rule's id.
uint32_t bucket_id(const InstalledRule &r);

/// A cluster rule's local share while the store is out of reach, the rate
/// its data-plane entry is compiled with: the fallback if set, else the rate
/// divided by the host count. A local rule's rate as it is.
Rate local_rate(const InstalledRule &r);
/// The burst that goes with local_rate: the rule's burst scaled as the rate
/// is (at least the smallest burst), so the hosts' bursts add up to one.
uint64_t local_burst(const InstalledRule &r);
std::string_view scope_name(Scope s);
Scope parse_scope(std::string_view text);

Algo parse_algo(std::string_view text);
std::string_view algo_name(Algo a);
Proto parse_proto(std::string_view text);
std::string_view proto_name(Proto p);
/// "80" or "8000-8080".
PortRange parse_port_range(std::string_view text);
std::string format_ports(const PortRange &p);
/// `--tcp-flags`' value, MASK=VALUE: each side flag names joined by commas
/// (fin, syn, rst, psh, ack, urg, ece, cwr, in any case), `all` for every
/// flag, `none` (the value only) for none; the value within the mask.
/// "syn,ack=syn" is `--syn`. Throws Error with one line.
TcpFlags parse_tcp_flags(std::string_view text);
/// The canonical form parse_tcp_flags reads back: names in the header's bit
/// order, `all` for a full mask, `none` for an empty value; "any" for no selector.
std::string format_tcp_flags(const TcpFlags &f);
/// What a rule selects beyond its prefix, in words: "tcp dport 22 flags
/// syn,ack=syn", "udp sport 123", or "any".
std::string format_selector(const RuleSpec &spec);
/// A packet's flags, for `explain`: names joined by commas, or `none`.
uint8_t parse_tcp_flag_set(std::string_view text, std::string_view what);
std::string format_tcp_flag_set(uint8_t flags);
std::string_view action_name(Action a);
/// Rule names: 1-31 characters of letters, digits, '.', '_' and '-', not all digits.
void check_rule_name(std::string_view name);

/// How a rule's source is written: "@NAME" for a set, else its CIDR.
std::string format_source(const RuleSpec &spec);
/// Parses a rule's source: "@NAME" (a set, family IPv4 until the set is
/// known: resolve_set_family) or a CIDR.
void parse_source(std::string_view text, RuleSpec &spec);
/// Gives a rule on a set its set's family (cidr: that family's /0); throws
/// if the rule's --per does not fit it. Nothing for a rule on a CIDR.
void resolve_set_family(RuleSpec &spec, int family);
/// The names of the sets `rules` use, sorted, once each.
template <class Rules> std::vector<std::string> sets_used(const Rules &rules, auto spec_of)
{
	std::vector<std::string> out;
	for (const auto &r : rules)
		if (!spec_of(r).set.empty())
			out.push_back(spec_of(r).set);
	std::sort(out.begin(), out.end());
	out.erase(std::unique(out.begin(), out.end()), out.end());
	return out;
}

/// Checks a rule on its own (selectors, burst, aggregation prefix) and fills
/// in defaults. Throws Error with the first problem found.
void validate_rule(RuleSpec &spec);

/// True if two rules select exactly the same traffic (same prefix, protocol,
/// ports and TCP flags): the second one could never match.
bool same_selector(const RuleSpec &a, const RuleSpec &b);
/// Hash and equality of rules' selectors (prefix, protocol, ports) as
/// same_selector compares them: for finding duplicate selectors in one pass.
struct SelectorHash {
	size_t operator()(const RuleSpec *s) const;
};
struct SelectorEqual {
	bool operator()(const RuleSpec *a, const RuleSpec *b) const { return same_selector(*a, *b); }
};

/// True if two rules mean the same: their canonical forms are equal (see
/// canonical()).
bool same_spec(const RuleSpec &a, const RuleSpec &b);

/// Why an edit restarts a rule's buckets, or keep: the rows of the table of
/// edits (docs: "Which edits keep buckets").
enum class BucketChange : uint8_t {
	keep,          ///< the buckets stay as they are: a rule's state is read the same way
	selector,      ///< prefix, protocol, ports or TCP flags: other traffic lands in the buckets
	action,        ///< to or from limit
	per,           ///< the aggregation prefix: a bucket is another set of addresses
	algorithm,     ///< another algorithm stores another state
	unit,          ///< packets <-> bytes: credit counted in another unit
	warmup_on_off, ///< a warm-up token bucket stores tokens and coldness, the other form one timestamp
	window,        ///< fixed or sliding window length: its state holds a window's index
	log_limit,     ///< sliding log's packets per window: its ring is laid out by that count
	warm_capacity, ///< a warm-up bucket whose burst (in time) shrinks: stored tokens would exceed it
};

/// Whether changing a rule from `before` to `after` keeps its buckets, and
/// if not, the first reason (in BucketChange's order) why not. The one place
/// that decides it: `rule set`, `apply` and `apply --diff` all ask here. A
/// change of rate (same unit), burst, warm-up length, shadow, layering,
/// name, scope or fallback keeps the buckets, except as listed. A selector
/// change keeps the rule's id and counters: it is still the same rule to the
/// operator.
BucketChange bucket_change(const RuleSpec &before, const RuleSpec &after);
/// bucket_change(before, after) != BucketChange::keep.
bool edit_restarts_buckets(const RuleSpec &before, const RuleSpec &after);
/// Why, in a few words ("the algorithm changes"); "kept" for keep.
std::string_view bucket_change_reason(BucketChange c);

/// True if `key` names the rule: its name, or its id in decimal.
bool rule_is(const InstalledRule &r, std::string_view key);

/// How few packets a rule lets through (struct sluice_rule's strictness):
/// when a packet's protocol or port cannot be read and it may belong to more
/// than SLUICE_MAX_UNKNOWN_CHARGED rules, the strictest of the rest decides.
uint64_t strictness(const RuleSpec &spec);
/// The data plane's view of a rule (its id field is the rule's bucket id).
struct sluice_rule to_datapath(const InstalledRule &r);
/// The kernel's coarse clock resolution (one scheduler tick), 0 if unknown.
uint64_t coarse_clock_tick_ns();
/// Whether a compiled rule may read the coarse clock (SLUICE_RULE_COARSE_CLOCK)
/// without losing accuracy: its burst holds at least a tick's worth of rate
/// (what a tick adds never overflows it), or its window spans 100 ticks.
bool coarse_clock_suits(const struct sluice_rule &dp, uint64_t tick_ns);
struct sluice_rule_info to_info(const InstalledRule &r);
/// Rebuilds the installed rule from its two map entries (slot not filled in).
InstalledRule from_maps(const struct sluice_rule &dp, const struct sluice_rule_info &info);

/// True if rule a comes before rule b in match order (IPv4 rules, then
/// IPv6 rules, which never meet a packet of the other): a longer prefix first,
/// then a destination port selector (narrower first), then a source port
/// selector (narrower first), then a TCP flag selector (more flags first),
/// then a protocol selector, then the older rule. A packet meets the rules
/// that cover it in this order.
bool match_order(const InstalledRule &a, const InstalledRule &b);

/// The match lists of a rule set as the data plane walks them (see struct
/// sluice_match_list): each prefix's own rules in match order, SLUICE_LIST_SLOTS
/// to a list, chained to the lists of the nearest covering prefix.
struct MatchLists {
	/// For each prefix that holds rules, the absolute index of its first list.
	std::map<Cidr, uint32_t> first;
	/// The lists; lists[i] has absolute index base + i.
	std::vector<struct sluice_match_list> lists;
	uint32_t base = 0;

	const struct sluice_match_list &at(uint32_t index) const { return lists.at(index - base); }
	/// The slots a packet from under `prefix` meets, in order, as the data plane walks them.
	std::vector<uint32_t> walk(const Cidr &prefix) const;
};

/// Compiles the lists, numbering them from `base` (which must be nonzero).
/// Throws if more than `capacity` lists are needed, or if the lists covering
/// one address would take more than SLUICE_MAX_LIST_WALK steps to walk.
/// A rule on a set stands at each outermost prefix of the set (`sets` must
/// hold it) as a rule on that prefix would; prefixes whose lists would be
/// equal share them, so a set of a million prefixes takes a few lists.
MatchLists compile_match_lists(const std::vector<InstalledRule> &rules, uint32_t base, uint32_t capacity,
			       const SetContents *sets = nullptr);

} // namespace sluice
