// SPDX-License-Identifier: GPL-2.0-only
// Builds test frames: Ethernet, VLAN tags, IPv4 (options, fragments) or IPv6
// (extension headers, fragments), then UDP, TCP or ICMP. Each field defaults
// to an ordinary packet so a test states only what it is about; the fields
// after `truncate` state the malformed and adversarial shapes (any VLAN stack,
// any IPv4 header length and total length, padding, fragments of every kind,
// IPv6 chains of every type, encapsulations, truncation at any byte).
//
// Frames carry valid IPv4 header checksums and TCP/UDP/ICMPv6 checksums, so
// that a frame sent over veth is delivered by the kernel when it is well formed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::test {

/// IPv6 extension header types the builder knows (any other number is written
/// as an 8-byte header of that type: an unknown protocol to a parser).
enum Ipv6Ext : uint8_t {
	EXT_HOP = 0,
	EXT_ROUTING = 43,
	EXT_FRAGMENT = 44,
	EXT_ESP = 50,   ///< 8 bytes (SPI, sequence); what follows is opaque
	EXT_AH = 51,
	EXT_NONE = 59,  ///< no next header: zero bytes; what follows is opaque
	EXT_DEST = 60,
	EXT_UNKNOWN = 253, ///< experimental: not an extension header, ends the chain
};

struct PacketSpec {
	std::string src = "192.0.2.10"; ///< the family follows the address
	std::string dst;                ///< default 198.51.100.1 or 2001:db8:ffff::1
	uint8_t proto = 17;             ///< IP protocol: 17 UDP, 6 TCP, 1 ICMP, 58 ICMPv6
	uint16_t dport = 53;
	uint8_t tcp_flags = 0x02;       ///< TCP: the flags byte (SYN by default)
	std::vector<uint16_t> vlan_tpids; ///< outermost first: 0x88a8, 0x8100
	uint16_t vlan_id = 100;           ///< of every tag (vlan_ids overrides per tag); 0 makes priority tags
	uint16_t ethertype = 0;           ///< set to send a non-IP frame (0x0806 ARP)
	int ipv4_option_bytes = 0;        ///< 0-40 bytes of NOP options, padded with EOL to 4-byte words
	int ipv4_ihl = -1;                ///< override the header length field
	std::vector<uint8_t> ipv6_ext;    ///< extension header types, in order (see Ipv6Ext)
	enum class Frag { none, first, later } frag = Frag::none;
	uint32_t frag_id = 0x1234;        ///< IPv4 (low 16 bits) or IPv6 fragment id
	int l4_bytes = -1;                ///< keep only this many bytes of transport header and
	                                  ///< payload; the IP lengths say so (a tiny first fragment)
	size_t payload = 32;  ///< bytes after the transport header
	size_t truncate = 0;  ///< if set, cut the frame to this many bytes
	size_t padding = 0;   ///< Ethernet padding after the datagram, outside its length

	// --- Adversarial shapes; every default leaves the frame as above. ---
	std::vector<uint16_t> vlan_ids;   ///< VLAN id of each tag in vlan_tpids; missing ones are vlan_id
	uint16_t sport = 40000;
	std::vector<uint8_t> ipv4_options; ///< raw option bytes (padded with EOL); overrides ipv4_option_bytes
	int ip_version = -1;              ///< override the version nibble
	int ipv4_total_length = -1;       ///< override tot_len (0 = "the whole frame", as BIG TCP)
	int ipv6_payload_length = -1;     ///< override payload_len
	uint8_t padding_byte = 0;         ///< what the padding holds (a parser must not read it)
	int frag_offset = -1;             ///< bytes, a multiple of 8: overrides what `frag` implies
	int more_fragments = -1;          ///< 0 or 1: overrides what `frag` implies
	std::vector<uint8_t> ipv6_ext_len; ///< per extension header: its length field (default 0;
	                                   ///< AH: 4); 8-byte units beyond the first, AH 4-byte units - 2
	bool ipv6_jumbo = false;          ///< hop-by-hop jumbo payload option first, payload_len 0
	enum class Encap { none, ipip, ip6ip, gre, pppoe } encap = Encap::none;
	///< ipip / ip6ip / gre: the outer header carries protocol 4 / 41 / 47 and an inner
	///< IPv4 (IPv6 for ip6ip) packet to `dport`; pppoe: a PPPoE session frame around the packet
	bool lengths_follow_truncation = false; ///< after `truncate`, the IP lengths end where the frame does
};

std::vector<uint8_t> build_packet(const PacketSpec &spec);

/// A piece of a datagram: `length` bytes of its fragmentable part (transport
/// header and payload, and for IPv6 the extension headers after the fragment
/// header) starting at byte `offset`, with the more-fragments flag `more`.
struct FragmentPiece {
	size_t offset;
	size_t length;
	bool more;
};

/// The fragments of the datagram `spec` describes (its `frag`, `frag_offset`,
/// `more_fragments` and `l4_bytes` are ignored), one frame per piece, in the
/// order given: overlapping, out of order or with the first missing as the
/// pieces say. IPv6 fragments get a fragment header after the extension headers
/// listed before an EXT_FRAGMENT in `ipv6_ext`, or after all of them.
/// Checksums are those of the whole datagram, so the kernel reassembles it.
std::vector<std::vector<uint8_t>> build_fragments(const PacketSpec &spec, const std::vector<FragmentPiece> &pieces);

/// Bytes of the fragmentable part of `spec`'s datagram (what FragmentPiece offsets index).
size_t fragmentable_length(const PacketSpec &spec);

/// Offsets in the frame where each header begins and ends, for truncation at
/// every boundary: {name, offset}, in frame order.
std::vector<std::pair<std::string, size_t>> header_boundaries(const PacketSpec &spec);

/// Bytes of the IP datagram (padding excluded): what byte counters count.
size_t l3_length(const PacketSpec &spec);

/// The frame as hex, 16 bytes a line (for failure messages).
std::string hex_dump(const std::vector<uint8_t> &frame);

} // namespace sluice::test
