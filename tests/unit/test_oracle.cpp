// SPDX-License-Identifier: GPL-2.0-only
// The corpus's own tools checked against each other with no kernel: the
// packet builder writes the shape a test asks for, and the oracle's parser
// reads it as the specification says (so a corpus failure is the program's).
#include <gtest/gtest.h>

#include "oracle.h"
#include "packet.h"

using namespace sluice::test;
using Kind = FrameFacts::Kind;
using Frag = PacketSpec::Frag;

TEST(Oracle, VlanStacksUpToEightAreParsedAndDeeperOnesAreDropped)
{
	for (int depth = 0; depth <= 10; depth++) {
		PacketSpec p;
		p.vlan_tpids.assign(static_cast<size_t>(depth), 0x8100);
		p.vlan_ids.assign(static_cast<size_t>(depth), 0);
		FrameFacts f = inspect_frame(build_packet(p));
		EXPECT_EQ(f.kind, depth <= 8 ? Kind::ip : Kind::too_many_tags) << depth;
		if (depth <= 8) {
			EXPECT_TRUE(f.ports_known);
			EXPECT_EQ(f.dport, 53);
		}
	}
	EXPECT_EQ(inspect_frame(build_packet({.vlan_tpids = {0x9100}})).kind, Kind::not_ip);
	EXPECT_EQ(inspect_frame(build_packet({.vlan_tpids = {0x8100}, .truncate = 16})).kind, Kind::failopen_parse);
}

TEST(Oracle, Ipv4HeaderAndTotalLengthRules)
{
	for (int ihl = 0; ihl <= 15; ihl++) {
		FrameFacts f = inspect_frame(build_packet({.ipv4_ihl = ihl, .payload = 64}));
		EXPECT_EQ(f.kind, ihl >= 5 ? Kind::ip : Kind::failopen_parse) << ihl;
	}
	for (int len = 0; len <= 40; len++) {
		FrameFacts f = inspect_frame(build_packet({.ipv4_option_bytes = len}));
		ASSERT_EQ(f.kind, Kind::ip) << len;
		EXPECT_EQ(f.dport, 53) << "options of " << len << " bytes are skipped";
		EXPECT_EQ(f.ip_bytes, 20u + (len + 3) / 4 * 4 + 8 + 32);
	}
	EXPECT_EQ(inspect_frame(build_packet({.ipv4_total_length = 19})).kind, Kind::failopen_parse);
	EXPECT_EQ(inspect_frame(build_packet({.ipv4_total_length = 61})).kind, Kind::failopen_parse);
	FrameFacts whole = inspect_frame(build_packet({.ipv4_total_length = 0}));
	EXPECT_EQ(whole.kind, Kind::ip);
	EXPECT_EQ(whole.ip_bytes, 60u);
	FrameFacts padded = inspect_frame(build_packet({.payload = 0, .padding = 18}));
	EXPECT_EQ(padded.ip_bytes, 28u) << "padding is not charged";
	FrameFacts short_udp = inspect_frame(build_packet({.l4_bytes = 2, .padding = 20}));
	EXPECT_EQ(short_udp.kind, Kind::ip);
	EXPECT_FALSE(short_udp.ports_known) << "ports are never read from the padding";
}

TEST(Oracle, FragmentsOfEveryKind)
{
	PacketSpec p{.dport = 123, .frag_id = 4321, .payload = 64};
	size_t len = fragmentable_length(p);
	ASSERT_EQ(len, 72u);
	auto frames = build_fragments(p, {{0, 24, true}, {24, 24, true}, {48, len - 48, false}});
	ASSERT_EQ(frames.size(), 3u);
	FrameFacts first = inspect_frame(frames[0]), mid = inspect_frame(frames[1]), last = inspect_frame(frames[2]);
	EXPECT_EQ(first.frag, FrameFacts::Frag::first);
	EXPECT_EQ(first.dport, 123);
	EXPECT_EQ(mid.frag, FrameFacts::Frag::later);
	EXPECT_EQ(last.frag, FrameFacts::Frag::later);
	EXPECT_EQ(last.frag_id, 4321u);
	EXPECT_TRUE(last.proto_known) << "IPv4 keeps the protocol";
	for (size_t tiny = 0; tiny <= 3; tiny++)
		EXPECT_TRUE(inspect_frame(build_fragments(p, {{0, tiny, true}})[0]).tiny_first) << tiny;
	EXPECT_FALSE(inspect_frame(build_fragments(p, {{0, 4, true}})[0]).tiny_first);

	PacketSpec v6{.src = "2001:db8::1", .dport = 123, .frag_id = 0xdeadbeef, .payload = 64};
	auto f6 = build_fragments(v6, {{0, 24, true}, {24, fragmentable_length(v6) - 24, false}});
	FrameFacts a = inspect_frame(f6[0]), b = inspect_frame(f6[1]);
	EXPECT_EQ(a.frag, FrameFacts::Frag::first);
	EXPECT_EQ(a.dport, 123);
	EXPECT_EQ(b.frag, FrameFacts::Frag::later);
	EXPECT_FALSE(b.proto_known) << "RFC 8200: only the first fragment names the protocol";
	EXPECT_EQ(b.frag_id, 0xdeadbeefu);
	FrameFacts atomic = inspect_frame(build_packet({.src = "2001:db8::1", .ipv6_ext = {EXT_FRAGMENT}}));
	EXPECT_EQ(atomic.frag, FrameFacts::Frag::none);
	EXPECT_EQ(atomic.dport, 53);
}

TEST(Oracle, Ipv6ChainsUpToTwelveAreReadAndLongerOnesAreNot)
{
	for (int n = 0; n <= 14; n++) {
		PacketSpec p{.src = "2001:db8::1", .ipv6_ext = std::vector<uint8_t>(static_cast<size_t>(n), EXT_DEST)};
		FrameFacts f = inspect_frame(build_packet(p));
		ASSERT_EQ(f.kind, Kind::ip) << n;
		EXPECT_EQ(f.ports_known, n <= 12) << n;
		EXPECT_EQ(f.chain_too_long, n > 12) << n;
	}
	for (uint8_t t : {EXT_ESP, EXT_NONE, EXT_UNKNOWN}) {
		FrameFacts f = inspect_frame(build_packet({.src = "2001:db8::1", .ipv6_ext = {t}}));
		EXPECT_TRUE(f.proto_known);
		EXPECT_EQ(f.proto, t) << "ends the chain as the upper-layer protocol";
	}
	FrameFacts ah = inspect_frame(build_packet({.src = "2001:db8::1", .ipv6_ext = {EXT_HOP, EXT_ROUTING, EXT_AH}}));
	EXPECT_EQ(ah.dport, 53);
	FrameFacts jumbo = inspect_frame(build_packet({.src = "2001:db8::1", .ipv6_jumbo = true}));
	EXPECT_EQ(jumbo.kind, Kind::ip);
	EXPECT_EQ(jumbo.ip_bytes, 40u + 8 + 8 + 32);
	EXPECT_EQ(inspect_frame(build_packet({.src = "2001:db8::1", .ipv6_payload_length = 41})).kind,
		  Kind::failopen_parse);
}

TEST(Oracle, EncapsulationIsJudgedByTheOuterHeader)
{
	using E = PacketSpec::Encap;
	for (auto [e, proto] : {std::pair{E::ipip, 4}, {E::ip6ip, 41}, {E::gre, 47}}) {
		FrameFacts f = inspect_frame(build_packet({.encap = e}));
		EXPECT_EQ(f.proto, proto);
		EXPECT_TRUE(f.encapsulated);
		EXPECT_FALSE(f.ports_known);
	}
	FrameFacts pppoe = inspect_frame(build_packet({.encap = E::pppoe}));
	EXPECT_EQ(pppoe.kind, Kind::not_ip);
	EXPECT_TRUE(pppoe.encapsulated);
}

TEST(Oracle, UnknownSelectorsNeverMatchAnAllowAndEveryOtherCandidateIsCharged)
{
	Oracle o;
	const uint64_t hour = 3600000000000ull;
	o.add_rule({"dns", "10.3.0.0/16", 17, 53, 53, ModelRule::Action::limit, 3, hour});
	o.add_rule({"ntp", "10.3.0.0/16", 17, 123, 123, ModelRule::Action::allow});
	o.add_rule({"ssh", "10.3.0.0/16", 6, 22, 22, ModelRule::Action::limit, 3, hour / 2});
	PacketSpec p{.src = "10.3.0.1", .dport = 123, .payload = 64};
	EXPECT_EQ(o.decide(inspect_frame(build_packet(p))).counter, "pass_allow");
	// A later fragment whose first was never seen: UDP, port unknown: charged to dns.
	PacketSpec later = p;
	later.frag = Frag::later;
	later.frag_id = 9;
	Expected e = o.decide(inspect_frame(build_packet(later)));
	EXPECT_EQ(o.rule(static_cast<size_t>(e.rule)).name, "dns");
	// IPv6 later fragment: protocol unknown too; charged to ssh and dns both.
	Oracle o6;
	size_t ssh = o6.add_rule({"ssh", "2001:db8::/32", 6, 22, 22, ModelRule::Action::limit, 3, hour / 2});
	size_t dns = o6.add_rule({"dns", "2001:db8::/32", 17, 53, 53, ModelRule::Action::limit, 3, hour});
	FrameFacts hidden = inspect_frame(build_packet({.src = "2001:db8::1", .frag = Frag::later}));
	e = o6.decide(hidden);
	EXPECT_EQ(e.counter, "pass_limit");
	EXPECT_EQ(o6.tokens(ssh, hidden), 2u);
	EXPECT_EQ(o6.tokens(dns, hidden), 2u);
	// After its first fragment passed, a later fragment is judged as the datagram.
	auto frags = build_fragments(p, {{0, 24, true}, {24, 48, false}});
	EXPECT_EQ(o.decide(inspect_frame(frags[0])).counter, "pass_allow");
	EXPECT_EQ(o.decide(inspect_frame(frags[1])).counter, "pass_allow");
}

// A first fragment of another port under a live entry is dropped, whether or
// not later fragments took the entry; a copy of the same port relabels
// nothing, and its later fragments stay its datagram's.
TEST(Oracle, AFirstFragmentOfAnotherPortUnderALiveEntryIsDropped)
{
	for (const char *src : {"10.3.0.1", "2001:db8::1"}) {
		SCOPED_TRACE(src);
		Oracle o;
		const uint64_t hour = 3600000000000ull;
		const bool v6 = std::string(src).find(':') != std::string::npos;
		o.add_rule({"dns", v6 ? "2001:db8::/32" : "10.3.0.0/16", 17, 53, 53, ModelRule::Action::limit, 1, hour});
		o.add_rule({"ntp", v6 ? "2001:db8::/32" : "10.3.0.0/16", 17, 123, 123, ModelRule::Action::allow});
		PacketSpec dns{.src = src, .frag_id = 77, .payload = 64}, ntp = dns;
		ntp.dport = 123;
		auto d = build_fragments(dns, {{0, 24, true}, {24, 48, false}});
		auto copy = build_fragments(ntp, {{0, 24, true}})[0];
		EXPECT_EQ(o.decide(inspect_frame(d[0])).counter, "pass_limit");
		Expected e = o.decide(inspect_frame(copy));
		EXPECT_EQ(e.counter, "drop_malformed") << "no later fragment took the entry yet";
		EXPECT_EQ(e.xdp, 1);
		EXPECT_EQ(o.decide(inspect_frame(d[1])).counter, "drop_rate") << "judged as port 53's, its burst spent";
		EXPECT_EQ(o.decide(inspect_frame(d[0])).counter, "drop_rate") << "the same port: judged, not refused";
	}
}

// A malformed frame (the stack drops it) whose source can be read is dropped
// where a rule covers the source; it fails open where none does or where the
// source cannot be read.
TEST(Oracle, AMalformedFrameOfACoveredSourceIsDropped)
{
	Oracle o;
	o.add_rule({"deny", "10.2.0.0/16", 0, 0, 65535, ModelRule::Action::deny});
	o.add_rule({"deny6", "2001:db8::/32", 0, 0, 65535, ModelRule::Action::deny});
	auto decide = [&](PacketSpec p) { return o.decide(inspect_frame(build_packet(p))).counter; };
	EXPECT_EQ(decide({.src = "10.2.0.1", .ipv4_total_length = 19}), "drop_malformed");
	EXPECT_EQ(decide({.src = "10.2.0.1", .ipv4_total_length = 61}), "drop_malformed");
	EXPECT_EQ(decide({.src = "10.9.0.1", .ipv4_total_length = 61}), "failopen_parse") << "no rule covers it";
	EXPECT_EQ(decide({.src = "10.2.0.1", .truncate = 14 + 16}), "drop_malformed") << "the source is there";
	EXPECT_EQ(decide({.src = "10.2.0.1", .truncate = 14 + 15}), "failopen_parse") << "the source is cut";
	EXPECT_EQ(decide({.src = "10.2.0.1", .payload = 0, .padding = 18}), "drop_deny") << "padding is fine";
	EXPECT_EQ(decide({.src = "2001:db8::1", .ipv6_payload_length = 41}), "drop_malformed");
	EXPECT_EQ(decide({.src = "2001:db8::1", .truncate = 14 + 24}), "drop_malformed");
	EXPECT_EQ(decide({.src = "2001:db8::1", .truncate = 14 + 23}), "failopen_parse");
	EXPECT_EQ(decide({.src = "2001:db9::1", .ip_version = 4}), "failopen_parse");
}
