// SPDX-License-Identifier: GPL-2.0-only
// The coarse clock the XDP program reads (struct sluice_tick_clock): its two
// constants, found when the program is loaded through a probe program that
// reads jiffies, and the same clock as userspace can read it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sluice_abi.h"

struct bpf_object;

namespace sluice {

/// One run of the probe: jiffies, then CLOCK_MONOTONIC, then jiffies again.
struct TickSample {
	uint64_t jiffies_before = 0;
	uint64_t mono_ns = 0;
	uint64_t jiffies_after = 0;
};

/// The constants from samples (pure arithmetic, for the tests). The kernel
/// counts a jiffy at each whole multiple of `tick_ns` on CLOCK_MONOTONIC, a
/// little after it passes, so floor(mono / tick) - jiffies is jiffies_base,
/// or one more for a sample taken between a multiple and its count: the least
/// over the samples whose jiffies did not move while they read the clock.
/// nullopt if `tick_ns` is 0 or no sample qualifies.
std::optional<struct sluice_tick_clock> tick_clock_from(const std::vector<TickSample> &samples, uint64_t tick_ns);

/// Runs the probe over a tick and a half (6 ms at HZ=250, so that some
/// sample falls outside the moment a tick is late) and returns the
/// constants; {0, 0}, which makes the program read CLOCK_MONOTONIC_COARSE,
/// if the probe cannot run or its answer strays more than two ticks from that clock.
struct sluice_tick_clock calibrate_tick_clock();

/// Sets the constants in an opened, not yet loaded object's read-only data:
/// the coarse clock's, calibrated now (calibrate_tick_clock; nothing for a
/// build without them, the test-clock build), and the number of possible
/// CPUs (sluice_owed_cpus, bpf/lib/owed.h). Every loader of the program calls
/// it: the program and the libxdp dispatcher's copy read the same clock.
void set_load_constants(struct bpf_object *obj);

/// The program's coarse clock read from userspace, never later than it
/// reads: the earlier of CLOCK_MONOTONIC_COARSE (which a program loaded
/// without the constants reads) and the tick before CLOCK_MONOTONIC's last
/// whole tick (a tick counted late still reads no earlier). At most two ticks
/// earlier than the program's clock.
uint64_t program_coarse_floor_ns();

/// The program's coarse clock as userspace reads it: CLOCK_MONOTONIC's
/// last whole tick, which is what the program reads but in the moment
/// between a tick and the kernel counting it, or CLOCK_MONOTONIC_COARSE if
/// the tick is unknown. Within a tick of the program's reading.
uint64_t program_coarse_ns();

} // namespace sluice
