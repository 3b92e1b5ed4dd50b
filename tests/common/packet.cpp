#include "packet.h"

#include <algorithm>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <stdexcept>

namespace sluice::test {

namespace {

void put16(std::vector<uint8_t> &b, uint16_t v)
{
	b.push_back(v >> 8);
	b.push_back(v & 0xff);
}

uint16_t checksum(const uint8_t *p, size_t n)
{
	uint32_t sum = 0;
	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (p[i] << 8) | p[i + 1];
	if (n & 1)
		sum += p[n - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return static_cast<uint16_t>(~sum);
}

// The transport header and payload. A later fragment has no header; its
// payload reads as port 9999 so that a parser fooled into reading ports shows it.
std::vector<uint8_t> transport(const PacketSpec &s)
{
	std::vector<uint8_t> l4;
	if (s.frag != PacketSpec::Frag::later) {
		if (s.proto == IPPROTO_UDP) {
			put16(l4, 40000);
			put16(l4, s.dport);
			put16(l4, static_cast<uint16_t>(8 + s.payload));
			put16(l4, 0);
		} else if (s.proto == IPPROTO_TCP) {
			put16(l4, 40000);
			put16(l4, s.dport);
			for (int i = 0; i < 8; i++)
				l4.push_back(0);
			l4.push_back(5 << 4); // data offset 5 words
			l4.push_back(0x02);   // SYN
			put16(l4, 65535);
			put16(l4, 0);
			put16(l4, 0);
		} else if (s.proto == IPPROTO_ICMP || s.proto == IPPROTO_ICMPV6) {
			l4 = {static_cast<uint8_t>(s.proto == IPPROTO_ICMP ? 8 : 128), 0, 0, 0, 0, 1, 0, 1};
		}
		if (s.l4_bytes >= 0) { // a header cut short ends the datagram
			l4.resize(std::min(l4.size(), size_t(s.l4_bytes)));
			return l4;
		}
	}
	for (size_t i = 0; i < s.payload; i++)
		l4.push_back(i % 2 ? 0x0f : 0x27);
	return l4;
}

} // namespace

std::vector<uint8_t> build_packet(const PacketSpec &s)
{
	uint8_t src[16] = {}, dst[16] = {};
	bool v6 = s.src.find(':') != std::string::npos;
	std::string dst_text = s.dst.empty() ? (v6 ? "2001:db8:ffff::1" : "198.51.100.1") : s.dst;
	if (inet_pton(v6 ? AF_INET6 : AF_INET, s.src.c_str(), src) != 1 ||
	    inet_pton(v6 ? AF_INET6 : AF_INET, dst_text.c_str(), dst) != 1)
		throw std::invalid_argument("bad address in packet spec");

	std::vector<uint8_t> f = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
	for (uint16_t tpid : s.vlan_tpids) {
		put16(f, tpid);
		put16(f, s.vlan_id);
	}
	if (s.ethertype) {
		put16(f, s.ethertype);
		f.resize(f.size() + 28, 0); // an ARP-sized body
		return f;
	}
	put16(f, v6 ? 0x86dd : 0x0800);

	std::vector<uint8_t> l4 = transport(s);
	if (!v6) {
		size_t ihl = 5 + s.ipv4_option_bytes / 4;
		size_t start = f.size();
		f.push_back(static_cast<uint8_t>(0x40 | (s.ipv4_ihl >= 0 ? s.ipv4_ihl : ihl)));
		f.push_back(0);
		put16(f, static_cast<uint16_t>(ihl * 4 + l4.size()));
		put16(f, static_cast<uint16_t>(s.frag_id));
		uint16_t frag = s.frag == PacketSpec::Frag::first   ? 0x2000       // MF
				: s.frag == PacketSpec::Frag::later ? 185          // offset 1480 bytes
								    : 0x4000;      // DF
		put16(f, frag);
		f.push_back(64);
		f.push_back(s.proto);
		put16(f, 0);
		f.insert(f.end(), src, src + 4);
		f.insert(f.end(), dst, dst + 4);
		for (int i = 0; i < s.ipv4_option_bytes; i++)
			f.push_back(1); // NOP options
		uint16_t sum = checksum(&f[start], ihl * 4);
		f[start + 10] = sum >> 8;
		f[start + 11] = sum & 0xff;
	} else {
		std::vector<uint8_t> ext_types = s.ipv6_ext;
		bool has_frag = false;
		for (uint8_t t : ext_types)
			has_frag |= t == 44;
		if (s.frag != PacketSpec::Frag::none && !has_frag)
			ext_types.push_back(44);
		std::vector<uint8_t> ext;
		for (size_t i = 0; i < ext_types.size(); i++) {
			uint8_t next = i + 1 < ext_types.size() ? ext_types[i + 1] : s.proto;
			if (ext_types[i] == 44) {
				uint16_t off = s.frag == PacketSpec::Frag::later ? (185 << 3)
					       : s.frag == PacketSpec::Frag::first ? 1 : 0;
				ext.insert(ext.end(), {next, 0, uint8_t(off >> 8), uint8_t(off & 0xff), uint8_t(s.frag_id >> 24),
						       uint8_t(s.frag_id >> 16), uint8_t(s.frag_id >> 8), uint8_t(s.frag_id)});
			} else if (ext_types[i] == 51) { // AH: length in 4-byte units minus 2
				ext.insert(ext.end(), {next, 4, 0, 0});
				ext.resize(ext.size() + 20, 0);
			} else {
				ext.insert(ext.end(), {next, 0, 1, 4, 0, 0, 0, 0}); // 8 bytes, PadN
			}
		}
		f.insert(f.end(), {0x60, 0, 0, 0});
		put16(f, static_cast<uint16_t>(ext.size() + l4.size()));
		f.push_back(ext_types.empty() ? s.proto : ext_types[0]);
		f.push_back(64);
		f.insert(f.end(), src, src + 16);
		f.insert(f.end(), dst, dst + 16);
		f.insert(f.end(), ext.begin(), ext.end());
	}
	f.insert(f.end(), l4.begin(), l4.end());
	f.resize(f.size() + s.padding, 0);
	if (s.truncate && s.truncate < f.size())
		f.resize(s.truncate);
	return f;
}

size_t l3_length(const PacketSpec &s)
{
	return build_packet(s).size() - 14 - 4 * s.vlan_tpids.size() - s.padding;
}

} // namespace sluice::test
