// SPDX-License-Identifier: GPL-2.0-only
// The ways around a rule that an attacker tries, each reproduced as the issue
// that found it describes it: unknown selectors that matched allow rules,
// tiny and later fragments, deep VLAN stacks, the IPv6 chain bound,
// super-packets, padding, encapsulation and the rule id space. Each test
// failed on the program before these fixes.
#include <gtest/gtest.h>

#include "adversarial.h"
#include "fixture.h"
#include "replay.h"

using namespace sluice;
using namespace sluice::test;
using Frag = PacketSpec::Frag;

namespace {

const std::string V6 = "2001:db8::10";

} // namespace

// Defect 1: an allow on another protocol matched IPv6 packets whose protocol
// could not be read, so a /32 under `--rate 1/h` passed everything.
TEST_F(Datapath, AnAllowNeverMatchesAPacketWhoseProtocolIsUnknown)
{
	add_action("2001:db8::/32", Action::allow, "icmp-ok", Proto::icmp);
	add("2001:db8::/32", "1/h", 1, "slow");

	// Later fragments with no first fragment seen: the protocol is unknown.
	int passed = 0;
	for (uint32_t id = 1; id <= 5; id++)
		passed += run({.src = V6, .frag = Frag::later, .frag_id = id}) == XDP_PASS;
	EXPECT_EQ(passed, 1) << "one packet of burst, then the limit";
	// A chain past the bound hides the protocol too.
	EXPECT_EQ(run({.src = V6, .ipv6_ext = std::vector<uint8_t>(13, 60)}), XDP_DROP);
	// Behind 9 destination options (within the bound) UDP is read, and limited.
	EXPECT_EQ(run({.src = V6, .ipv6_ext = std::vector<uint8_t>(9, 60)}), XDP_DROP);
	EXPECT_EQ(run({.src = V6, .proto = 58}), XDP_PASS) << "real ICMPv6 is allowed";
	EXPECT_EQ(global(SLUICE_CNT_PASS_ALLOW), 1u) << "only the ICMPv6 packet";
}

// Defect 1: a port-53 allow inside a denied /112 let TCP to port 22 through
// behind a long extension chain.
TEST_F(Datapath, AnAllowedPortInsideADenyDoesNotOpenOtherTraffic)
{
	add_action("2001:db8::/112", Action::deny, "blocked");
	add_action("2001:db8::/112", Action::allow, "dns", Proto::udp, {53, 53});
	EXPECT_EQ(run({.src = V6}), XDP_PASS) << "DNS is allowed";
	EXPECT_EQ(run({.src = V6, .proto = 6, .dport = 22, .ipv6_ext = std::vector<uint8_t>(13, 60)}), XDP_DROP);
	EXPECT_EQ(run({.src = V6, .proto = 6, .dport = 22, .ipv6_ext = std::vector<uint8_t>(9, 60)}), XDP_DROP);
	EXPECT_EQ(run({.src = V6, .frag = Frag::later, .frag_id = 7}), XDP_DROP)
		<< "a later fragment with no first one seen is not allowed";
	EXPECT_EQ(global(SLUICE_CNT_PASS_ALLOW), 1u);
}

// Defect 1: SYNs to port 22 as first fragments holding 8 bytes of TCP were
// charged to the port-80 rule beside it.
TEST_F(Datapath, AShortFirstFragmentIsJudgedByItsPorts)
{
	add("192.0.2.0/24", "1000000/s", 1000000, "web", Proto::tcp, {80, 80});
	add("192.0.2.0/24", "1/h", 2, "ssh", Proto::tcp, {22, 22});
	int passed = 0;
	for (uint32_t id = 1; id <= 10; id++)
		passed += run({.proto = 6, .dport = 22, .frag = Frag::first, .frag_id = id, .l4_bytes = 8}) == XDP_PASS;
	EXPECT_EQ(passed, 2) << "the ssh rule's burst";
	EXPECT_EQ(source("192.0.2.10", "ssh").dropped_packets, 8u);
	EXPECT_EQ(rule_counters("web").passed_packets, 0u);
}

// A first fragment too short to hold its ports hides them from its whole
// datagram: dropped where a rule may apply, untouched where none does.
TEST_F(Datapath, ATinyFirstFragmentIsDroppedWhereARuleMayApply)
{
	add("192.0.2.0/24", "1000000/s", 1000000, "web", Proto::tcp, {80, 80});
	for (int bytes : {0, 1, 2, 3}) {
		EXPECT_EQ(run({.proto = 6, .dport = 80, .frag = Frag::first, .l4_bytes = bytes}), XDP_DROP) << bytes;
		EXPECT_EQ(run({.src = "198.51.100.7", .proto = 6, .frag = Frag::first, .l4_bytes = bytes}), XDP_PASS)
			<< "no rule covers this source";
	}
	EXPECT_EQ(run({.src = V6, .proto = 6, .frag = Frag::first, .l4_bytes = 2}), XDP_PASS) << "no IPv6 rule";
	add_action("2001:db8::/32", Action::allow, "v6-web", Proto::tcp, {80, 80});
	add("2001:db8::/32", "1/h", 1, "v6");
	EXPECT_EQ(run({.src = V6, .proto = 6, .dport = 80, .frag = Frag::first, .l4_bytes = 2}), XDP_DROP);
	EXPECT_EQ(global(SLUICE_CNT_DROP_MALFORMED), 5u);
	EXPECT_EQ(global(SLUICE_CNT_PASS_NO_MATCH), 5u);
}

// Defect 1: later fragments of port-53 datagrams passed as the port-123 allow
// beside the port-53 limit; a port-scoped deny dropped later fragments of
// every port. A later fragment is now judged as its datagram.
TEST_F(Datapath, LaterFragmentsAreJudgedAsTheirDatagram)
{
	add("192.0.2.0/24", "1/h", 2, "dns", Proto::udp, {53, 53});
	add_action("192.0.2.0/24", Action::allow, "ntp", Proto::udp, {123, 123});
	add_action("2001:db8::/32", Action::deny, "no-dns6", Proto::udp, {53, 53});

	// Port-53 datagrams: the first fragment's port follows its later fragments.
	EXPECT_EQ(run({.frag = Frag::first, .frag_id = 1}), XDP_PASS);
	EXPECT_EQ(run({.frag = Frag::later, .frag_id = 1, .more_fragments = 1}), XDP_PASS) << "the second token";
	EXPECT_EQ(run({.frag = Frag::later, .frag_id = 1, .more_fragments = 1}), XDP_DROP)
		<< "charged to dns, not allowed by ntp";
	// Later fragments whose first fragment was never seen: the strictest rule.
	EXPECT_EQ(run({.frag = Frag::later, .frag_id = 2}), XDP_DROP);
	// NTP datagrams: allowed in full, whatever the dns bucket holds.
	EXPECT_EQ(run({.dport = 123, .frag = Frag::first, .frag_id = 3}), XDP_PASS);
	for (int more : {1, 1, 0})
		EXPECT_EQ(run({.dport = 123, .frag = Frag::later, .frag_id = 3, .more_fragments = more}), XDP_PASS);
	EXPECT_EQ(rule_counters("ntp").passed_packets, 4u);
	EXPECT_EQ(rule_counters("dns").passed_packets, 2u);

	// IPv6: a deny of port 53 leaves the fragments of other ports alone.
	EXPECT_EQ(run({.src = V6, .dport = 443, .frag = Frag::first, .frag_id = 9}), XDP_PASS);
	EXPECT_EQ(run({.src = V6, .dport = 443, .frag = Frag::later, .frag_id = 9}), XDP_PASS);
	EXPECT_EQ(run({.src = V6, .dport = 443, .frag = Frag::later, .frag_id = 10}), XDP_DROP)
		<< "no first fragment seen: the deny may apply";
	EXPECT_EQ(run({.src = V6, .frag = Frag::first, .frag_id = 11}), XDP_DROP);
	EXPECT_EQ(run({.src = V6, .frag = Frag::later, .frag_id = 11}), XDP_DROP)
		<< "a denied first fragment is not remembered";
}

// An entry outlived its datagram: a whole port-123 datagram left its entry,
// and the later fragments of a port-53 datagram under the same IP id passed
// as the port-123 allow; with its first fragment sent last, the whole
// port-53 datagram reached the host. Now no later fragment takes an entry's
// ports after its datagram's last fragment, and a first fragment is dropped
// where later fragments of another port took its key's entry (the kernel may
// have dropped the first datagram's queue, on an overlap, before its end).
TEST_F(Datapath, AFragmentEntryEndsWithItsDatagram)
{
	add("192.0.2.0/24", "1/h", 1, "dns", Proto::udp, {53, 53});
	add_action("192.0.2.0/24", Action::allow, "ntp", Proto::udp, {123, 123});
	add("2001:db8::/32", "1/h", 1, "dns6", Proto::udp, {53, 53});
	add_action("2001:db8::/32", Action::allow, "ntp6", Proto::udp, {123, 123});

	for (const char *src : {"192.0.2.10", "2001:db8::10"}) {
		SCOPED_TRACE(src);
		// Datagram A, to port 123 and whole: its first fragment, then its last.
		EXPECT_EQ(run({.src = src, .dport = 123, .frag = Frag::first, .frag_id = 777}), XDP_PASS);
		EXPECT_EQ(run({.src = src, .dport = 123, .frag = Frag::later, .frag_id = 777, .more_fragments = 0}),
			  XDP_PASS);
		// Datagram B, to port 53 under the same id, later fragments first.
		int passed = 0;
		for (int i = 1; i <= 5; i++)
			passed += run({.src = src,
				       .frag = Frag::later,
				       .frag_id = 777,
				       .frag_offset = 1400 * i,
				       .more_fragments = i < 5}) == XDP_PASS;
		EXPECT_EQ(passed, 1) << "charged to the port-53 limit (burst 1), not allowed as port 123";
		EXPECT_EQ(run({.src = src, .frag = Frag::first, .frag_id = 777}), XDP_DROP) << "B's first fragment";
	}
	EXPECT_EQ(rule_counters("ntp").passed_packets, 2u);
	EXPECT_EQ(rule_counters("ntp6").passed_packets, 2u);
	EXPECT_EQ(rule_counters("dns").passed_packets, 1u);
	EXPECT_EQ(rule_counters("dns6").passed_packets, 1u);

	// An entry whose datagram never ended: port 123's first fragment, then
	// later fragments (the kernel may have dropped its queue, so these may
	// wait for a new first fragment), then a port-53 first fragment under
	// the same id. Its bucket has a token; the fragment is dropped all the same.
	const char *other = "192.0.2.11";
	EXPECT_EQ(run({.src = other, .dport = 123, .frag = Frag::first, .frag_id = 778}), XDP_PASS);
	for (int i = 1; i <= 3; i++)
		EXPECT_EQ(run({.src = other, .frag = Frag::later, .frag_id = 778, .frag_offset = 1400 * i,
			       .more_fragments = i < 3}),
			  XDP_PASS)
			<< "taken as port 123's: nothing in a later fragment says otherwise";
	uint64_t malformed = global(SLUICE_CNT_DROP_MALFORMED);
	auto dns = rule_counters("dns");
	EXPECT_EQ(run({.src = other, .frag = Frag::first, .frag_id = 778}), XDP_DROP);
	EXPECT_EQ(global(SLUICE_CNT_DROP_MALFORMED), malformed + 1);
	EXPECT_EQ(rule_counters("dns").passed_packets, dns.passed_packets) << "dropped before any bucket";
	EXPECT_EQ(rule_counters("dns").dropped_packets, dns.dropped_packets);
	// The same first fragment again, to port 123 (a retransmission): passed.
	EXPECT_EQ(run({.src = other, .dport = 123, .frag = Frag::first, .frag_id = 778}), XDP_PASS);
}

// How long a first fragment meets what later fragments did with its key: a
// queue they joined lives up to 60 s (IPv6; IPv4 30 s), and the entry took
// them for 30 s. On the test clock: a port-53 first fragment is dropped 90 s
// after a port-123 entry whose later fragments came at 29 s, and passed at 92 s.
TEST(FragmentTable, AFirstFragmentMeetsItsKeysLaterFragmentsForAQueuesLife)
{
	RuleSpec r = limit_spec("10.0.0.0/8", "1/h", 100, "limit");
	validate_rule(r);
	Replayer kernel(r, TableSizes{64, 64, 64});
	const uint64_t SEC = 1000000000ULL, t0 = 1000 * SEC;
	auto frame = [](int frag_id, uint16_t dport, PacketSpec::Frag frag) {
		return build_packet({.src = "10.0.0.5", .dport = dport, .frag = frag, .frag_id = uint32_t(frag_id),
				     .more_fragments = 1});
	};
	for (int id : {1, 2}) {
		EXPECT_TRUE(kernel.send(frame(id, 123, Frag::first), t0));
		EXPECT_TRUE(kernel.send(frame(id, 123, Frag::later), t0 + 29 * SEC)) << "taken as port 123's";
	}
	EXPECT_FALSE(kernel.send(frame(1, 53, Frag::first), t0 + 90 * SEC));
	EXPECT_TRUE(kernel.send(frame(2, 53, Frag::first), t0 + 92 * SEC));
}

// A duplicate first fragment relabelled its datagram (issue 26, finding 1):
// the port-53 first fragment, then the same offset-0 fragment naming the
// allowed port 123, then the later fragments. The kernel keeps the first and
// drops the copy, so it delivers a port-53 datagram; the program took the
// copy's port for the later fragments and passed 6 of 6 fragments under a
// `--rate 1/h --burst 1` port-53 limit (control: 1 of 6). Now a first
// fragment of another port under a live entry is dropped as malformed, and
// at most the limit's burst passes, IPv4 and IPv6.
TEST_F(Datapath, ADuplicateFirstFragmentDoesNotRelabelItsDatagram)
{
	add("192.0.2.0/24", "1/h", 1, "dns", Proto::udp, {53, 53});
	add_action("192.0.2.0/24", Action::allow, "ntp", Proto::udp, {123, 123});
	add("2001:db8::/32", "1/h", 1, "dns6", Proto::udp, {53, 53});
	add_action("2001:db8::/32", Action::allow, "ntp6", Proto::udp, {123, 123});

	for (const char *src : {"192.0.2.10", "2001:db8::10"}) {
		SCOPED_TRACE(src);
		// A 4,000-byte datagram in six fragments.
		PacketSpec dns{.src = src, .frag_id = 4242, .payload = 4000 - 8};
		const size_t len = fragmentable_length(dns), piece = 680;
		std::vector<FragmentPiece> pieces;
		for (size_t off = 0; off < len; off += piece)
			pieces.push_back({off, std::min(piece, len - off), off + piece < len});
		ASSERT_EQ(pieces.size(), 6u);
		auto frames = build_fragments(dns, pieces);
		PacketSpec ntp = dns;
		ntp.dport = 123;
		auto copy = build_fragments(ntp, {pieces[0]})[0];

		uint64_t malformed = global(SLUICE_CNT_DROP_MALFORMED);
		int passed = run_frame(frames[0]) == XDP_PASS;
		EXPECT_EQ(passed, 1) << "the port-53 first fragment: the burst";
		EXPECT_EQ(run_frame(copy), XDP_DROP) << "a first fragment naming port 123 under port 53's entry";
		EXPECT_EQ(global(SLUICE_CNT_DROP_MALFORMED), malformed + 1) << "counted drop_malformed";
		for (size_t i = 1; i < frames.size(); i++)
			passed += run_frame(frames[i]) == XDP_PASS;
		EXPECT_LE(passed, 1) << "of the datagram's 6 fragments, at most the port-53 burst of 1 passes";
		// The copy again, after the later fragments: still dropped.
		EXPECT_EQ(run_frame(copy), XDP_DROP);
	}
	EXPECT_EQ(rule_counters("ntp").passed_packets, 0u) << "nothing passed as port 123";
	EXPECT_EQ(rule_counters("ntp6").passed_packets, 0u);
	EXPECT_EQ(rule_counters("dns").passed_packets, 1u);
	EXPECT_EQ(rule_counters("dns6").passed_packets, 1u);

	// The other way round: port 123's first fragment passed, and a copy
	// naming port 53 is dropped before any bucket (the kernel would drop it
	// too, and the datagram stays port 123's).
	for (const char *src : {"192.0.2.11", "2001:db8::11"}) {
		SCOPED_TRACE(src);
		EXPECT_EQ(run({.src = src, .dport = 123, .frag = Frag::first, .frag_id = 9}), XDP_PASS);
		EXPECT_EQ(run({.src = src, .frag = Frag::first, .frag_id = 9}), XDP_DROP);
		EXPECT_EQ(run({.src = src, .dport = 123, .frag = Frag::first, .frag_id = 9}), XDP_PASS)
			<< "a true duplicate: the same port";
		EXPECT_EQ(run({.src = src, .frag = Frag::later, .frag_id = 9, .more_fragments = 0}), XDP_PASS)
			<< "judged as port 123's";
	}
	EXPECT_EQ(rule_counters("dns").dropped_packets + rule_counters("dns6").dropped_packets, 10u)
		<< "only the first datagrams' later fragments were charged to port 53";
}

// A true duplicate of a first fragment (the same port) made its entry
// younger: the later fragments of a datagram whose first fragment passed
// 31 s earlier were still taken as its port's. On the test clock: a port-123
// first fragment at 0 s and its copy at 20 s; a later fragment at 31 s is one
// whose first fragment is forgotten (charged to the port-53 limit, not
// allowed). And a first fragment of another port meets an entry no later
// fragment took for as long as a queue holding its first fragment may wait
// (60 s for IPv6): dropped at 90 s, passed at 92 s.
TEST(FragmentClock, ATrueDuplicateDoesNotMakeItsEntryYounger)
{
	ASSERT_EQ(geteuid(), 0u) << "loads the real XDP program: run as root";
	using A = ModelRule::Action;
	const uint64_t SEC = 1000000000ULL, t0 = 1000 * SEC;
	for (const char *src : {"192.0.2.10", "2001:db8::10"}) {
		SCOPED_TRACE(src);
		ProgramUnderTest put(4096, true);
		put.add({"ntp-ok", "192.0.2.0/24", A::allow, "", 0, 17, 123, 0});
		put.add({"dns", "192.0.2.0/24", A::limit, "1/h", 5, 17, 53, HOUR_NS});
		put.add({"ntp-ok6", "2001:db8::/32", A::allow, "", 0, 17, 123, 0});
		put.add({"dns6", "2001:db8::/32", A::limit, "1/h", 5, 17, 53, HOUR_NS});
		auto frame = [src](uint32_t id, uint16_t dport, Frag frag) {
			return build_packet({.src = src, .dport = dport, .frag = frag, .frag_id = id, .more_fragments = 1});
		};
		put.set_clock(t0);
		EXPECT_EQ(put.run(frame(1, 123, Frag::first)), XDP_PASS);
		EXPECT_EQ(put.moved().verdict, "pass_allow");
		put.set_clock(t0 + 20 * SEC);
		EXPECT_EQ(put.run(frame(1, 123, Frag::first)), XDP_PASS);
		EXPECT_EQ(put.moved().verdict, "pass_allow") << "the copy passes as its datagram would";
		put.set_clock(t0 + 31 * SEC);
		EXPECT_EQ(put.run(frame(1, 123, Frag::later)), XDP_PASS);
		EXPECT_EQ(put.moved().verdict, "pass_limit") << "31 s after the first: forgotten, charged to port 53";

		// Another datagram: its first fragment alone, no later fragment.
		put.set_clock(t0);
		put.moved();
		EXPECT_EQ(put.run(frame(2, 123, Frag::first)), XDP_PASS);
		EXPECT_EQ(put.run(frame(3, 123, Frag::first)), XDP_PASS);
		put.set_clock(t0 + 90 * SEC);
		put.moved();
		EXPECT_EQ(put.run(frame(2, 53, Frag::first)), XDP_DROP);
		EXPECT_EQ(put.moved().verdict, "drop_malformed") << "90 s on: a queue may still hold port 123's";
		put.set_clock(t0 + 92 * SEC);
		EXPECT_EQ(put.run(frame(3, 53, Frag::first)), XDP_PASS);
		EXPECT_EQ(put.moved().verdict, "pass_limit") << "92 s on: the entry is over";
	}
}

// A datagram whose last fragment overtakes its middle ones: those are judged
// as if their first fragment were unseen, by the strictest rule they may meet.
TEST_F(Datapath, FragmentsAfterTheLastOneAreJudgedAsUnknown)
{
	add("192.0.2.0/24", "1/h", 1, "dns", Proto::udp, {53, 53});
	add_action("192.0.2.0/24", Action::allow, "ntp", Proto::udp, {123, 123});
	EXPECT_EQ(run({.dport = 123, .frag = Frag::first, .frag_id = 5}), XDP_PASS);
	EXPECT_EQ(run({.dport = 123, .frag = Frag::later, .frag_id = 5, .frag_offset = 2960, .more_fragments = 0}),
		  XDP_PASS);
	EXPECT_EQ(run({.dport = 123, .frag = Frag::later, .frag_id = 5, .frag_offset = 1480, .more_fragments = 1}),
		  XDP_PASS)
		<< "the port-53 limit's one token";
	EXPECT_EQ(run({.dport = 123, .frag = Frag::later, .frag_id = 5, .frag_offset = 1480, .more_fragments = 1}),
		  XDP_DROP);
	EXPECT_EQ(rule_counters("ntp").passed_packets, 2u);
	EXPECT_EQ(rule_counters("dns").passed_packets, 1u);
}

// Hidden-port fragments spent another rule's budget: a later fragment whose
// port is unknown went to the rule of the slowest long-run rate and was
// charged there alone, so a port-54 datagram sent later fragments first
// passed whole on port 53's burst of 1,000. Now it is charged to every rule
// it may belong to, and passes only if each passes.
TEST_F(Datapath, AHiddenPortIsChargedToEveryRuleItMayMeet)
{
	add("192.0.2.0/24", "10/s", 1000, "p53", Proto::udp, {53, 53});
	add("192.0.2.0/24", "20/s", 1, "p54", Proto::udp, {54, 54});
	int passed = 0;
	for (int i = 1; i <= 44; i++)
		passed += run({.dport = 54, .frag = Frag::later, .frag_id = 1, .frag_offset = 1480 * i,
			       .more_fragments = i < 44}) == XDP_PASS;
	passed += run({.dport = 54, .frag = Frag::first, .frag_id = 1}) == XDP_PASS;
	EXPECT_EQ(passed, 1) << "port 54's burst of 1, not port 53's 1,000";
	EXPECT_EQ(rule_counters("p54").passed_packets, 1u);

	// Two rules alike, ports 53 and 54, 1/min with a burst of 5: ten
	// two-fragment port-54 datagrams, each later fragment first, get no more
	// than port 54's own 5 packets through (they got 10, 5 charged to each).
	add("198.51.100.0/24", "1/min", 5, "q53", Proto::udp, {53, 53});
	add("198.51.100.0/24", "1/min", 5, "q54", Proto::udp, {54, 54});
	passed = 0;
	for (uint32_t id = 1; id <= 10; id++) {
		passed += run({.src = "198.51.100.7", .dport = 54, .frag = Frag::later, .frag_id = id}) == XDP_PASS;
		passed += run({.src = "198.51.100.7", .dport = 54, .frag = Frag::first, .frag_id = id}) == XDP_PASS;
	}
	EXPECT_LE(passed, 5);
	EXPECT_LE(rule_counters("q54").passed_packets, 5u);
}

// Defect 2: three or more priority tags failed open, and the kernel strips
// them and delivers the packet.
TEST_F(Datapath, VlanStacksUpToEightTagsAreJudged)
{
	add_action("192.0.2.0/24", Action::deny, "blocked");
	for (size_t tags = 0; tags <= 8; tags++) {
		for (uint16_t vid : {0, 100}) {
			PacketSpec p{.vlan_tpids = std::vector<uint16_t>(tags, tags % 2 ? 0x88a8 : 0x8100), .vlan_id = vid};
			EXPECT_EQ(run(p), XDP_DROP) << tags << " tags, VLAN id " << vid;
		}
	}
	EXPECT_EQ(run({.vlan_tpids = std::vector<uint16_t>(9, 0x8100), .vlan_id = 0}), XDP_DROP);
	EXPECT_EQ(global(SLUICE_CNT_DROP_DENY), 18u);
	EXPECT_EQ(global(SLUICE_CNT_DROP_MALFORMED), 1u);
	EXPECT_EQ(global(SLUICE_CNT_FAILOPEN_PARSE), 0u);
}

// Defect 9: a super-packet (generic-mode GRO, BIG TCP) counted as one packet.
TEST_F(Datapath, ASuperPacketIsChargedAsTheWirePacketsItCarries)
{
	auto r = add("192.0.2.0/24", "1/h", 10, "tcp", Proto::tcp);
	// 40 bytes of headers and 2,960 of payload: three 1,500-byte wire packets.
	PacketSpec big{.proto = 6, .dport = 80, .payload = 2960};
	ASSERT_EQ(l3_length(big), 3000u);
	EXPECT_EQ(run(big), XDP_PASS);
	EXPECT_EQ(run(big), XDP_PASS);
	EXPECT_EQ(run(big), XDP_PASS);
	EXPECT_EQ(run(big), XDP_DROP) << "nine of ten packets are used; three more do not fit";
	EXPECT_EQ(run({.proto = 6, .dport = 80}), XDP_PASS) << "one small packet still fits";
	auto s = source("192.0.2.10", "tcp");
	EXPECT_EQ(s.passed_packets, 10u);
	EXPECT_EQ(s.passed_bytes, 3 * (3000u + 2 * 40u) + 72u);
	EXPECT_EQ(s.dropped_packets, 3u);
	(void)r;
}

// The same for a sliding log: a super-packet takes one entry per wire packet,
// in a new log and in one that exists, and passes only if all of them fit.
TEST_F(Datapath, ASuperPacketTakesOneSlidingLogEntryPerWirePacket)
{
	RuleSpec s = limit_spec("192.0.2.0/24", "5/min", 0, "log", Proto::tcp);
	s.algo = Algo::sliding_log;
	table_->add(s);
	PacketSpec three{.proto = 6, .dport = 80, .payload = 2960}; // three wire packets
	PacketSpec two{.proto = 6, .dport = 80, .payload = 1500};   // two
	EXPECT_EQ(run(three), XDP_PASS) << "a new log: 3 of 5";
	EXPECT_EQ(run(three), XDP_DROP) << "6 would exceed 5";
	EXPECT_EQ(run(two), XDP_PASS) << "5 of 5";
	EXPECT_EQ(run({.proto = 6, .dport = 80}), XDP_DROP) << "the log is full for a minute";
	auto src = source("192.0.2.10", "log");
	EXPECT_EQ(src.passed_packets, 5u);
	EXPECT_EQ(src.dropped_packets, 4u);
}

// Defect 10: byte rates charged the Ethernet padding of short frames.
TEST_F(Datapath, ByteRatesChargeTheIpTotalLengthNotThePadding)
{
	add("192.0.2.0/24", "1500B/h", 1500, "bytes");
	PacketSpec small{.payload = 32, .padding = 40};
	ASSERT_EQ(l3_length(small), 60u);
	for (int i = 0; i < 25; i++)
		EXPECT_EQ(run(small), XDP_PASS) << i;
	EXPECT_EQ(run(small), XDP_DROP) << "25 x 60 bytes fill 1,500";
	EXPECT_EQ(source("192.0.2.10", "bytes").passed_bytes, 1500u);
}

// Defect 10: encapsulated traffic is judged by its outer header, and counted.
TEST_F(Datapath, EncapsulatedTrafficIsJudgedByItsOuterHeaderAndCounted)
{
	add_action("192.0.2.0/24", Action::deny, "tunnels-only", Proto::udp, {53, 53});
	add("192.0.2.0/24", "1/h", 1, "outer");
	EXPECT_EQ(run({.proto = 47}), XDP_PASS) << "GRE: charged to the outer rule";
	EXPECT_EQ(run({.proto = 4}), XDP_DROP);
	EXPECT_EQ(run({.proto = 41}), XDP_DROP);
	EXPECT_EQ(run({.ethertype = 0x8864}), XDP_PASS) << "PPPoE: not IP at this layer";
	EXPECT_EQ(global(SLUICE_CNT_INFO_ENCAPSULATED), 4u);
	EXPECT_EQ(source("192.0.2.10", "outer").dropped_packets, 2u);
}

// Defect 10: an id of 0xffffffff could make a bucket key equal to the table's
// "being written" marker.
TEST_F(Datapath, RuleIdsStopBeforeTheBusyMarker)
{
	uint32_t zero = 0;
	struct sluice_meta meta = {};
	ASSERT_EQ(bpf_map_lookup_elem(maps_.meta.get(), &zero, &meta), 0);
	meta.next_rule_id = SLUICE_MAX_RULE_ID;
	ASSERT_EQ(bpf_map_update_elem(maps_.meta.get(), &zero, &meta, 0), 0);
	EXPECT_EQ(add("192.0.2.0/24", "10/s", 5, "last").id, SLUICE_MAX_RULE_ID);
	EXPECT_THROW(add("198.51.100.0/24", "10/s", 5, "one-too-many"), Error);
	EXPECT_EQ(table_->list().size(), 1u) << "nothing was added";
}
