// SPDX-License-Identifier: GPL-2.0-only
#include "redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace sluice::test {

namespace {

using namespace std::chrono_literals;

/// Binds 127.0.0.1:port (0: any) and returns the port, or 0 if it is taken.
uint16_t bind_probe(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	sockaddr_in addr{};
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons(port);
	socklen_t len = sizeof(addr);
	uint16_t got = 0;
	if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0 &&
	    getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
		got = ntohs(addr.sin_port);
	close(fd);
	return got;
}

/// A port free now; for a cluster node, its bus port (+10000) too. Another
/// process may take it before the server binds it: start() then fails and
/// the caller picks another.
uint16_t free_port(bool with_bus)
{
	for (int attempt = 0; attempt < 100; attempt++) {
		uint16_t port = bind_probe(0);
		if (port == 0)
			continue;
		if (!with_bus || (port <= 65535 - 10000 && bind_probe(static_cast<uint16_t>(port + 10000))))
			return port;
	}
	throw std::runtime_error("no free port pair on 127.0.0.1");
}

struct ContextFree {
	void operator()(redisContext *c) const { redisFree(c); }
};
struct ReplyFree {
	void operator()(void *r) const { freeReplyObject(r); }
};

RedisReply copy(const redisReply &r)
{
	RedisReply out;
	switch (r.type) {
	case REDIS_REPLY_STRING:
		out.type = RedisReply::Type::string;
		out.str.assign(r.str, r.len);
		break;
	case REDIS_REPLY_STATUS:
		out.type = RedisReply::Type::status;
		out.str.assign(r.str, r.len);
		break;
	case REDIS_REPLY_ERROR:
		out.type = RedisReply::Type::error;
		out.str.assign(r.str, r.len);
		break;
	case REDIS_REPLY_INTEGER:
		out.type = RedisReply::Type::integer;
		out.integer = r.integer;
		break;
	case REDIS_REPLY_ARRAY:
		out.type = RedisReply::Type::array;
		for (size_t i = 0; i < r.elements; i++)
			out.elements.push_back(copy(*r.element[i]));
		break;
	default:
		break;
	}
	return out;
}

/// One command on a new connection to 127.0.0.1:port; throws if it cannot be sent.
RedisReply call(uint16_t port, const std::string &password, const std::vector<std::string> &args,
		std::chrono::milliseconds timeout = 5000ms)
{
	timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
	std::unique_ptr<redisContext, ContextFree> c(redisConnectWithTimeout("127.0.0.1", port, tv));
	std::string where = "redis 127.0.0.1:" + std::to_string(port);
	if (!c || c->err)
		throw std::runtime_error(where + ": " + (c ? c->errstr : "out of memory"));
	redisSetTimeout(c.get(), tv);
	auto send = [&](const std::vector<std::string> &cmd) {
		std::vector<const char *> argv;
		std::vector<size_t> lens;
		for (const auto &a : cmd) {
			argv.push_back(a.data());
			lens.push_back(a.size());
		}
		std::unique_ptr<void, ReplyFree> r(
			redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data()));
		if (!r)
			throw std::runtime_error(where + ": " + cmd[0] + ": " + c->errstr);
		return copy(*static_cast<redisReply *>(r.get()));
	};
	if (!password.empty()) {
		RedisReply auth = send({"AUTH", password});
		if (auth.type == RedisReply::Type::error)
			throw std::runtime_error(where + ": AUTH: " + auth.str);
	}
	return send(args);
}

std::string log_tail(const std::string &dir)
{
	std::ifstream in(dir + "/redis.log");
	std::string line, tail;
	std::vector<std::string> lines;
	while (std::getline(in, line))
		lines.push_back(line);
	for (size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); i++)
		tail += "\n  " + lines[i];
	return tail;
}

/// "field:value" of an INFO-style text.
std::string info_field(const std::string &text, const std::string &field)
{
	std::istringstream in(text);
	for (std::string line; std::getline(in, line);) {
		if (!line.empty() && line.back() == '\r')
			line.pop_back();
		if (line.rfind(field + ":", 0) == 0)
			return line.substr(field.size() + 1);
	}
	return {};
}

} // namespace

RedisServer::RedisServer(RedisServerOptions options) : options_(std::move(options))
{
	const char *tmp = std::getenv("TMPDIR");
	std::string base = (tmp && *tmp ? tmp : "/tmp");
	std::string pattern = std::filesystem::absolute(base + "/sluice-redis-XXXXXX");
	if (!mkdtemp(pattern.data()))
		throw std::runtime_error("cannot make a directory for redis-server under " + base);
	dir_ = pattern;
	// The destructor does not run if the constructor throws.
	try {
		for (int attempt = 0; attempt < 10; attempt++) {
			port_ = free_port(options_.cluster);
			if (start())
				return;
		}
		throw std::runtime_error("redis-server did not start:" + log_tail(dir_));
	} catch (...) {
		std::error_code ignored;
		std::filesystem::remove_all(dir_, ignored);
		throw;
	}
}

RedisServer::~RedisServer()
{
	kill();
	std::error_code ignored;
	std::filesystem::remove_all(dir_, ignored);
}

std::string RedisServer::endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

bool RedisServer::start()
{
	std::vector<std::string> args{"redis-server",
				      "--bind", "127.0.0.1",
				      "--port", std::to_string(port_),
				      "--dir", dir_,
				      "--logfile", dir_ + "/redis.log",
				      "--daemonize", "no",
				      "--save", "",
				      "--appendonly", "no"};
	if (!options_.password.empty())
		args.insert(args.end(), {"--requirepass", options_.password, "--masterauth", options_.password});
	if (options_.cluster)
		args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file", dir_ + "/nodes.conf",
					 "--cluster-node-timeout", "5000"});
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		throw std::runtime_error("fork failed");
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		close_range(3, ~0U, 0);
		std::vector<char *> argv;
		for (auto &a : args)
			argv.push_back(a.data());
		argv.push_back(nullptr);
		execvp(argv[0], argv.data());
		_exit(127);
	}
	pid_ = pid;

	auto deadline = std::chrono::steady_clock::now() + 10s;
	while (std::chrono::steady_clock::now() < deadline) {
		int status = 0;
		if (waitpid(pid_, &status, WNOHANG) == pid_) {
			pid_ = -1;
			return false;
		}
		try {
			// NOAUTH means it is up, too.
			RedisReply r = call(port_, {}, {"PING"}, 200ms);
			if (r.str == "PONG" || r.str.rfind("NOAUTH", 0) == 0)
				return true;
		} catch (const std::runtime_error &) {
		}
		std::this_thread::sleep_for(10ms);
	}
	kill();
	throw std::runtime_error("redis-server on port " + std::to_string(port_) + " did not answer PING:" +
				 log_tail(dir_));
}

void RedisServer::stop()
{
	if (pid_ <= 0)
		return;
	::kill(pid_, SIGCONT);
	::kill(pid_, SIGTERM);
	for (int i = 0; i < 500; i++) {
		if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
			pid_ = -1;
			return;
		}
		std::this_thread::sleep_for(10ms);
	}
	kill();
}

void RedisServer::kill()
{
	if (pid_ <= 0)
		return;
	::kill(pid_, SIGKILL);
	waitpid(pid_, nullptr, 0);
	pid_ = -1;
}

void RedisServer::restart()
{
	kill();
	if (!start())
		throw std::runtime_error("redis-server could not start again on port " + std::to_string(port_) + ":" +
					 log_tail(dir_));
}

void RedisServer::freeze()
{
	if (pid_ > 0)
		::kill(pid_, SIGSTOP);
}

void RedisServer::thaw()
{
	if (pid_ > 0)
		::kill(pid_, SIGCONT);
}

RedisReply RedisServer::command(const std::vector<std::string> &args) const
{
	return call(port_, options_.password, args);
}

RedisReply RedisServer::checked(const std::vector<std::string> &args) const
{
	RedisReply r = command(args);
	if (r.type == RedisReply::Type::error)
		throw std::runtime_error(endpoint() + ": " + args.at(0) + (args.size() > 1 ? " " + args[1] : "") +
					 ": " + r.str);
	return r;
}

RedisCluster::RedisCluster(int masters, std::string password) : password_(std::move(password))
{
	for (int i = 0; i < masters; i++)
		nodes_.push_back(std::make_unique<RedisServer>(RedisServerOptions{password_, true}));
	// Slots in even ranges, as redis-cli --cluster create deals them; distinct
	// config epochs, so that no collision has to be resolved by gossip.
	for (int i = 0; i < masters; i++) {
		int first = 16384 * i / masters, last = 16384 * (i + 1) / masters - 1;
		RedisServer &n = *nodes_[i];
		n.checked({"CLUSTER", "ADDSLOTSRANGE", std::to_string(first), std::to_string(last)});
		n.checked({"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
		ids_.push_back(n.checked({"CLUSTER", "MYID"}).str);
	}
	for (int i = 1; i < masters; i++)
		nodes_[0]->checked({"CLUSTER", "MEET", "127.0.0.1", std::to_string(nodes_[i]->port())});
	wait_until_ok();
}

std::vector<std::string> RedisCluster::seeds() const
{
	std::vector<std::string> out;
	for (const auto &n : nodes_)
		out.push_back(n->endpoint());
	return out;
}

void RedisCluster::wait_until_ok() const
{
	auto deadline = std::chrono::steady_clock::now() + 15s;
	std::string last;
	while (std::chrono::steady_clock::now() < deadline) {
		bool ok = true;
		for (const auto &n : nodes_) {
			if (!n->running())
				continue;
			try {
				std::string info = n->checked({"CLUSTER", "INFO"}).str;
				if (info_field(info, "cluster_state") != "ok" ||
				    info_field(info, "cluster_known_nodes") != std::to_string(nodes_.size())) {
					ok = false;
					last = n->endpoint() + ": cluster_state:" + info_field(info, "cluster_state") +
					       " cluster_known_nodes:" + info_field(info, "cluster_known_nodes");
				}
			} catch (const std::runtime_error &e) {
				ok = false;
				last = e.what();
			}
		}
		if (ok)
			return;
		std::this_thread::sleep_for(20ms);
	}
	throw std::runtime_error("the redis cluster is not ok: " + last);
}

int RedisCluster::owner_of(uint16_t slot) const
{
	for (const auto &n : nodes_) {
		if (!n->running())
			continue;
		RedisReply slots = n->checked({"CLUSTER", "SLOTS"});
		for (const auto &range : slots.elements) {
			if (slot < range.elements.at(0).integer || slot > range.elements.at(1).integer)
				continue;
			long long port = range.elements.at(2).elements.at(1).integer;
			for (size_t i = 0; i < nodes_.size(); i++)
				if (nodes_[i]->port() == port)
					return static_cast<int>(i);
		}
		throw std::runtime_error(n->endpoint() + " knows no owner of slot " + std::to_string(slot));
	}
	throw std::runtime_error("no cluster node is running");
}

void RedisCluster::begin_migration(uint16_t slot, int to)
{
	int from = owner_of(slot);
	if (from == to)
		throw std::runtime_error("slot " + std::to_string(slot) + " is on node " + std::to_string(to) + " already");
	// The importing side first: once the owner says MIGRATING and answers
	// ASK, the node it sends clients to must accept them.
	std::string s = std::to_string(slot);
	nodes_[to]->checked({"CLUSTER", "SETSLOT", s, "IMPORTING", ids_[from]});
	nodes_[from]->checked({"CLUSTER", "SETSLOT", s, "MIGRATING", ids_[to]});
	migrations_[slot] = Migration{from, to};
}

size_t RedisCluster::migrate_keys(uint16_t slot, size_t count)
{
	const Migration &m = migrations_.at(slot);
	RedisServer &from = *nodes_[m.from];
	RedisReply keys = from.checked({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), std::to_string(count)});
	if (keys.elements.empty())
		return 0;
	std::vector<std::string> migrate{"MIGRATE", "127.0.0.1", std::to_string(nodes_[m.to]->port()), "", "0", "5000"};
	if (!password_.empty())
		migrate.insert(migrate.end(), {"AUTH", password_});
	migrate.push_back("KEYS");
	for (const auto &k : keys.elements)
		migrate.push_back(k.str);
	from.checked(migrate);
	return keys.elements.size();
}

void RedisCluster::finish_migration(uint16_t slot)
{
	const Migration m = migrations_.at(slot);
	while (migrate_keys(slot, 100) > 0) {
	}
	// The new owner first, then the old (which then stops answering ASK and
	// answers MOVED), then the others, as the cluster specification says.
	std::string s = std::to_string(slot);
	nodes_[m.to]->checked({"CLUSTER", "SETSLOT", s, "NODE", ids_[m.to]});
	nodes_[m.from]->checked({"CLUSTER", "SETSLOT", s, "NODE", ids_[m.to]});
	for (int i = 0; i < size(); i++)
		if (i != m.from && i != m.to && nodes_[i]->running())
			nodes_[i]->checked({"CLUSTER", "SETSLOT", s, "NODE", ids_[m.to]});
	migrations_.erase(slot);
}

void RedisCluster::migrate_slot(uint16_t slot, int to)
{
	begin_migration(slot, to);
	finish_migration(slot);
}

void RedisCluster::kill(int i) { nodes_.at(i)->kill(); }

void RedisCluster::restart(int i)
{
	nodes_.at(i)->restart();
	wait_until_ok();
}

} // namespace sluice::test
