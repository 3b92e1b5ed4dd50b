// SPDX-License-Identifier: GPL-2.0-only
// parse_cidr: an accepted prefix is well formed, was written with address
// characters only, and formats to text that parses to the same prefix.
#include "fuzz_check.h"
#include "net.h"

using namespace sluice;
using namespace sluice::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	std::string_view text = as_text(data, size);
	Cidr c;
	if (!accepts([&] { c = parse_cidr(text); }))
		return 0;

	FUZZ_CHECK(c.family == 4 || c.family == 6, text);
	FUZZ_CHECK(c.prefix_len >= 0 && c.prefix_len <= c.max_len(), text);
	auto masked = c.addr;
	mask_address(masked, c.prefix_len);
	FUZZ_CHECK(masked == c.addr, text); // no host bits
	if (c.family == 4)
		for (int i = 4; i < 16; i++)
			FUZZ_CHECK(c.addr[i] == 0, text);
	// Nothing but an address and a length was accepted: no trailing bytes, no NUL.
	for (char ch : text)
		FUZZ_CHECK(std::isxdigit(static_cast<unsigned char>(ch)) || ch == '.' || ch == ':' || ch == '/',
			   text);

	std::string shown = format_cidr(c);
	Cidr again;
	FUZZ_CHECK(accepts([&] { again = parse_cidr(shown); }), shown);
	FUZZ_CHECK(again == c, shown);
	FUZZ_CHECK(format_cidr(again) == shown, shown);
	FUZZ_CHECK(cidr_contains(c, c), shown);
	return 0;
}
