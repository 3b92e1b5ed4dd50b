// SPDX-License-Identifier: GPL-2.0-only
#include "state_dirs.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "error.h"
#include "fnv.h"
#include "sluice_abi.h"

namespace sluice {

namespace {

constexpr const char *BPFFS_ROOT = "/sys/fs/bpf/";

/// `path` without repeated or trailing slashes: one directory, one spelling.
std::string tidy(const std::string &path)
{
	std::string out;
	for (char c : path)
		if (c != '/' || out.empty() || out.back() != '/')
			out += c;
	while (out.size() > 1 && out.back() == '/')
		out.pop_back();
	return out;
}

std::string env_or(const char *name, const std::string &fallback)
{
	const char *v = std::getenv(name);
	return v && *v ? v : fallback;
}

std::string octal_mode(mode_t m)
{
	char buf[8];
	std::snprintf(buf, sizeof(buf), "%04o", unsigned(m & 07777));
	return buf;
}

bool trusted_owner(uid_t uid) { return uid == 0 || uid == geteuid(); }

std::string not_trusted(uid_t uid)
{
	return "owned by uid " + std::to_string(uid) + ", not root" +
	       (geteuid() == 0 ? std::string() : " or uid " + std::to_string(geteuid()) + " (this user)");
}

std::string real_path(const std::string &path)
{
	char buf[PATH_MAX];
	if (!realpath(path.c_str(), buf))
		throw_errno("cannot resolve " + path, errno);
	return buf;
}

std::string parent_of(const std::string &path)
{
	auto slash = path.find_last_of('/');
	if (slash == std::string::npos)
		return ".";
	return slash == 0 ? "/" : path.substr(0, slash);
}

// Each directory from `dir` (resolved) up to the root: anyone who may write
// one of them, unless it is sticky, can rename what is below it away and put
// their own in its place.
void check_ancestors(const std::string &dir, const std::string &what, const std::string &of)
{
	for (std::string p = real_path(dir);; p = parent_of(p)) {
		struct stat st;
		if (stat(p.c_str(), &st))
			throw_errno("cannot inspect " + p, errno);
		if (!trusted_owner(st.st_uid))
			throw Error("refusing the " + what + " " + of + ": it is under " + p + ", " + not_trusted(st.st_uid) +
				    ", who can replace it; choose a directory under root's");
		if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
			throw Error("refusing the " + what + " " + of + ": it is under " + p +
				    ", which others may write (mode " + octal_mode(st.st_mode) +
				    ") and is not sticky, so anyone can replace it; `chmod +t " + p +
				    "` or choose another directory");
		if (p == "/")
			return;
	}
}

} // namespace

std::string default_pin_dir() { return env_or("SLUICE_PIN_DIR", SLUICE_PIN_DIR); }

std::string run_dir_for(const std::string &pin_dir)
{
	if (const char *v = std::getenv("SLUICE_RUN_DIR"); v && *v)
		return v;
	std::string dir = tidy(pin_dir);
	if (dir == SLUICE_PIN_DIR)
		return "/run/sluice";
	std::string name = dir.substr(dir.find_last_of('/') + 1);
	if (dir.rfind(BPFFS_ROOT, 0) == 0 && dir.find('/', std::string(BPFFS_ROOT).size()) == std::string::npos)
		return "/run/sluice-" + name;
	// Elsewhere, two pin directories may share a name: the path's hash tells
	// them apart, after a dot, which no name under /sys/fs/bpf has.
	char hash[9];
	std::snprintf(hash, sizeof(hash), "%08x", Fnv1a32().add(dir).value());
	return "/run/sluice-" + name + "." + hash;
}

std::string default_run_dir() { return run_dir_for(default_pin_dir()); }

std::string lock_dir_for(const std::string &pin_dir)
{
	return tidy(pin_dir) + "-lock"; // bpffs names take no dots
}

void check_private_dir(const std::string &dir, const std::string &what)
{
	struct stat st;
	if (lstat(dir.c_str(), &st)) {
		if (errno == ENOENT)
			return;
		throw_errno("cannot inspect the " + what + " " + dir, errno);
	}
	check_ancestors(parent_of(dir), what, dir);
	if (S_ISLNK(st.st_mode)) {
		if (!trusted_owner(st.st_uid))
			throw Error("refusing the " + what + " " + dir + ": it is a symbolic link " + not_trusted(st.st_uid) +
				    "; remove it (rm " + dir + ") and run the command again");
		if (stat(dir.c_str(), &st)) {
			if (errno == ENOENT) // a dangling link: nothing to trust, nothing made through it
				throw Error("refusing the " + what + " " + dir + ": it is a symbolic link to nothing");
			throw_errno("cannot inspect the " + what + " " + dir, errno);
		}
		check_ancestors(parent_of(real_path(dir)), what, dir);
	}
	if (!S_ISDIR(st.st_mode))
		throw Error("refusing the " + what + " " + dir + ": it is not a directory");
	if (!trusted_owner(st.st_uid))
		throw Error("refusing the " + what + " " + dir + ": it is " + not_trusted(st.st_uid) +
			    ", who can change or remove what sluice keeps there; check what it holds, remove it (rm -r " +
			    dir + ") and run the command again");
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		throw Error("refusing the " + what + " " + dir + ": others may write it (mode " + octal_mode(st.st_mode) +
			    "); `chmod go-w " + dir + "`");
}

void make_private_dir(const std::string &dir, const std::string &what)
{
	check_ancestors(parent_of(dir), what, dir); // before anything is made there
	if (mkdir(dir.c_str(), 0700) && errno != EEXIST)
		throw_errno("cannot create the " + what + " " + dir, errno);
	check_private_dir(dir, what);
}

void remove_files_named(const std::string &dir, std::string_view prefix, std::string_view suffix)
{
	DIR *d = opendir(dir.c_str());
	if (!d)
		return;
	std::vector<std::string> names;
	while (struct dirent *e = readdir(d)) {
		std::string_view name = e->d_name;
		if (name.size() >= prefix.size() + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix))
			names.emplace_back(name);
	}
	closedir(d);
	for (const auto &n : names)
		unlink((dir + "/" + n).c_str());
}

} // namespace sluice
