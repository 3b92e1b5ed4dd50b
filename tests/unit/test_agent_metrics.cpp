// SPDX-License-Identifier: GPL-2.0-only
// The agent's pure parts: --metrics parsing, and the metrics a reading and the
// cluster sync's figures give, rendered in the text format as a scraper
// receives them.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <random>
#include <sstream>

#include "error.h"
#include "metrics.h"
#include "sync.h"

using namespace sluice;
using namespace sluice::agent;

namespace {

/// The sample lines of a rendering (no # HELP / # TYPE), one per line.
std::vector<std::string> samples(const std::string &text)
{
	std::vector<std::string> out;
	std::istringstream in(text);
	for (std::string line; std::getline(in, line);)
		if (!line.empty() && line[0] != '#')
			out.push_back(line);
	return out;
}

bool has(const std::vector<std::string> &lines, const std::string &line)
{
	return std::find(lines.begin(), lines.end(), line) != lines.end();
}

RuleStats rule_stats(uint32_t id, const std::string &name, const std::string &cidr, bool shadow,
		     struct sluice_rule_counters c, uint64_t sources)
{
	RuleStats rs;
	rs.rule.id = id;
	rs.rule.slot = id - 1;
	rs.rule.spec.name = name;
	rs.rule.spec.cidr = parse_cidr(cidr);
	rs.rule.spec.rate = parse_rate("100/s");
	rs.rule.spec.burst = 10;
	rs.rule.spec.shadow = shadow;
	rs.counters = c;
	rs.sources = sources;
	return rs;
}

} // namespace

TEST(ListenAddress, ParsesIpv4AndBracketedIpv6)
{
	ListenAddress a = parse_listen_address("127.0.0.1:9617");
	EXPECT_EQ(a.host, "127.0.0.1");
	EXPECT_EQ(a.port, 9617);
	EXPECT_EQ(a.text(), "127.0.0.1:9617");
	ListenAddress b = parse_listen_address("[::1]:0");
	EXPECT_EQ(b.host, "::1");
	EXPECT_EQ(b.port, 0);
	EXPECT_EQ(b.text(), "[::1]:0");
	EXPECT_EQ(ListenAddress().text(), "127.0.0.1:9617") << "the documented default";
}

TEST(ListenAddress, RefusesWhatIsNotAddrPort)
{
	for (const char *bad : {"nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
				"127.0.0.1:80x", "localhost:9617", "::1:9617", "[::1]", "[nope]:80", ":9617",
				"1.2.3:80", "127.0.0.1:9617\n"}) {
		SCOPED_TRACE(bad);
		try {
			parse_listen_address(bad);
			ADD_FAILURE() << "accepted";
		} catch (const Error &e) {
			std::string what = e.what();
			EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
			EXPECT_EQ(what.rfind("--metrics: ", 0), 0u) << what;
		}
	}
}

TEST(Metrics, NoStateIsUpZeroAndNothingElseOfTheDataPlane)
{
	Reading r;
	r.error = "sluice is not loaded";
	auto lines = samples(render_text(metric_families(r)));
	EXPECT_TRUE(has(lines, "sluice_up 0"));
	EXPECT_TRUE(has(lines, "sluice_program_loaded 0"));
	for (const auto &l : lines)
		EXPECT_TRUE(l.rfind("sluice_up", 0) == 0 || l.rfind("sluice_program_loaded", 0) == 0 ||
			    l.rfind("sluice_agent_", 0) == 0)
			<< l;

	r.loaded = true; // pinned, but of another layout
	lines = samples(render_text(metric_families(r)));
	EXPECT_TRUE(has(lines, "sluice_up 0"));
	EXPECT_TRUE(has(lines, "sluice_program_loaded 1"));
}

TEST(Metrics, AReadingBecomesCountersAndGaugesWithBoundedLabels)
{
	Reading r;
	r.loaded = r.readable = true;
	r.status.prog_id = 42;
	r.status.abi_version = 2;
	r.status.layout_hash = 0xabc;
	r.status.max_rules = 16384;
	AttachedLink link;
	link.ifname = "eth0";
	link.ifindex = 3;
	link.netns = 4026531840;
	link.this_netns = true;
	link.mode = XdpMode::generic;
	link.prog_id = 42;
	r.status.links.push_back(link);
	r.stats.global[SLUICE_CNT_DROP_RATE] = {195, 11700};
	r.stats.global[SLUICE_CNT_PASS_LIMIT] = {5, 300};
	r.stats.global[SLUICE_CNT_INFO_EVICTED] = {7, 0};
	r.stats.rules.push_back(rule_stats(1, "flood", "10.0.0.0/8", false, {5, 300, 195, 11700, 1, 2}, 3));
	r.stats.rules.push_back(rule_stats(2, "trial", "fd00::/8", true, {10, 800, 4, 320, 0, 0}, 1));
	r.stats.tables.push_back({4, false, 3, 1000});
	r.stats.tables.push_back({6, true, 0, 16384});
	r.stats.sources.push_back({"10.0.0.1", "flood", 1, false, 1, 60, 150, 9000, Algo::token_bucket});
	r.stats.sources.push_back({"fd00::1", "trial", 2, true, 10, 800, 4, 320, Algo::token_bucket});
	r.stats.sources.push_back({"10.0.0.2", "flood", 1, false, 4, 240, 0, 0, Algo::token_bucket});

	std::string text = render_text(metric_families(r));
	auto lines = samples(text);
	EXPECT_TRUE(has(lines, "sluice_up 1"));
	EXPECT_TRUE(has(lines, "sluice_program_info{prog_id=\"42\",abi=\"2\",layout=\"0x0000000000000abc\"} 1"));
	EXPECT_TRUE(has(lines, "sluice_interface_info{interface=\"eth0\",ifindex=\"3\",netns=\"4026531840\","
			       "mode=\"generic\",prog_id=\"42\"} 1"));
	EXPECT_TRUE(has(lines, "sluice_packets_total{verdict=\"drop\",reason=\"rate\"} 195"));
	EXPECT_TRUE(has(lines, "sluice_bytes_total{verdict=\"pass\",reason=\"limit\"} 300"));
	EXPECT_TRUE(has(lines, "sluice_evictions_total{family=\"ipv4\"} 7"));
	EXPECT_TRUE(has(lines, "sluice_rules 2"));
	EXPECT_TRUE(has(lines, "sluice_rule_dropped_packets_total{rule=\"flood\",rule_id=\"1\"} 195"));
	EXPECT_TRUE(has(lines, "sluice_rule_dropped_bytes_total{rule=\"flood\",rule_id=\"1\"} 11700"));
	EXPECT_TRUE(has(lines, "sluice_rule_failopen_packets_total{rule=\"flood\",rule_id=\"1\"} 1"));
	EXPECT_TRUE(has(lines, "sluice_rule_contention_passed_packets_total{rule=\"flood\",rule_id=\"1\"} 2"));
	EXPECT_TRUE(has(lines, "sluice_rule_sources{rule=\"flood\",rule_id=\"1\"} 3"));
	// A shadow rule drops nothing: its would-drops were passed.
	EXPECT_TRUE(has(lines, "sluice_rule_dropped_packets_total{rule=\"trial\",rule_id=\"2\"} 0"));
	EXPECT_TRUE(has(lines, "sluice_rule_passed_packets_total{rule=\"trial\",rule_id=\"2\"} 14"));
	EXPECT_TRUE(has(lines, "sluice_rule_would_drop_packets_total{rule=\"trial\",rule_id=\"2\"} 4"));
	EXPECT_EQ(text.find("sluice_rule_would_drop_packets_total{rule=\"flood\""), std::string::npos);
	EXPECT_TRUE(has(lines, "sluice_sources_tracked{family=\"ipv4\",table=\"bucket\"} 3"));
	EXPECT_TRUE(has(lines, "sluice_source_table_capacity{family=\"ipv6\",table=\"sliding_log\"} 16384"));
	EXPECT_TRUE(has(lines, "sluice_source_table_fill_ratio{family=\"ipv4\",table=\"bucket\"} 0.003"));
	// Per-source series: only the sources that dropped.
	EXPECT_TRUE(has(lines, "sluice_top_source_dropped_packets_total{rule=\"flood\",source=\"10.0.0.1\"} 150"));
	EXPECT_TRUE(has(lines, "sluice_top_source_would_drop_packets_total{rule=\"trial\",source=\"fd00::1\"} 4"));
	EXPECT_EQ(text.find("10.0.0.2"), std::string::npos);
	// Label values are escaped: an interface name may hold a quote.
	r.status.links[0].ifname = "we\"ird\\";
	EXPECT_TRUE(has(samples(render_text(metric_families(r))),
			"sluice_interface_info{interface=\"we\\\"ird\\\\\",ifindex=\"3\",netns=\"4026531840\","
			"mode=\"generic\",prog_id=\"42\"} 1"));
	// Every family is named by the conventions: counters end in _total.
	std::istringstream in(text);
	for (std::string line; std::getline(in, line);) {
		if (line.rfind("# TYPE ", 0) != 0)
			continue;
		std::istringstream words(line.substr(7));
		std::string name, type;
		words >> name >> type;
		if (name.rfind("sluice_", 0) != 0)
			continue;
		bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
		EXPECT_EQ(total, type == "counter") << line;
	}
}

TEST(Metrics, ThePolicyDigestFollowsTheRules)
{
	Stats a, b;
	a.rules.push_back(rule_stats(1, "flood", "10.0.0.0/8", false, {}, 0));
	b.rules = a.rules;
	b.rules[0].counters.dropped_packets = 99; // counters are not policy
	EXPECT_EQ(rule_set_digest(a.rules), rule_set_digest(b.rules));
	b.rules[0].rule.spec.burst = 11;
	EXPECT_NE(rule_set_digest(a.rules), rule_set_digest(b.rules));
	b.rules = a.rules;
	b.rules[0].rule.spec.layered = true;
	EXPECT_NE(rule_set_digest(a.rules), rule_set_digest(b.rules));
}

// The mean round over any stretch of time is the change of the summed wall
// time over the change of the rounds: what a dashboard and the benchmark plot.
TEST(Metrics, TheClusterSyncSumsItsRoundsWallTime)
{
	cluster::SyncFigures f;
	f.rounds_ok = 3;
	f.rounds_failed = 1;
	f.last_round_seconds = 0.25;
	f.round_seconds_total = 0.75;
	auto lines = samples(render_text(cluster::sync_metric_families(f)));
	EXPECT_TRUE(has(lines, "sluice_cluster_rounds_total{result=\"ok\"} 3"));
	EXPECT_TRUE(has(lines, "sluice_cluster_rounds_total{result=\"failed\"} 1"));
	EXPECT_TRUE(has(lines, "sluice_cluster_round_seconds 0.25"));
	EXPECT_TRUE(has(lines, "sluice_cluster_round_seconds_total 0.75"));
}

// Which listen addresses keep /metrics on this host: every 127.0.0.0/8
// address, ::1 and IPv4-mapped loopback; the wildcards and everything else
// reach beyond it.
TEST(ListenAddress, LoopbackIsOnlyWhatStaysOnThisHost)
{
	std::mt19937 rng(7);
	for (int i = 0; i < 20000; i++) {
		uint32_t a = rng();
		char text[INET_ADDRSTRLEN];
		in_addr addr{htonl(a)};
		inet_ntop(AF_INET, &addr, text, sizeof(text));
		ListenAddress l = parse_listen_address(std::string(text) + ":9617");
		ASSERT_EQ(l.loopback(), (a >> 24) == 127) << text;
		ListenAddress mapped = parse_listen_address("[::ffff:" + std::string(text) + "]:9617");
		ASSERT_EQ(mapped.loopback(), (a >> 24) == 127) << text;
	}
	EXPECT_TRUE(parse_listen_address("[::1]:0").loopback());
	EXPECT_TRUE(ListenAddress().loopback()) << "the default";
	for (const char *beyond : {"0.0.0.0:9617", "[::]:9617", "[::2]:9617", "[fe80::1]:9617", "10.0.0.1:9617",
				   "128.0.0.1:9617", "[::127.0.0.1]:9617"})
		EXPECT_FALSE(parse_listen_address(beyond).loopback()) << beyond;
}

// Listening beyond loopback is said at start, once: the series name the
// throttled sources to whoever connects.
TEST(MetricsExporter, ListeningBeyondLoopbackIsSaid)
{
	for (const char *where : {"0.0.0.0:0", "127.0.0.1:0"}) {
		MetricsOptions o;
		o.listen = parse_listen_address(where);
		o.pin_dir = "/nonexistent/sluice-pins";
		MetricsExporter exporter(o);
		testing::internal::CaptureStderr();
		exporter.start();
		std::string said = testing::internal::GetCapturedStderr();
		exporter.stop();
		bool warned = said.find("warning: /metrics on 0.0.0.0:") != std::string::npos &&
			      said.find("can be read from other hosts") != std::string::npos &&
			      said.find("names the 10 sources with most drops") != std::string::npos;
		EXPECT_EQ(warned, std::string(where) == "0.0.0.0:0") << where << ": " << said;
	}
}
