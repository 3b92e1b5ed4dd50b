// SPDX-License-Identifier: GPL-2.0-only
#include "process.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <atomic>
#include <thread>

#include <pthread.h>

namespace sluice::test {

namespace {

std::string slurp_and_remove(const std::string &path)
{
	std::ifstream in(path);
	std::stringstream ss;
	ss << in.rdbuf();
	unlink(path.c_str());
	return ss.str();
}

int wait_exit_code(pid_t pid)
{
	int status = 0;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

CommandResult run_command(const std::vector<std::string> &argv)
{
	char out_path[] = "/tmp/sluice-test-out-XXXXXX";
	char err_path[] = "/tmp/sluice-test-err-XXXXXX";
	int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
	if (out_fd < 0 || err_fd < 0)
		throw std::runtime_error("mkstemp failed");
	pid_t pid = fork();
	if (pid == 0) {
		dup2(out_fd, 1);
		dup2(err_fd, 2);
		int devnull = open("/dev/null", O_RDONLY);
		dup2(devnull, 0);
		std::vector<char *> args;
		for (const auto &a : argv)
			args.push_back(const_cast<char *>(a.c_str()));
		args.push_back(nullptr);
		execvp(args[0], args.data());
		dprintf(2, "cannot run %s\n", args[0]);
		_exit(127);
	}
	close(out_fd);
	close(err_fd);
	CommandResult r;
	r.exit_code = wait_exit_code(pid);
	r.out = slurp_and_remove(out_path);
	r.err = slurp_and_remove(err_path);
	return r;
}

void shell(const std::string &cmdline)
{
	CommandResult r = run_command({"sh", "-c", cmdline});
	if (r.exit_code != 0)
		throw std::runtime_error("`" + cmdline + "` failed: " + r.err);
}

int in_netns(const std::string &ns, const std::function<int()> &fn)
{
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
			perror("setns");
			_exit(126);
		}
		_exit(fn());
	}
	return wait_exit_code(pid);
}

void run_on_two_cpus(const std::function<void(int cpu)> &fn)
{
	std::atomic<int> ready{0};
	auto worker = [&](int cpu) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
		ready++;
		while (ready < 2) {
		}
		fn(cpu);
	};
	std::thread a(worker, 0), b(worker, 1);
	a.join();
	b.join();
}

void VethPair::create() const
{
	shell("ip netns add " + src_ns);
	shell("ip netns add " + dst_ns);
	// IPv4 only: with IPv6 on, the kernel sends router solicitations and MLD
	// reports seconds after the link comes up, and such a frame reaching the
	// hook mid-test shows up in the counters a test reads.
	for (const auto &ns : {src_ns, dst_ns})
		shell("ip netns exec " + ns +
		      " sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1");
	shell("ip link add " + src_if + " netns " + src_ns + " address " + mac_prefix + ":01 type veth peer name " +
	      dst_if + " netns " + dst_ns + " address " + mac_prefix + ":02");
	for (const auto &ns : {src_ns, dst_ns})
		shell("ip -n " + ns + " link set lo up");
	shell("ip -n " + dst_ns + " addr add " + dst_addr + " dev " + dst_if);
	for (const auto &a : src_addrs)
		shell("ip -n " + src_ns + " addr add " + a + " dev " + src_if);
	shell("ip -n " + src_ns + " link set " + src_if + " up");
	shell("ip -n " + dst_ns + " link set " + dst_if + " up");
	shell("ip -n " + src_ns + " neigh replace " + dst_addr.substr(0, dst_addr.find('/')) + " lladdr " +
	      mac_prefix + ":02 dev " + src_if + " nud permanent");
}

void VethPair::remove() const
{
	run_command({"ip", "netns", "del", src_ns});
	run_command({"ip", "netns", "del", dst_ns});
}

} // namespace sluice::test
