// SPDX-License-Identifier: GPL-2.0-only
// Rates as operators write them ("100/s", "6000/min", "10kbit/s", "1MB/s")
// and their compilation into the data plane's bucket parameters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

enum class RateUnit : uint8_t { packets = 0, bytes = 1, bits = 2 };

/// `amount` units per `period_ns` nanoseconds, kept as written so that a
/// window ("100/10s") keeps its length. Bits are a way of writing bytes.
struct Rate {
	uint64_t amount = 0;
	uint64_t period_ns = 0;
	RateUnit unit = RateUnit::packets;

	bool counts_bytes() const { return unit != RateUnit::packets; }
	bool operator==(const Rate &) const = default;
};

/// Parses NUMBER[UNIT][/[N]PERIOD]. Units: none/p/pkt/packets, pps, B kB MB GB
/// TB KiB MiB GiB, bit kbit mbit gbit tbit. Periods: ms s min h day (a bare
/// byte or bit rate is per second). Throws Error with a one-line reason.
Rate parse_rate(std::string_view text);

/// The canonical form: "1000/s", "5/min", "100/10s", "1.25MB/s", "10kbit/s".
std::string format_rate(const Rate &r);

/// The bucket parameters the XDP program uses for a limit rule
/// (struct sluice_rule's inc_mult, inc_shift and capacity).
struct LimitParams {
	uint64_t inc_mult = 0;
	uint8_t inc_shift = 0;
	uint64_t capacity = 0;
};

/// Checks that rate and burst lie in the range where the bucket arithmetic
/// cannot overflow and compiles them. Throws Error naming what is out of range.
LimitParams compile_limit(const Rate &rate, uint64_t burst);

/// How much of its rate a rule's default burst holds: 100 ms of a packet
/// rate, 500 ms of a byte rate (so that one TCP flow gets at least 90 % of
/// the rate through it: see default_burst and docs on bursts and TCP).
constexpr uint64_t PACKET_BURST_NS = 100000000ULL;
constexpr uint64_t BYTE_BURST_NS = 500000000ULL;

/// The burst used when none is given: PACKET_BURST_NS or BYTE_BURST_NS of
/// the rate, at least 5 packets or 1500 bytes (one full-size packet must
/// always fit).
uint64_t default_burst(const Rate &rate);

/// The smallest burst accepted: 1 packet, or 1500 bytes.
uint64_t min_burst(const Rate &rate);

/// A fixed-window, sliding-log or sliding-window limit: `limit` units per window.
struct WindowParams {
	uint64_t limit = 0;
	uint64_t window_ns = 0;
};

/// Reads a rate as a window limit ("100/10s": 100 per 10 s). Throws if the
/// rate is in bits, or the window or limit is out of range.
WindowParams compile_window(const Rate &rate);

/// Parses a duration such as "30s", "500ms", "2min"; throws on anything else.
uint64_t parse_duration_ns(std::string_view text, const char *what);
std::string format_duration(uint64_t ns);

/// The durations an option takes, both ends included.
struct DurationRange {
	uint64_t min_ns, max_ns;
	/// "1s to 366day".
	std::string text() const;
	/// "WHAT GIVEN is out of range (MIN to MAX)": the one line a refused value gets.
	std::string refusal(const char *what, std::string_view given) const;
};

/// parse_duration_ns for an option with a range: a value outside it, however
/// far (beyond what a period may be elsewhere too), is refused with the range.
uint64_t parse_duration_ns(std::string_view text, const char *what, const DurationRange &range);

/// Parses a positive integer count such as a burst ("2000", "64kB" for bytes).
uint64_t parse_count(std::string_view text, bool bytes, const char *what);

} // namespace sluice
