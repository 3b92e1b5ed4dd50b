// SPDX-License-Identifier: GPL-2.0-only
#include "cluster_args.h"

#include <CLI/CLI.hpp>

#include "error.h"
#include "rate.h"
#include "share_scripts.h"

namespace sluice {

void add_cluster_options(CLI::App *cmd, ClusterArgs &a)
{
	auto *one = cmd->add_option("--redis", a.redis, "HOST:PORT of the Redis that shares cluster rules' rates");
	auto *many = cmd->add_option("--redis-cluster", a.redis_cluster,
				     "HOST:PORT,... of Redis Cluster nodes to share cluster rules' rates through (with a password: "
				     "every master; no other address is connected to)");
	one->excludes(many);
	cmd->add_option("--redis-prefix", a.prefix, "Prefix of the keys: one per cluster of hosts, 1 to 64 letters, digits, '-', '_' or '.' "
			"(default sluice)");
	cmd->add_option("--node-id", a.node_id, "This host's name in the store (default: the host name)");
	cmd->add_option("--redis-password-file", a.password_file, "AUTH with the password on this file's first line");
	cmd->add_option("--redis-user", a.user, "AUTH as this ACL user (with --redis-password-file)");
	cmd->add_option("--sync-interval", a.interval, "How often to report and hear shares (default 100ms)");
	cmd->add_option("--lease", a.lease,
			"How long a share holds without the store (default 10 sync intervals, at least 1s; at most 1h)");
	cmd->add_option("--redis-timeout", a.timeout, "Connect and reply timeout (default: the sync interval)");
	cmd->add_option("--max-synced", a.max_buckets, "Buckets synced at once, at most (default 100000)");
}

cluster::SyncOptions to_sync_options(const ClusterArgs &a, const std::string &pin_dir)
{
	cluster::SyncOptions o;
	o.redis_cluster = !a.redis_cluster.empty();
	o.store.seeds = cluster::parse_endpoints(o.redis_cluster ? a.redis_cluster : a.redis);
	if (!o.redis_cluster && o.store.seeds.size() != 1)
		throw Error("--redis takes one HOST:PORT; for several nodes use --redis-cluster");
	cluster::check_prefix(a.prefix);
	o.prefix = a.prefix;
	o.node_id = a.node_id.empty() ? cluster::default_node_id() : a.node_id;
	if (o.node_id.find_first_of(" \t\r\n") != std::string::npos)
		throw Error("--node-id '" + o.node_id + "' must hold no blanks");
	if (!a.user.empty() && a.password_file.empty())
		throw Error("--redis-user needs --redis-password-file");
	o.store.username = a.user;
	if (!a.password_file.empty())
		o.store.password = cluster::read_password_file(a.password_file);
	auto ms = [](const std::string &text, const char *what) {
		uint64_t ns = 0;
		try {
			ns = parse_duration_ns(text, what);
		} catch (const Error &e) {
			throw Error(std::string(what) + ": " + e.what());
		}
		if (ns < 1000000ULL)
			throw Error(std::string(what) + " must be at least 1ms, not " + text);
		return std::chrono::milliseconds(ns / 1000000ULL);
	};
	o.interval = ms(a.interval, "--sync-interval");
	if (!a.lease.empty()) {
		o.lease = ms(a.lease, "--lease");
		if (o.lease < 2 * o.interval)
			throw Error("--lease " + a.lease + " must be at least two sync intervals: a share would lapse "
				    "between two rounds");
	}
	if (o.effective_lease() > cluster::MAX_LEASE)
		throw Error(a.lease.empty() ? "--sync-interval " + a.interval +
						      " is too long: its lease (ten intervals) would exceed the longest lease, 1h"
					    : "--lease " + a.lease + " is longer than the longest lease, 1h");
	o.store.timeout = a.timeout.empty() ? o.interval : ms(a.timeout, "--redis-timeout");
	if (a.max_buckets == 0)
		throw Error("--max-synced must be at least 1");
	o.max_buckets = a.max_buckets;
	o.pin_dir = pin_dir;
	o.status_path = cluster::default_status_path();
	return o;
}

} // namespace sluice
