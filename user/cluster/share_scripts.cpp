// SPDX-License-Identifier: GPL-2.0-only
#include "share_scripts.h"
#include "text_table.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace sluice::cluster {

namespace {

std::string number_text(double v)
{
	char buf[40];
	std::snprintf(buf, sizeof(buf), "%.17g", v);
	return buf;
}

// KEYS: the buckets of one rule. ARGV: node, rate (units/s), lease (ms), then
// per key its demand and use (units/s). A bucket's key is a hash of
// node -> "demand grant used expiry_ms". Returns, per key, the grant, every
// live host's use summed and the live host count, as strings (a Lua number
// would reach the client truncated to an integer).
//
// The grant: with D the live demands (this host's included), a host's fair
// share is min(its demand, L), L the level at which the shares fill the rate
// (max-min fairness); when D fits in the rate, each host with demand also
// gets an equal part of what is left, so growth needs no round trip. The
// grant is that, but never more than the rate less the other hosts' grants:
// a host that must shrink keeps its grant until it hears of the shrink, and
// only then can another grow into it.
const char *const SHARE_LUA = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Nothing read here is trusted, ARGV included. num: the number a text
-- reads as, nil for none or nan (Lua's tonumber reads "nan" and "inf").
-- clamp: x within [lo, hi] (inf reads as hi, -inf as lo).
local function num(text)
  if text == nil then return nil end
  local x = tonumber(text)
  if x == nil or x ~= x then return nil end
  return x
end
local function clamp(x, lo, hi)
  if x < lo then return lo end
  if x > hi then return hi end
  return x
end
local node, rate, lease = ARGV[1], num(ARGV[2]), num(ARGV[3])
if rate == nil or rate <= 0 or rate > MAX_RATE or lease == nil or lease < 1 or lease > MAX_LEASE_MS then
  return redis.error_reply('ERR sluice share script: rate or lease out of bounds')
end
lease = math.floor(lease)
local out = {}
for i, key in ipairs(KEYS) do
  -- Every demand and grant counts within [0, rate] (a demand beyond the
  -- rate gets the same max-min share as the rate), every use within
  -- [0, MAX_USED].
  local demand = clamp(num(ARGV[2 + 2 * i]) or 0, 0, rate)
  local used = clamp(num(ARGV[3 + 2 * i]) or 0, 0, MAX_USED)
  local fields = redis.call('HGETALL', key)
  local demands, others, used_all, live = {demand}, 0, used, 1
  for j = 1, #fields, 2 do
    if fields[j] ~= node then
      local d, g, u, exp = string.match(fields[j + 1], '^(%S+) (%S+) (%S+) (%S+)$')
      d, g, u, exp = num(d), num(g), num(u), num(exp)
      -- A record of other than four numbers, or whose lease has ended or
      -- ends later than any lease this script grants, is no record.
      if d and g and u and exp and exp > now and exp <= now + MAX_LEASE_MS then
        demands[#demands + 1] = clamp(d, 0, rate)
        others = math.min(others + clamp(g, 0, rate), rate)
        used_all = used_all + clamp(u, 0, MAX_USED)
        live = live + 1
      else
        redis.call('HDEL', key, fields[j])
      end
    end
  end
  local sum, wanting = 0, 0
  for _, d in ipairs(demands) do
    sum = sum + d
    if d > 0 then wanting = wanting + 1 end
  end
  local target = 0
  if demand > 0 then
    if sum <= rate then
      target = demand + (rate - sum) / wanting
    else
      table.sort(demands)
      local left, n, level = rate, #demands, rate
      for _, d in ipairs(demands) do
        local even = left / n
        if d > even then level = even break end
        left = left - d
        n = n - 1
      end
      target = math.min(demand, level)
    end
  end
  local grant = math.min(target, rate - others)
  if grant ~= grant then grant = 0 end
  grant = clamp(grant, 0, rate)
  if demand <= 0 and grant <= 0 then
    redis.call('HDEL', key, node)
    live = live - 1
  else
    redis.call('HSET', key, node, string.format('%.17g %.17g %.17g %d', demand, grant, used, now + lease))
  end
  redis.call('PEXPIRE', key, 2 * lease)
  out[#out + 1] = string.format('%.17g', grant)
  out[#out + 1] = string.format('%.17g', used_all)
  out[#out + 1] = tostring(live)
end
return out
)lua";

// KEYS[1]: the registry. ARGV: node, lease (ms). Returns the live count.
// Entries whose lease ended, or ends later than any lease granted (a
// record no honest host writes), are dropped.
const char *const HOSTS_LUA = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
if lease == nil or not (lease >= 1 and lease <= MAX_LEASE_MS) then
  return redis.error_reply('ERR sluice hosts script: lease out of bounds')
end
lease = math.floor(lease)
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now + MAX_LEASE_MS), '+inf')
redis.call('PEXPIRE', KEYS[1], 2 * lease)
return redis.call('ZCARD', KEYS[1])
)lua";

/// A script's body with its bounds written in: the same numbers the C++
/// side checks against.
std::string with_bounds(std::string body)
{
	auto put = [&](const std::string &name, const std::string &value) {
		for (size_t at = body.find(name); at != std::string::npos; at = body.find(name, at + value.size()))
			body.replace(at, name.size(), value);
	};
	put("MAX_LEASE_MS", std::to_string(MAX_LEASE.count()));
	put("MAX_RATE", number_text(MAX_SHARED_RATE));
	put("MAX_USED", number_text(MAX_REPORTED_USE));
	return body;
}

/// A reply element as text: a string, or an integer reply.
std::string element_text(const Reply &r, const char *script)
{
	if (r.type == Reply::Type::integer)
		return std::to_string(r.integer);
	if (r.type != Reply::Type::string)
		throw Error(std::string("the ") + script + " script answered with something other than numbers");
	return r.str;
}

/// What the store said, quoted for an error line: at most 40 bytes, control
/// characters as '?', so that a lying store cannot write the log.
std::string quoted(const std::string &text) { return "'" + one_line(text, 40) + "'"; }

} // namespace

void check_prefix(const std::string &prefix)
{
	const std::string rule = "use 1 to " + std::to_string(MAX_PREFIX_LENGTH) +
				 " letters, digits, '-', '_' or '.', so that one prefix's ACL key patterns cover no "
				 "other's";
	if (prefix.empty())
		throw Error("--redis-prefix is empty: " + rule);
	if (prefix.size() > MAX_PREFIX_LENGTH)
		throw Error("--redis-prefix is " + std::to_string(prefix.size()) + " characters long: " + rule);
	for (char c : prefix) {
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
			  c == '_' || c == '.';
		if (ok)
			continue;
		unsigned char u = static_cast<unsigned char>(c);
		char shown[8];
		if (u < 0x20 || u >= 0x7f)
			std::snprintf(shown, sizeof(shown), "\\x%02x", u);
		else
			std::snprintf(shown, sizeof(shown), "'%c'", c);
		throw Error("--redis-prefix holds " + std::string(shown) + ": " + rule);
	}
}

std::string rule_tag(const std::string &prefix, const std::string &rule_name)
{
	return "{" + prefix + ":" + rule_name + "}";
}

std::string bucket_key(const std::string &prefix, const std::string &rule_name, const std::string &bucket)
{
	return rule_tag(prefix, rule_name) + ":" + bucket;
}

std::string hosts_key(const std::string &prefix) { return "{" + prefix + "}:hosts"; }

std::optional<double> parse_store_number(std::string_view text)
{
	// std::from_chars reads what the script's %.17g writes, and refuses a
	// leading '+' or blank; "nan", "inf" and "infinity" it reads, and the
	// finiteness check refuses.
	double v = 0;
	const char *end = text.data() + text.size();
	auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
	if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v))
		return std::nullopt;
	return v;
}

const Script &share_script()
{
	static const Script s = make_script(with_bounds(SHARE_LUA));
	return s;
}

const Script &hosts_script()
{
	static const Script s = make_script(with_bounds(HOSTS_LUA));
	return s;
}

Command share_command(const std::string &node, double rate, std::chrono::milliseconds lease,
		      const std::vector<BucketReport> &reports)
{
	std::vector<std::string> keys, args = {node, number_text(rate), std::to_string(lease.count())};
	keys.reserve(reports.size());
	args.reserve(3 + 2 * reports.size());
	for (const auto &r : reports) {
		keys.push_back(r.key);
		args.push_back(number_text(r.demand));
		args.push_back(number_text(r.used));
	}
	return eval_command(share_script(), keys, args);
}

std::vector<BucketGrant> parse_share_reply(const Reply &reply, size_t reports, double rate)
{
	if (reply.is_error())
		throw Error("the share script failed: " + one_line(reply.str));
	if (reply.type != Reply::Type::array || reply.elements.size() != 3 * reports)
		throw Error("the share script answered " + plural(reply.elements.size(), "value", "values") + " for " +
			    plural(reports, "bucket", "buckets"));
	std::vector<BucketGrant> out(reports);
	for (size_t i = 0; i < reports; i++) {
		std::string share = element_text(reply.elements[3 * i], "share");
		std::string used = element_text(reply.elements[3 * i + 1], "share");
		std::string hosts = element_text(reply.elements[3 * i + 2], "share");
		std::optional<double> s = parse_store_number(share);
		if (!s || !(*s >= 0 && *s <= rate))
			throw Error("the store granted " + quoted(share) + " of a rate of " + number_text(rate) +
				    "/s: not a number from 0 to the rate; no grant applied");
		std::optional<double> u = parse_store_number(used);
		if (!u || *u < 0)
			throw Error("the store reported a use of " + quoted(used) +
				    ": not a number from 0; no grant applied");
		std::optional<unsigned> h = parse_host_count(hosts);
		if (!h)
			throw Error("the store counted " + quoted(hosts) + " hosts: not a count from 0 to " +
				    std::to_string(MAX_HOSTS) + "; no grant applied");
		out[i].share = *s;
		out[i].cluster_used = *u;
		out[i].hosts = *h;
	}
	return out;
}

std::optional<unsigned> parse_host_count(std::string_view text)
{
	unsigned v = 0;
	const char *end = text.data() + text.size();
	auto [ptr, ec] = std::from_chars(text.data(), end, v);
	if (text.empty() || ec != std::errc() || ptr != end || v > MAX_HOSTS)
		return std::nullopt;
	return v;
}

Command hosts_command(const std::string &prefix, const std::string &node, std::chrono::milliseconds lease)
{
	return eval_command(hosts_script(), {hosts_key(prefix)}, {node, std::to_string(lease.count())});
}

unsigned parse_hosts_reply(const Reply &reply)
{
	if (reply.is_error())
		throw Error("the hosts script failed: " + one_line(reply.str));
	if (reply.type != Reply::Type::integer || reply.integer < 1 || reply.integer > MAX_HOSTS)
		throw Error("the hosts script answered " +
			    (reply.type == Reply::Type::integer ? std::to_string(reply.integer) : std::string("no integer")) +
			    ", not a count of live hosts from 1 to " + std::to_string(MAX_HOSTS));
	return static_cast<unsigned>(reply.integer);
}

} // namespace sluice::cluster
