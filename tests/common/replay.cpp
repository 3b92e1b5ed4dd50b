// SPDX-License-Identifier: GPL-2.0-only
#include "replay.h"

#include <linux/bpf.h>
#include <sched.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "packet.h"
#include "sluice_test_bpf.skel.h"

namespace sluice::test {

std::string source_address(uint32_t i)
{
	uint32_t n = i + 1;
	return "10." + std::to_string((n >> 16) & 255) + "." + std::to_string((n >> 8) & 255) + "." +
	       std::to_string(n & 255);
}

Replayer::Replayer(RuleSpec rule, TableSizes sizes)
{
	ObjectImage image;
	image.data = sluice_test_bpf__elf_bytes(&image.size);
	set_libbpf_verbose(false);
	prog_ = std::make_unique<LoadedProgram>(sizes, image);
	maps_ = prog_->maps();
	struct bpf_map *clock = bpf_object__find_map_by_name(prog_->object(), "sluice_clock");
	if (!clock)
		throw std::runtime_error("the test program has no clock map");
	clock_fd_ = bpf_map__fd(clock);
	if (rule.name.empty())
		rule.name = "replayed";
	RuleTable(maps_).add(rule);
}

void Replayer::set_clock(uint64_t t_ns)
{
	if (t_ns == clock_ns_)
		return;
	std::vector<uint64_t> per_cpu(possible_cpus(), t_ns);
	uint32_t zero = 0;
	map_update(clock_fd_, &zero, per_cpu.data(), "test clock");
	clock_ns_ = t_ns;
}

void Replayer::set_clocks(const std::vector<uint64_t> &t_ns)
{
	clock_ns_ = UINT64_MAX;
	std::vector<uint64_t> per_cpu(possible_cpus(), t_ns.empty() ? 0 : t_ns.back());
	for (size_t i = 0; i < t_ns.size() && i < per_cpu.size(); i++)
		per_cpu[i] = t_ns[i];
	uint32_t zero = 0;
	map_update(clock_fd_, &zero, per_cpu.data(), "test clock");
}

void Replayer::set_race_window(uint32_t reads)
{
	struct bpf_map *m = bpf_object__find_map_by_name(prog_->object(), "sluice_race_window");
	if (!m)
		throw std::runtime_error("the test program has no race window");
	uint32_t zero = 0;
	map_update(bpf_map__fd(m), &zero, &reads, "race window");
}

void Replayer::pin_cpu(int cpu)
{
	if (cpu == cpu_)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		throw std::runtime_error("cannot pin to CPU " + std::to_string(cpu));
	cpu_ = cpu;
}

std::vector<bool> Replayer::run(const Trace &trace)
{
	std::vector<bool> passed;
	passed.reserve(trace.size());
	for (const Arrival &a : trace) {
		if (a.source >= frames_.size()) {
			frames_.resize(a.source + 1);
			frame_payload_.resize(a.source + 1, UINT32_MAX);
		}
		if (frame_payload_[a.source] != a.payload) {
			frames_[a.source] = build_packet({.src = source_address(a.source), .payload = a.payload});
			frame_payload_[a.source] = a.payload;
		}
		pin_cpu(a.cpu);
		set_clock(a.t_ns);
		const auto &frame = frames_[a.source];
		LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
			    .data_size_in = static_cast<__u32>(frame.size()), .repeat = 1);
		if (bpf_prog_test_run_opts(prog_->prog_fd(), &opts))
			throw std::runtime_error("BPF_PROG_TEST_RUN failed");
		passed.push_back(opts.retval == XDP_PASS);
	}
	return passed;
}

bool Replayer::send(const std::vector<uint8_t> &frame, uint64_t t_ns)
{
	set_clock(t_ns);
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_size_in = static_cast<__u32>(frame.size()),
		    .repeat = 1);
	if (bpf_prog_test_run_opts(prog_->prog_fd(), &opts))
		throw std::runtime_error("BPF_PROG_TEST_RUN failed");
	return opts.retval == XDP_PASS;
}

Trace constant_flood(double pps, uint64_t duration_ns, uint32_t sources)
{
	Trace t;
	uint64_t n = static_cast<uint64_t>(pps * double(duration_ns) / 1e9);
	for (uint64_t i = 0; i < n; i++)
		t.push_back({TRACE_START_NS + static_cast<uint64_t>(double(i) * 1e9 / pps),
			     static_cast<uint32_t>(i % sources)});
	return t;
}

Trace on_off(double burst_pps, uint64_t on_ns, uint64_t off_ns, int cycles)
{
	Trace t;
	uint64_t per_burst = static_cast<uint64_t>(burst_pps * double(on_ns) / 1e9);
	for (int c = 0; c < cycles; c++) {
		uint64_t start = TRACE_START_NS + c * (on_ns + off_ns);
		for (uint64_t i = 0; i < per_burst; i++)
			t.push_back({start + static_cast<uint64_t>(double(i) * 1e9 / burst_pps)});
	}
	return t;
}

Trace boundary_attack(uint64_t n, uint64_t window_ns, uint64_t spread_ns, int cycles)
{
	Trace t;
	for (int c = 1; c <= cycles; c++) {
		uint64_t boundary = TRACE_START_NS + 3 * c * window_ns;
		for (uint64_t i = 0; i < n; i++)
			t.push_back({boundary - spread_ns + i * spread_ns / n});
		for (uint64_t i = 0; i < n; i++)
			t.push_back({boundary + i * spread_ns / n});
	}
	return t;
}

Trace poisson(double pps, uint64_t duration_ns, uint64_t seed)
{
	std::mt19937_64 rng(seed);
	std::exponential_distribution<double> gap(pps / 1e9);
	std::uniform_int_distribution<uint32_t> size(0, 1400);
	Trace t;
	double now = double(TRACE_START_NS);
	while (now < double(TRACE_START_NS + duration_ns)) {
		now += gap(rng);
		t.push_back({static_cast<uint64_t>(now), 0, size(rng)});
	}
	return t;
}

Trace two_cpus(double pps, uint64_t duration_ns)
{
	Trace t = constant_flood(pps, duration_ns);
	for (size_t i = 0; i < t.size(); i++)
		t[i].cpu = static_cast<int>(i % 2);
	return t;
}

} // namespace sluice::test
