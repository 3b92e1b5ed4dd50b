// SPDX-License-Identifier: GPL-2.0-only
#include "chain.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/bpf.h>

#include <cerrno>
#include <cstring>

#include "error.h"
#include "maps.h"
#include "text_table.h"

namespace sluice {

namespace {

/// An object file's program, loaded as a frags-aware XDP program.
UniqueFd load_from_object(const std::string &file, const std::string &name)
{
	struct bpf_object *obj = bpf_object__open_file(file.c_str(), nullptr);
	if (!obj)
		throw_errno("cannot open " + file, errno);
	struct Close {
		struct bpf_object *o;
		~Close() { bpf_object__close(o); }
	} close{obj};
	struct bpf_program *chosen = nullptr, *p;
	int programs = 0;
	bpf_object__for_each_program(p, obj) {
		programs++;
		if (name.empty() ? bpf_program__type(p) == BPF_PROG_TYPE_XDP
				 : name == bpf_program__name(p) || name == bpf_program__section_name(p)) {
			if (chosen && name.empty())
				throw Error(file + " has several XDP programs; name one: " + file + ":NAME");
			chosen = chosen ? chosen : p;
		}
	}
	if (!chosen)
		throw Error(file + (name.empty() ? std::string(" has no XDP program")
						 : " has no program or section named " + name));
	bpf_object__for_each_program(p, obj) bpf_program__set_autoload(p, p == chosen);
	bpf_program__set_type(chosen, BPF_PROG_TYPE_XDP);
	bpf_program__set_flags(chosen, bpf_program__flags(chosen) | BPF_F_XDP_HAS_FRAGS);
	if (bpf_object__load(obj))
		throw_errno("cannot load " + file + " (run with -v for the verifier's log)", errno);
	UniqueFd fd(fcntl(bpf_program__fd(chosen), F_DUPFD_CLOEXEC, 0));
	if (!fd)
		throw_errno("cannot keep the program of " + file, errno);
	return fd; // the object closes; the program lives while something holds it
}

} // namespace

UniqueFd open_next_program(const std::string &spec)
{
	if (spec.empty())
		throw Error("--then needs a program: a pinned program's path or an object file (FILE.o[:NAME])");
	if (spec[0] == '/' && spec.find(".o") == std::string::npos) {
		UniqueFd fd(open_pinned_object(spec));
		if (!fd)
			throw_errno("cannot open the pinned program " + spec, errno);
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);
		if (bpf_obj_get_info_by_fd(fd.get(), &info, &len))
			throw Error(spec + " is not a BPF program");
		if (info.type != BPF_PROG_TYPE_XDP)
			throw Error(spec + " is not an XDP program");
		return fd;
	}
	size_t colon = spec.rfind(':');
	std::string file = spec, name;
	if (colon != std::string::npos && colon > spec.rfind(".o")) {
		file = spec.substr(0, colon);
		name = spec.substr(colon + 1);
	}
	return load_from_object(file, name);
}

std::string describe_prog(uint32_t prog_id)
{
	UniqueFd fd(bpf_prog_get_fd_by_id(prog_id));
	std::string id = "id " + std::to_string(prog_id);
	if (!fd)
		return id;
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) || !info.name[0])
		return id;
	return std::string(info.name) + " (" + id + ")";
}

UniqueFd open_prog_array(const std::string &path)
{
	UniqueFd fd(open_pinned_object(path));
	if (!fd)
		throw_errno("cannot open the program array " + path, errno);
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) || info.type != BPF_MAP_TYPE_PROG_ARRAY)
		throw Error(path + " is not a program array");
	return fd;
}

void put_in_prog_array(int array_fd, uint32_t index, int prog_fd, const std::string &what)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	bpf_obj_get_info_by_fd(array_fd, &info, &len);
	if (index >= info.max_entries)
		throw Error("cannot " + what + ": index " + std::to_string(index) + " is past the program array's " +
			    plural(info.max_entries, "entry", "entries"));
	__u32 key = index, value = static_cast<__u32>(prog_fd);
	if (bpf_map_update_elem(array_fd, &key, &value, BPF_ANY) == 0)
		return;
	int err = errno;
	if (err == EINVAL)
		throw Error("cannot " + what + ": the kernel refused it; a program array takes only programs of its "
			    "owner's kind (here XDP, loaded with BPF_F_XDP_HAS_FRAGS, as sluice's program is: "
			    "SEC(\"xdp.frags\"))");
	throw_errno("cannot " + what, err);
}

uint32_t prog_array_entry(int array_fd, uint32_t index)
{
	__u32 key = index, id = 0;
	if (bpf_map_lookup_elem(array_fd, &key, &id))
		return 0;
	return id;
}

bool kernel_has_trampolines()
{
	return libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_EXT, nullptr) == 1 &&
	       libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_TRACING, nullptr) == 1;
}

} // namespace sluice
