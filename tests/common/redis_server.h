// SPDX-License-Identifier: GPL-2.0-only
// Real Redis servers for tests: Debian's redis-server, listening on
// 127.0.0.1 only, on a free port, in a temporary directory that goes with it.
// The harness talks to them with hiredis directly, not through the store
// under test.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sluice::test {

/// One reply, as the harness reads it.
struct RedisReply {
	enum class Type { nil, integer, string, status, error, array };
	Type type = Type::nil;
	long long integer = 0;
	std::string str; ///< string, status and error replies
	std::vector<RedisReply> elements;
};

struct RedisServerOptions {
	std::string password; ///< requirepass (and masterauth); empty: none
	bool cluster = false; ///< cluster-enabled; its bus is on port + 10000
};

/// A redis-server process: `--save "" --appendonly no`, bound to 127.0.0.1.
/// The constructor returns once it answers PING; the destructor kills it
/// (SIGKILL) and removes its directory. If the test process dies, the
/// server is killed too (PR_SET_PDEATHSIG).
class RedisServer {
public:
	explicit RedisServer(RedisServerOptions options = {});
	~RedisServer();
	RedisServer(const RedisServer &) = delete;
	RedisServer &operator=(const RedisServer &) = delete;

	uint16_t port() const { return port_; }
	/// "127.0.0.1:PORT"
	std::string endpoint() const;
	const std::string &dir() const { return dir_; }
	bool running() const { return pid_ > 0; }

	/// SIGTERM, and waits for it to exit.
	void stop();
	/// SIGKILL, and waits for it to exit.
	void kill();
	/// Starts it again on the same port with the same options and directory
	/// (a cluster node keeps its identity and slots from nodes.conf).
	void restart();
	/// SIGSTOP: it still accepts connections (the kernel does) but answers nothing.
	void freeze();
	/// SIGCONT after freeze().
	void thaw();

	/// Sends one command on a new connection (after AUTH if there is a
	/// password); throws std::runtime_error if the server cannot be reached.
	RedisReply command(const std::vector<std::string> &args) const;
	/// command(), and throws if the reply is an error.
	RedisReply checked(const std::vector<std::string> &args) const;

private:
	/// Starts the process and waits for PING; false if it exited (port taken).
	bool start();

	RedisServerOptions options_;
	std::string dir_;
	uint16_t port_ = 0;
	pid_t pid_ = -1;
};

/// A Redis Cluster of masters without replicas on 127.0.0.1: slots split in
/// even ranges, joined with CLUSTER MEET, ready (cluster_state:ok on every
/// node) when the constructor returns.
class RedisCluster {
public:
	explicit RedisCluster(int masters = 3, std::string password = {});

	int size() const { return static_cast<int>(nodes_.size()); }
	RedisServer &node(int i) { return *nodes_.at(i); }
	/// "127.0.0.1:PORT" of every node.
	std::vector<std::string> seeds() const;
	/// The index of the node that serves `slot`.
	int owner_of(uint16_t slot) const;

	/// Moves a slot with the real procedure: begin_migration, every key
	/// with MIGRATE, finish_migration.
	void migrate_slot(uint16_t slot, int to);
	/// SETSLOT IMPORTING on `to`, then MIGRATING on the owner: from here the
	/// owner answers ASK for the keys it no longer has.
	void begin_migration(uint16_t slot, int to);
	/// MIGRATEs up to `count` keys of a slot being migrated; how many it moved.
	size_t migrate_keys(uint16_t slot, size_t count);
	/// Migrates the remaining keys and gives the slot to its new owner
	/// (SETSLOT NODE on the new owner, the old one, then the others).
	void finish_migration(uint16_t slot);

	/// Kills node i (SIGKILL).
	void kill(int i);
	/// Restarts node i (same port, same nodes.conf), and waits until every
	/// node says cluster_state:ok.
	void restart(int i);
	/// Waits until every running node says cluster_state:ok and knows
	/// every other; throws after a few seconds.
	void wait_until_ok() const;

private:
	struct Migration {
		int from, to;
	};

	std::string password_;
	std::vector<std::unique_ptr<RedisServer>> nodes_;
	std::vector<std::string> ids_; ///< CLUSTER MYID of each node
	std::map<uint16_t, Migration> migrations_;
};

} // namespace sluice::test
