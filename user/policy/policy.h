// SPDX-License-Identifier: GPL-2.0-only
// The declarative policy file (`sluice apply FILE`, `sluice export`): the
// interfaces, table sizes and rules an operator wants, in YAML, and what
// applying it would change. Pure: nothing here reads or writes a map.
//
//   interfaces:
//     - name: eth0
//       mode: generic         # native (default) or generic
//   tables:                   # optional; an omitted size is the default
//     max_rules: 16384
//   rules:
//     - name: ssh             # required, unique
//       cidr: 0.0.0.0/0       # required
//       proto: tcp
//       dport: 22
//       rate: 5/min
//       algo: sliding-log
//
// A rule's keys are `rule add`'s options, parsed by the same functions:
// name, cidr, action (limit|allow|deny), proto, dport, sport, tcp_flags, rate, burst, algo, per,
// warmup, shadow, continue. A rule on an address set has cidr: "@NAME".
//
//   sets:                     # optional: address sets, made equal to these
//     - name: blocklist
//       prefixes: [192.0.2.0/24, 2001:db8::/32]   # inline, one family
//     - name: drop
//       file: /etc/sluice/drop.txt                # or read at apply
//       family: 6             # optional: 4 (default) or 6, for an empty set
#pragma once

#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "datapath.h"
#include "rule.h"

namespace sluice {

/// An interface the policy attaches to.
struct PolicyInterface {
	std::string name;
	XdpMode mode = XdpMode::native;

	bool operator==(const PolicyInterface &) const = default;
};

/// An address set a policy states: inline, or read from `file` when the
/// policy is read (and so at every apply).
struct PolicySet {
	std::string name;
	std::string file; ///< empty: the prefixes are inline
	AddressSet set;

	bool operator==(const PolicySet &) const = default;
};

/// A whole policy file. Rules keep the file's order; each has passed
/// validate_rule (defaults such as the burst are filled in) and the set is
/// consistent (unique names, no two rules with the same selector).
struct Policy {
	std::vector<PolicyInterface> interfaces;
	TableSizes tables; ///< 0 = the default size
	std::vector<RuleSpec> rules;
	/// Address sets: those named are made equal to these; a set the policy
	/// does not name is left as it is (and rules may use it).
	std::vector<PolicySet> sets;
};

/// The policy's sets by name.
SetContents policy_sets(const Policy &p);

/// Parses and checks a policy. `source` names the input in errors. Throws
/// Error with one line: "SOURCE line N: rule 'NAME': reason" (the rule's part
/// where there is one; "rule #K" for a rule whose name is not known).
Policy parse_policy(std::istream &in, const std::string &source);

/// A policy file's text as read, and the name errors give it.
struct PolicyText {
	std::string source; ///< the path, or "stdin"
	std::string text;
};

/// Reads the policy file at `path` whole; "-" reads standard input.
PolicyText read_policy_text(const std::string &path);

/// Parses and checks a policy read by read_policy_text.
Policy parse_policy_text(const PolicyText &file);

/// Reads and parses the policy file at `path`; "-" reads standard input.
Policy read_policy_file(const std::string &path);

/// The table sizes a policy's text seems to ask for, read from a block-style
/// `tables:` section alone (none: the defaults), without parsing the rest:
/// a guess to begin work that depends on them early (`apply` loads the
/// program while it parses the rules). Empty when the text has a `tables`
/// section in another style. parse_policy_text decides.
std::optional<TableSizes> peek_table_sizes(std::string_view text);

/// The export format: canonical YAML with only the keys that differ from
/// their defaults, rules in the order given, rates as format_rate prints
/// them. parse_policy reads it back to the same specs (same_spec), and
/// writing what it reads gives the same text byte for byte.
std::string write_policy(const Policy &p);

/// A policy rule's keys, in the export's order: "name", then each key a
/// rule may state (the ones diff_rules names in a change).
std::vector<std::string> policy_rule_keys();

/// One difference between the running rules and a policy's, by name.
struct RuleChange {
	enum class Kind { add, remove, change };
	Kind kind = Kind::add;
	std::string name;
	RuleSpec before; ///< remove and change
	RuleSpec after;  ///< add and change
	/// change: the policy keys whose values differ, in the file's key order.
	std::vector<std::string> fields;
	/// change: the rule's buckets cannot be kept (bucket_change, the one
	/// place that decides it for `apply` too). False for add and remove.
	bool restarts_buckets = false;
	/// change: why they restart, or keep.
	BucketChange buckets = BucketChange::keep;
};

/// What applying `desired` over `running` changes, rules matched by name
/// (a rename is a remove and an add). Removals first, in running order, then
/// additions and changes in desired order; unchanged rules are left out.
/// Throws Error if a name appears twice on either side.
std::vector<RuleChange> diff_rules(const std::vector<RuleSpec> &running, const std::vector<RuleSpec> &desired);

/// One line per change, newline-terminated:
///   + rule ssh: 0.0.0.0/0 tcp dport 22 limit 5/min sliding-log
///   - rule old: 10.0.0.0/8 deny
///   ~ rule web: rate 100/s -> 200/s, burst 10 -> 20 (buckets kept)
///   ~ rule api: algo token-bucket -> gcra (buckets restart: the algorithm changes)
/// or "no changes" when there are none.
std::string format_diff(const std::vector<RuleChange> &changes);

/// A rule on one line as format_diff prints it ("0.0.0.0/0 tcp dport 22
/// limit 5/min sliding-log"): only what differs from the defaults.
std::string describe_rule(const RuleSpec &spec);

} // namespace sluice
