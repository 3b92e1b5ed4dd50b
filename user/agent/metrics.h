// SPDX-License-Identifier: GPL-2.0-only
// The agent's Prometheus exporter: at each scrape it reads the pinned state
// through the library (the calls `sluice status` and `sluice stats` make) and
// serves it in the text exposition format: metric families and their text
// from prometheus-cpp, HTTP from civetweb (which prometheus-cpp's own
// exposer wraps, but serialising every scrape behind one lock).
#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent.h"
#include "datapath.h"
#include "stats.h"

class CivetServer;

namespace sluice::agent {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

/// Builds metric families in the order they are first named. A deque, so
/// that a family's reference stays valid while later ones are added.
class FamilyList {
public:
	prometheus::MetricFamily &add(std::string name, std::string help, prometheus::MetricType type)
	{
		families_.push_back({std::move(name), std::move(help), type, {}});
		return families_.back();
	}

	static void sample(prometheus::MetricFamily &f, MetricLabels labels, double value)
	{
		prometheus::ClientMetric m;
		m.label = std::move(labels);
		if (f.type == prometheus::MetricType::Counter)
			m.counter.value = value;
		else
			m.gauge.value = value;
		f.metric.push_back(std::move(m));
	}

	void single(std::string name, std::string help, prometheus::MetricType type, double value, MetricLabels labels = {})
	{
		sample(add(std::move(name), std::move(help), type), std::move(labels), value);
	}

	std::vector<prometheus::MetricFamily> take()
	{
		return {std::make_move_iterator(families_.begin()), std::make_move_iterator(families_.end())};
	}

private:
	std::deque<prometheus::MetricFamily> families_;
};

/// Where the exporter listens: a numeric IPv4 or IPv6 address and a port.
struct ListenAddress {
	std::string host = "127.0.0.1"; ///< without brackets
	uint16_t port = 9617;           ///< 0: any free port

	/// "127.0.0.1:9617", "[::1]:9617": as parsed, and as civetweb takes it.
	std::string text() const;
	/// Whether only this host can connect: 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104.
	bool loopback() const;
};

/// Parses ADDR:PORT (IPv6 in brackets); throws Error with one line if not.
ListenAddress parse_listen_address(std::string_view text);

/// Sources with most drops shown by default, and the most allowed: each
/// adds a few series, so the label cardinality stays bounded.
constexpr size_t DEFAULT_TOP_SOURCES = 10;
constexpr size_t MAX_TOP_SOURCES = 1000;

/// What one scrape read from the pinned state.
struct Reading {
	bool loaded = false;   ///< a program is pinned in the directory
	bool readable = false; ///< and this binary can read its state (same layout)
	std::string error;     ///< why not readable, as one line
	Status status;
	Stats stats;           ///< sources: the top ones by drops
	double collect_seconds = 0; ///< wall time of this reading
};

/// Reads the state pinned under inst. The pin directory's shared lock is held
/// only while the maps are opened, not while they are read. Never throws for
/// a missing or unreadable state: that is in the reading.
Reading read_state(const Instance &inst, size_t top_sources);

/// The metric families of a reading (pure; tests render it directly).
std::vector<prometheus::MetricFamily> metric_families(const Reading &r);

/// Renders families in the text exposition format.
std::string render_text(const std::vector<prometheus::MetricFamily> &families);

struct MetricsOptions {
	ListenAddress listen;
	size_t top_sources = DEFAULT_TOP_SOURCES;
	std::string pin_dir = Instance::default_pin_dir();
	/// More families to serve with every scrape (the cluster sync's), if set.
	std::function<std::vector<prometheus::MetricFamily>()> extra;
};

/// Serves /metrics over HTTP. A scrape reads the state afresh (so a program
/// replaced by `sluice upgrade` or new rules are seen at once); a scrape that
/// arrives while another is reading is answered with the last figures.
class MetricsExporter : public Component {
public:
	explicit MetricsExporter(MetricsOptions options);
	~MetricsExporter() override;

	std::string name() const override { return "metrics"; }
	void start() override;
	void stop() noexcept override;

	/// The port it listens on (the one chosen, for port 0); 0 before start().
	uint16_t port() const { return port_; }

private:
	class Collector;
	class Handler;
	MetricsOptions options_;
	std::unique_ptr<Collector> collector_;
	std::unique_ptr<Handler> handler_;
	std::unique_ptr<CivetServer> server_;
	uint16_t port_ = 0;
};

} // namespace sluice::agent
