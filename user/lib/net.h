// SPDX-License-Identifier: GPL-2.0-only
// IP addresses and prefixes as the user writes them and as the maps hold them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

/// An IPv4 or IPv6 prefix. addr is in network order (IPv4 in the first 4
/// bytes), with the bits past prefix_len zero.
struct Cidr {
	int family = 4; ///< 4 or 6
	std::array<uint8_t, 16> addr{};
	int prefix_len = 32;

	int max_len() const { return family == 4 ? 32 : 128; }
	bool operator==(const Cidr &) const = default;
	auto operator<=>(const Cidr &) const = default;
};

/// Parses "203.0.113.0/24", "2001:db8::/32", or a bare address (a host
/// prefix). Rejects host bits set past the prefix, as `ip route` does.
Cidr parse_cidr(std::string_view text);

/// Zeroes the bits of addr past prefix_len.
void mask_address(std::array<uint8_t, 16> &addr, int prefix_len);

/// True if `outer` covers `inner` (same family, shorter or equal prefix).
bool cidr_contains(const Cidr &outer, const Cidr &inner);

std::string format_address(int family, const uint8_t *addr);
/// "203.0.113.0/24"; a host prefix prints as the bare address.
std::string format_cidr(const Cidr &c);

} // namespace sluice
