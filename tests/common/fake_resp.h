// SPDX-License-Identifier: GPL-2.0-only
// A small Redis-protocol server on a free 127.0.0.1 port, for stores that
// lie: it answers each command as the test says, and records every command
// it received (AUTH included), so that a test can tell what reached it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

/// RESP replies written out, for the handler.
namespace resp {
std::string status(const std::string &s);
std::string error(const std::string &s);
std::string integer(long long v);
std::string bulk(const std::string &s);
std::string array(const std::vector<std::string> &encoded);
} // namespace resp

class FakeRespServer {
public:
	/// The handler gets a command's arguments and returns its reply, encoded.
	using Handler = std::function<std::string(const std::vector<std::string> &)>;

	explicit FakeRespServer(Handler handler);
	~FakeRespServer();
	FakeRespServer(const FakeRespServer &) = delete;
	FakeRespServer &operator=(const FakeRespServer &) = delete;

	uint16_t port() const { return port_; }
	/// "127.0.0.1:PORT"
	std::string endpoint() const;
	/// Every command received so far, in order.
	std::vector<std::vector<std::string>> received() const;
	/// Whether any command received holds `word` as an argument (a password).
	bool saw_argument(const std::string &word) const;
	/// Connections accepted so far.
	int connections() const { return connections_; }

private:
	void accept_loop();
	void serve(int fd);

	Handler handler_;
	int listen_fd_ = -1;
	uint16_t port_ = 0;
	std::atomic<bool> stopping_{false};
	std::atomic<int> connections_{0};
	mutable std::mutex mutex_;
	std::vector<std::vector<std::string>> received_;
	std::vector<std::thread> threads_;
	std::thread acceptor_;
};

} // namespace sluice::test
