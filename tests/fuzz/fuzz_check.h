// SPDX-License-Identifier: GPL-2.0-only
// What every parser fuzzer asserts: an input is either accepted, and then the
// harness checks properties of the value, or refused with sluice's Error whose
// message is one printable line. Anything else (another exception, a crash,
// undefined behaviour, a broken property) aborts, and libFuzzer keeps the input.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "error.h"

namespace sluice::fuzz {

/// The fuzzer's bytes as the text a parser sees (NULs and all).
inline std::string_view as_text(const uint8_t *data, size_t size)
{
	return {reinterpret_cast<const char *>(data), size};
}

/// Shows a string with its control bytes escaped, for reports.
inline std::string visible(std::string_view s)
{
	std::string out;
	for (unsigned char c : s) {
		if (c < 0x20 || c == 0x7f || c == '\\') {
			char buf[8];
			std::snprintf(buf, sizeof(buf), "\\x%02x", c);
			out += buf;
		} else {
			out += static_cast<char>(c);
		}
	}
	return out;
}

/// "input -> its printed form", for round-trip reports.
inline std::string arrow(std::string_view from, std::string_view to)
{
	return std::string(from) + " -> " + std::string(to);
}

[[noreturn]] inline void fail(const char *what, std::string_view detail)
{
	std::fprintf(stderr, "fuzz property broken: %s: %s\n", what, visible(detail).c_str());
	std::abort();
}

#define FUZZ_CHECK(cond, detail)                          \
	do {                                              \
		if (!(cond))                              \
			::sluice::fuzz::fail(#cond, (detail)); \
	} while (0)

/// A refusal must read as one line on a terminal: not empty, no control
/// character (a newline or an escape sequence from the input included).
inline void check_error_message(const Error &e)
{
	std::string_view msg = e.what();
	FUZZ_CHECK(!msg.empty(), "empty error message");
	for (unsigned char c : msg)
		FUZZ_CHECK(c >= 0x20 && c != 0x7f, msg);
}

/// Runs parse(); true if it accepted. A refusal with Error is checked and
/// yields false; any other exception is a finding.
template <typename F>
bool accepts(F &&parse)
{
	try {
		parse();
		return true;
	} catch (const Error &e) {
		check_error_message(e);
		return false;
	} catch (const std::exception &e) {
		fail("an exception other than sluice::Error escaped", e.what());
	} catch (...) {
		fail("an exception other than sluice::Error escaped", "(not a std::exception)");
	}
}

} // namespace sluice::fuzz
