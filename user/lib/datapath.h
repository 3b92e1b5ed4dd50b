// SPDX-License-Identifier: GPL-2.0-only
// The data plane's life cycle: loading the embedded XDP program, pinning its
// maps and links in bpffs, attaching it to interfaces and reporting status.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "fd.h"
#include "maps.h"
#include "state_dirs.h"

namespace sluice {

enum class XdpMode { native, generic };
std::string_view mode_name(XdpMode m);
XdpMode parse_mode(std::string_view text);

/// Table sizes fixed when the program is loaded; 0 means the default.
struct TableSizes {
	uint32_t max_sources = 0;
	uint32_t max_rules = 0;
	uint32_t max_log_sources = 0;
	uint32_t max_bans = 0; ///< the ban table (bans.h)
	/// IPv6 prefixes a rule set holds (the trie holds two sets); 0: as
	/// many as max_rules, which is what it was before it had a size of its
	/// own. Equal to max_rules means the same: it follows max_rules.
	uint32_t max_v6_prefixes = 0;

	bool operator==(const TableSizes &) const = default;
	/// The room of the rule tables these sizes load, defaults resolved.
	RuleRoom rule_room() const;
	/// The sizes of loaded tables, as `attach` or a policy states them.
	static TableSizes loaded(const MapSet &m);
	/// max_v6_prefixes as stated: 0 where the trie holds as many as max_rules.
	static uint32_t stated_v6_prefixes(uint32_t v6_prefixes, uint32_t max_rules)
	{
		return v6_prefixes == max_rules ? 0 : v6_prefixes;
	}
};

/// A BPF object file held in memory (a skeleton's embedded bytes).
struct ObjectImage {
	const void *data = nullptr;
	size_t size = 0;
};

/// The production XDP program embedded in this binary.
ObjectImage production_object();

/// An XDP program loaded from an object image, with its maps, attached
/// nowhere. Destroying it releases whatever is not pinned. Tests load the
/// variant whose clock is a map from the same code.
class LoadedProgram {
public:
	explicit LoadedProgram(const TableSizes &sizes, ObjectImage image = production_object());
	~LoadedProgram();
	LoadedProgram(const LoadedProgram &) = delete;
	LoadedProgram &operator=(const LoadedProgram &) = delete;

	/// In two steps: the tables alone, configured, whose maps() can be
	/// filled while another thread runs load_program() (the verifier).
	static std::unique_ptr<LoadedProgram> tables_only(const TableSizes &sizes,
							  ObjectImage image = production_object());
	/// Loads the program onto the tables; nothing if it is loaded.
	void load_program();
	/// The bytes of the tables the program would be loaded with: the sum
	/// of its maps' values (per-CPU ones once per possible CPU).
	static uint64_t table_bytes(const TableSizes &sizes, ObjectImage image = production_object());

	int prog_fd() const; ///< -1 before load_program
	MapSet maps() const;
	struct bpf_object *object() const; ///< null before load_program

private:
	LoadedProgram(ObjectImage image, const TableSizes &sizes);

	ObjectImage image_;
	TableSizes sizes_;
	struct bpf_object *tables_ = nullptr; ///< the maps, until load_program hands them to obj_
	struct bpf_object *obj_ = nullptr;
	struct bpf_program *prog_ = nullptr;
};

/// One interface the program is attached to.
struct AttachedLink {
	std::string ifname;   ///< as resolved in the caller's network namespace
	uint32_t ifindex = 0; ///< 0: the interface is gone
	uint64_t netns = 0;   ///< inode of the link's network namespace
	bool this_netns = false;
	XdpMode mode = XdpMode::native;
	uint32_t link_id = 0;
	uint32_t prog_id = 0; ///< the program the link runs (the pinned one, unless an upgrade was cut short)
	std::string pin; ///< the link's pin name, which `detach` also takes
	uint32_t then_prog_id = 0; ///< `--then`: the program its passed packets go on to; 0: none
	bool dispatcher = false;   ///< attached through libxdp's dispatcher (`--multiprog`)
};

/// Sluice's program placed in another loader's program array (`attach --prog-array`).
struct ArraySlot {
	uint32_t map_id = 0;
	std::string map_name;
	uint32_t index = 0;
	uint32_t prog_id = 0; ///< what the slot holds now (sluice's program, unless someone replaced it)
	std::string pin;      ///< the record's pin name, which `detach` also takes
};

struct Status {
	bool loaded = false;
	uint32_t prog_id = 0;
	std::vector<AttachedLink> links;
	std::vector<ArraySlot> arrays;
	uint32_t max_sources = 0;
	uint32_t max_log_sources = 0;
	uint32_t max_rules = 0;
	uint32_t max_bans = 0;
	uint32_t max_v6_prefixes = 0; ///< of a rule set, as the trie's size holds them
	uint64_t map_memory_bytes = 0; ///< the kernel's own account of the maps
	uint64_t loaded_ns = 0;
	uint32_t abi_version = 0; ///< of the binary that loaded the program (struct sluice_meta)
	uint64_t layout_hash = 0;
};

/// The pinned Sluice state under one bpffs directory (normally
/// /sys/fs/bpf/sluice), with its lock and run directories (see state_dirs.h).
/// Every CLI call opens it afresh: nothing lives in a process.
class Instance {
public:
	/// `run_dir` empty: run_dir_for(pin_dir).
	explicit Instance(std::string pin_dir = default_pin_dir(), std::string run_dir = "");

	/// $SLUICE_PIN_DIR if set (tests), else SLUICE_PIN_DIR.
	static std::string default_pin_dir();

	/// The instance's lock, released on destruction: an flock on the lock
	/// directory beside the pin directory, which nothing renames (an upgrade
	/// swaps the pin directory itself), and one on the pin directory, which
	/// binaries before 0.2.7 take. Mutating commands take it
	/// exclusive, readers shared. A command that fails (an exception leaves
	/// the lock's scope) removes the directories its lock made, those still
	/// empty: a refused command leaves nothing behind.
	class Lock {
	public:
		Lock() = default;
		Lock(UniqueFd stable, UniqueFd pin_dir, std::vector<std::string> made)
			: stable_(std::move(stable)), pin_dir_(std::move(pin_dir)), made_(std::move(made))
		{
		}
		Lock(Lock &&) = default;
		Lock &operator=(Lock &&) = default;
		~Lock();
		/// False if the pin directory was gone once the lock was taken.
		bool holds_pin_dir() const { return bool(pin_dir_); }

	private:
		UniqueFd stable_, pin_dir_;
		std::vector<std::string> made_; ///< the directories made, the pin directory first
		int unwinding_ = std::uncaught_exceptions();
	};
	/// `create`: the command may load the program, so the pin directory is
	/// made if missing; otherwise a missing one means "not attached".
	/// Refuses, as check_dirs does, directories that others own or may write.
	Lock lock(bool exclusive, bool create = false) const;

	/// Throws one line naming the directory unless the pin, lock and run
	/// directories, those that exist, are root's and writable by no one else
	/// (check_private_dir): every command checks this before it reads or
	/// writes anything.
	void check_dirs() const;
	/// Creates the run directory (mode 0700) if missing; the agent serves there.
	void make_run_dir() const;

	bool loaded() const;
	/// The pinned maps; throws "not attached" with a hint when nothing is loaded.
	MapSet maps() const;

	/// Loads the program and pins it with its maps, attached nowhere, unless
	/// it is loaded already; true if it loaded it. Rules can be added then.
	bool load(const TableSizes &sizes);
	/// Pins a program loaded apart (its maps filled already), which makes it
	/// the loaded one; throws if one is loaded already.
	void adopt(const LoadedProgram &prog);
	/// Throws if the loaded tables differ from the sizes asked (0: any).
	static void check_sizes(const MapSet &maps, const TableSizes &sizes);

	/// Attaches to an interface of the caller's network namespace, loading and
	/// pinning the program first if it is not loaded. Refused if sluice is
	/// attached to the interface already, in either mode (the kernel runs one
	/// XDP mode at a time: see change_mode).
	/// then: `--then` (see open_next_program): the program the interface's
	/// passed packets go on to, by tail call.
	void attach(const std::string &ifname, XdpMode mode, const TableSizes &sizes, const std::string &then = "");
	/// Attaches again as `link` was (interface, mode, chain); the program is loaded.
	void reattach(const AttachedLink &link);
	/// Moves sluice's link on an interface to the other mode, keeping its
	/// chain: detaches the old link, attaches the new one, and attaches the
	/// old one again if that fails (then rethrows). Between the two the
	/// interface runs no program, for the time of one attach.
	void change_mode(const AttachedLink &link, XdpMode to);
	/// Attaches through libxdp's dispatcher at run priority `priority`,
	/// beside the programs already there (see multiprog.h); refused where the
	/// kernel cannot run a dispatcher.
	void attach_multiprog(const std::string &ifname, XdpMode mode, const TableSizes &sizes, uint32_t priority);
	/// Installs the program at `index` of another loader's program array
	/// (pinned at `array_path`) instead of an interface, loading it first if
	/// needed; recorded in the links directory, so `status`, `detach` and
	/// `upgrade` know it.
	void attach_to_prog_array(const std::string &array_path, uint32_t index, const TableSizes &sizes);
	/// Takes the program out of that slot; the rules stay loaded.
	void detach_from_prog_array(const std::string &array_path, uint32_t index);
	/// Detaches one link by its pin name; the state stays loaded.
	void detach_link(const std::string &pin_name);
	/// Replaces the loaded program with this binary's, in place: state of
	/// any known layout is carried over (rules, counters, buckets) into maps
	/// of `sizes` (0: as they are), every link is moved to the new program.
	/// Returns the bucket tables that could not be carried (see restore_state).
	std::vector<std::string> upgrade(const TableSizes &sizes = {});
	/// Detaches from one interface, named in the caller's network namespace
	/// or by its link's pin name (the way to remove the link of an interface
	/// or namespace that is gone). The last detach leaves the program and its
	/// rules loaded, enforced nowhere, until the next attach; only unload()
	/// removes them.
	void detach(const std::string &ifname);
	/// Detaches from every interface and removes all pinned state, the pin
	/// directory and the lock directory with it: nothing of Sluice's is left
	/// in bpffs.
	void unload();
	/// With nothing loaded: removes what a killed load or an earlier
	/// `detach --all` left (map pins with no program, the empty pin and lock
	/// directories). Needs the exclusive lock.
	void remove_leftovers();

	/// Where the program is attached (its links and program array slots),
	/// read from the pins alone: of state of any layout.
	Status attachments() const;
	/// attachments() with the tables' sizes, read from maps of this
	/// binary's layout (refused for state of another).
	Status status() const;
	const std::string &pin_dir() const { return dir_; }
	const std::string &run_dir() const { return run_dir_; }

private:
	/// One attempt of lock(): the lock may hold no pin directory if
	/// `detach --all` removed it while this waited.
	Lock try_lock(bool exclusive, bool create) const;
	std::string links_dir() const { return dir_ + "/links"; }
	/// True if sluice is attached to the interface (of network namespace
	/// `netns`) in `mode`, alone or through the dispatcher.
	bool attached_in(uint64_t netns, uint32_t ifindex, XdpMode mode) const;
	/// Records how the data plane sizes the interface's frames (see SLUICE_MTU_WIRE_FRAMES).
	void record_frame_size(const MapSet &m, uint32_t ifindex, const std::string &ifname, XdpMode mode) const;
	std::string prog_pin() const { return dir_ + "/prog"; }
	static void pin_program(const LoadedProgram &prog, const std::string &dir);
	static void remove_pins(const std::string &dir);
	static void remove_state_dir(const std::string &dir);
	std::vector<std::string> link_pins() const;
	/// The program to place on an interface or in a program-array slot:
	/// loaded now if it was not (`fresh`: its pins are the caller's to remove
	/// if the placement fails), else checked against the sizes asked.
	UniqueFd program_to_place(const TableSizes &sizes, bool &fresh);
	/// Takes sluice's program out of a recorded program-array slot, and the record.
	void release_array_slot(const std::string &record, uint32_t index) const;
	/// attach() once the interface and its next program are known.
	void attach_link(const std::string &ifname, uint32_t ifindex, XdpMode mode, const TableSizes &sizes,
			 UniqueFd next, const std::string &then);
	/// Removes an interface's `--then`, unless it still has a link in the other mode.
	void unchain(uint32_t ifindex, uint64_t netns) const;

	std::string dir_, run_dir_;
};

/// Checks that sluice could attach to the interface in `mode` now, as far as
/// it can be told without attaching: the interface exists in this network
/// namespace, its driver runs native XDP (if asked and the kernel says), and
/// its hook holds no program but sluice's own (`st`: the running state; a
/// link of sluice on the interface, in either mode, is its own). Throws, with
/// one line, what would fail.
void check_attachable(const std::string &ifname, XdpMode mode, const Status &st);

/// libbpf prints nothing unless verbose (then everything, verifier log included).
void set_libbpf_verbose(bool verbose);

} // namespace sluice
