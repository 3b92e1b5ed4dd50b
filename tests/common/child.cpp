// SPDX-License-Identifier: GPL-2.0-only
#include "child.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "process.h"

namespace sluice::test {

uint16_t free_port()
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&a), len) ||
	    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len))
		throw std::runtime_error("cannot find a free port");
	close(fd);
	return ntohs(a.sin_port);
}

Child::Child(const std::vector<std::string> &argv, const std::string &stdout_path)
{
	int err[2];
	if (pipe(err))
		throw std::runtime_error("pipe failed");
	pid_ = fork();
	if (pid_ == 0) {
		FILE *out = std::fopen(stdout_path.c_str(), "w");
		if (out)
			dup2(fileno(out), 1);
		dup2(err[1], 2);
		close(err[0]);
		std::vector<char *> args;
		for (const auto &a : argv)
			args.push_back(const_cast<char *>(a.c_str()));
		args.push_back(nullptr);
		execvp(args[0], args.data());
		_exit(127);
	}
	close(err[1]);
	err_ = err[0];
}

Child::~Child()
{
	if (pid_ > 0)
		stop(SIGKILL);
	close(err_);
}

std::string Child::wait_for_line(const std::regex &pattern, std::chrono::seconds limit)
{
	auto end = std::chrono::steady_clock::now() + limit;
	while (std::chrono::steady_clock::now() < end) {
		size_t nl;
		while ((nl = pending_.find('\n')) != std::string::npos) {
			std::string line = pending_.substr(0, nl);
			pending_.erase(0, nl + 1);
			seen_ += line + "\n";
			if (std::regex_search(line, pattern))
				return line;
		}
		pollfd p{err_, POLLIN, 0};
		if (poll(&p, 1, 100) == 1) {
			char buf[4096];
			ssize_t n = read(err_, buf, sizeof(buf));
			if (n <= 0)
				return {};
			pending_.append(buf, n);
		}
	}
	return {};
}

int Child::stop(int sig)
{
	if (pid_ <= 0)
		return -1;
	kill(pid_, sig);
	int status = 0;
	for (int i = 0; i < 200 && waitpid(pid_, &status, WNOHANG) == 0; i++)
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
	if (kill(pid_, 0) == 0 && waitpid(pid_, &status, WNOHANG) == 0) {
		kill(pid_, SIGKILL);
		waitpid(pid_, &status, 0);
	}
	pid_ = -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

bool Child::running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

std::vector<std::string> AgentProcess::argv(const std::string &sluice, const std::vector<std::string> &args,
					    const std::vector<std::string> &prefix)
{
	std::vector<std::string> v = prefix;
	v.insert(v.end(), {sluice, "agent", "--metrics", "127.0.0.1:0"});
	v.insert(v.end(), args.begin(), args.end());
	return v;
}

AgentProcess::AgentProcess(const std::string &sluice, const std::vector<std::string> &args,
			   const std::vector<std::string> &prefix, const std::string &stdout_path)
	: child_(argv(sluice, args, prefix), stdout_path)
{
	std::string line = child_.wait_for_line(std::regex("serving metrics on"));
	std::smatch m;
	if (!std::regex_search(line, m, std::regex("http://127\\.0\\.0\\.1:([0-9]+)/metrics")))
		throw std::runtime_error("the agent did not start: " + child_.seen());
	port_ = static_cast<uint16_t>(std::stoi(m[1]));
}

std::string AgentProcess::scrape() const
{
	CommandResult r = run_command({"curl", "-sS", "--max-time", "10",
				       "http://127.0.0.1:" + std::to_string(port_) + "/metrics"});
	if (r.exit_code != 0)
		throw std::runtime_error("cannot scrape the agent: " + r.err);
	return r.out;
}

double metric_sample(const std::string &scrape, const std::string &series)
{
	std::istringstream in(scrape);
	for (std::string line; std::getline(in, line);)
		if (line.rfind(series + " ", 0) == 0)
			return std::stod(line.substr(series.size() + 1));
	return NAN;
}

} // namespace sluice::test
