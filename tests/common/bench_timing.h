// SPDX-License-Identifier: GPL-2.0-only
// How the benchmarks time the program: BPF_PROG_TEST_RUN's own clock over
// many repeats of one frame, on one pinned CPU, runs interleaved and their
// median kept; and the machine they name in their reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::test {

/// Average ns per run of `repeat` runs of `frame` through `prog_fd`, as the
/// kernel times it.
double test_run_ns(int prog_fd, const std::vector<uint8_t> &frame, uint32_t repeat);

/// Pins the calling thread to one CPU; throws if it cannot.
void pin_to_cpu(int cpu);

/// The median of `v` (the mean of the middle two of an even count); 0 if empty.
double median(std::vector<double> v);

/// The CPU's model name from /proc/cpuinfo; "unknown" if none is there.
std::string cpu_model();

} // namespace sluice::test
