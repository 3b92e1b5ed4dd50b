// SPDX-License-Identifier: GPL-2.0-only
#include "sync.h"

#include <bpf/bpf.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "datapath.h"
#include "grants.h"
#include "maps.h"
#include "net.h"
#include "rule_table.h"
#include "transaction.h"
#include "tick_clock.h"
#include "sluice_algos.h"
#include "metrics.h"
#include "sources.h"
#include "text_table.h"

namespace sluice::cluster {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

/// Commands carry at most this many buckets: one script call holds the
/// server for the whole call, so a rule with many buckets takes several.
constexpr size_t BUCKETS_PER_CALL = 500;

/// Units per second of a rate: packets, or bytes (bits are an eighth).
double per_second(const Rate &r)
{
	if (!r.amount || !r.period_ns)
		return 0;
	double amount = r.unit == RateUnit::bits ? double(r.amount) / 8 : double(r.amount);
	return amount * 1e9 / double(r.period_ns);
}

/// A clock's reading in ns: CLOCK_MONOTONIC is the program's clock.
uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts = {};
	clock_gettime(clock, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// A cluster rule as the sync needs it.
struct ClusterRule {
	std::string name;
	uint32_t bucket_id = 0;
	Cidr cidr;
	int per = 32;
	bool bytes = false;
	double rate = 0, local = 0; ///< units per second: the shared rate, and this host's fallback share
	bool one_bucket = false;    ///< --per as long as the prefix: the rule's one bucket
	bool default_fallback = true;
	uint32_t hosts = 1;
};

/// A bucket being synced.
struct Tracked {
	const ClusterRule *rule = nullptr; ///< valid during a round only
	std::string rule_name;
	uint32_t bucket_id = 0;
	int family = 4;
	std::array<uint8_t, 16> addr{};
	std::string key;
	// Readings (sync thread): at each round and half-way between rounds.
	// Demand is measured over the last half interval, so that traffic
	// that stopped is reported as gone a round sooner.
	bool have_reading = false;
	Reading last, half;
	Clock::time_point last_busy{};
	double demand = 0, used = 0;
	bool reported = false; ///< this round's report went out
	// The grant (both threads, under the state's mutex).
	double share = 0, local = 0, rule_rate = 0, cluster_used = 0;
	unsigned hosts = 0;
	Clock::time_point lease_until{};
	Clock::time_point last_apply{};
	double carry = 0; ///< ticks of shift not yet applied (fractions)
	GrantLedger ledger; ///< the grants written for its bucket (apply thread)
};

std::string tracked_id(uint32_t bucket_id, int family, const uint8_t *addr)
{
	std::string id(1 + 4 + 16, '\0');
	id[0] = char(family);
	std::memcpy(id.data() + 1, &bucket_id, 4);
	std::memcpy(id.data() + 5, addr, family == 4 ? 4 : 16);
	return id;
}

} // namespace

/// The mapped source tables of one loaded program.
struct Tables {
	MapSet maps;
	SourceTable4 v4;
	SourceTable6 v6;
	uint64_t seed = 0;
	uint32_t id = 0; ///< the IPv4 table's map id: another one after an upgrade

	explicit Tables(MapSet m)
		: maps(std::move(m)), v4(maps.src4.get()), v6(maps.src6.get()), id(map_info(maps.src4.get()).id)
	{
		uint32_t zero = 0;
		struct sluice_config cfg = {};
		if (bpf_map_lookup_elem(maps.config.get(), &zero, &cfg))
			throw_errno("cannot read the source tables' configuration", errno);
		seed = cfg.hash_seed;
	}
};

struct ClusterSync::State {
	mutable std::mutex mutex; ///< guards what follows, shared by the two threads
	std::unordered_map<std::string, Tracked> buckets;
	std::shared_ptr<Tables> tables;
	SyncFigures figures;

	// The sync thread's own.
	std::unique_ptr<Store> store;
	std::map<uint32_t, ClusterRule> rules; ///< by bucket id
	unsigned hosts = 0;                    ///< last count from the store
	int failures = 0;                      ///< in a row, for the backoff
	Clock::time_point next_attempt{};
	Clock::time_point degraded_since = Clock::now();
	std::string last_logged;
	std::set<std::string> refused; ///< "RULE/HOSTS": host-count edits refused, not tried again
	std::mt19937 jitter{std::random_device{}()};
};

std::chrono::milliseconds SyncOptions::effective_lease() const
{
	if (lease.count() > 0)
		return lease;
	return std::max<milliseconds>(10 * interval, milliseconds(1000));
}

std::string default_node_id()
{
	char host[256] = {};
	if (gethostname(host, sizeof(host) - 1) || !*host)
		return "sluice";
	return host;
}

std::string default_status_path()
{
	return default_run_dir() + "/cluster.json";
}

ClusterSync::ClusterSync(SyncOptions options) : options_(std::move(options)), state_(std::make_unique<State>())
{
	if (options_.node_id.empty())
		options_.node_id = default_node_id();
	if (options_.interval.count() <= 0)
		throw Error("--sync-interval must be at least 1ms");
	// The CLI checks these; a sync made another way is held to them too.
	check_prefix(options_.prefix);
	if (options_.effective_lease() > MAX_LEASE)
		throw Error("--lease: at most 1h, the longest lease the share script grants");
}

ClusterSync::~ClusterSync() { stop(); }

void ClusterSync::start()
{
	if (options_.make_store)
		state_->store = options_.make_store();
	else if (options_.redis_cluster)
		state_->store = make_cluster_store(options_.store, hiredis_connector(options_.store));
	else
		state_->store = make_single_store(options_.store, hiredis_connector(options_.store));
	{
		std::lock_guard hold(state_->mutex);
		state_->figures.store = state_->store->describe();
		state_->figures.node = options_.node_id;
		state_->figures.problem = "not synced yet";
	}
	agent::log_line("cluster: syncing with " + state_->store->describe() + " as node '" + options_.node_id +
			"' every " + format_duration(uint64_t(options_.interval.count()) * 1000000ULL) + ", lease " +
			format_duration(uint64_t(options_.effective_lease().count()) * 1000000ULL));
	stopping_ = false;
	// Named, so that `top -H` (and the benchmark) tell the rounds from the apply loop.
	sync_thread_ = std::thread([this] {
		pthread_setname_np(pthread_self(), "cluster-sync");
		sync_loop();
	});
	apply_thread_ = std::thread([this] {
		pthread_setname_np(pthread_self(), "cluster-apply");
		apply_loop();
	});
}

void ClusterSync::stop() noexcept
{
	stopping_ = true;
	wake_.notify_all();
	if (sync_thread_.joinable())
		sync_thread_.join();
	if (apply_thread_.joinable())
		apply_thread_.join();
}

SyncFigures ClusterSync::figures() const
{
	std::lock_guard hold(state_->mutex);
	return state_->figures;
}

namespace {

/// The cluster rules of the live rule set, by bucket id.
std::map<uint32_t, ClusterRule> cluster_rules(const MapSet &maps)
{
	std::map<uint32_t, ClusterRule> out;
	for (const auto &r : RuleTable(maps).list()) {
		const RuleSpec &s = r.spec;
		if (s.action != Action::limit || s.scope != Scope::cluster)
			continue;
		ClusterRule c;
		c.name = s.name;
		c.bucket_id = sluice::bucket_id(r);
		c.cidr = s.cidr;
		c.per = s.bucket_prefix();
		c.bytes = s.rate.counts_bytes();
		c.rate = per_second(s.rate);
		c.local = per_second(local_rate(r));
		c.one_bucket = c.per <= s.cidr.prefix_len;
		c.default_fallback = s.fallback.amount == 0;
		c.hosts = r.cluster_hosts;
		out.emplace(c.bucket_id, c);
	}
	return out;
}

/// The address of a rule's one bucket: its prefix, masked to --per.
std::array<uint8_t, 16> masked(const Cidr &c, int per)
{
	std::array<uint8_t, 16> a = c.addr;
	for (int bit = per; bit < 128; bit++)
		a[bit / 8] &= uint8_t(~(0x80 >> (bit % 8)));
	return a;
}

/// Writes the figures `sluice status` shows, replacing the file at once.
void write_status_file(const std::string &path, const SyncFigures &f, Clock::duration degraded_for)
{
	nlohmann::json j = {{"pid", getpid()},
			    {"node", f.node},
			    {"store", f.store},
			    {"degraded", f.degraded},
			    {"problem", f.problem},
			    {"degraded_seconds", seconds(degraded_for)},
			    {"hosts", f.hosts},
			    {"synced_buckets", f.synced_buckets},
			    {"granted_buckets", f.granted_buckets}};
	std::string tmp = path + ".tmp";
	{
		std::ofstream out(tmp, std::ios::trunc);
		if (!out)
			return; // the metrics still say it; no run directory is no reason to stop
		out << j.dump() << "\n";
	}
	if (rename(tmp.c_str(), path.c_str()))
		unlink(tmp.c_str());
}

} // namespace

ArrivalShift arrival_shift(double share, double local, double rate, double dt, double carry)
{
	// Nothing a store sent reaches a bucket unchecked: the share was checked
	// when it came, and is clamped here again, so that no value (nan, inf,
	// negative, huge) turns into an unbounded or undefined integer.
	constexpr double TICKS_PER_SECOND = 1e9 * double(1 << SLUICE_TICK_SHIFT);
	if (!std::isfinite(share) || !std::isfinite(local) || !std::isfinite(rate) || !std::isfinite(dt) ||
	    local <= 0 || rate <= 0)
		return {};
	share = std::clamp(share, 0.0, rate);
	dt = std::clamp(dt, 0.0, MAX_APPLY_STEP_SECONDS);
	if (!std::isfinite(carry) || std::fabs(carry) >= 1)
		carry = 0;
	// At the local rate the bucket refills dt of time in dt; at the share,
	// share/local times that: the difference, in ticks. From -dt (no refill
	// at all) to (rate/local - 1) * dt (refill at the whole rate).
	// A local share tiny beside the rate (a ratio beyond any double) moves
	// by at most MAX_SHIFT_TICKS: every term below stays finite.
	double most_ratio = rate / local;
	if (!std::isfinite(most_ratio))
		most_ratio = MAX_SHIFT_TICKS;
	double ratio = std::min(share / local, most_ratio);
	double shift = (ratio - 1.0) * dt * TICKS_PER_SECOND + carry;
	double most = std::max(most_ratio - 1.0, 0.0) * dt * TICKS_PER_SECOND + 1;
	shift = std::clamp(shift, -(dt * TICKS_PER_SECOND + 1), std::min(most, MAX_SHIFT_TICKS));
	double whole = std::trunc(shift);
	return {static_cast<int64_t>(whole), shift - whole};
}

const Reading &measure_from(const Reading &last, const Reading &half, const Reading &now,
			    std::chrono::milliseconds interval)
{
	// The half-way reading if it is newer than the last round's, of the same
	// bucket (counts only grow) and a quarter interval old at least (a round
	// that ran long took it just now: a window of a few milliseconds would
	// read as no demand).
	bool fresh = half.at > last.at && now.at - half.at >= interval / 4 && half.offered <= now.offered &&
		     half.passed <= now.passed && half.exists == now.exists;
	return fresh ? half : last;
}

std::string read_status_line(const std::string &path)
{
	std::ifstream in(path);
	if (!in)
		return "";
	nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
	if (j.is_discarded() || !j.contains("pid"))
		return "";
	pid_t pid = j["pid"].get<pid_t>();
	if (pid <= 0 || (kill(pid, 0) && errno == ESRCH))
		return ""; // its agent is gone
	std::ostringstream line;
	line << "cluster: ";
	if (j.value("degraded", true)) {
		line << "degraded for " << std::llround(j.value("degraded_seconds", 0.0)) << "s ("
		     << j.value("problem", std::string("?")) << "): shares held until their lease ends, then "
		     << "each rule's fallback";
	} else {
		line << "ok, " << j.value("store", std::string("?")) << " as node '" << j.value("node", std::string("?"))
		     << "', " << plural(j.value("hosts", 0), "host", "hosts") << ", "
		     << plural(j.value("synced_buckets", 0), "bucket", "buckets") << " synced";
	}
	return line.str();
}

std::vector<prometheus::MetricFamily> sync_metric_families(const SyncFigures &f)
{
	using prometheus::MetricType;
	agent::FamilyList out;
	out.single("sluice_cluster_degraded",
		   "1 while the store is out of reach or failing: shares held until their lease ends, then fallbacks",
		   MetricType::Gauge, f.degraded ? 1 : 0, {{"store", f.store}, {"node", f.node}});
	out.single("sluice_cluster_degraded_total", "Times the sync went degraded", MetricType::Counter,
		   double(f.degraded_total));
	auto &rounds = out.add("sluice_cluster_rounds_total", "Sync rounds by result", MetricType::Counter);
	agent::FamilyList::sample(rounds, {{"result", "ok"}}, double(f.rounds_ok));
	agent::FamilyList::sample(rounds, {{"result", "failed"}}, double(f.rounds_failed));
	out.single("sluice_cluster_store_commands_total", "Commands sent to the store (script calls)",
		   MetricType::Counter, double(f.commands));
	out.single("sluice_cluster_round_seconds", "Wall time of the last sync round", MetricType::Gauge,
		   f.last_round_seconds);
	out.single("sluice_cluster_round_seconds_total",
		   "Wall time of every sync round, summed: over sluice_cluster_rounds_total, the mean round",
		   MetricType::Counter, f.round_seconds_total);
	out.single("sluice_cluster_hosts", "Live hosts the store knows of", MetricType::Gauge, double(f.hosts));
	out.single("sluice_cluster_synced_buckets", "Buckets being synced", MetricType::Gauge, double(f.synced_buckets));
	auto &rate = out.add("sluice_cluster_rule_rate", "A cluster rule's shared rate, units per second",
			     MetricType::Gauge);
	auto &local = out.add("sluice_cluster_rule_local_rate",
			      "A cluster rule's local share without the store (its fallback), units per second",
			      MetricType::Gauge);
	auto &share = out.add("sluice_cluster_rule_share",
			      "This host's granted shares of the rule's synced buckets, summed, units per second",
			      MetricType::Gauge);
	auto &used = out.add("sluice_cluster_rule_cluster_used",
			     "Every host's use of the rule's buckets synced here, units per second", MetricType::Gauge);
	auto &buckets = out.add("sluice_cluster_rule_synced_buckets", "Buckets of the rule being synced",
				MetricType::Gauge);
	for (const auto &r : f.rules) {
		agent::MetricLabels rule = {{"rule", r.name}};
		agent::FamilyList::sample(rate, rule, r.rate);
		agent::FamilyList::sample(local, rule, r.local_rate);
		agent::FamilyList::sample(share, rule, r.share);
		agent::FamilyList::sample(used, rule, r.cluster_used);
		agent::FamilyList::sample(buckets, rule, double(r.buckets));
	}
	return out.take();
}

void ClusterSync::sync_loop()
{
	State &st = *state_;
	auto wait_until = [this](Clock::time_point t) {
		std::unique_lock wait(wake_mutex_);
		wake_.wait_until(wait, t, [this] { return stopping_.load(); });
	};
	while (!stopping_) {
		Clock::time_point began = Clock::now();
		if (began >= st.next_attempt) {
			try {
				round(began);
				st.failures = 0;
				st.next_attempt = began + options_.interval;
				st.last_logged.clear();
			} catch (const std::exception &e) {
				round_failed(began, e.what());
			}
			publish_figures();
		}
		wait_until(began + options_.interval / 2);
		if (!stopping_ && st.tables)
			read_counters(*st.tables, true);
		wait_until(std::min(st.next_attempt, began + options_.interval));
	}
}

void ClusterSync::round(Clock::time_point began)
{
	State &st = *state_;
	const milliseconds lease = options_.effective_lease();
	std::shared_ptr<Tables> tables = load_rules();
	follow_host_count(tables);
	track_buckets(tables, began);
	if (tables)
		read_counters(*tables, false);

	// One round trip: the registry, then each rule's buckets, a call per
	// BUCKETS_PER_CALL of them.
	std::map<std::string, std::vector<Tracked *>> by_rule;
	for (auto &[id, b] : st.buckets)
		if (b.reported)
			by_rule[b.rule_name].push_back(&b);
	std::vector<Command> batch;
	batch.push_back(hosts_command(options_.prefix, options_.node_id, lease));
	std::vector<std::vector<Tracked *>> calls;
	for (auto &[name, list] : by_rule) {
		for (size_t i = 0; i < list.size(); i += BUCKETS_PER_CALL) {
			std::vector<Tracked *> part(list.begin() + long(i),
						    list.begin() + long(std::min(list.size(), i + BUCKETS_PER_CALL)));
			std::vector<BucketReport> reports;
			reports.reserve(part.size());
			for (Tracked *b : part)
				reports.push_back({b->key, b->demand, b->used});
			batch.push_back(share_command(options_.node_id, list.front()->rule->rate, lease, reports));
			calls.push_back(std::move(part));
		}
	}
	Clock::time_point sent = Clock::now();
	std::vector<Reply> replies = st.store->execute(batch);
	Clock::time_point answered = Clock::now();
	unsigned hosts = parse_hosts_reply(replies.at(0));

	// The grants, their leases counted from when the question left: the
	// store's lease for them ends no sooner.
	std::string call_error;
	std::lock_guard hold(st.mutex);
	for (size_t i = 0; i < calls.size(); i++) {
		std::vector<BucketGrant> grants;
		try {
			grants = parse_share_reply(replies.at(i + 1), calls[i].size(), calls[i].front()->rule->rate);
		} catch (const Error &e) {
			call_error = e.what();
			continue;
		}
		for (size_t j = 0; j < grants.size(); j++) {
			Tracked &b = *calls[i][j];
			if (b.lease_until <= answered)
				b.last_apply = answered; // nothing accrues while ungranted
			b.share = grants[j].share;
			b.local = b.rule->local;
			b.rule_rate = b.rule->rate;
			b.cluster_used = grants[j].cluster_used;
			b.hosts = grants[j].hosts;
			b.lease_until = sent + lease;
		}
	}
	// Buckets idle for a lease, their grant given back: done with.
	for (auto it = st.buckets.begin(); it != st.buckets.end();) {
		const Tracked &b = it->second;
		bool idle = b.reported && b.demand <= 0 && b.share <= 0 && answered - b.last_busy > lease;
		it = idle ? st.buckets.erase(it) : std::next(it);
	}
	if (!call_error.empty())
		throw Error(call_error);
	SyncFigures &f = st.figures;
	if (f.degraded)
		agent::log_line("cluster: synced with " + st.store->describe() + ", " + plural(hosts, "host", "hosts"));
	f.hosts = hosts;
	f.commands += batch.size();
	f.rounds_ok++;
	f.last_round_seconds = seconds(Clock::now() - began);
	f.round_seconds_total += f.last_round_seconds;
	f.degraded = false;
	f.problem.clear();
	st.hosts = hosts;
}

std::shared_ptr<Tables> ClusterSync::load_rules()
{
	State &st = *state_;
	Instance inst(options_.pin_dir);
	std::shared_ptr<Tables> tables = st.tables;
	if (!inst.loaded()) {
		tables.reset();
		st.rules.clear();
	} else {
		auto lock = inst.lock(false);
		MapSet maps = inst.maps();
		if (!tables || map_info(maps.src4.get()).id != tables->id)
			tables = std::make_shared<Tables>(std::move(maps)); // loaded anew, or upgraded
		st.rules = cluster_rules(tables->maps);
	}
	return tables;
}

void ClusterSync::follow_host_count(const std::shared_ptr<Tables> &tables)
{
	// Rules whose default fallback divides the rate by the host count:
	// their local share follows the count the store last gave.
	State &st = *state_;
	if (!tables || !st.hosts)
		return;
	std::vector<std::string> stale;
	for (const auto &[id, r] : st.rules)
		if (r.default_fallback && r.hosts != st.hosts && !st.refused.count(r.name + "/" + std::to_string(st.hosts)))
			stale.push_back(r.name);
	if (stale.empty())
		return;
	Instance inst(options_.pin_dir);
	auto lock = inst.lock(true);
	RuleTable table(tables->maps);
	size_t moved = 0;
	for (const auto &name : stale) {
		RuleEdit e;
		e.cluster_hosts = st.hosts;
		try {
			Transaction(table).edit(name, e).commit();
			moved++;
		} catch (const Error &err) {
			// A share too small to compile, say: the rule keeps the one it
			// has, and the sync goes on. Said once per rule and count.
			st.refused.insert(name + "/" + std::to_string(st.hosts));
			agent::log_line("cluster: rule '" + name + "' keeps its local share for " +
					plural(st.hosts, "host", "hosts") + ": " + err.what());
		}
	}
	st.rules = cluster_rules(tables->maps);
	if (moved)
		agent::log_line("cluster: " + plural(st.hosts, "host", "hosts") + "; the local shares of " +
				plural(moved, "rule", "rules") + " follow");
}

void ClusterSync::track_buckets(const std::shared_ptr<Tables> &tables, Clock::time_point now)
{
	// The buckets that matter: those of cluster rules this host drops
	// packets of (over their local share), every rule's one bucket where
	// it has one, and those synced already.
	State &st = *state_;
	std::vector<std::tuple<uint32_t, int, std::array<uint8_t, 16>>> found;
	if (tables) {
		// Dropping now: a drop noted within the last round (each CPU notes a
		// bucket's drops once per SLUICE_NOTE_EVERY_NS). A throttled entry
		// outlives its drops by up to a second.
		uint64_t mono = clock_ns(CLOCK_MONOTONIC);
		uint64_t recent = uint64_t(std::chrono::nanoseconds(options_.interval).count()) + SLUICE_NOTE_EVERY_NS;
		for_each_entry<struct sluice_throttle_key, struct sluice_throttle>(
			tables->maps.throttled.get(), [&](const struct sluice_throttle_key &k, const struct sluice_throttle &v) {
				if (!st.rules.count(k.bucket_id) || mono - v.last_drop_ns > recent)
					return;
				std::array<uint8_t, 16> a{};
				int family = k.family == SLUICE_TABLE_V6 ? 6 : 4;
				std::memcpy(a.data(), k.addr, family == 4 ? 4 : 16);
				found.emplace_back(k.bucket_id, family, a);
			});
		for (const auto &[id, r] : st.rules)
			if (r.one_bucket)
				found.emplace_back(id, r.cidr.family, masked(r.cidr, r.per));
	}
	std::lock_guard hold(st.mutex);
	st.tables = tables;
	for (auto &[bid, family, a] : found) {
		std::string id = tracked_id(bid, family, a.data());
		if (st.buckets.count(id) || st.buckets.size() >= options_.max_buckets)
			continue;
		const ClusterRule &r = st.rules.at(bid);
		Tracked t;
		t.rule_name = r.name;
		t.bucket_id = bid;
		t.family = family;
		t.addr = a;
		Cidr c;
		c.family = family;
		c.addr = a;
		c.prefix_len = r.per;
		t.key = bucket_key(options_.prefix, r.name, format_cidr(c));
		t.last_busy = now;
		st.buckets.emplace(std::move(id), std::move(t));
	}
	for (auto it = st.buckets.begin(); it != st.buckets.end();) {
		auto r = st.rules.find(it->second.bucket_id);
		if (r == st.rules.end() || r->second.name != it->second.rule_name)
			it = st.buckets.erase(it); // its rule is gone, or restarted its buckets
		else
			(it++)->second.rule = &r->second;
	}
}

void ClusterSync::read_counters(Tables &tables, bool half_way)
{
	State &st = *state_;
	const PendingDrops pending(read_pending(tables.maps.pending.get()), read_owed(tables.maps.owed.get()));
	Clock::time_point now = Clock::now();
	// Only this thread changes the map or the readings; the apply thread
	// reads other fields, so no lock is taken here.
	for (auto &[id, b] : st.buckets) {
		if (!b.rule)
			continue;
		Reading r;
		r.at = now;
		std::optional<struct sluice_source_state> bucket =
			b.family == 4 ? tables.v4.find(b.bucket_id, b.addr.data(), tables.seed, pending)
				      : tables.v6.find(b.bucket_id, b.addr.data(), tables.seed, pending);
		if (bucket) {
			const auto &c = bucket->cnt;
			r.exists = true;
			r.passed = sluice_cnt_value(b.rule->bytes ? c.passed_bytes : c.passed_packets);
			r.offered = r.passed + sluice_cnt_value(b.rule->bytes ? c.dropped_bytes : c.dropped_packets);
		}
		if (half_way) {
			b.half = r;
			continue;
		}
		b.reported = false;
		const Reading &from = measure_from(b.last, b.half, r, options_.interval);
		if (b.have_reading && r.offered >= from.offered && r.passed >= from.passed && r.at > from.at) {
			double dt = seconds(r.at - from.at);
			b.demand = double(r.offered - from.offered) / dt;
			b.used = double(r.passed - from.passed) / dt;
			b.reported = true;
		} else if (!b.have_reading && r.offered > r.passed) {
			// Just found dropping: no interval measured yet, but its demand
			// is above the local share. Reporting twice that now, not a round
			// later, starts its grant a round sooner; the next round measures.
			b.demand = 2 * b.rule->local;
			b.used = b.rule->local;
			b.reported = true;
		}
		// A bucket evicted and made again counts from 0: the next round measures.
		b.have_reading = true;
		b.last = r;
		if (b.demand > 0)
			b.last_busy = now;
	}
}

void ClusterSync::round_failed(Clock::time_point began, const std::string &problem)
{
	// Backoff: a quarter interval, doubling, with jitter, never more than
	// an interval: a store that returns is used again within an interval.
	State &st = *state_;
	st.failures = std::min(st.failures + 1, 8);
	std::uniform_real_distribution<double> spread(0.8, 1.2);
	auto wait = std::chrono::duration_cast<Clock::duration>(options_.interval / 4 * (1 << (st.failures - 1)) *
								spread(st.jitter));
	st.next_attempt = Clock::now() + std::min<Clock::duration>(wait, options_.interval);
	std::lock_guard hold(st.mutex);
	SyncFigures &f = st.figures;
	f.rounds_failed++;
	f.last_round_seconds = seconds(Clock::now() - began);
	f.round_seconds_total += f.last_round_seconds;
	if (!f.degraded || f.degraded_total == 0) {
		f.degraded_total++;
		st.degraded_since = Clock::now();
	}
	f.degraded = true;
	f.problem = problem;
	if (problem != st.last_logged)
		agent::log_line("cluster: degraded: " + problem +
				"; shares held until their lease ends, then each rule's fallback");
	st.last_logged = problem;
}

void ClusterSync::publish_figures()
{
	State &st = *state_;
	std::lock_guard hold(st.mutex);
	SyncFigures &f = st.figures;
	f.synced_buckets = st.buckets.size();
	f.granted_buckets = 0;
	std::map<std::string, SyncFigures::Rule> per_rule;
	for (const auto &[id, r] : st.rules)
		per_rule[r.name] = {r.name, r.rate, r.local, 0, 0, 0, 0};
	Clock::time_point now = Clock::now();
	for (const auto &[id, b] : st.buckets) {
		auto it = per_rule.find(b.rule_name);
		if (it == per_rule.end())
			continue;
		it->second.buckets++;
		if (b.lease_until > now) {
			f.granted_buckets++;
			it->second.granted++;
			it->second.share += b.share;
			it->second.cluster_used += b.cluster_used;
		}
	}
	f.rules.clear();
	for (auto &[name, r] : per_rule)
		f.rules.push_back(r);
	if (!options_.status_path.empty())
		write_status_file(options_.status_path, f, f.degraded ? now - st.degraded_since : Clock::duration{});
}

void ClusterSync::apply_loop()
{
	State &st = *state_;
	while (!stopping_) {
		{
			std::unique_lock wait(wake_mutex_);
			wake_.wait_for(wait, options_.apply_every, [this] { return stopping_.load(); });
		}
		std::lock_guard hold(st.mutex);
		if (!st.tables)
			continue;
		Tables &t = *st.tables;
		Clock::time_point now = Clock::now();
		std::vector<struct sluice_grant_key> keys;
		std::vector<struct sluice_grant> grants;
		for (auto &[id, b] : st.buckets) {
			if (b.lease_until <= now || b.local <= 0) {
				b.last_apply = now; // the lease ran out: the local share holds
				b.carry = 0;
				continue;
			}
			double dt = seconds(now - b.last_apply);
			b.last_apply = now;
			if (b.share == b.local)
				continue; // granted its local share: nothing to move
			ArrivalShift shift = arrival_shift(b.share, b.local, b.rule_rate, dt, b.carry);
			b.carry = shift.carry;
			if (shift.ticks == 0)
				continue;
			// A grant in the map, which the program applies to its
			// bucket at its next charge: the bucket's words have one
			// writer. No bucket: nothing to move, as before it exists.
			auto place = b.family == 4 ? t.v4.grant_place(b.bucket_id, b.addr.data(), t.seed)
						   : t.v6.grant_place(b.bucket_id, b.addr.data(), t.seed);
			if (!place)
				continue;
			keys.push_back(place->key);
			grants.push_back(b.ledger.grant(place->name, place->taken, shift.ticks));
		}
		try {
			write_grants(t.maps.grants.get(), keys, grants);
		} catch (const std::exception &e) {
			agent::log_line(std::string("cluster: ") + e.what());
		}
	}
}

} // namespace sluice::cluster
