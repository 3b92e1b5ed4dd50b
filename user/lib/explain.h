// SPDX-License-Identifier: GPL-2.0-only
// `sluice explain`: which rule would decide a packet, and why, and the state
// of the buckets it would be charged to. Nothing is sent and nothing written:
// the walk is the program's, run over the installed rules, and the buckets'
// arithmetic is sluice_algos.h's, run on copies.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bans.h"
#include "maps.h"
#include "rule.h"
#include "sets.h"

namespace sluice {

/// The packet asked about. A selector not given is unknown, and judged as
/// the program judges a packet whose protocol or port it cannot read.
struct ExplainPacket {
	int family = 4;
	std::array<uint8_t, 16> src{}; ///< network order; IPv4 in the first 4 bytes
	std::optional<uint8_t> proto;  ///< as rules name it (SLUICE_PROTO_ICMP for ICMP and ICMPv6), or the IP protocol
	std::optional<uint16_t> dport; ///< TCP and UDP only
	std::optional<uint16_t> sport; ///< TCP and UDP only
	std::optional<uint8_t> tcp_flags; ///< TCP only: SLUICE_TCP_* bits
	uint64_t bytes = DEFAULT_BYTES; ///< its IP length: what a byte rate charges

	/// A full-size packet on a 1,500-byte MTU: the largest such packet, so
	/// a smaller one passes no later than it does.
	static constexpr uint64_t DEFAULT_BYTES = 1500;
};

/// Builds the packet from the command line's words: an address, a protocol
/// ("tcp", "udp", "icmp", or a number 0-255; empty: unknown), a port (TCP
/// and UDP only) and an IP length of 1-65535 bytes. Throws Error with one line.
ExplainPacket make_explain_packet(std::string_view src, std::string_view proto, std::optional<long> dport,
				  std::optional<long> bytes);

/// Adds the source port and the TCP flags (names joined by commas, or
/// "none"; empty: unknown) to a packet make_explain_packet built. Flags make
/// it a TCP packet, as they make a rule a TCP rule. Throws Error with one line.
void add_explain_l4(ExplainPacket &pkt, std::optional<long> sport, const std::string &tcp_flags);

/// "10.1.2.3, udp port 53, 1500 bytes"; "10.1.2.3, tcp port 22 from port 40000, flags syn, 60 bytes".
std::string describe_packet(const ExplainPacket &p);

/// How a rule's selectors meet the packet (the program's rule_matches).
enum class Match : uint8_t {
	no,    ///< a selector the packet shows differs
	maybe, ///< a selector the rule has cannot be read from the packet
	yes,
};

/// What the walk did with a candidate.
enum class Role : uint8_t {
	no_match,      ///< a selector differs: passed over
	allow_unknown, ///< an allow whose selector the packet hides: an allow never matches then
	layered,       ///< a layered (--continue) rule: charged, then the walk goes on
	layered_drop,  ///< a layered rule whose bucket drops the packet: the walk ends there (explain only)
	unknown,       ///< may match (a selector unknown): charged, then the walk goes on
	unknown_drop,  ///< may match, and its bucket or deny drops the packet: the walk ends there (explain only)
	weighed,       ///< may match, but a stricter candidate (or an earlier equal one) decides
	decides,       ///< the terminal rule the walk chose
	not_reached,   ///< after the walk stopped
};

std::string_view match_name(Match m);
std::string_view role_name(Role r);
/// A role as one word, for --json: "no_match", "allow_unknown", "layered"...
std::string_view role_key(Role r);

struct Candidate {
	InstalledRule rule;
	Match match = Match::no;
	Role role = Role::not_reached;
	/// A rule on an address set: the set's prefix the source is under.
	std::optional<Cidr> set_prefix;
};

/// The program's walk for one packet, as a pure function of the rules.
struct RuleWalk {
	/// The longest prefix holding rules that covers the source (the
	/// lookup's result); none if no rule covers it.
	std::optional<Cidr> prefix;
	std::vector<Candidate> candidates; ///< every rule the walk may meet, in match order
	/// Candidates charged, in the order the program applies them: the
	/// layered rules met, then the terminal rule that decides (if any).
	std::vector<size_t> applied;
	std::optional<size_t> decider; ///< the terminal rule chosen, an index into candidates
};

/// Walks `rules` (any order; both families) for `pkt` as the program walks
/// its match lists: layered rules apply as they are met; of the terminal
/// rules, with every selector known, the first that matches decides; with a
/// selector unknown, an allow never matches, and each candidate up to the
/// first sure match is charged as it is met (SLUICE_MAX_UNKNOWN_CHARGED of
/// them; then the strictest of the rest and the sure match decides).
/// `sets`: the address sets the rules use (by default read from the store).
RuleWalk walk_rules(const std::vector<InstalledRule> &rules, const ExplainPacket &pkt,
		    const SetContents *sets = nullptr);

/// The clock readings a bucket's state is judged at: a rule reads the
/// coarse clock if the controller set SLUICE_RULE_COARSE_CLOCK, else the
/// precise one (program_coarse_ns and CLOCK_MONOTONIC).
struct ClockReading {
	uint64_t precise_ns = 0;
	uint64_t coarse_ns = 0;
	static ClockReading now();
	uint64_t for_rule(const struct sluice_rule &dp) const
	{
		return (dp.flags & SLUICE_RULE_COARSE_CLOCK) ? coarse_ns : precise_ns;
	}
};

/// A bucket's state at one time, for the next packet of `cost` units.
struct BucketState {
	bool exists = false;          ///< false: the source has no bucket yet; a fresh one is full
	bool passes = false;          ///< whether the next such packet would pass now
	bool never = false;           ///< the packet costs more than the bucket can ever hold
	uint64_t retry_after_ns = 0;  ///< 0 if it passes now: when the next such packet would pass
	uint64_t remaining = 0;       ///< such packets that would pass back to back now
	/// Token bucket and GCRA: tokens (packets or bytes) now, of the burst.
	/// Windows: units still allowed in the window, of its limit.
	uint64_t tokens = 0, capacity = 0;
	/// Windows: when the window moves on (fixed, sliding window: the next
	/// window; sliding log: its oldest pass inside the window leaves it). 0: nothing to wait for.
	uint64_t resets_in_ns = 0;
	struct sluice_source_counters counters = {}; ///< the source's counts in this bucket
};

/// The state of a GCRA-form or locked-algorithm bucket (none: a fresh one)
/// for a packet of `cost` units (1 packet, or its bytes) at `now_ns`.
BucketState bucket_state(const struct sluice_rule &dp, const std::optional<struct sluice_source_state> &b,
			 uint64_t now_ns, uint64_t cost);
/// The same for a sliding-log bucket.
BucketState log_state(const struct sluice_rule &dp, const std::optional<struct sluice_log_state> &b,
		      uint64_t now_ns, uint64_t cost);

/// One rule the packet would be charged under, with its bucket.
struct AppliedRule {
	size_t candidate = 0;         ///< index into the walk's candidates
	struct sluice_rule dp = {};   ///< the live entry
	std::optional<Cidr> bucket;   ///< limit rules: the source masked to the rule's per-prefix
	std::optional<BucketState> state; ///< limit rules
	bool drops = false;           ///< would drop the next such packet (for a shadow rule: would, and passes it)
};

/// The whole answer.
struct Explanation {
	ExplainPacket packet;
	/// The walk; when a layered rule's bucket would drop the packet, that
	/// candidate is layered_drop and the ones after it not_reached.
	RuleWalk walk;
	std::vector<AppliedRule> applied; ///< as the program would apply them, up to the one that ends the walk
	std::optional<size_t> decided_by; ///< index into applied: the rule whose verdict the packet gets
	/// The global counter the packet would land in (SLUICE_CNT_PASS_*, DROP_*).
	int verdict = SLUICE_CNT_PASS_NO_MATCH;
	/// The ban the source is under: the packet is dropped (drop_ban) before
	/// any rule is looked at, and `applied` is empty.
	std::optional<Ban> ban;
	bool dropped() const { return (SLUICE_DROP_VERDICTS >> verdict) & 1; }
};

/// Explains `pkt` against the live rule set and buckets behind `maps` at `clock`.
Explanation explain(const MapSet &maps, const ExplainPacket &pkt, const ClockReading &clock);

} // namespace sluice
