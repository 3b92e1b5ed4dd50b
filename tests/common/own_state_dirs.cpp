// SPDX-License-Identifier: GPL-2.0-only
#include "own_state_dirs.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "sluice_abi.h"
#include "state_dirs.h"

namespace sluice::test {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> env(const std::string &name)
{
	const char *v = std::getenv(name.c_str());
	return v ? std::optional<std::string>(v) : std::nullopt;
}

void set_env(const std::string &name, const std::optional<std::string> &value)
{
	if (value)
		setenv(name.c_str(), value->c_str(), 1);
	else
		unsetenv(name.c_str());
}

/// Removes `path` and all below it, if it is there (bpffs pins included).
void remove_tree(const std::string &path)
{
	std::error_code ec;
	fs::remove_all(path, ec);
}

} // namespace

ScopedEnv::ScopedEnv(std::string name, const std::optional<std::string> &value)
	: name_(std::move(name)), saved_(env(name_))
{
	set_env(name_, value);
}

ScopedEnv::~ScopedEnv() { set_env(name_, saved_); }

void OwnStateDirs::OnTestStart(const ::testing::TestInfo &)
{
	char tmpl[] = "/tmp/sluice-test-XXXXXX";
	if (!mkdtemp(tmpl)) {
		std::perror("mkdtemp /tmp/sluice-test-XXXXXX");
		std::abort(); // no test may run in the operator's directories
	}
	base_ = tmpl;
	pin_dir_ = "/sys/fs/bpf/" + fs::path(base_).filename().string();
	run_env_.emplace("SLUICE_RUN_DIR", base_ + "/run");
	pin_env_.emplace("SLUICE_PIN_DIR", pin_dir_);
}

void OwnStateDirs::OnTestEnd(const ::testing::TestInfo &)
{
	run_env_.reset();
	pin_env_.reset();
	for (const std::string &dir : {pin_dir_, pin_dir_ + "-lock", pin_dir_ + "-next", run_dir_for(pin_dir_), base_})
		remove_tree(dir);
}

std::string default_state_listing()
{
	std::vector<std::string> lines;
	for (const std::string &dir : {std::string("/run/sluice"), std::string(SLUICE_PIN_DIR),
				       std::string(SLUICE_PIN_DIR) + "-lock"}) {
		struct stat top;
		if (lstat(dir.c_str(), &top) != 0) {
			lines.push_back(dir + " absent");
			continue;
		}
		std::error_code ec;
		for (const auto &e : fs::directory_iterator(dir, ec)) {
			struct stat st;
			if (lstat(e.path().c_str(), &st) != 0)
				continue; // gone while listed
			lines.push_back(e.path().string() + " mode " + std::to_string(st.st_mode) + " size " +
					std::to_string(st.st_size) + " mtime " + std::to_string(st.st_mtim.tv_sec) + "." +
					std::to_string(st.st_mtim.tv_nsec));
		}
	}
	std::sort(lines.begin(), lines.end());
	std::string out;
	for (const auto &l : lines)
		out += l + "\n";
	return out;
}

} // namespace sluice::test
