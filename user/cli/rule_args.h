// SPDX-License-Identifier: GPL-2.0-only
// A rule as an operator types it: the options of `rule add`, and the lines of
// a `rule import` file, which are `rule add` argument lists. The CLI and the
// import-line fuzzer both go through here, so they parse the same way.
#pragma once

#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "rule.h"
#include "rule_table.h"

namespace CLI {
class App;
}

namespace sluice {

/// The options of `rule add`, as typed, before any of them is parsed.
struct RuleArgs {
	std::string cidr, rate, burst, proto, dport, sport, tcp_flags, name, algo, warmup, scope, fallback, ban,
		ban_after;
	bool allow = false, deny = false, shadow = false, layered = false, syn = false;
	int per = -1;
};

/// Declares the `rule add` options on `cmd`, storing into `a`.
void add_rule_options(CLI::App *cmd, RuleArgs &a);

/// Parses each option into a RuleSpec (not yet validated as a whole: see
/// validate_rule). `per_given` says whether --per was on the command line.
RuleSpec to_spec(const RuleArgs &a, bool per_given);

/// The options of `rule set`, as typed.
struct RuleEditArgs {
	std::string rate, burst, algo, warmup, name, scope, fallback, ban, ban_after;
	int per = -1;
	bool shadow = false, no_shadow = false, layered = false, no_layered = false;
};

/// Declares the `rule set` options on `cmd`, storing into `a`.
void add_edit_options(CLI::App *cmd, RuleEditArgs &a);

/// Parses the options given into an edit; `burst_in_bytes` says how to read
/// --burst (the rule's rate, or the new one, counts bytes). Throws if no
/// option was given.
RuleEdit to_edit(const RuleEditArgs &a, const CLI::App &cmd, bool rate_counts_bytes);

/// Parses one `rule import` line: a `rule add` argument list split at
/// whitespace. Returns nothing for a blank line or a comment (first word
/// starting with '#'). Throws Error with the reason, without a line number.
std::optional<RuleSpec> parse_rule_line(const std::string &line);

/// Reads every line of a `rule import` file. Errors read "SOURCE line N: reason";
/// a file without a single rule is an error too.
/// `where`, if given, receives "SOURCE line N" for each rule, for the errors
/// of a later step (Transaction::import) to name the line.
std::vector<RuleSpec> read_rule_lines(std::istream &in, const std::string &source,
				      std::vector<std::string> *where = nullptr);

} // namespace sluice
