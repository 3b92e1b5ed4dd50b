// SPDX-License-Identifier: GPL-2.0-only
// The shared store the cluster sync talks to: one Redis, or a Redis Cluster
// routed by our own small layer (Debian's hiredis 0.14 has no cluster
// support). The sync loop sees only Store; tests put a fake behind the
// Connection interface the cluster router is built on.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "error.h"

namespace sluice::cluster {

/// A Redis server's address: a host name or IP literal and a TCP port.
struct Endpoint {
	std::string host;
	uint16_t port = 6379;

	std::string str() const; ///< "host:port" ("[v6]:port" for an IPv6 literal)
	bool operator==(const Endpoint &) const = default;
};

/// "HOST:PORT" or "[V6]:PORT"; throws Error with one line saying what is wrong.
Endpoint parse_endpoint(std::string_view text);
/// "HOST:PORT,HOST:PORT,...": at least one.
std::vector<Endpoint> parse_endpoints(std::string_view text);

/// One reply, copied out of hiredis.
struct Reply {
	enum class Type { nil, integer, string, status, error, array };
	Type type = Type::nil;
	long long integer = 0;
	std::string str;             ///< string, status and error replies
	std::vector<Reply> elements; ///< array replies

	bool is_error() const { return type == Type::error; }
};

/// A command: its arguments (binary-safe) and the key whose hash slot routes
/// it in a cluster (empty: any node will do).
struct Command {
	std::vector<std::string> args;
	std::string route_key;
	/// Set by eval_command: the script's body, which a store sends as EVAL in
	/// place of an EVALSHA that met NOSCRIPT. Shared, so that copies of one
	/// command (a batch built from a template) hold one copy of the body.
	std::shared_ptr<const std::string> script_body;
};

/// A Lua script: its body and the SHA-1 that EVALSHA names it by.
struct Script {
	std::string body;
	std::string sha1; ///< lowercase hex, computed from body by make_script
};
Script make_script(std::string body);

/// The SHA-1 of data in lowercase hex (what SCRIPT LOAD answers for a body).
std::string sha1_hex(std::string_view data);

/// EVALSHA of `script` with its keys and arguments, routed by its first key.
/// A store that meets NOSCRIPT (a node that never saw the script, or lost it
/// in a restart or a failover) sends the same call again as EVAL.
Command eval_command(const Script &script, const std::vector<std::string> &keys,
		    const std::vector<std::string> &args);

/// The store could not be reached or did not answer in time: the sync loop
/// goes degraded and retries with backoff. A command the server refused is
/// not this: it comes back as an error Reply.
class StoreUnavailable : public Error {
public:
	using Error::Error;
};

/// How to reach and log in to the store.
struct StoreOptions {
	/// One Redis, or nodes of a cluster. With a password, the only addresses
	/// connected to: a cluster node, a slot map or a redirection (MOVED, ASK)
	/// naming another address is refused, so the password goes nowhere the
	/// operator did not name.
	std::vector<Endpoint> seeds;
	std::chrono::milliseconds timeout{200}; ///< connect, and each reply
	std::string username;         ///< ACL user; empty: AUTH with the password only
	std::string password;         ///< empty: no AUTH
};

/// Text a server sent (an error reply, a host name), fit for one log line:
/// control characters as '?', at most `max` bytes (then "..."). A store
/// that lies cannot write lines of its own into the agent's log or status.
std::string one_line(std::string_view text, size_t max = 200);

/// Whether a connection to `endpoint` may be made: with no password, any;
/// with one, only to an address among the seeds (the host as written there,
/// the same port).
bool may_connect(const StoreOptions &options, const Endpoint &endpoint);
/// The one line a refused connection says.
std::string unnamed_node_reason(const Endpoint &endpoint);

/// Reads the password for AUTH from a file: its first line, without the line
/// end. "USER:PASSWORD" is not split; use StoreOptions::username for ACLs.
/// Throws Error if the file cannot be read or its first line is empty.
std::string read_password_file(const std::string &path);

/// Where the sync loop's commands go.
class Store {
public:
	virtual ~Store() = default;
	/// Sends the batch (pipelined, per node), and returns one reply per
	/// command in the batch's order. Throws StoreUnavailable if a node
	/// cannot be reached or answers too late; the next call reconnects.
	/// A command sent again (redirected, or as EVAL after NOSCRIPT) runs
	/// after the commands that followed it in the batch.
	virtual std::vector<Reply> execute(const std::vector<Command> &batch) = 0;
	/// "redis 127.0.0.1:6379" or "redis-cluster of 3 masters (127.0.0.1:7000, ...)".
	virtual std::string describe() const = 0;
};

/// One connection to one server, as the cluster router sees it: pipelined
/// commands in, one reply each out. Throws StoreUnavailable on a broken or
/// slow connection.
class Connection {
public:
	virtual ~Connection() = default;
	virtual std::vector<Reply> pipeline(const std::vector<std::vector<std::string>> &commands) = 0;
};
/// Opens (and logs in on) a connection to an endpoint; throws StoreUnavailable.
using Connector = std::function<std::unique_ptr<Connection>(const Endpoint &)>;

/// The hiredis connector: TCP with the options' timeout, AUTH if a password is set.
Connector hiredis_connector(const StoreOptions &options);

/// One Redis server (the first seed).
std::unique_ptr<Store> make_single_store(const StoreOptions &options, Connector connector);
/// A Redis Cluster found from its seeds: CLUSTER SLOTS for the slot map,
/// commands grouped per master and pipelined; MOVED updates the map (and a
/// refresh follows), ASK sends ASKING and the command to the importing node,
/// TRYAGAIN and CLUSTERDOWN are retried a few times; redirections are bounded.
std::unique_ptr<Store> make_cluster_store(const StoreOptions &options, Connector connector);

/// How many hash slots a Redis Cluster has.
constexpr uint16_t CLUSTER_SLOTS = 16384;

/// The cluster hash slot of a key (CRC16/XMODEM mod 16384), honouring a
/// {hash tag}: the first non-empty "{...}" section alone is hashed.
uint16_t key_slot(std::string_view key);

} // namespace sluice::cluster
