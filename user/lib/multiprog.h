// SPDX-License-Identifier: GPL-2.0-only
// Sharing the XDP hook through libxdp's dispatcher (`attach --multiprog`).
// The dispatcher runs several programs on one interface, each as an `ext`
// program replacing one of its slots, which needs BPF trampolines. Where the
// kernel has none, libxdp falls back to attaching one program alone: that
// would push the other program off while looking like sharing, so it is
// refused before anything is attached, and a fallback seen after attaching is
// undone and refused.
//
// This machine's kernel has no trampolines: the refusal is what its tests
// check. The attaching path is kept small for kernels that have them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "maps.h"

namespace sluice {

/// One program of a libxdp dispatcher, as `status` lists it.
struct HookProgram {
	std::string name;
	uint32_t id = 0;
	uint32_t priority = 0; ///< libxdp's run priority: lower runs first
};

/// libxdp prints nothing unless verbose (set_libbpf_verbose calls this).
void set_libxdp_verbose(bool verbose);

/// The programs a libxdp dispatcher runs on `ifindex`; empty if none runs there.
std::vector<HookProgram> dispatcher_programs(uint32_t ifindex);

/// Attaches the embedded program through libxdp's dispatcher on `ifindex`,
/// its maps those of the pinned state (`maps`), at run priority `priority`;
/// pins the component program at `pin` so that `detach` finds it. Throws,
/// having attached nothing, where libxdp cannot share the hook.
void attach_through_dispatcher(const MapSet &maps, uint32_t ifindex, const std::string &ifname, bool generic,
			       uint32_t priority, const std::string &pin);

/// Detaches the component pinned at `pin` from `ifindex`'s dispatcher, and
/// only it: the other programs stay.
void detach_from_dispatcher(uint32_t ifindex, bool generic, const std::string &pin);

} // namespace sluice
