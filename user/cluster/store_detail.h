// SPDX-License-Identifier: GPL-2.0-only
// What the single store and the cluster router share, not part of the
// store's interface: reading error replies and the EVALSHA -> EVAL fallback.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "store.h"

namespace sluice::cluster::detail {

/// a == b, ignoring the case of ASCII letters (command names).
bool ascii_iequal(std::string_view a, std::string_view b);

/// The reply is an error whose code (first word) is `code`: "MOVED", "ASK"...
bool error_is(const Reply &reply, std::string_view code);

/// The command is an EVALSHA made by eval_command and the node did not know
/// the script: send as_eval(command) instead.
bool wants_eval_fallback(const Command &command, const Reply &reply);

/// The command's arguments with EVALSHA SHA1 replaced by EVAL BODY; EVAL also
/// puts the script in the node's cache, so the next EVALSHA finds it.
std::vector<std::string> as_eval(const Command &command);

} // namespace sluice::cluster::detail
