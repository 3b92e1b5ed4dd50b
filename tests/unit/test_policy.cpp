// SPDX-License-Identifier: GPL-2.0-only
// The policy file: parsing, its one-line errors, the export format's round
// trip, and the by-name diff that `apply --diff` prints.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "apply.h"
#include "error.h"
#include "policy.h"
#include "policy_doc.h"
#include "rule_args.h"
#include "rule_table.h"
#include "transaction.h"

using namespace sluice;

namespace {

Policy parse(const std::string &text)
{
	std::istringstream in(text);
	return parse_policy(in, "sluice.yaml");
}

std::string parse_error(const std::string &text)
{
	try {
		parse(text);
	} catch (const Error &e) {
		return e.what();
	}
	return "(accepted)";
}

/// The rules of "rules: TEXT".
std::vector<RuleSpec> rules(const std::string &text) { return parse("rules: " + text + "\n").rules; }

RuleSpec rule(const std::string &flow_map) { return rules("[" + flow_map + "]").at(0); }

// The brief's example, as an operator would write it.
const char *EXAMPLE = R"(# /etc/sluice/sluice.yaml
interfaces:
  - name: eth0
    mode: native
  - name: eth1
    mode: generic
tables:
  max_rules: 16384
  max_sources: 1000000
  max_log_sources: 16384
rules:
  - name: ssh
    cidr: 0.0.0.0/0
    proto: tcp
    dport: 22
    rate: 5/min
    algo: sliding-log
  - name: per-source
    cidr: 203.0.113.0/24
    rate: 1000/s
    burst: 2000
    continue: true
  - name: office
    cidr: 198.51.100.0/24
    action: allow
)";

// Every key, every algorithm, both families, packet, byte and bit rates, a
// fractional rate, port ranges, per prefixes, warm-up, shadow and continue:
// in the canonical form write_policy prints.
const char *CANONICAL = R"(interfaces:
  - name: eth0
  - name: veth-lab
    mode: generic
tables:
  max_rules: 512
  max_log_sources: 2048
rules:
  - name: tb-warm
    cidr: 10.0.0.0/8
    proto: tcp
    dport: 8000-8080
    rate: 1000/s
    burst: 3000
    per: 24
    warmup: 30s
    shadow: true
    continue: true
  - name: gcra-bits
    cidr: 2001:db8::/32
    proto: udp
    dport: 53
    rate: 10mbit/s
    burst: 64000
    algo: gcra
    per: 128
  - name: fixed-bytes
    cidr: 192.0.2.0/24
    rate: 1MB/s
    algo: fixed-window
  - name: log-half
    cidr: ::/0
    proto: tcp
    dport: 22
    rate: 0.5/s
    algo: sliding-log
  - name: sliding-10s
    cidr: 198.51.100.7
    proto: icmp
    rate: 100/10s
    algo: sliding-window
    shadow: true
  - name: tb-default
    cidr: 2001:db8:1::/48
    rate: 1.25MB/s
  - name: office
    cidr: 203.0.113.0/24
    action: allow
  - name: blocked
    cidr: 2001:db8:dead::/48
    action: deny
    shadow: true
)";

} // namespace

TEST(PolicyParse, AFullExample)
{
	Policy p = parse(EXAMPLE);
	ASSERT_EQ(p.interfaces.size(), 2u);
	EXPECT_EQ(p.interfaces[0], (PolicyInterface{"eth0", XdpMode::native}));
	EXPECT_EQ(p.interfaces[1], (PolicyInterface{"eth1", XdpMode::generic}));
	EXPECT_EQ(p.tables.max_rules, 16384u);
	EXPECT_EQ(p.tables.max_sources, 1000000u);
	EXPECT_EQ(p.tables.max_log_sources, 16384u);
	ASSERT_EQ(p.rules.size(), 3u);

	const RuleSpec &ssh = p.rules[0];
	EXPECT_EQ(ssh.name, "ssh");
	EXPECT_EQ(format_cidr(ssh.cidr), "0.0.0.0/0");
	EXPECT_EQ(ssh.action, Action::limit);
	EXPECT_EQ(ssh.proto, Proto::tcp);
	EXPECT_EQ(ssh.dport, (PortRange{22, 22}));
	EXPECT_EQ(ssh.rate, parse_rate("5/min"));
	EXPECT_EQ(ssh.algo, Algo::sliding_log);
	EXPECT_EQ(ssh.burst, 0u) << "a window algorithm has no burst";
	EXPECT_FALSE(ssh.layered);

	const RuleSpec &src = p.rules[1];
	EXPECT_EQ(src.name, "per-source");
	EXPECT_EQ(src.rate, parse_rate("1000/s"));
	EXPECT_EQ(src.burst, 2000u);
	EXPECT_EQ(src.algo, Algo::token_bucket);
	EXPECT_TRUE(src.layered);
	EXPECT_EQ(src.per_prefix, -1);

	const RuleSpec &office = p.rules[2];
	EXPECT_EQ(office.action, Action::allow);
	EXPECT_EQ(format_cidr(office.cidr), "198.51.100.0/24");
	EXPECT_FALSE(office.shadow);
}

TEST(PolicyParse, ValuesReadAsRuleAddReadsThem)
{
	// Each rule beside the `rule add` arguments that state it.
	const std::pair<const char *, const char *> cases[] = {
		{"{name: a, cidr: 10.0.0.0/8, rate: 10mbit, per: 24}", "10.0.0.0/8 --rate 10mbit --per 24 --name a"},
		{"{name: b, cidr: 10.0.0.0/8, rate: 1MB/s, burst: 64kB}", "10.0.0.0/8 --rate 1MB/s --burst 64kB --name b"},
		{"{name: c, cidr: 2001:db8::/32, proto: udp, dport: 5000-5100, rate: 0.5/s, algo: gcra}",
		 "2001:db8::/32 --proto udp --dport 5000-5100 --rate 0.5/s --algo gcra --name c"},
		{"{name: d, cidr: 10.1.0.0/16, rate: 100/s, burst: 300, warmup: 2min}",
		 "10.1.0.0/16 --rate 100/s --burst 300 --warmup 2min --name d"},
		{"{name: e, cidr: 192.0.2.1, action: deny, shadow: true}", "192.0.2.1 --deny --shadow --name e"},
		{"{name: f, cidr: 192.0.2.0/24, proto: icmp, rate: 100/10s, algo: fixed-window}",
		 "192.0.2.0/24 --proto icmp --rate 100/10s --algo fixed-window --name f"},
	};
	for (auto [yaml, line] : cases) {
		RuleSpec from_file = rule(yaml);
		RuleSpec from_args = *parse_rule_line(line);
		validate_rule(from_args);
		EXPECT_TRUE(same_spec(from_file, from_args)) << yaml << "\n  file: " << describe_rule(from_file)
							     << "\n  args: " << describe_rule(from_args);
	}
}

TEST(PolicyParse, EmptyAndOmittedSectionsAreDefaults)
{
	Policy p = parse("rules: []\n");
	EXPECT_TRUE(p.rules.empty()) << "an empty rule list parses: apply takes it with --allow-empty";
	EXPECT_TRUE(p.interfaces.empty());
	EXPECT_EQ(p.tables.max_rules, 0u);
	EXPECT_EQ(p.tables.max_sources, 0u);
	EXPECT_EQ(p.tables.max_log_sources, 0u);

	// Every entry commented out leaves the keys without a value.
	p = parse("interfaces:\n#  - name: eth0\ntables:\nrules:\n#  - name: x\n");
	EXPECT_TRUE(p.rules.empty());
	EXPECT_TRUE(p.interfaces.empty());

	p = parse("interfaces: [{name: eth0}]\nrules: [{name: a, cidr: 10.0.0.0/8, rate: 100/s}]\n");
	EXPECT_EQ(p.interfaces.at(0).mode, XdpMode::native);
	EXPECT_EQ(p.rules.at(0).burst, default_burst(parse_rate("100/s"))) << "validate_rule fills the burst";
}

// `apply` begins loading the program with the sizes peek_table_sizes guesses
// from the text, before the parse: a guess it gives must be what the parse
// reads, and a section it cannot read whole is no guess.
TEST(PolicyPeek, ABlockStyleTablesSectionIsReadAsTheParseReadsIt)
{
	const std::string rules = "rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate: 100/s\n";
	const std::vector<std::string> guessed = {
		rules,
		"tables:\n  max_rules: 64\n" + rules,
		rules + "tables:\n  max_sources: 4096   # for the lab\n  max_log_sources: 512\n",
		"tables:\n  max_bans: 100\n  max_rules: 64\n" + rules,
		"tables:\n  max_v6_prefixes: 1000000\n  max_rules: 64\n" + rules,
		"# sizes\ntables:   # all three\n  max_log_sources: 8\n\n  # rules\n  max_rules: 16\r\n  max_sources: 1024\n" +
			rules,
		"tables:\n" + rules,
	};
	for (const auto &text : guessed) {
		std::optional<TableSizes> guess = peek_table_sizes(text);
		ASSERT_TRUE(guess) << text;
		TableSizes parsed = parse(text).tables;
		EXPECT_EQ(guess->max_rules, parsed.max_rules) << text;
		EXPECT_EQ(guess->max_sources, parsed.max_sources) << text;
		EXPECT_EQ(guess->max_log_sources, parsed.max_log_sources) << text;
		EXPECT_EQ(guess->max_bans, parsed.max_bans) << text;
		EXPECT_EQ(guess->max_v6_prefixes, parsed.max_v6_prefixes) << text;
	}
	EXPECT_EQ(parse("tables:\n  max_v6_prefixes: 1000000\n" + rules).tables.max_v6_prefixes, 1000000u);
	EXPECT_EQ(parse("tables:\n  max_bans: 100\n" + rules).tables.max_bans, 100u);
	EXPECT_EQ(peek_table_sizes("tables:\n  max_rules: 64\n" + rules)->max_rules, 64u);

	const std::vector<std::string> declined = {
		"tables: {max_rules: 64}\n" + rules,     // flow style
		"tables:\n  max_rules: 0x40\n" + rules, // not a plain decimal
		"tables:\n  max_rules: &n 64\n" + rules,
		"tables:\n  max_ruels: 64\n" + rules, // a key the parse refuses
		"tables:\n  max_rules\n" + rules,
	};
	for (const auto &text : declined)
		EXPECT_FALSE(peek_table_sizes(text)) << text;
}

// The IPv4 table's entries hold block indices of 26 bits: a --max-rules
// whose blocks would not fit them is refused with one line, before anything
// is made.
TEST(PolicyPeek, MaxRulesBeyondWhatTheTableIndexesHoldIsRefused)
{
	EXPECT_GT(LoadedProgram::table_bytes({0, SLUICE_MAX_MAX_RULES, 0}), 0u);
	try {
		LoadedProgram::table_bytes({0, SLUICE_MAX_MAX_RULES + 1, 0});
		FAIL() << "accepted";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()), "--max-rules 16777217 is more than the most, 16777216");
	}
}

// apply's guess only loads ahead of the parse when the tables would take at
// most half the memory available: their size is counted from the object,
// before anything is made.
TEST(PolicyPeek, TheTablesOfAGuessAreCountedBeforeTheyAreMade)
{
	uint64_t small = LoadedProgram::table_bytes({0, 1000, 0});
	uint64_t large = LoadedProgram::table_bytes({0, 101000, 0});
	EXPECT_GE(large - small, 100000ull * 4 * sizeof(struct sluice_dir_block))
		<< "four IPv4 blocks a rule, beside the rule entries, lists and counters";
	EXPECT_GT(LoadedProgram::table_bytes({2000000, 1000, 0}), small + 1000000ull * sizeof(struct sluice_source_state))
		<< "and the source tables";
}

TEST(PolicyErrors, EachIsOneLineWithTheFileLineAndRule)
{
	struct Case {
		const char *text;
		const char *error;
	};
	const Case cases[] = {
		{"rules:\n  - name: ssh\n    cidr: 0.0.0.0/0\n    rat: 5/min\n",
		 "sluice.yaml line 4: rule 'ssh': unknown key 'rat' (expected one of name, cidr, action, proto, "
		 "dport, sport, tcp_flags, rate, burst, algo, per, warmup, shadow, continue, scope, fallback, ban, ban_after)"},
		{"rules:\n  - cidr: 0.0.0.0/0\n    rat: 5/min\n    name: ssh\n",
		 "sluice.yaml line 3: rule 'ssh': unknown key 'rat' (expected one of name, cidr, action, proto, "
		 "dport, sport, tcp_flags, rate, burst, algo, per, warmup, shadow, continue, scope, fallback, ban, ban_after)"},
		{"rules:\n  - {name: a, cidr: 10.0.0.0/8, proto: udp, tcp_flags: \"syn,ack=syn\", rate: 1/s}\n",
		 "sluice.yaml line 2: rule 'a': --syn and --tcp-flags select TCP packets, not --proto udp"},
		// A duration beyond its range, however far, names the range.
		{"rules:\n  - {name: a, cidr: 10.0.0.0/8, rate: 5/min, ban: 400day}\n",
		 "sluice.yaml line 2: rule 'a': ban 400day is out of range (1s to 366day)"},
		{"rules:\n  - {name: a, cidr: 10.0.0.0/8, rate: 5/min, burst: 50, warmup: 2day}\n",
		 "sluice.yaml line 2: rule 'a': warmup 2day is out of range (1ms to 1day)"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    tcp_flags: syn\n    action: deny\n",
		 "sluice.yaml line 4: rule 'a': TCP flags 'syn' need the form MASK=VALUE, e.g. syn,ack=syn "
		 "(SYN set, ACK clear)"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    tcp_flags: syn=syn,ack\n    action: deny\n",
		 "sluice.yaml line 4: rule 'a': TCP flags 'syn=syn,ack': ack in the value but not in the "
		 "mask, so no packet could match"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    sport: 123\n    action: deny\n",
		 "sluice.yaml line 2: rule 'a': --sport needs --proto tcp or --proto udp"},
		{"rules: []\nrule: []\n",
		 "sluice.yaml line 2: unknown key 'rule' (expected one of interfaces, tables, rules, sets)"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: deny\n  - name: a\n    cidr: 10.0.0.0/9\n"
		 "    action: deny\n",
		 "sluice.yaml line 5: rule 'a': another rule has this name (line 2)"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: deny\n  - name: b\n    cidr: 10.0.0.0/8\n"
		 "    rate: 1/s\n",
		 "sluice.yaml line 5: rule 'b': selects the same traffic as rule 'a' (line 2); only one of them could "
		 "ever match"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    cidr: 10.0.0.0/9\n    action: deny\n",
		 "sluice.yaml line 4: rule 'a': key 'cidr' given twice (first at line 3)"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate: [1, 2]\n",
		 "sluice.yaml line 4: rule 'a': 'rate' takes one value, not a list"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate:\n",
		 "sluice.yaml line 4: rule 'a': 'rate' takes one value, not empty"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: deny\n    shadow: yes\n",
		 "sluice.yaml line 5: rule 'a': 'shadow' is true or false, not 'yes'"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate: 5/fortnight\n",
		 "sluice.yaml line 4: rule 'a': unknown period 'fortnight' in '5/fortnight' (use ms, s, min, h or day)"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate: 5/s\n    per: -1\n",
		 "sluice.yaml line 5: rule 'a': 'per' is a number from 0 to 128, not '-1'"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.1/8\n    action: deny\n",
		 "sluice.yaml line 3: rule 'a': '10.0.0.1/8' has host bits set; did you mean 10.0.0.0/8?"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: block\n",
		 "sluice.yaml line 4: rule 'a': unknown action 'block' (use limit, allow or deny)"},
		// validate_rule's errors point at the rule.
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: allow\n    continue: true\n",
		 "sluice.yaml line 2: rule 'a': --continue applies to limit rules only"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: allow\n    shadow: true\n",
		 "sluice.yaml line 2: rule 'a': --shadow applies to --rate and --deny rules: an allow rule drops nothing"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: allow\n    rate: 5/s\n",
		 "sluice.yaml line 2: rule 'a': --rate applies to limit rules, not --allow"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n",
		 "sluice.yaml line 2: rule 'a': a limit rule needs --rate"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: deny\n  - cidr: 10.0.0.0/9\n    action: deny\n",
		 "sluice.yaml line 5: rule #2: a rule needs a 'name'"},
		{"rules:\n  - name: a\n    action: deny\n", "sluice.yaml line 2: rule 'a': a rule needs a 'cidr'"},
		{"rules:\n  - name: 42\n    cidr: 10.0.0.0/8\n    action: deny\n",
		 "sluice.yaml line 2: rule '42': rule name '42' is all digits and would read as a rule id"},
		{"rules:\n  - 10.0.0.0/8\n", "sluice.yaml line 2: rule #1: a rule is a map of keys (name, cidr, action, "
					     "proto, dport, sport, tcp_flags, rate, burst, algo, per, warmup, shadow, continue, scope, fallback, ban, ban_after), not "
					     "'10.0.0.0/8'"},
		{"rules:\n  name: a\n", "sluice.yaml line 1: 'rules' is a list, not a map"},
		{"", "sluice.yaml line 1: the policy is empty (write 'rules: []' for one without rules)"},
		{"# nothing yet\n", "sluice.yaml line 1: the policy is empty (write 'rules: []' for one without rules)"},
		{"interfaces: []\n",
		 "sluice.yaml line 1: the policy has no 'rules' (write 'rules: []' for one without rules)"},
		{"rules: []\n---\nrules: []\n", "sluice.yaml line 3: a policy is one YAML document; this is a second one"},
		// YAML itself.
		{"rules:\n  - name: a\n   cidr: 10.0.0.0/8\n",
		 "sluice.yaml line 3: did not find expected '-' indicator (while parsing a block collection at line 2)"},
		{"rules: [\n", "sluice.yaml line 2: did not find expected node content"},
		// Interfaces and tables.
		{"interfaces:\n  - name: eth0\n  - name: eth0\nrules: []\n",
		 "sluice.yaml line 3: interface 'eth0': listed twice (first at line 2)"},
		{"interfaces:\n  - name: eth0\n    mode: turbo\nrules: []\n",
		 "sluice.yaml line 3: interface 'eth0': unknown XDP mode 'turbo' (use native or generic)"},
		{"interfaces:\n  - name: eth0\n    mtu: 1500\nrules: []\n",
		 "sluice.yaml line 3: interface 'eth0': unknown key 'mtu' (expected one of name, mode)"},
		{"interfaces:\n  - name: a-very-long-interface\nrules: []\n",
		 "sluice.yaml line 2: interface 'a-very-long-interface': invalid interface name "
		 "'a-very-long-interface' (1 to 15 characters)"},
		{"interfaces: eth0\nrules: []\n", "sluice.yaml line 1: 'interfaces' is a list, not 'eth0'"},
		{"tables:\n  max_rule: 10\nrules: []\n",
		 "sluice.yaml line 2: tables: unknown key 'max_rule' (expected one of max_rules, max_sources, "
		 "max_log_sources, max_bans, max_v6_prefixes)"},
		{"tables:\n  max_sources: 1e6\nrules: []\n",
		 "sluice.yaml line 2: tables: 'max_sources' is a number from 0 to 4294967295, not '1e6'"},
		{"tables:\n  max_v6_prefixes: 0\nrules: []\n",
		 "sluice.yaml line 2: tables: 'max_v6_prefixes' is a number from 1 to 16777216, not '0'"},
		{"tables:\n  max_v6_prefixes: 16777217\nrules: []\n",
		 "sluice.yaml line 2: tables: 'max_v6_prefixes' is a number from 1 to 16777216, not '16777217'"},
		{"tables:\n  max_v6_prefixes: -1\nrules: []\n",
		 "sluice.yaml line 2: tables: 'max_v6_prefixes' is a number from 1 to 16777216, not '-1'"},
		{"tables:\n  max_rules: 1\nrules:\n  - {name: a, cidr: 10.0.0.0/8, action: deny}\n"
		 "  - {name: b, cidr: 10.0.0.0/9, action: deny}\n",
		 "sluice.yaml line 3: 2 rules do not fit in max_rules 1"},
		// Address sets.
		{"sets:\n  - name: bl\n    prefixes:\n      - 192.0.2.0/24\n      - 10.0.0.1/8\nrules: []\n",
		 "sluice.yaml line 5: set 'bl': '10.0.0.1/8' has host bits set; did you mean 10.0.0.0/8?"},
		{"sets:\n  - name: bl\n    prefixes: [192.0.2.0/24, \"2001:db8::/32\"]\nrules: []\n",
		 "sluice.yaml line 3: set 'bl': 2001:db8::/32 is IPv6, and the set holds IPv4 prefixes (a set is of one "
		 "family)"},
		{"sets:\n  - name: bl\nrules: []\n",
		 "sluice.yaml line 2: set 'bl': a set takes 'prefixes' (a list) or 'file' (a path), one of them"},
		{"sets:\n  - {name: bl, prefixes: []}\n  - {name: bl, prefixes: []}\nrules: []\n",
		 "sluice.yaml line 3: set 'bl': another set has this name (line 2)"},
		{"sets:\n  - {name: bl, file: /nonexistent/bl.txt}\nrules: []\n",
		 "sluice.yaml line 2: set 'bl': cannot read /nonexistent/bl.txt: No such file or directory"},
		{"sets:\n  - {name: six, family: 6, prefixes: []}\n  - {name: four, prefixes: [192.0.2.0/24]}\nrules:\n"
		 "  - {name: a, cidr: \"@six\", rate: 5/s, per: 48}\n  - {name: b, cidr: \"@four\", rate: 5/s, per: 48}\n",
		 "sluice.yaml line 6: rule 'b': --per 48 is longer than an IPv4 address (set 'four' holds IPv4 prefixes)"},
		{"sets:\n  - {name: bl, prefixes: []}\nrules:\n  - {name: a, cidr: \"@bl\", action: deny}\n"
		 "  - {name: b, cidr: \"@bl\", action: allow}\n",
		 "sluice.yaml line 5: rule 'b': selects the same traffic as rule 'a' (line 4); only one of them could "
		 "ever match"},
		// A control character in what the file says cannot split the line.
		{"rules:\n  - name: \"a\\nb\"\n    cidr: 10.0.0.0/8\n",
		 "sluice.yaml line 2: rule 'a\\x0ab': invalid rule name 'a\\x0ab' (letters, digits, '.', '_' and '-' "
		 "only)"},
	};
	for (const auto &c : cases) {
		std::string got = parse_error(c.text);
		EXPECT_EQ(got, c.error) << "policy:\n" << c.text;
		EXPECT_EQ(got.find('\n'), std::string::npos) << got;
	}
}

TEST(PolicyErrors, TooManyRulesOverOneAddressNamesTheRulesLine)
{
	std::string text = "# a comment\nrules:\n";
	// 33 nested layered limits: one more than may apply to one packet.
	for (int len = 0; len <= SLUICE_MAX_LAYERED; len++)
		text += "  - {name: r" + std::to_string(len) + ", cidr: 0.0.0.0/" + std::to_string(len) +
			", rate: 10/s, continue: true}\n";
	std::string got = parse_error(text.c_str());
	EXPECT_EQ(got.rfind("sluice.yaml line 2: too many layered (--continue) rules cover 0.0.0.0: 33,", 0), 0u) << got;
}

TEST(PolicyFile, ReadsAFileAndSaysWhyItCannot)
{
	char path[] = "/tmp/sluice-policy-XXXXXX";
	int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	close(fd);
	{
		std::ofstream out(path);
		out << "rules:\n  - {name: a, cidr: 10.0.0.0/8, action: deny}\n  - {name: b, cidr: 10.0.0.0/8, "
		       "action: dney}\n";
	}
	try {
		read_policy_file(path);
		ADD_FAILURE() << "a bad file was accepted";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()),
			  std::string(path) + " line 3: rule 'b': unknown action 'dney' (use limit, allow or deny)");
	}
	{
		std::ofstream out(path);
		out << "rules:\n  - {name: a, cidr: 10.0.0.0/8, action: deny}\n";
	}
	EXPECT_EQ(read_policy_file(path).rules.size(), 1u);
	unlink(path);

	try {
		read_policy_file(path);
		ADD_FAILURE() << "a missing file was read";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()), "cannot open " + std::string(path) + ": No such file or directory");
	}
	try {
		read_policy_file("/tmp");
		ADD_FAILURE() << "a directory was read";
	} catch (const Error &e) {
		EXPECT_STREQ(e.what(), "cannot read /tmp: Is a directory");
	}
}

TEST(PolicyRoundTrip, TheExportFormatReadsBackByteForByte)
{
	Policy p = parse(CANONICAL);
	ASSERT_EQ(p.rules.size(), 8u);
	EXPECT_EQ(write_policy(p), CANONICAL);

	// Spot checks that the text meant what it says.
	EXPECT_EQ(p.rules[0].warmup_ns, 30000000000ULL);
	EXPECT_TRUE(p.rules[0].layered);
	EXPECT_EQ(p.rules[1].rate.unit, RateUnit::bits);
	EXPECT_EQ(p.rules[1].per_prefix, 128) << "an IPv6 rule's per address is not its default (/64)";
	EXPECT_EQ(p.rules[2].rate, (Rate{1000000, 1000000000ULL, RateUnit::bytes}));
	EXPECT_EQ(p.rules[3].rate, parse_rate("0.5/s"));
	EXPECT_EQ(p.rules[3].cidr.family, 6);
	EXPECT_EQ(p.rules[4].cidr.prefix_len, 32);
	EXPECT_EQ(p.rules[5].burst, default_burst(parse_rate("1.25MB/s")));
}

TEST(PolicyRoundTrip, AnyPolicyReadsBackAsTheSameSpecs)
{
	// Written loosely: defaults spelled out, keys in another order, flow style.
	const char *loose = R"(
rules:
  - {cidr: 10.0.0.0/8, name: a, action: limit, rate: 1000/s, burst: 150, per: 32, proto: tcp, dport: 80}
  - name: b
    cidr: 2001:db8::/32
    rate: 10mbit
    burst: 625000           # the default for 10mbit (500 ms of it), written out
    algo: token-bucket
    warmup: 1500ms
    shadow: false
    continue: false
  - {name: c, cidr: "::/0", rate: 6000/min, algo: gcra, burst: 64}
  - {name: d, cidr: 198.51.100.0/24, action: allow, proto: udp, dport: "1000-2000"}
)";
	Policy first = parse(loose);
	std::string text = write_policy(first);
	Policy second = parse(text);
	ASSERT_EQ(second.rules.size(), first.rules.size());
	for (size_t i = 0; i < first.rules.size(); i++)
		EXPECT_TRUE(same_spec(first.rules[i], second.rules[i])) << first.rules[i].name << " in\n" << text;
	EXPECT_EQ(write_policy(second), text);
	EXPECT_EQ(text, R"(rules:
  - name: a
    cidr: 10.0.0.0/8
    proto: tcp
    dport: 80
    rate: 1000/s
    burst: 150
  - name: b
    cidr: 2001:db8::/32
    rate: 10mbit/s
    warmup: 1500ms
  - name: c
    cidr: ::/0
    rate: 6000/min
    burst: 64
    algo: gcra
  - name: d
    cidr: 198.51.100.0/24
    action: allow
    proto: udp
    dport: 1000-2000
)") << "defaults and per-address aggregation are left out";
}

TEST(PolicyRoundTrip, WhatYamlWouldMisreadIsQuoted)
{
	Policy p;
	p.interfaces = {{"#lab", XdpMode::generic}};
	RuleSpec s;
	s.name = "null";
	s.cidr = parse_cidr("10.0.0.0/8");
	s.action = Action::deny;
	p.rules = {s};
	std::string text = write_policy(p);
	EXPECT_EQ(text, "interfaces:\n  - name: \"#lab\"\n    mode: generic\nrules:\n  - name: \"null\"\n"
			"    cidr: 10.0.0.0/8\n    action: deny\n");
	Policy back = parse(text);
	EXPECT_EQ(back.interfaces.at(0).name, "#lab");
	EXPECT_EQ(back.rules.at(0).name, "null");
	EXPECT_EQ(write_policy(Policy{}), "rules: []\n");
	EXPECT_TRUE(parse(write_policy(Policy{})).rules.empty());
}

TEST(PolicySpec, SameSpecComparesWhatTheRuleMeans)
{
	RuleSpec a = rule("{name: a, cidr: 10.0.0.0/8, rate: 100/s}");
	RuleSpec b = a;
	b.burst = 0; // as written, before validate_rule
	b.per_prefix = 32;
	EXPECT_TRUE(same_spec(a, b)) << "the default burst and per-address aggregation are the defaults";
	b.burst = a.burst + 1;
	EXPECT_FALSE(same_spec(a, b));
	b = a;
	b.rate = parse_rate("6000/min");
	EXPECT_FALSE(same_spec(a, b)) << "the same speed written as another window is another rate";
	b = a;
	b.name = "b";
	EXPECT_FALSE(same_spec(a, b));
	b = a;
	b.layered = true;
	EXPECT_FALSE(same_spec(a, b));
}

TEST(PolicyDiff, AddRemoveAndChangeByName)
{
	auto running = rules("[{name: keep, cidr: 10.0.0.0/8, action: deny},"
			     " {name: old, cidr: 10.1.0.0/16, action: deny},"
			     " {name: web, cidr: 0.0.0.0/0, proto: tcp, dport: 80, rate: 100/s}]");
	auto desired = rules("[{name: web, cidr: 0.0.0.0/0, proto: tcp, dport: 80, rate: 200/s, burst: 400},"
			     " {name: keep, cidr: 10.0.0.0/8, action: deny},"
			     " {name: ssh, cidr: 0.0.0.0/0, proto: tcp, dport: 22, rate: 5/min, algo: sliding-log}]");
	auto changes = diff_rules(running, desired);
	ASSERT_EQ(changes.size(), 3u);

	EXPECT_EQ(changes[0].kind, RuleChange::Kind::remove);
	EXPECT_EQ(changes[0].name, "old");
	EXPECT_TRUE(same_spec(changes[0].before, running[1]));

	EXPECT_EQ(changes[1].kind, RuleChange::Kind::change);
	EXPECT_EQ(changes[1].name, "web");
	EXPECT_EQ(changes[1].fields, (std::vector<std::string>{"rate", "burst"}));
	EXPECT_FALSE(changes[1].restarts_buckets);

	EXPECT_EQ(changes[2].kind, RuleChange::Kind::add);
	EXPECT_EQ(changes[2].name, "ssh");
	EXPECT_TRUE(same_spec(changes[2].after, desired[2]));

	EXPECT_EQ(format_diff(changes), "- rule old: 10.1.0.0/16 deny\n"
					"~ rule web: rate 100/s -> 200/s, burst 10 -> 400 (buckets kept)\n"
					"+ rule ssh: 0.0.0.0/0 tcp dport 22 limit 5/min sliding-log\n");
	EXPECT_TRUE(diff_rules(desired, desired).empty());
	EXPECT_EQ(format_diff({}), "no changes\n");
}

TEST(PolicyDiff, TheDefaultBurstWrittenOutIsNoChange)
{
	RuleSpec running = rule("{name: web, cidr: 10.0.0.0/8, rate: 100/s}");
	RuleSpec desired = rule("{name: web, cidr: 10.0.0.0/8, rate: 100/s, burst: 10, per: 32}");
	EXPECT_TRUE(diff_rules({running}, {desired}).empty());
	running.burst = 0; // a spec not yet through validate_rule
	EXPECT_TRUE(diff_rules({running}, {desired}).empty());
}

TEST(PolicyDiff, WhichChangesKeepTheBuckets)
{
	struct Case {
		const char *before, *after;
		std::vector<std::string> fields;
		bool restarts;
	};
	const Case cases[] = {
		// The bucket's meaning stays: kept.
		{"rate: 100/s, burst: 200", "rate: 250/s, burst: 200", {"rate"}, false},
		{"rate: 100/s", "rate: 100/10s", {"rate", "burst"}, false},
		{"rate: 100/s, burst: 200", "rate: 100/s, burst: 400", {"burst"}, false},
		{"rate: 100/s, burst: 400, warmup: 10s", "rate: 100/s, burst: 400, warmup: 20s", {"warmup"}, false},
		{"rate: 100/s, burst: 400, warmup: 10s", "rate: 100/s, burst: 800, warmup: 10s", {"burst"}, false},
		{"rate: 100/s", "rate: 100/s, shadow: true", {"shadow"}, false},
		{"rate: 100/s", "rate: 100/s, continue: true", {"continue"}, false},
		{"rate: 1MB/s", "rate: 8mbit", {"rate"}, false}, // bits are a way of writing bytes
		{"rate: 50/10s, algo: sliding-log", "rate: 50/20s, algo: sliding-log", {"rate"}, false},
		{"rate: 100/10s, algo: fixed-window", "rate: 200/10s, algo: fixed-window", {"rate"}, false},
		{"action: deny", "action: deny, shadow: true", {"shadow"}, false},
		{"action: deny", "action: allow", {"action"}, false}, // neither has buckets
		// The bucket would mean something else: restarted.
		{"rate: 100/s", "rate: 100/s, per: 24", {"per"}, true},
		{"rate: 100/s", "rate: 100/s, algo: gcra", {"algo"}, true},
		{"rate: 100/s, burst: 1500", "rate: 100kB/s, burst: 1500", {"rate"}, true},
		{"rate: 100/s", "rate: 100/s, proto: tcp", {"proto"}, true},
		{"rate: 100/s, proto: udp, dport: 53", "rate: 100/s, proto: udp, dport: 53-54", {"dport"}, true},
		{"rate: 100/10s, algo: fixed-window", "rate: 100/min, algo: fixed-window", {"rate"}, true},
		{"rate: 100/10s, algo: sliding-window", "rate: 100/min, algo: sliding-window", {"rate"}, true},
		{"rate: 100/s", "action: deny", {"action", "rate", "burst"}, true},
		{"rate: 100/s, burst: 400", "rate: 100/s, burst: 400, warmup: 10s", {"warmup"}, true},
		{"rate: 100/s, burst: 400, warmup: 10s", "rate: 100/s, burst: 400", {"warmup"}, true},
		{"rate: 100/s, burst: 400, warmup: 10s", "rate: 100/s, burst: 300, warmup: 10s", {"burst"}, true},
		{"rate: 100/s, burst: 400, warmup: 10s", "rate: 200/s, burst: 400, warmup: 10s", {"rate"}, true},
		{"rate: 50/10s, algo: sliding-log", "rate: 40/10s, algo: sliding-log", {"rate"}, true},
	};
	for (const auto &c : cases) {
		RuleSpec before = rule(std::string("{name: r, cidr: 10.0.0.0/8, ") + c.before + "}");
		RuleSpec after = rule(std::string("{name: r, cidr: 10.0.0.0/8, ") + c.after + "}");
		auto changes = diff_rules({before}, {after});
		ASSERT_EQ(changes.size(), 1u) << c.before << " -> " << c.after;
		EXPECT_EQ(changes[0].kind, RuleChange::Kind::change);
		EXPECT_EQ(changes[0].fields, c.fields) << c.before << " -> " << c.after;
		EXPECT_EQ(changes[0].restarts_buckets, c.restarts) << c.before << " -> " << c.after;
	}

	RuleSpec before = rule("{name: r, cidr: 10.0.0.0/8, rate: 100/s}");
	RuleSpec moved = rule("{name: r, cidr: 10.0.0.0/16, rate: 100/s}");
	auto changes = diff_rules({before}, {moved});
	ASSERT_EQ(changes.size(), 1u);
	EXPECT_EQ(changes[0].fields, std::vector<std::string>{"cidr"});
	EXPECT_TRUE(changes[0].restarts_buckets);
	EXPECT_EQ(format_diff(changes),
		  "~ rule r: cidr 10.0.0.0/8 -> 10.0.0.0/16 (buckets restart: the selector changes)\n");
}

TEST(PolicyDiff, FormatDiffDescribesEachRule)
{
	auto added = rules("[{name: web, cidr: 2001:db8::/32, proto: tcp, dport: 8000-8080, rate: 1000/s, "
			   "burst: 3000, per: 48, warmup: 30s, shadow: true, continue: true},"
			   " {name: office, cidr: 198.51.100.0/24, action: allow},"
			   " {name: bulk, cidr: 203.0.113.0/24, rate: 1MB/s, algo: sliding-window}]");
	EXPECT_EQ(format_diff(diff_rules({}, added)),
		  "+ rule web: 2001:db8::/32 tcp dport 8000-8080 limit 1000/s burst 3000 per 48 warmup 30s continue "
		  "shadow\n"
		  "+ rule office: 198.51.100.0/24 allow\n"
		  "+ rule bulk: 203.0.113.0/24 limit 1MB/s sliding-window\n");
	EXPECT_EQ(format_diff(diff_rules(added, {})),
		  "- rule web: 2001:db8::/32 tcp dport 8000-8080 limit 1000/s burst 3000 per 48 warmup 30s continue "
		  "shadow\n"
		  "- rule office: 198.51.100.0/24 allow\n"
		  "- rule bulk: 203.0.113.0/24 limit 1MB/s sliding-window\n");

	auto changed = added;
	changed[0].per_prefix = -1;
	changed[0].shadow = false;
	changed[2].rate = parse_rate("2MB/s");
	EXPECT_EQ(format_diff(diff_rules(added, changed)),
		  "~ rule web: per 48 -> default, shadow true -> false (buckets restart: the aggregation prefix changes)\n"
		  "~ rule bulk: rate 1MB/s -> 2MB/s (buckets kept)\n");
}

TEST(PolicyDiff, ANameTwiceOnOneSideIsAnError)
{
	auto twice = rules("[{name: a, cidr: 10.0.0.0/8, action: deny}]");
	twice.push_back(twice[0]);
	EXPECT_THROW(diff_rules(twice, {}), Error);
	EXPECT_THROW(diff_rules({}, twice), Error);
}

TEST(PolicyExample, TheShippedExampleParsesAndRoundTrips)
{
	Policy p = read_policy_file(SLUICE_POLICY_EXAMPLE);
	ASSERT_EQ(p.interfaces.size(), 2u);
	EXPECT_EQ(p.interfaces[1].mode, XdpMode::generic);
	EXPECT_EQ(p.tables.max_rules, 4096u);
	ASSERT_EQ(p.rules.size(), 7u);
	std::vector<std::string> names;
	for (const auto &r : p.rules)
		names.push_back(r.name);
	EXPECT_EQ(names, (std::vector<std::string>{"office", "scanner", "ssh", "ssh-v6", "web", "dns-v6", "partner"}));
	EXPECT_EQ(p.rules[2].tcp_flags, SYN_ONLY) << "SSH limits connection attempts, not a session's packets";
	EXPECT_EQ(p.rules[3].tcp_flags, SYN_ONLY);
	EXPECT_FALSE(p.rules[2].shadow || p.rules[3].shadow) << "the example's SSH limits are enforced";
	EXPECT_EQ(p.rules[4].warmup_ns, 30000000000ULL);
	EXPECT_TRUE(p.rules[5].layered);

	std::string text = write_policy(p);
	Policy back = parse(text);
	ASSERT_EQ(back.rules.size(), p.rules.size());
	for (size_t i = 0; i < p.rules.size(); i++)
		EXPECT_TRUE(same_spec(back.rules[i], p.rules[i])) << p.rules[i].name;
	EXPECT_EQ(write_policy(back), text);
}

// ---- YAML as yaml-cpp reads it: every form, not only the block style.

TEST(PolicyParsers, EveryYamlFormReadsAsItsBlockStyle)
{
	// Each of these is valid YAML, and means what the block style beside it means.
	const std::string deny = "rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: deny\n";
	const std::string rate = "rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate: 5/s\n";
	const std::vector<std::pair<std::string, std::string>> files = {
		{"rules: [{name: a, cidr: 10.0.0.0/8, action: deny}]\n", deny},       // a flow list
		{"rules:\n  - &r {name: a, cidr: 10.0.0.0/8, action: deny}\n", deny}, // an anchor
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate: &r 5/s\n"
		 "  - name: b\n    cidr: 10.0.0.0/9\n    rate: *r\n",
		 rate + "  - name: b\n    cidr: 10.0.0.0/9\n    rate: 5/s\n"},                // an alias
		{"---\nrules: []\n", "rules: []\n"},                                           // a document marker
		{"rules:\r\n  - {name: a, cidr: 10.0.0.0/8, action: deny}\r\n", deny},          // CRLF
		{"rules:\n  - name: \"a\\x2db\"\n    cidr: 10.0.0.0/8\n    action: deny\n",
		 "rules:\n  - name: a-b\n    cidr: 10.0.0.0/8\n    action: deny\n"},          // an escape
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: !!str deny\n", deny},   // a tag
		{"rules:\n  - name: >-\n      a\n    cidr: 10.0.0.0/8\n    action: deny\n", deny}, // a folded scalar
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate:\n      5/s\n", rate},       // a scalar on its own line
		{"rules:\n  - {name: a, cidr: 10.0.0.0/8, action: deny, }\n", deny},         // a trailing comma
		{"\"rules\": []\n", "rules: []\n"},                                           // a quoted key
	};
	for (const auto &[text, block] : files)
		EXPECT_EQ(write_policy(parse(text)), write_policy(parse(block))) << text;
}

TEST(PolicyParsers, ErrorsNameTheFileTheLineAndWhatIsWrong)
{
	// Nulls, keys that are null and duplicates: placed where yaml-cpp places them.
	const std::vector<std::pair<std::string, std::string>> files = {
		{"rules:\n  -\n  - name: a\n    cidr: 10.0.0.0/8\n    action: deny\n",
		 "sluice.yaml line 3: rule #1: a rule is a map of keys (name, cidr, action, proto, dport, sport, tcp_flags, "
		 "rate, burst, algo, per, warmup, shadow, continue, scope, fallback, ban, ban_after), not empty"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate:\n", "sluice.yaml line 4: rule 'a': 'rate' takes one value, not empty"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    null: x\n",
		 "sluice.yaml line 4: rule 'a': a key of a rule must be a word, not empty"},
		{"rules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: deny\n  - name: a\n    cidr: 10.0.0.0/9\n"
		 "    action: deny\n",
		 "sluice.yaml line 5: rule 'a': another rule has this name (line 2)"},
		{"rules:\n  - name: a\n    cidr: [10.0.0.0/8\n",
		 "sluice.yaml line 4: did not find expected ',' or ']' (while parsing a flow sequence at line 3)"},
		// A tab as indentation (yaml-cpp would read it; YAML and libyaml do not).
		{"rules:\n\t[]\n", "sluice.yaml line 2: found character that cannot start any token"},
		// A stray ',' (yaml-cpp 0.7 allocates without bound on it).
		{",tables:\n", "sluice.yaml line 1: did not find expected node content"},
	};
	for (const auto &[text, message] : files)
		EXPECT_EQ(parse_error(text), message) << text;
}

// `scope: cluster` and `fallback:` read as `--scope cluster` and `--fallback`
// do, write back, and are checked as rule add checks them.
TEST(PolicyRoundTrip, ClusterScopeAndFallback)
{
	Policy p = parse(R"(rules:
  - name: api
    cidr: 10.0.0.0/8
    rate: 900/s
    scope: cluster
    fallback: 300/s
  - name: web
    cidr: 10.1.0.0/16
    rate: 100/s
    scope: local
)");
	ASSERT_EQ(p.rules.size(), 2u);
	EXPECT_EQ(p.rules[0].scope, Scope::cluster);
	EXPECT_EQ(p.rules[0].fallback, parse_rate("300/s"));
	EXPECT_EQ(p.rules[1].scope, Scope::local);
	EXPECT_EQ(write_policy(p), R"(rules:
  - name: api
    cidr: 10.0.0.0/8
    rate: 900/s
    scope: cluster
    fallback: 300/s
  - name: web
    cidr: 10.1.0.0/16
    rate: 100/s
)");
	EXPECT_NE(parse_error("rules:\n  - {name: a, cidr: 10.0.0.0/8, rate: 9/s, scope: global}\n")
			  .find("unknown scope 'global': use local or cluster"),
		  std::string::npos);
	EXPECT_NE(parse_error("rules:\n  - {name: a, cidr: 10.0.0.0/8, rate: 9/s, scope: cluster, fallback: 10/s}\n")
			  .find("is above the rule's --rate"),
		  std::string::npos);
	EXPECT_NE(parse_error("rules:\n  - {name: a, cidr: 10.0.0.0/8, rate: 9/s, fallback: 1/s}\n")
			  .find("--fallback applies to --scope cluster rules"),
		  std::string::npos);
}

// A policy that holds no rule and no interface would remove every rule and
// detach every interface: plan_apply (so --check, --diff and apply) refuses
// it, with one line, before it looks at the host, unless it is allowed.
// Every way of writing "nothing" is refused; anything in it is not.
TEST(PolicyApply, APolicyOfNothingIsRefusedUnlessAllowed)
{
	Instance nowhere("/nonexistent/sluice-unit-pins"); // nothing loaded; never written
	for (const char *text : {"rules:\n", "rules: []\n", "interfaces: []\nrules: []\n", "interfaces:\nrules:\n",
				 "tables:\n  max_rules: 100\nrules: []\n", "interfaces:\n#  - name: eth0\nrules:\n"}) {
		Policy p = parse(text);
		try {
			plan_apply(nowhere, p);
			ADD_FAILURE() << "accepted:\n" << text;
		} catch (const Error &e) {
			std::string what = e.what();
			EXPECT_EQ(what.find('\n'), std::string::npos) << what;
			EXPECT_NE(what.find("no rules and no interfaces"), std::string::npos) << what;
			EXPECT_NE(what.find("--allow-empty"), std::string::npos) << what;
		}
		ApplyPlan allowed = plan_apply(nowhere, p, ApplyOptions{.allow_empty = true});
		EXPECT_TRUE(allowed.load) << "allowed, it loads an empty program: " << text;
		EXPECT_TRUE(allowed.rules.empty());
	}
	// One rule is not nothing.
	EXPECT_NO_THROW(plan_apply(nowhere, parse("rules: [{name: a, cidr: 10.0.0.0/8, rate: 5/s}]\n")));
}

// ---- Exact round trips, over generated policies: every key and default,
// both families, every `per` length, every action and algorithm.

namespace {

/// Random rules of every kind, each valid on its own (validate_rule), with
/// distinct names and selectors. Every `per` length of both families is
/// dealt out in turn; the other keys are drawn.
class PolicyGenerator {
public:
	explicit PolicyGenerator(uint64_t seed) : rng_(seed) {}

	/// The next rule; `per` is -1 (the default) or a length the caller
	/// wants covered (the rule is then a limit rule of that family).
	RuleSpec next(int family, int per)
	{
		for (;;) {
			RuleSpec s = draw(family, per);
			try {
				validate_rule(s);
			} catch (const Error &) {
				continue; // a combination the checks refuse: draw again
			}
			bool taken = false;
			for (const auto &t : taken_)
				taken = taken || same_selector(t, s);
			if (taken)
				continue;
			// Layered rules that cover one address are bounded: keep few.
			if (s.layered && ++layered_ > 8)
				s.layered = false;
			taken_.push_back(s);
			s.burst = burst_written_ ? s.burst : 0; // as written: validate_rule's fill left to the reader
			s.ban.after = ban_after_written_ ? s.ban.after : 0; // likewise the default threshold
			return s;
		}
	}

	Policy policy(size_t rules)
	{
		Policy p;
		taken_.clear();
		layered_ = 0;
		// Address sets of either family, empty ones too, nested prefixes
		// and all; rules draw them in place of a CIDR.
		sets_.clear();
		for (size_t n = pick(4); sets_.size() < n;) {
			PolicySet ps;
			ps.name = "s" + std::to_string(serial_++);
			ps.set.family = pick(2) ? 6 : 4;
			for (size_t k = pick(12); k > 0; k--) {
				Cidr c;
				c.family = ps.set.family;
				c.prefix_len = static_cast<int>(pick(c.max_len() + 1));
				for (size_t i = 0; i < (c.family == 4 ? 4u : 16u); i++)
					c.addr[i] = static_cast<uint8_t>(pick(4)); // few distinct: they nest
				mask_address(c.addr, c.prefix_len);
				ps.set.prefixes.push_back(c);
			}
			normalize(ps.set.prefixes);
			sets_.push_back(ps);
		}
		p.sets = sets_;
		for (size_t i = 0; i < rules; i++) {
			int family = pick(2) ? 6 : 4;
			int per = pick(3) ? -1 : static_cast<int>(pick(family == 4 ? 33 : 129));
			p.rules.push_back(next(family, per));
		}
		if (pick(2))
			p.interfaces.push_back({"eth" + std::to_string(pick(10)), pick(2) ? XdpMode::generic : XdpMode::native});
		p.tables.max_rules = pick(2) ? 0 : 256u << pick(4);
		p.tables.max_sources = pick(2) ? 0 : 4096u << pick(4);
		p.tables.max_log_sources = pick(2) ? 0 : 1024u << pick(4);
		p.tables.max_v6_prefixes = pick(2) ? 0 : 1000u << pick(10);
		return p;
	}

	uint64_t pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

private:
	RuleSpec draw(int family, int per)
	{
		static const char *const RATES[] = {"100/s", "0.5/s",  "6000/min", "10mbit", "1MB/s",  "1.25MB/s",
						    "100/10s", "64kB/s", "1/h",      "3/min",  "20/s",   "1gbit",
						    "5000/s",  "40/10s", "2kB/s",    "250/s"};
		static const Algo ALGOS[] = {Algo::token_bucket, Algo::gcra, Algo::fixed_window, Algo::sliding_log,
					     Algo::sliding_window};
		RuleSpec s;
		s.name = "r" + std::to_string(serial_++);
		int max = family == 4 ? 32 : 128;
		int len = static_cast<int>(pick(static_cast<uint64_t>(per >= 0 ? per : max) + 1));
		s.cidr.family = family;
		s.cidr.prefix_len = len;
		for (size_t i = 0; i < (family == 4 ? 4u : 16u); i++)
			s.cidr.addr[i] = static_cast<uint8_t>(pick(256));
		mask_address(s.cidr.addr, len);
		for (const auto &ps : sets_)
			if (ps.set.family == family && pick(3) == 0) {
				s.set = ps.name;
				resolve_set_family(s, family);
			}
		s.action = per >= 0 || pick(5) < 3 ? Action::limit : pick(2) ? Action::allow : Action::deny;
		if (pick(3) == 0) {
			s.proto = pick(2) ? Proto::tcp : Proto::udp;
			if (pick(2)) {
				uint16_t lo = static_cast<uint16_t>(pick(65536));
				s.dport = {lo, pick(2) ? lo : static_cast<uint16_t>(lo + pick(65536 - lo))};
			}
			if (pick(3) == 0) {
				uint16_t lo = static_cast<uint16_t>(pick(65536));
				s.sport = {lo, pick(2) ? lo : static_cast<uint16_t>(lo + pick(65536 - lo))};
			}
		} else if (pick(6) == 0) {
			s.proto = Proto::icmp;
		}
		// TCP flags, with --proto tcp or without (a flag selector says TCP):
		// --syn, or any mask (all of them at times) and a value within it.
		if ((s.proto == Proto::any || s.proto == Proto::tcp) && pick(4) == 0) {
			if (pick(3) == 0) {
				s.tcp_flags = SYN_ONLY;
			} else {
				uint8_t mask = pick(5) == 0 ? 0xff : static_cast<uint8_t>(1 + pick(255));
				uint8_t value = pick(5) == 0 ? 0 : static_cast<uint8_t>(pick(256) & mask);
				s.tcp_flags = {mask, value};
			}
		}
		s.shadow = s.action != Action::allow && pick(4) == 0;
		burst_written_ = false;
		ban_after_written_ = false;
		if (s.action != Action::limit)
			return s;
		s.rate = parse_rate(RATES[pick(std::size(RATES))]);
		s.algo = ALGOS[pick(std::size(ALGOS))];
		s.per_prefix = per;
		if (per < 0 && pick(4) == 0)
			s.per_prefix = s.default_bucket_prefix(); // the default, written out
		if (s.has_burst() && pick(2)) {
			burst_written_ = true;
			uint64_t least = min_burst(s.rate);
			s.burst = least * (1 + pick(400));
		}
		if (s.algo == Algo::token_bucket && pick(3) == 0)
			s.warmup_ns = (pick(2) ? 1500 : 30000) * 1000000ULL;
		s.layered = pick(6) == 0;
		if (!s.shadow && pick(4) == 0) {
			static const uint64_t BANS[] = {1, 90, 600, 3600, 86400};
			s.ban.ns = BANS[pick(std::size(BANS))] * 1000000000ULL;
			ban_after_written_ = pick(3) != 0;
			s.ban.after = static_cast<uint32_t>(ban_after_written_ ? 1 + pick(20) : 0);
		}
		if (s.has_burst() && !s.warmup_ns && pick(4) == 0) {
			s.scope = Scope::cluster;
			if (pick(2))
				s.fallback = {std::max<uint64_t>(s.rate.amount / (2 + pick(4)), 1), s.rate.period_ns,
					      s.rate.unit};
		}
		return s;
	}

	std::mt19937_64 rng_;
	std::vector<PolicySet> sets_;
	std::vector<RuleSpec> taken_;
	uint32_t serial_ = 0;
	size_t layered_ = 0;
	bool burst_written_ = false;
	bool ban_after_written_ = false;
};

/// `apply` into a table that holds nothing, then `export`: the rules as the
/// maps hold them, written out.
struct Applied {
	std::vector<InstalledRule> rules;
	std::string text;
};

Applied apply_then_export(const Policy &p)
{
	Policy out = p;
	Applied a;
	SetContents sets = policy_sets(p);
	a.rules = Transaction::prepared_rules(*Transaction::prepare_empty(p.rules, {4096, 4096}, &sets));
	out.rules.clear();
	for (const auto &r : a.rules)
		out.rules.push_back(r.spec);
	a.text = write_policy(out);
	return a;
}

/// The data plane's entries of a rule: what runs (its ids aside: a file
/// read in another order numbers its rules otherwise).
std::string effective(const InstalledRule &r)
{
	struct sluice_rule dp = to_datapath(r);
	struct sluice_rule_info info = to_info(r);
	dp.id = 0;
	info.rule_id = 0;
	return std::string(reinterpret_cast<const char *>(&dp), sizeof(dp)) +
	       std::string(reinterpret_cast<const char *>(&info), sizeof(info));
}

} // namespace

TEST(PolicyRoundTrip, ExportApplyExportIsExactOverGeneratedPolicies)
{
	PolicyGenerator gen(0x5eed2025);
	std::set<std::pair<int, int>> pers;         // family, per length covered
	std::set<std::tuple<int, int, int>> kinds; // action, algo, unit
	std::set<std::string> selectors;           // the selector kinds covered
	std::set<std::pair<bool, bool>> bans;      // a ban, its threshold written
	size_t checked = 0, on_sets = 0;
	auto check = [&](const Policy &p) {
		Applied first = apply_then_export(p);
		Policy read = parse(first.text);
		Applied second = apply_then_export(read);
		ASSERT_EQ(second.text, first.text) << "export -> apply -> export changed the file";
		EXPECT_EQ(read.sets, p.sets) << "the sets read back otherwise:\n" << first.text;
		for (const auto &r : first.rules)
			on_sets += !r.spec.set.empty();
		ASSERT_EQ(second.rules.size(), first.rules.size());
		for (size_t i = 0; i < first.rules.size(); i++) {
			EXPECT_EQ(effective(second.rules[i]), effective(first.rules[i]))
				<< "rule " << first.rules[i].spec.name << " runs otherwise after the round trip:\n"
				<< first.text;
			EXPECT_EQ(second.rules[i].spec, first.rules[i].spec);
		}
		for (const auto &s : p.rules)
			bans.insert({s.ban.ns != 0, s.ban.after != 0});
		// What was applied is what the file asked for, rule by rule.
		std::vector<RuleSpec> asked = p.rules;
		for (auto &s : asked)
			validate_rule(s);
		for (const auto &r : first.rules) {
			auto it = std::find_if(asked.begin(), asked.end(),
					       [&](const RuleSpec &s) { return s.name == r.spec.name; });
			ASSERT_NE(it, asked.end());
			EXPECT_TRUE(same_spec(*it, r.spec)) << describe_rule(*it) << " ran as " << describe_rule(r.spec);
			EXPECT_EQ(effective(InstalledRule{r.id, r.slot, *it}), effective(r)) << describe_rule(*it);
			if (it->action == Action::limit)
				pers.insert({it->cidr.family, it->per_prefix < 0 ? -1 : it->per_prefix});
			kinds.insert({int(it->action), it->action == Action::limit ? int(it->algo) : -1,
				      it->action == Action::limit ? int(it->rate.unit) : -1});
			if (!it->sport.any())
				selectors.insert(it->sport.lo == it->sport.hi ? "sport" : "sport range");
			if (it->tcp_flags == SYN_ONLY)
				selectors.insert("syn");
			else if (it->tcp_flags.mask == 0xff)
				selectors.insert("flags all=");
			else if (!it->tcp_flags.any())
				selectors.insert(it->tcp_flags.value ? "flags" : "flags =none");
			if (!it->tcp_flags.any() && !it->dport.any() && !it->sport.any())
				selectors.insert("flags dport sport");
		}
		// `apply --diff` of the export over what runs: nothing to do.
		std::vector<RuleSpec> running;
		for (const auto &r : first.rules)
			running.push_back(r.spec);
		EXPECT_EQ(format_diff(diff_rules(running, read.rules)), "no changes\n") << first.text;
		checked += p.rules.size();
	};

	// Every per length of both families, each in a rule of its own kind.
	for (int family : {4, 6}) {
		Policy p;
		for (int per = 0; per <= (family == 4 ? 32 : 128); per++)
			p.rules.push_back(gen.next(family, per));
		check(p);
	}
	for (int round = 0; round < 300; round++)
		check(gen.policy(1 + gen.pick(24)));

	for (int family : {4, 6})
		for (int per = 0; per <= (family == 4 ? 32 : 128); per++)
			EXPECT_TRUE(pers.count({family, per})) << "IPv" << family << " per " << per << " never generated";
	EXPECT_TRUE(pers.count({4, -1}) && pers.count({6, -1}));
	// Every algorithm in every unit it takes (token bucket and GCRA: packets,
	// bytes, bits; the windows: packets, bytes; the sliding log: packets),
	// and allow and deny.
	EXPECT_EQ(kinds.size(), 3u + 3u + 2u + 2u + 1u + 2u);
	EXPECT_EQ(selectors, (std::set<std::string>{"sport", "sport range", "syn", "flags all=", "flags",
						    "flags =none", "flags dport sport"}));
	EXPECT_EQ(bans.size(), 3u) << "rules without a ban, with one, with one and its threshold";
	EXPECT_GT(checked, 3000u);
	EXPECT_GT(on_sets, 300u) << "rules on address sets";
}

// ---- The two YAML readers (policy_doc.h): libyaml, and yaml-cpp where
// libyaml refuses. Generated documents, in every form and with damage,
// read into the same nodes at the same lines as yaml-cpp alone reads them,
// or fail with yaml-cpp's message at yaml-cpp's line.

namespace {

/// Nodes with their lines; an alias is the node it names, so a document can
/// hold a cycle (`&a [*a]`): each reading stops after the same nodes.
std::string dump_node(const yaml::Doc &d, uint32_t n, int &budget)
{
	if (--budget < 0)
		return "...";
	std::string s = std::to_string(d.line(n)) + ":";
	switch (d.kind(n)) {
	case yaml::Kind::null:
		return s + "~";
	case yaml::Kind::scalar:
		return s + "'" + std::string(d.scalar(n)) + "'";
	case yaml::Kind::list:
		s += "[";
		for (uint32_t i = 0; i < d.size(n); i++)
			s += dump_node(d, d.item(n, i), budget) + ",";
		return s + "]";
	case yaml::Kind::map:
		s += "{";
		for (uint32_t i = 0; i < d.size(n); i++)
			s += dump_node(d, d.key(n, i), budget) + "=" + dump_node(d, d.value(n, i), budget) + ",";
		return s + "}";
	}
	return s;
}

/// A reading as text: every document's nodes with their lines, or the error.
std::string reading(const std::string &text, void (*parse)(std::string_view, yaml::Doc &))
{
	yaml::Doc doc;
	try {
		parse(text, doc);
	} catch (const yaml::SyntaxError &e) {
		return "error at " + std::to_string(e.line) + ": " + e.message;
	}
	std::string s;
	int budget = 10000;
	for (uint32_t root : doc.roots())
		s += dump_node(doc, root, budget) + " | ";
	return s;
}

/// A policy in a random mix of YAML's forms.
std::string random_yaml_policy(std::mt19937 &rng)
{
	auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
	const char *keys[] = {"name", "cidr", "rate", "burst", "action", "per", "shadow", "~", "null", "\"k\"", "'q'"};
	const char *values[] = {"a", "10.0.0.0/8", "5/s", "100", "deny", "true", "\"x\\ty\"", "'it''s'", "~", "null",
				"Null", "\"null\"", "!!str 7", "!!null", "! z", "\"\"", "''", "a b  c", "# no", "x # c"};
	auto value = [&](const std::string &indent) -> std::string {
		switch (pick(12)) {
		case 0:
			return "";
		case 1:
			return "\n" + indent + "  " + values[pick(20)];
		case 2:
			return " >-\n" + indent + "  one\n" + indent + "  two";
		case 3:
			return " |\n" + indent + "  one\n" + indent + "\n" + indent + "  two";
		case 4:
			return " &v" + std::to_string(pick(3)) + " " + values[pick(20)];
		case 5:
			return " *v" + std::to_string(pick(3));
		case 6:
			return " [a, b, ]";
		case 7:
			return " {a: 1, b, c: }";
		case 8:
			return " &e";
		default:
			return std::string(" ") + values[pick(20)];
		}
	};
	std::string out;
	if (pick(4) == 0)
		out += "---\n";
	if (pick(4) == 0)
		out += "# a comment\n";
	out += "tables:\n  max_rules: 100\n";
	out += pick(5) == 0 ? "rules:\n" : "rules:\n";
	const bool indentless = pick(3) == 0;
	const std::string item = indentless ? "- " : "  - ", inner = indentless ? "  " : "    ";
	for (int r = pick(5); r >= 0; r--) {
		switch (pick(8)) {
		case 0:
			out += item + "{name: r" + std::to_string(r) + ", cidr: 10.0.0.0/8,\n" + inner + "rate: 5/s}\n";
			break;
		case 1:
			out += item.substr(0, item.size() - 1) + "\n";
			break;
		case 2:
			out += item + "&r" + std::to_string(r) + " name: a\n";
			break;
		default: {
			int fields = 1 + pick(4);
			for (int f = 0; f < fields; f++) {
				out += (f == 0 ? item : inner) + keys[pick(11)] + ":" + value(inner) + "\n";
				if (pick(10) == 0)
					out += "\n";
			}
		}
		}
	}
	if (pick(5) == 0)
		out += "interfaces:\n";
	if (pick(6) == 0)
		out += "...\n";
	if (pick(8) == 0)
		out += "--- {rules: []}\n";
	if (pick(6) == 0) { // CRLF
		std::string crlf;
		for (char c : out)
			crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
		out = crlf;
	}
	return out;
}

} // namespace

/// Whether libyaml reads `text` itself (1), hands it to yaml-cpp (0), or
/// refuses it (-1, and `error` is the SyntaxError).
int libyaml_verdict(const std::string &text, yaml::SyntaxError &error)
{
	yaml::Doc doc;
	try {
		return yaml::parse_with_libyaml(text, doc) ? 1 : 0;
	} catch (const yaml::SyntaxError &e) {
		error = e;
		return -1;
	}
}

bool one_line_naming_the_file_and_a_line(const std::string &message)
{
	static const std::regex re("sluice\\.yaml line [1-9][0-9]*: [^\n]+");
	return std::regex_match(message, re);
}

TEST(PolicyParsers, LibyamlReadsAsYamlCppReads)
{
	std::mt19937 rng(20261127);
	int by_libyaml = 0, refused = 0, cases = 0;
	for (int i = 0; i < 4000; i++) {
		std::string text = random_yaml_policy(rng);
		if (i % 2) { // damage: a byte changed, or the text cut short
			static const char bytes[] = ":-[]{},&*!|>'\"#?\t \n%@`";
			size_t at = rng() % (text.size() + 1);
			if (rng() % 2)
				text.insert(at, 1, bytes[rng() % (sizeof bytes - 1)]);
			else
				text.resize(at);
		}
		cases++;
		yaml::SyntaxError error;
		int verdict = libyaml_verdict(text, error);
		if (verdict < 0) {
			// Refused by libyaml, never handed to yaml-cpp: one line, the
			// file, a line of it.
			refused++;
			EXPECT_GE(error.line, 0) << text;
			std::string message = parse_error(text);
			EXPECT_TRUE(one_line_naming_the_file_and_a_line(message)) << message << "\n" << text;
			continue;
		}
		by_libyaml += verdict;
		ASSERT_EQ(reading(text, yaml::parse_document), reading(text, yaml::parse_with_yaml_cpp)) << text;
	}
	// Many are read by libyaml itself (half are damaged), and many refused,
	// so the comparison above is of two readers, and both cases are seen.
	EXPECT_GT(by_libyaml, cases / 4);
	EXPECT_GT(refused, cases / 20);
}

// A stray ',', ']' or '}' (on which yaml-cpp 0.7 allocates without bound)
// is refused at once with libyaml's error, on the line it is on.
TEST(PolicyParsers, StrayFlowIndicatorsAreRefusedQuicklyOnTheirLine)
{
	const std::vector<std::string> lines = {"tables:", "  max_rules: 100", "rules:", "  - name: a",
						"    cidr: 10.0.0.0/8", "    rate: 5/s", "  - name: b",
						"    cidr: 10.1.0.0/16", "    action: deny", "interfaces:", "  - eth0"};
	int cases = 0;
	for (char stray : {',', ']', '}'})
		for (size_t at = 0; at < lines.size(); at++)
			for (int where = 0; where < 3; where++) { // before the indent, after it, after ': '
				std::string text;
				for (size_t l = 0; l < lines.size(); l++) {
					std::string line = lines[l];
					if (l == at) {
						size_t indent = line.find_first_not_of(' '), colon = line.find(": ");
						if (where == 2 && colon == std::string::npos) // "key:" or "- item"
							line += line.back() == ':' ? " " : "";
						size_t pos = where == 0 ? 0
							   : where == 1 ? indent
							   : colon != std::string::npos ? colon + 2
							   : line.back() == ' ' ? line.size()
										  : indent + 2;
						line.insert(pos, 1, stray);
					}
					text += line + "\n";
				}
				for (std::string t : {text, text.substr(0, text.size() - 1)}) { // last line ended or not
					cases++;
					auto start = std::chrono::steady_clock::now();
					std::string message = parse_error(t);
					double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
					EXPECT_TRUE(one_line_naming_the_file_and_a_line(message)) << message << "\n" << t;
					EXPECT_EQ(message.rfind("sluice.yaml line " + std::to_string(at + 1) + ": ", 0), 0u)
						<< message << "\n" << t;
					EXPECT_LT(seconds, 1.0) << t;
				}
			}
	for (const char *t : {",tables:\n", ",tables:", "]\n", "}", "rules: [a, b]]\n", "rules: {a: 1}}\n"}) {
		cases++;
		auto start = std::chrono::steady_clock::now();
		std::string message = parse_error(t);
		EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0) << t;
		EXPECT_EQ(message.rfind("sluice.yaml line 1: ", 0), 0u) << message << "\n" << t;
	}
	EXPECT_EQ(cases, 3 * 11 * 3 * 2 + 6);
}
