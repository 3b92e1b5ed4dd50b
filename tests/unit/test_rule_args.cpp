// SPDX-License-Identifier: GPL-2.0-only
// `rule import` lines: `rule add` argument lists, parsed by the library.
#include <gtest/gtest.h>

#include <sstream>

#include "error.h"
#include "rule_args.h"

using namespace sluice;

namespace {

std::string import_error(const std::string &text)
{
	std::istringstream in(text);
	try {
		read_rule_lines(in, "rules.txt");
	} catch (const Error &e) {
		return e.what();
	}
	return "(accepted)";
}

} // namespace

TEST(RuleLine, ParsesARuleAddArgumentList)
{
	auto spec = parse_rule_line("198.51.100.0/24 --proto tcp --dport 22 --rate 5/min --name ssh --per 28");
	ASSERT_TRUE(spec);
	EXPECT_EQ(format_cidr(spec->cidr), "198.51.100.0/24");
	EXPECT_EQ(spec->proto, Proto::tcp);
	EXPECT_EQ(spec->dport, (PortRange{22, 22}));
	EXPECT_EQ(spec->rate, parse_rate("5/min"));
	EXPECT_EQ(spec->name, "ssh");
	EXPECT_EQ(spec->per_prefix, 28);

	auto deny = parse_rule_line("\t2001:db8::/32   --deny --shadow  ");
	ASSERT_TRUE(deny);
	EXPECT_EQ(deny->action, Action::deny);
	EXPECT_TRUE(deny->shadow);
}

TEST(RuleLine, SkipsBlankAndCommentLines)
{
	EXPECT_FALSE(parse_rule_line(""));
	EXPECT_FALSE(parse_rule_line("   \t "));
	EXPECT_FALSE(parse_rule_line("# 10.0.0.0/8 --deny"));
	EXPECT_FALSE(parse_rule_line("  #10.0.0.0/8 --deny"));
}

TEST(RuleLine, ATrailingCommentIsNotAnArgument)
{
	auto spec = parse_rule_line("10.0.0.0/8 --deny --name office   # the whole office");
	ASSERT_TRUE(spec);
	EXPECT_EQ(spec->name, "office");
	EXPECT_EQ(spec->action, Action::deny);
}

TEST(RuleLine, ImportErrorsNameTheFileAndLine)
{
	EXPECT_EQ(import_error("10.0.0.0/8 --deny\n10.1.0.0/16 --rate 1/s --burst 0\n"),
		  "rules.txt line 2: burst must be greater than zero");
	EXPECT_EQ(import_error("# only a comment\n\n"), "rules.txt holds no rules");
	EXPECT_EQ(import_error(""), "rules.txt holds no rules");
	EXPECT_EQ(import_error("10.0.0.0/8\n"),
		  "rules.txt line 1: rule add needs one of --rate RATE, --allow or --deny");
	EXPECT_EQ(import_error("10.0.0.0/8 --deny --allow\n").rfind("rules.txt line 1: --allow excludes --deny", 0), 0u)
		<< import_error("10.0.0.0/8 --deny --allow\n");
	EXPECT_EQ(import_error("10.0.0.0/8 --deny --per -1\n"),
		  "rules.txt line 1: --per must be a prefix length of 0 or more");
	EXPECT_EQ(import_error("10.0.0.0/8 --deny\n10.0.0.0/33 --deny\n"),
		  "rules.txt line 2: prefix length 33 is out of range for IPv4 (0-32) in '10.0.0.0/33'");
}

TEST(RuleLine, ReadsEveryRuleInOrder)
{
	std::istringstream in("10.0.0.0/8 --deny\n# skip\n\n192.0.2.7 --allow\r\n10.1.0.0/16 --rate 1MB/s --burst 64kB\n");
	auto specs = read_rule_lines(in, "-");
	ASSERT_EQ(specs.size(), 3u);
	EXPECT_EQ(specs[0].action, Action::deny);
	EXPECT_EQ(specs[1].action, Action::allow);
	EXPECT_EQ(specs[2].burst, 64000u);
}

TEST(RuleLine, ErrorsEscapeControlCharactersFromTheLine)
{
	// From the library's parsers and from CLI11's own messages.
	EXPECT_EQ(import_error("10.0.0.0/8 --rate 1/s --algo tok\x1f" "en\n"),
		  "rules.txt line 1: unknown algorithm 'tok\\x1fen' (use token-bucket, gcra, fixed-window, "
		  "sliding-log or sliding-window)");
	std::string cli = import_error("10.0.0.0/8 --deny --bogus\x1b[2J\n");
	EXPECT_EQ(cli.find('\x1b'), std::string::npos) << cli;
	EXPECT_NE(cli.find("--bogus\\x1b[2J"), std::string::npos) << cli;
}

TEST(RuleLine, ANulInsideAWordIsNotIgnored)
{
	using namespace std::string_literals;
	EXPECT_EQ(import_error("10.0.0.1\0junk --deny\n"s),
		  "rules.txt line 1: invalid address '10.0.0.1\\x00junk' in '10.0.0.1\\x00junk'");
}

TEST(RuleLine, HelpIsNotARuleOption)
{
	// CLI11's help request surfaced as "This should be caught in your main function, see examples".
	EXPECT_EQ(import_error("10.0.0.0/8 --deny --help\n"),
		  "rules.txt line 1: The following argument was not expected: --help");
	EXPECT_EQ(import_error("10.0.0.0/8 -h --deny\n"), "rules.txt line 1: The following argument was not expected: -h");
}
