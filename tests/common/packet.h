// Builds test frames: Ethernet, VLAN tags, IPv4 (options, fragments) or IPv6
// (extension headers, fragments), then UDP, TCP or ICMP. Each field defaults
// to an ordinary packet so a test states only what it is about.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::test {

struct PacketSpec {
	std::string src = "192.0.2.10"; ///< the family follows the address
	std::string dst;                ///< default 198.51.100.1 or 2001:db8:ffff::1
	uint8_t proto = 17;             ///< IP protocol: 17 UDP, 6 TCP, 1 ICMP, 58 ICMPv6
	uint16_t dport = 53;
	std::vector<uint16_t> vlan_tpids; ///< outermost first: 0x88a8, 0x8100
	uint16_t vlan_id = 100;           ///< of every tag; 0 makes priority tags
	uint16_t ethertype = 0;           ///< set to send a non-IP frame (0x0806 ARP)
	int ipv4_option_bytes = 0;        ///< 0-40, a multiple of 4
	int ipv4_ihl = -1;                ///< override the header length field
	std::vector<uint8_t> ipv6_ext;    ///< extension header types, in order
	enum class Frag { none, first, later } frag = Frag::none;
	uint32_t frag_id = 0x1234;        ///< IPv4 uses the low 16 bits
	int l4_bytes = -1;                ///< keep only this many bytes of the transport header, no payload
	size_t payload = 32;  ///< bytes after the transport header
	size_t truncate = 0;  ///< if set, cut the frame to this many bytes
	size_t padding = 0;               ///< Ethernet padding after the datagram, outside its length
};

std::vector<uint8_t> build_packet(const PacketSpec &spec);

/// Bytes from the IP header to the end of the frame: what byte counters count.
size_t l3_length(const PacketSpec &spec);

} // namespace sluice::test
