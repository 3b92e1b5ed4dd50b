// SPDX-License-Identifier: GPL-2.0-only
#include "share_scripts.h"

#include <cstdio>
#include <cstdlib>

namespace sluice::cluster {

namespace {

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
local node, rate, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i, key in ipairs(KEYS) do
  local demand = tonumber(ARGV[2 + 2 * i])
  local used = tonumber(ARGV[3 + 2 * i])
  local fields = redis.call('HGETALL', key)
  local demands, others, used_all, live = {demand}, 0, used, 1
  for j = 1, #fields, 2 do
    if fields[j] ~= node then
      local d, g, u, exp = string.match(fields[j + 1], '^(%S+) (%S+) (%S+) (%S+)$')
      if d and tonumber(exp) > now then
        demands[#demands + 1] = tonumber(d)
        others = others + tonumber(g)
        used_all = used_all + tonumber(u)
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
  local grant = math.max(0, math.min(target, rate - others))
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
const char *const HOSTS_LUA = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], 2 * lease)
return redis.call('ZCARD', KEYS[1])
)lua";

std::string number(double v)
{
	char buf[40];
	std::snprintf(buf, sizeof(buf), "%.17g", v);
	return buf;
}

double parse_number(const Reply &r)
{
	if (r.type == Reply::Type::integer)
		return double(r.integer);
	if (r.type != Reply::Type::string)
		throw Error("the share script answered with something other than numbers");
	char *end = nullptr;
	double v = std::strtod(r.str.c_str(), &end);
	if (end == r.str.c_str() || *end)
		throw Error("the share script answered '" + r.str + "', not a number");
	return v;
}

} // namespace

std::string rule_tag(const std::string &prefix, const std::string &rule_name)
{
	return "{" + prefix + ":" + rule_name + "}";
}

std::string bucket_key(const std::string &prefix, const std::string &rule_name, const std::string &bucket)
{
	return rule_tag(prefix, rule_name) + ":" + bucket;
}

std::string hosts_key(const std::string &prefix) { return "{" + prefix + "}:hosts"; }

const Script &share_script()
{
	static const Script s = make_script(SHARE_LUA);
	return s;
}

const Script &hosts_script()
{
	static const Script s = make_script(HOSTS_LUA);
	return s;
}

Command share_command(const std::string &node, double rate, std::chrono::milliseconds lease,
		      const std::vector<BucketReport> &reports)
{
	std::vector<std::string> keys, args = {node, number(rate), std::to_string(lease.count())};
	keys.reserve(reports.size());
	args.reserve(3 + 2 * reports.size());
	for (const auto &r : reports) {
		keys.push_back(r.key);
		args.push_back(number(r.demand));
		args.push_back(number(r.used));
	}
	return eval_command(share_script(), keys, args);
}

std::vector<BucketGrant> parse_share_reply(const Reply &reply, size_t reports)
{
	if (reply.is_error())
		throw Error("the share script failed: " + reply.str);
	if (reply.type != Reply::Type::array || reply.elements.size() != 3 * reports)
		throw Error("the share script answered " + std::to_string(reply.elements.size()) + " values for " +
			    std::to_string(reports) + " buckets");
	std::vector<BucketGrant> out(reports);
	for (size_t i = 0; i < reports; i++) {
		out[i].share = parse_number(reply.elements[3 * i]);
		out[i].cluster_used = parse_number(reply.elements[3 * i + 1]);
		out[i].hosts = static_cast<unsigned>(parse_number(reply.elements[3 * i + 2]));
	}
	return out;
}

Command hosts_command(const std::string &prefix, const std::string &node, std::chrono::milliseconds lease)
{
	return eval_command(hosts_script(), {hosts_key(prefix)}, {node, std::to_string(lease.count())});
}

unsigned parse_hosts_reply(const Reply &reply)
{
	if (reply.is_error())
		throw Error("the hosts script failed: " + reply.str);
	if (reply.type != Reply::Type::integer || reply.integer < 0)
		throw Error("the hosts script answered something other than a count");
	return static_cast<unsigned>(reply.integer);
}

} // namespace sluice::cluster
