// SPDX-License-Identifier: GPL-2.0-only
// parse_rate: an accepted rate is positive and within the documented range,
// its canonical form (what `rule list` shows) parses to the same rate, and
// compiling it for the data plane either succeeds with sane parameters or
// refuses with an Error.
#include "fuzz_check.h"
#include "rate.h"

using namespace sluice;
using namespace sluice::fuzz;

namespace {

using u128 = unsigned __int128;
constexpr uint64_t MAX_FIELD = 1ULL << 50;
constexpr u128 NS_PER_SEC = 1000000000;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	std::string_view text = as_text(data, size);
	Rate r;
	if (!accepts([&] { r = parse_rate(text); }))
		return 0;

	FUZZ_CHECK(r.amount > 0 && r.period_ns > 0, text);
	FUZZ_CHECK(r.amount <= MAX_FIELD && r.period_ns <= MAX_FIELD, text);
	FUZZ_CHECK(r.unit == RateUnit::packets || r.unit == RateUnit::bytes || r.unit == RateUnit::bits, text);
	// At most 10^9 packets/s, 1 TB/s (8 Tbit/s).
	u128 per_second_max = r.unit == RateUnit::packets ? NS_PER_SEC
			      : r.unit == RateUnit::bytes ? u128(1000000000000ULL)
							  : u128(8000000000000ULL);
	FUZZ_CHECK(u128(r.amount) * NS_PER_SEC <= per_second_max * r.period_ns, text);

	std::string shown = format_rate(r);
	Rate again;
	FUZZ_CHECK(accepts([&] { again = parse_rate(shown); }), arrow(text, shown));
	FUZZ_CHECK(again == r, arrow(text, shown));
	FUZZ_CHECK(format_rate(again) == shown, shown);

	uint64_t burst = default_burst(r);
	FUZZ_CHECK(burst >= min_burst(r) && burst <= MAX_FIELD, shown);
	LimitParams p;
	if (accepts([&] { p = compile_limit(r, burst); }))
		FUZZ_CHECK(p.inc_mult > 0 && p.capacity > 0 && p.inc_shift <= 62, shown);
	uint64_t big_burst = burst * 1000;
	accepts([&] { compile_limit(r, big_burst); });
	WindowParams w;
	if (accepts([&] { w = compile_window(r); }))
		FUZZ_CHECK(w.limit > 0 && w.window_ns >= 1000000 && w.window_ns <= 86400 * NS_PER_SEC, shown);
	return 0;
}
