// A rule as an operator types it: the options of `rule add`, and the lines of
// a `rule import` file, which are `rule add` argument lists. The CLI and the
// import-line fuzzer both go through here, so they parse the same way.
#pragma once

#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "rule.h"

namespace CLI {
class App;
}

namespace sluice {

/// The options of `rule add`, as typed, before any of them is parsed.
struct RuleArgs {
	std::string cidr, rate, burst, proto, dport, name, algo, warmup;
	bool allow = false, deny = false, shadow = false;
	int per = -1;
};

/// Declares the `rule add` options on `cmd`, storing into `a`.
void add_rule_options(CLI::App *cmd, RuleArgs &a);

/// Parses each option into a RuleSpec (not yet validated as a whole: see
/// validate_rule). `per_given` says whether --per was on the command line.
RuleSpec to_spec(const RuleArgs &a, bool per_given);

/// Parses one `rule import` line: a `rule add` argument list split at
/// whitespace. Returns nothing for a blank line or a comment (first word
/// starting with '#'). Throws Error with the reason, without a line number.
std::optional<RuleSpec> parse_rule_line(const std::string &line);

/// Reads every line of a `rule import` file. Errors read "SOURCE line N: reason";
/// a file without a single rule is an error too.
/// `where`, if given, receives "SOURCE line N" for each rule, for the errors
/// of a later step (RuleTable::add_many) to name the line.
std::vector<RuleSpec> read_rule_lines(std::istream &in, const std::string &source,
				      std::vector<std::string> *where = nullptr);

} // namespace sluice
