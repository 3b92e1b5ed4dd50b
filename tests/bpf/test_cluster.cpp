// SPDX-License-Identifier: GPL-2.0-only
// Cluster rules in the real program: the data plane enforces the local share
// compiled into the rule, and the cluster sync moves a bucket's refill by
// grants (credit where the store grants more, withheld refill where it grants
// less) that it writes into the grants map and the program applies to its
// own bucket, once each, when it charges it.
#include <arpa/inet.h>

#include <map>
#include <string>

#include "fixture.h"
#include "grants.h"
#include "sluice_algos.h"
#include "sources.h"
#include "tick_clock.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t SEC_TICKS = 1000000000ULL << SLUICE_TICK_SHIFT;

class ClusterRule : public Datapath {
protected:
	/// A limit rule named `name`, of `scope`.
	static RuleSpec spec(const char *name, const char *cidr, const char *rate, uint64_t burst, Scope scope)
	{
		RuleSpec s = limit_spec(cidr, rate, burst, name);
		s.scope = scope;
		return s;
	}
	/// A cluster rule of 3/min over `hosts` hosts, burst 6: 1/min and 2 here by default.
	InstalledRule add_cluster(uint32_t hosts)
	{
		table_->add(spec("shared", "10.0.0.0/8", "3/min", 6, Scope::cluster));
		RuleEdit e;
		e.cluster_hosts = hosts;
		return table_->edit("shared", e);
	}
	int passes(const char *src, int n)
	{
		int passed = 0;
		for (int i = 0; i < n; i++)
			passed += run({.src = src}) == XDP_PASS;
		return passed;
	}
	uint64_t seed()
	{
		uint32_t zero = 0;
		struct sluice_config cfg = {};
		EXPECT_EQ(bpf_map_lookup_elem(maps_.config.get(), &zero, &cfg), 0);
		return cfg.hash_seed;
	}
	/// Where `rule`'s bucket for `bucket` (an address, masked as the rule
	/// masks it) takes its grants, as the cluster sync reads it.
	std::optional<GrantPlace> place(const InstalledRule &r, const char *bucket)
	{
		uint32_t id = r.bucket_id ? r.bucket_id : r.id;
		uint8_t addr[16] = {};
		if (inet_pton(AF_INET, bucket, addr) == 1)
			return SourceTable4(maps_.src4.get()).grant_place(id, addr, seed());
		EXPECT_EQ(inet_pton(AF_INET6, bucket, addr), 1) << bucket;
		return SourceTable6(maps_.src6.get()).grant_place(id, addr, seed());
	}
	/// Grants `ticks` of credit (negative: withheld refill) to that bucket,
	/// as the cluster sync does: an entry of the grants map, which the
	/// program applies when it next charges the bucket. False if there is
	/// no such bucket.
	bool shift(const InstalledRule &r, const char *bucket, int64_t ticks)
	{
		auto p = place(r, bucket);
		if (!p)
			return false;
		struct sluice_grant g = ledgers_[bucket].grant(p->name, p->taken, ticks);
		write_grants(maps_.grants.get(), {p->key}, {g});
		return true;
	}
	/// The arrival time of that bucket (its word - its offset), in ticks.
	uint64_t arrival(const InstalledRule &r, const char *bucket)
	{
		uint32_t id = r.bucket_id ? r.bucket_id : r.id;
		uint8_t addr[16] = {};
		EXPECT_EQ(inet_pton(AF_INET, bucket, addr), 1);
		auto b = SourceTable4(maps_.src4.get()).find(id, addr, seed());
		EXPECT_TRUE(b.has_value()) << bucket;
		return b ? b->word - b->algo.gcra.off : 0;
	}

	std::map<std::string, GrantLedger> ledgers_;
};

} // namespace

// Three hosts: this one's share, compiled into the data plane, is a third of
// the rate and of the burst.
TEST_F(ClusterRule, TheDataPlaneEnforcesTheLocalShareOfTheRateAndBurst)
{
	add_cluster(3);
	EXPECT_EQ(passes("10.1.1.1", 5), 2) << "a third of a burst of 6";
	EXPECT_EQ(rule_counters("shared").dropped_packets, 3u);
}

// A grant above the local share is credit: the bucket's arrival time moves
// earlier, so packets the local share would drop pass. Below it, refill is
// withheld. Neither touches another source's bucket.
TEST_F(ClusterRule, GrantsMoveTheArrivalTimeEarlierOrLater)
{
	InstalledRule r = add_cluster(3); // 1/min, burst 2: 60 s a packet
	EXPECT_EQ(passes("10.1.1.1", 3), 2);
	EXPECT_EQ(passes("10.1.1.2", 2), 2);
	ASSERT_TRUE(shift(r, "10.1.1.1", 120 * int64_t(SEC_TICKS))); // two packets' worth
	EXPECT_EQ(passes("10.1.1.1", 3), 2) << "credit of two packets";
	EXPECT_EQ(passes("10.1.1.2", 1), 0) << "another source's bucket took the credit";
	ASSERT_TRUE(shift(r, "10.1.1.1", -600 * int64_t(SEC_TICKS)));
	ASSERT_TRUE(shift(r, "10.1.1.1", 120 * int64_t(SEC_TICKS)));
	EXPECT_EQ(passes("10.1.1.1", 1), 0) << "ten minutes withheld, two granted back: still in debt";
	EXPECT_FALSE(shift(r, "10.1.1.9", SEC_TICKS)) << "no bucket for a source never seen";
}

// Credit stops at a full bucket: a grant to an idle source never lets more
// than its burst through at once.
TEST_F(ClusterRule, CreditNeverFillsABucketBeyondItsBurst)
{
	InstalledRule r = add_cluster(3);
	EXPECT_EQ(passes("10.1.1.3", 1), 1);
	ASSERT_TRUE(shift(r, "10.1.1.3", 3600 * int64_t(SEC_TICKS))); // an hour of credit
	EXPECT_EQ(passes("10.1.1.3", 4), 2) << "full is the burst of 2, however much credit";
}

// IPv6 sources: the bucket of a /64 moves the same way.
TEST_F(ClusterRule, AnIpv6BucketIsGrantedToo)
{
	InstalledRule r = table_->add(spec("shared6", "2001:db8::/32", "1/min", 2, Scope::cluster));
	EXPECT_EQ(passes("2001:db8:0:1::7", 3), 2);
	ASSERT_TRUE(shift(r, "2001:db8:0:1::", 60 * int64_t(SEC_TICKS))); // the bucket: the source's /64
	EXPECT_EQ(passes("2001:db8:0:1::8", 2), 1) << "one packet of credit, to the whole /64";
}

// `rule set` makes a rule cluster-wide, or gives it a fallback, in place: the
// same buckets, the data plane at the new local share.
TEST_F(ClusterRule, RuleSetChangesScopeAndFallbackKeepingTheBuckets)
{
	table_->add(spec("shared", "10.0.0.0/8", "3/min", 6, Scope::local));
	EXPECT_EQ(passes("10.1.1.5", 2), 2);
	RuleEdit e;
	e.scope = Scope::cluster;
	e.cluster_hosts = 3;
	InstalledRule r = table_->edit("shared", e);
	EXPECT_EQ(r.spec.scope, Scope::cluster);
	EXPECT_EQ(local_rate(r), (Rate{3, 180000000000ULL, RateUnit::packets}));
	// Its 40 s of debt are kept as time: 60 s a packet in a 120 s bucket
	// lets one more through, where a fresh bucket passes two.
	EXPECT_EQ(passes("10.1.1.5", 2), 1) << "the bucket was not kept";
	EXPECT_EQ(passes("10.1.1.6", 3), 2) << "a third of the burst of 6";
	RuleEdit f;
	f.fallback = parse_rate("3/min");
	r = table_->edit("shared", f);
	EXPECT_EQ(local_rate(r), parse_rate("3/min"));
	EXPECT_EQ(passes("10.1.1.7", 7), 6) << "a fallback of the whole rate: the whole burst";
}

// The sync grants once, the program charges twice: the grant moves the
// bucket once (the first charge takes it, the second finds it taken), and the
// bucket records which grant it took, which is what the sync reads back.
TEST_F(ClusterRule, AGrantLandsOnce)
{
	InstalledRule r = add_cluster(3); // 1/min, burst 2: 60 s a packet
	EXPECT_EQ(passes("10.1.1.1", 2), 2);
	uint64_t before = arrival(r, "10.1.1.1");
	auto p = place(r, "10.1.1.1");
	ASSERT_TRUE(p);
	EXPECT_EQ(p->taken, 0u) << "no grant taken yet";
	ASSERT_TRUE(shift(r, "10.1.1.1", 60 * int64_t(SEC_TICKS))); // one packet's worth
	EXPECT_EQ(arrival(r, "10.1.1.1"), before) << "a grant waits for the program: the sync writes no bucket word";
	EXPECT_EQ(passes("10.1.1.1", 1), 1) << "the first charge takes the grant";
	EXPECT_EQ(arrival(r, "10.1.1.1"), before) << "moved 60 s earlier by the grant, 60 s later by the pass";
	EXPECT_EQ(passes("10.1.1.1", 1), 0) << "the second charge finds it taken";
	EXPECT_EQ(arrival(r, "10.1.1.1"), before) << "the grant moved the bucket once";
	EXPECT_EQ(place(r, "10.1.1.1")->taken, 1u) << "the bucket records the grant it took";
	EXPECT_EQ(passes("10.1.1.1", 3), 0);
	// The next grant follows the record: taken once too.
	ASSERT_TRUE(shift(r, "10.1.1.1", 60 * int64_t(SEC_TICKS)));
	EXPECT_EQ(passes("10.1.1.1", 3), 1);
	EXPECT_EQ(place(r, "10.1.1.1")->taken, 2u);
}

// A grant written for a bucket that is evicted before the program takes it
// goes with the bucket: the source's next bucket (a new generation in the
// way) starts from its burst, as any new bucket does.
TEST_F(ClusterRule, AGrantForAnEvictedBucketGoesWithIt)
{
	InstalledRule r = add_cluster(3);
	EXPECT_EQ(passes("10.1.1.4", 3), 2);
	ASSERT_TRUE(shift(r, "10.1.1.4", 3600 * int64_t(SEC_TICKS)));
	EXPECT_EQ(SourceTable4(maps_.src4.get()).purge(r.bucket_id ? r.bucket_id : r.id), 1u);
	EXPECT_EQ(passes("10.1.1.4", 4), 2) << "the new bucket's burst, without the old one's grant";
	EXPECT_EQ(place(r, "10.1.1.4")->taken, 0u);
}

// A local rule takes no grant, even one written with its bucket's name: the
// program reads the grants map for cluster rules only.
TEST_F(ClusterRule, ALocalRuleTakesNoGrant)
{
	InstalledRule r = table_->add(spec("alone", "10.0.0.0/8", "1/min", 2, Scope::local));
	EXPECT_EQ(passes("10.1.1.8", 3), 2);
	ASSERT_TRUE(shift(r, "10.1.1.8", 600 * int64_t(SEC_TICKS)));
	EXPECT_EQ(passes("10.1.1.8", 2), 0) << "a local rule's bucket moved by a grant";
	EXPECT_EQ(place(r, "10.1.1.8")->taken, 0u);
}
