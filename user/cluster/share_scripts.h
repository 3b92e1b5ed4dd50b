// SPDX-License-Identifier: GPL-2.0-only
// The Lua scripts of the cluster sync and the keys they touch. Each script
// runs atomically on the server, on the server's clock (TIME), and touches
// keys of one hash slot only: a rule's keys share the hash tag {PREFIX:RULE}.
#pragma once

#include <string>
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
/// Parses its reply: one grant per report. Throws Error on a malformed or error reply.
std::vector<BucketGrant> parse_share_reply(const Reply &reply, size_t reports);

Command hosts_command(const std::string &prefix, const std::string &node, std::chrono::milliseconds lease);
/// The live host count from its reply; throws Error on a malformed or error reply.
unsigned parse_hosts_reply(const Reply &reply);

} // namespace sluice::cluster
