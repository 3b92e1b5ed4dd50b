// SPDX-License-Identifier: GPL-2.0-only
// `sluice explain` against the real program under the test clock: packets go
// through BPF_PROG_TEST_RUN, and explain, asked at the same clock reading,
// must name the rule the program counts the next packet under, predict
// whether it passes, how many such packets pass back to back, and after how
// long the next one passes once the bucket is empty.
#include <gtest/gtest.h>

#include <linux/bpf.h>
#include <unistd.h>

#include "explain.h"
#include "packet.h"
#include "replay.h"
#include "rule_table.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t MS = 1000000ULL, SEC = 1000 * MS;
constexpr size_t PAYLOAD = 972; // a UDP datagram of 1,000 bytes

RuleSpec rule(const char *cidr, const char *rate, const char *name, Algo algo = Algo::token_bucket,
	      uint64_t burst = 0)
{
	RuleSpec r;
	r.cidr = parse_cidr(cidr);
	r.rate = parse_rate(rate);
	r.name = name;
	r.algo = algo;
	r.burst = burst;
	validate_rule(r);
	return r;
}

/// A Replayer plus what a test asks of explain: the test-clock program with
/// `first` installed, more rules added through RuleTable.
class Explained {
public:
	explicit Explained(const RuleSpec &first) : kernel_(first) {}

	InstalledRule add(RuleSpec r)
	{
		validate_rule(r);
		return RuleTable(kernel_.maps()).add(r);
	}
	InstalledRule find(const char *name) { return RuleTable(kernel_.maps()).find(name); }

	Explanation ask(const std::string &src, uint64_t t)
	{
		ExplainPacket p = make_explain_packet(src, "udp", 53, PAYLOAD + 28);
		return explain(kernel_.maps(), p, {t, t});
	}
	bool send(const std::string &src, uint64_t t)
	{
		return kernel_.send(build_packet({.src = src, .dport = 53, .payload = PAYLOAD}), t);
	}
	struct sluice_rule_counters counters(const char *name)
	{
		return RuleTable(kernel_.maps()).counters(find(name).slot);
	}

	/// The rule explain says decides, by name; "" if none.
	static std::string decider(const Explanation &e)
	{
		if (!e.decided_by)
			return "";
		return e.walk.candidates[e.applied[*e.decided_by].candidate].rule.spec.name;
	}
	static const BucketState &state(const Explanation &e)
	{
		static const BucketState none;
		if (!e.decided_by || !e.applied[*e.decided_by].state) {
			ADD_FAILURE() << "explain names no limit bucket";
			return none;
		}
		return *e.applied[*e.decided_by].state;
	}

	/// Sends one packet at t after asking explain, and checks that explain
	/// predicted its verdict and the rule that counted it.
	bool send_predicted(const std::string &src, uint64_t t)
	{
		Explanation e = ask(src, t);
		std::string name = decider(e);
		auto before = counters(name.c_str());
		bool passed = send(src, t);
		auto after = counters(name.c_str());
		EXPECT_EQ(passed, !e.dropped()) << "explain predicted " << counter_name(e.verdict) << " at " << t;
		if (passed)
			EXPECT_EQ(after.passed_packets, before.passed_packets + 1) << name << " did not count the pass";
		else
			EXPECT_EQ(after.dropped_packets, before.dropped_packets + 1) << name << " did not count the drop";
		return passed;
	}

	/// At t: as many packets pass back to back as explain says remain; then
	/// the next one passes exactly after explain's retry-after, not a
	/// nanosecond sooner. Returns that retry-after.
	uint64_t drain_and_retry(const std::string &src, uint64_t t)
	{
		uint64_t remaining = state(ask(src, t)).remaining;
		for (uint64_t i = 0; i < remaining; i++)
			EXPECT_TRUE(send_predicted(src, t)) << "packet " << i << " of the " << remaining << " predicted";
		Explanation empty = ask(src, t);
		const BucketState &s = state(empty);
		EXPECT_EQ(s.remaining, 0u);
		EXPECT_FALSE(s.passes);
		EXPECT_GT(s.retry_after_ns, 0u);
		EXPECT_FALSE(send_predicted(src, t)) << "explain said none remained";
		uint64_t retry = s.retry_after_ns;
		EXPECT_FALSE(state(ask(src, t + retry - 1)).passes);
		EXPECT_FALSE(send_predicted(src, t + retry - 1)) << "passed before the retry-after";
		EXPECT_TRUE(state(ask(src, t + retry)).passes);
		EXPECT_EQ(state(ask(src, t + retry)).retry_after_ns, 0u);
		EXPECT_TRUE(send_predicted(src, t + retry)) << "dropped at the retry-after";
		return retry;
	}

	Replayer kernel_;
};

void require_root() { ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root"; }

} // namespace

TEST(Explain, TokenBucketTokensAndRetryAfterAreThePrograms)
{
	require_root();
	Explained x(rule("10.0.0.0/8", "100/s", "tb", Algo::token_bucket, 5));
	const uint64_t t = TRACE_START_NS;
	Explanation fresh = x.ask("10.1.2.3", t);
	EXPECT_EQ(Explained::decider(fresh), "tb");
	EXPECT_FALSE(Explained::state(fresh).exists) << "no packet was sent yet";
	EXPECT_EQ(Explained::state(fresh).tokens, 5u) << "a fresh bucket holds the burst";
	EXPECT_TRUE(x.send_predicted("10.1.2.3", t));
	EXPECT_TRUE(x.send_predicted("10.1.2.3", t));
	Explanation e = x.ask("10.1.2.3", t);
	EXPECT_TRUE(Explained::state(e).exists);
	EXPECT_EQ(Explained::state(e).tokens, 3u);
	EXPECT_EQ(Explained::state(e).capacity, 5u);
	EXPECT_EQ(Explained::state(e).counters.passed_packets, 2u);
	// 100/s: a token every 10 ms once the bucket is empty.
	EXPECT_EQ(x.drain_and_retry("10.1.2.3", t), 10 * MS);
	// The source's counts, as `stats` shows them, drops included.
	Explanation later = x.ask("10.1.2.3", t + 10 * MS);
	EXPECT_EQ(Explained::state(later).counters.passed_packets, 6u);
	EXPECT_EQ(Explained::state(later).counters.dropped_packets, 2u);
}

TEST(Explain, GcraInBytesCountsTheBytesLeft)
{
	require_root();
	// 100 kB/s, a burst of 4,500 bytes: four 1,000-byte packets.
	Explained x(rule("10.0.0.0/8", "100kB/s", "gcra", Algo::gcra, 4500));
	const uint64_t t = TRACE_START_NS;
	EXPECT_TRUE(x.send_predicted("10.9.9.9", t));
	Explanation e = x.ask("10.9.9.9", t);
	EXPECT_EQ(Explained::state(e).tokens, 3500u);
	EXPECT_EQ(Explained::state(e).remaining, 3u);
	// Empty but for 500 bytes: 500 more take 5 ms at 100 kB/s.
	EXPECT_EQ(x.drain_and_retry("10.9.9.9", t), 5 * MS);
}

// 7/s: a token every 142,857,142.857 ns, which no whole nanosecond states:
// the retry-after is rounded up, to the first nanosecond the program passes.
TEST(Explain, RetryAfterIsTheFirstNanosecondThatPasses)
{
	require_root();
	Explained x(rule("10.0.0.0/8", "7/s", "odd", Algo::gcra, 1));
	const uint64_t t = TRACE_START_NS + 1;
	EXPECT_EQ(x.drain_and_retry("10.3.3.3", t), 142857143u);
	x.drain_and_retry("10.3.3.3", t + 3 * SEC + 17);
}

TEST(Explain, FixedWindowSaysWhenTheWindowMovesOn)
{
	require_root();
	Explained x(rule("10.0.0.0/8", "5/s", "fixed", Algo::fixed_window));
	const uint64_t t = TRACE_START_NS + 300 * MS; // windows are aligned on whole seconds since boot
	EXPECT_TRUE(x.send_predicted("10.0.0.7", t));
	Explanation e = x.ask("10.0.0.7", t);
	EXPECT_EQ(Explained::state(e).tokens, 4u);
	EXPECT_EQ(Explained::state(e).resets_in_ns, 700 * MS);
	EXPECT_EQ(x.drain_and_retry("10.0.0.7", t + 100 * MS), 600 * MS);
}

TEST(Explain, SlidingLogWaitsForItsOldestPass)
{
	require_root();
	Explained x(rule("10.0.0.0/8", "3/s", "log", Algo::sliding_log));
	const uint64_t t = TRACE_START_NS;
	EXPECT_TRUE(x.send_predicted("10.0.0.8", t));
	EXPECT_TRUE(x.send_predicted("10.0.0.8", t + 200 * MS));
	Explanation e = x.ask("10.0.0.8", t + 300 * MS);
	EXPECT_EQ(Explained::state(e).tokens, 1u);
	EXPECT_EQ(Explained::state(e).resets_in_ns, 700 * MS) << "the first pass leaves the window at t + 1 s";
	// Full after one more; the first pass (at t) leaves the window at t + 1 s.
	EXPECT_EQ(x.drain_and_retry("10.0.0.8", t + 300 * MS), 700 * MS);
}

TEST(Explain, SlidingWindowAndWarmupPredictThePrograms)
{
	require_root();
	Explained x(rule("10.0.0.0/8", "4/s", "sliding", Algo::sliding_window));
	RuleSpec warm = rule("10.7.0.0/16", "100/s", "warm", Algo::token_bucket, 10);
	warm.warmup_ns = SEC;
	x.add(warm);
	const uint64_t t = TRACE_START_NS + 500 * MS;
	x.drain_and_retry("10.0.0.9", t);
	x.drain_and_retry("10.0.0.9", t + 2 * SEC);
	x.drain_and_retry("10.7.0.1", t);
	x.drain_and_retry("10.7.0.1", t + SEC);
}

TEST(Explain, ALayeredRuleThatDropsEndsTheWalk)
{
	require_root();
	// Per source, 100/s; the /16 as a whole, 3 packets, layered before it.
	Explained x(rule("10.0.0.0/8", "100/s", "per-source", Algo::token_bucket, 10));
	RuleSpec net = rule("10.1.0.0/16", "1/s", "net", Algo::gcra, 3);
	net.per_prefix = 16;
	net.layered = true;
	x.add(net);
	const uint64_t t = TRACE_START_NS;

	Explanation e = x.ask("10.1.0.1", t);
	ASSERT_EQ(e.applied.size(), 2u) << "the layered rule, then the one that decides";
	EXPECT_EQ(e.walk.candidates[e.applied[0].candidate].rule.spec.name, "net");
	EXPECT_EQ(e.walk.candidates[e.applied[0].candidate].role, Role::layered);
	EXPECT_EQ(Explained::decider(e), "per-source");
	EXPECT_EQ(e.applied[0].bucket->prefix_len, 16);

	for (const char *src : {"10.1.0.1", "10.1.0.2", "10.1.0.3"})
		EXPECT_TRUE(x.send_predicted(src, t));
	// The /16's bucket is empty: the next packet from any of its sources is
	// dropped by the layered rule, and the per-source rule never sees it.
	Explanation over = x.ask("10.1.0.4", t);
	EXPECT_EQ(Explained::decider(over), "net");
	EXPECT_EQ(over.verdict, SLUICE_CNT_DROP_RATE);
	EXPECT_EQ(over.applied.size(), 1u);
	EXPECT_EQ(over.walk.candidates[over.applied[0].candidate].role, Role::layered_drop);
	EXPECT_EQ(over.walk.candidates.back().role, Role::not_reached) << "per-source is never reached";
	EXPECT_EQ(Explained::state(over).counters.passed_packets, 3u) << "the /16's bucket counts its three sources";
	auto per_source = x.counters("per-source");
	EXPECT_FALSE(x.send_predicted("10.1.0.4", t));
	EXPECT_EQ(x.counters("per-source").dropped_packets, per_source.dropped_packets);
	EXPECT_EQ(x.counters("per-source").passed_packets, per_source.passed_packets);
	EXPECT_EQ(Explained::state(over).retry_after_ns, SEC);
	EXPECT_TRUE(x.send_predicted("10.1.0.4", t + SEC));
}

TEST(Explain, AnIpv6SlashSixtyFourSharesOneBucket)
{
	require_root();
	Explained x(rule("2001:db8::/32", "10/s", "v6", Algo::token_bucket, 3));
	const uint64_t t = TRACE_START_NS;
	EXPECT_TRUE(x.send_predicted("2001:db8:0:1::1", t));
	EXPECT_TRUE(x.send_predicted("2001:db8:0:1::2", t));
	Explanation e = x.ask("2001:db8:0:1:ffff::99", t);
	EXPECT_EQ(format_cidr(*e.applied.at(0).bucket), "2001:db8:0:1::/64");
	EXPECT_TRUE(Explained::state(e).exists);
	EXPECT_EQ(Explained::state(e).tokens, 1u) << "two hosts of the /64 took two of its three";
	EXPECT_EQ(Explained::state(e).counters.passed_packets, 2u);
	Explanation other = x.ask("2001:db8:0:2::1", t);
	EXPECT_FALSE(Explained::state(other).exists) << "another /64 has no bucket yet";
	EXPECT_EQ(Explained::state(other).tokens, 3u);
	EXPECT_EQ(x.drain_and_retry("2001:db8:0:1::3", t), 100 * MS);
}

// A later fragment whose first fragment was not seen hides its port: the
// program charges every candidate it may meet, and explain without --dport
// says which, and that an allow for port 53 never matches it.
TEST(Explain, AnUnknownPortIsChargedToEveryCandidate)
{
	require_root();
	Explained x(rule("10.0.0.0/8", "1000/s", "wide"));
	RuleSpec dns;
	dns.name = "dns-ok";
	dns.cidr = parse_cidr("10.0.0.0/8");
	dns.action = Action::allow;
	dns.proto = Proto::udp;
	dns.dport = {53, 53};
	x.add(dns);
	RuleSpec ntp = rule("10.0.0.0/8", "10/s", "slow-ntp", Algo::token_bucket, 2);
	ntp.proto = Proto::udp;
	ntp.dport = {123, 123};
	x.add(ntp);
	const uint64_t t = TRACE_START_NS;
	Explanation e = explain(x.kernel_.maps(), make_explain_packet("10.4.4.4", "udp", std::nullopt, 1000), {t, t});
	EXPECT_EQ(Explained::decider(e), "wide");
	EXPECT_EQ(e.walk.candidates.at(0).rule.spec.name, "dns-ok");
	EXPECT_EQ(e.walk.candidates.at(0).role, Role::allow_unknown);
	EXPECT_EQ(e.walk.candidates.at(1).rule.spec.name, "slow-ntp");
	EXPECT_EQ(e.walk.candidates.at(1).role, Role::unknown);
	auto frag = build_packet({.src = "10.4.4.4", .dport = 53, .frag = PacketSpec::Frag::later, .payload = PAYLOAD});
	for (int i = 0; i < 3; i++) {
		Explanation before = explain(x.kernel_.maps(),
					     make_explain_packet("10.4.4.4", "udp", std::nullopt, 1000), {t, t});
		auto counted = x.counters("slow-ntp");
		bool passed = x.kernel_.send(frag, t);
		EXPECT_EQ(passed, !before.dropped()) << "fragment " << i;
		auto now = x.counters("slow-ntp");
		EXPECT_EQ(now.passed_packets + now.dropped_packets, counted.passed_packets + counted.dropped_packets + 1)
			<< "slow-ntp did not count fragment " << i;
	}
	EXPECT_EQ(x.counters("slow-ntp").dropped_packets, 1u) << "a burst of 2: the third fragment is dropped";
	EXPECT_EQ(x.counters("wide").passed_packets, 2u) << "charged after slow-ntp passed it";
	Explanation last = explain(x.kernel_.maps(), make_explain_packet("10.4.4.4", "udp", std::nullopt, 1000), {t, t});
	EXPECT_EQ(last.walk.candidates.at(1).role, Role::unknown_drop);
	EXPECT_EQ(Explained::decider(last), "slow-ntp");
}

TEST(Explain, ChangesNothing)
{
	require_root();
	Explained x(rule("10.0.0.0/8", "100/s", "tb", Algo::token_bucket, 2));
	const uint64_t t = TRACE_START_NS;
	EXPECT_TRUE(x.send("10.0.0.1", t));
	auto before = collect_stats(x.kernel_.maps(), {});
	for (int i = 0; i < 10; i++) {
		x.ask("10.0.0.1", t);
		x.ask("10.0.0.2", t); // no bucket: none is made
	}
	auto after = collect_stats(x.kernel_.maps(), {});
	EXPECT_EQ(after.tracked_sources, before.tracked_sources);
	EXPECT_EQ(after.rules.at(0).counters.passed_packets, before.rules.at(0).counters.passed_packets);
	EXPECT_TRUE(x.send("10.0.0.1", t)) << "the bucket still holds its second token";
	EXPECT_FALSE(x.send("10.0.0.1", t));
}
