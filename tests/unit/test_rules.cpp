// SPDX-License-Identifier: GPL-2.0-only
// Rule validation and the compilation of per-prefix candidate lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>

#include "error.h"
#include "rule.h"
#include "tick_clock.h"

using namespace sluice;

namespace {

InstalledRule rule(uint32_t id, const char *cidr, Proto proto = Proto::any, PortRange ports = {})
{
	InstalledRule r;
	r.id = id;
	r.slot = id + 100; // slots differ from ids on purpose
	r.spec.cidr = parse_cidr(cidr);
	r.spec.action = Action::allow;
	r.spec.proto = proto;
	r.spec.dport = ports;
	return r;
}

} // namespace

TEST(RuleValidation, PortsNeedTcpOrUdp)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.rate = parse_rate("10/s");
	s.dport = {22, 22};
	EXPECT_THROW(validate_rule(s), Error);
	s.proto = Proto::icmp;
	EXPECT_THROW(validate_rule(s), Error);
	s.proto = Proto::tcp;
	EXPECT_NO_THROW(validate_rule(s));
	EXPECT_EQ(s.burst, 5u) << "default burst filled in";
}

TEST(RuleValidation, PerPrefixMustFitTheFamily)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.rate = parse_rate("10/s");
	s.per_prefix = 33;
	EXPECT_THROW(validate_rule(s), Error);
	s.per_prefix = 24;
	EXPECT_NO_THROW(validate_rule(s));
	s.cidr = parse_cidr("2001:db8::/32");
	s.per_prefix = 64;
	EXPECT_NO_THROW(validate_rule(s));
	s.per_prefix = 129;
	EXPECT_THROW(validate_rule(s), Error);
}

// Issue 8, defect 8: one IPv6 host or subnet is given a /64; a bucket per
// /128 would give it 2^64 fresh bursts. --per still overrides.
TEST(RuleValidation, Ipv6SourcesShareABucketPerSlash64ByDefault)
{
	RuleSpec s;
	s.cidr = parse_cidr("2001:db8::/32");
	s.rate = parse_rate("10/s");
	validate_rule(s);
	EXPECT_EQ(s.bucket_prefix(), 64);
	s.per_prefix = 128;
	EXPECT_EQ(s.bucket_prefix(), 128) << "--per 128: a bucket per address";
	s.per_prefix = 48;
	EXPECT_EQ(s.bucket_prefix(), 48);
	s.per_prefix = -1;
	s.cidr = parse_cidr("2001:db8::7/128");
	EXPECT_EQ(s.bucket_prefix(), 128) << "a rule longer than /64 has one bucket, named by its prefix";
	s.cidr = parse_cidr("10.0.0.0/8");
	EXPECT_EQ(s.bucket_prefix(), 32) << "IPv4: per address";

	// --per 128 survives the maps, and the default reads back as the default.
	InstalledRule r;
	r.id = 3;
	r.spec.cidr = parse_cidr("2001:db8::/32");
	r.spec.rate = parse_rate("10/s");
	r.spec.per_prefix = 128;
	validate_rule(r.spec);
	EXPECT_EQ(from_maps(to_datapath(r), to_info(r)).spec.per_prefix, 128);
	r.spec.per_prefix = -1;
	EXPECT_EQ(to_datapath(r).per_prefix, 64);
	EXPECT_EQ(from_maps(to_datapath(r), to_info(r)).spec.per_prefix, -1);
}

TEST(RuleValidation, AllowAndDenyTakeNoBucketOptions)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.action = Action::deny;
	s.burst = 10;
	EXPECT_THROW(validate_rule(s), Error);
	s.burst = 0;
	s.rate = parse_rate("10/s"); // rule add's --rate excludes --deny; a spec built otherwise must not slip it by
	try {
		validate_rule(s);
		ADD_FAILURE() << "a deny rule with a rate accepted";
	} catch (const Error &e) {
		EXPECT_STREQ(e.what(), "--rate applies to limit rules, not --deny");
	}
}

TEST(RuleValidation, Names)
{
	EXPECT_NO_THROW(check_rule_name("web-80_v4.1"));
	EXPECT_THROW(check_rule_name("12"), Error);
	EXPECT_THROW(check_rule_name("has space"), Error);
	EXPECT_THROW(check_rule_name(std::string(40, 'a')), Error);
	EXPECT_THROW(check_rule_name(""), Error);
}

constexpr uint32_t BASE = 1, CAPACITY = 1000;

TEST(MatchLists, MostSpecificPrefixFirstWithInheritedRules)
{
	std::vector<InstalledRule> rules = {rule(1, "0.0.0.0/0"), rule(2, "10.0.0.0/8"),
					    rule(3, "10.1.0.0/16"), rule(4, "192.0.2.0/24")};
	MatchLists lists = compile_match_lists(rules, BASE, CAPACITY);
	ASSERT_EQ(lists.first.size(), 4u);
	EXPECT_EQ(lists.lists.size(), 4u) << "one list a prefix: a covering prefix's rules are linked, not copied";
	EXPECT_EQ(lists.walk(parse_cidr("10.1.0.0/16")), (std::vector<uint32_t>{103, 102, 101}));
	EXPECT_EQ(lists.walk(parse_cidr("10.0.0.0/8")), (std::vector<uint32_t>{102, 101}));
	EXPECT_EQ(lists.walk(parse_cidr("192.0.2.0/24")), (std::vector<uint32_t>{104, 101}));
	EXPECT_EQ(lists.walk(parse_cidr("0.0.0.0/0")), (std::vector<uint32_t>{101}));
}

TEST(MatchLists, PortsBeforeProtocolBeforeAnyAtOnePrefix)
{
	std::vector<InstalledRule> rules = {rule(1, "10.0.0.0/8"), rule(2, "10.0.0.0/8", Proto::tcp),
					    rule(3, "10.0.0.0/8", Proto::tcp, {1, 1024}),
					    rule(4, "10.0.0.0/8", Proto::tcp, {22, 22})};
	MatchLists lists = compile_match_lists(rules, BASE, CAPACITY);
	EXPECT_EQ(lists.walk(parse_cidr("10.0.0.0/8")), (std::vector<uint32_t>{104, 103, 102, 101}));
}

TEST(MatchLists, FamiliesDoNotMix)
{
	std::vector<InstalledRule> rules = {rule(1, "0.0.0.0/0"), rule(2, "::/0"), rule(3, "2001:db8::/32")};
	MatchLists lists = compile_match_lists(rules, BASE, CAPACITY);
	EXPECT_EQ(lists.walk(parse_cidr("2001:db8::/32")), (std::vector<uint32_t>{103, 102}));
	EXPECT_EQ(lists.walk(parse_cidr("0.0.0.0/0")), (std::vector<uint32_t>{101}));
}

TEST(MatchLists, ManyRulesAtOnePrefixChainInOrder)
{
	// 40 rules at one prefix and 3 above it: 43 candidates, far beyond one list.
	std::vector<InstalledRule> rules;
	for (uint32_t i = 0; i < 40; i++)
		rules.push_back(rule(i + 1, "10.0.0.0/24", Proto::udp, {uint16_t(1000 + i), uint16_t(1000 + i)}));
	for (uint32_t i = 0; i < 3; i++)
		rules.push_back(rule(41 + i, "10.0.0.0/8", Proto::udp, {uint16_t(i), uint16_t(i)}));
	MatchLists lists = compile_match_lists(rules, BASE, CAPACITY);
	auto walk = lists.walk(parse_cidr("10.0.0.0/24"));
	ASSERT_EQ(walk.size(), 43u);
	for (uint32_t i = 0; i < 43; i++)
		EXPECT_EQ(walk[i], 101 + i) << "candidate " << i;
	EXPECT_EQ(lists.lists.size(), 3u + 1u) << "ceil(40/14) lists at the /24, one at the /8";
	for (const auto &l : lists.lists)
		EXPECT_LE(l.count, uint32_t(SLUICE_LIST_SLOTS));
}

TEST(MatchLists, TheWalkLimitIsChecked)
{
	// One prefix: SLUICE_MAX_LIST_WALK full lists fit, one rule more does not.
	std::vector<InstalledRule> rules;
	uint32_t fits = SLUICE_MAX_LIST_WALK * SLUICE_LIST_SLOTS;
	for (uint32_t i = 0; i <= fits; i++)
		rules.push_back(rule(i + 1, "10.0.0.0/8", Proto::udp, {uint16_t(i), uint16_t(i)}));
	EXPECT_THROW(compile_match_lists(rules, BASE, 100000), Error);
	rules.pop_back();
	EXPECT_NO_THROW(compile_match_lists(rules, BASE, 100000));
	EXPECT_THROW(compile_match_lists(rules, BASE, SLUICE_MAX_LIST_WALK - 1), Error) << "capacity is checked";
}

TEST(MatchLists, EveryPrefixWalksItsOwnRulesThenItsNearestCover)
{
	// Random nested prefixes of both families, against the definition: a
	// prefix's own rules in match order, then the walk of the longest
	// shorter prefix that covers it and holds rules.
	std::mt19937 rng(9);
	for (int round = 0; round < 20; round++) {
		std::vector<InstalledRule> rules;
		std::set<std::tuple<Cidr, Proto, uint16_t>> selectors;
		for (uint32_t id = 1; rules.size() < 300; id++) {
			Cidr c;
			c.family = rng() % 4 ? 4 : 6;
			int len = static_cast<int>(rng() % (c.family == 4 ? 33 : 129));
			for (int i = 0; i < (c.family == 4 ? 4 : 16); i++)
				c.addr[i] = static_cast<uint8_t>(rng() % 3 == 0 ? rng() : i < 2 ? 10 : 0);
			c.prefix_len = len;
			mask_address(c.addr, len);
			Proto proto = rng() % 3 ? Proto::any : Proto::tcp;
			uint16_t port = proto == Proto::tcp ? static_cast<uint16_t>(rng() % 4) : 0;
			if (!selectors.insert({c, proto, port}).second)
				continue;
			InstalledRule r = rule(id, "0.0.0.0/0", proto, proto == Proto::tcp ? PortRange{port, port} : PortRange{});
			r.spec.cidr = c;
			rules.push_back(r);
		}
		MatchLists lists = compile_match_lists(rules, BASE, 100000);
		std::set<Cidr> prefixes;
		for (const auto &r : rules)
			prefixes.insert(r.spec.cidr);
		ASSERT_EQ(lists.first.size(), prefixes.size());
		for (const Cidr &p : prefixes) {
			std::vector<uint32_t> want;
			for (Cidr at = p;;) {
				std::vector<const InstalledRule *> own;
				for (const auto &r : rules)
					if (r.spec.cidr == at)
						own.push_back(&r);
				std::sort(own.begin(), own.end(), [](auto *a, auto *b) { return match_order(*a, *b); });
				for (auto *r : own)
					want.push_back(r->slot);
				// The nearest shorter covering prefix with rules, if any.
				bool found = false;
				for (int len = at.prefix_len - 1; len >= 0 && !found; len--) {
					Cidr outer = at;
					outer.prefix_len = len;
					mask_address(outer.addr, len);
					if (prefixes.count(outer)) {
						at = outer;
						found = true;
					}
				}
				if (!found)
					break;
			}
			EXPECT_EQ(lists.walk(p), want) << format_cidr(p);
		}
	}
}

TEST(RuleMaps, RoundTripThroughTheAbiStructs)
{
	InstalledRule r;
	r.id = 7;
	r.spec.name = "web";
	r.spec.cidr = parse_cidr("2001:db8::/48");
	r.spec.proto = Proto::tcp;
	r.spec.dport = {80, 443};
	r.spec.rate = parse_rate("10kbit/s");
	r.spec.burst = 3000;
	r.spec.per_prefix = 64;
	validate_rule(r.spec);
	RuleSpec back = from_maps(to_datapath(r), to_info(r)).spec;
	EXPECT_EQ(back.name, "web");
	EXPECT_EQ(back.cidr, r.spec.cidr);
	EXPECT_EQ(back.proto, Proto::tcp);
	EXPECT_EQ(back.dport, r.spec.dport);
	EXPECT_EQ(back.rate, r.spec.rate);
	EXPECT_EQ(back.burst, 3000u);
	EXPECT_EQ(back.bucket_prefix(), 64);
	EXPECT_EQ(to_datapath(r).unit, SLUICE_UNIT_BYTES);
}

namespace {

RuleSpec limit(const char *rate, Algo algo)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.rate = parse_rate(rate);
	s.algo = algo;
	return s;
}

void expect_rejected(RuleSpec s, const char *why)
{
	try {
		validate_rule(s);
		ADD_FAILURE() << "accepted; expected: " << why;
	} catch (const Error &e) {
		EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
	}
}

} // namespace

TEST(RuleValidation, AlgorithmsTakeTheOptionsThatMeanSomethingToThem)
{
	EXPECT_EQ(parse_algo("sliding-window"), Algo::sliding_window);
	EXPECT_THROW(parse_algo("leaky"), Error);

	RuleSpec burst = limit("100/10s", Algo::fixed_window);
	burst.burst = 50;
	expect_rejected(burst, "--burst does not apply to fixed-window");
	expect_rejected(limit("1MB/s", Algo::sliding_log), "remembers packets, not bytes");
	expect_rejected(limit("65/s", Algo::sliding_log), "at most 64");
	RuleSpec log64 = limit("64/min", Algo::sliding_log);
	EXPECT_NO_THROW(validate_rule(log64));
	expect_rejected(limit("10mbit/s", Algo::sliding_window), "packets or bytes");
	expect_rejected(limit("100/0.5ms", Algo::fixed_window), "out of range");
	expect_rejected(limit("100/2day", Algo::fixed_window), "out of range");
	expect_rejected(limit("1000B/s", Algo::sliding_window), "at least 1500");

	RuleSpec warm = limit("100/s", Algo::gcra);
	warm.warmup_ns = 1000000000ULL;
	expect_rejected(warm, "--warmup applies to the token bucket");
	warm.algo = Algo::token_bucket;
	warm.burst = 2;
	expect_rejected(warm, "at least 3 packets");
	warm.burst = 30;
	EXPECT_NO_THROW(validate_rule(warm));

	RuleSpec deny;
	deny.cidr = parse_cidr("10.0.0.0/8");
	deny.action = Action::deny;
	deny.algo = Algo::gcra;
	expect_rejected(deny, "apply to --rate rules");
	deny.algo = Algo::token_bucket;
	deny.shadow = true;
	EXPECT_NO_THROW(validate_rule(deny)) << "a deny rule may be tried in shadow";
}

TEST(RuleMaps, AlgorithmsWarmupAndShadowRoundTrip)
{
	InstalledRule r;
	r.id = 3;
	r.spec = limit("100/10s", Algo::sliding_window);
	r.spec.shadow = true;
	validate_rule(r.spec);
	RuleSpec back = from_maps(to_datapath(r), to_info(r)).spec;
	EXPECT_EQ(back.algo, Algo::sliding_window);
	EXPECT_TRUE(back.shadow);
	EXPECT_EQ(to_datapath(r).window.limit, 100u);
	EXPECT_EQ(to_datapath(r).window.window_ns, 10000000000ULL);

	r.spec = limit("100/s", Algo::token_bucket);
	r.spec.burst = 30;
	r.spec.warmup_ns = 30000000000ULL;
	validate_rule(r.spec);
	back = from_maps(to_datapath(r), to_info(r)).spec;
	EXPECT_EQ(back.warmup_ns, 30000000000ULL);
	EXPECT_EQ(format_duration(back.warmup_ns), "30s");
	EXPECT_EQ(format_duration(1000000000ULL), "1s");
}

// The coarse clock's constants from the probe's samples (samples taken on
// the test VM: jiffies started 75,077 ticks short of 2^32, ticks of 4 ms).
TEST(TickClock, TheBaseIsTheLeastOverSamplesWhoseJiffiesHeld)
{
	const uint64_t tick = 4000000, jiffies = 4294967296ULL - 75077 + 1000, base = 75077;
	// Jiffies + 2^32 - 75,077... as two's complement: base = -(2^32 - 75,077).
	const uint64_t want = uint64_t(0) - (4294967296ULL - base);
	auto at = [&](uint64_t j, uint64_t into_tick) {
		return TickSample{j, (j + want) * tick + into_tick, j};
	};
	std::vector<TickSample> samples = {at(jiffies, 1500000), at(jiffies + 1, 10)};
	// A tick passed but not yet counted: the clock reads one tick more than jiffies say.
	samples.push_back({jiffies + 1, (jiffies + 2 + want) * tick + 20000, jiffies + 1});
	// Jiffies moved while the clock was read: not used, whatever it says.
	samples.push_back({jiffies + 2, (jiffies + want) * tick, jiffies + 3});
	auto clk = tick_clock_from(samples, tick);
	ASSERT_TRUE(clk);
	EXPECT_EQ(clk->tick_ns, tick);
	EXPECT_EQ(clk->jiffies_base, want);
	// The late sample alone gives a base one tick later: the least wins only when some sample is on time.
	EXPECT_EQ(tick_clock_from({samples[2]}, tick)->jiffies_base, want + 1);
	EXPECT_FALSE(tick_clock_from({samples[3]}, tick)) << "no sample whose jiffies held";
	EXPECT_FALSE(tick_clock_from(samples, 0)) << "no tick";
}

TEST(RuleMaps, TheCoarseClockOnlyWhereATickIsSmallBesideTheRule)
{
	const uint64_t tick = 4000000; // HZ=250
	auto compiled = [](const char *rate, uint64_t burst, Algo algo) {
		InstalledRule r;
		r.id = 1;
		r.spec.cidr = parse_cidr("192.0.2.0/24");
		r.spec.rate = parse_rate(rate);
		r.spec.burst = burst;
		r.spec.algo = algo;
		validate_rule(r.spec);
		return to_datapath(r);
	};
	// The burst must hold what one tick adds: 4 packets of 1000/s, 800 of 200000/s.
	EXPECT_TRUE(coarse_clock_suits(compiled("1000/s", 10, Algo::gcra), tick));
	EXPECT_TRUE(coarse_clock_suits(compiled("1000/s", 4, Algo::token_bucket), tick));
	EXPECT_FALSE(coarse_clock_suits(compiled("1000/s", 3, Algo::token_bucket), tick));
	EXPECT_FALSE(coarse_clock_suits(compiled("200000/s", 799, Algo::gcra), tick));
	EXPECT_TRUE(coarse_clock_suits(compiled("200000/s", 800, Algo::gcra), tick));
	// Windows: at least 100 ticks.
	EXPECT_TRUE(coarse_clock_suits(compiled("50/400ms", 0, Algo::fixed_window), tick));
	EXPECT_FALSE(coarse_clock_suits(compiled("50/399ms", 0, Algo::sliding_window), tick));
	EXPECT_FALSE(coarse_clock_suits(compiled("50/10s", 0, Algo::sliding_log), tick)) << "exact times";
	EXPECT_FALSE(coarse_clock_suits(compiled("1000/s", 1000, Algo::gcra), 0)) << "unknown resolution";

	InstalledRule deny;
	deny.spec.cidr = parse_cidr("192.0.2.0/24");
	deny.spec.action = Action::deny;
	EXPECT_FALSE(coarse_clock_suits(to_datapath(deny), tick));
}

TEST(Strictness, DenyAboveSlowerLimitsAboveFasterOnesAboveShadowAndAllow)
{
	auto spec = [](Action a, const char *rate = "", bool shadow = false) {
		RuleSpec s;
		s.cidr = parse_cidr("10.0.0.0/8");
		s.action = a;
		if (*rate)
			s.rate = parse_rate(rate);
		s.shadow = shadow;
		return s;
	};
	uint64_t deny = strictness(spec(Action::deny));
	uint64_t per_hour = strictness(spec(Action::limit, "1/h"));
	uint64_t per_second = strictness(spec(Action::limit, "1000/s"));
	uint64_t bytes = strictness(spec(Action::limit, "1500B/s"));
	uint64_t shadow = strictness(spec(Action::limit, "1/h", true));
	uint64_t allow = strictness(spec(Action::allow));
	EXPECT_GT(deny, per_hour);
	EXPECT_GT(per_hour, per_second);
	EXPECT_EQ(bytes, 1000000000u) << "a 1,500-byte packet a second";
	EXPECT_EQ(per_second, 1000000u);
	EXPECT_GT(per_second, shadow);
	EXPECT_GT(shadow, allow);
	EXPECT_EQ(strictness(spec(Action::deny, "", true)), shadow) << "a shadow deny passes everything too";
}

TEST(RuleValidation, ANameStartsWithALetterOrDigitSoAnOptionIsNeverAName)
{
	EXPECT_THROW(check_rule_name("--deny"), Error);
	EXPECT_THROW(check_rule_name(".hidden"), Error);
	EXPECT_NO_THROW(check_rule_name("web-1.v4_x"));
}

TEST(RuleValidation, ShadowIsForLimitsAndDenies)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.action = Action::allow;
	s.shadow = true;
	EXPECT_THROW(validate_rule(s), Error);
	s.action = Action::deny;
	EXPECT_NO_THROW(validate_rule(s));
}

TEST(RuleValidation, ContinueIsForLimitsOnly)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.layered = true;
	for (Action a : {Action::allow, Action::deny}) {
		s.action = a;
		try {
			validate_rule(s);
			ADD_FAILURE() << "--continue accepted on " << action_name(a);
		} catch (const Error &e) {
			EXPECT_STREQ(e.what(), "--continue applies to limit rules only");
		}
	}
	s.action = Action::limit;
	s.rate = parse_rate("10/s");
	EXPECT_NO_THROW(validate_rule(s));
}

TEST(ClusterRules, TakeANameAShareableAlgorithmAndAFallbackNoAboveTheRate)
{
	RuleSpec s = limit("900/s", Algo::token_bucket);
	s.scope = Scope::cluster;
	expect_rejected(s, "needs --name");
	s.name = "api";
	validate_rule(s);
	s.algo = Algo::fixed_window;
	expect_rejected(s, "token-bucket and gcra limits, not fixed-window");
	s.algo = Algo::gcra;
	validate_rule(s);
	s.fallback = parse_rate("1000/s");
	expect_rejected(s, "is above the rule's --rate 900/s");
	s.fallback = parse_rate("1MB/s");
	expect_rejected(s, "must both count packets or both bytes");
	s.fallback = parse_rate("300/s");
	validate_rule(s);
	s.scope = Scope::local;
	expect_rejected(s, "--fallback applies to --scope cluster rules");
	RuleSpec deny;
	deny.cidr = parse_cidr("10.0.0.0/8");
	deny.action = Action::deny;
	deny.name = "d";
	deny.scope = Scope::cluster;
	expect_rejected(deny, "applies to --rate rules");
	RuleSpec warm = limit("900/s", Algo::token_bucket);
	warm.name = "w";
	warm.scope = Scope::cluster;
	warm.burst = 3000;
	warm.warmup_ns = 1000000000ULL;
	expect_rejected(warm, "--warmup do not go together");
	EXPECT_EQ(parse_scope("cluster"), Scope::cluster);
	EXPECT_THROW(parse_scope("global"), Error);
}

// The data plane holds a cluster rule's share for when the store is out of
// reach: the rate over the host count (burst scaled alike), or the fallback.
TEST(ClusterRules, TheDataPlaneHoldsTheLocalShareAndTheMapsKeepScopeFallbackAndHosts)
{
	InstalledRule r;
	r.id = 9;
	r.spec = limit("900/s", Algo::token_bucket);
	r.spec.name = "api";
	r.spec.burst = 90;
	r.spec.scope = Scope::cluster;
	validate_rule(r.spec);
	r.cluster_hosts = 3;
	EXPECT_EQ(local_rate(r), (Rate{900, 3000000000ULL, RateUnit::packets}));
	EXPECT_EQ(local_burst(r), 30u);
	InstalledRule share = r;
	share.spec.rate = parse_rate("300/s");
	share.spec.burst = 30;
	share.spec.scope = Scope::local;
	struct sluice_rule dp = to_datapath(r), expect = to_datapath(share);
	EXPECT_EQ(dp.bucket.capacity, expect.bucket.capacity);
	// The same rate either way up to rounding of the multiplier.
	EXPECT_NEAR(double(dp.bucket.inc_mult) / (1ULL << dp.inc_shift),
		    double(expect.bucket.inc_mult) / (1ULL << expect.inc_shift), 1.0);
	InstalledRule back = from_maps(dp, to_info(r));
	EXPECT_EQ(back.spec.scope, Scope::cluster);
	EXPECT_EQ(back.cluster_hosts, 3u);
	EXPECT_EQ(back.spec.rate, r.spec.rate);
	EXPECT_TRUE(same_spec(back.spec, r.spec));

	r.spec.fallback = parse_rate("450/s");
	EXPECT_EQ(local_rate(r), r.spec.fallback);
	EXPECT_EQ(local_burst(r), 45u);
	back = from_maps(to_datapath(r), to_info(r));
	EXPECT_EQ(back.spec.fallback, r.spec.fallback);
	EXPECT_FALSE(same_spec(back.spec, limit("900/s", Algo::token_bucket)));
	// A tiny burst never falls below one packet on a host.
	r.spec.fallback = {};
	r.spec.burst = 2;
	EXPECT_EQ(local_burst(r), 1u);
}

namespace sluice {
namespace {

/// validate_rule's one line for `spec`, or "" if it takes it.
std::string refusal(RuleSpec spec)
{
	try {
		validate_rule(spec);
		return "";
	} catch (const Error &e) {
		return e.what();
	}
}

TEST(RuleValidation, BansAreForEnforcingLimitsWithinRange)
{
	RuleSpec s;
	s.cidr = parse_cidr("10.0.0.0/8");
	s.rate = parse_rate("5/min");
	s.ban = {600ULL * 1000000000ULL, 0};
	EXPECT_EQ(refusal(s), "");
	RuleSpec v = s;
	validate_rule(v);
	EXPECT_EQ(v.ban.after, BanSpec::DEFAULT_AFTER) << "the default threshold is filled in";
	RuleSpec t = s;
	t.shadow = true;
	EXPECT_EQ(refusal(t), "--ban and --shadow do not go together: a shadow rule drops nothing");
	t = s;
	t.action = Action::deny;
	t.rate = {};
	EXPECT_EQ(refusal(t), "--ban applies to --rate rules: a deny rule has no drops to count");
	t = s;
	t.ban.ns = 500000000ULL;
	EXPECT_EQ(refusal(t), "--ban 500ms is out of range (1s to 366day)");
	t = s;
	t.ban.ns = 1500000000ULL;
	EXPECT_EQ(refusal(t), "--ban 1500ms is not a whole number of seconds");
	t = s;
	t.ban.after = BanSpec::MAX_AFTER + 1;
	EXPECT_EQ(refusal(t), "--ban-after 1000001 is out of range (1 to 1000000)");
	t = s;
	t.ban = {0, 3};
	EXPECT_EQ(refusal(t), "--ban-after needs --ban DURATION");
}

TEST(RuleMaps, ABanRoundTripsAndKeepsTheBuckets)
{
	InstalledRule r;
	r.id = 3;
	r.spec.cidr = parse_cidr("2001:db8::/32");
	r.spec.rate = parse_rate("5/min");
	r.spec.per_prefix = 48;
	r.spec.ban = {3600ULL * 1000000000ULL, 4};
	validate_rule(r.spec);
	struct sluice_rule dp = to_datapath(r);
	EXPECT_EQ(dp.ban.secs, 3600u);
	EXPECT_EQ(dp.ban.after, 4u);
	EXPECT_EQ(from_maps(dp, to_info(r)).spec.ban, r.spec.ban);
	RuleSpec without = r.spec;
	without.ban = {};
	EXPECT_FALSE(same_spec(without, r.spec));
	EXPECT_EQ(bucket_change(r.spec, without), BucketChange::keep) << "a ban's change keeps the buckets";
	EXPECT_EQ(from_maps(to_datapath({r.id, r.slot, without}), to_info(r)).spec.ban, BanSpec{});
}

} // namespace
} // namespace sluice
