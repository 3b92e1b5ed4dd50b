// SPDX-License-Identifier: GPL-2.0-only
// The coarse clock's constants (see tick_clock.h and struct sluice_tick_clock).
#include "tick_clock.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "clock_probe_bpf.skel.h"
#include "error.h"
#include "rule.h"

namespace sluice {

namespace {

uint64_t read_clock(clockid_t id)
{
	struct timespec ts = {};
	clock_gettime(id, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

} // namespace

std::optional<struct sluice_tick_clock> tick_clock_from(const std::vector<TickSample> &samples, uint64_t tick_ns)
{
	if (tick_ns == 0)
		return std::nullopt;
	std::optional<uint64_t> base;
	for (const TickSample &s : samples) {
		if (s.jiffies_before != s.jiffies_after)
			continue;
		// Two's complement: jiffies start near 2^32 at boot, ahead of the ticks.
		uint64_t b = s.mono_ns / tick_ns - s.jiffies_before;
		if (!base || int64_t(b - *base) < 0)
			base = b;
	}
	if (!base)
		return std::nullopt;
	return sluice_tick_clock{tick_ns, *base};
}

struct sluice_tick_clock calibrate_tick_clock()
{
	uint64_t tick = coarse_clock_tick_ns();
	if (tick == 0)
		return {};
	struct clock_probe_bpf *probe = clock_probe_bpf__open_and_load();
	if (!probe)
		return {};
	std::vector<TickSample> samples;
	unsigned char frame[64] = {}; // an XDP test run needs a frame: an empty Ethernet one
	uint64_t start = read_clock(CLOCK_MONOTONIC);
	while (read_clock(CLOCK_MONOTONIC) - start < tick + tick / 2 && samples.size() < 256) {
		LIBBPF_OPTS(bpf_test_run_opts, run, .data_in = frame, .data_size_in = sizeof(frame), .repeat = 1);
		if (bpf_prog_test_run_opts(bpf_program__fd(probe->progs.sluice_clock_probe), &run))
			break;
		samples.push_back({probe->bss->probe_jiffies_before, probe->bss->probe_mono_ns,
				   probe->bss->probe_jiffies_after});
		usleep(50);
	}
	clock_probe_bpf__destroy(probe);
	std::optional<struct sluice_tick_clock> clk = tick_clock_from(samples, tick);
	if (!clk || samples.empty())
		return {};
	// The last sample's reading of the clock, against the kernel's coarse clock now.
	const TickSample &last = samples.back();
	uint64_t program = (last.jiffies_before + clk->jiffies_base) * tick;
	uint64_t coarse = read_clock(CLOCK_MONOTONIC_COARSE);
	if (program > last.mono_ns || (coarse > program ? coarse - program : program - coarse) > 2 * tick)
		return {};
	return *clk;
}

void set_load_constants(struct bpf_object *obj)
{
	struct bpf_map *rodata = bpf_object__find_map_by_name(obj, ".rodata");
	const struct btf *btf = bpf_object__btf(obj);
	int sec = btf ? btf__find_by_name_kind(btf, ".rodata", BTF_KIND_DATASEC) : -1;
	size_t size = 0;
	const void *initial = rodata ? bpf_map__initial_value(rodata, &size) : nullptr;
	if (sec < 0 || !initial)
		return;
	std::vector<char> data(static_cast<const char *>(initial), static_cast<const char *>(initial) + size);
	bool changed = false;
	const struct btf_type *t = btf__type_by_id(btf, sec);
	const struct btf_var_secinfo *v = btf_var_secinfos(t);
	for (int i = 0; i < btf_vlen(t); i++, v++) {
		const struct btf_type *var = btf__type_by_id(btf, v->type);
		const std::string_view name = btf__name_by_offset(btf, var->name_off);
		if (v->offset + v->size > size)
			continue;
		if (name == "sluice_tick_clock" && v->size == sizeof(struct sluice_tick_clock)) {
			// A calibration fails its check when this thread is preempted
			// between the last sample and the coarse clock's reading (CI saw
			// the program fall back to the kernel's coarse clock once): try
			// again before falling back.
			struct sluice_tick_clock clk = {};
			for (int attempt = 0; attempt < 3 && !clk.tick_ns; attempt++)
				clk = calibrate_tick_clock();
			std::memcpy(data.data() + v->offset, &clk, sizeof(clk));
			changed = true;
		} else if (name == "sluice_owed_cpus" && v->size == sizeof(__u32)) {
			int cpus = libbpf_num_possible_cpus();
			if (cpus < 0)
				throw_errno("cannot count the possible CPUs", cpus);
			const __u32 n = static_cast<__u32>(cpus);
			std::memcpy(data.data() + v->offset, &n, sizeof(n));
			changed = true;
		}
	}
	if (!changed)
		return;
	if (int err = bpf_map__set_initial_value(rodata, data.data(), size))
		throw_errno("cannot set the program's constants", err);
}

uint64_t program_coarse_floor_ns()
{
	uint64_t tick = coarse_clock_tick_ns(), coarse = read_clock(CLOCK_MONOTONIC_COARSE);
	if (tick == 0)
		return coarse;
	uint64_t whole = read_clock(CLOCK_MONOTONIC) / tick * tick;
	return std::min(coarse, whole >= tick ? whole - tick : 0);
}

uint64_t program_coarse_ns()
{
	uint64_t tick = coarse_clock_tick_ns();
	if (tick == 0)
		return read_clock(CLOCK_MONOTONIC_COARSE);
	return read_clock(CLOCK_MONOTONIC) / tick * tick;
}

} // namespace sluice
