// SPDX-License-Identifier: GPL-2.0-only
#include "fake_resp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

namespace sluice::test {

namespace resp {
std::string status(const std::string &s) { return "+" + s + "\r\n"; }
std::string error(const std::string &s) { return "-" + s + "\r\n"; }
std::string integer(long long v) { return ":" + std::to_string(v) + "\r\n"; }
std::string bulk(const std::string &s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }
std::string array(const std::vector<std::string> &encoded)
{
	std::string out = "*" + std::to_string(encoded.size()) + "\r\n";
	for (const auto &e : encoded)
		out += e;
	return out;
}
} // namespace resp

FakeRespServer::FakeRespServer(Handler handler) : handler_(std::move(handler))
{
	listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listen_fd_ < 0)
		throw std::runtime_error("fake redis: socket failed");
	sockaddr_in addr{};
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = 0;
	socklen_t len = sizeof(addr);
	if (bind(listen_fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) || listen(listen_fd_, 16) ||
	    getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&addr), &len)) {
		close(listen_fd_);
		throw std::runtime_error("fake redis: cannot listen on 127.0.0.1");
	}
	port_ = ntohs(addr.sin_port);
	acceptor_ = std::thread([this] { accept_loop(); });
}

FakeRespServer::~FakeRespServer()
{
	stopping_ = true;
	acceptor_.join();
	for (auto &t : threads_)
		t.join();
	close(listen_fd_);
}

std::string FakeRespServer::endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

std::vector<std::vector<std::string>> FakeRespServer::received() const
{
	std::lock_guard hold(mutex_);
	return received_;
}

bool FakeRespServer::saw_argument(const std::string &word) const
{
	std::lock_guard hold(mutex_);
	for (const auto &c : received_)
		if (std::find(c.begin(), c.end(), word) != c.end())
			return true;
	return false;
}

void FakeRespServer::accept_loop()
{
	while (!stopping_) {
		pollfd p{listen_fd_, POLLIN, 0};
		if (poll(&p, 1, 50) <= 0)
			continue;
		int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		connections_++;
		threads_.emplace_back([this, fd] { serve(fd); });
	}
}

void FakeRespServer::serve(int fd)
{
	// Reads commands as clients send them: arrays of bulk strings.
	std::string in;
	size_t pos = 0;
	auto line = [&](std::string &out) {
		size_t end = in.find("\r\n", pos);
		if (end == std::string::npos)
			return false;
		out = in.substr(pos, end - pos);
		pos = end + 2;
		return true;
	};
	auto parse = [&](std::vector<std::string> &args) {
		size_t start = pos;
		std::string head;
		if (!line(head) || head.empty() || head[0] != '*') {
			pos = start;
			return false;
		}
		long n = std::stol(head.substr(1));
		for (long i = 0; i < n; i++) {
			std::string size;
			if (!line(size) || size.empty() || size[0] != '$') {
				pos = start;
				return false;
			}
			size_t len = std::stoul(size.substr(1));
			if (in.size() < pos + len + 2) {
				pos = start;
				return false;
			}
			args.push_back(in.substr(pos, len));
			pos += len + 2;
		}
		return true;
	};
	while (!stopping_) {
		pollfd p{fd, POLLIN, 0};
		if (poll(&p, 1, 50) <= 0)
			continue;
		char buf[4096];
		ssize_t got = read(fd, buf, sizeof(buf));
		if (got <= 0)
			break;
		in.append(buf, size_t(got));
		std::vector<std::string> args;
		std::string out;
		while (parse(args)) {
			{
				std::lock_guard hold(mutex_);
				received_.push_back(args);
			}
			out += handler_(args);
			args.clear();
		}
		in.erase(0, pos);
		pos = 0;
		for (size_t sent = 0; sent < out.size();) {
			ssize_t n = write(fd, out.data() + sent, out.size() - sent);
			if (n <= 0)
				break;
			sent += size_t(n);
		}
	}
	close(fd);
}

} // namespace sluice::test
