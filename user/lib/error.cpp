// SPDX-License-Identifier: GPL-2.0-only
#include "error.h"

#include <cstring>

namespace sluice {

std::string printable(std::string_view text)
{
	static const char hex[] = "0123456789abcdef";
	std::string out;
	out.reserve(text.size());
	for (unsigned char c : text) {
		if (c < 0x20 || c == 0x7f) {
			out += "\\x";
			out += hex[c >> 4];
			out += hex[c & 15];
		} else {
			out += static_cast<char>(c);
		}
	}
	return out;
}

Error::Error(const std::string &what) : std::runtime_error(printable(what)) {}

void throw_errno(const std::string &what, int err)
{
	if (err < 0)
		err = -err;
	throw Error(what + ": " + std::strerror(err));
}

} // namespace sluice
