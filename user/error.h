// Errors the library reports: one message a person can act on, with the
// errno text appended where the kernel said why.
#pragma once

#include <stdexcept>
#include <string>

namespace sluice {

/// Thrown by the library; the CLI prints what() as one line and exits non-zero.
class Error : public std::runtime_error {
public:
	using std::runtime_error::runtime_error;
};

/// Throws Error("<what>: <strerror(err)>"). err may be negative (libbpf style).
[[noreturn]] void throw_errno(const std::string &what, int err);

} // namespace sluice
