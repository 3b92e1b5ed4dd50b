// SPDX-License-Identifier: GPL-2.0-only
#include "store.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <openssl/evp.h>

#include "store_detail.h"

namespace sluice::cluster {

std::string Endpoint::str() const
{
	// A bare IPv6 literal's colons would run into the port's.
	if (host.find(':') != std::string::npos)
		return "[" + host + "]:" + std::to_string(port);
	return host + ":" + std::to_string(port);
}

namespace {

uint16_t parse_port(std::string_view port, std::string_view text)
{
	unsigned value = 0;
	auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
	if (port.empty())
		throw Error("redis address " + std::string(text) + " has no port (HOST:PORT)");
	if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
		throw Error("redis address " + std::string(text) + ": port " + std::string(port) +
			    " is not a number from 1 to 65535");
	return static_cast<uint16_t>(value);
}

} // namespace

Endpoint parse_endpoint(std::string_view text)
{
	if (text.empty())
		throw Error("empty redis address (HOST:PORT)");
	Endpoint ep;
	std::string_view port;
	if (text.front() == '[') {
		size_t close = text.find(']');
		if (close == std::string_view::npos)
			throw Error("redis address " + std::string(text) + ": no ']' after the IPv6 address");
		ep.host = text.substr(1, close - 1);
		if (close + 1 >= text.size() || text[close + 1] != ':')
			throw Error("redis address " + std::string(text) + " has no port ([V6]:PORT)");
		port = text.substr(close + 2);
	} else {
		size_t colon = text.rfind(':');
		if (colon == std::string_view::npos)
			throw Error("redis address " + std::string(text) + " has no port (HOST:PORT)");
		ep.host = text.substr(0, colon);
		if (ep.host.find(':') != std::string::npos)
			throw Error("redis address " + std::string(text) +
				    ": write an IPv6 address in brackets, as [V6]:PORT");
		port = text.substr(colon + 1);
	}
	if (ep.host.empty())
		throw Error("redis address " + std::string(text) + " has no host");
	for (char c : ep.host)
		if (c == ' ' || c == ',' || c == '[' || c == ']' || static_cast<unsigned char>(c) < 0x20)
			throw Error("redis address " + std::string(text) + ": '" + std::string(1, c) +
				    "' in the host name");
	ep.port = parse_port(port, text);
	return ep;
}

std::vector<Endpoint> parse_endpoints(std::string_view text)
{
	std::vector<Endpoint> out;
	size_t start = 0;
	while (true) {
		size_t comma = text.find(',', start);
		std::string_view item = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
		if (item.empty())
			throw Error(text.empty() ? std::string("no redis address (HOST:PORT,...)")
						 : "an empty redis address in " + std::string(text));
		out.push_back(parse_endpoint(item));
		if (comma == std::string_view::npos)
			break;
		start = comma + 1;
	}
	return out;
}

std::string sha1_hex(std::string_view data)
{
	// EVALSHA names a script by its SHA-1; nothing here relies on it being
	// collision resistant.
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha1(), nullptr) != 1)
		throw Error("cannot compute a SHA-1 (OpenSSL's libcrypto)");
	static const char hex[] = "0123456789abcdef";
	std::string out;
	for (unsigned char byte : std::string_view(reinterpret_cast<const char *>(digest), len)) {
		out += hex[byte >> 4];
		out += hex[byte & 15];
	}
	return out;
}

Script make_script(std::string body)
{
	Script s;
	s.sha1 = sha1_hex(body);
	s.body = std::move(body);
	return s;
}

Command eval_command(const Script &script, const std::vector<std::string> &keys,
		    const std::vector<std::string> &args)
{
	Command c;
	c.args.reserve(3 + keys.size() + args.size());
	c.args.push_back("EVALSHA");
	c.args.push_back(script.sha1);
	c.args.push_back(std::to_string(keys.size()));
	c.args.insert(c.args.end(), keys.begin(), keys.end());
	c.args.insert(c.args.end(), args.begin(), args.end());
	if (!keys.empty())
		c.route_key = keys.front();
	c.script_body = std::make_shared<const std::string>(script.body);
	return c;
}

std::string one_line(std::string_view text, size_t max)
{
	std::string out;
	for (char c : text.substr(0, max))
		out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
	return text.size() > max ? out + "..." : out;
}

bool may_connect(const StoreOptions &options, const Endpoint &endpoint)
{
	return options.password.empty() ||
	       std::find(options.seeds.begin(), options.seeds.end(), endpoint) != options.seeds.end();
}

std::string unnamed_node_reason(const Endpoint &endpoint)
{
	return "redis " + endpoint.str() +
	       ": not among the addresses given to --redis-cluster, so not connected to (the password goes only "
	       "there); name every master there as the cluster announces it";
}

std::string read_password_file(const std::string &path)
{
	std::ifstream in(path, std::ios::binary);
	if (!in)
		throw_errno("cannot read the redis password file " + path, errno);
	// A directory opens, and reads as empty.
	std::error_code ec;
	if (std::filesystem::is_directory(path, ec))
		throw_errno("cannot read the redis password file " + path, EISDIR);
	std::string line;
	std::getline(in, line);
	if (in.bad())
		throw_errno("cannot read the redis password file " + path, errno);
	// A file written on Windows, or by `echo` in a CRLF editor, ends in \r\n.
	if (!line.empty() && line.back() == '\r')
		line.pop_back();
	if (line.empty())
		throw Error("the redis password file " + path + " has an empty first line");
	return line;
}

namespace {

/// CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection), which
/// the Redis Cluster specification names for key hash slots.
constexpr std::array<uint16_t, 256> crc16_table()
{
	std::array<uint16_t, 256> table{};
	for (unsigned byte = 0; byte < 256; byte++) {
		uint16_t crc = static_cast<uint16_t>(byte << 8);
		for (int bit = 0; bit < 8; bit++)
			crc = static_cast<uint16_t>(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
		table[byte] = crc;
	}
	return table;
}

constexpr auto CRC16_TABLE = crc16_table();

uint16_t crc16(std::string_view data)
{
	uint16_t crc = 0;
	for (unsigned char c : data)
		crc = static_cast<uint16_t>((crc << 8) ^ CRC16_TABLE[((crc >> 8) ^ c) & 0xff]);
	return crc;
}

} // namespace

uint16_t key_slot(std::string_view key)
{
	// The tag is what lies between the first '{' and the first '}' after it,
	// if that is not empty; "{}" or an unclosed '{' leave the whole key hashed.
	size_t open = key.find('{');
	if (open != std::string_view::npos) {
		size_t close = key.find('}', open + 1);
		if (close != std::string_view::npos && close > open + 1)
			key = key.substr(open + 1, close - open - 1);
	}
	return crc16(key) & (CLUSTER_SLOTS - 1);
}

namespace detail {

bool ascii_iequal(std::string_view a, std::string_view b)
{
	if (a.size() != b.size())
		return false;
	for (size_t i = 0; i < a.size(); i++) {
		char x = a[i], y = b[i];
		if (x >= 'a' && x <= 'z')
			x = static_cast<char>(x - 'a' + 'A');
		if (y >= 'a' && y <= 'z')
			y = static_cast<char>(y - 'a' + 'A');
		if (x != y)
			return false;
	}
	return true;
}

bool error_is(const Reply &reply, std::string_view code)
{
	if (!reply.is_error() || reply.str.size() < code.size())
		return false;
	if (reply.str.compare(0, code.size(), code) != 0)
		return false;
	return reply.str.size() == code.size() || reply.str[code.size()] == ' ';
}

bool wants_eval_fallback(const Command &command, const Reply &reply)
{
	return error_is(reply, "NOSCRIPT") && command.script_body && command.args.size() >= 2 &&
	       ascii_iequal(command.args[0], "EVALSHA");
}

std::vector<std::string> as_eval(const Command &command)
{
	std::vector<std::string> args = command.args;
	args[0] = "EVAL";
	args[1] = *command.script_body;
	return args;
}

} // namespace detail

} // namespace sluice::cluster
