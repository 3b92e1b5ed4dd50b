// SPDX-License-Identifier: GPL-2.0-only
// RAII owner of a file descriptor (maps, programs, links, directories).
#pragma once

#include <cerrno>
#include <cstddef>
#include <unistd.h>
#include <utility>

namespace sluice {

/// Closes its descriptor when it goes out of scope; movable, not copyable.
class UniqueFd {
public:
	UniqueFd() = default;
	explicit UniqueFd(int fd) : fd_(fd) {}
	UniqueFd(UniqueFd &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
	UniqueFd &operator=(UniqueFd &&o) noexcept
	{
		if (this != &o)
			reset(std::exchange(o.fd_, -1));
		return *this;
	}
	UniqueFd(const UniqueFd &) = delete;
	UniqueFd &operator=(const UniqueFd &) = delete;
	~UniqueFd() { reset(); }

	int get() const { return fd_; }
	explicit operator bool() const { return fd_ >= 0; }
	void reset(int fd = -1)
	{
		if (fd_ >= 0)
			::close(fd_);
		fd_ = fd;
	}

private:
	int fd_ = -1;
};

/// Reads exactly `n` bytes from `fd` into `buf`, retrying reads that a
/// signal interrupted. Returns 0, or the errno of the read that failed (EIO
/// for an end of file before `n` bytes), so that each caller keeps its own
/// way of saying so.
inline int read_exact(int fd, void *buf, size_t n)
{
	auto *p = static_cast<unsigned char *>(buf);
	while (n) {
		ssize_t got = ::read(fd, p, n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? errno : EIO;
		p += got;
		n -= static_cast<size_t>(got);
	}
	return 0;
}

} // namespace sluice
