// SPDX-License-Identifier: GPL-2.0-only
// parse_duration_ns (--warmup) and parse_count (--burst, in packets or bytes).
// The first byte picks the parser. A duration is positive and its printed
// form parses back to it; a count is positive, a packet count is plain digits,
// and a byte count with a unit stays within the library's range.
#include "fuzz_check.h"
#include "rate.h"

using namespace sluice;
using namespace sluice::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	int which = data[0] % 3;
	std::string_view text = as_text(data + 1, size - 1);

	if (which == 0) {
		uint64_t ns = 0;
		if (!accepts([&] { ns = parse_duration_ns(text, "--warmup"); }))
			return 0;
		FUZZ_CHECK(ns > 0 && ns <= (1ULL << 50), text);
		std::string shown = format_duration(ns);
		uint64_t again = 0;
		FUZZ_CHECK(accepts([&] { again = parse_duration_ns(shown, "--warmup"); }),
			   arrow(text, shown));
		FUZZ_CHECK(again == ns, arrow(text, shown));
		return 0;
	}

	bool bytes = which == 2;
	uint64_t v = 0;
	if (!accepts([&] { v = parse_count(text, bytes, "burst"); }))
		return 0;
	FUZZ_CHECK(v > 0, text);
	bool has_unit = false;
	for (char ch : text)
		has_unit = has_unit || !std::isdigit(static_cast<unsigned char>(ch));
	FUZZ_CHECK(bytes || !has_unit, text);
	if (has_unit)
		FUZZ_CHECK(v <= (1ULL << 50), text);
	uint64_t again = 0;
	FUZZ_CHECK(accepts([&] { again = parse_count(std::to_string(v), bytes, "burst"); }), text);
	FUZZ_CHECK(again == v, text);
	return 0;
}
