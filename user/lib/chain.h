// SPDX-License-Identifier: GPL-2.0-only
// Sharing the XDP hook without libxdp, by tail calls (works on every kernel):
// `attach IFACE --then PROG` hands the packets Sluice passes on one interface
// to another XDP program, and `attach --prog-array MAP --index N` installs
// Sluice's program in another loader's program array instead of an interface.
// And the libxdp dispatcher's requirement, probed.
#pragma once

#include <cstdint>
#include <string>

#include "fd.h"

namespace sluice {

/// The program `--then SPEC` names: a pinned program ("/sys/fs/bpf/..."), or
/// an object file, "FILE.o" or "FILE.o:NAME" (a program or section name; by
/// default its only XDP program), which is loaded as XDP with
/// BPF_F_XDP_HAS_FRAGS: the kernel lets a program tail-call only programs of
/// its own kind, and Sluice's handles multi-buffer frames.
UniqueFd open_next_program(const std::string &spec);

/// "xdp_filter (id 42)", or "id 42" if it has no name or is gone.
std::string describe_prog(uint32_t prog_id);

/// The program array pinned at `path`, checked to be one.
UniqueFd open_prog_array(const std::string &path);

/// Writes `prog_fd` at `index` of a program array, explaining the kernel's
/// refusals (another kind of program, out of range) in one line.
void put_in_prog_array(int array_fd, uint32_t index, int prog_fd, const std::string &what);

/// The program id at `index` of a program array; 0 if empty.
uint32_t prog_array_entry(int array_fd, uint32_t index);

/// Whether this kernel has BPF trampolines (program types `ext` and
/// `tracing`), which libxdp's dispatcher needs to run several programs on
/// one interface; without them libxdp can only attach one.
bool kernel_has_trampolines();

} // namespace sluice
