// SPDX-License-Identifier: GPL-2.0-only
#include "bench_timing.h"

#include <bpf/bpf.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <string>

#include "error.h"

namespace sluice::test {

double test_run_ns(int prog_fd, const std::vector<uint8_t> &frame, uint32_t repeat)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
		    .data_size_in = static_cast<__u32>(frame.size()), .repeat = static_cast<int>(repeat));
	if (bpf_prog_test_run_opts(prog_fd, &opts))
		throw_errno("BPF_PROG_TEST_RUN", errno);
	return opts.duration;
}

void pin_to_cpu(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		throw Error("cannot pin to CPU " + std::to_string(cpu));
}

double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	if (v.empty())
		return 0;
	const size_t n = v.size();
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string cpu_model()
{
	std::ifstream in("/proc/cpuinfo");
	for (std::string line; std::getline(in, line);)
		if (line.rfind("model name", 0) == 0)
			return line.substr(line.find(':') + 2);
	return "unknown";
}

} // namespace sluice::test
