// SPDX-License-Identifier: GPL-2.0-only
// Errors the library reports: one message a person can act on, with the
// errno text appended where the kernel said why.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice {

/// Thrown by the library; the CLI prints what() as one line and exits non-zero.
/// Messages quote what the user typed, so the constructor escapes control
/// characters (as \xNN): a newline, a NUL or a terminal escape in the input
/// cannot split, cut short or repaint the line.
class Error : public std::runtime_error {
public:
	explicit Error(const std::string &what);
};

/// text with every control character (below 0x20, and 0x7f) written as \xNN.
std::string printable(std::string_view text);

/// Throws Error("<what>: <strerror(err)>"). err may be negative (libbpf style).
[[noreturn]] void throw_errno(const std::string &what, int err);

} // namespace sluice
