// SPDX-License-Identifier: GPL-2.0-only
// The agent's cluster options (`sluice agent --redis ...`), as typed, and
// their reading into the cluster sync's options.
#pragma once

#include <string>

#include "sync.h"

namespace CLI {
class App;
}

namespace sluice {

struct ClusterArgs {
	std::string redis, redis_cluster, prefix = "sluice", node_id, password_file, user;
	std::string interval = "100ms", lease, timeout;
	size_t max_buckets = 100000;
};

/// Declares the cluster options on the agent command, storing into `a`.
void add_cluster_options(CLI::App *cmd, ClusterArgs &a);

/// Whether a store was named: the sync runs only then.
inline bool wants_cluster(const ClusterArgs &a) { return !a.redis.empty() || !a.redis_cluster.empty(); }

/// Parses the options; throws Error with one line naming what is wrong.
cluster::SyncOptions to_sync_options(const ClusterArgs &a, const std::string &pin_dir);

} // namespace sluice
