// SPDX-License-Identifier: GPL-2.0-only
// Parsing what operators type: prefixes, rates, ports, counts.
#include <gtest/gtest.h>

#include <algorithm>

#include "error.h"
#include "net.h"
#include "rate.h"
#include "rule.h"

using namespace sluice;

TEST(Cidr, ParsesIpv4AndIpv6Prefixes)
{
	Cidr c = parse_cidr("203.0.113.0/24");
	EXPECT_EQ(c.family, 4);
	EXPECT_EQ(c.prefix_len, 24);
	EXPECT_EQ(format_cidr(c), "203.0.113.0/24");

	Cidr h = parse_cidr("198.51.100.7");
	EXPECT_EQ(h.prefix_len, 32);
	EXPECT_EQ(format_cidr(h), "198.51.100.7");

	Cidr v6 = parse_cidr("2001:db8::/32");
	EXPECT_EQ(v6.family, 6);
	EXPECT_EQ(v6.prefix_len, 32);
	EXPECT_EQ(format_cidr(v6), "2001:db8::/32");
	EXPECT_EQ(parse_cidr("::/0").prefix_len, 0);
}

TEST(Cidr, RejectsMalformedInputWithAReason)
{
	EXPECT_THROW(parse_cidr("203.0.113.0/33"), Error);
	EXPECT_THROW(parse_cidr("2001:db8::/129"), Error);
	EXPECT_THROW(parse_cidr("203.0.113/24"), Error);
	EXPECT_THROW(parse_cidr("10.0.0.0/"), Error);
	EXPECT_THROW(parse_cidr("10.0.0.0/-1"), Error);
	EXPECT_THROW(parse_cidr("banana"), Error);
	try {
		parse_cidr("10.1.2.3/8");
		FAIL() << "host bits accepted";
	} catch (const Error &e) {
		EXPECT_NE(std::string(e.what()).find("did you mean 10.0.0.0/8"), std::string::npos) << e.what();
	}
	try {
		parse_cidr("10.0.0.0/40");
		FAIL();
	} catch (const Error &e) {
		EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
	}
}

TEST(Cidr, RejectsBytesAfterANul)
{
	// inet_pton stops at a NUL: everything after it was silently ignored.
	using namespace std::string_view_literals;
	EXPECT_THROW(parse_cidr("10.0.0.1\0junk"sv), Error);
	EXPECT_THROW(parse_cidr("2001:db8::\0\0" "1/64"sv), Error);
	EXPECT_THROW(parse_cidr("10.0.0.0\0/8"sv), Error);
}

TEST(Cidr, APrefixLengthIsDigitsOnly)
{
	// "-0" read as 0: '::/-0' was the whole IPv6 space.
	EXPECT_THROW(parse_cidr("::/-0"), Error);
	EXPECT_THROW(parse_cidr("10.0.0.0/-0"), Error);
	EXPECT_THROW(parse_cidr("10.0.0.0/+8"), Error);
	EXPECT_EQ(parse_cidr("10.0.0.0/08").prefix_len, 8);
}

TEST(Cidr, Containment)
{
	EXPECT_TRUE(cidr_contains(parse_cidr("10.0.0.0/8"), parse_cidr("10.1.0.0/16")));
	EXPECT_TRUE(cidr_contains(parse_cidr("0.0.0.0/0"), parse_cidr("192.0.2.1")));
	EXPECT_FALSE(cidr_contains(parse_cidr("10.1.0.0/16"), parse_cidr("10.0.0.0/8")));
	EXPECT_FALSE(cidr_contains(parse_cidr("10.0.0.0/8"), parse_cidr("::/0")));
}

TEST(Rate, ParsesPacketRatesWithPeriods)
{
	EXPECT_EQ(parse_rate("100/s"), (Rate{100, 1000000000ULL, RateUnit::packets}));
	EXPECT_EQ(parse_rate("6000/min"), (Rate{6000, 60000000000ULL, RateUnit::packets}));
	EXPECT_EQ(parse_rate("100/10s"), (Rate{100, 10000000000ULL, RateUnit::packets}));
	EXPECT_EQ(parse_rate("5/minute"), (Rate{5, 60000000000ULL, RateUnit::packets}));
	EXPECT_EQ(parse_rate("250pps"), (Rate{250, 1000000000ULL, RateUnit::packets}));
	EXPECT_EQ(parse_rate("1000"), (Rate{1000, 1000000000ULL, RateUnit::packets}));
	EXPECT_EQ(parse_rate("0.5/s"), (Rate{5, 10000000000ULL, RateUnit::packets}));
}

TEST(Rate, ParsesByteAndBitRates)
{
	EXPECT_EQ(parse_rate("1MB/s"), (Rate{1000000, 1000000000ULL, RateUnit::bytes}));
	EXPECT_EQ(parse_rate("10kbit/s"), (Rate{10000, 1000000000ULL, RateUnit::bits}));
	EXPECT_EQ(parse_rate("10mbit"), (Rate{10000000, 1000000000ULL, RateUnit::bits}));
	EXPECT_EQ(parse_rate("1.5KiB/s"), (Rate{1536, 1000000000ULL, RateUnit::bytes}));
	EXPECT_TRUE(parse_rate("1MB/s").counts_bytes());
	EXPECT_TRUE(parse_rate("10kbit/s").counts_bytes());
}

TEST(Rate, FormatsCanonically)
{
	EXPECT_EQ(format_rate(parse_rate("100/s")), "100/s");
	EXPECT_EQ(format_rate(parse_rate("6000/min")), "6000/min");
	EXPECT_EQ(format_rate(parse_rate("100/10s")), "100/10s");
	EXPECT_EQ(format_rate(parse_rate("1MB/s")), "1MB/s");
	EXPECT_EQ(format_rate(parse_rate("1250kB/s")), "1.25MB/s");
	EXPECT_EQ(format_rate(parse_rate("10kbit/s")), "10kbit/s");
	EXPECT_EQ(format_rate(parse_rate("5/h")), "5/h");
}

TEST(Rate, PeriodsBelowAMillisecondFormatToTextThatParses)
{
	// Printed as "1/1500000ns" before, which no parser accepts.
	Rate r = parse_rate("1/1.5ms");
	EXPECT_EQ(format_rate(r), "1/1.5ms");
	EXPECT_EQ(parse_rate(format_rate(r)), r);
	EXPECT_EQ(format_rate(parse_rate("3/0.25ms")), "3/0.25ms");
	EXPECT_EQ(format_rate(parse_rate("1/0.000001ms")), "1/0.000001ms");
	EXPECT_EQ(format_duration(parse_duration_ns("1.5ms", "--warmup")), "1.5ms");
	EXPECT_EQ(format_duration(1500000000ULL), "1500ms");
}

TEST(Rate, LargeByteRatesFormatWithDecimalsTheParserTakes)
{
	// Printed as "1.234567890123TB/2s" before: 12 decimals, the parser takes 9.
	Rate r = parse_rate("1234567890123B/2s");
	EXPECT_EQ(format_rate(r), "1234.567890123GB/2s");
	EXPECT_EQ(parse_rate(format_rate(r)), r);
	EXPECT_EQ(format_rate(parse_rate("1.5TB/2s")), "1.5TB/2s");
	EXPECT_EQ(format_rate(parse_rate("7000000000001bit/s")), "7000.000000001gbit/s");
}

TEST(Rate, RejectsZeroUnknownAndOverflowingRates)
{
	for (const char *bad : {"0/s", "0", "-5/s", "abc", "10/fortnight", "10 /s", "5kb/s", "10/0s",
				"99999999999999999999/s", "2000000000/s", "2TB/s", "", "/s", "10pps/s"}) {
		EXPECT_THROW(parse_rate(bad), Error) << bad;
	}
}

TEST(Rate, CompileRejectsRatesAndBurstsOutsideTheSafeRange)
{
	// One packet a day is fine, a burst holding 1000 days of it is not.
	EXPECT_NO_THROW(compile_limit(parse_rate("1/day"), 100));
	EXPECT_THROW(compile_limit(parse_rate("1/day"), 1000), Error);
	// Bytes: the burst must hold a full-size packet.
	EXPECT_THROW(compile_limit(parse_rate("1MB/s"), 100), Error);
	EXPECT_NO_THROW(compile_limit(parse_rate("1MB/s"), 1500));
	// The fastest accepted rates still compile.
	EXPECT_NO_THROW(compile_limit(parse_rate("1000000000/s"), 1));
	EXPECT_NO_THROW(compile_limit(parse_rate("1TB/s"), 1ULL << 40));
}

TEST(Rate, DefaultBurstIsATenthOfASecondOfPacketsHalfASecondOfBytesWithAFloor)
{
	EXPECT_EQ(default_burst(parse_rate("1000/s")), 100u);
	EXPECT_EQ(default_burst(parse_rate("5/min")), 5u);
	// Byte rates: half a second, so that one TCP flow gets its rate (e2e.TcpThroughAByteLimit).
	EXPECT_EQ(default_burst(parse_rate("1MB/s")), 500000u);
	EXPECT_EQ(default_burst(parse_rate("10mbit")), 625000u);
	EXPECT_EQ(default_burst(parse_rate("100mbit")), 6250000u);
	EXPECT_EQ(default_burst(parse_rate("1mbit")), 62500u);
	EXPECT_EQ(default_burst(parse_rate("10kbit/s")), 1500u);
	EXPECT_EQ(default_burst(parse_rate("6MB/min")), 50000u);
}

TEST(Ports, ParsesSinglePortsAndRanges)
{
	EXPECT_EQ(parse_port_range("80"), (PortRange{80, 80}));
	EXPECT_EQ(parse_port_range("8000-8080"), (PortRange{8000, 8080}));
	EXPECT_EQ(format_ports(parse_port_range("1-65535")), "1-65535");
	EXPECT_EQ(format_ports(PortRange{}), "any");
	for (const char *bad : {"", "http", "65536", "90-80", "-5", "1-", "80,443"})
		EXPECT_THROW(parse_port_range(bad), Error) << bad;
}

TEST(Counts, ParsesBurstsInPacketsOrBytes)
{
	EXPECT_EQ(parse_count("2000", false, "burst"), 2000u);
	EXPECT_EQ(parse_count("64kB", true, "burst"), 64000u);
	EXPECT_THROW(parse_count("64kB", false, "burst"), Error);
	EXPECT_THROW(parse_count("0", false, "burst"), Error);
	EXPECT_THROW(parse_count("x", false, "burst"), Error);
}

namespace {

// The message of the Error that parse() throws; fails the test if none.
template <typename F>
std::string error_of(F &&parse)
{
	try {
		parse();
	} catch (const Error &e) {
		return e.what();
	}
	ADD_FAILURE() << "accepted";
	return {};
}

bool one_printable_line(const std::string &msg)
{
	return std::none_of(msg.begin(), msg.end(), [](char c) {
		return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
	});
}

} // namespace

TEST(Errors, ControlCharactersFromTheInputAreEscapedSoTheMessageIsOneLine)
{
	std::string cidr = error_of([] { parse_cidr("10.0.0.0\n/8"); });
	EXPECT_EQ(cidr, "invalid address '10.0.0.0\\x0a' in '10.0.0.0\\x0a/8'");
	std::string rate = error_of([] { parse_rate("1\x1b[2J/s"); });
	EXPECT_TRUE(one_printable_line(rate)) << rate;
	EXPECT_NE(rate.find("\\x1b[2J"), std::string::npos) << rate;
	std::string port = error_of([] { parse_port_range("80\r"); });
	EXPECT_EQ(port, "invalid port '80\\x0d' in '80\\x0d' (0-65535)");
	// A NUL would end the message early in what().
	std::string nul = error_of([] { parse_rate(std::string_view("5\0x/s", 5)); });
	EXPECT_NE(nul.find("5\\x00x"), std::string::npos) << nul;
	std::string name = error_of([] { check_rule_name("a\tb"); });
	EXPECT_TRUE(one_printable_line(name)) << name;
	// Messages without control characters are unchanged.
	EXPECT_EQ(error_of([] { parse_port_range("90-80"); }), "port range '90-80' is reversed");
}

TEST(Cidr, AnIpv4MappedAddressIsRefusedWithTheIpv4Form)
{
	try {
		parse_cidr("::ffff:10.0.0.1");
		FAIL() << "accepted an address no packet carries";
	} catch (const Error &e) {
		EXPECT_NE(std::string(e.what()).find("write the IPv4 address 10.0.0.1"), std::string::npos) << e.what();
	}
	EXPECT_THROW(parse_cidr("::ffff:10.0.0.0/120"), Error);
	EXPECT_THROW(parse_cidr("::ffff:0:0/96"), Error) << "the whole mapped range";
	EXPECT_NO_THROW(parse_cidr("::/64")) << "a wider prefix is not all mapped";
}

TEST(Duration, ANumberWithoutAUnitIsRefusedClearly)
{
	try {
		parse_duration_ns("10", "--warmup");
		FAIL();
	} catch (const Error &e) {
		EXPECT_STREQ(e.what(), "invalid --warmup '10': a number and a unit (e.g. 30s, 500ms, 2min)");
	}
	EXPECT_EQ(parse_duration_ns("10s", "--warmup"), 10000000000u);
}

TEST(Rate, ADecimalPacketRatePrintsAsWritten)
{
	EXPECT_EQ(format_rate(parse_rate("0.5/s")), "0.5/s");
	EXPECT_EQ(format_rate(parse_rate("2.5/min")), "2.5/min");
	EXPECT_EQ(format_rate(parse_rate("100/10s")), "100/10s") << "a window as written";
	EXPECT_EQ(format_rate(parse_rate("5/10s")), "0.5/s") << "the same rate, read back equal";
	EXPECT_EQ(format_rate(parse_rate("0.25/s")), "0.25/s");
}
