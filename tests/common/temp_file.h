// SPDX-License-Identifier: GPL-2.0-only
// A scratch file for tests: made with mkstemp under /tmp, removed when it goes.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

namespace sluice::test {

class TempFile {
public:
	explicit TempFile(const std::string &content)
	{
		char name[] = "/tmp/sluice-test-XXXXXX";
		int fd = mkstemp(name);
		if (fd < 0)
			throw std::runtime_error("mkstemp failed");
		close(fd);
		path_ = name;
		std::ofstream(path_, std::ios::binary) << content;
	}
	~TempFile() { std::remove(path_.c_str()); }
	TempFile(const TempFile &) = delete;
	TempFile &operator=(const TempFile &) = delete;
	const std::string &path() const { return path_; }

private:
	std::string path_;
};

} // namespace sluice::test
