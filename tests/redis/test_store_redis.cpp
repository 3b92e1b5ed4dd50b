// SPDX-License-Identifier: GPL-2.0-only
// The store against real servers: Debian's redis-server alone, and a Redis
// Cluster of three masters, each started by the test on free ports of
// 127.0.0.1 and killed (with its directory) when the test ends.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "redis_server.h"
#include "store.h"
#include "store_testing.h"
#include "temp_file.h"

using namespace sluice;
using namespace sluice::cluster;
using sluice::test::RedisCluster;
using sluice::test::RedisReply;
using sluice::test::RedisServer;
using sluice::test::RedisServerOptions;

namespace {

/// What the store sent and what it was answered, counted over all nodes.
struct Traffic {
	int cluster_slots = 0; ///< CLUSTER SLOTS sent
	int moved = 0, ask = 0, noscript = 0, other_errors = 0;
	int evals = 0;
	std::map<std::string, int> commands_to; ///< by endpoint: commands sent there
};

/// hiredis_connector, with every pipeline counted in a Traffic.
Connector recording(Connector inner, Traffic &traffic)
{
	class Recording : public Connection {
	public:
		Recording(std::unique_ptr<Connection> inner, Traffic &traffic, std::string endpoint)
			: inner_(std::move(inner)), traffic_(traffic), endpoint_(std::move(endpoint))
		{
		}
		std::vector<Reply> pipeline(const std::vector<std::vector<std::string>> &commands) override
		{
			for (const auto &c : commands) {
				traffic_.commands_to[endpoint_]++;
				traffic_.cluster_slots += c.size() == 2 && c[0] == "CLUSTER" && c[1] == "SLOTS";
				traffic_.evals += c[0] == "EVAL";
			}
			std::vector<Reply> replies = inner_->pipeline(commands);
			for (const auto &r : replies) {
				if (!r.is_error())
					continue;
				std::string code = r.str.substr(0, r.str.find(' '));
				(code == "MOVED" ? traffic_.moved
				 : code == "ASK" ? traffic_.ask
				 : code == "NOSCRIPT" ? traffic_.noscript
						      : traffic_.other_errors)++;
			}
			return replies;
		}

	private:
		std::unique_ptr<Connection> inner_;
		Traffic &traffic_;
		std::string endpoint_;
	};
	return [inner = std::move(inner), &traffic](const Endpoint &ep) -> std::unique_ptr<Connection> {
		return std::make_unique<Recording>(inner(ep), traffic, ep.str());
	};
}

StoreOptions options_for(const std::vector<std::string> &endpoints, std::string password = {})
{
	StoreOptions o;
	for (const auto &e : endpoints)
		o.seeds.push_back(parse_endpoint(e));
	o.password = std::move(password);
	return o;
}

Command cmd(std::vector<std::string> args, std::string route_key = {})
{
	return Command{std::move(args), std::move(route_key), nullptr};
}
Command set(const std::string &key, const std::string &value) { return cmd({"SET", key, value}, key); }
Command get(const std::string &key) { return cmd({"GET", key}, key); }
Command incr(const std::string &key) { return cmd({"INCR", key}, key); }

using sluice::test::unavailable_reason;

using sluice::test::TempFile;

TEST(RedisSingle, RepliesInBatchOrderBinarySafe)
{
	RedisServer server;
	StoreOptions o = options_for({server.endpoint()});
	auto store = make_single_store(o, hiredis_connector(o));
	EXPECT_EQ(store->describe(), "redis " + server.endpoint());
	std::string binary("a\0b\r\nc", 6);
	auto r = store->execute({set("k", binary), get("k"), incr("n"), incr("n"), get("missing"), cmd({"NOSUCH"}),
				 cmd({"MGET", "k", "missing"}, "k")});
	ASSERT_EQ(r.size(), 7u);
	EXPECT_EQ(r[0].type, Reply::Type::status);
	EXPECT_EQ(r[0].str, "OK");
	EXPECT_EQ(r[1].str, binary);
	EXPECT_EQ(r[3].type, Reply::Type::integer);
	EXPECT_EQ(r[3].integer, 2);
	EXPECT_EQ(r[4].type, Reply::Type::nil);
	EXPECT_TRUE(r[5].is_error()) << "a refused command is a reply, not an exception";
	EXPECT_EQ(r[5].str.rfind("ERR unknown command", 0), 0u) << r[5].str;
	ASSERT_EQ(r[6].elements.size(), 2u);
	EXPECT_EQ(r[6].elements[0].str, binary);
	EXPECT_EQ(r[6].elements[1].type, Reply::Type::nil);
}

TEST(RedisSingle, EvalshaFallsBackToEvalAfterScriptFlush)
{
	RedisServer server;
	Traffic traffic;
	StoreOptions o = options_for({server.endpoint()});
	auto store = make_single_store(o, recording(hiredis_connector(o), traffic));
	Script s = make_script("return redis.call('INCRBY', KEYS[1], ARGV[1])");
	EXPECT_EQ(server.checked({"SCRIPT", "LOAD", s.body}).str, s.sha1) << "our SHA-1 is the server's";
	server.checked({"SCRIPT", "FLUSH"});

	auto r = store->execute({eval_command(s, {"n"}, {"5"}), eval_command(s, {"n"}, {"2"})});
	EXPECT_EQ(r[0].integer, 5);
	EXPECT_EQ(r[1].integer, 7);
	EXPECT_EQ(traffic.noscript, 2);
	EXPECT_EQ(traffic.evals, 2);
	EXPECT_EQ(server.checked({"SCRIPT", "EXISTS", s.sha1}).elements.at(0).integer, 1) << "EVAL cached it";

	r = store->execute({eval_command(s, {"n"}, {"1"})});
	EXPECT_EQ(r[0].integer, 8);
	EXPECT_EQ(traffic.evals, 2) << "EVALSHA found it";

	server.checked({"SCRIPT", "FLUSH"});
	r = store->execute({eval_command(s, {"n"}, {"1"})});
	EXPECT_EQ(r[0].integer, 9);
	EXPECT_EQ(traffic.evals, 3);
	EXPECT_EQ(traffic.other_errors, 0);
}

TEST(RedisSingle, AuthWithAPasswordFile)
{
	RedisServer server(RedisServerOptions{"correct horse battery"});
	TempFile file("correct horse battery\n");
	StoreOptions o = options_for({server.endpoint()}, read_password_file(file.path()));
	auto store = make_single_store(o, hiredis_connector(o));
	auto r = store->execute({set("k", "v"), get("k")});
	EXPECT_EQ(r[1].str, "v");

	StoreOptions acl = o;
	acl.username = "default";
	EXPECT_EQ(make_single_store(acl, hiredis_connector(acl))->execute({get("k")}).at(0).str, "v")
		<< "AUTH user password";

	StoreOptions wrong = options_for({server.endpoint()}, read_password_file(TempFile("battery staple\n").path()));
	auto refused = make_single_store(wrong, hiredis_connector(wrong));
	EXPECT_EQ(unavailable_reason(*refused, {get("k")}),
		  "redis " + server.endpoint() +
			  ": AUTH refused: WRONGPASS invalid username-password pair or user is disabled.");

	StoreOptions none = options_for({server.endpoint()});
	r = make_single_store(none, hiredis_connector(none))->execute({get("k")});
	EXPECT_EQ(r[0].str, "NOAUTH Authentication required.") << "no password: the server's refusal is the reply";
}

TEST(RedisSingle, ConnectionRefusedIsStoreUnavailable)
{
	std::string endpoint;
	{
		RedisServer gone;
		endpoint = gone.endpoint();
	}
	StoreOptions o = options_for({endpoint});
	auto store = make_single_store(o, hiredis_connector(o));
	EXPECT_EQ(unavailable_reason(*store, {get("k")}), "redis " + endpoint + ": connection refused");
}

TEST(RedisSingle, SilentServerIsStoreUnavailableAfterTheTimeout)
{
	RedisServer server;
	StoreOptions o = options_for({server.endpoint()});
	o.timeout = std::chrono::milliseconds(200);
	auto store = make_single_store(o, hiredis_connector(o));
	store->execute({set("k", "v")});
	server.freeze();
	auto start = std::chrono::steady_clock::now();
	EXPECT_EQ(unavailable_reason(*store, {get("k")}), "redis " + server.endpoint() + ": no answer within 200 ms");
	auto waited = std::chrono::steady_clock::now() - start;
	EXPECT_GE(waited, std::chrono::milliseconds(150));
	EXPECT_LT(waited, std::chrono::milliseconds(1500));
	server.thaw();
	EXPECT_EQ(store->execute({get("k")}).at(0).str, "v") << "a new connection after the timeout";
}

TEST(RedisSingle, WorksAgainAfterTheServerRestarts)
{
	RedisServer server;
	StoreOptions o = options_for({server.endpoint()});
	auto store = make_single_store(o, hiredis_connector(o));
	store->execute({set("k", "v")});

	server.kill();
	std::string down = unavailable_reason(*store, {get("k")});
	EXPECT_EQ(down.rfind("redis " + server.endpoint() + ": ", 0), 0u) << down;
	EXPECT_EQ(unavailable_reason(*store, {get("k")}), "redis " + server.endpoint() + ": connection refused");
	server.restart();
	EXPECT_EQ(store->execute({set("k", "w"), get("k")}).at(1).str, "w");

	// Killed and back before the store noticed: its connection is dead, the
	// batch fails with a reason, and the next one reconnects.
	server.kill();
	server.restart();
	EXPECT_EQ(unavailable_reason(*store, {get("k")}), "redis " + server.endpoint() +
								   ": the server closed the connection");
	EXPECT_EQ(store->execute({cmd({"PING"})}).at(0).str, "PONG");
}

TEST(RedisSingle, AServerGoneMidWriteDoesNotKillTheProcess)
{
	RedisServer server;
	StoreOptions o = options_for({server.endpoint()});
	o.timeout = std::chrono::milliseconds(1000);
	auto store = make_single_store(o, hiredis_connector(o));
	store->execute({cmd({"PING"})});
	// The old connection is dead: the first write draws a reset, and the
	// writes after it fail with EPIPE, which raises SIGPIPE (default action:
	// terminate) unless the connection keeps it off.
	server.kill();
	server.restart();
	std::vector<Command> batch;
	for (int i = 0; i < 64; i++)
		batch.push_back(set("big" + std::to_string(i), std::string(256 * 1024, 'x')));
	std::string reason = unavailable_reason(*store, batch);
	EXPECT_EQ(reason.rfind("redis " + server.endpoint() + ": ", 0), 0u) << reason;
	EXPECT_EQ(store->execute({cmd({"PING"})}).at(0).str, "PONG");
}

/// Keys "{tagN}name" on every master of the cluster.
std::vector<std::string> tagged_keys(int count, const std::string &name)
{
	std::vector<std::string> keys;
	for (int i = 0; i < count; i++)
		keys.push_back("{tag" + std::to_string(i) + "}" + name);
	return keys;
}

TEST(RedisClusterStore, KeysLandOnEveryMasterAndReadBack)
{
	RedisCluster cluster;
	Traffic traffic;
	StoreOptions o = options_for({cluster.seeds()[1]});
	auto store = make_cluster_store(o, recording(hiredis_connector(o), traffic));
	std::vector<std::string> keys = tagged_keys(300, "k");
	std::vector<Command> writes, reads;
	for (size_t i = 0; i < keys.size(); i++) {
		writes.push_back(set(keys[i], "v" + std::to_string(i)));
		reads.push_back(get(keys[i]));
	}
	for (const auto &r : store->execute(writes))
		ASSERT_EQ(r.str, "OK");
	auto r = store->execute(reads);
	for (size_t i = 0; i < keys.size(); i++)
		EXPECT_EQ(r[i].str, "v" + std::to_string(i)) << keys[i];
	long long total = 0;
	for (int n = 0; n < cluster.size(); n++) {
		long long keys_here = cluster.node(n).checked({"DBSIZE"}).integer;
		EXPECT_GT(keys_here, 50) << cluster.node(n).endpoint();
		total += keys_here;
	}
	EXPECT_EQ(total, 300);
	EXPECT_EQ(traffic.moved + traffic.ask, 0) << "the map was right";
	EXPECT_EQ(traffic.cluster_slots, 1);
	auto seeds = cluster.seeds();
	EXPECT_EQ(store->describe(), "redis-cluster of 3 masters (" + seeds[0] + ", " + seeds[1] + ", " + seeds[2] + ")");
}

TEST(RedisClusterStore, SlotMigratedDuringALoopLosesNoCommand)
{
	RedisCluster cluster;
	Traffic traffic;
	StoreOptions o = options_for(cluster.seeds());
	auto store = make_cluster_store(o, recording(hiredis_connector(o), traffic));
	const std::string tag = "{moving}";
	uint16_t slot = key_slot(tag);
	int from = cluster.owner_of(slot), to = (from + 1) % 3;
	std::vector<std::string> keys;
	for (int i = 0; i < 20; i++)
		keys.push_back(tag + "k" + std::to_string(i));
	std::string elsewhere = "{steady}k";
	ASSERT_NE(key_slot(elsewhere), slot);

	const int rounds = 60;
	for (int round = 0; round < rounds; round++) {
		if (round == 10)
			cluster.begin_migration(slot, to); // no key moved yet: new keys are made on `to` (ASK)
		if (round == 20) {
			ASSERT_EQ(cluster.migrate_keys(slot, 10), 10u); // half the keys move (ASK for those)
		}
		if (round == 30)
			cluster.finish_migration(slot); // MOVED, then a new map
		std::vector<Command> batch;
		for (const auto &k : keys)
			batch.push_back(incr(k));
		batch.push_back(incr(elsewhere));
		batch.push_back(set(tag + "new" + std::to_string(round), "x"));
		auto r = store->execute(batch);
		ASSERT_EQ(r.size(), batch.size());
		for (size_t i = 0; i < keys.size(); i++)
			ASSERT_EQ(r[i].integer, round + 1) << "round " << round << ", " << keys[i] << ": " << r[i].str;
		ASSERT_EQ(r[keys.size()].integer, round + 1);
		ASSERT_EQ(r.back().str, "OK") << "round " << round << ": " << r.back().str;
	}
	EXPECT_GT(traffic.ask, 0);
	EXPECT_GT(traffic.moved, 0);
	EXPECT_EQ(traffic.other_errors, 0);
	EXPECT_EQ(cluster.owner_of(slot), to);
	EXPECT_EQ(cluster.node(to).checked({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}).integer,
		  20 + rounds);
	std::vector<Command> reads;
	for (const auto &k : keys)
		reads.push_back(get(k));
	for (const auto &r : store->execute(reads))
		EXPECT_EQ(r.str, std::to_string(rounds));
}

TEST(RedisClusterStore, MapReloadedAfterMoved)
{
	RedisCluster cluster;
	Traffic traffic;
	StoreOptions o = options_for({cluster.seeds()[0]});
	auto store = make_cluster_store(o, recording(hiredis_connector(o), traffic));
	std::string key = "{relocated}k";
	uint16_t slot = key_slot(key);
	store->execute({set(key, "1")});
	int to = (cluster.owner_of(slot) + 1) % 3;
	cluster.migrate_slot(slot, to);
	std::string new_owner = cluster.node(to).endpoint();

	traffic = Traffic{};
	EXPECT_EQ(store->execute({incr(key)}).at(0).integer, 2);
	EXPECT_EQ(traffic.moved, 1);
	EXPECT_EQ(traffic.cluster_slots, 0) << "the batch followed MOVED without waiting for a new map";

	traffic = Traffic{};
	EXPECT_EQ(store->execute({incr(key)}).at(0).integer, 3);
	EXPECT_EQ(traffic.cluster_slots, 1) << "a new map before the next batch";
	EXPECT_EQ(traffic.moved, 0);
	EXPECT_EQ(traffic.commands_to[new_owner], 1) << "straight to the new owner";

	traffic = Traffic{};
	store->execute({incr(key)});
	EXPECT_EQ(traffic.cluster_slots, 0) << "and only once";
}

TEST(RedisClusterStore, ScriptsAndPasswordOnEveryMaster)
{
	RedisCluster cluster(3, "cluster pass");
	Traffic traffic;
	// With a password, every master is named (the password goes only there).
	StoreOptions o = options_for(cluster.seeds(), "cluster pass");
	auto store = make_cluster_store(o, recording(hiredis_connector(o), traffic));
	Script s = make_script("return redis.call('INCRBY', KEYS[1], ARGV[1])");
	std::vector<Command> batch;
	for (const auto &k : tagged_keys(30, "counter"))
		batch.push_back(eval_command(s, {k}, {"3"}));
	for (const auto &r : store->execute(batch))
		EXPECT_EQ(r.integer, 3) << r.str;
	EXPECT_EQ(traffic.noscript, 30) << "no master knew the script";
	for (int n = 0; n < cluster.size(); n++)
		EXPECT_EQ(cluster.node(n).checked({"SCRIPT", "EXISTS", s.sha1}).elements.at(0).integer, 1);
	traffic = Traffic{};
	for (const auto &r : store->execute(batch))
		EXPECT_EQ(r.integer, 6);
	EXPECT_EQ(traffic.evals, 0);

	StoreOptions wrong = options_for({cluster.seeds()[0]}, "not it");
	auto refused = make_cluster_store(wrong, hiredis_connector(wrong));
	EXPECT_EQ(unavailable_reason(*refused, {cmd({"PING"})}),
		  "redis-cluster: no node gave the slot map (redis " + cluster.seeds()[0] +
			  ": AUTH refused: WRONGPASS invalid username-password pair or user is disabled.)");
}

TEST(RedisClusterStore, NodeRestartedIsReconnectedWithinTheBatch)
{
	RedisCluster cluster;
	Traffic traffic;
	StoreOptions o = options_for(cluster.seeds());
	auto store = make_cluster_store(o, recording(hiredis_connector(o), traffic));
	std::vector<std::string> keys = tagged_keys(30, "r");
	std::vector<Command> writes, reads;
	for (const auto &k : keys) {
		writes.push_back(set(k, "v"));
		reads.push_back(get(k));
	}
	store->execute(writes);
	cluster.restart(1); // without persistence: node 1 comes back empty

	traffic = Traffic{};
	auto r = store->execute(reads);
	int lost = 0;
	for (size_t i = 0; i < keys.size(); i++) {
		bool on_restarted = cluster.owner_of(key_slot(keys[i])) == 1;
		EXPECT_EQ(r[i].type, on_restarted ? Reply::Type::nil : Reply::Type::string) << keys[i];
		lost += on_restarted;
	}
	EXPECT_GT(lost, 0);
	EXPECT_EQ(traffic.cluster_slots, 1) << "it asked for the map once, then reached the node again";
}

} // namespace
