// SPDX-License-Identifier: GPL-2.0-only
// Socket addresses from text, for the test sender and the traffic tool.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::test {

/// Fills `out` with an IPv4 or IPv6 address and port; false if `text` is neither.
bool make_sockaddr(const std::string &text, uint16_t port, sockaddr_storage &out, socklen_t &len);

/// Sends `count` UDP datagrams of `payload` bytes from `src` (an address of
/// network namespace `ns`) to dst:port; returns how many the socket accepted,
/// or -1 if the socket could not be set up.
int send_udp_in(const std::string &ns, const std::string &src, const std::string &dst, uint16_t port, int count,
		size_t payload);

/// Writes whole Ethernet frames on interface `ifname` of network namespace
/// `ns` from an AF_PACKET socket, pausing 1 ms every 16 frames so that the
/// receiving ring drains; returns how many went out, or -1 if that could
/// not be learnt.
int send_frames_in(const std::string &ns, const std::string &ifname, const std::vector<std::vector<uint8_t>> &frames);

/// Binds a UDP socket to dst:port in network namespace `ns` and counts the
/// datagrams that arrive until none has for `quiet_ms`: at most 254, or 255
/// if the socket could not be bound. Blocks: run it on a thread beside the sender.
int count_udp_arrivals(const std::string &ns, const std::string &dst, uint16_t port, int quiet_ms);

} // namespace sluice::test
