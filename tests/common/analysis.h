// SPDX-License-Identifier: GPL-2.0-only
// What a replayed trace shows: how much passed in the worst window, whether an
// algorithm's promise held, the long-run rate.
#pragma once

#include <cstdint>
#include <vector>

#include "replay.h"

namespace sluice::test {

/// Units (packets, or bytes when `bytes`) a packet counts for.
inline uint64_t units(const Arrival &a, bool bytes) { return bytes ? packet_cost(a) : 1; }

/// The most units passed by one source in any window [t, t + window_ns).
uint64_t max_in_sliding_window(const Trace &trace, const std::vector<bool> &passed, uint64_t window_ns,
			       bool bytes);
/// The most units passed by one source in one aligned window [k*W, (k+1)*W).
uint64_t max_in_aligned_window(const Trace &trace, const std::vector<bool> &passed, uint64_t window_ns,
			       bool bytes);
/// True if every source's passes fit the envelope burst + rate * T for every
/// interval T: an exact token bucket of that size, fed only the passes, never
/// runs short. `slack` units are forgiven (for clock rounding, none is needed).
bool within_token_bucket_bound(const Trace &trace, const std::vector<bool> &passed, double units_per_sec,
			       double burst, bool bytes, double slack = 1e-6);
/// Units passed per second over the trace, per source on average.
double passed_rate(const Trace &trace, const std::vector<bool> &passed, bool bytes);

} // namespace sluice::test
