// SPDX-License-Identifier: GPL-2.0-only
// Counters reset and source release through the library, on the real program:
// a reset zeroes every counter it names and no bucket (a throttled source
// stays throttled, and what it sends next is counted from zero, pending drops
// included); a release refills a source's buckets so that it passes as a new
// source would. Every algorithm, and reset by rule and by source.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fixture.h"
#include "sources.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t HOUR_NS = 3600ULL * 1000000000ULL;
/// What a new, cold warm-up bucket of burst 5 passes: its first packets cost three each, less as it warms.
constexpr int FIRST_WARM = 3;

/// One rule per algorithm, slow enough that nothing refills during a test:
/// a limit of 5 (packets, per source) and its own /16 of 10.0.0.0/8.
struct AlgoCase {
	const char *name;
	Algo algo;
	const char *rate;
	uint64_t burst;
	uint64_t warmup_ns;
};
const std::vector<AlgoCase> CASES = {
	{"tb", Algo::token_bucket, "1/h", 5, 0},
	{"gcra", Algo::gcra, "1/h", 5, 0},
	{"warm", Algo::token_bucket, "1/h", 5, HOUR_NS},
	{"fixed", Algo::fixed_window, "5/h", 0, 0},
	{"sliding", Algo::sliding_window, "5/h", 0, 0},
	{"log", Algo::sliding_log, "5/h", 0, 0},
};

/// 10.<case+1>.0.<host>
std::string addr_of(size_t c, int host) { return "10." + std::to_string(c + 1) + ".0." + std::to_string(host); }

/// A bucket's state without its counters, as bytes: what a reset must keep.
std::vector<uint8_t> state_bytes(const MapSet &maps, const InstalledRule &r, const std::string &src)
{
	struct sluice_config cfg = {};
	uint32_t zero = 0;
	EXPECT_EQ(bpf_map_lookup_elem(maps.config.get(), &zero, &cfg), 0);
	Cidr c = parse_cidr(src);
	uint32_t id = r.bucket_id ? r.bucket_id : r.id;
	std::vector<uint8_t> out;
	if (r.spec.algo == Algo::sliding_log) {
		auto b = LogTable4(maps.logs4.get()).find(id, c.addr.data(), cfg.hash_seed);
		EXPECT_TRUE(b) << src;
		if (b) {
			auto *p = reinterpret_cast<const uint8_t *>(&*b);
			out.assign(p, p + offsetof(struct sluice_log_state, cnt));
		}
	} else {
		auto b = SourceTable4(maps.src4.get()).find(id, c.addr.data(), cfg.hash_seed);
		EXPECT_TRUE(b) << src;
		if (b) {
			auto *p = reinterpret_cast<const uint8_t *>(&*b);
			out.assign(p, p + offsetof(struct sluice_source_state, cnt));
		}
	}
	return out;
}

class Reset : public Datapath {
protected:
	void SetUp() override
	{
		Datapath::SetUp();
		// Where reset_counters keeps what it zeroed on CPUs' accounts.
		run_dir_ = make_temp_dir();
		setenv("SLUICE_RUN_DIR", run_dir_.c_str(), 1);
		for (size_t c = 0; c < CASES.size(); c++) {
			std::string cidr = "10." + std::to_string(c + 1) + ".0.0/16";
			RuleSpec s = limit_spec(cidr.c_str(), CASES[c].rate, CASES[c].burst, CASES[c].name);
			s.algo = CASES[c].algo;
			s.warmup_ns = CASES[c].warmup_ns;
			rules_.push_back(table_->add(s));
		}
	}
	void TearDown() override
	{
		unsetenv("SLUICE_RUN_DIR");
		std::string cmd = "rm -rf '" + run_dir_ + "'";
		EXPECT_EQ(system(cmd.c_str()), 0);
	}

	static std::string make_temp_dir()
	{
		char tmpl[] = "/tmp/sluice-reset-XXXXXX";
		const char *d = mkdtemp(tmpl);
		EXPECT_NE(d, nullptr);
		return d ? d : "/tmp";
	}

	/// Sends `n` packets from `src`; returns how many passed.
	int send(const std::string &src, int n)
	{
		int passed = 0;
		for (int i = 0; i < n; i++)
			passed += run(PacketSpec{.src = src}) == XDP_PASS;
		return passed;
	}

	/// A source's bucket counters under its rule, or all zero if absent.
	SourceStats counts(const std::string &src, const std::string &rule)
	{
		for (const auto &s : stats().sources)
			if (s.source == src && s.rule == rule)
				return s;
		ADD_FAILURE() << "no bucket for " << src << " under " << rule;
		return {};
	}

	static bool zero(const SourceStats &s)
	{
		return !s.passed_packets && !s.passed_bytes && !s.dropped_packets && !s.dropped_bytes;
	}
	static bool zero(const struct sluice_rule_counters &c)
	{
		return !c.passed_packets && !c.passed_bytes && !c.dropped_packets && !c.dropped_bytes &&
		       !c.failopen_table && !c.passed_contention;
	}

	std::string run_dir_;
	std::vector<InstalledRule> rules_;
};

} // namespace

TEST_F(Reset, ZeroesEveryCounterAndKeepsEveryBucketOfEveryAlgorithm)
{
	for (size_t c = 0; c < CASES.size(); c++) {
		// A warm-up bucket starts cold: a packet costs three.
		EXPECT_EQ(send(addr_of(c, 1), 20), CASES[c].warmup_ns ? FIRST_WARM : 5) << CASES[c].name << ": the limit";
		send(addr_of(c, 2), 3);
	}
	Stats before = stats();
	ASSERT_EQ(before.tracked_sources, 2 * CASES.size());
	std::vector<std::vector<uint8_t>> states;
	for (size_t c = 0; c < CASES.size(); c++)
		states.push_back(state_bytes(maps_, rules_[c], addr_of(c, 1)));

	ResetSummary done = reset_counters(maps_, {});
	EXPECT_TRUE(done.global);
	EXPECT_EQ(done.rules, CASES.size());
	EXPECT_EQ(done.buckets, 2 * CASES.size());

	Stats after = stats();
	EXPECT_EQ(after.tracked_sources, before.tracked_sources) << "no bucket is removed";
	for (const auto &s : after.sources)
		EXPECT_TRUE(zero(s)) << s.source << " under " << s.rule << ": " << s.passed_packets << " passed, "
				     << s.dropped_packets << " dropped";
	for (const auto &r : after.rules)
		EXPECT_TRUE(zero(r.counters)) << r.rule.spec.name;
	for (int i = 0; i < SLUICE_CNT_MAX; i++)
		EXPECT_EQ(after.global[i].packets + after.global[i].bytes, 0u) << counter_name(i);

	for (size_t c = 0; c < CASES.size(); c++) {
		const char *name = CASES[c].name;
		EXPECT_EQ(state_bytes(maps_, rules_[c], addr_of(c, 1)), states[c]) << name << ": the bucket is as it was";
		// Still throttled, and counted from zero: the 15 drops before the
		// reset (most of them still on this CPU's account) are not counted again.
		EXPECT_EQ(send(addr_of(c, 1), 4), 0) << name << ": a reset refills nothing";
		SourceStats s = counts(addr_of(c, 1), name);
		EXPECT_EQ(s.dropped_packets, 4u) << name;
		EXPECT_EQ(s.passed_packets, 0u) << name;
		EXPECT_EQ(rule_counters(name).dropped_packets, 4u) << name;
	}
	EXPECT_EQ(global(SLUICE_CNT_DROP_RATE), 4 * CASES.size());

	// A second reset: what the first left on account is not taken twice.
	reset_counters(maps_, {});
	for (size_t c = 0; c < CASES.size(); c++) {
		send(addr_of(c, 1), 2);
		EXPECT_EQ(counts(addr_of(c, 1), CASES[c].name).dropped_packets, 2u) << CASES[c].name;
	}
}

TEST_F(Reset, OneRuleOrOneSourceLeavesEveryOtherCounter)
{
	for (size_t c = 0; c < 2; c++)
		for (int host : {1, 2})
			send(addr_of(c, host), 8);
	Stats before = stats();

	// One rule: its buckets and its line; the other rule's and the global stay.
	ResetSummary done = reset_counters(maps_, {CASES[0].name, {}});
	EXPECT_FALSE(done.global);
	EXPECT_EQ(done.rules, 1u);
	EXPECT_EQ(done.buckets, 2u);
	EXPECT_TRUE(zero(counts(addr_of(0, 1), "tb")));
	EXPECT_TRUE(zero(counts(addr_of(0, 2), "tb")));
	EXPECT_TRUE(zero(rule_counters("tb")));
	EXPECT_EQ(counts(addr_of(1, 1), "gcra").dropped_packets, 3u);
	EXPECT_EQ(rule_counters("gcra").dropped_packets, 6u);
	EXPECT_EQ(global(SLUICE_CNT_DROP_RATE), before.global[SLUICE_CNT_DROP_RATE].packets);

	// One source: its bucket only; its rule's line and the global stay.
	done = reset_counters(maps_, {"", parse_cidr(addr_of(1, 1))});
	EXPECT_FALSE(done.global);
	EXPECT_EQ(done.rules, 0u);
	EXPECT_EQ(done.buckets, 1u);
	EXPECT_TRUE(zero(counts(addr_of(1, 1), "gcra")));
	EXPECT_EQ(counts(addr_of(1, 2), "gcra").dropped_packets, 3u);
	EXPECT_EQ(rule_counters("gcra").dropped_packets, 6u);

	// A prefix covers every bucket inside it; a rule and a source together, that rule's.
	done = reset_counters(maps_, {"tb", parse_cidr("10.0.0.0/8")});
	EXPECT_EQ(done.buckets, 2u);
	EXPECT_EQ(counts(addr_of(1, 2), "gcra").dropped_packets, 3u);
	done = reset_counters(maps_, {"", parse_cidr("10.0.0.0/8")});
	EXPECT_EQ(done.buckets, 4u);
	EXPECT_TRUE(zero(counts(addr_of(1, 2), "gcra")));

	EXPECT_THROW(reset_counters(maps_, {"nosuchrule", {}}), Error);
}

TEST_F(Reset, ReleaseLetsAThrottledSourcePassAsANewSourceWould)
{
	for (size_t c = 0; c < CASES.size(); c++) {
		const char *name = CASES[c].name;
		std::string src = addr_of(c, 1);
		const int first = CASES[c].warmup_ns ? FIRST_WARM : 5;
		EXPECT_EQ(send(src, 10), first) << name;
		EXPECT_EQ(send(src, 1), 0) << name << ": throttled";

		std::vector<ReleasedBucket> released = release_source(maps_, parse_cidr(src));
		ASSERT_EQ(released.size(), 1u) << name;
		EXPECT_EQ(released[0].rule, name);
		EXPECT_EQ(released[0].bucket, src);
		EXPECT_EQ(released[0].algo, CASES[c].algo);

		int fresh = send(addr_of(c, 9), 10);
		EXPECT_EQ(fresh, first) << name << ": a new source's first packets";
		EXPECT_EQ(send(src, 10), fresh) << name << ": released, it passes as a new source would";
		SourceStats s = counts(src, name);
		EXPECT_EQ(s.passed_packets, uint64_t(2 * first)) << name << ": counters are kept";
		EXPECT_EQ(s.dropped_packets, uint64_t(21 - 2 * first)) << name;
	}
	// Under one rule only: the other rules' buckets of the prefix stay empty.
	send(addr_of(0, 1), 1);
	send(addr_of(1, 1), 1);
	auto only = release_source(maps_, parse_cidr("10.0.0.0/8"), "gcra");
	ASSERT_EQ(only.size(), 2u); // the gcra rule's two sources
	EXPECT_EQ(only[0].rule, "gcra");
	EXPECT_EQ(send(addr_of(0, 1), 1), 0) << "tb's bucket was not released";
	EXPECT_EQ(send(addr_of(1, 1), 1), 1);
}

TEST_F(Reset, ReleaseRefusesWhenNothingMatches)
{
	send(addr_of(0, 1), 10);
	try {
		release_source(maps_, parse_cidr("192.0.2.1"));
		ADD_FAILURE() << "released a source without a bucket";
	} catch (const Error &e) {
		EXPECT_NE(std::string(e.what()).find("nothing to release: no bucket of 192.0.2.1"), std::string::npos)
			<< e.what();
	}
	EXPECT_THROW(release_source(maps_, parse_cidr(addr_of(0, 1)), "gcra"), Error) << "gcra has no bucket of it";
	RuleSpec deny;
	deny.name = "deny";
	deny.cidr = parse_cidr("172.16.0.0/12");
	deny.action = Action::deny;
	table_->add(deny);
	try {
		release_source(maps_, parse_cidr("172.16.0.1"), "deny");
		ADD_FAILURE() << "released under a deny rule";
	} catch (const Error &e) {
		EXPECT_NE(std::string(e.what()).find("does not limit"), std::string::npos) << e.what();
	}
	EXPECT_EQ(send(addr_of(0, 1), 1), 0) << "a refused release changes nothing";
}

// IPv6: a bucket per /64 by default; an address inside it resets and
// releases the /64's bucket.
TEST_F(Reset, AnIpv6SourceIsResetAndReleasedByItsPrefix)
{
	table_->add(limit_spec("2001:db8::/32", "1/h", 5, "six"));
	EXPECT_EQ(send("2001:db8:0:1::1", 8), 5);
	EXPECT_EQ(send("2001:db8:0:1::2", 2), 0) << "the same /64";

	ResetSummary done = reset_counters(maps_, {"", parse_cidr("2001:db8:0:1::7")});
	EXPECT_EQ(done.buckets, 1u);
	EXPECT_TRUE(zero(counts("2001:db8:0:1::/64", "six")));
	EXPECT_EQ(send("2001:db8:0:1::1", 1), 0) << "still throttled";
	EXPECT_EQ(counts("2001:db8:0:1::/64", "six").dropped_packets, 1u);

	auto released = release_source(maps_, parse_cidr("2001:db8:0:1::9"));
	ASSERT_EQ(released.size(), 1u);
	EXPECT_EQ(released[0].bucket, "2001:db8:0:1::/64");
	EXPECT_EQ(send("2001:db8:0:1::3", 8), 5);
	EXPECT_THROW(release_source(maps_, parse_cidr("2001:db8:0:2::1")), Error) << "another /64 has no bucket";
}
