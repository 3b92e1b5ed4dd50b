// SPDX-License-Identifier: GPL-2.0-only
#include "sockaddr.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "process.h"

namespace sluice::test {

bool make_sockaddr(const std::string &text, uint16_t port, sockaddr_storage &out, socklen_t &len)
{
	std::memset(&out, 0, sizeof(out));
	auto *v4 = reinterpret_cast<sockaddr_in *>(&out);
	auto *v6 = reinterpret_cast<sockaddr_in6 *>(&out);
	if (inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(port);
		len = sizeof(*v4);
		return true;
	}
	if (inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(port);
		len = sizeof(*v6);
		return true;
	}
	return false;
}

int send_udp_in(const std::string &ns, const std::string &src, const std::string &dst, uint16_t port, int count,
		size_t payload)
{
	int sent = in_netns(ns, [&]() {
		sockaddr_storage from{}, to{};
		socklen_t len = 0;
		make_sockaddr(src, 0, from, len);
		make_sockaddr(dst, port, to, len);
		int fd = socket(from.ss_family, SOCK_DGRAM, 0);
		if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&from), len))
			return 255;
		std::vector<char> data(payload, 0);
		int n = 0;
		for (int i = 0; i < count; i++)
			n += sendto(fd, data.data(), data.size(), 0, reinterpret_cast<sockaddr *>(&to), len) ==
			     static_cast<ssize_t>(data.size());
		return n;
	});
	return sent == 255 ? -1 : sent;
}

int send_frames_in(const std::string &ns, const std::string &ifname, const std::vector<std::vector<uint8_t>> &frames)
{
	// The count comes back through a pipe: an exit code holds no more than 255.
	int pipefd[2];
	if (pipe(pipefd))
		return -1;
	in_netns(ns, [&]() {
		close(pipefd[0]);
		int fd = socket(AF_PACKET, SOCK_RAW, 0);
		int sent = 0;
		if (fd >= 0) {
			sockaddr_ll to{};
			to.sll_family = AF_PACKET;
			to.sll_ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
			to.sll_halen = 6;
			uint8_t mac[6] = {0x02, 0, 0, 0, 0, 2}; // the packet builder's destination
			std::memcpy(to.sll_addr, mac, 6);
			for (const auto &f : frames) {
				sent += sendto(fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr *>(&to), sizeof(to)) ==
					static_cast<ssize_t>(f.size());
				if (sent % 16 == 0)
					usleep(1000); // let the receiving ring drain
			}
			close(fd);
		}
		return write(pipefd[1], &sent, sizeof(sent)) == sizeof(sent) ? 0 : 1;
	});
	close(pipefd[1]);
	int sent = -1;
	if (read(pipefd[0], &sent, sizeof(sent)) != static_cast<ssize_t>(sizeof(sent)))
		sent = -1;
	close(pipefd[0]);
	return sent;
}

int count_udp_arrivals(const std::string &ns, const std::string &dst, uint16_t port, int quiet_ms)
{
	return in_netns(ns, [&] {
		int fd = socket(dst.find(':') == std::string::npos ? AF_INET : AF_INET6, SOCK_DGRAM, 0);
		sockaddr_storage addr{};
		socklen_t len = 0;
		make_sockaddr(dst, port, addr, len);
		timeval quiet{quiet_ms / 1000, (quiet_ms % 1000) * 1000};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &quiet, sizeof(quiet));
		if (bind(fd, reinterpret_cast<sockaddr *>(&addr), len))
			return 255;
		int n = 0;
		char buf[64];
		while (recv(fd, buf, sizeof(buf), 0) >= 0)
			n++;
		close(fd);
		return n < 254 ? n : 254;
	});
}

} // namespace sluice::test
