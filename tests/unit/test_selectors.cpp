// SPDX-License-Identifier: GPL-2.0-only
// Source-port and TCP-flag selectors in user space: how they are written
// (`--sport`, `--syn`, `--tcp-flags`, the policy keys), checked, kept in the
// maps, ordered among a prefix's rules and matched by `explain`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>

#include "error.h"
#include "explain.h"
#include "rule.h"
#include "rule_args.h"

using namespace sluice;

namespace {

std::string error_of(const std::function<void()> &f)
{
	try {
		f();
	} catch (const Error &e) {
		return e.what();
	}
	return "(accepted)";
}

RuleSpec line(const char *text)
{
	auto spec = parse_rule_line(text);
	EXPECT_TRUE(spec) << text;
	validate_rule(*spec);
	return *spec;
}

} // namespace

// Every mask and every value within it: written canonically, read back the
// same; the canonical text reads back to itself.
TEST(TcpFlags, EveryMaskAndValueRoundTripsThroughItsText)
{
	size_t pairs = 0;
	for (unsigned mask = 1; mask < 256; mask++) {
		for (unsigned value = 0; value < 256; value++) {
			if (value & ~mask)
				continue;
			TcpFlags f{uint8_t(mask), uint8_t(value)};
			std::string text = format_tcp_flags(f);
			ASSERT_EQ(parse_tcp_flags(text), f) << text;
			ASSERT_EQ(text.find(' '), std::string::npos) << text;
			pairs++;
		}
	}
	EXPECT_EQ(pairs, 6560u) << "3^8 - 1: each flag in the mask set or clear, or out of it";
	EXPECT_EQ(format_tcp_flags(SYN_ONLY), "syn,ack=syn");
	EXPECT_EQ(format_tcp_flags({}), "any");
	EXPECT_EQ(format_tcp_flags({0xff, 0}), "all=none");
	EXPECT_EQ(format_tcp_flags({0xff, 0x29}), "all=fin,psh,urg");
	// Any case, any order, as iptables and nft write them.
	EXPECT_EQ(parse_tcp_flags("ACK,SYN=SYN"), SYN_ONLY);
	EXPECT_EQ(parse_tcp_flags("rst=rst"), (TcpFlags{SLUICE_TCP_RST, SLUICE_TCP_RST}));
	EXPECT_EQ(parse_tcp_flags("fin,syn,rst,psh,ack,urg,ece,cwr=none"), (TcpFlags{0xff, 0}));
}

TEST(TcpFlags, BadFlagsAreOneClearLine)
{
	EXPECT_EQ(error_of([] { parse_tcp_flags("syn"); }),
		  "TCP flags 'syn' need the form MASK=VALUE, e.g. syn,ack=syn (SYN set, ACK clear)");
	EXPECT_EQ(error_of([] { parse_tcp_flags("syn,ak=syn"); }),
		  "unknown TCP flag 'ak' in 'syn,ak=syn' (fin, syn, rst, psh, ack, urg, ece, cwr, all)");
	EXPECT_EQ(error_of([] { parse_tcp_flags("syn=syn,ack"); }),
		  "TCP flags 'syn=syn,ack': ack in the value but not in the mask, so no packet could match");
	EXPECT_EQ(error_of([] { parse_tcp_flags("none=none"); }),
		  "a TCP flag mask of none in 'none=none' selects nothing: leave --tcp-flags out for any flags");
	EXPECT_EQ(error_of([] { parse_tcp_flags("syn,syn=syn"); }), "TCP flag 'syn' twice in 'syn,syn=syn'");
	EXPECT_EQ(error_of([] { parse_tcp_flags("=syn"); }),
		  "unknown TCP flag '' in '=syn' (fin, syn, rst, psh, ack, urg, ece, cwr, all)");
	EXPECT_EQ(error_of([] { parse_tcp_flags("syn,=syn"); }),
		  "unknown TCP flag '' in 'syn,=syn' (fin, syn, rst, psh, ack, urg, ece, cwr, all)");
}

TEST(TcpFlags, MatchingIsTheMaskedComparisonOverEveryFlagByte)
{
	for (unsigned flags = 0; flags < 256; flags++) {
		EXPECT_EQ(SYN_ONLY.matches(uint8_t(flags)), (flags & 0x12) == 0x02) << flags;
		EXPECT_TRUE(TcpFlags{}.matches(uint8_t(flags)));
	}
}

TEST(SelectorArgs, SynAndTcpFlagsSayTcpAndRefuseAnotherProtocol)
{
	RuleSpec syn = line("0.0.0.0/0 --syn --dport 22 --rate 5/min");
	EXPECT_EQ(syn.proto, Proto::tcp) << "a flag selector is a TCP selector";
	EXPECT_EQ(syn.tcp_flags, SYN_ONLY);
	EXPECT_EQ(syn.dport, (PortRange{22, 22}));
	RuleSpec general = line("0.0.0.0/0 --proto tcp --tcp-flags syn,ack=syn --dport 22 --rate 5/min");
	EXPECT_TRUE(same_spec(syn, general)) << "--syn is --tcp-flags syn,ack=syn";
	EXPECT_TRUE(same_selector(syn, general));

	EXPECT_EQ(error_of([] { line("0.0.0.0/0 --syn --proto udp --deny"); }),
		  "--syn and --tcp-flags select TCP packets, not --proto udp");
	EXPECT_EQ(error_of([] { line("0.0.0.0/0 --tcp-flags rst=rst --proto icmp --deny"); }),
		  "--syn and --tcp-flags select TCP packets, not --proto icmp");
	EXPECT_NE(error_of([] { line("0.0.0.0/0 --syn --tcp-flags rst=rst --deny"); }).find("excludes"),
		  std::string::npos);
}

TEST(SelectorArgs, SourcePortsAsDestinationPorts)
{
	RuleSpec s = line("0.0.0.0/0 --proto udp --sport 11211 --rate 100/s");
	EXPECT_EQ(s.sport, (PortRange{11211, 11211}));
	EXPECT_TRUE(s.dport.any());
	EXPECT_EQ(line("0.0.0.0/0 --proto tcp --sport 1024-65535 --deny").sport, (PortRange{1024, 65535}));
	EXPECT_EQ(error_of([] { line("0.0.0.0/0 --sport 123 --deny"); }), "--sport needs --proto tcp or --proto udp");
	EXPECT_EQ(error_of([] { line("0.0.0.0/0 --proto icmp --sport 123 --deny"); }),
		  "--sport needs --proto tcp or --proto udp");
	EXPECT_EQ(error_of([] { line("0.0.0.0/0 --proto udp --sport 200-100 --deny"); }),
		  "port range '200-100' is reversed");
	EXPECT_EQ(error_of([] { line("0.0.0.0/0 --proto udp --sport 70000 --deny"); }),
		  "invalid port '70000' in '70000' (0-65535)");
}

// Generated selectors survive the maps: the data plane's entry and the
// controller's info give back the rule as written, and a rule without
// selectors has an entry whose selector fields are zero.
TEST(SelectorMaps, GeneratedSelectorsRoundTripThroughTheAbiStructs)
{
	std::mt19937_64 rng(29);
	auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
	for (int i = 0; i < 5000; i++) {
		InstalledRule r;
		r.id = 1 + static_cast<uint32_t>(i);
		r.spec.cidr = parse_cidr(pick(2) ? "10.0.0.0/8" : "2001:db8::/32");
		r.spec.action = pick(2) ? Action::deny : Action::limit;
		if (r.spec.action == Action::limit)
			r.spec.rate = parse_rate("100/s");
		r.spec.proto = pick(2) ? Proto::tcp : Proto::udp;
		if (pick(2)) {
			uint16_t lo = static_cast<uint16_t>(pick(65536));
			r.spec.sport = {lo, static_cast<uint16_t>(lo + pick(65536 - lo))};
		}
		if (r.spec.proto == Proto::tcp && pick(2)) {
			uint8_t mask = static_cast<uint8_t>(1 + pick(255));
			r.spec.tcp_flags = {mask, static_cast<uint8_t>(pick(256) & mask)};
		}
		validate_rule(r.spec);
		struct sluice_rule dp = to_datapath(r);
		EXPECT_EQ(dp.tcp_flags_mask, r.spec.tcp_flags.mask);
		EXPECT_EQ(bool(dp.flags & SLUICE_RULE_SPORT), !r.spec.sport.any());
		RuleSpec back = from_maps(dp, to_info(r)).spec;
		ASSERT_TRUE(same_spec(back, r.spec)) << format_selector(r.spec);
		ASSERT_EQ(back.sport, r.spec.sport);
		ASSERT_EQ(back.tcp_flags, r.spec.tcp_flags);
	}
	InstalledRule plain;
	plain.id = 1;
	plain.spec = line("10.0.0.0/8 --proto tcp --dport 22 --deny");
	struct sluice_rule dp = to_datapath(plain);
	EXPECT_EQ(dp.tcp_flags_mask, 0);
	EXPECT_EQ(dp.tcp_flags_value, 0);
	EXPECT_EQ(dp.sport_lo, 0);
	EXPECT_EQ(dp.sport_hi, 0);
	EXPECT_FALSE(dp.flags & SLUICE_RULE_SPORT);
	RuleSpec back = from_maps(dp, to_info(plain)).spec;
	EXPECT_TRUE(back.sport.any());
	EXPECT_TRUE(back.tcp_flags.any());
	EXPECT_TRUE(same_spec(back, plain.spec));
}

// At one prefix and destination port: a narrower source port first, then a
// flag selector (more flags first), then the protocol alone.
TEST(SelectorOrder, NarrowerSelectorsComeFirst)
{
	auto installed = [](uint32_t id, const char *text) {
		InstalledRule r;
		r.id = id;
		r.slot = id;
		r.spec = line(text);
		return r;
	};
	std::vector<InstalledRule> rules = {
		installed(1, "10.0.0.0/8 --proto tcp --dport 22 --rate 100/s"),
		installed(2, "10.0.0.0/8 --syn --dport 22 --rate 5/min"),
		installed(3, "10.0.0.0/8 --tcp-flags rst=rst --dport 22 --deny"),
		installed(4, "10.0.0.0/8 --proto tcp --dport 22 --sport 1024-65535 --rate 100/s"),
		installed(5, "10.0.0.0/8 --proto tcp --dport 22 --sport 2222 --deny"),
		installed(6, "10.0.0.0/8 --proto tcp --rate 100/s"),
	};
	std::sort(rules.begin(), rules.end(), match_order);
	std::vector<uint32_t> ids;
	for (const auto &r : rules)
		ids.push_back(r.id);
	EXPECT_EQ(ids, (std::vector<uint32_t>{5, 4, 2, 3, 1, 6}));
}

// explain reads the packet's source port and flags, and matches as the
// program does: a selector the packet does not show may match.
TEST(SelectorExplain, SourcePortAndFlagsAreMatchedOrUnknown)
{
	auto walk = [](const std::vector<const char *> &texts, ExplainPacket p) {
		std::vector<InstalledRule> rules;
		uint32_t id = 1;
		for (const char *t : texts) {
			InstalledRule r;
			r.id = r.slot = id++;
			r.spec = line(t);
			r.spec.name = "r" + std::to_string(r.id);
			rules.push_back(r);
		}
		RuleWalk w = walk_rules(rules, p);
		std::string out;
		for (const auto &c : w.candidates)
			out += c.rule.spec.name + ":" + std::string(role_key(c.role)) + " ";
		return out;
	};
	const std::vector<const char *> rules = {"0.0.0.0/0 --syn --dport 22 --rate 5/min",
						 "0.0.0.0/0 --proto tcp --dport 22 --rate 1000/s"};
	auto pkt = [](std::optional<long> sport, const char *flags) {
		ExplainPacket p = make_explain_packet("192.0.2.1", "tcp", 22, std::nullopt);
		add_explain_l4(p, sport, flags);
		return p;
	};
	EXPECT_EQ(walk(rules, pkt(40000, "syn")), "r1:decides r2:not_reached ");
	EXPECT_EQ(walk(rules, pkt(40000, "ack")), "r1:no_match r2:decides ");
	EXPECT_EQ(walk(rules, pkt(40000, "syn,ack")), "r1:no_match r2:decides ");
	EXPECT_EQ(walk(rules, pkt(std::nullopt, "")), "r1:unknown r2:decides ") << "flags unknown: may match";

	const std::vector<const char *> amp = {"0.0.0.0/0 --proto udp --sport 11211 --deny",
					       "0.0.0.0/0 --proto udp --rate 1000/s"};
	auto udp = [](std::optional<long> sport) {
		ExplainPacket p = make_explain_packet("192.0.2.1", "udp", 5000, std::nullopt);
		add_explain_l4(p, sport, "");
		return p;
	};
	EXPECT_EQ(walk(amp, udp(11211)), "r1:decides r2:not_reached ");
	EXPECT_EQ(walk(amp, udp(11212)), "r1:no_match r2:decides ");
	EXPECT_EQ(walk(amp, udp(std::nullopt)), "r1:unknown r2:decides ") << "source port unknown: may match";

	ExplainPacket p = make_explain_packet("192.0.2.1", "", std::nullopt, std::nullopt);
	add_explain_l4(p, std::nullopt, "syn");
	EXPECT_EQ(p.proto, SLUICE_PROTO_TCP) << "flags say TCP";
	EXPECT_EQ(describe_packet(pkt(40000, "syn")), "192.0.2.1, tcp port 22 from port 40000, flags syn, 1500 bytes");
	EXPECT_EQ(error_of([] {
			  ExplainPacket q = make_explain_packet("192.0.2.1", "udp", 53, std::nullopt);
			  add_explain_l4(q, std::nullopt, "syn");
		  }),
		  "--syn and --tcp-flags describe a TCP packet, not --proto udp");
	EXPECT_EQ(error_of([] {
			  ExplainPacket q = make_explain_packet("192.0.2.1", "", std::nullopt, std::nullopt);
			  add_explain_l4(q, 53, "");
		  }),
		  "--sport needs --proto tcp or --proto udp");
}
