// SPDX-License-Identifier: GPL-2.0-only
#include "corpus_shapes.h"

#include <cstdio>

namespace sluice::test {

namespace {

using Frag = PacketSpec::Frag;

struct Builder {
	std::vector<Shape> shapes;

	/// One frame per send.
	void one(const std::string &name, PacketSpec p, bool e2e = false)
	{
		bool v6 = p.src.find(':') != std::string::npos;
		shapes.push_back({name, v6,
				  [p](const std::string &src, const std::string &dst) {
					  PacketSpec q = p;
					  q.src = src;
					  q.dst = dst;
					  return Frames{build_packet(q)};
				  },
				  5, e2e});
	}

	/// The fragments of one datagram per send.
	void frags(const std::string &name, PacketSpec p, std::vector<FragmentPiece> pieces, bool e2e = false)
	{
		bool v6 = p.src.find(':') != std::string::npos;
		shapes.push_back({name, v6,
				  [p, pieces](const std::string &src, const std::string &dst) {
					  PacketSpec q = p;
					  q.src = src;
					  q.dst = dst;
					  return build_fragments(q, pieces);
				  },
				  2, e2e});
	}

	/// Frames built by hand from a source.
	void custom(const std::string &name, bool v6, std::function<Frames(const std::string &, const std::string &)> f,
		    int repeat = 5, bool e2e = false)
	{
		shapes.push_back({name, v6, std::move(f), repeat, e2e});
	}
};

const char *V6 = "2001:db8::1"; // a placeholder: the role's source replaces it

std::string port_name(uint8_t proto, uint16_t port)
{
	return std::string(proto == 6 ? "tcp" : "udp") + std::to_string(port);
}

void vlan_stacks(Builder &b)
{
	for (int depth = 0; depth <= 10; depth++) {
		PacketSpec prio, tagged, v6prio;
		for (int i = 0; i < depth; i++) {
			prio.vlan_tpids.push_back(i % 2 ? 0x8100 : 0x88a8);
			prio.vlan_ids.push_back(0);
			tagged.vlan_tpids.push_back(i == 0 && depth > 1 ? 0x88a8 : 0x8100);
			tagged.vlan_ids.push_back(static_cast<uint16_t>(100 + i));
			v6prio.vlan_tpids.push_back(0x8100);
			v6prio.vlan_ids.push_back(0);
		}
		std::string d = std::to_string(depth);
		b.one("vlan_" + d + "_priority_tags_udp53", prio, depth <= 10);
		b.one("vlan_" + d + "_tags_vid_100_udp53", tagged);
		v6prio.src = V6;
		b.one("ipv6_vlan_" + d + "_priority_tags_udp53", v6prio, depth == 3 || depth == 8 || depth == 9);
	}
	// The defect-2 frame and its port-scoped variants: three priority tags.
	PacketSpec three{.vlan_tpids = {0x8100, 0x88a8, 0x8100}, .vlan_ids = {0, 0, 0}};
	for (auto [proto, port] : {std::pair<uint8_t, uint16_t>{17, 123}, {17, 5353}, {6, 22}, {6, 80}}) {
		PacketSpec p = three;
		p.proto = proto;
		p.dport = port;
		p.sport = 40001;
		b.one("vlan_3_priority_tags_" + port_name(proto, port), p, true);
	}
	// The deepest path the parser walks: 8 priority tags, then 12 extension headers.
	b.one("vlan_8_priority_tags_ipv6_12_dest_opts_udp123",
	      {.src = V6, .dport = 123, .vlan_tpids = std::vector<uint16_t>(8, 0x8100),
	       .ipv6_ext = std::vector<uint8_t>(12, EXT_DEST), .vlan_ids = std::vector<uint16_t>(8, 0)},
	      true);
	// TCP with a data offset of 0: the ports are still the first four bytes.
	b.custom("ipv4_tcp22_data_offset_0", false, [](const std::string &src, const std::string &dst) {
		auto f = build_packet({.src = src, .dst = dst, .proto = 6, .dport = 22});
		f[14 + 20 + 12] = 0;
		return Frames{f};
	});
	b.one("tpid_9100_is_not_vlan", {.vlan_tpids = {0x9100}});
	b.one("tag_then_tpid_9100", {.vlan_tpids = {0x8100, 0x9100}});
	b.one("vlan_8_tags_cut_inside_the_8th",
	      {.vlan_tpids = {0x8100, 0x8100, 0x8100, 0x8100, 0x8100, 0x8100, 0x8100, 0x8100}, .truncate = 14 + 7 * 4 + 2});
	b.one("vlan_tag_truncated", {.vlan_tpids = {0x8100}, .truncate = 16});
}

void ipv4_headers(Builder &b)
{
	for (int ihl = 0; ihl <= 15; ihl++)
		b.one("ipv4_ihl_" + std::to_string(ihl), {.ipv4_ihl = ihl, .payload = 64});
	for (int len = 0; len <= 40; len++)
		b.one("ipv4_options_" + std::to_string(len) + "_bytes", {.ipv4_option_bytes = len}, len == 40);
	b.one("ipv4_option_router_alert", {.ipv4_options = {148, 4, 0, 0}});
	std::vector<uint8_t> rr = {7, 39, 4};
	rr.resize(39, 0);
	b.one("ipv4_option_record_route_39", {.ipv4_options = rr});
	std::vector<uint8_t> ts = {68, 40, 5, 0};
	ts.resize(40, 0);
	b.one("ipv4_option_timestamp_40", {.ipv4_options = ts});
	b.one("ipv4_option_length_past_header", {.ipv4_options = {0x88, 40, 0, 0}});

	b.one("ipv4_total_length_0_means_whole_frame", {.ipv4_total_length = 0});
	b.one("ipv4_total_length_one_short", {.ipv4_total_length = 20 + 8 + 31});
	b.one("ipv4_total_length_header_only", {.ipv4_total_length = 20});
	b.one("ipv4_total_length_below_header", {.ipv4_total_length = 19});
	b.one("ipv4_total_length_one_over_frame", {.ipv4_total_length = 20 + 8 + 33});
	b.one("ipv4_total_length_65535", {.ipv4_total_length = 65535});
	b.one("ipv4_padding_to_minimum_frame", {.payload = 0, .padding = 18}, true);
	b.one("ipv4_padding_1_byte", {.padding = 1});
	b.one("ipv4_padding_200_bytes", {.padding = 200});
	// Two bytes of UDP in the datagram; padding after it spells port 123.
	b.custom("ipv4_short_udp_padding_spells_port_123", false, [](const std::string &src, const std::string &dst) {
		PacketSpec p{.src = src, .dst = dst, .l4_bytes = 2, .padding = 20, .sport = 123};
		auto f = build_packet(p);
		f[f.size() - 20] = 0;
		f[f.size() - 19] = 123;
		return Frames{f};
	});
	b.one("ipv4_version_6_in_ipv4_ethertype", {.ip_version = 6});
	b.one("ipv6_version_4_in_ipv6_ethertype", {.src = V6, .ip_version = 4});
	b.one("ipv4_udp_header_cut_to_4_bytes", {.l4_bytes = 4, .payload = 0});
	b.one("ipv4_udp_header_cut_to_2_bytes", {.l4_bytes = 2, .payload = 0});
	b.one("ipv4_tcp_header_cut_to_8_bytes", {.proto = 6, .dport = 22, .l4_bytes = 8});
}

void fragments(Builder &b, bool v6)
{
	const std::string fam = v6 ? "ipv6_" : "ipv4_";
	std::vector<std::pair<uint8_t, uint16_t>> ports = {{17, 53}, {17, 123}, {17, 5353}, {6, 22}, {6, 80}};
	for (auto [proto, port] : ports) {
		PacketSpec p{.src = v6 ? V6 : "192.0.2.10", .proto = proto, .dport = port, .frag_id = port + (proto == 6 ? 1000u : 0u),
			     .payload = 64};
		size_t len = fragmentable_length(p);
		std::string n = fam + "frag_" + port_name(proto, port) + "_";
		bool e2e = port == 123 || port == 53 || port == 22;
		b.frags(n + "in_order", p, {{0, 24, true}, {24, 24, true}, {48, len - 48, false}}, e2e);
		b.frags(n + "reverse_order", p, {{48, len - 48, false}, {24, 24, true}, {0, 24, true}}, e2e);
		b.frags(n + "first_missing", p, {{24, 24, true}, {48, len - 48, false}}, e2e);
		b.frags(n + "overlapping", p, {{0, 32, true}, {16, 32, true}, {40, len - 40, false}});
		b.frags(n + "first_of_8_bytes", p, {{0, 8, true}, {8, len - 8, false}}, e2e);
		for (size_t tiny = 0; tiny <= 3; tiny++)
			b.frags(n + "tiny_first_" + std::to_string(tiny) + "_bytes", p,
				{{0, tiny, true}, {8, len - 8, false}}, e2e && (tiny == 0 || tiny == 3));
		b.frags(n + "first_only", p, {{0, 24, true}});
		PacketSpec later = p;
		later.frag = Frag::later;
		b.one(n + "later_only_offset_1480", later);
		// A second first fragment with another port, same id, then the rest.
		b.custom(n + "first_twice_other_port", v6, [p, len](const std::string &src, const std::string &dst) {
			PacketSpec a = p, c = p;
			a.src = c.src = src;
			a.dst = c.dst = dst;
			c.dport = p.dport == 123 ? 53 : 123;
			Frames f = build_fragments(a, {{0, 24, true}});
			Frames g = build_fragments(c, {{0, 24, true}, {24, len - 24, false}});
			f.insert(f.end(), g.begin(), g.end());
			return f;
		}, 2);
		// The same first fragment twice, then the rest: the copy relabels nothing.
		b.frags(n + "first_repeated_then_rest", p, {{0, 24, true}, {0, 24, true}, {24, len - 24, false}});
		// A first fragment naming another port between the later fragments,
		// after the whole datagram, and before its own first fragment.
		const uint16_t other = p.dport == 123 ? 53 : 123;
		auto interleave = [p, len, other](int where) {
			return [p, len, other, where](const std::string &src, const std::string &dst) {
				PacketSpec a = p, c = p;
				a.src = c.src = src;
				a.dst = c.dst = dst;
				c.dport = other;
				Frames own = build_fragments(a, {{0, 24, true}, {24, 24, true}, {48, len - 48, false}});
				Frames copy = build_fragments(c, {{0, 24, true}});
				own.insert(own.begin() + where, copy[0]);
				return own;
			};
		};
		b.custom(n + "other_port_first_between_later_fragments", v6, interleave(2), 2);
		b.custom(n + "other_port_first_after_the_datagram", v6, interleave(3), 2);
		b.custom(n + "other_port_first_before_its_own", v6, interleave(0), 2);
	}
	// Chosen fragment ids: 0 and the largest.
	for (uint32_t id : {0u, v6 ? 0xffffffffu : 0xffffu}) {
		PacketSpec p{.src = v6 ? V6 : "192.0.2.10", .dport = 123, .frag_id = id, .payload = 64};
		size_t len = fragmentable_length(p);
		b.frags(fam + "frag_udp123_id_" + std::to_string(id), p, {{0, 24, true}, {24, len - 24, false}});
	}
	if (v6) {
		// The fragment ends inside the extension header that follows the fragment header.
		PacketSpec p{.src = V6, .ipv6_ext = {EXT_FRAGMENT, EXT_DEST}, .frag_id = 77, .payload = 64};
		size_t len = fragmentable_length(p);
		b.frags("ipv6_frag_first_ends_inside_the_chain", p, {{0, 4, true}, {8, len - 8, false}});
		b.frags("ipv6_frag_first_holds_only_the_chain", p, {{0, 8, true}, {8, len - 8, false}});
		// A first fragment whose chain runs past the bound after the fragment header:
		// its protocol is unknown, so its later fragments must stay unknown too.
		PacketSpec deep{.src = V6, .ipv6_ext = {EXT_FRAGMENT, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60},
				.frag_id = 78, .payload = 64};
		size_t deep_len = fragmentable_length(deep);
		b.frags("ipv6_frag_first_chain_past_the_bound_then_later", deep,
			{{0, deep_len - 48, true}, {deep_len - 48, 48, false}});
		b.one("ipv6_atomic_fragment_udp53", {.src = V6, .ipv6_ext = {EXT_FRAGMENT}});
		b.one("ipv6_atomic_fragment_udp123", {.src = V6, .dport = 123, .ipv6_ext = {EXT_FRAGMENT}}, true);
		b.one("ipv6_atomic_fragment_tcp22", {.src = V6, .proto = 6, .dport = 22, .ipv6_ext = {EXT_FRAGMENT}});
		b.one("ipv6_fragment_header_13th_in_chain",
		      {.src = V6, .ipv6_ext = {60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 44}, .frag = Frag::later});
		b.one("ipv6_later_fragment_behind_11_headers",
		      {.src = V6, .dport = 123, .ipv6_ext = {60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 44}, .frag = Frag::later});
	} else {
		b.one("ipv4_frag_icmp_first", {.proto = 1, .frag = Frag::first});
		b.one("ipv4_frag_icmp_later", {.proto = 1, .frag = Frag::later});
		b.one("ipv4_frag_offset_8_more_set", {.frag_offset = 8, .more_fragments = 1});
		// A first fragment with two bytes of UDP; the padding after it spells port 123.
		b.custom("ipv4_frag_tiny_first_padding_spells_port_123", false,
			 [](const std::string &src, const std::string &dst) {
				 PacketSpec p{.src = src, .dst = dst, .frag = Frag::first, .l4_bytes = 2, .padding = 30,
					      .sport = 123};
				 auto f = build_packet(p);
				 f[f.size() - 30] = 0;
				 f[f.size() - 29] = 123;
				 return Frames{f};
			 });
	}
}

void ipv6_chains(Builder &b)
{
	for (int n = 0; n <= 14; n++) {
		std::vector<uint8_t> chain(static_cast<size_t>(n), EXT_DEST);
		bool e2e = n == 0 || n == 8 || n == 9 || n == 12 || n == 13;
		b.one("ipv6_" + std::to_string(n) + "_dest_opts_udp53", {.src = V6, .ipv6_ext = chain}, e2e);
		if (n == 8 || n == 12 || n == 13) {
			b.one("ipv6_" + std::to_string(n) + "_dest_opts_udp5353", {.src = V6, .dport = 5353, .ipv6_ext = chain}, true);
			b.one("ipv6_" + std::to_string(n) + "_dest_opts_udp123", {.src = V6, .dport = 123, .ipv6_ext = chain}, true);
			b.one("ipv6_" + std::to_string(n) + "_dest_opts_tcp22", {.src = V6, .proto = 6, .dport = 22, .ipv6_ext = chain});
			b.one("ipv6_" + std::to_string(n) + "_dest_opts_tcp80", {.src = V6, .proto = 6, .dport = 80, .ipv6_ext = chain});
		}
	}
	// Every type in one chain, growing: hop-by-hop first, as the kernel requires.
	const std::vector<uint8_t> mix = {EXT_HOP, EXT_DEST, EXT_ROUTING, EXT_FRAGMENT, EXT_AH, EXT_DEST, EXT_AH,
					  EXT_DEST, EXT_ROUTING, EXT_DEST, EXT_AH, EXT_DEST, EXT_DEST, EXT_DEST};
	for (size_t n = 1; n <= mix.size(); n++)
		b.one("ipv6_mixed_chain_" + std::to_string(n), {.src = V6, .dport = 123,
								 .ipv6_ext = std::vector<uint8_t>(mix.begin(), mix.begin() + n)});
	struct One {
		const char *name;
		uint8_t type;
	} each[] = {{"hop_by_hop", EXT_HOP}, {"routing", EXT_ROUTING}, {"dest_opts", EXT_DEST},
		    {"atomic_fragment", EXT_FRAGMENT}, {"ah", EXT_AH}, {"esp", EXT_ESP}, {"no_next_header", EXT_NONE},
		    {"unknown_253", EXT_UNKNOWN}};
	for (const auto &e : each) {
		b.one(std::string("ipv6_only_") + e.name + "_udp53", {.src = V6, .ipv6_ext = {e.type}});
		b.one(std::string("ipv6_only_") + e.name + "_udp123", {.src = V6, .dport = 123, .ipv6_ext = {e.type}});
	}
	b.one("ipv6_esp_after_11_headers", {.src = V6, .ipv6_ext = {60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, EXT_ESP}});
	for (uint8_t len : {1, 7, 255})
		b.one("ipv6_dest_opts_length_" + std::to_string(len), {.src = V6, .ipv6_ext = {EXT_DEST}, .ipv6_ext_len = {len}});
	b.one("ipv6_ah_length_0", {.src = V6, .ipv6_ext = {EXT_AH}, .ipv6_ext_len = {0}});
	// A destination-options header that claims 520 bytes in a 16-byte payload,
	// naming protocol 156 after it: truncated inside the chain, so unknown.
	b.one("ipv6_ext_length_past_payload", {.src = V6, .proto = 156, .ipv6_ext = {EXT_DEST}, .truncate = 14 + 40 + 16,
					       .ipv6_ext_len = {64}, .lengths_follow_truncation = true});
	b.one("ipv6_first_fragment_ext_length_past_payload",
	      {.src = V6, .proto = 156, .ipv6_ext = {EXT_FRAGMENT, EXT_DEST}, .frag = Frag::first, .truncate = 14 + 40 + 24,
	       .ipv6_ext_len = {0, 64}, .lengths_follow_truncation = true});
	b.one("ipv6_jumbo_option", {.src = V6, .ipv6_jumbo = true});
	b.one("ipv6_payload_length_0_no_jumbo", {.src = V6, .ipv6_payload_length = 0});
	b.one("ipv6_payload_length_one_over_frame", {.src = V6, .ipv6_payload_length = 8 + 33});
	b.one("ipv6_padding_after_payload", {.src = V6, .padding = 24});
	b.one("ipv6_udp_header_cut_to_2_bytes", {.src = V6, .l4_bytes = 2});
	b.one("ipv6_icmpv6", {.src = V6, .proto = 58});
	// The chain runs past the payload length; the padding after it is a UDP header to port 123.
	b.custom("ipv6_chain_runs_into_padding", true, [](const std::string &src, const std::string &dst) {
		PacketSpec p{.src = src, .dst = dst, .dport = 123, .ipv6_ext = {EXT_DEST}, .l4_bytes = 0, .payload = 0,
			     .padding = 8};
		auto f = build_packet(p);
		size_t at = f.size() - 8; // the padding
		f[at + 2] = 0;
		f[at + 3] = 123;
		return Frames{f};
	});
}

void truncations(Builder &b)
{
	const std::vector<std::pair<std::string, PacketSpec>> bases = {
		{"ipv4_vlan_options_udp", {.vlan_tpids = {0x8100}, .ipv4_option_bytes = 8}},
		{"ipv4_tcp22", {.proto = 6, .dport = 22}},
		{"ipv6_chain_udp", {.src = V6, .ipv6_ext = {EXT_HOP, EXT_DEST, EXT_AH}}},
	};
	for (const auto &[base, spec] : bases) {
		size_t full = build_packet(spec).size();
		for (const auto &[where, at] : header_boundaries(spec)) {
			if (at < 14 || at >= full)
				continue; // BPF_PROG_TEST_RUN refuses frames shorter than Ethernet
			std::string name = "cut_" + base + "_at_" + where;
			for (char &c : name)
				if (c == ' ')
					c = '_';
			PacketSpec p = spec;
			p.truncate = at;
			b.one(name, p);
			p.lengths_follow_truncation = true;
			b.one(name + "_lengths_agree", p);
		}
	}
	b.one("cut_ethernet_after_the_ethertype", {.truncate = 14});
}

void encapsulations(Builder &b)
{
	using E = PacketSpec::Encap;
	b.one("encap_ipip", {.encap = E::ipip}, true);
	b.one("encap_ipv6_in_ipv4", {.encap = E::ip6ip});
	b.one("encap_gre", {.encap = E::gre}, true);
	b.one("encap_esp_ipv4", {.proto = 50});
	b.one("encap_pppoe_session_ipv4", {.encap = E::pppoe}, true);
	b.one("encap_pppoe_session_ipv6", {.src = V6, .encap = E::pppoe});
	b.one("encap_ipip_in_ipv6", {.src = V6, .encap = E::ipip});
	b.one("pppoe_discovery", {.ethertype = 0x8863});
	b.one("arp", {.ethertype = 0x0806});
	b.one("ipv4_icmp", {.proto = 1});
	b.one("ipv4_unknown_protocol_253", {.proto = 253});
	b.one("ipv4_gue_udp_6080", {.dport = 6080});
	b.one("ipv4_udp123_allowed", {.dport = 123, .sport = 40002}, true);
	b.one("ipv4_tcp80_allowed", {.proto = 6, .dport = 80, .sport = 40003}, true);
	b.one("ipv4_tcp22_limited", {.proto = 6, .dport = 22, .sport = 40004}, true);
}

std::vector<Shape> make()
{
	Builder b;
	vlan_stacks(b);
	ipv4_headers(b);
	fragments(b, false);
	fragments(b, true);
	ipv6_chains(b);
	truncations(b);
	encapsulations(b);
	return std::move(b.shapes);
}

} // namespace

const std::vector<Shape> &corpus_shapes()
{
	static const std::vector<Shape> shapes = make();
	return shapes;
}

} // namespace sluice::test
