// SPDX-License-Identifier: GPL-2.0-only
// The shared store without a server: key slots, SHA-1, addresses, password
// files, and both stores over a fake cluster that answers MOVED and ASK as
// real nodes do (the real servers' tests are tests/redis).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>

#include "share_scripts.h"
#include "store.h"
#include "store_testing.h"
#include "temp_file.h"

using namespace sluice;
using namespace sluice::cluster;

namespace {

// What Redis 7.0's CLUSTER KEYSLOT and SCRIPT LOAD answer, asked once.
TEST(KeySlot, MatchesRedis)
{
	EXPECT_EQ(key_slot("foo"), 12182);
	EXPECT_EQ(key_slot("123456789"), 12739); // CRC16/XMODEM's check value 0x31c3, mod 16384
	EXPECT_EQ(key_slot(""), 0);
	EXPECT_EQ(key_slot("a"), 15495);
}

TEST(KeySlot, HashesOnlyTheFirstNonEmptyTag)
{
	EXPECT_EQ(key_slot("{user1000}.following"), 3443);
	EXPECT_EQ(key_slot("{user1000}.followers"), 3443);
	EXPECT_EQ(key_slot("user1000"), 3443);
	// "{}" is no tag: the whole key is hashed.
	EXPECT_EQ(key_slot("foo{}{bar}"), 8363);
	EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));
	// The tag ends at the first '}' after the first '{'.
	EXPECT_EQ(key_slot("foo{{bar}}zap"), 4015);
	EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
	EXPECT_EQ(key_slot("foo{bar}{zap}"), 5061);
	EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
	// No '}' after the '{': the whole key.
	EXPECT_EQ(key_slot("{unclosed"), 470);
	// A '}' before the first '{' does not close anything.
	EXPECT_EQ(key_slot("}{a}"), key_slot("a"));
}

TEST(KeySlot, StaysBelowTheSlotCount)
{
	std::set<uint16_t> seen;
	for (int i = 0; i < 100000; i++) {
		uint16_t slot = key_slot("key:" + std::to_string(i));
		ASSERT_LT(slot, CLUSTER_SLOTS);
		seen.insert(slot);
	}
	EXPECT_GT(seen.size(), 16000u) << "keys spread over nearly every slot";
}

TEST(StoreSha1, KnownVectors)
{
	EXPECT_EQ(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
	EXPECT_EQ(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
	EXPECT_EQ(sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
		  "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
	EXPECT_EQ(sha1_hex(std::string(1000000, 'a')), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
	// Lengths around the padding's block boundary (55, 56, 63, 64 bytes).
	EXPECT_EQ(sha1_hex(std::string(55, 'a')), "c1c8bbdc22796e28c0e15163d20899b65621d65a");
	EXPECT_EQ(sha1_hex(std::string(56, 'a')), "c2db330f6083854c99d4b5bfb6e8f29f201be699");
	EXPECT_EQ(sha1_hex(std::string(63, 'a')), "03f09f5b158a7a8cdad920bddc29b81c18a551f5");
	EXPECT_EQ(sha1_hex(std::string(64, 'a')), "0098ba824b5c16427bd7a1122a5a442a25ec644d");
}

TEST(StoreScript, Sha1IsWhatScriptLoadAnswers)
{
	EXPECT_EQ(make_script("return 1").sha1, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
	Script incr = make_script("return redis.call('INCR', KEYS[1])");
	EXPECT_EQ(incr.sha1, "61636018f4e6b5817b89791bbed242f93fa089e3");
	EXPECT_EQ(incr.body, "return redis.call('INCR', KEYS[1])");
}

TEST(StoreScript, EvalCommandIsEvalshaRoutedByItsFirstKey)
{
	Script s = make_script("return 1");
	Command c = eval_command(s, {"{a}k1", "{a}k2"}, {"x", "7"});
	EXPECT_EQ(c.args, (std::vector<std::string>{"EVALSHA", s.sha1, "2", "{a}k1", "{a}k2", "x", "7"}));
	EXPECT_EQ(c.route_key, "{a}k1");
	ASSERT_TRUE(c.script_body);
	EXPECT_EQ(*c.script_body, "return 1");
	Command keyless = eval_command(s, {}, {});
	EXPECT_EQ(keyless.args, (std::vector<std::string>{"EVALSHA", s.sha1, "0"}));
	EXPECT_EQ(keyless.route_key, "");
}

TEST(StoreEndpoint, ParsesHostsAndBracketedIpv6)
{
	EXPECT_EQ(parse_endpoint("127.0.0.1:6379"), (Endpoint{"127.0.0.1", 6379}));
	EXPECT_EQ(parse_endpoint("redis.example:7000"), (Endpoint{"redis.example", 7000}));
	Endpoint v6 = parse_endpoint("[::1]:6380");
	EXPECT_EQ(v6, (Endpoint{"::1", 6380}));
	EXPECT_EQ(v6.str(), "[::1]:6380");
	EXPECT_EQ(parse_endpoint("10.0.0.1:1").str(), "10.0.0.1:1");
	EXPECT_EQ(parse_endpoints("a:1,b:2,[::1]:3"),
		  (std::vector<Endpoint>{{"a", 1}, {"b", 2}, {"::1", 3}}));
}

TEST(StoreEndpoint, RejectsMalformedAddressesWithAReason)
{
	auto reason = [](std::string_view text) {
		try {
			parse_endpoints(text);
		} catch (const Error &e) {
			return std::string(e.what());
		}
		return std::string("(accepted)");
	};
	EXPECT_EQ(reason("localhost"), "redis address localhost has no port (HOST:PORT)");
	EXPECT_EQ(reason("localhost:"), "redis address localhost: has no port (HOST:PORT)");
	EXPECT_EQ(reason(":6379"), "redis address :6379 has no host");
	EXPECT_EQ(reason("h:0"), "redis address h:0: port 0 is not a number from 1 to 65535");
	EXPECT_EQ(reason("h:65536"), "redis address h:65536: port 65536 is not a number from 1 to 65535");
	EXPECT_EQ(reason("h:63x"), "redis address h:63x: port 63x is not a number from 1 to 65535");
	EXPECT_EQ(reason("h:-1"), "redis address h:-1: port -1 is not a number from 1 to 65535");
	EXPECT_EQ(reason("::1:6379"), "redis address ::1:6379: write an IPv6 address in brackets, as [V6]:PORT");
	EXPECT_EQ(reason("[::1:6379"), "redis address [::1:6379: no ']' after the IPv6 address");
	EXPECT_EQ(reason("[::1]6379"), "redis address [::1]6379 has no port ([V6]:PORT)");
	EXPECT_EQ(reason("[]:6379"), "redis address []:6379 has no host");
	EXPECT_EQ(reason(""), "no redis address (HOST:PORT,...)");
	EXPECT_EQ(reason("a:1,,b:2"), "an empty redis address in a:1,,b:2");
	EXPECT_EQ(reason("a:1,"), "an empty redis address in a:1,");
	EXPECT_EQ(reason("a b:1"), "redis address a b:1: ' ' in the host name");
	EXPECT_EQ(reason("a\nb:1"), "redis address a\\x0ab:1: '\\x0a' in the host name")
		<< "one line, even for a newline typed in";
}

using sluice::test::TempFile;

TEST(StorePasswordFile, ReadsTheFirstLine)
{
	EXPECT_EQ(read_password_file(TempFile("s3cret\n").path()), "s3cret");
	EXPECT_EQ(read_password_file(TempFile("s3cret").path()), "s3cret");
	EXPECT_EQ(read_password_file(TempFile("s3cret\r\nsecond line\n").path()), "s3cret");
	EXPECT_EQ(read_password_file(TempFile("user:pass word\n").path()), "user:pass word") << "not split";
}

TEST(StorePasswordFile, SaysWhyItCannotBeUsed)
{
	TempFile empty("\nsecond\n");
	try {
		read_password_file(empty.path());
		FAIL() << "an empty first line was accepted";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()), "the redis password file " + empty.path() + " has an empty first line");
	}
	EXPECT_THROW(read_password_file(TempFile("").path()), Error);
	try {
		read_password_file("/tmp");
		FAIL() << "a directory was read";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()), "cannot read the redis password file /tmp: Is a directory");
	}
	try {
		read_password_file("/nonexistent/sluice-password");
		FAIL() << "a missing file was read";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()),
			  "cannot read the redis password file /nonexistent/sluice-password: No such file or directory");
	}
}

// ---- A fake cluster behind the Connection interface ----

Reply status(std::string s) { return Reply{Reply::Type::status, 0, std::move(s), {}}; }
Reply error(std::string s) { return Reply{Reply::Type::error, 0, std::move(s), {}}; }
Reply integer(long long n) { return Reply{Reply::Type::integer, n, {}, {}}; }
Reply bulk(std::string s) { return Reply{Reply::Type::string, 0, std::move(s), {}}; }
Reply nil() { return Reply{}; }

std::string upper(std::string s)
{
	for (auto &c : s)
		c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
	return s;
}

/// One node of the fake cluster, and what it was sent.
struct FakeNode {
	Endpoint endpoint;
	bool reachable = true;
	std::map<std::string, std::string> data;
	std::set<std::string> scripts;     ///< SHA-1s that EVAL or SCRIPT LOAD cached
	std::map<uint16_t, int> migrating; ///< slot -> the node it migrates to
	std::map<uint16_t, int> importing; ///< slot -> the node it comes from
	std::map<uint16_t, int> moved_lie; ///< slot -> the node this one wrongly claims owns it
	int tryagain = 0;                  ///< key commands still to answer TRYAGAIN
	int generation = 0;                ///< restarts: older connections are broken
	int pipelines = 0;
	std::vector<std::vector<std::string>> received;

	/// How many commands named `name` this node received.
	int count(const std::string &name) const
	{
		int n = 0;
		for (const auto &c : received)
			n += upper(c[0]) == name;
		return n;
	}
};

/// Nodes that share one slot table (the truth after SETSLOT NODE on all), and
/// answer as Redis Cluster does: MOVED from a node that does not own the
/// slot, ASK from a migrating node that lacks the key, and the command itself
/// on the importing node after ASKING. Commands: GET, SET, INCR, EVAL and
/// EVALSHA (whose script, whatever its body, INCRs KEYS[1]), PING, ASKING,
/// CLUSTER SLOTS.
class FakeCluster {
public:
	explicit FakeCluster(int count)
	{
		for (int i = 0; i < count; i++)
			nodes.push_back(FakeNode{Endpoint{"10.0.0." + std::to_string(i + 1), 7000}});
		for (int slot = 0; slot < CLUSTER_SLOTS; slot++)
			owner[slot] = slot * count / CLUSTER_SLOTS;
	}

	std::vector<FakeNode> nodes;
	std::array<int, CLUSTER_SLOTS> owner;
	int cluster_slots_calls = 0;
	int connects = 0;

	Connector connector();

	int node_at(const Endpoint &ep) const
	{
		for (size_t i = 0; i < nodes.size(); i++)
			if (nodes[i].endpoint == ep)
				return static_cast<int>(i);
		return -1;
	}

	/// A key whose slot node `node` owns: "{tN}name" for the first N that fits.
	std::string key_on(int node, const std::string &name, int skip = 0) const
	{
		for (int n = 0;; n++) {
			std::string key = "{t" + std::to_string(n) + "}" + name;
			if (owner[key_slot(key)] == node && skip-- == 0)
				return key;
		}
	}

	void begin_migration(uint16_t slot, int to)
	{
		nodes[owner[slot]].migrating[slot] = to;
		nodes[to].importing[slot] = owner[slot];
	}
	void move_key(const std::string &key, int to)
	{
		auto &from = nodes[owner[key_slot(key)]].data;
		nodes[to].data[key] = from.at(key);
		from.erase(key);
	}
	/// Moves the slot's remaining keys, and gives it to its new owner.
	void finish_migration(uint16_t slot, int to)
	{
		auto &from = nodes[owner[slot]];
		for (auto it = from.data.begin(); it != from.data.end();) {
			if (key_slot(it->first) == slot) {
				nodes[to].data.insert(*it);
				it = from.data.erase(it);
			} else {
				++it;
			}
		}
		from.migrating.erase(slot);
		nodes[to].importing.erase(slot);
		owner[slot] = to;
	}
	/// A restart without persistence: data, scripts and connections are gone.
	void restart(int node)
	{
		nodes[node].data.clear();
		nodes[node].scripts.clear();
		nodes[node].generation++;
	}
	/// A failover in one step: `to` takes every slot of `from`, which stops answering.
	void fail_over(int from, int to)
	{
		nodes[from].reachable = false;
		for (auto &o : owner)
			if (o == from)
				o = to;
		nodes[to].data.insert(nodes[from].data.begin(), nodes[from].data.end());
	}

	Reply run(int node, const std::vector<std::string> &args, bool &asking)
	{
		FakeNode &n = nodes[node];
		n.received.push_back(args);
		std::string name = upper(args.at(0));
		bool was_asking = std::exchange(asking, false);
		if (name == "ASKING") {
			asking = true;
			return status("OK");
		}
		if (name == "PING")
			return status("PONG");
		if (name == "CLUSTER" && upper(args.at(1)) == "SLOTS") {
			cluster_slots_calls++;
			return slots_reply();
		}
		std::string key;
		if (name == "GET" || name == "SET" || name == "INCR")
			key = args.at(1);
		else if ((name == "EVAL" || name == "EVALSHA") && args.at(2) != "0")
			key = args.at(3);
		else if (name != "EVAL" && name != "EVALSHA")
			return error("ERR unknown command '" + args[0] + "'");

		if (!key.empty()) {
			uint16_t slot = key_slot(key);
			if (n.moved_lie.count(slot))
				return redirect("MOVED", slot, n.moved_lie[slot]);
			if (owner[slot] != node) {
				if (!(was_asking && n.importing.count(slot)))
					return redirect("MOVED", slot, owner[slot]);
			} else if (n.migrating.count(slot) && !n.data.count(key)) {
				return redirect("ASK", slot, n.migrating[slot]);
			}
			if (n.tryagain > 0) {
				n.tryagain--;
				return error("TRYAGAIN Multiple keys request during rehashing of slot");
			}
		}
		if (name == "GET")
			return n.data.count(key) ? bulk(n.data[key]) : nil();
		if (name == "SET") {
			n.data[key] = args.at(2);
			return status("OK");
		}
		if (name == "EVALSHA" && !n.scripts.count(args.at(1)))
			return error("NOSCRIPT No matching script. Please use EVAL.");
		if (name == "EVAL")
			n.scripts.insert(sha1_hex(args.at(1)));
		if (key.empty())
			return nil();
		long long value = n.data.count(key) ? std::stoll(n.data[key]) : 0;
		n.data[key] = std::to_string(++value);
		return integer(value);
	}

private:
	Reply redirect(const std::string &kind, uint16_t slot, int to) const
	{
		return error(kind + " " + std::to_string(slot) + " " + nodes[to].endpoint.str());
	}

	Reply slots_reply() const
	{
		Reply r{Reply::Type::array, 0, {}, {}};
		for (int first = 0; first < CLUSTER_SLOTS;) {
			int last = first;
			while (last + 1 < CLUSTER_SLOTS && owner[last + 1] == owner[first])
				last++;
			const FakeNode &n = nodes[owner[first]];
			Reply node{Reply::Type::array, 0, {}, {bulk(n.endpoint.host), integer(n.endpoint.port),
							      bulk("id-" + n.endpoint.host)}};
			r.elements.push_back(Reply{Reply::Type::array, 0, {}, {integer(first), integer(last), node}});
			first = last + 1;
		}
		return r;
	}
};

/// A connection to one fake node; it breaks if the node becomes unreachable.
class FakeConnection : public Connection {
public:
	FakeConnection(FakeCluster &cluster, int node)
		: cluster_(cluster), node_(node), generation_(cluster.nodes[node].generation)
	{
	}

	std::vector<Reply> pipeline(const std::vector<std::vector<std::string>> &commands) override
	{
		FakeNode &n = cluster_.nodes[node_];
		if (!n.reachable || n.generation != generation_)
			throw StoreUnavailable("redis " + n.endpoint.str() + ": the server closed the connection");
		n.pipelines++;
		std::vector<Reply> replies;
		for (const auto &c : commands)
			replies.push_back(cluster_.run(node_, c, asking_));
		return replies;
	}

private:
	FakeCluster &cluster_;
	int node_;
	int generation_;
	bool asking_ = false; ///< per connection, as ASKING is
};

Connector FakeCluster::connector()
{
	return [this](const Endpoint &ep) -> std::unique_ptr<Connection> {
		int node = node_at(ep);
		if (node < 0 || !nodes[node].reachable)
			throw StoreUnavailable("redis " + ep.str() + ": connection refused");
		connects++;
		return std::make_unique<FakeConnection>(*this, node);
	};
}

Command cmd(std::vector<std::string> args, std::string route_key = {})
{
	return Command{std::move(args), std::move(route_key), nullptr};
}
Command set(const std::string &key, const std::string &value) { return cmd({"SET", key, value}, key); }
Command get(const std::string &key) { return cmd({"GET", key}, key); }
Command incr(const std::string &key) { return cmd({"INCR", key}, key); }

StoreOptions seeds(const FakeCluster &c, std::initializer_list<int> nodes)
{
	StoreOptions o;
	for (int n : nodes)
		o.seeds.push_back(c.nodes[n].endpoint);
	return o;
}

using sluice::test::unavailable_reason;

TEST(SingleStore, ConnectsOnFirstUseAndReconnectsAfterAFailure)
{
	FakeCluster server(1);
	auto store = make_single_store(seeds(server, {0}), server.connector());
	EXPECT_EQ(store->describe(), "redis 10.0.0.1:7000");
	EXPECT_EQ(server.connects, 0) << "lazy";
	auto r = store->execute({set("k", "v"), get("k"), incr("n"), incr("n")});
	ASSERT_EQ(r.size(), 4u);
	EXPECT_EQ(r[0].str, "OK");
	EXPECT_EQ(r[1].str, "v");
	EXPECT_EQ(r[3].integer, 2);
	EXPECT_EQ(server.nodes[0].pipelines, 1) << "one round trip for the batch";

	server.nodes[0].reachable = false;
	EXPECT_EQ(unavailable_reason(*store, {get("k")}), "redis 10.0.0.1:7000: the server closed the connection");
	EXPECT_EQ(unavailable_reason(*store, {get("k")}), "redis 10.0.0.1:7000: connection refused");
	server.nodes[0].reachable = true;
	EXPECT_EQ(store->execute({get("k")}).at(0).str, "v");
	EXPECT_EQ(server.connects, 2);
}

TEST(SingleStore, SendsEvalWhenTheServerDoesNotKnowTheScript)
{
	FakeCluster server(1);
	auto store = make_single_store(seeds(server, {0}), server.connector());
	Script s = make_script("return redis.call('INCR', KEYS[1])");
	auto r = store->execute({eval_command(s, {"a"}, {}), get("a"), eval_command(s, {"a"}, {})});
	EXPECT_EQ(r[0].integer, 1);
	EXPECT_EQ(r[1].type, Reply::Type::nil) << "a command sent again runs after the rest of the batch";
	EXPECT_EQ(r[2].integer, 2);
	EXPECT_EQ(server.nodes[0].count("EVAL"), 2);
	r = store->execute({eval_command(s, {"a"}, {})});
	EXPECT_EQ(r[0].integer, 3);
	EXPECT_EQ(server.nodes[0].count("EVAL"), 2) << "the script is cached now";
	// An EVALSHA written by hand (no body) cannot fall back: its NOSCRIPT is the reply.
	r = store->execute({cmd({"EVALSHA", std::string(40, '0'), "1", "a"}, "a")});
	EXPECT_EQ(r[0].str, "NOSCRIPT No matching script. Please use EVAL.");
}

TEST(Router, RepliesComeBackInBatchOrderWithOnePipelinePerMaster)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {1}), c.connector());
	std::vector<Command> batch;
	std::vector<std::string> keys;
	for (int i = 0; i < 30; i++) {
		keys.push_back(c.key_on(i % 3, "k", i / 3));
		batch.push_back(set(keys.back(), "v" + std::to_string(i)));
		batch.push_back(get(keys.back()));
	}
	batch.push_back(cmd({"PING"}));
	auto r = store->execute(batch);
	ASSERT_EQ(r.size(), batch.size());
	for (int i = 0; i < 30; i++) {
		EXPECT_EQ(r[2 * i].str, "OK");
		EXPECT_EQ(r[2 * i + 1].str, "v" + std::to_string(i)) << keys[i];
	}
	EXPECT_EQ(r.back().str, "PONG");
	for (int n = 0; n < 3; n++) {
		EXPECT_EQ(c.nodes[n].data.size(), 10u) << "node " << n;
		EXPECT_EQ(c.nodes[n].count("GET"), 10) << "no command went to a wrong node";
	}
	EXPECT_EQ(c.nodes[0].pipelines, 1);
	EXPECT_EQ(c.nodes[1].pipelines, 2) << "CLUSTER SLOTS, then the batch";
	EXPECT_EQ(c.nodes[2].pipelines, 1);
	EXPECT_EQ(c.cluster_slots_calls, 1);
	EXPECT_EQ(store->describe(), "redis-cluster of 3 masters (10.0.0.1:7000, 10.0.0.2:7000, 10.0.0.3:7000)");
}

TEST(Router, FollowsMovedAndReloadsTheMapBeforeTheNextBatch)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {0}), c.connector());
	std::string key = c.key_on(0, "moving"), other = c.key_on(0, "staying");
	store->execute({set(key, "1"), set(other, "2")});
	EXPECT_EQ(c.cluster_slots_calls, 1);

	c.finish_migration(key_slot(key), 2);
	auto r = store->execute({incr(key), get(other), incr(key)});
	EXPECT_EQ(r[0].integer, 2);
	EXPECT_EQ(r[1].str, "2");
	EXPECT_EQ(r[2].integer, 3);
	EXPECT_EQ(c.nodes[0].count("INCR"), 2) << "both were sent by the old map, and answered MOVED";
	EXPECT_EQ(c.nodes[2].count("INCR"), 2);
	EXPECT_EQ(c.cluster_slots_calls, 1) << "the batch is not held up by a reload";

	r = store->execute({incr(key)});
	EXPECT_EQ(r[0].integer, 4);
	EXPECT_EQ(c.cluster_slots_calls, 2) << "the map is reloaded once, before the next batch";
	EXPECT_EQ(c.nodes[0].count("INCR"), 2) << "and the command went straight to the new owner";
	store->execute({incr(key)});
	EXPECT_EQ(c.cluster_slots_calls, 2) << "and only once";
}

TEST(Router, FollowsAskWithoutChangingTheMap)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {0}), c.connector());
	std::string moved = c.key_on(1, "a");
	std::string tag = moved.substr(0, moved.find('}') + 1);
	std::string kept = tag + "b", created = tag + "c";
	uint16_t slot = key_slot(moved);
	store->execute({set(moved, "10"), set(kept, "20")});

	c.begin_migration(slot, 2);
	c.move_key(moved, 2);
	auto r = store->execute({incr(moved), incr(kept), set(created, "x"), get(moved)});
	EXPECT_EQ(r[0].integer, 11);
	EXPECT_EQ(r[1].integer, 21) << "a key not moved yet is served by the owner";
	EXPECT_EQ(r[2].str, "OK");
	EXPECT_EQ(r[3].str, "11");
	EXPECT_EQ(c.nodes[2].data.at(moved), "11");
	EXPECT_EQ(c.nodes[2].data.at(created), "x") << "a new key of a migrating slot is made on the importing node";
	EXPECT_EQ(c.nodes[2].count("ASKING"), 3) << "ASKING before each command sent to the importing node";

	r = store->execute({incr(moved)});
	EXPECT_EQ(r[0].integer, 12);
	EXPECT_EQ(c.cluster_slots_calls, 1) << "ASK is no reason to reload the map";
	EXPECT_EQ(c.nodes[1].count("INCR"), 3) << "and the slot is still asked of its owner first";
	EXPECT_EQ(c.nodes[2].count("ASKING"), 4);

	c.finish_migration(slot, 2);
	r = store->execute({incr(moved), get(kept), get(created)});
	EXPECT_EQ(r[0].integer, 13);
	EXPECT_EQ(r[1].str, "21");
	EXPECT_EQ(r[2].str, "x");
	EXPECT_EQ(c.nodes[2].count("ASKING"), 4) << "a finished migration answers MOVED, not ASK";
}

TEST(Router, BoundsARedirectionLoop)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {0}), c.connector());
	std::string key = c.key_on(0, "loop");
	uint16_t slot = key_slot(key);
	c.nodes[0].moved_lie[slot] = 1;
	c.nodes[1].moved_lie[slot] = 0;
	std::string fine = c.key_on(2, "fine");
	auto r = store->execute({get(key), set(fine, "ok")});
	ASSERT_TRUE(r[0].is_error());
	EXPECT_EQ(r[0].str.rfind("MOVED ", 0), 0u) << r[0].str;
	EXPECT_EQ(c.nodes[0].count("GET") + c.nodes[1].count("GET"), 6) << "the first try and 5 redirections";
	EXPECT_EQ(r[1].str, "OK") << "the rest of the batch is not held up";
}

TEST(Router, RetriesTryagainAFewTimes)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {0}), c.connector());
	std::string key = c.key_on(1, "busy");
	c.nodes[1].tryagain = 2;
	EXPECT_EQ(store->execute({incr(key)}).at(0).integer, 1);
	c.nodes[1].tryagain = 1000;
	auto r = store->execute({incr(key)});
	EXPECT_EQ(r[0].str, "TRYAGAIN Multiple keys request during rehashing of slot");
	EXPECT_EQ(1000 - c.nodes[1].tryagain, 5) << "the first try and 4 retries";
}

TEST(Router, SendsEvalToEachNodeThatDoesNotKnowTheScript)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {0}), c.connector());
	Script s = make_script("return redis.call('INCR', KEYS[1])");
	c.nodes[1].scripts.insert(s.sha1);
	std::vector<Command> batch;
	for (int n = 0; n < 3; n++)
		for (int i = 0; i < 2; i++)
			batch.push_back(eval_command(s, {c.key_on(n, "e", i)}, {}));
	auto r = store->execute(batch);
	for (const auto &reply : r)
		EXPECT_EQ(reply.integer, 1);
	EXPECT_EQ(c.nodes[0].count("EVAL"), 2);
	EXPECT_EQ(c.nodes[1].count("EVAL"), 0) << "node 1 knew it";
	EXPECT_EQ(c.nodes[2].count("EVAL"), 2);
	r = store->execute(batch);
	for (const auto &reply : r)
		EXPECT_EQ(reply.integer, 2);
	EXPECT_EQ(c.nodes[0].count("EVAL") + c.nodes[2].count("EVAL"), 4) << "cached since";
}

TEST(Router, RoutesAroundANodeThatFailedOver)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {1, 0}), c.connector());
	std::string key = c.key_on(1, "f");
	store->execute({set(key, "1")});
	c.fail_over(1, 2);
	auto r = store->execute({incr(key), incr(c.key_on(0, "g"))});
	EXPECT_EQ(r[0].integer, 2);
	EXPECT_EQ(r[1].integer, 1);
	EXPECT_EQ(c.cluster_slots_calls, 2) << "the map came from the other seed";
	EXPECT_EQ(store->describe(), "redis-cluster of 2 masters (10.0.0.1:7000, 10.0.0.3:7000)");
}

TEST(Router, UnreachableNodeWithoutFailoverIsStoreUnavailable)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {0}), c.connector());
	std::string key = c.key_on(2, "x");
	store->execute({set(key, "1")});
	c.nodes[2].reachable = false;
	EXPECT_EQ(unavailable_reason(*store, {get(c.key_on(0, "y")), get(key)}), "redis 10.0.0.3:7000: connection refused")
		<< "the map from another node still names it, and a new connection is refused";
	EXPECT_EQ(c.cluster_slots_calls, 2) << "it looked for a failover once";
	EXPECT_EQ(unavailable_reason(*store, {get(key)}), "redis 10.0.0.3:7000: connection refused");
	EXPECT_EQ(c.cluster_slots_calls, 3);
	c.nodes[2].reachable = true;
	EXPECT_EQ(store->execute({get(key)}).at(0).str, "1") << "and reconnects when the node is back";
}

TEST(Router, ReconnectsToANodeThatRestarted)
{
	FakeCluster c(3);
	auto store = make_cluster_store(seeds(c, {0}), c.connector());
	Script s = make_script("return redis.call('INCR', KEYS[1])");
	std::string key = c.key_on(2, "x");
	EXPECT_EQ(store->execute({eval_command(s, {key}, {})}).at(0).integer, 1);
	c.restart(2);
	auto r = store->execute({eval_command(s, {key}, {}), get(c.key_on(1, "y"))});
	EXPECT_EQ(r[0].integer, 1) << "on a new connection, as EVAL: the node lost its data and scripts";
	EXPECT_EQ(r[1].type, Reply::Type::nil);
	EXPECT_EQ(c.cluster_slots_calls, 2) << "it looked for a failover first";
	EXPECT_EQ(c.nodes[2].count("EVAL"), 2);
}

TEST(Router, NoSeedAnsweringIsStoreUnavailableNamingThem)
{
	FakeCluster c(2);
	c.nodes[0].reachable = c.nodes[1].reachable = false;
	auto store = make_cluster_store(seeds(c, {0, 1}), c.connector());
	EXPECT_EQ(store->describe(), "redis-cluster (not reached yet; seeds 10.0.0.1:7000, 10.0.0.2:7000)");
	EXPECT_EQ(unavailable_reason(*store, {cmd({"PING"})}),
		  "redis-cluster: no node gave the slot map (redis 10.0.0.1:7000: connection refused; "
		  "redis 10.0.0.2:7000: connection refused)");
	c.nodes[1].reachable = true;
	EXPECT_EQ(store->execute({cmd({"PING"})}).at(0).str, "PONG");
}

TEST(Router, ANodeThatIsNoClusterIsStoreUnavailable)
{
	FakeCluster c(1);
	StoreOptions o = seeds(c, {0});
	Connector plain = [&](const Endpoint &) -> std::unique_ptr<Connection> {
		class NotCluster : public Connection {
			std::vector<Reply> pipeline(const std::vector<std::vector<std::string>> &cmds) override
			{
				return std::vector<Reply>(cmds.size(),
							  error("ERR This instance has cluster support disabled"));
			}
		};
		return std::make_unique<NotCluster>();
	};
	auto store = make_cluster_store(o, plain);
	EXPECT_EQ(unavailable_reason(*store, {cmd({"PING"})}),
		  "redis-cluster: no node gave the slot map (redis 10.0.0.1:7000: CLUSTER SLOTS: ERR This instance "
		  "has cluster support disabled)");
}

TEST(Router, EmptyBatchSendsNothing)
{
	FakeCluster c(2);
	auto store = make_cluster_store(seeds(c, {0}), c.connector());
	EXPECT_TRUE(store->execute({}).empty());
	EXPECT_EQ(c.connects, 0);
}

// With a password, the router connects only to the seeds: the masters the
// slot map names beyond them, and redirections to them, get nothing.
TEST(Router, WithAPasswordOnlyTheNamedNodesAreConnectedTo)
{
	FakeCluster c(3);
	StoreOptions o = seeds(c, {0});
	o.password = "pw";
	auto store = make_cluster_store(o, c.connector());
	std::string reason = unavailable_reason(*store, {incr(c.key_on(1, "a")), incr(c.key_on(0, "b"))});
	EXPECT_EQ(reason, unnamed_node_reason(c.nodes[1].endpoint));
	EXPECT_EQ(c.nodes[1].received.size(), 0u);
	EXPECT_EQ(c.nodes[2].received.size(), 0u);
	EXPECT_EQ(c.connects, 1) << "the seed alone";

	// A MOVED from the seed to a node not named: refused too.
	FakeCluster d(2);
	StoreOptions both = seeds(d, {0});
	both.password = "pw";
	d.nodes[0].moved_lie[key_slot("{x}")] = 1;
	d.owner[key_slot("{x}")] = 0;
	auto lied_to = make_cluster_store(both, d.connector());
	EXPECT_EQ(unavailable_reason(*lied_to, {incr("{x}")}), unnamed_node_reason(d.nodes[1].endpoint));
	EXPECT_EQ(d.nodes[1].received.size(), 0u);

	StoreOptions all = seeds(c, {0, 1, 2});
	all.password = "pw";
	auto named = make_cluster_store(all, c.connector());
	EXPECT_EQ(named->execute({incr(c.key_on(1, "a")), incr(c.key_on(2, "b"))}).at(1).integer, 1);
	EXPECT_TRUE(may_connect(all, c.nodes[2].endpoint));
	EXPECT_FALSE(may_connect(o, c.nodes[2].endpoint));
	EXPECT_FALSE(may_connect(o, Endpoint{"10.0.0.1", 7001})) << "the host and the port";
	StoreOptions open = seeds(c, {0});
	EXPECT_TRUE(may_connect(open, c.nodes[2].endpoint)) << "no password: nothing secret to send";
}

} // namespace

// What the store's numbers are read as: a reference built another way (a
// grammar and strtod) decides each generated text, and parse_store_number
// must agree: decimal, finite, nothing before or after.
namespace {

std::optional<double> reference_number(const std::string &text)
{
	static const std::regex grammar("-?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?");
	if (!std::regex_match(text, grammar))
		return std::nullopt;
	double v = std::strtod(text.c_str(), nullptr);
	if (!std::isfinite(v))
		return std::nullopt;
	// Underflow to zero of a non-zero mantissa is out of range, not 0.
	std::string mantissa = text.substr(0, text.find_first_of("eE"));
	if (v == 0 && mantissa.find_first_of("123456789") != std::string::npos)
		return std::nullopt;
	return v;
}

} // namespace

TEST(StoreNumber, AgreesWithAReferenceOnGeneratedTexts)
{
	std::mt19937 rng(4);
	const std::string alphabet = "0123456789.eE+- nailfx";
	std::uniform_int_distribution<size_t> length(0, 9), letter(0, alphabet.size() - 1);
	int accepted = 0;
	for (int i = 0; i < 200000; i++) {
		std::string text;
		for (size_t n = length(rng); n > 0; n--)
			text += alphabet[letter(rng)];
		std::optional<double> got = parse_store_number(text), want = reference_number(text);
		ASSERT_EQ(got.has_value(), want.has_value()) << "'" << text << "'";
		if (got) {
			ASSERT_EQ(*got, *want) << "'" << text << "'";
			accepted++;
		}
	}
	EXPECT_GT(accepted, 1000) << "the generator reaches numbers";
	for (const char *never : {"nan", "-nan", "NaN", "inf", "-inf", "Infinity", "+1", " 1", "1 ", "1\n", "0x10",
				  "1e999", "-1e999", "1e-999", "", "1,5", "1e", "e1", "."})
		EXPECT_FALSE(parse_store_number(never)) << never;
}

TEST(StoreNumber, EveryFiniteDoubleAsTheScriptsWriteItReadsBackExactly)
{
	std::mt19937_64 rng(8);
	for (int i = 0; i < 200000; i++) {
		uint64_t bits = rng();
		double v;
		std::memcpy(&v, &bits, sizeof(v));
		char text[40];
		std::snprintf(text, sizeof(text), "%.17g", v);
		std::optional<double> got = parse_store_number(text);
		if (!std::isfinite(v)) {
			ASSERT_FALSE(got) << text;
			continue;
		}
		ASSERT_TRUE(got) << text;
		ASSERT_EQ(std::memcmp(&*got, &v, sizeof(v)), 0) << text;
	}
}

TEST(StoreNumber, HostCountsAreDigitsUpToTheBound)
{
	std::mt19937 rng(5);
	std::uniform_int_distribution<long long> count(-5, 3LL * MAX_HOSTS);
	for (int i = 0; i < 20000; i++) {
		long long n = i < 3 ? (i == 0 ? 0 : i == 1 ? MAX_HOSTS : MAX_HOSTS + 1) : count(rng);
		std::optional<unsigned> got = parse_host_count(std::to_string(n));
		ASSERT_EQ(got.has_value(), n >= 0 && n <= MAX_HOSTS) << n;
		if (got) {
			ASSERT_EQ(*got, unsigned(n));
		}
	}
	for (const char *bad : {"", "1.0", "1e3", "+3", " 3", "3 ", "nan", "4294967297", "-0"})
		EXPECT_FALSE(parse_host_count(bad)) << bad;
}

// A reply's grants: generated values of every form; a reply is accepted only
// if every share lies in [0, rate], every use is finite and not negative and
// every count is within bounds, and what is accepted is what was sent.
TEST(StoreNumber, ShareRepliesOutOfBoundsAreRefusedWhole)
{
	std::mt19937 rng(6);
	const std::vector<std::string> values = {"0", "-0", "50", "49.999999999999993", "50.000000000000007",
						 "-1e-300", "1e300", "nan", "inf", "-inf", "12", "1e1", "", "7x"};
	std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
	std::uniform_int_distribution<int> buckets(1, 3), hosts(-1, 3);
	const double rate = 50;
	for (int i = 0; i < 20000; i++) {
		Reply reply{Reply::Type::array, 0, {}, {}};
		int n = buckets(rng);
		bool valid = true;
		std::vector<double> shares;
		for (int b = 0; b < n; b++) {
			std::string share = values[pick(rng)], used = values[pick(rng)];
			int h = hosts(rng);
			std::optional<double> s = reference_number(share), u = reference_number(used);
			valid = valid && s && *s >= 0 && *s <= rate && u && *u >= 0 && h >= 0;
			shares.push_back(s.value_or(-1));
			for (const std::string &e : {share, used, std::to_string(h)})
				reply.elements.push_back(Reply{Reply::Type::string, 0, e, {}});
		}
		if (!valid) {
			ASSERT_THROW(parse_share_reply(reply, size_t(n), rate), Error);
			continue;
		}
		std::vector<BucketGrant> grants = parse_share_reply(reply, size_t(n), rate);
		for (int b = 0; b < n; b++)
			ASSERT_EQ(grants[b].share, shares[b]);
	}
}

// --redis-prefix: 1 to 64 of [A-Za-z0-9._-]. The property that rule serves:
// for any two accepted prefixes, one's ACL key patterns (~{P:* and
// ~{P}:hosts, matched as Redis matches globs) cover none of the other's keys.
namespace {

/// Redis's glob (stringmatchlen): * ? [abc] [^a] [a-z] and \ escapes.
bool glob(const char *p, const char *s)
{
	for (; *p; p++) {
		switch (*p) {
		case '*':
			while (p[1] == '*')
				p++;
			if (!p[1])
				return true;
			for (; *s; s++)
				if (glob(p + 1, s))
					return true;
			return glob(p + 1, s);
		case '?':
			if (!*s)
				return false;
			s++;
			break;
		case '[': {
			p++;
			bool negate = *p == '^';
			if (negate)
				p++;
			bool match = false;
			for (; *p && *p != ']'; p++) {
				if (*p == '\\' && p[1]) {
					p++;
					match |= *p == *s;
				} else if (p[1] == '-' && p[2] && p[2] != ']') {
					match |= *s >= p[0] && *s <= p[2];
					p += 2;
				} else {
					match |= *p == *s;
				}
			}
			if (!*p)
				p--;
			if (match == negate || !*s)
				return false;
			s++;
			break;
		}
		case '\\':
			if (p[1])
				p++;
			[[fallthrough]];
		default:
			if (*p != *s)
				return false;
			s++;
		}
	}
	return !*s;
}

bool prefix_accepted(const std::string &p)
{
	try {
		check_prefix(p);
		return true;
	} catch (const Error &) {
		return false;
	}
}

bool covers(const std::string &p, const std::string &key)
{
	return glob(("{" + p + ":*").c_str(), key.c_str()) || glob(("{" + p + "}:hosts").c_str(), key.c_str());
}

} // namespace

TEST(StorePrefix, AcceptedPrefixesPatternsCoverNoOtherPrefixsKeys)
{
	std::mt19937 rng(9);
	const std::string alphabet = "ab-_.:*?[]\\{}^ \x01";
	std::uniform_int_distribution<size_t> length(0, 5), letter(0, alphabet.size() - 1);
	std::vector<std::string> accepted, refused;
	for (int i = 0; i < 20000; i++) {
		std::string p;
		for (size_t n = length(rng); n > 0; n--)
			p += alphabet[letter(rng)];
		bool ok = !p.empty() && p.find_first_not_of("ab-_.") == std::string::npos;
		ASSERT_EQ(prefix_accepted(p), ok) << "'" << p << "'";
		(ok ? accepted : refused).push_back(p);
	}
	std::sort(accepted.begin(), accepted.end());
	accepted.erase(std::unique(accepted.begin(), accepted.end()), accepted.end());
	ASSERT_GT(accepted.size(), 100u);
	for (const auto &p : accepted)
		for (const auto &q : accepted) {
			if (p == q)
				continue;
			for (const std::string &key : {bucket_key(q, "web", "10.0.0.1/32"), bucket_key(q, ":x", "::/0"),
						       hosts_key(q)})
				ASSERT_FALSE(covers(p, key)) << p << " covers " << key;
		}
	// What the rule is for: a refused prefix's keys would fall under an
	// accepted one's patterns (a ':' extends a prefix, a glob widens it).
	EXPECT_TRUE(covers("a", bucket_key("a:b", "web", "10.0.0.1/32")));
	EXPECT_TRUE(covers("a*", bucket_key("ab", "web", "10.0.0.1/32")));
	EXPECT_TRUE(covers("?", hosts_key("b")));
	EXPECT_TRUE(prefix_accepted(std::string(MAX_PREFIX_LENGTH, 'p')));
	EXPECT_FALSE(prefix_accepted(std::string(MAX_PREFIX_LENGTH + 1, 'p')));
	EXPECT_TRUE(prefix_accepted("Edge-1_eu.west"));
}
