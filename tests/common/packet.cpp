// SPDX-License-Identifier: GPL-2.0-only
#include "packet.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace sluice::test {

namespace {

constexpr size_t NPOS = static_cast<size_t>(-1);

void put16(std::vector<uint8_t> &b, uint16_t v)
{
	b.push_back(v >> 8);
	b.push_back(v & 0xff);
}

void put32(std::vector<uint8_t> &b, uint32_t v)
{
	put16(b, v >> 16);
	put16(b, v & 0xffff);
}

void set16(std::vector<uint8_t> &b, size_t at, uint16_t v)
{
	b[at] = v >> 8;
	b[at + 1] = v & 0xff;
}

uint32_t sum_words(const uint8_t *p, size_t n, uint32_t sum = 0)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (p[i] << 8) | p[i + 1];
	if (n & 1)
		sum += p[n - 1] << 8;
	return sum;
}

uint16_t fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return static_cast<uint16_t>(~sum);
}

struct Addrs {
	bool v6 = false;
	uint8_t src[16] = {}, dst[16] = {};
};

Addrs parse_addrs(const std::string &src, const std::string &dst)
{
	Addrs a;
	a.v6 = src.find(':') != std::string::npos;
	std::string dst_text = dst.empty() ? (a.v6 ? "2001:db8:ffff::1" : "198.51.100.1") : dst;
	if (inet_pton(a.v6 ? AF_INET6 : AF_INET, src.c_str(), a.src) != 1 ||
	    inet_pton(a.v6 ? AF_INET6 : AF_INET, dst_text.c_str(), a.dst) != 1)
		throw std::invalid_argument("bad address in packet spec: " + src + " -> " + dst_text);
	return a;
}

// The transport checksum over the pseudo-header of `a` and the whole segment.
void fill_l4_checksum(std::vector<uint8_t> &l4, uint8_t proto, const Addrs &a)
{
	size_t at = proto == IPPROTO_UDP ? 6 : proto == IPPROTO_TCP ? 16 : 2;
	if (l4.size() < at + 2)
		return;
	l4[at] = l4[at + 1] = 0;
	uint32_t sum = 0;
	if (proto == IPPROTO_ICMP) {
		set16(l4, at, fold(sum_words(l4.data(), l4.size())));
		return;
	}
	size_t alen = a.v6 ? 16 : 4;
	sum = sum_words(a.src, alen, sum);
	sum = sum_words(a.dst, alen, sum);
	sum += proto;
	sum += static_cast<uint32_t>(l4.size() & 0xffff) + static_cast<uint32_t>(l4.size() >> 16);
	uint16_t c = fold(sum_words(l4.data(), l4.size(), sum));
	if (proto == IPPROTO_UDP && c == 0)
		c = 0xffff;
	set16(l4, at, c);
}

// The transport header and payload, checksummed as a whole datagram.
std::vector<uint8_t> transport(uint8_t proto, uint16_t sport, uint16_t dport, uint8_t tcp_flags, size_t payload,
			       const Addrs &a)
{
	std::vector<uint8_t> l4;
	if (proto == IPPROTO_UDP) {
		put16(l4, sport);
		put16(l4, dport);
		put16(l4, static_cast<uint16_t>(8 + payload));
		put16(l4, 0);
	} else if (proto == IPPROTO_TCP) {
		put16(l4, sport);
		put16(l4, dport);
		put32(l4, 0x01020304); // sequence
		put32(l4, 0);
		l4.push_back(5 << 4); // data offset 5 words
		l4.push_back(tcp_flags);
		put16(l4, 65535);
		put16(l4, 0);
		put16(l4, 0);
	} else if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) {
		l4 = {static_cast<uint8_t>(proto == IPPROTO_ICMP ? 8 : 128), 0, 0, 0, 0, 1, 0, 1};
	}
	for (size_t i = 0; i < payload; i++)
		l4.push_back(i % 2 ? 0x0f : 0x27); // a later fragment's data reads as port 9999
	if (proto == IPPROTO_UDP || proto == IPPROTO_TCP || proto == IPPROTO_ICMPV6 || proto == IPPROTO_ICMP)
		fill_l4_checksum(l4, proto, a);
	return l4;
}

std::vector<uint8_t> ipv4_header(const PacketSpec &s, const Addrs &a, uint8_t proto)
{
	std::vector<uint8_t> opts = s.ipv4_options;
	if (opts.empty())
		opts.assign(static_cast<size_t>(s.ipv4_option_bytes), 1); // NOP
	while (opts.size() % 4)
		opts.push_back(0); // EOL
	std::vector<uint8_t> h;
	size_t ihl = 5 + opts.size() / 4;
	int version = s.ip_version >= 0 ? s.ip_version : 4;
	h.push_back(static_cast<uint8_t>((version << 4) | ((s.ipv4_ihl >= 0 ? s.ipv4_ihl : ihl) & 0xf)));
	h.push_back(0);
	put16(h, 0); // total length: when assembled
	put16(h, static_cast<uint16_t>(s.frag_id));
	put16(h, 0); // fragment field: when assembled
	h.push_back(64);
	h.push_back(proto);
	put16(h, 0);
	h.insert(h.end(), a.src, a.src + 4);
	h.insert(h.end(), a.dst, a.dst + 4);
	h.insert(h.end(), opts.begin(), opts.end());
	return h;
}

// One extension header of type `type` whose successor is `next`.
std::vector<uint8_t> ipv6_ext_header(uint8_t type, uint8_t next, int len_field, uint32_t frag_id, uint32_t jumbo)
{
	std::vector<uint8_t> e;
	switch (type) {
	case EXT_FRAGMENT:
		e = {next, 0, 0, 0};
		put32(e, frag_id);
		return e;
	case EXT_AH: {
		uint8_t len = len_field >= 0 ? static_cast<uint8_t>(len_field) : 4;
		e = {next, len, 0, 0};
		put32(e, 0x100); // SPI
		put32(e, 1);     // sequence
		e.resize((len + 2) * 4, 0);
		return e;
	}
	case EXT_ESP:
		put32(e, 0x100); // SPI
		put32(e, 1);     // sequence
		return e;
	case EXT_NONE:
		return e;
	case EXT_ROUTING: {
		uint8_t len = len_field >= 0 ? static_cast<uint8_t>(len_field) : 0;
		e = {next, len, 0, 0}; // type 0, no segments left: the kernel skips it
		e.resize((len + 1) * 8, 0);
		return e;
	}
	case EXT_HOP:
	case EXT_DEST: {
		uint8_t len = len_field >= 0 ? static_cast<uint8_t>(len_field) : 0;
		e = {next, len};
		if (jumbo) {
			e.insert(e.end(), {0xc2, 4});
			put32(e, jumbo);
		} else {
			e.insert(e.end(), {1, 4, 0, 0, 0, 0}); // PadN to 8 bytes
		}
		// Longer headers: skippable unknown options (type 0x1e), as PadN may cover at most 7 bytes.
		for (int i = 0; i < len; i++)
			e.insert(e.end(), {0x1e, 6, 0, 0, 0, 0, 0, 0});
		return e;
	}
	default: {
		uint8_t len = len_field >= 0 ? static_cast<uint8_t>(len_field) : 0;
		e = {next, len};
		e.resize((len + 1) * 8, 0);
		return e;
	}
	}
}

// A frame before its lengths and fragment fields are final.
struct Layout {
	std::vector<uint8_t> l2;   // Ethernet, tags, EtherType (PPPoE header and PPP protocol)
	size_t pppoe_len_at = NPOS; // the PPPoE length field
	bool v6 = false;
	std::vector<uint8_t> iph;  // IPv4 header, or IPv6 header with the unfragmentable extension headers
	size_t v6_frag_at = NPOS;  // offset in iph of the IPv6 fragment header
	bool v6_jumbo = false;
	std::vector<uint8_t> body; // the fragmentable part
	size_t l4_at = 0;          // where the transport header begins in body
};

std::vector<uint8_t> l2_header(const PacketSpec &s)
{
	std::vector<uint8_t> f = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
	for (size_t i = 0; i < s.vlan_tpids.size(); i++) {
		put16(f, s.vlan_tpids[i]);
		put16(f, i < s.vlan_ids.size() ? s.vlan_ids[i] : s.vlan_id);
	}
	return f;
}

// The inner packet of an IPIP, IPv6-in-IPv4 or GRE tunnel: UDP to s.dport.
std::vector<uint8_t> inner_packet(const PacketSpec &s)
{
	bool v6 = s.encap == PacketSpec::Encap::ip6ip;
	PacketSpec in{.src = v6 ? "fd00:99::1" : "10.99.0.1", .dst = v6 ? "fd00:99::2" : "10.99.0.2",
		      .dport = s.dport, .payload = s.payload};
	std::vector<uint8_t> f = build_packet(in);
	return std::vector<uint8_t>(f.begin() + 14, f.end());
}

Layout layout(const PacketSpec &s)
{
	Layout L;
	Addrs a = parse_addrs(s.src, s.dst);
	L.v6 = a.v6;
	L.l2 = l2_header(s);
	if (s.encap == PacketSpec::Encap::pppoe) {
		put16(L.l2, 0x8864);
		L.l2.insert(L.l2.end(), {0x11, 0x00, 0x00, 0x01}); // version 1 type 1, session data, session 1
		L.pppoe_len_at = L.l2.size();
		put16(L.l2, 0);
		put16(L.l2, a.v6 ? 0x0057 : 0x0021);
	} else {
		put16(L.l2, a.v6 ? 0x86dd : 0x0800);
	}

	uint8_t upper = s.proto;
	std::vector<uint8_t> l4;
	switch (s.encap) {
	case PacketSpec::Encap::ipip:
		upper = 4;
		l4 = inner_packet(s);
		break;
	case PacketSpec::Encap::ip6ip:
		upper = 41;
		l4 = inner_packet(s);
		break;
	case PacketSpec::Encap::gre:
		upper = 47;
		l4 = {0, 0, 0x08, 0x00};
		{
			auto in = inner_packet(s);
			l4.insert(l4.end(), in.begin(), in.end());
		}
		break;
	default:
		l4 = transport(s.proto, s.sport, s.dport, s.tcp_flags, s.payload, a);
	}

	if (!a.v6) {
		L.iph = ipv4_header(s, a, upper);
		L.body = l4;
		L.l4_at = 0;
		return L;
	}

	std::vector<uint8_t> types = s.ipv6_ext;
	std::vector<int> lens;
	for (size_t i = 0; i < types.size(); i++)
		lens.push_back(i < s.ipv6_ext_len.size() ? s.ipv6_ext_len[i] : -1);
	if (s.ipv6_jumbo) {
		types.insert(types.begin(), EXT_HOP);
		lens.insert(lens.begin(), 0);
	}
	size_t frag_index = NPOS;
	for (size_t i = 0; i < types.size(); i++)
		if (types[i] == EXT_FRAGMENT && frag_index == NPOS)
			frag_index = i;
	if (s.frag != PacketSpec::Frag::none && frag_index == NPOS) {
		types.push_back(EXT_FRAGMENT);
		lens.push_back(-1);
		frag_index = types.size() - 1;
	}
	L.iph = {static_cast<uint8_t>((s.ip_version >= 0 ? s.ip_version : 6) << 4), 0, 0, 0};
	put16(L.iph, 0); // payload length: when assembled
	L.iph.push_back(types.empty() ? upper : types[0]);
	L.iph.push_back(64);
	L.iph.insert(L.iph.end(), a.src, a.src + 16);
	L.iph.insert(L.iph.end(), a.dst, a.dst + 16);
	for (size_t i = 0; i < types.size(); i++) {
		uint8_t next = i + 1 < types.size() ? types[i + 1] : upper;
		bool jumbo = s.ipv6_jumbo && i == 0;
		auto e = ipv6_ext_header(types[i], next, lens[i], s.frag_id, jumbo ? 1 : 0);
		std::vector<uint8_t> &into = frag_index == NPOS || i <= frag_index ? L.iph : L.body;
		if (i == frag_index)
			L.v6_frag_at = L.iph.size();
		into.insert(into.end(), e.begin(), e.end());
	}
	L.v6_jumbo = s.ipv6_jumbo;
	L.l4_at = L.body.size();
	L.body.insert(L.body.end(), l4.begin(), l4.end());
	return L;
}

// The IP length fields once the frame's IP part is known, and the checksum.
void set_ip_lengths(std::vector<uint8_t> &f, size_t ip_at, bool v6, size_t ip_len, const PacketSpec &s, bool jumbo)
{
	if (!v6) {
		if (ip_at + 20 > f.size())
			return;
		set16(f, ip_at + 2, static_cast<uint16_t>(s.ipv4_total_length >= 0 ? s.ipv4_total_length : ip_len));
		size_t hlen = 20 + (s.ipv4_options.empty() ? (s.ipv4_option_bytes + 3) / 4 * 4
							   : (s.ipv4_options.size() + 3) / 4 * 4);
		if (ip_at + hlen > f.size())
			hlen = f.size() - ip_at;
		f[ip_at + 10] = f[ip_at + 11] = 0;
		set16(f, ip_at + 10, fold(sum_words(&f[ip_at], hlen)));
	} else {
		if (ip_at + 40 > f.size())
			return;
		size_t plen = ip_len - 40;
		if (jumbo) {
			// The jumbo option holds the real length; the fixed header says 0.
			if (ip_at + 48 <= f.size()) {
				f[ip_at + 44] = plen >> 24;
				f[ip_at + 45] = (plen >> 16) & 0xff;
				f[ip_at + 46] = (plen >> 8) & 0xff;
				f[ip_at + 47] = plen & 0xff;
			}
			plen = 0;
		}
		set16(f, ip_at + 4, static_cast<uint16_t>(s.ipv6_payload_length >= 0 ? s.ipv6_payload_length : plen));
	}
}

// One frame: the layout with `len` bytes of the body from `offset`, as a
// fragment at byte `frag_off` with more-fragments `mf` when `fragment`.
std::vector<uint8_t> assemble(const Layout &L, const PacketSpec &s, size_t offset, size_t len, bool fragment,
			      size_t frag_off, bool mf)
{
	std::vector<uint8_t> f = L.l2;
	size_t ip_at = f.size();
	f.insert(f.end(), L.iph.begin(), L.iph.end());
	f.insert(f.end(), L.body.begin() + offset, L.body.begin() + offset + len);
	size_t ip_len = L.iph.size() + len;

	if (!L.v6) {
		uint16_t field = fragment ? static_cast<uint16_t>((mf ? 0x2000 : 0) | ((frag_off / 8) & 0x1fff)) : 0x4000;
		set16(f, ip_at + 6, field);
	} else if (L.v6_frag_at != NPOS) {
		uint16_t field = static_cast<uint16_t>((frag_off & 0xfff8) | (mf ? 1 : 0));
		set16(f, ip_at + L.v6_frag_at + 2, field);
	}
	set_ip_lengths(f, ip_at, L.v6, ip_len, s, L.v6_jumbo);
	if (L.pppoe_len_at != NPOS)
		set16(f, L.pppoe_len_at, static_cast<uint16_t>(2 + ip_len));
	f.insert(f.end(), s.padding, s.padding_byte);

	if (s.truncate && s.truncate < f.size()) {
		f.resize(s.truncate);
		if (s.lengths_follow_truncation && f.size() > ip_at)
			set_ip_lengths(f, ip_at, L.v6, f.size() - ip_at, s, L.v6_jumbo);
	}
	return f;
}

} // namespace

std::vector<uint8_t> build_packet(const PacketSpec &s)
{
	if (s.ethertype) {
		std::vector<uint8_t> f = l2_header(s);
		put16(f, s.ethertype);
		f.resize(f.size() + 28, 0); // an ARP-sized body
		if (s.truncate && s.truncate < f.size())
			f.resize(s.truncate);
		return f;
	}
	Layout L = layout(s);
	using Frag = PacketSpec::Frag;
	size_t offset = 0, len = L.body.size();
	if (s.frag == Frag::later && !L.v6) {
		offset = L.l4_at + (s.proto == IPPROTO_UDP ? 8 : s.proto == IPPROTO_TCP ? 20 : s.proto == 1 ? 8 : 0);
		offset = std::min(offset, L.body.size());
		len = L.body.size() - offset;
	} else if (s.frag == Frag::later) {
		// IPv6: the data after the fragment header is the payload only.
		size_t hdr = s.proto == IPPROTO_UDP ? 8 : s.proto == IPPROTO_TCP ? 20 : s.proto == 58 ? 8 : 0;
		offset = std::min(L.l4_at + hdr, L.body.size());
		len = L.body.size() - offset;
	}
	if (s.l4_bytes >= 0 && s.frag != Frag::later)
		len = std::min(len, L.l4_at + static_cast<size_t>(s.l4_bytes));
	bool fragment = s.frag != Frag::none;
	size_t frag_off = s.frag == Frag::later ? 1480 : 0;
	bool mf = s.frag == Frag::first;
	if (s.frag_offset >= 0) {
		frag_off = static_cast<size_t>(s.frag_offset);
		fragment = true;
	}
	if (s.more_fragments >= 0) {
		mf = s.more_fragments != 0;
		fragment = true;
	}
	return assemble(L, s, offset, len, fragment, frag_off, mf);
}

std::vector<std::vector<uint8_t>> build_fragments(const PacketSpec &spec, const std::vector<FragmentPiece> &pieces)
{
	PacketSpec s = spec;
	s.frag = PacketSpec::Frag::none;
	s.l4_bytes = -1;
	bool v6 = s.src.find(':') != std::string::npos;
	if (v6) {
		bool has = false;
		for (uint8_t t : s.ipv6_ext)
			has |= t == EXT_FRAGMENT;
		if (!has)
			s.ipv6_ext.push_back(EXT_FRAGMENT);
	}
	Layout L = layout(s);
	std::vector<std::vector<uint8_t>> out;
	for (const auto &p : pieces) {
		size_t off = std::min(p.offset, L.body.size());
		size_t len = std::min(p.length, L.body.size() - off);
		out.push_back(assemble(L, s, off, len, true, p.offset, p.more));
	}
	return out;
}

size_t fragmentable_length(const PacketSpec &spec)
{
	PacketSpec s = spec;
	s.frag = PacketSpec::Frag::none;
	if (s.src.find(':') != std::string::npos) {
		bool has = false;
		for (uint8_t t : s.ipv6_ext)
			has |= t == EXT_FRAGMENT;
		if (!has)
			s.ipv6_ext.push_back(EXT_FRAGMENT);
	}
	return layout(s).body.size();
}

std::vector<std::pair<std::string, size_t>> header_boundaries(const PacketSpec &spec)
{
	PacketSpec s = spec;
	s.truncate = 0;
	std::vector<std::pair<std::string, size_t>> b;
	b.push_back({"start", 0});
	b.push_back({"mac addresses", 12});
	size_t at = 12;
	for (size_t i = 0; i < s.vlan_tpids.size(); i++) {
		b.push_back({"tag " + std::to_string(i + 1) + " tci", at + 2});
		at += 4;
		b.push_back({"tag " + std::to_string(i + 1), at});
	}
	if (s.ethertype) {
		b.push_back({"ethertype", at + 2});
		return b;
	}
	Layout L = layout(s);
	at = L.l2.size();
	b.push_back({"l2", at});
	if (!L.v6) {
		b.push_back({"ipv4 fixed part", at + 20});
		b.push_back({"ipv4 header", at + L.iph.size()});
		at += L.iph.size();
	} else {
		b.push_back({"ipv6 fixed header", at + 40});
		// Each extension header's end: walk the chain as built.
		size_t pos = 40;
		uint8_t nh = L.iph[6];
		std::vector<uint8_t> all = L.iph;
		all.insert(all.end(), L.body.begin(), L.body.begin() + L.l4_at);
		int n = 0;
		while (pos < all.size()) {
			size_t len;
			if (nh == EXT_FRAGMENT)
				len = 8;
			else if (nh == EXT_AH)
				len = (all[pos + 1] + 2) * 4;
			else if (nh == EXT_ESP)
				len = 8;
			else if (nh == EXT_NONE)
				break;
			else
				len = (all[pos + 1] + 1) * 8;
			b.push_back({"ipv6 ext " + std::to_string(++n) + " first bytes", at + pos + 2});
			uint8_t next = nh == EXT_ESP ? 0 : all[pos];
			pos += len;
			b.push_back({"ipv6 ext " + std::to_string(n), at + pos});
			if (nh == EXT_ESP)
				break;
			nh = next;
		}
		at += all.size();
	}
	b.push_back({"transport ports", at + 4});
	b.push_back({"transport header", at + (s.proto == IPPROTO_TCP ? 20 : 8)});
	return b;
}

size_t l3_length(const PacketSpec &s)
{
	size_t l2 = s.ethertype ? 14 + 4 * s.vlan_tpids.size() : layout(s).l2.size();
	return build_packet(s).size() - l2 - (s.ethertype ? 0 : s.padding);
}

std::string hex_dump(const std::vector<uint8_t> &frame)
{
	std::string out;
	char buf[32];
	for (size_t i = 0; i < frame.size(); i++) {
		if (i % 16 == 0) {
			std::snprintf(buf, sizeof(buf), "%s%04zx:", i ? "\n" : "", i);
			out += buf;
		}
		std::snprintf(buf, sizeof(buf), " %02x", frame[i]);
		out += buf;
	}
	return out;
}

} // namespace sluice::test
