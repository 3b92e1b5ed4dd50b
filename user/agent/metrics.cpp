// SPDX-License-Identifier: GPL-2.0-only
#include "metrics.h"

#include <arpa/inet.h>

#include <CivetServer.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <chrono>
#include <charconv>
#include <deque>
#include <mutex>

#include "error.h"

namespace sluice::agent {

std::string ListenAddress::text() const
{
	bool v6 = host.find(':') != std::string::npos;
	return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool ListenAddress::loopback() const
{
	in_addr a4;
	if (inet_pton(AF_INET, host.c_str(), &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	in6_addr a6;
	if (inet_pton(AF_INET6, host.c_str(), &a6) != 1)
		return false;
	if (IN6_IS_ADDR_LOOPBACK(&a6))
		return true;
	return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

ListenAddress parse_listen_address(std::string_view text)
{
	auto bad = [&text](const std::string &why) {
		return Error("--metrics: " + why + " in '" + std::string(text) +
			     "' (expected ADDR:PORT with a numeric address, e.g. 127.0.0.1:9617 or [::1]:9617)");
	};
	size_t colon = text.rfind(':');
	if (colon == std::string_view::npos)
		throw bad("no port");
	std::string_view host = text.substr(0, colon), port_text = text.substr(colon + 1);
	ListenAddress a;
	if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
		a.host = std::string(host.substr(1, host.size() - 2));
		in6_addr addr6;
		if (inet_pton(AF_INET6, a.host.c_str(), &addr6) != 1)
			throw bad("not an IPv6 address");
	} else {
		a.host = std::string(host);
		in_addr addr4;
		if (inet_pton(AF_INET, a.host.c_str(), &addr4) != 1)
			throw bad(host.find(':') != std::string_view::npos ? "an IPv6 address needs brackets"
									   : "not a numeric IPv4 address");
	}
	unsigned port = 0;
	auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
	if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535)
		throw bad("not a port from 0 to 65535");
	a.port = static_cast<uint16_t>(port);
	return a;
}

Reading read_state(const Instance &inst, size_t top_sources)
{
	Reading r;
	auto t0 = std::chrono::steady_clock::now();
	try {
		MapSet maps;
		{
			// Held while the maps are opened: a mutating command is not
			// half-way through replacing them. Reading needs no lock (a rule
			// change is one atomic switch, and the open descriptors keep the
			// maps of a program being replaced).
			auto lock = inst.lock(false);
			r.loaded = inst.loaded();
			if (!r.loaded)
				throw Error("sluice is not loaded (no program is pinned in " + inst.pin_dir() + ")");
			maps = inst.maps();
			r.status = inst.status();
		}
		// The library's top 0 means every source: ask for one and drop it.
		r.stats = collect_stats(maps, {std::max<size_t>(top_sources, 1), ""});
		if (top_sources == 0)
			r.stats.sources.clear();
		r.readable = true;
	} catch (const std::exception &e) {
		r.error = e.what();
	}
	r.collect_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	return r;
}

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

std::string family_name(int family) { return family == 6 ? "ipv6" : "ipv4"; }

void global_counters(FamilyList &out, const Stats &s)
{
	// Every packet lands in exactly one verdict counter: these sum to all
	// packets seen. The counter name is "<verdict>_<reason>".
	auto &packets = out.add("sluice_packets_total", "Packets by verdict and reason", MetricType::Counter);
	auto &bytes = out.add("sluice_bytes_total", "Bytes (L3) by verdict and reason", MetricType::Counter);
	for (int i = 0; i < SLUICE_CNT_VERDICT_END; i++) {
		std::string name = counter_name(i);
		size_t cut = name.find('_');
		Labels labels = {{"verdict", name.substr(0, cut)}, {"reason", name.substr(cut + 1)}};
		FamilyList::sample(packets, labels, static_cast<double>(s.global[i].packets));
		FamilyList::sample(bytes, labels, static_cast<double>(s.global[i].bytes));
	}
	// The informational counters overlap the verdicts: each its own name.
	auto info = [&](int index, const char *name, const char *help, Labels labels = {}) {
		out.single(name, help, MetricType::Counter, static_cast<double>(s.global[index].packets), std::move(labels));
	};
	info(SLUICE_CNT_INFO_FRAGMENT, "sluice_fragment_packets_total", "Non-first IP fragments (judged with their first)");
	info(SLUICE_CNT_INFO_L4_UNKNOWN, "sluice_l4_unknown_packets_total",
	     "Packets whose ports or protocol could not be read (matched conservatively)");
	info(SLUICE_CNT_INFO_ENCAPSULATED, "sluice_encapsulated_packets_total",
	     "Tunnelled packets (IP in IP, GRE, ESP, PPPoE, MPLS), judged by the outer header");
	info(SLUICE_CNT_INFO_NEW_BUCKET, "sluice_buckets_created_total", "Buckets created, of every table");
	info(SLUICE_CNT_INFO_EVENTS_LOST, "sluice_events_lost_total",
	     "Throttle events lost: the ring buffer or the throttled-source table was full");
	info(SLUICE_CNT_INFO_BANS, "sluice_bans_total", "Temporary bans begun (rules with --ban)");
	info(SLUICE_CNT_INFO_BAN_TABLE_FULL, "sluice_ban_table_full_total",
	     "Bans refused because the ban table was full (no ban is ever pushed out)");
	out.single("sluice_bans", "Sources under a temporary ban now", MetricType::Gauge, static_cast<double>(s.bans));
	// Bans lifted, by why: the program counts those it finds run out, the
	// controller (through its event writer) those it lifts.
	auto &unbans = out.add("sluice_unbans_total",
			       "Temporary bans lifted, by reason: expired (ran out), deleted (sluice ban del), rule (their "
			       "rule no longer bans)",
			       MetricType::Counter);
	for (auto [index, reason] : {std::pair{SLUICE_CNT_INFO_UNBANS_EXPIRED, "expired"},
				     std::pair{SLUICE_CNT_INFO_UNBANS_DELETED, "deleted"},
				     std::pair{SLUICE_CNT_INFO_UNBANS_RULE, "rule"}})
		FamilyList::sample(unbans, {{"reason", reason}}, static_cast<double>(s.global[index].packets));
	// The data plane counts every table's evictions, and IPv6's apart.
	auto &evicted = out.add("sluice_evictions_total", "Buckets evicted to make room for a new source",
				MetricType::Counter);
	auto &active = out.add("sluice_active_evictions_total",
			       "Evicted buckets whose source was seen in the last second or was in debt (a table "
			       "too small)",
			       MetricType::Counter);
	auto count = [&s](int i) { return static_cast<double>(s.global[i].packets); };
	FamilyList::sample(evicted, {{"family", "ipv4"}},
			   count(SLUICE_CNT_INFO_EVICTED) - count(SLUICE_CNT_INFO_EVICTED_V6));
	FamilyList::sample(evicted, {{"family", "ipv6"}}, count(SLUICE_CNT_INFO_EVICTED_V6));
	FamilyList::sample(active, {{"family", "ipv4"}},
			   count(SLUICE_CNT_INFO_EVICTED_ACTIVE) - count(SLUICE_CNT_INFO_EVICTED_ACTIVE_V6));
	FamilyList::sample(active, {{"family", "ipv6"}}, count(SLUICE_CNT_INFO_EVICTED_ACTIVE_V6));
}

void rule_counters(FamilyList &out, const Stats &s)
{
	auto &rules = out.add("sluice_rules", "Rules installed", MetricType::Gauge);
	FamilyList::sample(rules, {}, static_cast<double>(s.rules.size()));
	out.single("sluice_policy_info", "A digest of the installed rules: equal exactly when the rule sets are",
		   MetricType::Gauge, 1, {{"digest", hex64(rule_set_digest(s.rules))}});

	auto &passed_p = out.add("sluice_rule_passed_packets_total", "Packets a rule passed (a shadow rule's would-drops included)", MetricType::Counter);
	auto &passed_b = out.add("sluice_rule_passed_bytes_total", "Bytes a rule passed (a shadow rule's would-drops included)", MetricType::Counter);
	auto &dropped_p = out.add("sluice_rule_dropped_packets_total", "Packets a rule dropped", MetricType::Counter);
	auto &dropped_b = out.add("sluice_rule_dropped_bytes_total", "Bytes a rule dropped", MetricType::Counter);
	auto &would_p = out.add("sluice_rule_would_drop_packets_total",
				"Packets a shadow rule would have dropped (they were passed)", MetricType::Counter);
	auto &would_b = out.add("sluice_rule_would_drop_bytes_total",
				"Bytes a shadow rule would have dropped (they were passed)", MetricType::Counter);
	auto &contention = out.add("sluice_rule_contention_passed_packets_total",
				   "Packets passed uncharged because other CPUs kept winning their bucket",
				   MetricType::Counter);
	auto &failopen = out.add("sluice_rule_failopen_packets_total",
				 "Packets passed because no bucket could be created for their source",
				 MetricType::Counter);
	auto &sources = out.add("sluice_rule_sources", "Buckets tracked for a rule", MetricType::Gauge);
	for (const auto &rs : s.rules) {
		Labels labels = {{"rule", rs.rule.spec.name}, {"rule_id", std::to_string(rs.rule.id)}};
		const auto &c = rs.counters;
		bool shadow = rs.rule.spec.shadow;
		// As `sluice stats --json` reports them: a shadow rule drops nothing.
		FamilyList::sample(passed_p, labels, static_cast<double>(c.passed_packets + (shadow ? c.dropped_packets : 0)));
		FamilyList::sample(passed_b, labels, static_cast<double>(c.passed_bytes + (shadow ? c.dropped_bytes : 0)));
		FamilyList::sample(dropped_p, labels, static_cast<double>(shadow ? 0 : c.dropped_packets));
		FamilyList::sample(dropped_b, labels, static_cast<double>(shadow ? 0 : c.dropped_bytes));
		if (shadow) {
			FamilyList::sample(would_p, labels, static_cast<double>(c.dropped_packets));
			FamilyList::sample(would_b, labels, static_cast<double>(c.dropped_bytes));
		}
		FamilyList::sample(contention, labels, static_cast<double>(c.passed_contention));
		FamilyList::sample(failopen, labels, static_cast<double>(c.failopen_table));
		FamilyList::sample(sources, labels, static_cast<double>(rs.sources));
	}
}

void source_tables(FamilyList &out, const Stats &s)
{
	auto &tracked = out.add("sluice_sources_tracked", "Buckets in a table", MetricType::Gauge);
	auto &capacity = out.add("sluice_source_table_capacity", "Buckets a table can hold", MetricType::Gauge);
	auto &fill = out.add("sluice_source_table_fill_ratio", "Buckets in a table over what it can hold",
			     MetricType::Gauge);
	for (const auto &t : s.tables) {
		Labels labels = {{"family", family_name(t.family)}, {"table", t.sliding_log ? "sliding_log" : "bucket"}};
		FamilyList::sample(tracked, labels, static_cast<double>(t.tracked));
		FamilyList::sample(capacity, labels, static_cast<double>(t.capacity));
		FamilyList::sample(fill, labels, t.capacity ? static_cast<double>(t.tracked) / t.capacity : 0);
	}
}

void top_sources(FamilyList &out, const Stats &s)
{
	// Only sources that dropped (or would have): a quiet source is no series.
	auto &dropped_p = out.add("sluice_top_source_dropped_packets_total",
				  "Packets dropped, for the sources with most drops", MetricType::Counter);
	auto &dropped_b = out.add("sluice_top_source_dropped_bytes_total",
				  "Bytes dropped, for the sources with most drops", MetricType::Counter);
	auto &would_p = out.add("sluice_top_source_would_drop_packets_total",
				"Packets a shadow rule would have dropped, for the sources with most drops",
				MetricType::Counter);
	for (const auto &src : s.sources) {
		if (!src.dropped_packets)
			continue;
		Labels labels = {{"rule", src.rule}, {"source", src.source}};
		if (src.shadow) {
			FamilyList::sample(would_p, labels, static_cast<double>(src.dropped_packets));
		} else {
			FamilyList::sample(dropped_p, labels, static_cast<double>(src.dropped_packets));
			FamilyList::sample(dropped_b, labels, static_cast<double>(src.dropped_bytes));
		}
	}
}

void program(FamilyList &out, const Status &st)
{
	out.single("sluice_program_info", "The loaded XDP program: its id, ABI and map layout", MetricType::Gauge, 1,
		   {{"prog_id", std::to_string(st.prog_id)},
		    {"abi", std::to_string(st.abi_version)},
		    {"layout", hex64(st.layout_hash)}});
	out.single("sluice_program_loaded_timestamp_seconds", "When the program was loaded (Unix time)",
		   MetricType::Gauge, static_cast<double>(st.loaded_ns) / 1e9);
	out.single("sluice_rules_capacity", "Rules the rule table can hold", MetricType::Gauge, st.max_rules);
	out.single("sluice_v6_prefixes_capacity", "IPv6 prefixes of rules and sets a rule set can hold", MetricType::Gauge,
		   st.max_v6_prefixes);
	out.single("sluice_map_memory_bytes", "Memory of the program's maps, as the kernel accounts it",
		   MetricType::Gauge, static_cast<double>(st.map_memory_bytes));
	auto &links = out.add("sluice_interface_info", "An interface the program is attached to, and how",
			      MetricType::Gauge);
	for (const auto &l : st.links) {
		// A link in another network namespace has no name here.
		std::string iface = l.ifindex == 0 ? "" : l.this_netns ? l.ifname : "";
		FamilyList::sample(links,
				   {{"interface", iface},
				    {"ifindex", std::to_string(l.ifindex)},
				    {"netns", std::to_string(l.netns)},
				    {"mode", std::string(mode_name(l.mode))},
				    {"prog_id", std::to_string(l.prog_id)}},
				   1);
	}
}

} // namespace

std::vector<MetricFamily> metric_families(const Reading &r)
{
	FamilyList out;
	out.single("sluice_up", "1 if the agent could read the pinned state, else 0", MetricType::Gauge,
		   r.readable ? 1 : 0);
	out.single("sluice_program_loaded", "1 if a program is pinned (readable by this agent or not), else 0",
		   MetricType::Gauge, r.loaded ? 1 : 0);
	out.single("sluice_agent_collect_duration_seconds", "Wall time the agent took to read the state for this scrape",
		   MetricType::Gauge, r.collect_seconds);
	if (!r.readable)
		return out.take();
	program(out, r.status);
	global_counters(out, r.stats);
	rule_counters(out, r.stats);
	source_tables(out, r.stats);
	top_sources(out, r.stats);
	return out.take();
}

std::string render_text(const std::vector<MetricFamily> &families)
{
	return prometheus::TextSerializer().Serialize(families);
}

/// Reads the state at scrape time, one reading at a time: a scrape that
/// arrives while another is reading gets the last figures, at once.
class MetricsExporter::Collector {
public:
	Collector(std::string pin_dir, size_t top, std::function<std::vector<MetricFamily>()> extra)
		: inst_(std::move(pin_dir)), top_(top), extra_(std::move(extra))
	{
	}

	/// The exposition text of a fresh reading, or of the last one while a
	/// reading runs (the first scrape waits for the first reading).
	std::shared_ptr<const std::string> scrape()
	{
		std::unique_lock reading(reading_, std::try_to_lock);
		if (!reading.owns_lock()) {
			{
				std::lock_guard hold(last_mutex_);
				if (last_)
					return last_;
			}
			reading.lock();
		}
		Reading r = read_state(inst_, top_);
		if (r.error != last_error_) {
			log_line(r.error.empty() ? "reading the pinned state again" : r.error + "; retrying at each scrape");
			last_error_ = r.error;
		}
		std::vector<MetricFamily> families = metric_families(r);
		if (extra_)
			for (auto &f : extra_())
				families.push_back(std::move(f));
		auto text = std::make_shared<const std::string>(render_text(families));
		std::lock_guard hold(last_mutex_);
		last_ = text;
		return text;
	}

private:
	Instance inst_;
	size_t top_;
	std::function<std::vector<MetricFamily>()> extra_;
	std::mutex reading_;     ///< held by the scrape that is reading
	std::string last_error_; ///< guarded by reading_
	std::mutex last_mutex_;
	std::shared_ptr<const std::string> last_;
};

/// GET /metrics. civetweb runs it on its worker threads, several at once.
class MetricsExporter::Handler : public CivetHandler {
public:
	explicit Handler(Collector &collector) : collector_(collector) {}

	bool handleGet(CivetServer *, struct mg_connection *conn) override
	{
		std::shared_ptr<const std::string> text = collector_.scrape();
		mg_printf(conn,
			  "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			  text->size());
		mg_write(conn, text->data(), text->size());
		return true;
	}

private:
	Collector &collector_;
};

MetricsExporter::MetricsExporter(MetricsOptions options) : options_(std::move(options)) {}

MetricsExporter::~MetricsExporter() { stop(); }

void MetricsExporter::start()
{
	collector_ = std::make_unique<Collector>(options_.pin_dir, options_.top_sources, options_.extra);
	handler_ = std::make_unique<Handler>(*collector_);
	try {
		server_ = std::make_unique<CivetServer>(std::vector<std::string>{
			"listening_ports", options_.listen.text(), "num_threads", "4"});
	} catch (const std::exception &) {
		throw Error("cannot serve metrics on " + options_.listen.text() + " (is the port in use?)");
	}
	server_->addHandler("/metrics", handler_.get());
	std::vector<int> ports = server_->getListeningPorts();
	port_ = ports.empty() ? options_.listen.port : static_cast<uint16_t>(ports.front());
	ListenAddress bound = options_.listen;
	bound.port = port_;
	log_line("serving metrics on http://" + bound.text() + "/metrics (state in " + options_.pin_dir + ")");
	// The series name the sources with most drops: anyone who can connect
	// learns which addresses are throttled. Loopback (the default) keeps
	// that on this host; anything else is said once.
	if (!bound.loopback())
		log_line("warning: /metrics on " + bound.text() +
			 " can be read from other hosts, with no authentication; it names the " +
			 std::to_string(options_.top_sources) +
			 " sources with most drops (--top-sources 0 names none): bind 127.0.0.1 or firewall the port");
}

void MetricsExporter::stop() noexcept
{
	server_.reset(); // waits for the handlers that run
	handler_.reset();
	collector_.reset();
}

} // namespace sluice::agent
