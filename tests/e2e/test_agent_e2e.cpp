// SPDX-License-Identifier: GPL-2.0-only
// The agent end to end: `sluice agent` run as an operator runs it, scraped by
// a real Prometheus server (Debian's /usr/bin/prometheus, an instance of the
// test's own on a free loopback port), real UDP traffic through veth, and a
// PromQL query through Prometheus's HTTP API compared with what was sent.
// Then what the agent must survive: no state, `sluice upgrade`, state of
// another layout, and being killed.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "fd.h"
#include "child.h"
#include "cli.h"
#include "process.h"
#include "sluice_abi.h"
#include "sockaddr.h"

using nlohmann::json;
using namespace sluice::test;

namespace {

const std::string PIN_DIR = "/sys/fs/bpf/slag";
const std::string RUN_DIR = "/tmp/slag-run-" + std::to_string(getpid());
const std::string SRC_NS = "slag-src", DST_NS = "slag-dst";
const std::string SRC_IF = "slag-s", DST_IF = "slag-d";
const std::string DST_V4 = "10.201.0.1", SOURCE = "10.201.0.11";
constexpr uint16_t PORT = 9000;
constexpr int BURST = 5;

CommandResult cli_dst(std::vector<std::string> args) { return cli_in(DST_NS, std::move(args)); }

/// A Prometheus server of the test's own: its configuration and storage in a
/// scratch directory, scraping one target every second. Stopped and removed
/// when it goes, whatever the test's outcome.
class PrometheusServer {
public:
	explicit PrometheusServer(uint16_t target_port)
	{
		char tmpl[] = "/tmp/slag-prometheus-XXXXXX";
		if (!mkdtemp(tmpl))
			throw std::runtime_error("mkdtemp failed");
		dir_ = tmpl;
		std::ofstream(dir_ + "/prometheus.yml")
			<< "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
			<< "scrape_configs:\n  - job_name: sluice\n    static_configs:\n"
			<< "      - targets: ['127.0.0.1:" << target_port << "']\n";
		port_ = free_port();
		server_ = std::make_unique<Child>(std::vector<std::string>{
			"/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml",
			"--storage.tsdb.path=" + dir_ + "/data",
			"--web.listen-address=127.0.0.1:" + std::to_string(port_)});
		if (server_->wait_for_line(std::regex("Server is ready to receive web requests"), std::chrono::seconds(30))
			    .empty())
			throw std::runtime_error("prometheus did not start: " + server_->seen());
	}
	~PrometheusServer()
	{
		server_->stop(SIGTERM);
		std::filesystem::remove_all(dir_);
	}

	/// An instant query through the HTTP API; the "data" object.
	json query(const std::string &promql) const
	{
		CommandResult r = run_command({"curl", "-sS", "--max-time", "10", "--get", "--data-urlencode",
					       "query=" + promql,
					       "http://127.0.0.1:" + std::to_string(port_) + "/api/v1/query"});
		if (r.exit_code != 0)
			throw std::runtime_error("cannot query prometheus: " + r.err);
		json j = json::parse(r.out);
		if (j["status"] != "success")
			throw std::runtime_error("prometheus refused " + promql + ": " + r.out);
		return j["data"];
	}

	/// The raw samples of one series over the last minute, oldest first, as
	/// (Unix time in ms, value).
	std::vector<std::pair<int64_t, double>> samples(const std::string &selector) const
	{
		json data = query(selector + "[1m]");
		std::vector<std::pair<int64_t, double>> out;
		if (data["result"].empty())
			return out;
		for (const auto &v : data["result"][0]["values"])
			out.emplace_back(std::llround(v[0].get<double>() * 1000), std::stod(v[1].get<std::string>()));
		return out;
	}

private:
	std::string dir_;
	uint16_t port_ = 0;
	std::unique_ptr<Child> server_;
};

int64_t unix_ms()
{
	return std::chrono::duration_cast<std::chrono::milliseconds>(
		       std::chrono::system_clock::now().time_since_epoch())
		.count();
}

void remove_topology() { VethPair{SRC_NS, DST_NS}.remove(); }

class AgentEndToEnd : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "the agent's tests load XDP and create namespaces: run as root";
		setenv("SLUICE_PIN_DIR", PIN_DIR.c_str(), 1);
		setenv("SLUICE_RUN_DIR", RUN_DIR.c_str(), 1); // the agent's events socket, not /run/sluice's
		cli({"detach", "--all"}); // leftovers of an interrupted run
		remove_topology();
	}

	void TearDown() override
	{
		cli({"detach", "--all"});
		rmdir(PIN_DIR.c_str());
		rmdir((PIN_DIR + "-lock").c_str()); // the instance's lock, beside it
		remove_topology();
	}

	void make_topology()
	{
		VethPair{SRC_NS, DST_NS, SRC_IF, DST_IF, DST_V4 + "/24", {SOURCE + "/24"}, "02:00:00:00:01"}.create();
	}

	/// The topology, sluice attached natively, and the rule `flood`: the
	/// sources' UDP at 1/min with a burst of BURST.
	void attach_with_flood_rule()
	{
		make_topology();
		ASSERT_EQ(cli_dst({"attach", DST_IF, "--mode", "native", "--max-sources", "4096"}).exit_code, 0);
		CommandResult r = cli({"rule", "add", "10.201.0.0/24", "--rate", "1/min", "--burst", std::to_string(BURST),
				       "--proto", "udp", "--name", "flood"});
		ASSERT_EQ(r.exit_code, 0) << r.err;
	}

	static uint64_t rule_dropped(const std::string &rule)
	{
		return stats_rule_line(rule).value("dropped_packets", uint64_t(0));
	}
};

} // namespace

TEST_F(AgentEndToEnd, PrometheusScrapesTheAgentAndPromqlGivesTheDropRateOfTheTrafficSent)
{
	ASSERT_NO_FATAL_FAILURE(attach_with_flood_rule());
	AgentProcess agent(SLUICE_BIN, {"--top-sources", "3"});
	PrometheusServer prometheus(agent.port());
	const std::string series = "sluice_rule_dropped_packets_total{rule=\"flood\"}";

	// A first sample, before any traffic: the start of the interval.
	std::vector<std::pair<int64_t, double>> before;
	for (int i = 0; i < 100 && before.empty(); i++) {
		std::this_thread::sleep_for(std::chrono::milliseconds(200));
		before = prometheus.samples(series);
	}
	ASSERT_FALSE(before.empty()) << "prometheus never scraped the agent";
	auto [t0, v0] = before.back();
	ASSERT_EQ(v0, 0) << "drops before any traffic";

	const int sent = send_udp_in(SRC_NS, SOURCE, DST_V4, PORT, 200, 64);
	ASSERT_EQ(sent, 200) << "the sender could not send everything";
	int64_t sent_at = unix_ms();

	// A sample taken a second after the last datagram: the end of the interval.
	std::vector<std::pair<int64_t, double>> after;
	for (int i = 0; i < 100 && (after.empty() || after.back().first < sent_at + 1000); i++) {
		std::this_thread::sleep_for(std::chrono::milliseconds(200));
		after = prometheus.samples(series);
	}
	ASSERT_FALSE(after.empty());
	auto [t1, v1] = after.back();
	ASSERT_GE(t1, sent_at + 1000) << "prometheus stopped scraping";

	// rate() over exactly [t0, t1]: with samples on both edges Prometheus
	// extrapolates nothing, so the rate is the drops of the interval over
	// its length, and the drops are what was sent beyond the burst.
	std::string promql = "rate(" + series + "[" + std::to_string(t1 - t0) + "ms] @ " +
			     std::to_string(t1 / 1000) + "." + std::to_string(1000 + t1 % 1000).substr(1) + ")";
	json data = prometheus.query(promql);
	ASSERT_EQ(data["result"].size(), 1u) << data.dump();
	double rate = std::stod(data["result"][0]["value"][1].get<std::string>());
	double seconds = (t1 - t0) / 1000.0;
	const double expected = static_cast<double>(sent - BURST) / seconds;
	std::cout << "PromQL: " << promql << "\n  returned " << rate << " drops/s over " << seconds << " s; sent "
		  << sent << " datagrams, burst " << BURST << ": expected (" << sent << " - " << BURST << ") / "
		  << seconds << " = " << expected << " drops/s\n";
	EXPECT_NEAR(rate, expected, expected * 1e-9);
	EXPECT_EQ(v1, sent - BURST);
	EXPECT_EQ(rule_dropped("flood"), static_cast<uint64_t>(sent - BURST)) << "sluice stats agrees";

	// The source's own series (top sources by drops) and the global counter.
	std::string scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_top_source_dropped_packets_total{rule=\"flood\",source=\"" + SOURCE + "\"}"),
		  sent - BURST)
		<< scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_packets_total{verdict=\"drop\",reason=\"rate\"}"), sent - BURST);
	EXPECT_EQ(metric_sample(scrape, "sluice_sources_tracked{family=\"ipv4\",table=\"bucket\"}"), 1);

	// Killing the agent changes nothing in the data plane: the next flood is
	// dropped beyond the (spent) burst as before.
	EXPECT_EQ(agent.child().stop(SIGKILL), -SIGKILL);
	ASSERT_EQ(send_udp_in(SRC_NS, SOURCE, DST_V4, PORT, 100, 64), 100);
	EXPECT_GE(rule_dropped("flood"), static_cast<uint64_t>(sent - BURST + 99));
	EXPECT_EQ(cli({"status"}).exit_code, 0);
}

TEST_F(AgentEndToEnd, KeepsServingWithNoStateAcrossUpgradesAndStateOfAnotherLayout)
{
	AgentProcess agent(SLUICE_BIN, {"--top-sources", "3"});
	// Nothing loaded: the agent serves, and says so.
	std::string scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_up"), 0) << scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_program_loaded"), 0);
	EXPECT_NE(agent.child().wait_for_line(std::regex("sluice is not loaded")), "");

	// A rule loads the program; the next scrape reads it.
	ASSERT_EQ(cli({"rule", "add", "10.202.0.0/16", "--rate", "10/s", "--name", "first"}).exit_code, 0);
	scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_up"), 1) << scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_rules"), 1);
	std::smatch m;
	ASSERT_TRUE(std::regex_search(scrape, m, std::regex("sluice_program_info\\{prog_id=\"([0-9]+)\"")));
	std::string before_upgrade = m[1];

	// `sluice upgrade` replaces the program and its maps: the agent follows,
	// and sees a rule added after it.
	ASSERT_EQ(cli({"upgrade"}).exit_code, 0);
	ASSERT_EQ(cli({"rule", "add", "10.203.0.0/16", "--rate", "10/s", "--name", "second"}).exit_code, 0);
	scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_up"), 1);
	EXPECT_EQ(metric_sample(scrape, "sluice_rules"), 2);
	ASSERT_TRUE(std::regex_search(scrape, m, std::regex("sluice_program_info\\{prog_id=\"([0-9]+)\"")));
	EXPECT_NE(m[1], before_upgrade) << "the agent still reads the replaced program";
	EXPECT_FALSE(std::isnan(metric_sample(scrape, "sluice_rule_passed_packets_total{rule=\"second\",rule_id=\"2\"}")));

	// State of another layout (as an older or newer sluice leaves it): the
	// agent says why, serves sluice_up 0, and reads it again once it is back.
	std::string meta_pin = PIN_DIR + "/" SLUICE_STR(SLUICE_MAP_META);
	int meta = bpf_obj_get(meta_pin.c_str());
	ASSERT_GE(meta, 0);
	struct sluice_meta record = {}, changed;
	uint32_t zero = 0;
	ASSERT_EQ(bpf_map_lookup_elem(meta, &zero, &record), 0);
	changed = record;
	changed.layout_hash ^= 1;
	ASSERT_EQ(bpf_map_update_elem(meta, &zero, &changed, BPF_ANY), 0);
	scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_up"), 0) << scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_program_loaded"), 1);
	EXPECT_NE(agent.child().wait_for_line(std::regex("has another layout than this sluice")), "");
	EXPECT_TRUE(agent.child().running());
	ASSERT_EQ(bpf_map_update_elem(meta, &zero, &record, BPF_ANY), 0);
	close(meta);
	scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_up"), 1) << scrape;

	// SIGTERM ends it cleanly, and leaves the state as it was.
	EXPECT_EQ(agent.child().stop(SIGTERM), 0) << agent.child().seen();
	CommandResult status = cli({"status", "--json"});
	ASSERT_EQ(status.exit_code, 0);
	EXPECT_EQ(json::parse(status.out)["rules"], 2);
}

TEST(AgentArguments, BadInputIsOneLineAndAFailure)
{
	for (std::vector<std::string> args : {std::vector<std::string>{"agent", "--metrics", "nonsense"},
					      {"agent", "--metrics", "127.0.0.1:70000"},
					      {"agent", "--metrics", "::1:9617"},
					      {"agent", "--top-sources", "-1"},
					      {"agent", "--top-sources", "100000"}}) {
		CommandResult r = cli(args);
		SCOPED_TRACE(args[1] + " " + args[2]);
		EXPECT_NE(r.exit_code, 0);
		EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
		EXPECT_EQ(r.err.rfind("sluice: " + args[1] + ":", 0), 0u) << r.err;
	}
}

TEST(AgentSignals, SigintEndsItAsCleanlyAsSigterm)
{
	setenv("SLUICE_PIN_DIR", (PIN_DIR + "-none").c_str(), 1);
	AgentProcess agent(SLUICE_BIN, {"--top-sources", "3"});
	EXPECT_EQ(metric_sample(agent.scrape(), "sluice_up"), 0);
	EXPECT_EQ(agent.child().stop(SIGINT), 0) << agent.child().seen();
	EXPECT_NE(agent.child().wait_for_line(std::regex("stopped by Interrupt")), "") << agent.child().seen();
}

TEST_F(AgentEndToEnd, AScrapeDuringAReadingIsAnsweredWithTheLastFigures)
{
	ASSERT_EQ(cli({"rule", "add", "10.204.0.0/16", "--rate", "10/s", "--name", "only"}).exit_code, 0);
	AgentProcess agent(SLUICE_BIN, {"--top-sources", "3"});
	std::string last = agent.scrape();
	ASSERT_EQ(metric_sample(last, "sluice_up"), 1) << last;

	// A mutating command holds the pin directory's lock: a reading waits for
	// it. Of two scrapes sent now, one reads (and waits); the other must be
	// answered meanwhile, from the last figures.
	// Closed (so unlocked) when the test ends, even by a failed assertion:
	// TearDown's detach takes the lock.
	sluice::UniqueFd dir(open(PIN_DIR.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); // not held by the curls
	ASSERT_TRUE(dir);
	ASSERT_EQ(flock(dir.get(), LOCK_EX), 0);
	std::string url = "http://127.0.0.1:" + std::to_string(agent.port()) + "/metrics";
	std::vector<std::string> outputs = {"/tmp/slag-scrape-1", "/tmp/slag-scrape-2"};
	std::vector<pid_t> scrapes;
	for (const auto &out : outputs) {
		pid_t pid = fork();
		if (pid == 0) {
			execlp("curl", "curl", "-sS", "--max-time", "30", "-o", out.c_str(), url.c_str(), nullptr);
			_exit(127);
		}
		scrapes.push_back(pid);
	}
	int answered = -1, status = 0;
	for (int i = 0; i < 200 && answered < 0; i++) {
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		for (int k = 0; k < 2 && answered < 0; k++)
			if (waitpid(scrapes[k], &status, WNOHANG) == scrapes[k])
				answered = k;
	}
	ASSERT_GE(answered, 0) << "no scrape was answered while a reading waited for the lock";
	EXPECT_EQ(WEXITSTATUS(status), 0);
	int waiting = 1 - answered;
	EXPECT_EQ(waitpid(scrapes[waiting], &status, WNOHANG), 0) << "the reading did not wait for the lock";
	std::ifstream in(outputs[answered]);
	std::string cached((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	EXPECT_EQ(metric_sample(cached, "sluice_up"), 1) << cached;
	EXPECT_EQ(metric_sample(cached, "sluice_rules"), 1);
	EXPECT_EQ(metric_sample(cached, "sluice_agent_collect_duration_seconds"),
		  metric_sample(last, "sluice_agent_collect_duration_seconds"))
		<< "the figures of the last reading, not a new one";

	// The lock released, the waiting scrape gets a fresh reading.
	dir.reset();
	ASSERT_EQ(waitpid(scrapes[waiting], &status, 0), scrapes[waiting]);
	EXPECT_EQ(WEXITSTATUS(status), 0);
	std::ifstream fresh_in(outputs[waiting]);
	std::string fresh((std::istreambuf_iterator<char>(fresh_in)), std::istreambuf_iterator<char>());
	EXPECT_EQ(metric_sample(fresh, "sluice_up"), 1) << fresh;
	for (const auto &out : outputs)
		unlink(out.c_str());
}

// Throttle events reach `sluice events` from the ring buffer when no agent
// runs, and through the agent (which also writes them on its standard output,
// the journal under systemd) while one does.
TEST_F(AgentEndToEnd, ThrottleEventsReachSluiceEventsWithAndWithoutTheAgent)
{
	make_topology();
	ASSERT_EQ(cli_dst({"attach", DST_IF, "--max-sources", "4096"}).exit_code, 0);
	ASSERT_EQ(cli({"rule", "add", "10.201.0.0/24", "--rate", "1/min", "--burst", "5", "--name", "flood"}).exit_code,
		  0);
	auto follow = [](std::vector<std::string> args, CommandResult &out) {
		args.insert(args.begin(), {SLUICE_BIN, "events"});
		return std::thread([args, &out] { out = run_command(args); });
	};

	// No agent: straight from the ring buffer.
	CommandResult direct;
	std::thread reader = follow({"--json", "--count", "2", "--timeout", "20s"}, direct);
	std::this_thread::sleep_for(std::chrono::milliseconds(300));
	EXPECT_EQ(send_udp_in(SRC_NS, SOURCE, DST_V4, PORT, 30, 64), 30);
	reader.join();
	ASSERT_EQ(direct.exit_code, 0) << direct.err;
	EXPECT_NE(direct.err.find("reading the ring buffer"), std::string::npos) << "says which: " << direct.err;
	std::istringstream lines(direct.out);
	std::string first, second;
	std::getline(lines, first);
	std::getline(lines, second);
	json a = json::parse(first), b = json::parse(second);
	EXPECT_EQ(a["event"], "throttled");
	EXPECT_EQ(a["source"], SOURCE);
	EXPECT_EQ(a["rule"], "flood");
	EXPECT_EQ(b["event"], "released");
	EXPECT_EQ(b["since"], a["time"]);
	EXPECT_GE(b["throttled_seconds"].get<double>(), 1.0);

	// With the agent: it owns the ring; `sluice events` follows its socket.
	std::string journal = RUN_DIR + "-agent.out";
	Child agent({SLUICE_BIN, "agent", "--metrics", "127.0.0.1:0"}, journal);
	ASSERT_FALSE(agent.wait_for_line(std::regex("serving metrics on")).empty()) << agent.seen();
	CommandResult through;
	std::thread text_reader = follow({"--count", "2", "--timeout", "20s"}, through);
	std::this_thread::sleep_for(std::chrono::milliseconds(500));
	EXPECT_EQ(send_udp_in(SRC_NS, SOURCE, DST_V4, PORT, 30, 64), 30);
	text_reader.join();
	ASSERT_EQ(through.exit_code, 0) << through.err;
	EXPECT_NE(through.err.find("following the agent's events"), std::string::npos) << "says which: " << through.err;
	EXPECT_NE(through.out.find(" throttled " + SOURCE + " by rule flood"), std::string::npos) << through.out;
	EXPECT_NE(through.out.find(" released " + SOURCE + " by rule flood"), std::string::npos) << through.out;
	agent.stop(SIGTERM);
	std::ifstream in(journal);
	std::string logged((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	EXPECT_NE(logged.find("\"event\":\"throttled\""), std::string::npos) << logged;
	EXPECT_NE(logged.find("\"event\":\"released\""), std::string::npos) << logged;
	unlink(journal.c_str());
	EXPECT_EQ(json::parse(cli({"stats", "--json"}).out)["global"]["events_lost"]["packets"], 0u);
}

// The Grafana dashboard (docs/grafana/sluice-dashboard.json) asks only for
// what the agent serves: every metric its panels and variables name is a
// family of a real scrape, every query is valid PromQL to a real Prometheus,
// and a query comes back empty only when a family it names has no sample yet.
TEST_F(AgentEndToEnd, TheGrafanaDashboardQueriesOnlyMetricsTheAgentServes)
{
	std::ifstream file(SLUICE_DASHBOARD);
	ASSERT_TRUE(file) << "cannot open " << SLUICE_DASHBOARD;
	json dashboard = json::parse(file);
	std::vector<std::string> exprs;
	for (const auto &panel : dashboard["panels"])
		for (const auto &target : panel["targets"])
			exprs.push_back(target["expr"].get<std::string>());
	ASSERT_GE(exprs.size(), 10u) << "the dashboard lost its panels";
	// Its variables' label_values(METRIC, LABEL), as the equivalent query.
	const std::regex label_values(R"(label_values\((\w+), *(\w+)\))");
	for (const auto &var : dashboard["templating"]["list"]) {
		std::smatch m;
		std::string q = var.value("query", "");
		if (std::regex_match(q, m, label_values))
			exprs.push_back("count by (" + m[2].str() + ") (" + m[1].str() + ")");
	}
	// Grafana's variables, as Grafana would fill them in with "All" chosen.
	auto filled = [](std::string e) {
		for (auto [var, value] : {std::pair{"$__rate_interval", "1m"}, {"$__range", "5m"}, {"$instance", ".*"},
					  {"$rule", ".*"}})
			for (size_t at; (at = e.find(var)) != std::string::npos;)
				e.replace(at, std::string(var).size(), value);
		return e;
	};

	ASSERT_NO_FATAL_FAILURE(attach_with_flood_rule());
	ASSERT_EQ(cli({"rule", "add", "10.201.0.0/24", "--rate", "1/min", "--proto", "tcp", "--shadow", "--name", "watch"})
			  .exit_code,
		  0);
	AgentProcess agent(SLUICE_BIN, {"--top-sources", "3"});
	PrometheusServer prometheus(agent.port());
	ASSERT_EQ(send_udp_in(SRC_NS, SOURCE, DST_V4, PORT, 50, 64), 50);
	// rate() needs two samples after the drops: wait for three scrapes past them.
	const std::string flood = "sluice_rule_dropped_packets_total{rule=\"flood\"}";
	for (int i = 0; i < 100; i++) {
		auto s = prometheus.samples(flood);
		if (s.size() >= 3 && s[s.size() - 3].second == 50 - BURST)
			break;
		std::this_thread::sleep_for(std::chrono::milliseconds(200));
	}
	ASSERT_EQ(prometheus.samples(flood).back().second, 50 - BURST);

	std::string scrape = agent.scrape();
	const std::regex metric_name(R"(\bsluice_[a-z0-9_]+)");
	size_t answered = 0;
	for (const auto &raw : exprs) {
		std::string expr = filled(raw);
		bool all_sampled = true;
		for (auto it = std::sregex_iterator(expr.begin(), expr.end(), metric_name); it != std::sregex_iterator();
		     ++it) {
			std::string name = it->str();
			EXPECT_NE(scrape.find("# TYPE " + name + " "), std::string::npos)
				<< "the dashboard asks for " << name << ", which the agent does not serve (in: " << raw << ")";
			if (scrape.find("\n" + name + "{") == std::string::npos && scrape.find("\n" + name + " ") == std::string::npos)
				all_sampled = false;
		}
		json data;
		ASSERT_NO_THROW(data = prometheus.query(expr)) << "Prometheus refuses the dashboard's query " << raw;
		if (all_sampled) {
			EXPECT_FALSE(data["result"].empty()) << "the dashboard's query " << expr << " returns nothing";
			answered++;
		}
	}
	std::cout << exprs.size() << " dashboard queries checked against the scrape and Prometheus; " << answered
		  << " returned data (the rest name a family with no sample in this set-up)\n";
	EXPECT_GE(answered, exprs.size() * 2 / 3);
}

// One stream of events: with the agent serving a socket of its own choosing,
// any number of `sluice events` following it get the same events as the
// agent's log, in the same order; a reader that does not name the socket is
// refused rather than splitting the ring buffer with the agent. The events of
// rules deleted before the agent started, and while it runs, carry the
// rules' names and ids as they were.
TEST_F(AgentEndToEnd, EveryReaderGetsEveryEventInOrderAndDeletedRulesKeepTheirNames)
{
	const std::string FLOOD_A = "10.201.0.12", FLOOD_B = "10.201.0.13", GONE = "10.201.0.14",
			  BRIEF = "10.201.0.15";
	VethPair{SRC_NS,
		 DST_NS,
		 SRC_IF,
		 DST_IF,
		 DST_V4 + "/24",
		 {FLOOD_A + "/24", FLOOD_B + "/24", GONE + "/24", BRIEF + "/24"},
		 "02:00:00:00:01"}
		.create();
	ASSERT_EQ(cli_dst({"attach", DST_IF, "--max-sources", "4096"}).exit_code, 0);
	auto add = [](const std::string &cidr, const std::string &name) {
		CommandResult r = cli({"rule", "add", cidr, "--rate", "1/min", "--burst", "5", "--name", name});
		EXPECT_EQ(r.exit_code, 0) << r.err;
		return json::parse(cli({"rule", "list", "--json"}).out);
	};
	auto id_of = [](const json &rules, const std::string &name) {
		for (const auto &r : rules)
			if (r["name"] == name)
				return r["id"].get<uint32_t>();
		ADD_FAILURE() << "no rule " << name;
		return 0u;
	};
	add("10.201.0.12/31", "flood"); // .12 and .13
	uint32_t gone_id = id_of(add(GONE + "/32", "gone"), "gone");

	// Before any reader: a source throttled, its rule deleted.
	EXPECT_EQ(send_udp_in(SRC_NS, GONE, DST_V4, PORT, 30, 64), 30);
	ASSERT_EQ(cli({"rule", "del", "gone"}).exit_code, 0);
	std::this_thread::sleep_for(std::chrono::milliseconds(1500)); // its release too, in the backlog

	const std::string sock = RUN_DIR + "/custom.sock";
	std::string journal = RUN_DIR + "-agent-stream.out";
	Child agent({SLUICE_BIN, "agent", "--metrics", "127.0.0.1:0", "--events-socket", sock}, journal);
	ASSERT_FALSE(agent.wait_for_line(std::regex("serving metrics on")).empty()) << agent.seen();
	auto journal_has = [&journal](const std::string &what) {
		for (int i = 0; i < 100; i++) {
			std::ifstream in(journal);
			std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
			if (text.find(what) != std::string::npos)
				return true;
			std::this_thread::sleep_for(std::chrono::milliseconds(100));
		}
		return false;
	};
	ASSERT_TRUE(journal_has("\"source\":\"" + GONE + "\"")) << "the backlog's event: " << agent.seen();

	// The events of the deleted rule, read by the agent from the backlog.
	ASSERT_TRUE(journal_has("\"event\":\"released\",\"source\":\"" + GONE + "\""));
	{
		std::ifstream in(journal);
		int named = 0;
		for (std::string line; std::getline(in, line);) {
			if (line.empty() || line[0] != '{')
				continue;
			json e = json::parse(line);
			if (e["source"] != GONE)
				continue;
			EXPECT_EQ(e["rule"], "gone") << line;
			EXPECT_EQ(e["rule_id"], gone_id) << line;
			named++;
		}
		EXPECT_EQ(named, 2) << "throttled and released, of the deleted rule";
	}

	// Three readers: two follow the agent's socket, one does not name it.
	const int N = 6; // throttled and released, for each of three sources
	std::vector<CommandResult> out(3);
	std::vector<std::thread> readers;
	for (int i = 0; i < 2; i++)
		readers.emplace_back([&, i] {
			out[i] = run_command({SLUICE_BIN, "events", "--json", "--socket", sock, "--count",
					      std::to_string(N), "--timeout", "40s"});
		});
	out[2] = run_command({SLUICE_BIN, "events", "--json", "--count", "1", "--timeout", "2s"});
	EXPECT_NE(out[2].exit_code, 0) << "a reader of the ring beside the agent: " << out[2].out;
	EXPECT_EQ(std::count(out[2].err.begin(), out[2].err.end(), '\n'), 1) << out[2].err;
	EXPECT_NE(out[2].err.find("--socket"), std::string::npos) << out[2].err;
	std::this_thread::sleep_for(std::chrono::milliseconds(500));

	uint32_t brief_id = id_of(add(BRIEF + "/32", "brief"), "brief");
	EXPECT_EQ(send_udp_in(SRC_NS, FLOOD_A, DST_V4, PORT, 30, 64), 30);
	EXPECT_EQ(send_udp_in(SRC_NS, FLOOD_B, DST_V4, PORT, 30, 64), 30);
	EXPECT_EQ(send_udp_in(SRC_NS, BRIEF, DST_V4, PORT, 30, 64), 30);
	ASSERT_EQ(cli({"rule", "del", "brief"}).exit_code, 0); // its release comes after
	for (auto &t : readers)
		t.join();
	agent.stop(SIGTERM);

	std::vector<std::string> logged;
	{
		std::ifstream in(journal);
		for (std::string line; std::getline(in, line);)
			if (!line.empty() && line[0] == '{' && line.find("\"source\":\"" + GONE + "\"") == std::string::npos)
				logged.push_back(line);
	}
	unlink(journal.c_str());
	ASSERT_EQ(logged.size(), size_t(N)) << "the agent's log";
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(out[i].exit_code, 0) << out[i].err;
		EXPECT_NE(out[i].err.find("following the agent's events at " + sock), std::string::npos) << out[i].err;
		std::vector<std::string> got;
		std::istringstream lines(out[i].out);
		for (std::string line; std::getline(lines, line);)
			got.push_back(line);
		EXPECT_EQ(got, logged) << "reader " << i << " and the agent's log differ";
	}
	int briefs = 0;
	for (const auto &line : logged) {
		json e = json::parse(line);
		if (e["source"] == BRIEF) {
			briefs++;
			EXPECT_EQ(e["rule"], "brief") << line;
			EXPECT_EQ(e["rule_id"], brief_id) << line;
		} else {
			EXPECT_EQ(e["rule"], "flood") << line;
		}
	}
	EXPECT_EQ(briefs, 2) << "throttled and released, the release after the rule's deletion";
}
