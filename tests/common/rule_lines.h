// SPDX-License-Identifier: GPL-2.0-only
// Generated `rule add` and `rule set` lines, from the options the CLI itself
// declares (add_rule_options, add_edit_options): an option the CLI gains and
// a test's value table does not know fails that test until it is given values.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

namespace sluice::test {

/// One option as the CLI declares it.
struct DeclaredOption {
	std::string name;	///< "--rate", or the positional's name ("CIDR")
	bool positional = false;
	bool flag = false; ///< takes no value (--allow, --shadow)
};

/// The options of `rule add`, in the CLI's order (without --help).
std::vector<DeclaredOption> rule_add_options();
/// The options of `rule set`, in the CLI's order (without --help).
std::vector<DeclaredOption> rule_set_options();

/// The values each option may be given, by option name ("CIDR", "--rate").
using OptionValues = std::map<std::string, std::vector<std::string>>;

/// Every algorithm's and every scope's name, as the rule parser takes them.
std::vector<std::string> algo_names();
std::vector<std::string> scope_names();

/// How often a line gives an option, in percent: `other`, unless `by_option` names it.
struct OptionChances {
	int other = 20;
	std::map<std::string, int> by_option;
	/// Options that mostly come beside another (--ban-after beside --ban):
	/// the chance they are given when that other is not on the line.
	std::map<std::string, std::pair<std::string, int>> alone;

	int of(const std::string &option) const;
};

/// Draws rule lines and option values from `values` with `rng` (held, not copied).
class RuleLines {
public:
	RuleLines(std::mt19937_64 &rng, OptionValues values) : rng_(rng), values_(std::move(values)) {}

	/// A value for `option`; throws std::logic_error when the table has none.
	std::string value_for(const std::string &option);
	/// The words that give `o` on a command line: its name, and a value
	/// unless it is a flag (the positional: its value alone).
	std::vector<std::string> words_for(const DeclaredOption &o);

	/// A `rule add` argument line: the positional CIDR, then each option with
	/// its chance. A non-empty `name` is given as `--name name`, always.
	std::string add_line(const OptionChances &chances, const std::string &name = "");
	/// A `rule set` option line (without the rule's key), each option with
	/// its chance; may be empty.
	std::string set_line(const OptionChances &chances);

	/// The declared options (of `options`) that take a value and have none here.
	std::vector<std::string> missing(const std::vector<DeclaredOption> &options) const;

	size_t below(size_t n) { return static_cast<size_t>(rng_() % n); }
	bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }

private:
	std::mt19937_64 &rng_;
	OptionValues values_;
};

} // namespace sluice::test
