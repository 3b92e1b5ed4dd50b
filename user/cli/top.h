// SPDX-License-Identifier: GPL-2.0-only
// `sluice top`: a live terminal view of pass and drop rates per rule and per
// source, from counter deltas (user/lib/rates.h). Plain ANSI escapes and a
// termios raw mode that every exit path undoes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "datapath.h"
#include "rates.h"

namespace sluice {

struct TopOptions {
	uint64_t interval_ns = 1000000000;
	bool once = false;            ///< one plain-text report after one interval, then exit
	size_t top = 0;               ///< sources shown at most; 0: as many as fit (--once: every one)
	RateKey key = RateKey::drop_packets;
};

/// --interval: seconds ("1", "0.5") or a duration ("500ms", "2s"), from 100 ms
/// to 1 h. Throws Error with one line for anything else.
uint64_t parse_interval_ns(std::string_view text);

/// Runs the view until `q` (or prints one report with `once`); returns the
/// exit code. Throws Error, with the terminal restored, if sluice is not
/// loaded or stops being loaded, or if standard input or output is not a
/// terminal (without `once`). Ended by SIGINT, SIGTERM or SIGHUP, it restores
/// the terminal and then dies of that signal.
int run_top(const Instance &inst, const TopOptions &options);

} // namespace sluice
