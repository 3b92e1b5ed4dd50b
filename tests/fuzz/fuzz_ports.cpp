// SPDX-License-Identifier: GPL-2.0-only
// parse_port_range: an accepted range has lo <= hi, was written with digits
// and one dash only, and its printed form parses to the same range.
#include "fuzz_check.h"
#include "rule.h"

using namespace sluice;
using namespace sluice::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	std::string_view text = as_text(data, size);
	PortRange p;
	if (!accepts([&] { p = parse_port_range(text); }))
		return 0;

	FUZZ_CHECK(p.lo <= p.hi, text);
	int dashes = 0;
	for (char ch : text) {
		FUZZ_CHECK(std::isdigit(static_cast<unsigned char>(ch)) || ch == '-', text);
		dashes += ch == '-';
	}
	FUZZ_CHECK(dashes <= 1, text);
	if (p.any())
		return 0; // printed as "any"
	std::string shown = format_ports(p);
	PortRange again;
	FUZZ_CHECK(accepts([&] { again = parse_port_range(shown); }), shown);
	FUZZ_CHECK(again == p, shown);
	return 0;
}
