// SPDX-License-Identifier: GPL-2.0-only
// What `sluice set` does, over the set store (sets.h) and the rule tables:
// a set that rules use is changed by compiling the rules with the new set
// into the idle tables, switching, and only then replacing the set's file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "datapath.h"
#include "sets.h"

namespace sluice {

/// One set as `set list` shows it.
struct SetInfo {
	std::string name;
	int family = 4;
	size_t size = 0;
	std::vector<std::string> rules; ///< names of the rules that use it
};

/// Every set of the instance, by name.
std::vector<SetInfo> list_sets(const Instance &inst);

/// What a change did to a set.
struct SetChange {
	size_t before = 0, after = 0; ///< prefixes
	size_t rules = 0;             ///< rules recompiled with it
	bool created = false;
};

/// Replaces a set whole (creating it if new): the rules that use it are
/// recompiled into the idle tables and switched to in one commit, then the
/// set's file is replaced; if anything fails nothing changes. The caller
/// holds the instance's exclusive lock.
SetChange replace_set(const Instance &inst, std::string_view name, AddressSet set);
/// Adds prefixes (creating the set with their family if new).
SetChange add_to_set(const Instance &inst, std::string_view name, const std::vector<std::string> &prefixes);
/// Removes prefixes; one the set does not hold is an error.
SetChange delete_from_set(const Instance &inst, std::string_view name, const std::vector<std::string> &prefixes);
/// Deletes a set that no rule uses.
void delete_set(const Instance &inst, std::string_view name);
/// The family the set must keep (that of the rules using it), 0 if free.
int required_family(const Instance &inst, std::string_view name);

} // namespace sluice
