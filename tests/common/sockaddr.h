// Socket addresses from text, for the test sender and the traffic tool.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace sluice::test {

/// Fills `out` with an IPv4 or IPv6 address and port; false if `text` is neither.
bool make_sockaddr(const std::string &text, uint16_t port, sockaddr_storage &out, socklen_t &len);

} // namespace sluice::test
