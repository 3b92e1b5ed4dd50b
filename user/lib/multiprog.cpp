// SPDX-License-Identifier: GPL-2.0-only
#include "multiprog.h"

#include <unistd.h>
#include <xdp/libxdp.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>

#include "chain.h"
#include "datapath.h"
#include "error.h"
#include "tick_clock.h"

namespace sluice {

namespace {

std::string libxdp_error(long err)
{
	char buf[256] = {};
	libxdp_strerror(static_cast<int>(err), buf, sizeof(buf));
	return buf;
}

struct CloseMultiprog {
	void operator()(struct xdp_multiprog *mp) const { xdp_multiprog__close(mp); }
};
struct CloseProgram {
	void operator()(struct xdp_program *p) const { xdp_program__close(p); }
};

/// The dispatcher on `ifindex`, or null (none, or a single legacy program).
std::unique_ptr<struct xdp_multiprog, CloseMultiprog> dispatcher(uint32_t ifindex)
{
	struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(static_cast<int>(ifindex));
	if (libxdp_get_error(mp))
		return nullptr;
	std::unique_ptr<struct xdp_multiprog, CloseMultiprog> owned(mp);
	if (xdp_multiprog__is_legacy(mp))
		return nullptr;
	return owned;
}

int libxdp_quiet(enum libxdp_print_level, const char *, va_list) { return 0; }
int libxdp_all(enum libxdp_print_level, const char *format, va_list args) { return vfprintf(stderr, format, args); }

} // namespace

void set_libxdp_verbose(bool verbose) { libxdp_set_print(verbose ? libxdp_all : libxdp_quiet); }

std::vector<HookProgram> dispatcher_programs(uint32_t ifindex)
{
	std::vector<HookProgram> out;
	auto mp = dispatcher(ifindex);
	if (!mp)
		return out;
	for (struct xdp_program *p = xdp_multiprog__next_prog(nullptr, mp.get()); p;
	     p = xdp_multiprog__next_prog(p, mp.get()))
		out.push_back({xdp_program__name(p), xdp_program__id(p), xdp_program__run_prio(p)});
	return out;
}

void attach_through_dispatcher(const MapSet &maps, uint32_t ifindex, const std::string &ifname, bool generic,
			       uint32_t priority, const std::string &pin)
{
	if (!kernel_has_trampolines())
		throw Error("cannot share " + ifname + "'s XDP hook through libxdp: this kernel has no BPF trampolines "
			    "(program types ext and tracing are unavailable), so libxdp's dispatcher cannot run "
			    "several programs and would fall back to attaching one alone; chain instead "
			    "(`--then PROG`, or `--prog-array` into another loader's array)");
	// The embedded object again, its maps those of the pinned state: the
	// dispatcher's copy of the program enforces the same rules and buckets.
	ObjectImage image = production_object();
	LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = "sluice");
	struct bpf_object *obj = bpf_object__open_mem(image.data, image.size, &opts);
	if (!obj)
		throw_errno("cannot open the embedded BPF object", errno);
	// libxdp does not close an object it was given: closed last, here.
	std::unique_ptr<struct bpf_object, void (*)(struct bpf_object *)> owned_obj(obj, bpf_object__close);
	set_load_constants(obj);
	maps.for_each([obj](const char *name, int fd) {
		struct bpf_map *m = bpf_object__find_map_by_name(obj, name);
		if (!m || bpf_map__reuse_fd(m, fd))
			throw Error(std::string("cannot share map ") + name + " with the dispatcher's program");
	});
	std::unique_ptr<struct xdp_program, CloseProgram> prog(xdp_program__from_bpf_obj(obj, "xdp.frags"));
	if (long err = libxdp_get_error(prog.get())) {
		prog.release();
		throw Error("libxdp cannot take sluice's program: " + libxdp_error(err));
	}
	xdp_program__set_run_prio(prog.get(), priority);
	xdp_program__set_xdp_frags_support(prog.get(), true);
	int err = xdp_program__attach(prog.get(), static_cast<int>(ifindex), generic ? XDP_MODE_SKB : XDP_MODE_NATIVE,
				      0);
	if (err)
		throw Error("cannot attach to " + ifname + " through libxdp: " + libxdp_error(err));
	// A single program where a dispatcher was wanted is no sharing: undone.
	if (!dispatcher(ifindex)) {
		xdp_program__detach(prog.get(), static_cast<int>(ifindex), generic ? XDP_MODE_SKB : XDP_MODE_NATIVE, 0);
		throw Error("libxdp attached sluice to " + ifname + " as a single program, not through its dispatcher; "
			    "undone: chain instead (`--then PROG`, or `--prog-array`)");
	}
	if (bpf_obj_pin(xdp_program__fd(prog.get()), pin.c_str())) {
		int saved = errno;
		xdp_program__detach(prog.get(), static_cast<int>(ifindex), generic ? XDP_MODE_SKB : XDP_MODE_NATIVE, 0);
		throw_errno("cannot pin sluice's dispatcher program at " + pin, saved);
	}
}

void detach_from_dispatcher(uint32_t ifindex, bool generic, const std::string &pin)
{
	UniqueFd fd(open_pinned_object(pin));
	if (!fd)
		throw_errno("cannot open " + pin, errno);
	std::unique_ptr<struct xdp_program, CloseProgram> prog(xdp_program__from_fd(fd.get()));
	if (long err = libxdp_get_error(prog.get())) {
		prog.release();
		throw Error("libxdp cannot find sluice's program in the dispatcher: " + libxdp_error(err));
	}
	if (int err = xdp_program__detach(prog.get(), static_cast<int>(ifindex),
					  generic ? XDP_MODE_SKB : XDP_MODE_NATIVE, 0))
		throw Error("libxdp cannot detach sluice: " + libxdp_error(err));
}

} // namespace sluice
