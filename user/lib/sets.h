// SPDX-License-Identifier: GPL-2.0-only
// Address sets: named lists of IPv4 or IPv6 prefixes that a rule takes in
// place of its CIDR (`sluice rule add @blocklist --deny`). A rule on a set
// acts as that rule written once for each prefix of the set: the controller
// compiles it into the same lookup tables as any rule (rule.h,
// compile_match_lists), so the data plane never sees a set as such.
//
// Where sets are kept: one file a set under the instance's run directory
// (RUN_DIR/sets/NAME.set, see state_dirs.h), which lives as long as the
// pinned state does (both go at reboot). A file is replaced by rename, so a
// reader sees the old set or the new one.
#pragma once

#include <istream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "net.h"

namespace sluice {

/// Set names: 1-15 characters of letters, digits, '.', '_' and '-', not
/// starting with '-' (a rule keeps its set's name in 16 bytes).
void check_set_name(std::string_view name);
constexpr size_t SET_NAME_MAX = 15;

/// One set: its family and its prefixes, sorted (Cidr order) and unique.
struct AddressSet {
	int family = 4;
	std::vector<Cidr> prefixes;

	bool operator==(const AddressSet &) const = default;
};

/// The sets a rule set refers to, by name.
using SetContents = std::map<std::string, AddressSet>;

/// Sorts and removes repeats.
void normalize(std::vector<Cidr> &prefixes);

/// The prefixes that matter for matching: those not inside another prefix
/// of the set (an address under both meets the rule once, at the covering
/// prefix). `prefixes` sorted as normalize leaves them.
std::vector<Cidr> outermost(const std::vector<Cidr> &prefixes);

/// Reads a set file: one prefix (or bare address) per line; '#' or ';'
/// starts a comment (FireHOL and Spamhaus DROP lists as published); blank
/// lines are skipped. Every prefix must be of one family: the first one's,
/// or `family` if nonzero. Errors read "SOURCE line N: reason". An empty
/// file gives an empty set of `family` (IPv4 if 0).
AddressSet read_set_lines(std::istream &in, const std::string &source, int family = 0);

/// Parses command-line prefixes (`set add NAME PREFIX...`) of one family.
std::vector<Cidr> parse_set_prefixes(const std::vector<std::string> &texts, int family);

/// The sets of one instance, one file each.
class SetStore {
public:
	/// The store of the instance whose run directory is `run_dir`.
	explicit SetStore(std::string run_dir);
	/// The store of the instance named by $SLUICE_PIN_DIR / $SLUICE_RUN_DIR.
	static SetStore for_default_instance();

	const std::string &dir() const { return dir_; }
	/// Names of the sets kept, sorted.
	std::vector<std::string> names() const;
	bool exists(std::string_view name) const;
	/// Reads a set; throws "no set named 'X'" if there is none.
	AddressSet read(std::string_view name) const;
	/// Reads the sets `names` name; a missing one is an error naming it.
	SetContents read_all(const std::vector<std::string> &names) const;
	/// Writes a set whole (a temporary file, then a rename).
	void write(std::string_view name, const AddressSet &set) const;
	/// Writes the set's file aside, to be made the set by commit() or
	/// dropped by the destructor: a set is replaced only once its rules'
	/// tables are live.
	class Pending {
	public:
		Pending(std::string tmp, std::string path) : tmp_(std::move(tmp)), path_(std::move(path)) {}
		Pending(Pending &&o) noexcept : tmp_(std::move(o.tmp_)), path_(std::move(o.path_)) { o.tmp_.clear(); }
		Pending(const Pending &) = delete;
		~Pending();
		void commit();

	private:
		std::string tmp_, path_;
	};
	Pending stage(std::string_view name, const AddressSet &set) const;
	/// Removes a set's file; false if there was none.
	bool remove(std::string_view name) const;
	/// Removes every set and the directory (`detach --all`).
	void remove_all() const;

private:
	std::string path_of(std::string_view name) const;
	std::string dir_;
};

} // namespace sluice
