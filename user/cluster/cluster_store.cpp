// SPDX-License-Identifier: GPL-2.0-only
// The Redis Cluster router: hiredis 0.14 speaks to one server at a time, so
// the slot map, the grouping per master and the redirections are ours.
#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "store.h"
#include "store_detail.h"

namespace sluice::cluster {

namespace {

/// MOVED and ASK replies followed for one command before its error reply is
/// returned as it is: a slot moves once, twice if it moves while we follow
/// it; more is a loop (two nodes that disagree) that waiting will not end.
constexpr int MAX_REDIRECTIONS = 5;
/// TRYAGAIN (a multi-key command during a migration) and CLUSTERDOWN (a
/// failover under way) are retried this many times, after BUSY_PAUSE, then
/// 2 * BUSY_PAUSE, and so on; the sync loop's backoff covers longer outages.
constexpr int MAX_BUSY_RETRIES = 4;
constexpr std::chrono::milliseconds BUSY_PAUSE{5};

/// A host name or address as a node may announce it: up to 255 bytes, no
/// blanks, control characters, commas or brackets (what parse_endpoint
/// refuses in a seed).
bool plausible_host(const std::string &host)
{
	if (host.size() > 255)
		return false;
	for (char c : host)
		if (c == ' ' || c == ',' || c == '[' || c == ']' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
			return false;
	return true;
}

/// Where a MOVED or ASK reply sends a command.
struct Redirect {
	uint16_t slot;
	Endpoint to;
};

/// "MOVED 3999 127.0.0.1:6381", "ASK 3999 ::1:6381" or "MOVED 3999 :6381"
/// (no host: the one that answered, per the cluster specification). Nothing
/// if the text is not that: the reply then reaches the caller unchanged.
std::optional<Redirect> parse_redirect(const std::string &text, const Endpoint &from)
{
	size_t first = text.find(' ');
	size_t second = first == std::string::npos ? first : text.find(' ', first + 1);
	if (second == std::string::npos)
		return std::nullopt;
	std::string_view slot_text = std::string_view(text).substr(first + 1, second - first - 1);
	std::string_view address = std::string_view(text).substr(second + 1);
	size_t colon = address.rfind(':');
	if (colon == std::string_view::npos)
		return std::nullopt;
	unsigned slot = 0, port = 0;
	std::string_view port_text = address.substr(colon + 1);
	auto s = std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot);
	auto p = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
	if (s.ec != std::errc() || s.ptr != slot_text.data() + slot_text.size() || slot >= CLUSTER_SLOTS ||
	    p.ec != std::errc() || p.ptr != port_text.data() + port_text.size() || port == 0 || port > 65535)
		return std::nullopt;
	std::string host(address.substr(0, colon));
	if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
		host = host.substr(1, host.size() - 2);
	if (!host.empty() && !plausible_host(host))
		return std::nullopt;
	if (host.empty())
		host = from.host;
	return Redirect{static_cast<uint16_t>(slot), Endpoint{host, static_cast<uint16_t>(port)}};
}

/// The slot map: which master serves each slot (-1: none known).
struct SlotMap {
	std::vector<Endpoint> masters; ///< in the order CLUSTER SLOTS first named them
	std::array<int, CLUSTER_SLOTS> owner;

	SlotMap() { owner.fill(-1); }

	int index_of(const Endpoint &ep)
	{
		for (size_t i = 0; i < masters.size(); i++)
			if (masters[i] == ep)
				return static_cast<int>(i);
		masters.push_back(ep);
		return static_cast<int>(masters.size() - 1);
	}
};

/// The slot map of a CLUSTER SLOTS reply from `from`. Ranges of a node whose
/// address the cluster does not know ("?") stay unmapped; a command for them
/// goes to any master, which redirects it or answers CLUSTERDOWN.
SlotMap parse_cluster_slots(const Reply &reply, const Endpoint &from)
{
	std::string where = "redis " + from.str() + ": ";
	if (reply.is_error())
		throw StoreUnavailable(where + "CLUSTER SLOTS: " + one_line(reply.str));
	if (reply.type != Reply::Type::array)
		throw StoreUnavailable(where + "CLUSTER SLOTS answered something else than a list");
	SlotMap map;
	for (const Reply &range : reply.elements) {
		if (range.type != Reply::Type::array || range.elements.size() < 3 ||
		    range.elements[0].type != Reply::Type::integer || range.elements[1].type != Reply::Type::integer ||
		    range.elements[2].type != Reply::Type::array || range.elements[2].elements.size() < 2 ||
		    range.elements[2].elements[1].type != Reply::Type::integer)
			throw StoreUnavailable(where + "CLUSTER SLOTS: a slot range of an unknown shape");
		long long first = range.elements[0].integer, last = range.elements[1].integer;
		const Reply &master = range.elements[2];
		long long port = master.elements[1].integer;
		if (first < 0 || last < first || last >= CLUSTER_SLOTS || port <= 0 || port > 65535)
			throw StoreUnavailable(where + "CLUSTER SLOTS: a slot range out of bounds");
		// NULL or "" for the host: the cluster does not know it, and the
		// node is reached at the address CLUSTER SLOTS was asked on.
		std::string host = master.elements[0].str;
		if (host == "?")
			continue;
		if (!plausible_host(host))
			throw StoreUnavailable(where + "CLUSTER SLOTS: a node's address '" + one_line(host, 60) +
					       "' is no host name");
		if (host.empty())
			host = from.host;
		int index = map.index_of(Endpoint{host, static_cast<uint16_t>(port)});
		for (long long slot = first; slot <= last; slot++)
			map.owner[slot] = index;
	}
	if (map.masters.empty())
		throw StoreUnavailable(where + "serves no hash slots (not a cluster yet, or none assigned)");
	return map;
}

/// The router. Not thread-safe: one caller (the sync loop) at a time.
class ClusterStore : public Store {
public:
	ClusterStore(const StoreOptions &options, Connector connector)
		: seeds_(options.seeds), options_(options), connector_(std::move(connector))
	{
		if (seeds_.empty())
			throw Error("no redis cluster node to start from");
	}

	std::vector<Reply> execute(const std::vector<Command> &batch) override;
	std::string describe() const override;

private:
	/// One command of the batch on its way.
	struct Job {
		size_t index; ///< in the batch, and in the replies
		Endpoint target;
		bool asking = false; ///< ASK: send ASKING before it
		bool eval = false;   ///< NOSCRIPT: send it as EVAL
		int redirections = 0;
		int busy_retries = 0;
	};

	/// The master of the command's slot; for a keyless command (or a slot
	/// no master serves), the first master not in `down`.
	Endpoint target_for(const Command &command, const std::set<std::string> &down) const;
	std::vector<Reply> send(const Endpoint &endpoint, const std::vector<std::vector<std::string>> &commands);
	void refresh_map(const std::set<std::string> &down);
	/// Puts the job in `next` if the reply asks for another try; else keeps the reply.
	void settle(const Command &command, Job job, Reply reply, std::vector<Job> &next, bool &pause,
		    std::vector<Reply> &replies);

	std::vector<Endpoint> seeds_;
	StoreOptions options_; ///< for may_connect: the seeds and whether a password is set
	Connector connector_;
	std::optional<SlotMap> map_;
	bool refresh_due_ = false; ///< a MOVED was seen: reload the whole map before the next batch
	std::map<std::string, std::unique_ptr<Connection>> connections_; ///< by Endpoint::str()
};

Endpoint ClusterStore::target_for(const Command &command, const std::set<std::string> &down) const
{
	if (!command.route_key.empty()) {
		int owner = map_->owner[key_slot(command.route_key)];
		if (owner >= 0)
			return map_->masters[owner];
	}
	// Any master will do (an unserved slot's answers MOVED or CLUSTERDOWN):
	// the first that answers, so that the connections stay few.
	for (const auto &m : map_->masters)
		if (!down.count(m.str()))
			return m;
	return map_->masters.front();
}

std::vector<Reply> ClusterStore::send(const Endpoint &endpoint, const std::vector<std::vector<std::string>> &commands)
{
	std::string key = endpoint.str();
	try {
		auto &connection = connections_[key];
		// A slot map or a redirection naming an address the operator did
		// not: with a password, nothing is sent there.
		if (!connection && !may_connect(options_, endpoint))
			throw StoreUnavailable(unnamed_node_reason(endpoint));
		if (!connection)
			connection = connector_(endpoint);
		std::vector<Reply> replies = connection->pipeline(commands);
		if (replies.size() != commands.size())
			throw StoreUnavailable("redis " + key + ": " + std::to_string(replies.size()) + " replies to " +
					       std::to_string(commands.size()) + " commands");
		return replies;
	} catch (const StoreUnavailable &) {
		connections_.erase(key);
		throw;
	}
}

void ClusterStore::refresh_map(const std::set<std::string> &down)
{
	// The seeds first (the operator named them), then the masters the last
	// map knew, in case every seed has gone since.
	std::vector<Endpoint> candidates = seeds_;
	if (map_)
		for (const auto &m : map_->masters)
			if (std::find(candidates.begin(), candidates.end(), m) == candidates.end())
				candidates.push_back(m);
	std::string reasons;
	for (const auto &candidate : candidates) {
		if (down.count(candidate.str()))
			continue;
		try {
			SlotMap fresh = parse_cluster_slots(send(candidate, {{"CLUSTER", "SLOTS"}}).at(0), candidate);
			map_ = std::move(fresh);
			refresh_due_ = false;
			// Connections to nodes that are no longer masters are closed.
			for (auto it = connections_.begin(); it != connections_.end();) {
				bool master = std::any_of(map_->masters.begin(), map_->masters.end(),
							  [&](const Endpoint &m) { return m.str() == it->first; });
				it = master ? std::next(it) : connections_.erase(it);
			}
			return;
		} catch (const StoreUnavailable &e) {
			reasons += reasons.empty() ? "" : "; ";
			reasons += e.what();
		}
	}
	if (reasons.empty())
		reasons = "every known node failed during this batch";
	throw StoreUnavailable("redis-cluster: no node gave the slot map (" + reasons + ")");
}

void ClusterStore::settle(const Command &command, Job job, Reply reply, std::vector<Job> &next, bool &pause,
			  std::vector<Reply> &replies)
{
	if (reply.is_error()) {
		bool moved = detail::error_is(reply, "MOVED");
		if ((moved || detail::error_is(reply, "ASK")) && job.redirections < MAX_REDIRECTIONS) {
			if (auto redirect = parse_redirect(reply.str, job.target)) {
				job.redirections++;
				job.target = redirect->to;
				// MOVED: the slot lives there now. ASK: only this
				// command goes there, while the slot migrates.
				job.asking = !moved;
				if (moved) {
					map_->owner[redirect->slot] = map_->index_of(redirect->to);
					refresh_due_ = true;
				}
				next.push_back(std::move(job));
				return;
			}
		}
		if ((detail::error_is(reply, "TRYAGAIN") || detail::error_is(reply, "CLUSTERDOWN")) &&
		    job.busy_retries < MAX_BUSY_RETRIES) {
			job.busy_retries++;
			pause = true;
			next.push_back(std::move(job));
			return;
		}
		if (!job.eval && detail::wants_eval_fallback(command, reply)) {
			job.eval = true;
			next.push_back(std::move(job));
			return;
		}
	}
	replies[job.index] = std::move(reply);
}

std::vector<Reply> ClusterStore::execute(const std::vector<Command> &batch)
{
	if (batch.empty())
		return {};
	std::set<std::string> down; // nodes that failed during this batch
	if (!map_ || refresh_due_)
		refresh_map(down);

	std::vector<Job> jobs;
	jobs.reserve(batch.size());
	for (size_t i = 0; i < batch.size(); i++)
		jobs.push_back(Job{i, target_for(batch[i], down)});
	std::vector<Reply> replies(batch.size());
	bool rerouted = false;
	int busy_round = 0;

	// Each round sends every pending command, one pipeline per node, and
	// collects those to send again (redirected, busy, or to run as EVAL).
	while (!jobs.empty()) {
		std::vector<std::string> order;
		std::map<std::string, std::vector<Job>> groups;
		for (auto &job : jobs) {
			std::string key = job.target.str();
			if (!groups.count(key))
				order.push_back(key);
			groups[key].push_back(std::move(job));
		}

		std::vector<Job> next, stranded;
		std::optional<StoreUnavailable> lost;
		bool pause = false;
		for (const auto &key : order) {
			std::vector<Job> &group = groups[key];
			std::vector<std::vector<std::string>> commands;
			for (const auto &job : group) {
				if (job.asking)
					commands.push_back({"ASKING"});
				const Command &c = batch[job.index];
				commands.push_back(job.eval ? detail::as_eval(c) : c.args);
			}
			std::vector<Reply> got;
			try {
				got = send(group.front().target, commands);
			} catch (const StoreUnavailable &e) {
				down.insert(key);
				lost = e;
				for (auto &job : group)
					stranded.push_back(std::move(job));
				continue;
			}
			size_t k = 0;
			for (auto &job : group) {
				if (job.asking)
					k++; // ASKING's +OK
				settle(batch[job.index], std::move(job), std::move(got[k++]), next, pause, replies);
			}
		}

		// A node that cannot be reached may have failed over (the map from
		// another node names its successor) or restarted (a new connection
		// reaches it): reload the map and send its commands again, once per
		// batch. A command that was sent before the connection broke may run
		// twice.
		if (!stranded.empty()) {
			if (rerouted)
				throw *lost;
			rerouted = true;
			refresh_map(down);
			for (auto &job : stranded) {
				job.target = target_for(batch[job.index], down);
				job.asking = false;
				next.push_back(std::move(job));
			}
		}
		if (pause)
			std::this_thread::sleep_for(BUSY_PAUSE * std::min(++busy_round, MAX_BUSY_RETRIES));
		jobs = std::move(next);
	}
	return replies;
}

std::string ClusterStore::describe() const
{
	auto list = [](const std::vector<Endpoint> &endpoints) {
		std::string out;
		for (const auto &ep : endpoints)
			out += (out.empty() ? "" : ", ") + ep.str();
		return out;
	};
	if (!map_)
		return "redis-cluster (not reached yet; seeds " + list(seeds_) + ")";
	// Masters a MOVED added and whose slots all moved on are not counted.
	std::vector<bool> serving(map_->masters.size());
	for (int owner : map_->owner)
		if (owner >= 0)
			serving[owner] = true;
	std::vector<Endpoint> masters;
	for (size_t i = 0; i < serving.size(); i++)
		if (serving[i])
			masters.push_back(map_->masters[i]);
	return "redis-cluster of " + std::to_string(masters.size()) + (masters.size() == 1 ? " master (" : " masters (") +
	       list(masters) + ")";
}

} // namespace

std::unique_ptr<Store> make_cluster_store(const StoreOptions &options, Connector connector)
{
	return std::make_unique<ClusterStore>(options, std::move(connector));
}

} // namespace sluice::cluster
