// SPDX-License-Identifier: GPL-2.0-only
// `sluice set`: the address-set subcommands' options and handlers, over the
// library's set_commands.h.
#pragma once

#include <string>
#include <vector>

#include "datapath.h"

namespace CLI {
class App;
}

namespace sluice {

/// The options of the `set` subcommands, as typed.
struct SetArgs {
	std::string name, file;
	std::vector<std::string> prefixes;
	bool json = false;
};

void setup_set_add(CLI::App &cmd, SetArgs &a);
void setup_set_del(CLI::App &cmd, SetArgs &a);
void setup_set_list(CLI::App &cmd, SetArgs &a);
void setup_set_show(CLI::App &cmd, SetArgs &a);
void setup_set_load(CLI::App &cmd, SetArgs &a);
int run_set_add(Instance &inst, const SetArgs &a);
int run_set_del(Instance &inst, const SetArgs &a);
int run_set_list(Instance &inst, const SetArgs &a);
int run_set_show(Instance &inst, const SetArgs &a);
int run_set_load(Instance &inst, const SetArgs &a);

} // namespace sluice
