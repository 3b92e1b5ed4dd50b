#include "sockaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

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

} // namespace sluice::test
