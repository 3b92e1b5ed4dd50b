// SPDX-License-Identifier: GPL-2.0-only
// Source-port and TCP-flag selectors in the real program (BPF_PROG_TEST_RUN):
// generated rules and packets of both families against a reference
// predicate, the fast path and the drop memo among them (one source sends
// packets the rule treats differently back to back), and fragments, whose
// later pieces carry no ports or flags.
#include <gtest/gtest.h>

#include <random>

#include "fixture.h"

using namespace sluice;
using namespace sluice::test;

namespace {

using Frag = PacketSpec::Frag;

const char *const SOURCE[] = {"192.0.2.10", "2001:db8::10"};
const char *const PREFIX[] = {"192.0.2.0/24", "2001:db8::/64"};

class Selectors : public Datapath {
protected:
	InstalledRule deny(const char *prefix, Proto proto, PortRange sport, TcpFlags flags, const char *name)
	{
		RuleSpec s;
		s.name = name;
		s.cidr = parse_cidr(prefix);
		s.action = Action::deny;
		s.proto = proto;
		s.sport = sport;
		s.tcp_flags = flags;
		return table_->add(s);
	}
	InstalledRule limit(const char *prefix, Proto proto, PortRange sport, TcpFlags flags, const char *name,
			    uint64_t burst)
	{
		RuleSpec s = limit_spec(prefix, "1/h", burst, name, proto);
		s.sport = sport;
		s.tcp_flags = flags;
		return table_->add(s);
	}
};

} // namespace

// Rules of random flag masks and values, with and without a source port
// range, one at a time over a source's prefix; packets of every flag byte and
// random source ports, sent back to back from that one source (so a drop the
// program could wrongly repeat from its memo would show): dropped exactly when
// (flags & mask) == value and the source port is in the range.
TEST_F(Selectors, GeneratedFlagsAndSourcePortsMatchTheReferencePredicate)
{
	std::mt19937_64 rng(0x29);
	auto pick = [&](uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng); };
	uint64_t sent = 0, dropped = 0;
	for (int family = 0; family < 2; family++) {
		for (int round = 0; round < 24; round++) {
			TcpFlags flags{};
			if (round == 0) {
				flags = SYN_ONLY;
			} else if (round % 3 != 1) {
				flags.mask = static_cast<uint8_t>(1 + pick(255));
				flags.value = static_cast<uint8_t>(pick(256) & flags.mask);
			}
			PortRange sport;
			if (round % 2 || flags.any()) {
				uint16_t lo = static_cast<uint16_t>(pick(65536));
				sport = {lo, static_cast<uint16_t>(lo + pick(std::min<uint32_t>(65536 - lo, 3000)))};
			}
			std::string name = "r" + std::to_string(family) + "-" + std::to_string(round);
			deny(PREFIX[family], Proto::tcp, sport, flags, name.c_str());
			SCOPED_TRACE(name + ": " + format_tcp_flags(flags) + " sport " + format_ports(sport));
			auto expect = [&](uint8_t f, uint16_t sp) {
				bool match = flags.matches(f) && sp >= sport.lo && sp <= sport.hi;
				int got = run({.src = SOURCE[family], .proto = 6, .dport = 443, .tcp_flags = f, .sport = sp});
				sent++;
				dropped += got == XDP_DROP;
				ASSERT_EQ(got, match ? XDP_DROP : XDP_PASS)
					<< "flags " << int(f) << " from port " << sp;
			};
			// Every flag byte, from a port in the range; then random ones.
			for (unsigned f = 0; f < 256; f++)
				expect(static_cast<uint8_t>(f), static_cast<uint16_t>(sport.lo + pick(sport.hi - sport.lo + 1)));
			for (int i = 0; i < 256; i++) {
				uint16_t sp = pick(2) ? static_cast<uint16_t>(pick(65536))
						      : static_cast<uint16_t>(std::min<uint32_t>(65535, sport.hi + pick(3)));
				expect(static_cast<uint8_t>(pick(256)), sp);
			}
			// UDP never meets a flag rule; from a port in the range it meets a
			// source-port rule of TCP's no more.
			EXPECT_EQ(run({.src = SOURCE[family], .dport = 443, .sport = sport.lo}), XDP_PASS);
			table_->remove(name);
		}
	}
	EXPECT_GT(dropped, sent / 20) << "the generator makes matching packets";
	EXPECT_LT(dropped, sent - sent / 20) << "and packets that do not match";
}

// A --syn limit is charged by connection attempts alone: its bucket spent,
// the connection's other segments from that source go on to the rules after
// it, on the fast path or the walk, at once and after.
TEST_F(Selectors, ASynLimitLeavesTheConnectionsOtherSegmentsAlone)
{
	for (int family = 0; family < 2; family++) {
		SCOPED_TRACE(family ? "IPv6" : "IPv4");
		RuleSpec syn = limit_spec(PREFIX[family], "1/h", 2, family ? "syn6" : "syn4", Proto::tcp, {22, 22});
		syn.tcp_flags = SYN_ONLY;
		table_->add(syn);
		add_action(PREFIX[family], Action::allow, family ? "ssh6" : "ssh4", Proto::tcp, {22, 22});
		const uint8_t segments[] = {0x10, 0x18, 0x11, 0x04, 0x12};
		for (int i = 0; i < 5; i++) {
			EXPECT_EQ(run({.src = SOURCE[family], .proto = 6, .dport = 22, .tcp_flags = 0x02}),
				  i < 2 ? XDP_PASS : XDP_DROP)
				<< "SYN " << i;
			for (uint8_t f : segments)
				EXPECT_EQ(run({.src = SOURCE[family], .proto = 6, .dport = 22, .tcp_flags = f}), XDP_PASS)
					<< "flags " << int(f) << " after SYN " << i;
		}
		auto c = rule_counters(family ? "syn6" : "syn4");
		EXPECT_EQ(c.passed_packets, 2u);
		EXPECT_EQ(c.dropped_packets, 3u);
		EXPECT_EQ(rule_counters(family ? "ssh6" : "ssh4").passed_packets, 25u);
	}
}

// Fragments: a later fragment takes its datagram's source port and flags
// from the first fragment, and is judged as it was; one whose first was not
// seen hides them, so it may match a selector rule (charged to it; an allow
// never matches it). A first fragment cut inside the TCP header shows its
// ports but not its flags.
TEST_F(Selectors, LaterFragmentsTakeTheirFirstFragmentsSourcePortAndFlags)
{
	for (int family = 0; family < 2; family++) {
		SCOPED_TRACE(family ? "IPv6" : "IPv4");
		const std::string f = family ? "6" : "4";
		limit(PREFIX[family], Proto::udp, {123, 123}, {}, ("ntp" + f).c_str(), 1);
		add_action(PREFIX[family], Action::allow, ("udp" + f).c_str(), Proto::udp);
		limit(PREFIX[family], Proto::tcp, {}, SYN_ONLY, ("syn" + f).c_str(), 1);
		add_action(PREFIX[family], Action::allow, ("tcp" + f).c_str(), Proto::tcp);
		uint32_t id = 100 + family * 100;
		auto datagram = [&](uint8_t proto, uint16_t sport, uint8_t flags) {
			PacketSpec p{.src = SOURCE[family], .proto = proto, .dport = 5000, .tcp_flags = flags,
				     .frag_id = id++, .payload = 64, .sport = sport};
			size_t len = fragmentable_length(p);
			std::string verdicts;
			for (const auto &frame : build_fragments(p, {{0, 32, true}, {32, 16, true}, {48, len - 48, false}}))
				verdicts += run_frame(frame) == XDP_PASS ? "P" : "D";
			return verdicts;
		};
		// UDP from port 40000: every piece allowed, none charged to ntp.
		for (int i = 0; i < 3; i++)
			EXPECT_EQ(datagram(17, 40000, 0), "PPP");
		EXPECT_EQ(rule_counters("udp" + f).passed_packets, 9u);
		// From port 123: the first piece spends the burst, the later ones are ntp's too.
		EXPECT_EQ(datagram(17, 123, 0), "PDD");
		EXPECT_EQ(rule_counters("ntp" + f).dropped_packets, 2u);
		// TCP ACKs in pieces: allowed whole; a SYN datagram's pieces are syn's.
		EXPECT_EQ(datagram(6, 40000, 0x10), "PPP");
		EXPECT_EQ(datagram(6, 40000, 0x02), "PDD");
		EXPECT_EQ(rule_counters("tcp" + f).passed_packets, 3u);
		// A later fragment whose first was never seen: its ports and flags
		// unknown, the selector rules may match it and charge it (spent:
		// dropped), the allows never match it.
		EXPECT_EQ(run({.src = SOURCE[family], .proto = 17, .frag = Frag::later, .frag_id = 9}), XDP_DROP);
		// A first fragment cut inside the TCP header: ports, no flags; the
		// syn rule may match it, so the tcp allow does not decide it.
		uint64_t before = rule_counters("syn" + f).dropped_packets;
		EXPECT_EQ(run({.src = SOURCE[family], .proto = 6, .dport = 5000, .tcp_flags = 0x10, .frag = Frag::first,
			       .frag_id = 77, .l4_bytes = 8}),
			  XDP_DROP);
		EXPECT_EQ(rule_counters("syn" + f).dropped_packets, before + 1);
		EXPECT_EQ(rule_counters("tcp" + f).passed_packets, 3u);
	}
}
