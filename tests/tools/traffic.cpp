// SPDX-License-Identifier: GPL-2.0-only
// sluice-traffic: sends paced UDP datagrams from one source address, for the
// demo and for trying rules by hand. Not part of the product.
//   sluice-traffic FROM TO [--port P] [--count N] [--pps R] [--size BYTES]
#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "sockaddr.h"


int main(int argc, char **argv)
{
	CLI::App app{"sluice-traffic: paced UDP from one source address"};
	std::string from, to;
	uint16_t port = 9000;
	uint64_t count = 1000, pps = 1000;
	size_t size = 64;
	app.add_option("FROM", from, "Source address (must be local)")->required();
	app.add_option("TO", to, "Destination address")->required();
	app.add_option("--port", port, "Destination UDP port");
	app.add_option("--count", count, "Datagrams to send");
	app.add_option("--pps", pps, "Datagrams per second (0: as fast as possible)");
	app.add_option("--size", size, "Payload bytes")->check(CLI::Range(0, 1400));
	CLI11_PARSE(app, argc, argv);

	sockaddr_storage src{}, dst{};
	socklen_t src_len = 0, dst_len = 0;
	if (!sluice::test::make_sockaddr(from, 0, src, src_len) ||
	    !sluice::test::make_sockaddr(to, port, dst, dst_len) || src.ss_family != dst.ss_family) {
		std::cerr << "sluice-traffic: FROM and TO must be addresses of one family\n";
		return 1;
	}
	int fd = socket(src.ss_family, SOCK_DGRAM, 0);
	if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&src), src_len)) {
		std::cerr << "sluice-traffic: cannot bind " << from << ": " << std::strerror(errno) << "\n";
		return 1;
	}
	std::vector<char> payload(size, 'x');
	auto start = std::chrono::steady_clock::now();
	uint64_t sent = 0;
	for (uint64_t i = 0; i < count; i++) {
		if (pps) {
			auto due = start + std::chrono::nanoseconds(i * 1000000000ULL / pps);
			std::this_thread::sleep_until(due);
		}
		sent += sendto(fd, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr *>(&dst), dst_len) >= 0;
	}
	std::cout << from << ": sent " << sent << " of " << count << "\n";
	return sent == count ? 0 : 1;
}
