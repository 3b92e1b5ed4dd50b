// SPDX-License-Identifier: GPL-2.0-only
#include "rate.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "error.h"
#include "sluice_algos.h"

namespace sluice {

namespace {

using u128 = unsigned __int128;

constexpr uint64_t NS_PER_SEC = 1000000000ULL;
constexpr uint64_t MAX_PACKET_RATE = 1000000000ULL;  // per second
constexpr uint64_t MAX_BYTE_RATE = 1000000000000ULL; // per second (8 Tbit/s)
constexpr uint64_t MAX_FIELD = 1ULL << 50;            // amount and period as written
constexpr uint64_t MAX_DIVISOR = 1000000000ULL;       // a number has at most 9 decimals

struct Scaled {
	uint64_t mantissa; // digits without the decimal point
	uint64_t divisor;  // 10^decimals
};

// "1.25" -> {125, 100}. At most 9 decimals.
Scaled parse_decimal(std::string_view s, std::string_view whole)
{
	Scaled v{0, 1};
	bool dot = false, digits = false;
	for (char ch : s) {
		if (ch == '.' && !dot) {
			dot = true;
			continue;
		}
		if (!std::isdigit(static_cast<unsigned char>(ch)))
			throw Error("invalid number '" + std::string(s) + "' in '" + std::string(whole) + "'");
		digits = true;
		if (v.mantissa > MAX_FIELD || (dot && v.divisor >= MAX_DIVISOR))
			throw Error("number '" + std::string(s) + "' is too large or too precise");
		v.mantissa = v.mantissa * 10 + (ch - '0');
		if (dot)
			v.divisor *= 10;
	}
	if (!digits)
		throw Error("missing number in '" + std::string(whole) + "'");
	return v;
}

struct UnitDef {
	const char *name;
	RateUnit unit;
	uint64_t multiplier;
	bool per_second; // "pps": the period is part of the unit
};

const UnitDef UNITS[] = {
	{"", RateUnit::packets, 1, false},      {"p", RateUnit::packets, 1, false},
	{"pkt", RateUnit::packets, 1, false},   {"pkts", RateUnit::packets, 1, false},
	{"packets", RateUnit::packets, 1, false}, {"pps", RateUnit::packets, 1, true},
	{"B", RateUnit::bytes, 1, false},       {"kB", RateUnit::bytes, 1000, false},
	{"KB", RateUnit::bytes, 1000, false},   {"MB", RateUnit::bytes, 1000000, false},
	{"GB", RateUnit::bytes, 1000000000ULL, false},
	{"TB", RateUnit::bytes, 1000000000000ULL, false},
	{"KiB", RateUnit::bytes, 1ULL << 10, false}, {"MiB", RateUnit::bytes, 1ULL << 20, false},
	{"GiB", RateUnit::bytes, 1ULL << 30, false}, {"TiB", RateUnit::bytes, 1ULL << 40, false},
	{"bit", RateUnit::bits, 1, false},      {"kbit", RateUnit::bits, 1000, false},
	{"mbit", RateUnit::bits, 1000000, false}, {"gbit", RateUnit::bits, 1000000000ULL, false},
	{"tbit", RateUnit::bits, 1000000000000ULL, false},
};

const UnitDef *find_unit(std::string_view u)
{
	for (const auto &d : UNITS) {
		std::string_view name = d.name;
		bool match = d.unit == RateUnit::bits
				     ? std::equal(u.begin(), u.end(), name.begin(), name.end(),
						  [](char a, char b) { return std::tolower(a) == b; })
				     : u == name;
		if (match)
			return &d;
	}
	return nullptr;
}

struct PeriodDef {
	const char *names[4];
	uint64_t ns;
};

const PeriodDef PERIODS[] = {
	{{"ms", "msec", nullptr}, 1000000ULL},
	{{"s", "sec", "second", "seconds"}, NS_PER_SEC},
	{{"m", "min", "minute", "minutes"}, 60 * NS_PER_SEC},
	{{"h", "hour", "hours", nullptr}, 3600 * NS_PER_SEC},
	{{"d", "day", "days", nullptr}, 86400 * NS_PER_SEC},
};

/// A period's nanoseconds; nullopt for one that is none: zero, beyond
/// `max`, or not a whole number of nanoseconds. Throws for a period that
/// does not parse.
std::optional<uint64_t> period_ns(std::string_view p, std::string_view whole, u128 max)
{
	size_t split = 0;
	while (split < p.size() && (std::isdigit(static_cast<unsigned char>(p[split])) || p[split] == '.'))
		split++;
	Scaled count = split ? parse_decimal(p.substr(0, split), whole) : Scaled{1, 1};
	std::string_view name = p.substr(split);
	for (const auto &d : PERIODS) {
		for (const char *n : d.names) {
			if (n && name == n) {
				u128 ns = static_cast<u128>(count.mantissa) * d.ns / count.divisor;
				if (ns == 0 || ns > max || ns * count.divisor != static_cast<u128>(count.mantissa) * d.ns)
					return std::nullopt;
				return static_cast<uint64_t>(ns);
			}
		}
	}
	throw Error("unknown period '" + std::string(name) + "' in '" + std::string(whole) +
		    "' (use ms, s, min, h or day)");
}

uint64_t parse_period(std::string_view p, std::string_view whole)
{
	if (std::optional<uint64_t> ns = period_ns(p, whole, MAX_FIELD))
		return *ns;
	throw Error("period '" + std::string(p) + "' is out of range in '" + std::string(whole) + "'");
}

std::string trim_decimal(u128 value, uint64_t divisor)
{
	std::string s = std::to_string(static_cast<uint64_t>(value / divisor));
	uint64_t frac = static_cast<uint64_t>(value % divisor);
	if (frac) {
		std::string f = std::to_string(frac);
		f.insert(0, std::to_string(divisor).size() - 1 - f.size(), '0');
		while (!f.empty() && f.back() == '0')
			f.pop_back();
		s += "." + f;
	}
	return s;
}

std::string format_period(uint64_t ns)
{
	static const std::pair<uint64_t, const char *> units[] = {
		{86400 * NS_PER_SEC, "day"}, {3600 * NS_PER_SEC, "h"}, {60 * NS_PER_SEC, "min"},
		{NS_PER_SEC, "s"},            {1000000ULL, "ms"}};
	for (auto [unit_ns, name] : units) {
		if (ns % unit_ns == 0)
			return ns == unit_ns ? name : std::to_string(ns / unit_ns) + name;
	}
	// A fraction of a millisecond ("1.5ms"): the parser takes decimals, not ns.
	return trim_decimal(ns, 1000000ULL) + "ms";
}

// Ticks one unit is worth, as the exact fraction num/den.
std::pair<u128, u128> interval_ticks(const Rate &r)
{
	u128 num = static_cast<u128>(r.period_ns) << SLUICE_TICK_SHIFT;
	if (r.unit == RateUnit::bits)
		num *= 8;
	return {num, r.amount};
}

u128 ceil_div(u128 a, u128 b) { return (a + b - 1) / b; }

} // namespace

Rate parse_rate(std::string_view text)
{
	std::string_view whole = text;
	size_t slash = text.find('/');
	std::string_view left = text.substr(0, slash);
	size_t split = 0;
	while (split < left.size() &&
	       (std::isdigit(static_cast<unsigned char>(left[split])) || left[split] == '.'))
		split++;

	Scaled value = parse_decimal(left.substr(0, split), whole);
	std::string_view unit_name = left.substr(split);
	const UnitDef *unit = find_unit(unit_name);
	if (!unit) {
		if (unit_name == "b" || unit_name == "kb" || unit_name == "mb" || unit_name == "bps")
			throw Error("ambiguous unit '" + std::string(unit_name) + "' in '" + std::string(whole) +
				    "': write bytes as B, kB, MB or bits as bit, kbit, mbit");
		throw Error("unknown unit '" + std::string(unit_name) + "' in '" + std::string(whole) +
			    "' (examples: 100/s, 6000/min, 10kbit/s, 1MB/s)");
	}

	uint64_t period_ns = NS_PER_SEC;
	if (slash != std::string_view::npos) {
		if (unit->per_second)
			throw Error("'" + std::string(whole) + "': pps already means per second");
		period_ns = parse_period(text.substr(slash + 1), whole);
	}

	// amount/period = mantissa*multiplier / (divisor*period): keep both integral.
	u128 amount = static_cast<u128>(value.mantissa) * unit->multiplier;
	u128 period = static_cast<u128>(period_ns) * value.divisor;
	while (amount % 10 == 0 && period % 10 == 0 && period > period_ns) {
		amount /= 10;
		period /= 10;
	}
	if (amount == 0)
		throw Error("rate must be greater than zero in '" + std::string(whole) + "'");
	if (amount > MAX_FIELD || period > MAX_FIELD)
		throw Error("rate '" + std::string(whole) + "' is out of range");

	Rate r{static_cast<uint64_t>(amount), static_cast<uint64_t>(period), unit->unit};
	// Units per second must stay below the limit; bits are an eighth of a byte.
	u128 limit = r.unit == RateUnit::packets ? MAX_PACKET_RATE
		   : r.unit == RateUnit::bytes   ? MAX_BYTE_RATE
						 : MAX_BYTE_RATE * 8;
	if (amount * NS_PER_SEC > limit * period)
		throw Error("rate '" + std::string(whole) + "' is too fast (at most " +
			    (r.counts_bytes() ? "1TB/s" : "1000000000/s") + ")");
	return r;
}

std::string format_rate(const Rate &r)
{
	std::string amount;
	if (r.unit == RateUnit::packets) {
		amount = std::to_string(r.amount);
	} else {
		static const char *byte_prefix[] = {"B", "kB", "MB", "GB", "TB"};
		static const char *bit_prefix[] = {"bit", "kbit", "mbit", "gbit", "tbit"};
		int p = 0;
		uint64_t div = 1;
		// A larger prefix only while the amount keeps at most 9 decimals,
		// or the printed rate would not parse.
		while (p < 4 && r.amount >= div * 1000 &&
		       (div * 1000 <= MAX_DIVISOR || r.amount % (div * 1000 / MAX_DIVISOR) == 0)) {
			div *= 1000;
			p++;
		}
		amount = trim_decimal(r.amount, div) +
			 (r.unit == RateUnit::bytes ? byte_prefix[p] : bit_prefix[p]);
	}
	// A decimal packet rate ("0.5/s") is kept as 5 per 10 s: print it as written
	// when that reads back as the same rate.
	if (r.unit == RateUnit::packets) {
		for (uint64_t unit_ns : {86400 * NS_PER_SEC, 3600 * NS_PER_SEC, 60 * NS_PER_SEC, NS_PER_SEC}) {
			uint64_t scale = r.period_ns / unit_ns;
			if (r.period_ns % unit_ns || scale < 10 || scale > MAX_DIVISOR)
				continue;
			uint64_t p10 = 1;
			while (p10 < scale)
				p10 *= 10;
			if (p10 != scale || r.amount % 10 == 0)
				continue;
			std::string decimal = trim_decimal(r.amount, scale) + "/" + format_period(unit_ns);
			try {
				if (parse_rate(decimal) == r)
					return decimal;
			} catch (const Error &) {
			}
		}
	}
	return amount + "/" + format_period(r.period_ns);
}

LimitParams compile_limit(const Rate &rate, uint64_t burst)
{
	auto [num, den] = interval_ticks(rate);
	const u128 max_cost = rate.counts_bytes() ? SLUICE_MAX_COST : 1;

	if (max_cost * num > static_cast<u128>(SLUICE_MAX_INC_TICKS) * den)
		throw Error("rate " + format_rate(rate) + " is too slow: one " +
			    (rate.counts_bytes() ? "65535-byte packet" : "packet") +
			    " may cost at most " +
			    std::to_string((SLUICE_MAX_INC_TICKS >> SLUICE_TICK_SHIFT) / (86400 * NS_PER_SEC)) +
			    " days of the rate");
	if (burst < min_burst(rate))
		throw Error("burst " + std::to_string(burst) + " is too small: at least " +
			    std::to_string(min_burst(rate)) +
			    (rate.counts_bytes() ? " bytes, or no full-size packet could ever pass" : " packet"));
	u128 capacity = ceil_div(static_cast<u128>(burst) * num, den);
	if (burst > MAX_FIELD || capacity > SLUICE_MAX_CAPACITY_TICKS)
		throw Error("burst " + std::to_string(burst) + " is too large for rate " + format_rate(rate) +
			    ": a full bucket may hold at most " +
			    std::to_string((SLUICE_MAX_CAPACITY_TICKS >> SLUICE_TICK_SHIFT) / (86400 * NS_PER_SEC)) +
			    " days of the rate");

	// The finest scale at which the most expensive packet cannot overflow.
	LimitParams p;
	for (int shift = 62; shift >= 0; shift--) {
		u128 mult = ceil_div(num << shift, den);
		if (max_cost * mult < (static_cast<u128>(1) << 63)) {
			p.inc_mult = static_cast<uint64_t>(mult);
			p.inc_shift = static_cast<uint8_t>(shift);
			break;
		}
	}
	p.capacity = static_cast<uint64_t>(capacity);
	return p;
}

WindowParams compile_window(const Rate &rate)
{
	if (rate.unit == RateUnit::bits)
		throw Error("a window limit counts packets or bytes: write " + format_rate(rate) +
			    " in B, kB or MB (e.g. 1MB/10s)");
	if (rate.period_ns < 1000000ULL || rate.period_ns > 86400 * NS_PER_SEC)
		throw Error("window " + format_period(rate.period_ns) + " is out of range (1ms to 1day)");
	if (rate.amount >= (1ULL << 32))
		throw Error("window limit " + std::to_string(rate.amount) + " is too large (below 2^32)");
	if (rate.counts_bytes() && rate.amount < 1500)
		throw Error("window limit of " + std::to_string(rate.amount) +
			    " bytes is too small: at least 1500, or no full-size packet could ever pass");
	return {rate.amount, rate.period_ns};
}

namespace {

void check_duration_form(std::string_view text, const char *what)
{
	if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) ||
	    !std::isalpha(static_cast<unsigned char>(text.back())))
		throw Error(std::string("invalid ") + what + " '" + std::string(text) +
			    "': a number and a unit (e.g. 30s, 500ms, 2min)");
}

} // namespace

uint64_t parse_duration_ns(std::string_view text, const char *what)
{
	check_duration_form(text, what);
	return parse_period(text, text);
}

std::string DurationRange::text() const { return format_duration(min_ns) + " to " + format_duration(max_ns); }

std::string DurationRange::refusal(const char *what, std::string_view given) const
{
	return std::string(what) + " " + std::string(given) + " is out of range (" + text() + ")";
}

uint64_t parse_duration_ns(std::string_view text, const char *what, const DurationRange &range)
{
	check_duration_form(text, what);
	std::optional<uint64_t> ns = period_ns(text, text, UINT64_MAX);
	if (!ns || *ns < range.min_ns || *ns > range.max_ns)
		throw Error(range.refusal(what, text));
	return *ns;
}

std::string format_duration(uint64_t ns)
{
	std::string p = format_period(ns); // "s" for one second, as after a slash
	return std::isdigit(static_cast<unsigned char>(p[0])) ? p : "1" + p;
}

uint64_t min_burst(const Rate &rate) { return rate.counts_bytes() ? 1500 : 1; }

uint64_t default_burst(const Rate &rate)
{
	// A byte rate meets TCP: a flow through a policer loses a window's
	// worth of packets when the bucket runs dry, and the sender may then
	// stay silent for a retransmission timeout (200 ms at least on Linux)
	// while the bucket refills. A burst smaller than what the rate earns in
	// that silence wastes it: with 100 ms one iperf3 flow got half of
	// 1, 10 and 100 Mbit/s over veth, with 200 ms 92 % of 10 Mbit/s, with
	// 250 ms and more 95 % or more at each. 500 ms keeps a margin over the
	// timeout. A packet rate keeps 100 ms (at least 5 packets). Bit rates
	// count bytes.
	u128 amount = rate.unit == RateUnit::bits ? ceil_div(rate.amount, 8) : rate.amount;
	uint64_t span_ns = rate.counts_bytes() ? BYTE_BURST_NS : PACKET_BURST_NS;
	u128 worth = ceil_div(amount * span_ns, rate.period_ns);
	u128 floor = rate.counts_bytes() ? 1500 : 5;
	return static_cast<uint64_t>(std::min<u128>(std::max(worth, floor), MAX_FIELD));
}

uint64_t parse_count(std::string_view text, bool bytes, const char *what)
{
	size_t split = 0;
	while (split < text.size() && std::isdigit(static_cast<unsigned char>(text[split])))
		split++;
	uint64_t v = 0;
	auto [end, ec] = std::from_chars(text.data(), text.data() + split, v);
	if (split == 0 || ec != std::errc())
		throw Error(std::string("invalid ") + what + " '" + std::string(text) + "'");
	std::string_view unit = text.substr(split);
	if (!unit.empty()) {
		const UnitDef *u = find_unit(unit);
		if (!bytes || !u || u->unit != RateUnit::bytes)
			throw Error(std::string("invalid ") + what + " '" + std::string(text) + "'" +
				    (bytes ? " (a number of bytes, e.g. 64kB)" : " (a number of packets)"));
		if (v > MAX_FIELD / u->multiplier)
			throw Error(std::string(what) + " '" + std::string(text) + "' is too large");
		v *= u->multiplier;
	}
	if (v == 0)
		throw Error(std::string(what) + " must be greater than zero");
	return v;
}

} // namespace sluice
