// SPDX-License-Identifier: GPL-2.0-only
// `sluice top`'s screen as text: a RateView laid out in lines for a window
// of a given size. Pure (no terminal), so tests check layouts directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rates.h"

namespace sluice {

/// The header's facts about the refresh.
struct TopHeader {
	std::string clock;      ///< wall-clock time of the reading, "12:40:01"
	std::string interfaces; ///< "eth0 (native), eth1 (generic)", or "none"
	uint64_t interval_ns = 1000000000;
	RateKey key = RateKey::drop_packets;
	bool reverse = false;
	bool interactive = true; ///< show the keys line
};

/// The space to fill. 0 means unbounded (the --once report).
struct TopLayout {
	int width = 0;
	int height = 0;
	size_t max_sources = 0; ///< 0: as many as fit
};

/// Narrowest and lowest window the view is laid out in; a smaller one gets
/// one line saying so.
inline constexpr int TOP_MIN_WIDTH = 60;
inline constexpr int TOP_MIN_HEIGHT = 10;

/// The lines of one frame, none wider than layout.width and no more than
/// layout.height of them (when those are set). The view must be sorted.
std::vector<std::string> render_top(const RateView &view, const TopHeader &header, const TopLayout &layout);

/// The key --sort takes for each column: "name", "pass-pps", "pass-bps",
/// "drop-pps", "drop-bps"; parse_rate_key throws Error for anything else.
std::string_view rate_key_option(RateKey k);
RateKey parse_rate_key(std::string_view text);

} // namespace sluice
