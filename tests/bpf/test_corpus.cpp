// SPDX-License-Identifier: GPL-2.0-only
// The adversarial corpus: every frame shape of corpus_shapes.cpp, sent through
// BPF_PROG_TEST_RUN by the four roles of issue 8 (a limited source, a denied
// source, a source under a port-scoped limit beside a port-scoped allow, and a
// source no rule covers). Each frame's verdict and counter are compared with
// the oracle (tests/common/oracle.cpp, written from the specification), and
// the invariants are checked on what the program did: no bypass, no false
// drop, every frame in exactly one verdict counter. Then the exact
// reproductions of the defects 1, 2, 3 and 10.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>

#include <set>
#include <sstream>

#include "adversarial.h"
#include "corpus_shapes.h"

using namespace sluice;
using namespace sluice::test;
using Frag = PacketSpec::Frag;
using A = ModelRule::Action;

namespace {

/// One frame's outcome against the oracle.
struct Outcome {
	bool ok = true;
	std::string line;
};

/// Runs `frame` and compares verdict and counter with the oracle's decision.
Outcome run_and_compare(ProgramUnderTest &put, const std::vector<uint8_t> &frame, const FrameFacts &facts,
			const Expected &exp, int *verdict = nullptr)
{
	int got = put.run(frame);
	auto moved = put.moved();
	if (verdict)
		*verdict = got;
	Outcome o;
	o.ok = got == exp.xdp && moved.verdict == exp.counter && moved.verdict_total == 1;
	std::ostringstream s;
	s << facts.describe() << ": expected " << xdp_name(exp.xdp) << " " << exp.counter << " (" << exp.why
	  << "), got " << xdp_name(got) << " " << moved.verdict;
	o.line = s.str();
	return o;
}

} // namespace

// One program for the whole corpus (loading it costs most of a second): each
// shape and role has its own source address, so no bucket or fragment-table
// entry is shared between shapes. SLUICE_CORPUS_FILTER=text runs only the
// shapes whose name contains it.
TEST(Corpus, EveryShapeFromEveryRole)
{
	ASSERT_EQ(geteuid(), 0u) << "the corpus loads the real XDP program and must run as root";
	const char *filter = std::getenv("SLUICE_CORPUS_FILTER");
	ProgramUnderTest put;
	put.add_roles();

	uint64_t frames_sent = 0;
	std::vector<std::string> differing;
	const auto &shapes = corpus_shapes();
	for (size_t index = 0; index < shapes.size(); index++) {
		const Shape &shape = shapes[index];
		if (filter && shape.name.find(filter) == std::string::npos)
			continue;
		SCOPED_TRACE(shape.name);
		std::string roles_differing;
		for (Role role : ALL_ROLES) {
			std::string src = role_source(role, static_cast<int>(index), shape.v6);
			Frames frames = shape.frames(src, "");
			std::vector<std::string> mismatches;
			std::string first_hex;
			uint64_t limited_passes = 0, charged_passes = 0;
			for (int rep = 0; rep < shape.repeat; rep++) {
				for (size_t k = 0; k < frames.size(); k++) {
					const auto &frame = frames[k];
					FrameFacts facts = inspect_frame(frame);
					Expected exp = put.oracle.decide(facts);
					int got = 0;
					Outcome o = run_and_compare(put, frame, facts, exp, &got);
					frames_sent++;
					std::string where = std::string(role_name(role)) + " frame " + std::to_string(k) + " send " +
							    std::to_string(rep) + ": ";
					if (!o.ok) {
						mismatches.push_back(where + o.line);
						if (first_hex.empty())
							first_hex = hex_dump(frame);
					}
					bool judged = facts.kind == FrameFacts::Kind::ip;
					// The invariants, on what the program did.
					if (role == Role::denied && judged && got == XDP_PASS)
						ADD_FAILURE() << "BYPASS: a denied source's frame the stack takes passed. " << where
							      << o.line << "\n" << hex_dump(frame);
					if (role == Role::limited && judged && got == XDP_PASS && ++limited_passes > 3)
						ADD_FAILURE() << "BYPASS: pass " << limited_passes << " of a source limited to a burst of 3. "
							      << where << o.line << "\n" << hex_dump(frame);
					if ((role == Role::port_scoped || role == Role::selected) && exp.charged &&
					    got == XDP_PASS && ++charged_passes > 6)
						ADD_FAILURE() << "BYPASS: pass " << charged_passes
							      << " of traffic the port limits (bursts 3 + 3) must charge. " << where << o.line
							      << "\n" << hex_dump(frame);
					if (role == Role::uncovered && got == XDP_DROP && facts.kind != FrameFacts::Kind::too_many_tags)
						ADD_FAILURE() << "FALSE DROP: a source no rule covers was dropped. " << where << o.line
							      << "\n" << hex_dump(frame);
					if (exp.allowed && got == XDP_DROP)
						ADD_FAILURE() << "FALSE DROP: allowed traffic (every selector known) was dropped. " << where
							      << o.line << "\n" << hex_dump(frame);
				}
			}
			if (!mismatches.empty()) {
				roles_differing += std::string(roles_differing.empty() ? "" : ", ") + role_name(role);
				std::string text;
				for (size_t i = 0; i < mismatches.size() && i < 4; i++)
					text += "\n  " + mismatches[i];
				ADD_FAILURE() << shape.name << ", " << role_name(role) << " source " << src << ": " << mismatches.size()
					      << " frame(s) differ from the specification:" << text << "\nfirst differing frame:\n"
					      << first_hex;
			}
		}
		if (!roles_differing.empty())
			differing.push_back(shape.name + " (" + roles_differing + ")");
	}
	// Every frame lands in exactly one verdict counter.
	auto totals = put.read_counters();
	uint64_t verdicts = 0;
	for (int i = 0; i < SLUICE_CNT_VERDICT_END; i++)
		verdicts += totals[i];
	EXPECT_EQ(verdicts, frames_sent) << "the verdict counters must account for every frame";
	std::printf("corpus: %zu shapes, %llu frames; %zu shapes differ from the specification\n", shapes.size(),
		    (unsigned long long)frames_sent, differing.size());
	for (const auto &d : differing)
		std::printf("  differs: %s\n", d.c_str());
}

TEST(CorpusSize, AtLeast200ShapesWithUniqueNames)
{
	const auto &shapes = corpus_shapes();
	EXPECT_GE(shapes.size(), 200u);
	std::set<std::string> names;
	for (const auto &s : shapes)
		EXPECT_TRUE(names.insert(s.name).second) << "duplicate shape " << s.name;
	std::printf("corpus: %zu shapes x 4 roles\n", shapes.size());
}

// ---------------------------------------------------------------------------
// The defects, reproduced exactly as reported.

namespace {

class Defect : public ::testing::Test {
protected:
	void SetUp() override { ASSERT_EQ(geteuid(), 0u) << "loads the real XDP program: run as root"; }

	/// Sends `frame` `n` times; every verdict and counter must be the oracle's.
	/// Returns how many passed.
	int send(const std::vector<uint8_t> &frame, int n, const std::string &what)
	{
		int passed = 0, differ = 0;
		std::string first;
		for (int i = 0; i < n; i++) {
			FrameFacts facts = inspect_frame(frame);
			Expected exp = put.oracle.decide(facts);
			int got = 0;
			Outcome o = run_and_compare(put, frame, facts, exp, &got);
			if (!o.ok && differ++ == 0)
				first = "send " + std::to_string(i) + ": " + o.line;
			passed += got == XDP_PASS;
		}
		EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << n << " sends differ from the specification; first, "
				     << first << "\n" << hex_dump(frame);
		return passed;
	}
	int send(const PacketSpec &p, int n, const std::string &what) { return send(build_packet(p), n, what); }

	uint64_t counter(const std::string &name)
	{
		int i = put.counter_index(name);
		EXPECT_GE(i, 0) << "this build has no counter " << name;
		return i < 0 ? 0 : put.read_counters()[i];
	}

	SourceStats source(const std::string &src, const std::string &rule)
	{
		for (const auto &s : put.stats().sources)
			if (s.source == src && s.rule == rule)
				return s;
		return {};
	}

	ProgramUnderTest put;
};

const std::vector<uint8_t> dest_opts(int n) { return std::vector<uint8_t>(static_cast<size_t>(n), EXT_DEST); }

} // namespace

// Defect 1, IPv6: `--proto icmp --allow` and `--rate 1/h` at 2001:db8::/32.
// UDP behind 9 destination-options headers, behind 13 (past the bound), and
// non-first fragments: none may pass as allowed; the limit holds.
TEST_F(Defect, D1_Ipv6HiddenUdpIsNotAllowedByAnIcmpAllow)
{
	put.add({"icmp-ok", "2001:db8::/32", A::allow, "", 0, 1, 0, 0});
	put.add({"limit", "2001:db8::/32", A::limit, "1/h", 5, 0, 0, HOUR_NS});
	int passed = send({.src = "2001:db8::10", .ipv6_ext = dest_opts(9)}, 10, "UDP behind 9 dest-opts");
	passed += send({.src = "2001:db8::10", .ipv6_ext = dest_opts(13)}, 5, "UDP behind 13 dest-opts");
	passed += send({.src = "2001:db8::10", .frag = Frag::later}, 5, "IPv6 non-first fragment");
	EXPECT_EQ(passed, 5) << "the burst of 5, then nothing";
	EXPECT_EQ(counter("pass_allow"), 0u) << "nothing passes as allowed";
	EXPECT_EQ(send({.src = "2001:db8::10", .proto = 58}, 3, "ICMPv6 is still allowed"), 3);
}

// Defect 1, IPv6: `--proto udp --dport 53 --allow` inside a denied /112:
// TCP to port 22 behind 9 extension headers (and 13) must not reach the host.
TEST_F(Defect, D1_Ipv6HiddenTcpDoesNotPassAPortAllowInsideADeny)
{
	put.add({"deny", "2001:db8::/112", A::deny, "", 0, 0, 0, 0});
	put.add({"dns-ok", "2001:db8::/112", A::allow, "", 0, 17, 53, 0});
	EXPECT_EQ(send({.src = "2001:db8::10", .proto = 6, .dport = 22, .ipv6_ext = dest_opts(9)}, 5, "TCP/22 behind 9"), 0);
	EXPECT_EQ(send({.src = "2001:db8::10", .proto = 6, .dport = 22, .ipv6_ext = dest_opts(13)}, 5, "TCP/22 behind 13"), 0);
	EXPECT_EQ(send({.src = "2001:db8::10", .dport = 53, .ipv6_ext = dest_opts(9)}, 5, "UDP/53 behind 9 is allowed"), 5);
	EXPECT_EQ(counter("pass_allow"), 5u);
}

// Defect 1, IPv4 tiny first fragment: tcp/80 at 1000000/s beside tcp/22 at 1/h.
// SYNs to port 22 as first fragments holding 8 bytes of TCP header are charged
// to the port-22 rule; with 3 bytes they are dropped as an attack.
TEST_F(Defect, D1_Ipv4FirstFragmentWith8BytesOfTcpIsChargedToItsPort)
{
	put.add({"web", "192.0.2.0/24", A::limit, "1000000/s", 100000, 6, 80, 1000});
	put.add({"ssh", "192.0.2.0/24", A::limit, "1/h", 5, 6, 22, HOUR_NS});
	PacketSpec syn{.proto = 6, .dport = 22, .frag = Frag::first, .l4_bytes = 8};
	EXPECT_EQ(send(syn, 10, "SYN to 22 in a first fragment of 8 bytes"), 5);
	EXPECT_EQ(source("192.0.2.10", "ssh").passed_packets, 5u);
	EXPECT_EQ(source("192.0.2.10", "web").passed_packets, 0u) << "nothing charged to the port-80 rule";
	syn.l4_bytes = 3;
	EXPECT_EQ(send(syn, 5, "SYN to 22 in a first fragment of 3 bytes"), 0);
	EXPECT_EQ(counter("drop_malformed"), 5u);
}

// Defect 1, the specification's answer to a tiny first fragment: dropped as
// an attack whenever any rule covers its source, even a rule it could never
// match (here a TCP/80 allow for a UDP fragment); passed when no rule does.
TEST_F(Defect, D1_ATinyFirstFragmentIsDroppedWhereARuleMayDecideIt)
{
	put.add({"web-ok", "192.0.2.0/24", A::allow, "", 0, 6, 80, 0});
	PacketSpec tiny{.frag = Frag::first, .l4_bytes = 2};
	EXPECT_EQ(send(tiny, 3, "UDP under only a TCP/80 allow: no rule may decide it"), 3);
	tiny.proto = 6;
	EXPECT_EQ(send(tiny, 3, "TCP: the allow cannot match an unknown port, and nothing else applies"), 3);
	put.add({"rest", "192.0.2.0/24", A::deny, "", 0, 0, 0, 0});
	EXPECT_EQ(send(tiny, 3, "TCP beside a deny that may decide it"), 0);
	tiny.src = "10.9.9.9";
	EXPECT_EQ(send(tiny, 3, "the same from a source no rule covers"), 3);
}

// Defect 1: `--proto udp --dport 123 --allow` beside a port-53 limit: the
// non-first fragments of port-53 datagrams are judged as port 53, with or
// without their first fragment, never as allowed.
TEST_F(Defect, D1_FragmentsOfPort53DatagramsAreNotAllowedByAPort123Allow)
{
	put.add({"ntp-ok", "192.0.2.0/24", A::allow, "", 0, 17, 123, 0});
	put.add({"dns", "192.0.2.0/24", A::limit, "1/h", 5, 17, 53, HOUR_NS});
	PacketSpec dns{.dport = 53, .payload = 64};
	size_t len = fragmentable_length(dns);
	int passed = 0;
	for (uint32_t id = 1; id <= 10; id++) {
		dns.frag_id = id;
		for (const auto &f : build_fragments(dns, {{0, 40, true}, {40, len - 40, false}}))
			passed += send(f, 1, "port-53 datagram " + std::to_string(id));
	}
	dns.frag_id = 99;
	for (const auto &f : build_fragments(dns, {{40, len - 40, false}}))
		passed += send(f, 3, "later fragment, first never sent");
	EXPECT_EQ(passed, 5) << "the port-53 burst, fragments included";
	EXPECT_EQ(counter("pass_allow"), 0u);
	// A port-123 datagram's fragments are allowed, every one.
	PacketSpec ntp{.dport = 123, .frag_id = 500, .payload = 64};
	int ntp_passed = 0;
	for (const auto &f : build_fragments(ntp, {{0, 40, true}, {40, len - 40, false}}))
		ntp_passed += send(f, 1, "port-123 datagram");
	EXPECT_EQ(ntp_passed, 2);
}

// Defect 1: the fragment table remembers a first fragment for 30 s (the
// kernel's ipfrag_time): a later fragment 29 s on is judged as its datagram
// (allowed), 31 s on it is a fragment whose first is unknown (charged).
TEST(DefectClock, D1_AFirstFragmentIsRememberedFor30Seconds)
{
	ASSERT_EQ(geteuid(), 0u);
	ProgramUnderTest put(4096, true);
	put.add({"ntp-ok", "192.0.2.0/24", A::allow, "", 0, 17, 123, 0});
	put.add({"dns", "192.0.2.0/24", A::limit, "1/h", 5, 17, 53, HOUR_NS});
	const uint64_t t0 = 1000ull * 1000000000ull, s = 1000000000ull;
	PacketSpec ntp{.dport = 123, .frag_id = 42, .payload = 64};
	auto f = build_fragments(ntp, {{0, 24, true}, {24, 24, true}, {48, 24, false}});
	put.set_clock(t0);
	EXPECT_EQ(put.run(f[0]), XDP_PASS);
	EXPECT_EQ(put.moved().verdict, "pass_allow");
	put.set_clock(t0 + 29 * s);
	EXPECT_EQ(put.run(f[1]), XDP_PASS);
	EXPECT_EQ(put.moved().verdict, "pass_allow") << "29 s on: judged as its datagram";
	put.set_clock(t0 + 31 * s);
	EXPECT_EQ(put.run(f[2]), XDP_PASS);
	EXPECT_EQ(put.moved().verdict, "pass_limit") << "31 s on: its first is forgotten, charged to the port-53 limit";
}

// Defect 1, the other way round: a port-scoped deny must not drop the
// fragments of other ports' datagrams (IPv4 and IPv6).
TEST_F(Defect, D1_APortScopedDenyDropsOnlyItsOwnPortsFragments)
{
	put.add({"dns-deny4", "192.0.2.0/24", A::deny, "", 0, 17, 53, 0});
	put.add({"dns-deny6", "2001:db8::/32", A::deny, "", 0, 17, 53, 0});
	for (const char *src : {"192.0.2.10", "2001:db8::10"}) {
		for (auto [proto, port] : {std::pair<uint8_t, uint16_t>{17, 5353}, {6, 80}}) {
			PacketSpec p{.src = src, .proto = proto, .dport = port, .frag_id = 7000u + port,
				     .payload = 64};
			size_t len = fragmentable_length(p);
			int passed = 0;
			for (const auto &f : build_fragments(p, {{0, 40, true}, {40, len - 40, false}}))
				passed += send(f, 1, std::string(src) + " fragments to " + std::to_string(port));
			EXPECT_EQ(passed, 2) << src << " port " << port;
		}
		PacketSpec dns{.src = src, .frag_id = 8000, .payload = 64};
		size_t len = fragmentable_length(dns);
		int passed = 0;
		for (const auto &f : build_fragments(dns, {{0, 40, true}, {40, len - 40, false}}))
			passed += send(f, 1, std::string(src) + " fragments to 53");
		EXPECT_EQ(passed, 0) << src;
	}
}

// Defect 2: a denied source's UDP behind three priority tags (VLAN id 0,
// 0x8100 / 0x88a8) is delivered by the kernel, so it must be dropped.
TEST_F(Defect, D2_ThreePriorityTagsFromADeniedSourceAreDropped)
{
	put.add({"blocked", "192.0.2.0/24", A::deny, "", 0, 0, 0, 0});
	PacketSpec three{.vlan_tpids = {0x8100, 0x88a8, 0x8100}, .vlan_ids = {0, 0, 0}};
	EXPECT_EQ(send(three, 5, "three priority tags"), 0) << "5 of 5 reached the socket before";
	PacketSpec two{.vlan_tpids = {0x88a8, 0x8100}, .vlan_ids = {0, 0}};
	EXPECT_EQ(send(two, 5, "two priority tags"), 0);
	EXPECT_EQ(counter("drop_deny"), 10u);
	EXPECT_EQ(counter("failopen_parse"), 0u);
}

// Defect 3: with exactly 8 extension headers (and 12, the new bound) the
// transport header is read: UDP to 5353 is not charged to a port-53 limit.
TEST_F(Defect, D3_ExactlyEightAndTwelveExtensionHeadersStillReadThePort)
{
	put.add({"dns", "2001:db8::/32", A::limit, "1/h", 1, 17, 53, HOUR_NS});
	EXPECT_EQ(send({.src = "2001:db8::10", .dport = 5353, .ipv6_ext = dest_opts(8)}, 5, "UDP/5353 behind 8"), 5);
	EXPECT_EQ(send({.src = "2001:db8::10", .dport = 5353, .ipv6_ext = dest_opts(12)}, 5, "UDP/5353 behind 12"), 5);
	EXPECT_EQ(counter("pass_no_match"), 10u);
	// Past the bound the port is unknown: charged to the limit (one pass, its burst).
	EXPECT_EQ(send({.src = "2001:db8::10", .dport = 5353, .ipv6_ext = dest_opts(13)}, 5, "UDP/5353 behind 13"), 1);
}

// Defect 10: bytes are the IP total length, not the Ethernet padding after it;
// encapsulated traffic is judged by its outer header and counted.
TEST_F(Defect, D10_BytesExcludeEthernetPaddingAndEncapsulationIsCounted)
{
	put.add({"bytes", "192.0.2.0/24", A::limit, "1KB/h", 3000, 0, 0, HOUR_NS});
	PacketSpec small{.payload = 0, .padding = 18}; // 28 bytes of IP in a 60-byte frame
	ASSERT_EQ(build_packet(small).size(), 60u);
	for (int i = 0; i < 10; i++)
		EXPECT_EQ(put.run(build_packet(small)), XDP_PASS);
	EXPECT_EQ(source("192.0.2.10", "bytes").passed_bytes, 280u) << "10 x 28 bytes of IP, not 10 x 46";

	ProgramUnderTest fresh;
	using E = PacketSpec::Encap;
	for (PacketSpec p : {PacketSpec{.encap = E::ipip}, PacketSpec{.encap = E::ip6ip}, PacketSpec{.encap = E::gre},
			     PacketSpec{.proto = 50}, PacketSpec{.encap = E::pppoe}})
		EXPECT_EQ(fresh.run(build_packet(p)), XDP_PASS);
	int i = fresh.counter_index("encapsulated");
	ASSERT_GE(i, 0) << "this build has no `encapsulated` counter";
	EXPECT_EQ(fresh.read_counters()[i], 5u) << "IPIP, IPv6-in-IPv4, GRE, ESP, PPPoE";
}

// ---------------------------------------------------------------------------
// Cases the corpus and the fuzzer found against the hardened program, named.

// An IPv6 extension header whose length runs past the payload: the chain is
// cut short, so the protocol is unknown (charged to the strictest rule), not
// the next-header byte of a header that is not all there; in a first fragment
// the chain stops before the upper-layer header: a tiny first fragment.
TEST_F(Defect, Found_AnExtensionHeaderRunningPastThePayloadLeavesTheProtocolUnknown)
{
	put.add({"dns", "2001:db8::/32", A::limit, "1/h", 2, 17, 53, HOUR_NS});
	put.add({"ntp-ok", "2001:db8::/32", A::allow, "", 0, 17, 123, 0});
	// Destination options claiming 520 bytes in a 16-byte payload, naming protocol 156.
	PacketSpec past{.src = "2001:db8::10", .proto = 156, .ipv6_ext = {EXT_DEST}, .truncate = 14 + 40 + 16,
			.ipv6_ext_len = {64}, .lengths_follow_truncation = true};
	EXPECT_EQ(send(past, 4, "a header past the payload"), 2) << "charged to the port-53 limit: its burst of 2";
	PacketSpec first = past;
	first.ipv6_ext = {EXT_FRAGMENT, EXT_DEST};
	first.ipv6_ext_len = {0, 64};
	first.frag = Frag::first;
	first.truncate = 14 + 40 + 24;
	EXPECT_EQ(send(first, 3, "the same in a first fragment"), 0);
	EXPECT_EQ(counter("drop_malformed"), 3u);
}

// A first fragment whose protocol is unknown (its chain runs past the 12-header
// bound after the fragment header) names nothing: its later fragments stay
// unknown and are charged, not judged as "protocol 0" and passed.
TEST_F(Defect, Found_AFirstFragmentOfUnknownProtocolDoesNotNameItsLaterFragments)
{
	put.add({"dns", "2001:db8::/32", A::limit, "1/h", 2, 17, 53, HOUR_NS});
	PacketSpec deep{.src = "2001:db8::10",
			.ipv6_ext = {EXT_FRAGMENT, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60},
			.frag_id = 99, .payload = 64};
	size_t len = fragmentable_length(deep);
	auto f = build_fragments(deep, {{0, len - 48, true}, {len - 48, 48, false}});
	EXPECT_EQ(send(f[0], 1, "first fragment, chain past the bound"), 1) << "charged: the first token";
	EXPECT_EQ(send(f[1], 3, "its later fragment"), 1) << "charged: the second token, then dropped";
}

// ---------------------------------------------------------------------------
// Malformed frames (issue 26, finding 6): the stack drops them, so a frame
// that passes XDP costs the host an skb for nothing. Generated length fields
// of both families (every IPv4 total length and IPv6 payload length from 0 to
// past the frame, every ihl and version nibble, and truncation at every byte),
// from each role's source, over a few bases (VLAN tags, options, Ethernet
// padding, TCP): every verdict and counter must be the oracle's, a malformed
// frame from a source a rule covers is dropped (`drop_malformed`), one from a
// source no rule covers or whose source cannot be read passes.
TEST(Malformed, GeneratedLengthFieldsFollowTheOracle)
{
	ASSERT_EQ(geteuid(), 0u) << "loads the real XDP program: run as root";
	ProgramUnderTest put;
	put.add_roles();

	struct Base {
		const char *name;
		PacketSpec spec;
	};
	const char *v6 = "2001:db8::1"; // replaced by the role's source
	const std::vector<Base> bases = {
		{"ipv4_udp53", {.payload = 32}},
		{"ipv4_tcp22_vlan_options", {.proto = 6, .dport = 22, .vlan_tpids = {0x8100}, .ipv4_option_bytes = 12}},
		{"ipv4_udp123_padded_to_minimum", {.dport = 123, .payload = 0, .padding = 18}},
		{"ipv6_udp53", {.src = v6, .payload = 32}},
		{"ipv6_tcp80_two_tags_dest_opts", {.src = v6, .proto = 6, .dport = 80, .vlan_tpids = {0x88a8, 0x8100},
						   .ipv6_ext = {EXT_DEST}}},
		{"ipv6_udp123_padded", {.src = v6, .dport = 123, .payload = 0, .padding = 10}},
	};

	uint64_t frames = 0, differ = 0, malformed_covered = 0, malformed_open = 0;
	std::string first_differ;
	int index = 0;
	for (const Base &base : bases) {
		const bool is_v6 = base.spec.src.find(':') != std::string::npos;
		for (Role role : ALL_ROLES) {
			PacketSpec p = base.spec;
			p.src = role_source(role, 5000 + index++, is_v6);
			const size_t l3 = 14 + 4 * p.vlan_tpids.size(), full = build_packet(p).size();
			std::vector<std::pair<std::string, std::vector<uint8_t>>> cases;
			auto with = [&](const std::string &what, auto change) {
				PacketSpec q = p;
				change(q);
				cases.push_back({what, build_packet(q)});
			};
			// Every length field from 0 to past the frame, and the largest.
			for (int v = 0; v <= int(full - l3) + 2; v++) {
				if (is_v6)
					with("payload_len " + std::to_string(v), [v](PacketSpec &q) { q.ipv6_payload_length = v; });
				else
					with("tot_len " + std::to_string(v), [v](PacketSpec &q) { q.ipv4_total_length = v; });
			}
			with("length 65535", [is_v6](PacketSpec &q) {
				(is_v6 ? q.ipv6_payload_length : q.ipv4_total_length) = 65535;
			});
			for (int nibble = 0; nibble < 16; nibble++) {
				with("version " + std::to_string(nibble), [nibble](PacketSpec &q) { q.ip_version = nibble; });
				if (!is_v6)
					with("ihl " + std::to_string(nibble), [nibble](PacketSpec &q) { q.ipv4_ihl = nibble; });
			}
			// Truncation at every byte of the IP header and past it, the
			// lengths left as they were (too long) or following the cut.
			for (size_t cut = l3; cut < full; cut++)
				for (bool follow : {false, true})
					with("cut at " + std::to_string(cut) + (follow ? ", lengths agree" : ""),
					     [cut, follow](PacketSpec &q) {
						     q.truncate = cut;
						     q.lengths_follow_truncation = follow;
					     });
			for (const auto &[what, frame] : cases) {
				FrameFacts facts = inspect_frame(frame);
				Expected exp = put.oracle.decide(facts);
				int got = 0;
				Outcome o = run_and_compare(put, frame, facts, exp, &got);
				frames++;
				const bool covered = facts.family && !put.oracle.candidates(facts).empty();
				if (facts.kind == FrameFacts::Kind::failopen_parse) {
					(covered ? malformed_covered : malformed_open)++;
					if (covered && got != XDP_DROP)
						ADD_FAILURE() << base.name << " from " << role_name(role) << ", " << what
							      << ": a malformed frame from a covered source passed\n"
							      << hex_dump(frame);
				}
				if (role == Role::uncovered && got == XDP_DROP)
					ADD_FAILURE() << base.name << ", " << what << ": FALSE DROP of a source no rule covers";
				if (!o.ok && differ++ == 0)
					first_differ = std::string(base.name) + " from " + role_name(role) + ", " + what + ": " +
						       o.line + "\n" + hex_dump(frame);
			}
		}
	}
	EXPECT_EQ(differ, 0u) << differ << " of " << frames << " frames differ from the oracle; first: " << first_differ;
	EXPECT_GT(malformed_covered, 300u) << "the generator makes malformed frames from covered sources";
	EXPECT_GT(malformed_open, 100u) << "and from sources no rule covers, or none can be read";
	std::printf("malformed: %llu frames, %llu malformed from covered sources (to drop), %llu malformed that fail "
		    "open (no rule covers the source, or it cannot be read)\n",
		    (unsigned long long)frames, (unsigned long long)malformed_covered, (unsigned long long)malformed_open);
}
