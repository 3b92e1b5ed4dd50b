// SPDX-License-Identifier: GPL-2.0-only
// explain's pure parts: the packet it is asked about, the program's rule walk
// over installed rules, and a bucket's state under a fake clock, checked
// against sluice_algos.h's own decisions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "error.h"
#include "explain.h"
#include "sluice_algos.h"

using namespace sluice;

namespace {

constexpr uint64_t MS = 1000000ULL, SEC = 1000 * MS;

/// Installed rules as RuleTable would hold them: ids and slots in order of addition.
class Rules {
public:
	Rules &limit(const char *name, const char *cidr, const char *rate, Proto proto = Proto::any,
		     const char *ports = nullptr, bool layered = false)
	{
		RuleSpec s = spec(name, cidr, proto, ports);
		s.rate = parse_rate(rate);
		s.layered = layered;
		return put(s);
	}
	Rules &action(const char *name, const char *cidr, Action a, Proto proto = Proto::any, const char *ports = nullptr)
	{
		RuleSpec s = spec(name, cidr, proto, ports);
		s.action = a;
		return put(s);
	}
	const std::vector<InstalledRule> &all() const { return rules_; }

private:
	static RuleSpec spec(const char *name, const char *cidr, Proto proto, const char *ports)
	{
		RuleSpec s;
		s.name = name;
		s.cidr = parse_cidr(cidr);
		s.proto = proto;
		if (ports)
			s.dport = parse_port_range(ports);
		return s;
	}
	Rules &put(RuleSpec s)
	{
		validate_rule(s);
		uint32_t n = static_cast<uint32_t>(rules_.size()) + 1;
		rules_.push_back({n, n, s});
		return *this;
	}
	std::vector<InstalledRule> rules_;
};

/// "name:role" for every candidate, in the walk's order.
std::vector<std::string> roles(const RuleWalk &w)
{
	std::vector<std::string> out;
	for (const auto &c : w.candidates)
		out.push_back(c.rule.spec.name + ":" + std::string(role_key(c.role)));
	return out;
}

std::string decider(const RuleWalk &w) { return w.decider ? w.candidates[*w.decider].rule.spec.name : ""; }

ExplainPacket packet(const char *src, const char *proto = "", std::optional<long> dport = std::nullopt)
{
	return make_explain_packet(src, proto, dport, std::nullopt);
}

std::string error_of(const char *src, const char *proto, std::optional<long> dport, std::optional<long> bytes)
{
	try {
		make_explain_packet(src, proto, dport, bytes);
	} catch (const Error &e) {
		return e.what();
	}
	return "";
}

} // namespace

TEST(ExplainPacket, BadInputIsOneClearLine)
{
	EXPECT_EQ(error_of("10.0.0.300", "", {}, {}), "invalid source address '10.0.0.300'");
	EXPECT_EQ(error_of("10.0.0.0/8", "", {}, {}), "explain takes a source address, not a prefix: '10.0.0.0/8'");
	EXPECT_EQ(error_of("10.0.0.1", "", 53, {}), "--dport needs --proto tcp or --proto udp");
	EXPECT_EQ(error_of("10.0.0.1", "icmp", 53, {}), "--dport needs --proto tcp or --proto udp");
	EXPECT_EQ(error_of("10.0.0.1", "tcp", 65536, {}), "port 65536 is out of range (0-65535)");
	EXPECT_EQ(error_of("10.0.0.1", "gre", {}, {}),
		  "unknown protocol 'gre' (use tcp, udp, icmp or a protocol number 0-255)");
	EXPECT_EQ(error_of("10.0.0.1", "256", {}, {}),
		  "unknown protocol '256' (use tcp, udp, icmp or a protocol number 0-255)");
	EXPECT_EQ(error_of("10.0.0.1", "", {}, 0),
		  "--bytes 0 is out of range: an IP length of 1-65535 bytes");
	EXPECT_EQ(error_of("10.0.0.1", "udp", 53, 65536),
		  "--bytes 65536 is out of range: an IP length of 1-65535 bytes");
}

TEST(ExplainPacket, ProtocolsAreReadAsTheProgramReadsThem)
{
	EXPECT_EQ(packet("10.0.0.1", "tcp").proto, SLUICE_PROTO_TCP);
	EXPECT_EQ(packet("10.0.0.1", "6").proto, SLUICE_PROTO_TCP);
	EXPECT_EQ(packet("2001:db8::1", "58").proto, SLUICE_PROTO_ICMP) << "ICMPv6 is icmp to rules";
	EXPECT_EQ(packet("10.0.0.1", "47").proto, 47);
	EXPECT_FALSE(packet("10.0.0.1").proto) << "a protocol not given is unknown";
	EXPECT_FALSE(packet("10.0.0.1", "udp").dport) << "a port not given is unknown";
	EXPECT_EQ(packet("10.0.0.1").bytes, ExplainPacket::DEFAULT_BYTES);
	EXPECT_EQ(describe_packet(make_explain_packet("10.0.0.1", "udp", 53, 200)), "10.0.0.1, udp port 53, 200 bytes");
	EXPECT_EQ(describe_packet(packet("2001:db8::1", "tcp")), "2001:db8::1, tcp port unknown, 1500 bytes");
}

// Longer prefix first; at one prefix a port rule, then a protocol rule, then
// any traffic; the first that matches decides and the walk stops there.
TEST(ExplainWalk, TheFirstMatchInMatchOrderDecides)
{
	Rules r;
	r.limit("any8", "10.0.0.0/8", "100/s")
		.limit("any16", "10.1.0.0/16", "100/s")
		.limit("udp16", "10.1.0.0/16", "100/s", Proto::udp)
		.limit("dns16", "10.1.0.0/16", "100/s", Proto::udp, "53")
		.limit("other", "10.2.0.0/16", "100/s");
	RuleWalk w = walk_rules(r.all(), packet("10.1.2.3", "udp", 53));
	EXPECT_EQ(format_cidr(*w.prefix), "10.1.0.0/16");
	EXPECT_EQ(roles(w), (std::vector<std::string>{"dns16:decides", "udp16:not_reached", "any16:not_reached",
						      "any8:not_reached"}));
	EXPECT_EQ(w.applied, std::vector<size_t>{0});

	w = walk_rules(r.all(), packet("10.1.2.3", "udp", 123));
	EXPECT_EQ(decider(w), "udp16");
	w = walk_rules(r.all(), packet("10.1.2.3", "tcp", 53));
	EXPECT_EQ(roles(w), (std::vector<std::string>{"dns16:no_match", "udp16:no_match", "any16:decides",
						      "any8:not_reached"}));
}

// A packet that matches none of a prefix's rules falls through to the covering prefixes.
TEST(ExplainWalk, ANonMatchingPrefixFallsThrough)
{
	Rules r;
	r.limit("wide", "10.0.0.0/8", "100/s").limit("ssh", "10.1.0.0/16", "5/s", Proto::tcp, "22");
	RuleWalk w = walk_rules(r.all(), packet("10.1.9.9", "udp", 22));
	EXPECT_EQ(roles(w), (std::vector<std::string>{"ssh:no_match", "wide:decides"}));
	EXPECT_FALSE(walk_rules(r.all(), packet("192.0.2.1", "udp", 22)).prefix) << "no rule covers it";
	EXPECT_FALSE(walk_rules(r.all(), packet("2001:db8::1")).prefix) << "IPv4 rules never meet IPv6";
}

// An unknown port: an allow never matches on it, and every other candidate
// up to the first sure match is charged as it is met.
TEST(ExplainWalk, AnUnknownSelectorIsChargedToEveryCandidate)
{
	Rules r;
	r.limit("wide", "10.0.0.0/8", "1000/s")
		.action("dns-ok", "10.0.0.0/8", Action::allow, Proto::udp, "53")
		.limit("slow-ntp", "10.0.0.0/8", "10/s", Proto::udp, "123")
		.action("no-tftp", "10.0.0.0/8", Action::deny, Proto::udp, "69");
	RuleWalk w = walk_rules(r.all(), packet("10.0.0.1", "udp"));
	EXPECT_EQ(roles(w), (std::vector<std::string>{"dns-ok:allow_unknown", "slow-ntp:unknown", "no-tftp:unknown",
						      "wide:decides"}));
	EXPECT_EQ(w.applied.size(), 3u);
	// Known, the port decides exactly.
	EXPECT_EQ(decider(walk_rules(r.all(), packet("10.0.0.1", "udp", 53))), "dns-ok");
	// Past SLUICE_MAX_UNKNOWN_CHARGED candidates, the strictest of the rest decides.
	Rules many;
	for (int port = 1; port <= SLUICE_MAX_UNKNOWN_CHARGED + 2; port++)
		many.limit(("p" + std::to_string(port)).c_str(), "10.0.0.0/8", port == SLUICE_MAX_UNKNOWN_CHARGED + 2 ? "1/s" : "100/s",
			   Proto::udp, std::to_string(port).c_str());
	many.limit("wide", "10.0.0.0/8", "1000/s");
	RuleWalk m = walk_rules(many.all(), packet("10.0.0.1", "udp"));
	EXPECT_EQ(m.applied.size(), SLUICE_MAX_UNKNOWN_CHARGED + 1u);
	EXPECT_EQ(decider(m), "p" + std::to_string(SLUICE_MAX_UNKNOWN_CHARGED + 2));
}

// Layered rules apply as they are met, in match order; the walk goes on
// to the terminal rule, and what follows it is not reached.
TEST(ExplainWalk, LayeredRulesApplyAsTheyAreMet)
{
	Rules r;
	r.limit("per-source", "10.0.0.0/8", "100/s")
		.limit("net", "10.1.0.0/16", "1000/s", Proto::any, nullptr, true)
		.limit("web", "10.1.0.0/16", "50/s", Proto::tcp, "443", true)
		.limit("after", "0.0.0.0/0", "1/s", Proto::any, nullptr, true);
	RuleWalk w = walk_rules(r.all(), packet("10.1.0.5", "tcp", 443));
	EXPECT_EQ(roles(w), (std::vector<std::string>{"web:layered", "net:layered", "per-source:decides",
						      "after:not_reached"}));
	EXPECT_EQ(w.applied, (std::vector<size_t>{0, 1, 2}));

	// Only layered rules: each applies, none decides; the last one's pass is the verdict.
	w = walk_rules(r.all(), packet("192.0.2.1"));
	EXPECT_EQ(roles(w), (std::vector<std::string>{"after:layered"}));
	EXPECT_FALSE(w.decider);
	EXPECT_EQ(w.applied, std::vector<size_t>{0});
}

// A bucket's state at a fake clock: the retry-after is the first nanosecond
// at which sluice_algos.h admits the packet, and `remaining` packets pass
// back to back now.
TEST(ExplainBucket, GcraStateIsTheAlgorithmsOwn)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.rate = parse_rate("7/s");
	s.algo = Algo::gcra;
	s.burst = 3;
	validate_rule(s);
	struct sluice_rule dp = to_datapath({1, 1, s});
	const uint64_t t0 = 1000 * SEC;

	BucketState fresh = bucket_state(dp, std::nullopt, t0, 1);
	EXPECT_FALSE(fresh.exists);
	EXPECT_EQ(fresh.tokens, 3u);
	EXPECT_EQ(fresh.capacity, 3u);
	EXPECT_EQ(fresh.remaining, 3u);
	EXPECT_TRUE(fresh.passes);

	// Three packets at t0 leave an arrival time three intervals ahead.
	uint64_t now_t = sluice_ns_to_ticks(t0), tat = now_t;
	__u64 next = 0;
	for (int i = 0; i < 3; i++) {
		ASSERT_TRUE(sluice_gcra_admit(tat, now_t, sluice_cost_ticks(dp.bucket.inc_mult, dp.inc_shift, 1),
					      dp.bucket.capacity, &next));
		tat = next;
	}
	struct sluice_source_state b = {};
	b.algo.gcra.off = 12345;
	b.word = tat + b.algo.gcra.off;
	b.cnt.passed_packets = 3;
	BucketState empty = bucket_state(dp, b, t0, 1);
	EXPECT_TRUE(empty.exists);
	EXPECT_EQ(empty.tokens, 0u);
	EXPECT_EQ(empty.remaining, 0u);
	EXPECT_FALSE(empty.passes);
	EXPECT_EQ(empty.counters.passed_packets, 3u);
	uint64_t at = t0 + empty.retry_after_ns;
	uint64_t inc = sluice_cost_ticks(dp.bucket.inc_mult, dp.inc_shift, 1);
	EXPECT_TRUE(sluice_gcra_admit(tat, sluice_ns_to_ticks(at), inc, dp.bucket.capacity, &next));
	EXPECT_FALSE(sluice_gcra_admit(tat, sluice_ns_to_ticks(at - 1), inc, dp.bucket.capacity, &next));
	EXPECT_TRUE(bucket_state(dp, b, at, 1).passes);
	EXPECT_EQ(bucket_state(dp, b, at, 1).tokens, 1u);
}

TEST(ExplainBucket, FixedWindowCountsWhatIsLeftAndWhenItMovesOn)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.rate = parse_rate("10/s");
	s.algo = Algo::fixed_window;
	validate_rule(s);
	struct sluice_rule dp = to_datapath({1, 1, s});
	struct sluice_source_state b = {};
	b.algo.fixed.window = 1000;
	b.algo.fixed.count = 8;
	BucketState st = bucket_state(dp, b, 1000 * SEC + 250 * MS, 1);
	EXPECT_EQ(st.tokens, 2u);
	EXPECT_EQ(st.remaining, 2u);
	EXPECT_EQ(st.resets_in_ns, 750 * MS);
	b.algo.fixed.count = 10;
	st = bucket_state(dp, b, 1000 * SEC + 250 * MS, 1);
	EXPECT_FALSE(st.passes);
	EXPECT_EQ(st.retry_after_ns, 750 * MS) << "the next window starts afresh";
	// The next window: the old count is gone.
	EXPECT_EQ(bucket_state(dp, b, 1001 * SEC, 1).tokens, 10u);
}

TEST(ExplainBucket, AByteRateBucketNeverPassesAPacketLargerThanItsBurst)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.rate = parse_rate("1MB/s");
	s.burst = 1500;
	validate_rule(s);
	struct sluice_rule dp = to_datapath({1, 1, s});
	BucketState st = bucket_state(dp, std::nullopt, 1000 * SEC, 9000);
	EXPECT_FALSE(st.passes);
	EXPECT_TRUE(st.never);
	EXPECT_EQ(st.tokens, 1500u);
	EXPECT_TRUE(bucket_state(dp, std::nullopt, 1000 * SEC, 1500).passes);
}
