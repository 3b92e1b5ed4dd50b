// SPDX-License-Identifier: GPL-2.0-only
// The Lua scripts of the cluster sync and the keys they touch. Each script
// runs atomically on the server, on the server's clock (TIME), and touches
// keys of one hash slot only: a rule's keys share the hash tag {PREFIX:RULE}.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store.h"

namespace sluice::cluster {

/// One bucket's report to the store: what this host saw in the last round,
/// in the rule's units (packets or bytes) per second.
struct BucketReport {
	std::string key;     ///< bucket_key()
	double demand = 0;   ///< offered: passed and dropped
	double used = 0;     ///< passed
};

/// What the store granted one bucket.
struct BucketGrant {
	double share = 0;       ///< this host's share of the rate, units per second
	double cluster_used = 0;///< every live host's `used` summed
	unsigned hosts = 0;     ///< hosts with a live report of this bucket, this one included
};

/// Bounds on what the store says, written into the scripts and checked again
/// here, so that neither a lying store nor a lying peer's record moves a
/// bucket by more than its rule allows.
/// The longest lease: --lease above it is refused, and a host's record or
/// registry entry whose lease ends later is dropped as no honest host's.
constexpr std::chrono::milliseconds MAX_LEASE{std::chrono::hours(1)};
/// Live hosts counted at most: a larger count is refused (a rule's local
/// share is its rate over the count).
constexpr unsigned MAX_HOSTS = 10000;
/// The largest shared rate a script accepts, units per second (8 Pbit/s).
constexpr double MAX_SHARED_RATE = 1e15;
/// A host's reported use counts as at most this, units per second.
constexpr double MAX_REPORTED_USE = 1e15;

/// A number as the store writes it (the scripts' %.17g): decimal, finite,
/// nothing before or after it. Nothing for "nan", "inf", "+1", " 1", "1x", "".
std::optional<double> parse_store_number(std::string_view text);
/// A host count: decimal digits, at most MAX_HOSTS.
std::optional<unsigned> parse_host_count(std::string_view text);

/// The longest --redis-prefix.
constexpr size_t MAX_PREFIX_LENGTH = 64;
/// Checks a key prefix: 1 to MAX_PREFIX_LENGTH letters, digits, '-', '_' or
/// '.'. A prefix's keys begin "{PREFIX:" or are "{PREFIX}:hosts", so the ACL
/// patterns ~{PREFIX:* and ~{PREFIX}:hosts cover no other prefix's keys: no
/// ':' to extend one prefix into another, no glob characters (* ? [ ] \)
/// and no braces. Throws Error with one line naming what is wrong.
void check_prefix(const std::string &prefix);

/// The hash tag of a rule's keys: every key of the rule lands in one slot.
std::string rule_tag(const std::string &prefix, const std::string &rule_name);
/// A bucket's key: "{PREFIX:RULE}:" and the bucket's prefix ("203.0.113.7/32").
std::string bucket_key(const std::string &prefix, const std::string &rule_name, const std::string &bucket);
/// The key of the live hosts' registry (a sorted set of lease expiries).
std::string hosts_key(const std::string &prefix);

/// The share script: for each bucket key, records this host's demand, use
/// and lease, drops other hosts' expired reports, and grants this host
/// min(its max-min fair share of the rate by demand, the rate less every
/// other host's grant): shares never add up to more than the rate, a host
/// whose share shrinks is told so before another's grows into it, and a
/// host with no demand holds nothing.
const Script &share_script();
/// The hosts script: renews this host's lease in the registry, drops the
/// expired, returns the live count.
const Script &hosts_script();

/// The call of share_script for one rule: `rate` in units per second.
Command share_command(const std::string &node, double rate, std::chrono::milliseconds lease,
		      const std::vector<BucketReport> &reports);
/// Parses its reply: one grant per report, each share from 0 to `rate` (the
/// rate asked with), the use finite and not negative, the host count at most
/// MAX_HOSTS. Throws Error with one line on an error reply or any value out
/// of bounds: then no grant of the call is applied.
std::vector<BucketGrant> parse_share_reply(const Reply &reply, size_t reports, double rate);

Command hosts_command(const std::string &prefix, const std::string &node, std::chrono::milliseconds lease);
/// The live host count from its reply, from 1 to MAX_HOSTS; throws Error on a
/// malformed or error reply, or a count out of bounds.
unsigned parse_hosts_reply(const Reply &reply);

} // namespace sluice::cluster
