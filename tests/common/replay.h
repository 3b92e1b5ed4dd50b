// SPDX-License-Identifier: GPL-2.0-only
// Replaying arrival traces through the real XDP program, built with its clock
// in a map, with BPF_PROG_TEST_RUN; and the traces themselves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datapath.h"
#include "rule_table.h"

namespace sluice::test {

/// One packet of a trace: when, from which source (an index), how large, on which CPU.
struct Arrival {
	uint64_t t_ns = 0;
	uint32_t source = 0;
	uint32_t payload = 32; ///< UDP payload bytes; the IP length is 28 more
	int cpu = 0;
};
using Trace = std::vector<Arrival>;

/// The IPv4 address replayed for source index i: 10.x.y.z, under 10.0.0.0/8.
std::string source_address(uint32_t i);
/// Bytes a packet costs a byte-rate rule: its IP length.
inline uint64_t packet_cost(const Arrival &a) { return a.payload + 28; }

/// The test-clock program with one rule, ready to replay traces.
class Replayer {
public:
	explicit Replayer(RuleSpec rule, TableSizes sizes = {1 << 16, 64, 1 << 16});
	/// Each arrival's verdict: true if it passed. Times must not go backwards.
	std::vector<bool> run(const Trace &trace);
	/// Sends one frame of the caller's at `t_ns` on the current CPU: true if it passed.
	bool send(const std::vector<uint8_t> &frame, uint64_t t_ns);
	const MapSet &maps() const { return maps_; }
	int prog_fd() const { return prog_->prog_fd(); }
	/// Sets the clock of every CPU: CPU i reads t_ns[i] (tests of clocks that disagree).
	void set_clocks(const std::vector<uint64_t> &t_ns);
	/// Makes the program waste `reads` reads of a bucket's key between finding
	/// the bucket and charging it (the race window of a concurrent eviction).
	void set_race_window(uint32_t reads);

private:
	void set_clock(uint64_t t_ns);
	void pin_cpu(int cpu);

	std::unique_ptr<LoadedProgram> prog_;
	MapSet maps_;
	int clock_fd_ = -1;
	int cpu_ = -1;
	uint64_t clock_ns_ = UINT64_MAX; // what every CPU's clock was last set to
	std::vector<std::vector<uint8_t>> frames_; // by source, built on first use
	std::vector<uint32_t> frame_payload_;
};

// Traces. Times start at `start_ns` (default 1000 s, a whole number of any window).
constexpr uint64_t TRACE_START_NS = 1000000000000ULL;
/// Evenly spaced arrivals at `pps` for `duration_ns`, from `sources` sources in turn.
Trace constant_flood(double pps, uint64_t duration_ns, uint32_t sources = 1);
/// Bursts of `burst_pps` for `on_ns`, then silence for `off_ns`, `cycles` times.
Trace on_off(double burst_pps, uint64_t on_ns, uint64_t off_ns, int cycles);
/// `n` packets in the last `spread_ns` before each window boundary and `n` in the
/// first `spread_ns` after it, at `cycles` boundaries spaced 3 windows apart.
Trace boundary_attack(uint64_t n, uint64_t window_ns, uint64_t spread_ns, int cycles);
/// Poisson arrivals at mean `pps` with random payloads of 0-1400 bytes.
Trace poisson(double pps, uint64_t duration_ns, uint64_t seed);
/// A flood whose packets alternate between CPU 0 and CPU 1.
Trace two_cpus(double pps, uint64_t duration_ns);

} // namespace sluice::test
