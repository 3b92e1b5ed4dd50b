// SPDX-License-Identifier: GPL-2.0-only
// `rule import` lines: `rule add` argument lists, parsed by the library.
#include <gtest/gtest.h>

#include <sstream>

#include "error.h"
#include "rate.h"
#include "rule.h"
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

// --ban and --warmup take a duration within a range, and refuse one outside
// it, however far, with one line naming the range ("--ban 400day" was
// refused as "period '400day' is out of range": bans of 14 days to a year
// could not be given at all). Generated values in each unit, either side of
// both ends and in powers of ten, against the range computed here.
TEST(RuleLine, ADurationOutsideItsRangeIsRefusedWithTheRange)
{
	using u128 = unsigned __int128;
	EXPECT_EQ(BanSpec::RANGE.text(), "1s to 366day");
	EXPECT_EQ(WARMUP_RANGE.text(), "1ms to 1day");
	struct Option {
		std::string flag, rest;
		DurationRange range;
	};
	const std::pair<const char *, uint64_t> units[] = {
		{"ms", 1000000ULL}, {"s", 1000000000ULL}, {"min", 60000000000ULL}, {"h", 3600000000000ULL},
		{"day", 86400000000000ULL}};
	int accepted = 0, refused = 0;
	for (const Option &o : {Option{"--ban", "--rate 5/min", BanSpec::RANGE},
				Option{"--warmup", "--rate 100/s --burst 100", WARMUP_RANGE}}) {
		for (auto [unit, unit_ns] : units) {
			std::vector<uint64_t> counts;
			for (uint64_t edge : {o.range.min_ns / unit_ns, o.range.max_ns / unit_ns})
				for (uint64_t c = edge > 2 ? edge - 2 : 1; c <= edge + 2; c++)
					counts.push_back(c);
			for (uint64_t p = 1; p <= 1000000000000ULL; p *= 10)
				counts.push_back(p);
			for (uint64_t c : counts) {
				std::string given = std::to_string(c) + unit;
				u128 ns = static_cast<u128>(c) * unit_ns;
				std::string got;
				try {
					auto spec = parse_rule_line("10.0.0.0/8 " + o.rest + " " + o.flag + " " + given);
					validate_rule(*spec);
					got = "takes " + std::to_string(o.flag == "--ban" ? spec->ban.ns : spec->warmup_ns);
				} catch (const Error &e) {
					got = e.what();
				}
				std::string want;
				if (ns < o.range.min_ns || ns > o.range.max_ns)
					want = o.flag + " " + given + " is out of range (" + o.range.text() + ")";
				else if (o.flag == "--ban" && ns % 1000000000ULL)
					want = "--ban " + format_duration(uint64_t(ns)) + " is not a whole number of seconds";
				else
					want = "takes " + std::to_string(uint64_t(ns));
				EXPECT_EQ(got, want) << o.flag << " " << given;
				(want.rfind("takes", 0) == 0 ? accepted : refused)++;
			}
		}
	}
	EXPECT_GT(accepted, 20);
	EXPECT_GT(refused, 20);
}
