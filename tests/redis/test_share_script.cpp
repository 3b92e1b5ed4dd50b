// SPDX-License-Identifier: GPL-2.0-only
// The share and hosts scripts on a real redis-server: what the store grants
// each host of a cluster rule's bucket, whatever order the hosts ask in.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "redis_server.h"
#include "share_scripts.h"
#include "store.h"

using namespace sluice;
using namespace sluice::cluster;
using sluice::test::RedisReply;
using sluice::test::RedisServer;
using std::chrono::milliseconds;

namespace {

constexpr double RATE = 300;
const std::string KEY = bucket_key("t", "shared", "10.0.0.1/32");

class ShareScript : public ::testing::Test {
protected:
	ShareScript()
	{
		StoreOptions o;
		o.seeds = {parse_endpoint(redis_.endpoint())};
		store_ = make_single_store(o, hiredis_connector(o));
	}
	/// What `node` is granted when it reports `demand` (and uses as much, up to its grant).
	BucketGrant ask(const std::string &node, double demand, milliseconds lease = milliseconds(10000))
	{
		auto replies = store_->execute({share_command(node, RATE, lease, {{KEY, demand, demand}})});
		return parse_share_reply(replies.at(0), 1, RATE).at(0);
	}
	/// Every live host's grant, as the store holds it.
	double granted_sum()
	{
		RedisReply r = redis_.checked({"HGETALL", KEY});
		double sum = 0;
		for (size_t i = 1; i < r.elements.size(); i += 2) {
			double demand, grant, used;
			long long expiry;
			EXPECT_EQ(std::sscanf(r.elements[i].str.c_str(), "%lf %lf %lf %lld", &demand, &grant, &used, &expiry), 4);
			sum += grant;
		}
		return sum;
	}

	RedisServer redis_;
	std::unique_ptr<Store> store_;
};

} // namespace

// Five hosts whose demands change at random ask in a random order: the
// grants the store holds never add up to more than the rate, and neither do
// the grants the hosts were last told.
TEST_F(ShareScript, GrantsNeverAddUpToMoreThanTheRate)
{
	std::mt19937 rng(7);
	std::uniform_int_distribution<int> host(0, 4);
	std::uniform_real_distribution<double> demand(0, 400);
	double told[5] = {};
	for (int i = 0; i < 400; i++) {
		int h = host(rng);
		double d = i % 9 == 0 ? 0 : demand(rng);
		told[h] = ask("h" + std::to_string(h), d).share;
		double sum = told[0] + told[1] + told[2] + told[3] + told[4];
		ASSERT_LE(sum, RATE * (1 + 1e-12)) << "after call " << i;
		ASSERT_LE(granted_sum(), RATE * (1 + 1e-12)) << "after call " << i;
	}
}

// Max-min fairness by demand: a host that wants less than an even share gets
// what it wants; the others split the rest.
TEST_F(ShareScript, SharesAreMaxMinFairByDemand)
{
	for (int round = 0; round < 3; round++) {
		ask("small", 50);
		ask("big1", 500);
		ask("big2", 500);
	}
	EXPECT_DOUBLE_EQ(ask("small", 50).share, 50);
	EXPECT_DOUBLE_EQ(ask("big1", 500).share, 125);
	EXPECT_DOUBLE_EQ(ask("big2", 500).share, 125);
	BucketGrant g = ask("big2", 500);
	EXPECT_EQ(g.hosts, 3u);
	EXPECT_DOUBLE_EQ(g.cluster_used, 1050) << "every live host's use, summed";
}

// What the demands leave over goes to the hosts with demand, so a host whose
// demand grows needs no round trip to use it; none to a host without.
TEST_F(ShareScript, WhatDemandLeavesGoesToTheHostsWithDemand)
{
	EXPECT_DOUBLE_EQ(ask("a", 100).share, 300) << "alone: the whole rate";
	EXPECT_DOUBLE_EQ(ask("b", 50).share, 0) << "a holds it all until a hears";
	EXPECT_DOUBLE_EQ(ask("a", 100).share, 175) << "100 + half of the 150 left";
	EXPECT_DOUBLE_EQ(ask("b", 50).share, 125) << "50 + half of the 150 left";
	EXPECT_DOUBLE_EQ(ask("c", 0).share, 0);
}

// Shrink before grow: a host whose share must shrink keeps its grant until it
// asks again; only then can another host grow into it.
TEST_F(ShareScript, AShareShrinksBeforeAnotherGrowsIntoIt)
{
	EXPECT_DOUBLE_EQ(ask("a", 900).share, 300);
	EXPECT_DOUBLE_EQ(ask("b", 900).share, 0);
	EXPECT_DOUBLE_EQ(ask("b", 900).share, 0) << "a has not heard of b yet";
	EXPECT_DOUBLE_EQ(ask("a", 900).share, 150);
	EXPECT_DOUBLE_EQ(ask("b", 900).share, 150);
}

// A host with no demand gives its share back at once; a host that stops
// asking gives it back when its lease ends.
TEST_F(ShareScript, SharesComeBackFromHostsWithNoDemandAndFromLapsedLeases)
{
	EXPECT_DOUBLE_EQ(ask("a", 900).share, 300);
	EXPECT_DOUBLE_EQ(ask("a", 0).share, 0);
	EXPECT_DOUBLE_EQ(ask("b", 900).share, 300) << "a gave its share back";
	EXPECT_EQ(redis_.checked({"HEXISTS", KEY, "a"}).integer, 0) << "a host with nothing leaves no record";

	EXPECT_DOUBLE_EQ(ask("c", 900, milliseconds(10000)).share, 0) << "b holds it all";
	ask("b", 900, milliseconds(200)); // b shrinks to 150 and then stops asking
	std::this_thread::sleep_for(milliseconds(300));
	EXPECT_DOUBLE_EQ(ask("c", 900).share, 300) << "b's lease ended";
	EXPECT_GT(redis_.checked({"PTTL", KEY}).integer, 0) << "a bucket's key expires when nobody asks";
}

// The live host count: hosts renew a lease in a sorted set; lapsed ones drop out.
TEST_F(ShareScript, TheHostsScriptCountsHostsWithALiveLease)
{
	auto count = [&](const std::string &node, milliseconds lease) {
		return parse_hosts_reply(store_->execute({hosts_command("t", node, lease)}).at(0));
	};
	EXPECT_EQ(count("h1", milliseconds(10000)), 1u);
	EXPECT_EQ(count("h2", milliseconds(200)), 2u);
	EXPECT_EQ(count("h3", milliseconds(10000)), 3u);
	EXPECT_EQ(count("h1", milliseconds(10000)), 3u) << "a host counts once";
	std::this_thread::sleep_for(milliseconds(300));
	EXPECT_EQ(count("h1", milliseconds(10000)), 2u) << "h2's lease ended";
}

// Every key of a rule has the rule's hash tag: one slot, so one script call
// can touch them all in a Redis Cluster.
TEST(ShareKeys, ARulesKeysShareOneSlotAndPrefixesSeparateClusters)
{
	EXPECT_EQ(key_slot(bucket_key("p", "web", "10.0.0.1/32")), key_slot(bucket_key("p", "web", "2001:db8::/64")));
	EXPECT_EQ(bucket_key("p", "web", "10.0.0.1/32"), "{p:web}:10.0.0.1/32");
	EXPECT_NE(bucket_key("p", "web", "10.0.0.1/32"), bucket_key("q", "web", "10.0.0.1/32"));
	EXPECT_EQ(hosts_key("p"), "{p}:hosts");
}

// A reply the sync cannot use is one line saying why, never a wrong grant.
TEST(ShareKeys, MalformedRepliesAreRefused)
{
	Reply error;
	error.type = Reply::Type::error;
	error.str = "ERR something";
	EXPECT_THROW(parse_share_reply(error, 1, RATE), Error);
	Reply short_array;
	short_array.type = Reply::Type::array;
	short_array.elements.resize(2);
	EXPECT_THROW(parse_share_reply(short_array, 1, RATE), Error);
	Reply words;
	words.type = Reply::Type::array;
	for (const char *w : {"12", "x", "1"}) {
		Reply e;
		e.type = Reply::Type::string;
		e.str = w;
		words.elements.push_back(e);
	}
	EXPECT_THROW(parse_share_reply(words, 1, RATE), Error);
}
