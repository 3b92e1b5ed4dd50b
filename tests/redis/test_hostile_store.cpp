// SPDX-License-Identifier: GPL-2.0-only
// Stores and peers that lie. A peer with write access to a rule's keys
// writes records of any form into them; a store answers the share and hosts
// scripts with values of any form; a cluster node names addresses the
// operator never gave. None of it gives an honest host a grant beyond the
// rule's rate, and the password goes only to the addresses named.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>

#include "fake_resp.h"
#include "redis_server.h"
#include "share_scripts.h"
#include "store.h"
#include "store_testing.h"

using namespace sluice;
using namespace sluice::cluster;
using sluice::test::FakeRespServer;
using sluice::test::RedisCluster;
using sluice::test::RedisServer;
using sluice::test::RedisServerOptions;
namespace resp = sluice::test::resp;
using std::chrono::milliseconds;

namespace {

constexpr double RATE = 100;

/// Values a lying record holds, in any of its four fields.
const std::vector<std::string> HOSTILE = {"-1",    "-1e300", "-100",  "1e300", "1e308", "-1e308", "nan", "-nan",
					  "inf",   "-inf",   "0x10",  "1e999", "-0",    "0",     "50",    "1000100",
					  "1e-320", "9007199254740993", "  7", "7  ", "+5", "1e", ""};

StoreOptions options_for(const std::vector<std::string> &endpoints, std::string password = {})
{
	StoreOptions o;
	for (const auto &e : endpoints)
		o.seeds.push_back(parse_endpoint(e));
	o.password = std::move(password);
	o.timeout = milliseconds(500);
	return o;
}

} // namespace

// One peer writes its record with values of every form (negative, huge, nan,
// inf, junk) while three honest hosts ask for shares with random demands:
// no honest host is ever granted more than the rate, the honest hosts'
// grants never add up to more than the rate, and every reply reads as
// numbers the sync accepts.
TEST(HostilePeer, NoRecordGivesTheHonestHostsMoreThanTheRate)
{
	RedisServer redis;
	StoreOptions o = options_for({redis.endpoint()});
	auto store = make_single_store(o, hiredis_connector(o));
	const std::string key = bucket_key("t", "shared", "10.0.0.1/32");
	std::mt19937 rng(26);
	std::uniform_int_distribution<size_t> pick(0, HOSTILE.size() - 1);
	std::uniform_int_distribution<int> host(0, 2);
	std::uniform_real_distribution<double> demand(0, 3 * RATE);
	double told[3] = {};
	long long now_ms = std::stoll(redis.checked({"TIME"}).elements.at(0).str) * 1000;
	int calls = 0;
	for (size_t d = 0; d < HOSTILE.size(); d++) {
		for (size_t g = 0; g < HOSTILE.size(); g++) {
			// The liar's expiry: live, or one no honest host writes.
			std::string expiry = (d + g) % 3 == 0	? std::to_string(now_ms + 3600000LL * 24)
					     : (d + g) % 3 == 1 ? std::to_string(now_ms + 60000)
								 : HOSTILE[pick(rng)];
			std::string record = HOSTILE[d] + " " + HOSTILE[g] + " " + HOSTILE[pick(rng)] + " " + expiry;
			redis.checked({"HSET", key, "liar", record});
			int h = host(rng);
			double want = calls % 7 == 0 ? 0 : demand(rng);
			auto replies = store->execute({share_command("h" + std::to_string(h), RATE, milliseconds(10000),
								     {{key, want, std::min(want, told[h])}})});
			BucketGrant grant;
			ASSERT_NO_THROW(grant = parse_share_reply(replies.at(0), 1, RATE).at(0))
				<< "record '" << record << "'";
			told[h] = grant.share;
			ASSERT_LE(grant.share, RATE) << "record '" << record << "'";
			ASSERT_LE(told[0] + told[1] + told[2], RATE * (1 + 1e-12)) << "record '" << record << "'";
			ASSERT_TRUE(std::isfinite(grant.cluster_used) && grant.cluster_used >= 0);
			ASSERT_LE(grant.hosts, 4u);
			calls++;
		}
	}
	EXPECT_EQ(calls, int(HOSTILE.size() * HOSTILE.size()));
}

// The case of the report: a peer's negative demand and grant once got an
// honest host 1e300 (or, for a rate of 100, 1,000,100).
TEST(HostilePeer, NegativeFieldsCountAsNothingNotAsCredit)
{
	RedisServer redis;
	StoreOptions o = options_for({redis.endpoint()});
	auto store = make_single_store(o, hiredis_connector(o));
	const std::string key = bucket_key("t", "shared", "10.0.0.1/32");
	long long now_ms = std::stoll(redis.checked({"TIME"}).elements.at(0).str) * 1000;
	for (const char *lie : {"-1e300 -1e300 0", "-1000000 -1000000 0", "-5 -5 -5"}) {
		redis.checked({"HSET", key, "liar", std::string(lie) + " " + std::to_string(now_ms + 60000)});
		auto r = store->execute({share_command("honest", RATE, milliseconds(10000), {{key, 500, 100}})});
		BucketGrant g = parse_share_reply(r.at(0), 1, RATE).at(0);
		EXPECT_DOUBLE_EQ(g.share, RATE) << lie << ": the whole rate, not more";
	}
	// A liar's grant beyond the rate, or not a number, leaves nothing.
	for (const char *lie : {"0 1e300 0", "0 inf 0"}) {
		redis.checked({"HSET", key, "liar", std::string(lie) + " " + std::to_string(now_ms + 60000)});
		auto r = store->execute({share_command("honest", RATE, milliseconds(10000), {{key, 500, 100}})});
		EXPECT_DOUBLE_EQ(parse_share_reply(r.at(0), 1, RATE).at(0).share, 0) << lie;
	}
	// A record that is not four numbers, or whose lease ends later than any
	// lease granted, is dropped.
	for (const char *lie : {"0 nan 0 ", "0 50 0 ", "nan nan nan "}) {
		std::string expiry = std::string(lie) == "0 50 0 " ? std::to_string(now_ms + 7200000) : "99";
		redis.checked({"HSET", key, "liar", std::string(lie) + expiry});
		auto r = store->execute({share_command("honest", RATE, milliseconds(10000), {{key, 500, 100}})});
		BucketGrant g = parse_share_reply(r.at(0), 1, RATE).at(0);
		EXPECT_DOUBLE_EQ(g.share, RATE) << lie;
		EXPECT_EQ(g.hosts, 1u) << lie;
		EXPECT_EQ(redis.checked({"HEXISTS", key, "liar"}).integer, 0) << lie;
	}
}

// The hosts registry: entries whose lease ends later than any lease granted
// are dropped, so a liar cannot pin a count.
TEST(HostilePeer, RegistryEntriesBeyondTheLongestLeaseAreDropped)
{
	RedisServer redis;
	StoreOptions o = options_for({redis.endpoint()});
	auto store = make_single_store(o, hiredis_connector(o));
	long long now_ms = std::stoll(redis.checked({"TIME"}).elements.at(0).str) * 1000;
	for (int i = 0; i < 50; i++)
		redis.checked({"ZADD", hosts_key("t"), std::to_string(now_ms + 7200000 + i), "ghost" + std::to_string(i)});
	redis.checked({"ZADD", hosts_key("t"), "inf", "forever"});
	redis.checked({"ZADD", hosts_key("t"), std::to_string(now_ms + 60000), "peer"});
	EXPECT_EQ(parse_hosts_reply(store->execute({hosts_command("t", "me", milliseconds(10000))}).at(0)), 2u);
	// The scripts refuse a lease beyond the longest, whoever sends it.
	Reply r = store->execute({hosts_command("t", "me", MAX_LEASE + milliseconds(1))}).at(0);
	EXPECT_TRUE(r.is_error()) << r.str;
	r = store->execute({share_command("me", RATE, MAX_LEASE + milliseconds(1), {{"{t:r}:x", 1, 1}})}).at(0);
	EXPECT_TRUE(r.is_error()) << r.str;
}

// A store that answers the scripts with values of any form: the sync takes
// no grant from it (one line says why) unless every value is within bounds.
TEST(HostileStore, AnswersOutOfBoundsAreRefusedNeverApplied)
{
	std::vector<std::string> answer; // share, used, hosts
	long long hosts_count = 3;
	FakeRespServer fake([&](const std::vector<std::string> &args) {
		if (args.at(0) == "EVALSHA" && args.at(1) == share_script().sha1)
			return resp::array({resp::bulk(answer[0]), resp::bulk(answer[1]), resp::bulk(answer[2])});
		if (args.at(0) == "EVALSHA")
			return resp::integer(hosts_count);
		return resp::error("ERR unknown");
	});
	StoreOptions o = options_for({fake.endpoint()});
	auto store = make_single_store(o, hiredis_connector(o));
	auto ask = [&]() {
		return store->execute({share_command("me", 50, milliseconds(1000), {{"{t:r}:x", 1000, 50}})}).at(0);
	};
	for (const std::string &share : HOSTILE) {
		for (const std::string &hosts : {std::string("1"), std::string("nan"), std::string("4294967297"),
						 std::string("-1"), std::string("3.5"), std::string("10001")}) {
			answer = {share, "10", hosts};
			Reply r = ask();
			std::optional<double> s = parse_store_number(share);
			bool valid = s && *s >= 0 && *s <= 50 && hosts == "1";
			if (valid) {
				EXPECT_DOUBLE_EQ(parse_share_reply(r, 1, 50).at(0).share, *s) << share;
				continue;
			}
			try {
				parse_share_reply(r, 1, 50);
				ADD_FAILURE() << "share '" << share << "', hosts '" << hosts << "' accepted";
			} catch (const Error &e) {
				EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
				EXPECT_NE(std::string(e.what()).find("no grant applied"), std::string::npos) << e.what();
			}
		}
	}
	for (const char *used : {"nan", "inf", "-1", "1e999", "x"}) {
		answer = {"10", used, "1"};
		EXPECT_THROW(parse_share_reply(ask(), 1, 50), Error) << used;
	}
	for (long long count : {0LL, -1LL, 10001LL, 1LL << 40}) {
		hosts_count = count;
		EXPECT_THROW(parse_hosts_reply(store->execute({hosts_command("t", "me", milliseconds(1000))}).at(0)), Error)
			<< count;
	}
	hosts_count = 10000;
	EXPECT_EQ(parse_hosts_reply(store->execute({hosts_command("t", "me", milliseconds(1000))}).at(0)), 10000u);
}

namespace {

/// A fake cluster seed: AUTH answers OK, CLUSTER SLOTS maps every slot to
/// `master` (itself unless set), and every other command is redirected to
/// `redirect_to` with `kind` (MOVED or ASK).
struct FakeSeed {
	std::string kind = "MOVED";
	uint16_t master_port = 0, redirect_port = 0;
	FakeRespServer server{[this](const std::vector<std::string> &args) {
		if (args.at(0) == "AUTH")
			return resp::status("OK");
		if (args.at(0) == "CLUSTER") {
			uint16_t port = master_port ? master_port : server.port();
			return resp::array({resp::array({resp::integer(0), resp::integer(CLUSTER_SLOTS - 1),
							 resp::array({resp::bulk("127.0.0.1"), resp::integer(port),
								      resp::bulk("id")})})});
		}
		return resp::error(kind + " 1 127.0.0.1:" + std::to_string(redirect_port));
	}};
};

/// A listener that records what arrives (AUTH above all) and answers OK.
FakeRespServer::Handler answers_ok()
{
	return [](const std::vector<std::string> &) { return resp::status("OK"); };
}

} // namespace

// A seed that redirects (MOVED, ASK) to another port, or names it in its
// slot map: with a password, the router sends nothing there, AUTH least of
// all, and says why in one line.
TEST(HostileStore, ThePasswordGoesOnlyToTheAddressesNamed)
{
	const std::string password = "hunter2-secret";
	for (const char *how : {"MOVED", "ASK", "CLUSTER SLOTS"}) {
		FakeRespServer listener(answers_ok());
		FakeSeed seed;
		seed.redirect_port = listener.port();
		if (std::string(how) == "CLUSTER SLOTS")
			seed.master_port = listener.port();
		else
			seed.kind = how;
		StoreOptions o = options_for({seed.server.endpoint()}, password);
		auto store = make_cluster_store(o, hiredis_connector(o));
		std::string reason = sluice::test::unavailable_reason(*store, {Command{{"GET", "k"}, "k", nullptr}});
		EXPECT_NE(reason.find(listener.endpoint() + ": not among the addresses given to --redis-cluster"),
			  std::string::npos)
			<< how << ": " << reason;
		EXPECT_EQ(reason.find('\n'), std::string::npos);
		EXPECT_EQ(listener.connections(), 0) << how << ": connected to an address nobody named";
		EXPECT_FALSE(listener.saw_argument(password)) << how;
		EXPECT_TRUE(seed.server.saw_argument(password)) << how << ": the seed was named, and logged in to";
	}
}

// The same redirections without a password are followed (nothing secret
// goes with them); and a node named among the seeds is logged in to.
TEST(HostileStore, NamedNodesAndPasswordlessStoresAreFollowed)
{
	FakeRespServer listener(answers_ok());
	FakeSeed seed;
	seed.redirect_port = listener.port();
	StoreOptions open = options_for({seed.server.endpoint()});
	auto store = make_cluster_store(open, hiredis_connector(open));
	EXPECT_EQ(store->execute({Command{{"GET", "k"}, "k", nullptr}}).at(0).str, "OK");
	EXPECT_EQ(listener.connections(), 1);

	FakeRespServer named(answers_ok());
	FakeSeed seed2;
	seed2.redirect_port = named.port();
	StoreOptions o = options_for({seed2.server.endpoint(), named.endpoint()}, "pw-named");
	auto store2 = make_cluster_store(o, hiredis_connector(o));
	EXPECT_EQ(store2->execute({Command{{"GET", "k"}, "k", nullptr}}).at(0).str, "OK");
	EXPECT_TRUE(named.saw_argument("pw-named"));
}

// A real password-protected cluster: with one node named, the others are not
// connected to; with every master named, every command lands.
TEST(HostileStore, APasswordProtectedClusterNeedsEveryMasterNamed)
{
	RedisCluster cluster(3, "cluster pass");
	StoreOptions one = options_for({cluster.seeds()[0]}, "cluster pass");
	auto partial = make_cluster_store(one, hiredis_connector(one));
	std::vector<Command> batch;
	for (int i = 0; i < 30; i++) {
		std::string key = "{k" + std::to_string(i) + "}";
		batch.push_back(Command{{"SET", key, "1"}, key, nullptr});
	}
	std::string reason = sluice::test::unavailable_reason(*partial, batch);
	EXPECT_NE(reason.find("not among the addresses given to --redis-cluster"), std::string::npos) << reason;

	StoreOptions all = options_for(cluster.seeds(), "cluster pass");
	auto store = make_cluster_store(all, hiredis_connector(all));
	for (const auto &r : store->execute(batch))
		EXPECT_EQ(r.str, "OK");
}

namespace {

/// A number as Lua 5.1's tonumber reads a field (strtod over the whole text,
/// so "inf", "1e999" and "0x10" are numbers), nan counting as none: the
/// reading the share script documents.
std::optional<double> lua_number(const std::string &text)
{
	if (text.empty())
		return std::nullopt;
	char *end = nullptr;
	double v = std::strtod(text.c_str(), &end);
	if (end == text.c_str() || *end || std::isnan(v))
		return std::nullopt;
	return v;
}

/// What the share script grants one host, computed from its documented
/// rules: records of four numbers with a live lease no longer than the
/// longest count, demands and grants within [0, rate], uses within
/// [0, MAX_REPORTED_USE], the others' grants summed at most the rate; the
/// grant is min(the max-min fair share, rate - others) within [0, rate].
BucketGrant reference_grant(double rate, double demand, double used,
			    const std::vector<std::array<std::string, 4>> &records, long long now_ms)
{
	auto clamp = [](double x, double lo, double hi) { return std::min(std::max(x, lo), hi); };
	demand = clamp(demand, 0, rate);
	used = clamp(used, 0, MAX_REPORTED_USE);
	std::vector<double> demands = {demand};
	double others = 0, used_all = used;
	unsigned live = 1;
	for (const auto &r : records) {
		auto d = lua_number(r[0]), g = lua_number(r[1]), u = lua_number(r[2]), exp = lua_number(r[3]);
		if (!d || !g || !u || !exp || *exp <= double(now_ms) || *exp > double(now_ms + MAX_LEASE.count()))
			continue;
		demands.push_back(clamp(*d, 0, rate));
		others = std::min(others + clamp(*g, 0, rate), rate);
		used_all += clamp(*u, 0, MAX_REPORTED_USE);
		live++;
	}
	double sum = 0;
	int wanting = 0;
	for (double d : demands) {
		sum += d;
		wanting += d > 0;
	}
	double target = 0;
	if (demand > 0) {
		if (sum <= rate) {
			target = demand + (rate - sum) / wanting;
		} else {
			std::sort(demands.begin(), demands.end());
			double left = rate, level = rate;
			size_t n = demands.size();
			for (double d : demands) {
				double even = left / double(n);
				if (d > even) {
					level = even;
					break;
				}
				left -= d;
				n--;
			}
			target = std::min(demand, level);
		}
	}
	BucketGrant out;
	out.share = clamp(std::min(target, rate - others), 0, rate);
	out.cluster_used = used_all;
	out.hosts = demand <= 0 && out.share <= 0 ? live - 1 : live;
	return out;
}

} // namespace

// The share script against its documented rules, on generated states: up to
// five other hosts' records, each honest-looking or hostile in any field
// (negative, huge, nan, inf, junk, a lease ended or too long), and this
// host's demand. The grant, the use summed and the live count agree with
// the reference; records it does not count are gone afterwards.
TEST(HostilePeer, TheShareScriptAgreesWithItsDocumentedRules)
{
	RedisServer redis;
	StoreOptions o = options_for({redis.endpoint()});
	auto store = make_single_store(o, hiredis_connector(o));
	std::mt19937 rng(2026);
	std::uniform_real_distribution<double> unit(0, 1);
	std::uniform_int_distribution<int> others(0, 5);
	std::uniform_int_distribution<size_t> pick(0, HOSTILE.size() - 1);
	long long now_ms = std::stoll(redis.checked({"TIME"}).elements.at(0).str) * 1000;
	auto field = [&](double honest) {
		char buf[40];
		std::snprintf(buf, sizeof(buf), "%.17g", honest);
		return unit(rng) < 0.25 ? HOSTILE[pick(rng)] : std::string(buf);
	};
	int compared = 0;
	for (int trial = 0; trial < 1500; trial++) {
		std::string key = bucket_key("t", "ref", "10.0.0." + std::to_string(trial % 250) + "/32:" +
								 std::to_string(trial));
		std::vector<std::array<std::string, 4>> records;
		for (int n = others(rng); n > 0; n--) {
			double r = unit(rng);
			std::string expiry = r < 0.7   ? std::to_string(now_ms + 60000)
					     : r < 0.8 ? std::to_string(now_ms - 60000)
					     : r < 0.9 ? std::to_string(now_ms + MAX_LEASE.count() + 600000)
						       : HOSTILE[pick(rng)];
			std::array<std::string, 4> rec = {field(unit(rng) * 2 * RATE), field(unit(rng) * RATE / 2),
							  field(unit(rng) * RATE), expiry};
			// The script splits on single spaces: a field holding a blank is
			// another shape of record, which the reference drops as well.
			records.push_back(rec);
			redis.checked({"HSET", key, "o" + std::to_string(n), rec[0] + " " + rec[1] + " " + rec[2] + " " + rec[3]});
		}
		double demand = unit(rng) < 0.15 ? 0 : unit(rng) * 2 * RATE, used = unit(rng) * RATE;
		auto replies = store->execute({share_command("me", RATE, milliseconds(10000), {{key, demand, used}})});
		BucketGrant got = parse_share_reply(replies.at(0), 1, RATE).at(0);
		std::vector<std::array<std::string, 4>> shaped;
		for (const auto &rec : records)
			if (std::none_of(rec.begin(), rec.end(),
					 [](const std::string &f) { return f.empty() || f.find(' ') != std::string::npos; }))
				shaped.push_back(rec);
		BucketGrant want = reference_grant(RATE, demand, used, shaped, now_ms);
		std::string state;
		for (const auto &rec : records)
			state += " [" + rec[0] + "|" + rec[1] + "|" + rec[2] + "|" + rec[3] + "]";
		ASSERT_NEAR(got.share, want.share, 1e-9 * RATE) << "demand " << demand << state;
		ASSERT_NEAR(got.cluster_used, want.cluster_used, 1e-9 * std::max(1.0, want.cluster_used)) << state;
		ASSERT_EQ(got.hosts, want.hosts) << state;
		ASSERT_EQ(size_t(redis.checked({"HLEN", key}).integer), want.hosts) << "uncounted records stay" << state;
		compared++;
	}
	EXPECT_EQ(compared, 1500);
}

// What a lying server says reaches the agent's log and status as one line:
// error replies, refused logins and announced host names with line breaks
// in them are shown with '?' for each control character.
TEST(HostileStore, WhatAServerSaysStaysOneLine)
{
	// RESP ends an error at "\r\n"; a lone "\n" or an escape goes through.
	const std::string lie = "ERR ok\ncluster: ok, redis 10.0.0.1:6379 as node 'h1'\x1b[2J";
	FakeRespServer store([&](const std::vector<std::string> &args) {
		if (args.at(0) == "AUTH")
			return resp::error("WRONGPASS " + lie);
		if (args.at(0) == "CLUSTER")
			return resp::array({resp::array({resp::integer(0), resp::integer(CLUSTER_SLOTS - 1),
							 resp::array({resp::bulk("evil\nhost"), resp::integer(1), resp::bulk("id")})})});
		return resp::error(lie);
	});
	StoreOptions open = options_for({store.endpoint()});
	auto single = make_single_store(open, hiredis_connector(open));
	std::vector<std::string> said;
	try {
		parse_share_reply(single->execute({share_command("me", 5, milliseconds(1000), {{"{t:r}:x", 1, 1}})}).at(0), 1, 5);
	} catch (const Error &e) {
		said.push_back(e.what());
	}
	try {
		parse_hosts_reply(single->execute({hosts_command("t", "me", milliseconds(1000))}).at(0));
	} catch (const Error &e) {
		said.push_back(e.what());
	}
	StoreOptions locked = options_for({store.endpoint()}, "pw");
	said.push_back(sluice::test::unavailable_reason(*make_single_store(locked, hiredis_connector(locked)),
							{Command{{"PING"}, "", nullptr}}));
	said.push_back(sluice::test::unavailable_reason(*make_cluster_store(open, hiredis_connector(open)),
							{Command{{"PING"}, "", nullptr}}));
	ASSERT_EQ(said.size(), 4u);
	for (const auto &line : said) {
		EXPECT_EQ(line.find_first_of("\r\n"), std::string::npos) << line;
		EXPECT_NE(line.find("?"), std::string::npos) << "[" << line << "]";
	}
	EXPECT_NE(said[3].find("'evil?host' is no host name"), std::string::npos) << said[3];
}
