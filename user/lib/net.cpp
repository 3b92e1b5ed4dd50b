// SPDX-License-Identifier: GPL-2.0-only
#include "net.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "error.h"

namespace sluice {

void mask_address(std::array<uint8_t, 16> &addr, int prefix_len)
{
	for (int i = 0; i < 16; i++) {
		int bits = prefix_len - i * 8;
		if (bits >= 8)
			continue;
		addr[i] &= bits <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - bits));
	}
}

Cidr parse_cidr(std::string_view text)
{
	Cidr c;
	std::string addr_text(text.substr(0, text.find('/')));
	bool has_len = text.find('/') != std::string_view::npos;

	// inet_pton reads up to a NUL; bytes after one must not be ignored.
	if (addr_text.find('\0') != std::string::npos)
		throw Error("invalid address '" + addr_text + "' in '" + std::string(text) + "'");
	if (inet_pton(AF_INET, addr_text.c_str(), c.addr.data()) == 1)
		c.family = 4;
	else if (inet_pton(AF_INET6, addr_text.c_str(), c.addr.data()) == 1)
		c.family = 6;
	else
		throw Error("invalid address '" + addr_text + "' in '" + std::string(text) + "'");

	c.prefix_len = c.max_len();
	if (has_len) {
		std::string_view len = text.substr(text.find('/') + 1);
		int v = -1;
		auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), v);
		// Digits only: from_chars would read "-0" as 0.
		if (len.empty() || !std::isdigit(static_cast<unsigned char>(len[0])) || ec != std::errc() ||
		    end != len.data() + len.size())
			throw Error("invalid prefix length in '" + std::string(text) + "'");
		if (v > c.max_len())
			throw Error("prefix length " + std::string(len) + " is out of range for IPv" +
				    std::to_string(c.family) + " (0-" + std::to_string(c.max_len()) +
				    ") in '" + std::string(text) + "'");
		c.prefix_len = v;
	}
	auto masked = c.addr;
	mask_address(masked, c.prefix_len);
	if (masked != c.addr)
		throw Error("'" + std::string(text) + "' has host bits set; did you mean " +
			    format_cidr(Cidr{c.family, masked, c.prefix_len}) + "?");
	// IPv4 packets carry IPv4 addresses: an IPv4-mapped IPv6 prefix never matches.
	static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (c.family == 6 && c.prefix_len >= 96 && std::equal(v4_mapped, v4_mapped + 12, c.addr.begin()))
		throw Error("'" + std::string(text) + "' is an IPv4-mapped IPv6 address, which no packet carries; " +
			    "write the IPv4 address " + format_address(4, c.addr.data() + 12) +
			    (c.prefix_len == 128 ? "" : "/" + std::to_string(c.prefix_len - 96)));
	return c;
}

bool cidr_contains(const Cidr &outer, const Cidr &inner)
{
	if (outer.family != inner.family || outer.prefix_len > inner.prefix_len)
		return false;
	auto a = inner.addr;
	mask_address(a, outer.prefix_len);
	return a == outer.addr;
}

std::string format_address(int family, const uint8_t *addr)
{
	char buf[INET6_ADDRSTRLEN];
	inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, buf, sizeof(buf));
	return buf;
}

std::string format_cidr(const Cidr &c)
{
	std::string s = format_address(c.family, c.addr.data());
	if (c.prefix_len != c.max_len()) {
		// Appended in two steps: GCC 12 at -O3 warns falsely (-Wrestrict) on "/" + to_string.
		s += '/';
		s += std::to_string(c.prefix_len);
	}
	return s;
}

} // namespace sluice
