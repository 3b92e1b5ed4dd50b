// SPDX-License-Identifier: GPL-2.0-only
// The cluster sync: the agent's component that shares cluster rules' rates
// across hosts through the store. Every decision stays in XDP: the sync only
// moves the refill of the buckets that matter from the rule's local share
// (compiled into the data plane) to the share the store grants this host.
//
// Per round (--sync-interval): the buckets of cluster rules that matter are
// those a host drops packets of (the throttled-source table: over their
// local share) and those already synced; each one's demand (passed and
// dropped) and use (passed) per second go to the share script, one call per
// rule, and its grant comes back with a lease. Between rounds, every few
// milliseconds, what the grant adds to or takes from each synced bucket's
// local rate goes into the grants map (struct sluice_grant, GrantLedger), and
// the data plane moves the bucket's arrival time by it when it next charges
// the bucket: the bucket's words keep one writer, the program. A grant
// whose lease ran out is no longer applied: the bucket is back at the local
// share, the fallback. The store's reach and health are reported as
// "degraded" by the metrics and by `sluice status`.
#pragma once

#include <prometheus/metric_family.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent.h"
#include "share_scripts.h"
#include "store.h"

namespace sluice::cluster {

struct SyncOptions {
	StoreOptions store;
	bool redis_cluster = false;             ///< --redis-cluster: route by slot
	std::string prefix = "sluice";          ///< --redis-prefix: one per cluster of hosts
	std::string node_id;                    ///< --node-id; default the host name
	std::chrono::milliseconds interval{100};///< --sync-interval
	std::chrono::milliseconds lease{0};     ///< --lease; 0: ten intervals, at least 1 s
	std::chrono::milliseconds apply_every{5};
	size_t max_buckets = 100000;            ///< buckets synced at once, at most
	std::string pin_dir;
	std::string status_path;                ///< written each round for `sluice status`
	/// The store to use instead of connecting (tests); empty: from `store`.
	std::function<std::unique_ptr<Store>()> make_store;

	std::chrono::milliseconds effective_lease() const;
};

/// A bucket's counters at one time, in its rule's units.
struct Reading {
	uint64_t offered = 0, passed = 0; ///< passed and dropped, and passed
	std::chrono::steady_clock::time_point at{};
	bool exists = false; ///< the table held the bucket
};

/// Which earlier reading a round measures a bucket's demand from, up to
/// `now`: the one half-way between rounds (so that traffic that stopped reads
/// as gone sooner) when it is usable, else the last round's.
const Reading &measure_from(const Reading &last, const Reading &half, const Reading &now,
			    std::chrono::milliseconds interval);

/// How far the apply loop moves a synced bucket's arrival time: `ticks`
/// earlier (credit, the share above the local rate) or, negative, later
/// (refill withheld, the share below it), and the fraction of a tick left
/// over for the next step.
struct ArrivalShift {
	int64_t ticks = 0;
	double carry = 0;
};
/// The longest step the apply loop moves a bucket for at once, seconds.
constexpr double MAX_APPLY_STEP_SECONDS = 1.0;
/// No single move is larger than this many ticks (2^62), whatever the rates.
constexpr double MAX_SHIFT_TICKS = 4611686018427387904.0;
/// The move after `dt` seconds at a grant of `share` units per second, for a
/// bucket whose rule refills it at `local` (this host's fallback share) out of
/// a shared `rate`, with `carry` left from the last step. The share counts
/// within [0, rate], dt within [0, MAX_APPLY_STEP_SECONDS]: the move lies
/// between -dt (the bucket refills nothing: it is never put in debt beyond
/// the time that passed) and (rate / local - 1) * dt (it refills at the whole
/// rate), in ticks. Any input not finite, or a rate or local share not
/// above 0, moves nothing.
ArrivalShift arrival_shift(double share, double local, double rate, double dt, double carry);

/// The default node id: the host name.
std::string default_node_id();
/// Where the agent reports the sync's health for `sluice status`: in the run
/// directory (default_run_dir(): $SLUICE_RUN_DIR, else the pin directory's,
/// such as /run/sluice), cluster.json.
std::string default_status_path();

/// The sync's health as `sluice status` shows it, read from the status file;
/// empty if there is none or its agent is gone.
std::string read_status_line(const std::string &path);

/// What the sync knows, for metrics and the status file.
struct SyncFigures {
	std::string store;            ///< Store::describe()
	std::string node;
	bool degraded = true;         ///< not yet synced, or the last round failed
	std::string problem;          ///< why, as one line
	uint64_t degraded_total = 0;  ///< times it went degraded
	uint64_t rounds_ok = 0, rounds_failed = 0;
	uint64_t commands = 0;        ///< sent to the store
	double last_round_seconds = 0;
	double round_seconds_total = 0; ///< every round's wall time, summed
	unsigned hosts = 0;           ///< live hosts the store knows of
	size_t synced_buckets = 0;
	size_t granted_buckets = 0;   ///< with a grant whose lease runs
	struct Rule {
		std::string name;
		double rate = 0, local_rate = 0; ///< units per second
		size_t buckets = 0, granted = 0;
		double share = 0;        ///< the grants summed, units per second
		double cluster_used = 0; ///< every host's use of its synced buckets
	};
	std::vector<Rule> rules;
};

/// The metric families of the figures.
std::vector<prometheus::MetricFamily> sync_metric_families(const SyncFigures &f);

class ClusterSync : public agent::Component {
public:
	explicit ClusterSync(SyncOptions options);
	~ClusterSync() override;

	std::string name() const override { return "cluster"; }
	void start() override;
	void stop() noexcept override;

	SyncFigures figures() const;

private:
	struct State;
	void sync_loop();
	/// One round: rules, buckets, readings, the store's grants. Throws if
	/// the store cannot be reached or a call fails.
	void round(std::chrono::steady_clock::time_point began);
	std::shared_ptr<struct Tables> load_rules();
	void follow_host_count(const std::shared_ptr<struct Tables> &tables);
	void track_buckets(const std::shared_ptr<struct Tables> &tables, std::chrono::steady_clock::time_point now);
	/// Reads the tracked buckets' counters: half-way between rounds, or
	/// for the round's report (demand and use over the last half interval).
	void read_counters(struct Tables &tables, bool half_way);
	void round_failed(std::chrono::steady_clock::time_point began, const std::string &problem);
	void publish_figures();
	void apply_loop();

	SyncOptions options_;
	std::unique_ptr<State> state_;
	std::thread sync_thread_, apply_thread_;
	std::atomic<bool> stopping_{false};
	std::mutex wake_mutex_;
	std::condition_variable wake_;
};

} // namespace sluice::cluster
