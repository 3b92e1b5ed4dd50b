// SPDX-License-Identifier: GPL-2.0-only
#include "sets.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "error.h"
#include "fd.h"
#include "state_dirs.h"

namespace sluice {

void check_set_name(std::string_view name)
{
	if (name.empty() || name.size() > SET_NAME_MAX)
		throw Error("set name '" + std::string(name) + "': 1 to " + std::to_string(SET_NAME_MAX) +
			    " characters");
	if (name[0] == '-' || name[0] == '.')
		throw Error("set name '" + std::string(name) + "' may not start with '" + std::string(1, name[0]) + "'");
	for (char c : name)
		if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
			throw Error("set name '" + std::string(name) +
				    "': letters, digits, '.', '_' and '-' only");
}

void normalize(std::vector<Cidr> &prefixes)
{
	std::sort(prefixes.begin(), prefixes.end());
	prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
}

std::vector<Cidr> outermost(const std::vector<Cidr> &prefixes)
{
	// In Cidr order a prefix comes right before the prefixes it covers, and
	// the kept ones are disjoint: only the last kept can cover the next.
	std::vector<Cidr> out;
	out.reserve(prefixes.size());
	for (const Cidr &c : prefixes)
		if (out.empty() || !cidr_contains(out.back(), c))
			out.push_back(c);
	return out;
}

namespace {

std::string_view trim(std::string_view s)
{
	size_t b = s.find_first_not_of(" \t\r\v\f");
	if (b == std::string_view::npos)
		return {};
	size_t e = s.find_last_not_of(" \t\r\v\f");
	return s.substr(b, e - b + 1);
}

[[noreturn]] void wrong_family(const Cidr &c, int family)
{
	throw Error(format_cidr(c) + " is IPv" + std::to_string(c.family) + ", and the set holds IPv" +
		    std::to_string(family) + " prefixes (a set is of one family)");
}

} // namespace

AddressSet read_set_lines(std::istream &in, const std::string &source, int family)
{
	AddressSet set;
	set.family = family ? family : 4;
	bool fixed = family != 0;
	std::string line;
	for (size_t n = 1; std::getline(in, line); n++) {
		std::string_view text = line;
		text = trim(text.substr(0, std::min(text.find('#'), text.find(';'))));
		if (text.empty())
			continue;
		try {
			if (text.find_first_of(" \t") != std::string_view::npos)
				throw Error("one prefix a line, not '" + std::string(text) + "'");
			Cidr c = parse_cidr(text);
			if (!fixed) {
				set.family = c.family;
				fixed = true;
			} else if (c.family != set.family) {
				wrong_family(c, set.family);
			}
			set.prefixes.push_back(c);
		} catch (const Error &e) {
			throw Error(source + " line " + std::to_string(n) + ": " + e.what());
		}
	}
	if (in.bad())
		throw Error("cannot read " + source + ": " + std::strerror(errno));
	normalize(set.prefixes);
	return set;
}

std::vector<Cidr> parse_set_prefixes(const std::vector<std::string> &texts, int family)
{
	std::vector<Cidr> out;
	out.reserve(texts.size());
	for (const auto &t : texts) {
		Cidr c = parse_cidr(t);
		if (family && c.family != family)
			wrong_family(c, family);
		family = c.family;
		out.push_back(c);
	}
	normalize(out);
	return out;
}

namespace {

// The file: a header, then each prefix as its address bytes (4 or 16, by
// the family) and its length.
constexpr char MAGIC[8] = {'S', 'L', 'C', 'S', 'E', 'T', '0', '1'};

struct FileHeader {
	char magic[8];
	uint8_t family;
	uint8_t pad[7];
	uint64_t count;
};
static_assert(sizeof(FileHeader) == 24);

size_t addr_bytes(int family) { return family == 4 ? 4 : 16; }

void write_all(int fd, const void *data, size_t size, const std::string &path)
{
	const char *p = static_cast<const char *>(data);
	while (size) {
		ssize_t n = ::write(fd, p, size);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			throw_errno("cannot write " + path, errno);
		}
		p += n;
		size -= static_cast<size_t>(n);
	}
}

} // namespace

SetStore::SetStore(std::string run_dir) : dir_(std::move(run_dir) + "/sets") {}

SetStore SetStore::for_default_instance() { return SetStore(default_run_dir()); }

std::string SetStore::path_of(std::string_view name) const
{
	check_set_name(name);
	return dir_ + "/" + std::string(name) + ".set";
}

std::vector<std::string> SetStore::names() const
{
	std::vector<std::string> out;
	DIR *d = opendir(dir_.c_str());
	if (!d) {
		if (errno == ENOENT)
			return out;
		throw_errno("cannot read " + dir_, errno);
	}
	while (struct dirent *e = readdir(d)) {
		std::string n = e->d_name;
		if (n.size() > 4 && n.compare(n.size() - 4, 4, ".set") == 0)
			out.push_back(n.substr(0, n.size() - 4));
	}
	closedir(d);
	std::sort(out.begin(), out.end());
	return out;
}

bool SetStore::exists(std::string_view name) const { return access(path_of(name).c_str(), F_OK) == 0; }

AddressSet SetStore::read(std::string_view name) const
{
	std::string path = path_of(name);
	UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
	if (!fd) {
		if (errno == ENOENT)
			throw Error("no set named '" + std::string(name) + "'; see `sluice set list`");
		throw_errno("cannot read " + path, errno);
	}
	struct stat st;
	if (fstat(fd.get(), &st))
		throw_errno("cannot read " + path, errno);
	std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
	if (int err = read_exact(fd.get(), bytes.data(), bytes.size()))
		throw_errno("cannot read " + path, err);
	FileHeader h;
	if (bytes.size() < sizeof(h))
		throw Error(path + " is not a sluice set file");
	std::memcpy(&h, bytes.data(), sizeof(h));
	size_t rec = h.family == 4 || h.family == 6 ? addr_bytes(h.family) + 1 : 0;
	if (std::memcmp(h.magic, MAGIC, sizeof(MAGIC)) || !rec || (bytes.size() - sizeof(h)) / rec != h.count ||
	    (bytes.size() - sizeof(h)) % rec)
		throw Error(path + " is not a sluice set file");
	AddressSet set;
	set.family = h.family;
	set.prefixes.resize(h.count);
	const uint8_t *p = bytes.data() + sizeof(h);
	for (auto &c : set.prefixes) {
		c.family = h.family;
		std::memcpy(c.addr.data(), p, rec - 1);
		c.prefix_len = p[rec - 1];
		p += rec;
	}
	return set;
}

SetContents SetStore::read_all(const std::vector<std::string> &names) const
{
	SetContents out;
	for (const auto &n : names)
		if (!out.count(n))
			out.emplace(n, read(n));
	return out;
}

SetStore::Pending SetStore::stage(std::string_view name, const AddressSet &set) const
{
	std::string path = path_of(name);
	make_private_dir(dir_.substr(0, dir_.rfind('/')), "run directory");
	make_private_dir(dir_, "set directory");
	std::string tmp = path + ".tmp";
	UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
	if (!fd)
		throw_errno("cannot write " + tmp, errno);
	Pending pending(tmp, path);
	FileHeader h = {};
	std::memcpy(h.magic, MAGIC, sizeof(MAGIC));
	h.family = static_cast<uint8_t>(set.family);
	h.count = set.prefixes.size();
	size_t rec = addr_bytes(set.family) + 1;
	std::vector<uint8_t> bytes(sizeof(h) + rec * set.prefixes.size());
	std::memcpy(bytes.data(), &h, sizeof(h));
	uint8_t *p = bytes.data() + sizeof(h);
	for (const auto &c : set.prefixes) {
		std::memcpy(p, c.addr.data(), rec - 1);
		p[rec - 1] = static_cast<uint8_t>(c.prefix_len);
		p += rec;
	}
	write_all(fd.get(), bytes.data(), bytes.size(), tmp);
	return pending;
}

SetStore::Pending::~Pending()
{
	if (!tmp_.empty())
		unlink(tmp_.c_str());
}

void SetStore::Pending::commit()
{
	if (rename(tmp_.c_str(), path_.c_str()))
		throw_errno("cannot replace " + path_, errno);
	tmp_.clear();
}

void SetStore::write(std::string_view name, const AddressSet &set) const { stage(name, set).commit(); }

bool SetStore::remove(std::string_view name) const
{
	std::string path = path_of(name);
	if (unlink(path.c_str()) == 0)
		return true;
	if (errno == ENOENT)
		return false;
	throw_errno("cannot remove " + path, errno);
}

void SetStore::remove_all() const
{
	for (const auto &n : names())
		remove(n);
	if (rmdir(dir_.c_str()) && errno != ENOENT)
		throw_errno("cannot remove " + dir_, errno);
}

} // namespace sluice
