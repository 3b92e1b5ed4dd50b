// SPDX-License-Identifier: GPL-2.0-only
// End to end, over veth: a --syn limit on SSH lets one session of 200
// segments through whole and drops the sixth new connection within the
// minute, where a plain port limit cuts the session off; and the recipes of
// docs/recipes.md, read from the page and run as written (SSH brute force,
// SYN flood per source, UDP amplification by source port, a per-/24
// aggregate under per-source limits, a repeat offender banned).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child.h"
#include "packet.h"
#include "cli.h"
#include "process.h"
#include "sockaddr.h"

using nlohmann::json;
using namespace sluice::test;

namespace {

const std::string SRC_NS = "selectors-a", DST_NS = "selectors-b";
const std::string SRC_IF = "selectors-s", DST_IF = "selectors-d";
const std::string DST = "10.229.0.1", SOURCE = "10.229.0.11", SECOND = "10.229.0.12";
// The receiver's MAC is the packet builder's destination (02:00:00:00:00:02).
const VethPair TOPOLOGY{SRC_NS, DST_NS, SRC_IF, DST_IF, DST + "/24", {SOURCE + "/24", SECOND + "/24"},
			"02:00:00:00:00"};
constexpr uint16_t SSH = 22;

uint64_t passed(const std::string &name) { return stats_rule_line(name).value("passed_packets", uint64_t(0)); }
uint64_t dropped(const std::string &name) { return stats_rule_line(name).value("dropped_packets", uint64_t(0)); }

/// The `sluice ...` lines of the code block under heading `## TITLE` of
/// docs/recipes.md, split at spaces, without the leading "sluice" and a
/// trailing `# comment`.
std::vector<std::vector<std::string>> recipe(const std::string &title)
{
	std::ifstream page(SLUICE_RECIPES);
	std::string line;
	bool in_section = false, in_block = false;
	std::vector<std::vector<std::string>> commands;
	while (std::getline(page, line)) {
		if (line.rfind("## ", 0) == 0) {
			in_section = line == "## " + title;
			continue;
		}
		if (in_section && line.rfind("```", 0) == 0) {
			if (in_block)
				break;
			in_block = true;
			continue;
		}
		if (in_block && line.rfind("sluice ", 0) == 0) {
			std::istringstream words(line.substr(7, line.find(" #") - 7)); // a comment ends the command
			std::vector<std::string> args;
			for (std::string w; words >> w;)
				args.push_back(w);
			commands.push_back(args);
		}
	}
	EXPECT_FALSE(commands.empty()) << "docs/recipes.md has no commands under '## " << title << "'";
	return commands;
}

/// Connects from `src` to DST:port with a timeout; the socket, or -1.
int connect_within(const std::string &src, uint16_t port, int timeout_ms)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	sockaddr_in from{}, to{};
	from.sin_family = to.sin_family = AF_INET;
	inet_pton(AF_INET, src.c_str(), &from.sin_addr);
	inet_pton(AF_INET, DST.c_str(), &to.sin_addr);
	to.sin_port = htons(port);
	if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&from), sizeof(from)))
		return -1;
	if (connect(fd, reinterpret_cast<sockaddr *>(&to), sizeof(to)) && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	pollfd p{fd, POLLOUT, 0};
	int err = 0;
	socklen_t len = sizeof(err);
	if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, 0);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	timeval tv{1, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/// Sends `count` messages of 64 bytes on `fd`, each echoed before the next
/// (a segment each way); returns the echoes received whole.
int exchange(int fd, int count)
{
	char buf[64];
	int echoed = 0;
	for (int i = 0; i < count; i++) {
		std::memset(buf, 'a' + i % 26, sizeof(buf));
		if (send(fd, buf, sizeof(buf), 0) != static_cast<ssize_t>(sizeof(buf)))
			break;
		size_t got = 0;
		while (got < sizeof(buf)) {
			ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);
			if (n <= 0)
				return echoed;
			got += static_cast<size_t>(n);
		}
		echoed++;
	}
	return echoed;
}

/// An echo server on DST:port in the receiver's namespace: serves one
/// connection at a time until none arrives for `idle_s` seconds.
class EchoServer {
public:
	explicit EchoServer(uint16_t port, int idle_s = 4)
		: thread_([port, idle_s] {
			  in_netns(DST_NS, [port, idle_s] {
				  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
				  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
				  sockaddr_in a{};
				  a.sin_family = AF_INET;
				  a.sin_port = htons(port);
				  inet_pton(AF_INET, DST.c_str(), &a.sin_addr);
				  if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) || listen(fd, 16))
					  return 1;
				  for (;;) {
					  pollfd p{fd, POLLIN, 0};
					  if (poll(&p, 1, idle_s * 1000) != 1)
						  return 0;
					  int c = accept(fd, nullptr, nullptr);
					  if (c < 0)
						  continue;
					  timeval tv{idle_s, 0};
					  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
					  char buf[4096];
					  for (ssize_t n; (n = recv(c, buf, sizeof(buf), 0)) > 0;)
						  if (send(c, buf, static_cast<size_t>(n), 0) != n)
							  break;
					  close(c);
				  }
			  });
		  })
	{
		usleep(200000); // listening before the first SYN
	}
	~EchoServer() { thread_.join(); }

private:
	std::thread thread_;
};

/// What the client saw: the session's echoes, and which new connections opened.
struct SshRun {
	int echoed = -1;
	std::vector<bool> opened; ///< connections 2..6, after the session's
};

/// One session exchanging `segments` / 2 messages (each a segment each way),
/// then five more connections, all from SOURCE within the minute.
SshRun ssh_session_then_five_connections(int segments)
{
	int pipefd[2];
	EXPECT_EQ(pipe(pipefd), 0);
	in_netns(SRC_NS, [&] {
		close(pipefd[0]);
		int echoed = -1;
		int fd = connect_within(SOURCE, SSH, 2000);
		if (fd >= 0)
			echoed = exchange(fd, segments / 2);
		std::string out = std::to_string(echoed);
		for (int i = 0; i < 5; i++) {
			int c = connect_within(SOURCE, SSH, 2500);
			out += c >= 0 ? " 1" : " 0";
			if (c >= 0)
				close(c);
		}
		if (fd >= 0)
			close(fd);
		out += "\n";
		return write(pipefd[1], out.data(), out.size()) == static_cast<ssize_t>(out.size()) ? 0 : 1;
	});
	close(pipefd[1]);
	char buf[128] = {};
	ssize_t n = read(pipefd[0], buf, sizeof(buf) - 1);
	close(pipefd[0]);
	SshRun r;
	std::istringstream in(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0));
	in >> r.echoed;
	for (int v; in >> v;)
		r.opened.push_back(v);
	return r;
}

/// Writes frames on the sender's veth; returns how many went out.
int send_frames(const std::vector<std::vector<uint8_t>> &frames) { return send_frames_in(SRC_NS, SRC_IF, frames); }

class Selectors : public AttachedToVeth {
protected:
	Selectors() : AttachedToVeth(TOPOLOGY, "selectors-e2e") {}

	void add(const std::vector<std::string> &args)
	{
		CommandResult r = cli(args);
		ASSERT_EQ(r.exit_code, 0) << r.err;
	}
};

class Recipes : public Selectors {};

} // namespace

// `--syn --dport 22 --rate 5/min`: one TCP session of 200 segments passes
// whole, and of the five new connections after it (six in all within the
// minute) the fifth, the sixth connection, is dropped.
TEST_F(Selectors, ASynLimitPassesASessionWholeAndDropsTheSixthConnection)
{
	add({"rule", "add", "0.0.0.0/0", "--syn", "--dport", "22", "--rate", "5/min", "--name", "ssh-new"});
	EchoServer server(SSH);
	SshRun r = ssh_session_then_five_connections(200);
	EXPECT_EQ(r.echoed, 100) << "the session's 200 segments all passed";
	EXPECT_EQ(r.opened, (std::vector<bool>{true, true, true, true, false}))
		<< "connections 2-5 open, the sixth within the minute does not";
	EXPECT_EQ(passed("ssh-new"), 5u) << "the rule saw five connection attempts pass";
	EXPECT_GE(dropped("ssh-new"), 1u) << "and dropped the sixth's SYN (and its retries)";
	json line = stats_rule_line("ssh-new");
	EXPECT_EQ(line["tcp_flags"], "syn,ack=syn");
	EXPECT_EQ(line["proto"], "tcp");
}

// The rule the README used to show, `--proto tcp --dport 22 --rate 5/min`,
// counts every packet: the session stops after its first few segments.
TEST_F(Selectors, APlainPortLimitCutsTheSessionOff)
{
	add({"rule", "add", "0.0.0.0/0", "--proto", "tcp", "--dport", "22", "--rate", "5/min", "--name", "ssh"});
	EchoServer server(SSH, 2);
	SshRun r = ssh_session_then_five_connections(200);
	EXPECT_GE(r.echoed, 0) << "the session opened";
	EXPECT_LT(r.echoed, 10) << "and was cut off";
}

TEST_F(Recipes, SshBruteForce)
{
	for (const auto &cmd : recipe("SSH brute force"))
		add(cmd);
	EchoServer server(SSH);
	SshRun r = ssh_session_then_five_connections(200);
	EXPECT_EQ(r.echoed, 100);
	EXPECT_EQ(r.opened, (std::vector<bool>{true, true, true, true, false}));
	EXPECT_EQ(passed("ssh-new"), 5u);
}

// A flood of SYNs from one source, to many ports from many source ports:
// the burst and the rate pass, the rest is dropped; the same source's other
// segments, and another source's SYNs, are not charged.
TEST_F(Recipes, SynFloodPerSource)
{
	for (const auto &cmd : recipe("SYN flood per source"))
		add(cmd);
	std::vector<std::vector<uint8_t>> flood, acks, other;
	for (int i = 0; i < 600; i++)
		flood.push_back(build_packet({.src = SOURCE, .dst = DST, .proto = 6,
					      .dport = static_cast<uint16_t>(1000 + i % 50), .tcp_flags = 0x02,
					      .payload = 0, .sport = static_cast<uint16_t>(30000 + i)}));
	for (int i = 0; i < 300; i++)
		acks.push_back(build_packet({.src = SOURCE, .dst = DST, .proto = 6, .dport = 1000, .tcp_flags = 0x10,
					     .payload = 0, .sport = 30000}));
	for (int i = 0; i < 30; i++)
		other.push_back(build_packet({.src = SECOND, .dst = DST, .proto = 6, .dport = 1000, .tcp_flags = 0x02,
					      .payload = 0, .sport = static_cast<uint16_t>(40000 + i)}));
	auto start = std::chrono::steady_clock::now();
	ASSERT_EQ(send_frames(flood), 600);
	double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	ASSERT_EQ(send_frames(acks), 300);
	ASSERT_EQ(send_frames(other), 30);
	uint64_t pass = passed("syn-flood"), drop = dropped("syn-flood");
	EXPECT_EQ(pass + drop, 630u) << "every SYN charged, no ACK";
	EXPECT_GE(pass, 40u + 30u) << "the flooding source's burst, and the other source's 30";
	EXPECT_LE(pass, 40u + 30u + static_cast<uint64_t>(20 * took) + 2) << "burst + rate x time, over " << took << " s";
	EXPECT_GE(drop, 600u - 40u - static_cast<uint64_t>(20 * took) - 2);
	CommandResult r = cli({"stats", "--json"});
	ASSERT_EQ(r.exit_code, 0);
	EXPECT_EQ(json::parse(r.out)["global"]["pass_no_match"]["packets"], 300u) << "the ACKs pass uncharged";
}

// Memcached replies (port 11211) are dropped, fragmented ones whole; NTP
// replies (port 123) are limited; UDP from other ports is not charged.
TEST_F(Recipes, UdpAmplificationBySourcePort)
{
	for (const auto &cmd : recipe("UDP amplification by source port"))
		add(cmd);
	std::vector<std::vector<uint8_t>> memcached, ntp, others, fragmented;
	for (int i = 0; i < 200; i++) {
		memcached.push_back(build_packet({.src = SOURCE, .dst = DST, .dport = 40000, .payload = 1000, .sport = 11211}));
		ntp.push_back(build_packet({.src = SOURCE, .dst = DST, .dport = 40001, .payload = 400, .sport = 123}));
		others.push_back(build_packet({.src = SOURCE, .dst = DST, .dport = 40000, .payload = 400, .sport = 53}));
	}
	PacketSpec big{.src = SECOND, .dst = DST, .dport = 40000, .frag_id = 7, .payload = 2800, .sport = 11211};
	size_t len = fragmentable_length(big);
	fragmented = build_fragments(big, {{0, 1400, true}, {1400, 1400, true}, {2800, len - 2800, false}});
	auto start = std::chrono::steady_clock::now();
	ASSERT_EQ(send_frames(memcached), 200);
	ASSERT_EQ(send_frames(ntp), 200);
	double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	ASSERT_EQ(send_frames(others), 200);
	ASSERT_EQ(send_frames(fragmented), 3);
	EXPECT_EQ(passed("memcached-amp"), 0u);
	EXPECT_EQ(dropped("memcached-amp"), 203u) << "every reply, every fragment of the fragmented one";
	uint64_t ntp_pass = passed("ntp-replies");
	EXPECT_EQ(ntp_pass + dropped("ntp-replies"), 200u);
	EXPECT_GE(ntp_pass, 5u) << "the default burst";
	EXPECT_LE(ntp_pass, 5u + static_cast<uint64_t>(10 * took) + 2) << "burst + rate x time, over " << took << " s";
	CommandResult r = cli({"stats", "--json"});
	ASSERT_EQ(r.exit_code, 0);
	EXPECT_EQ(json::parse(r.out)["global"]["pass_no_match"]["packets"], 200u) << "other ports uncharged";
}

// Five sources of one /24 each send 60 queries at once, and one source of
// another /24 as many: each source passes its burst of 40 at most, and the
// first /24 as a whole its burst of 100 (and the rates over the time taken);
// the other /24's source is held by its own limit only.
TEST_F(Recipes, APer24AggregateUnderPerSourceLimits)
{
	for (const auto &cmd : recipe("A per-/24 aggregate under per-source limits"))
		add(cmd);
	std::vector<std::vector<uint8_t>> frames;
	for (const char *src : {"10.229.0.11", "10.229.0.12", "10.229.0.13", "10.229.0.14", "10.229.0.15",
				"10.229.1.5"})
		for (int i = 0; i < 60; i++)
			frames.push_back(build_packet({.src = src, .dst = DST, .dport = 53, .payload = 40,
						       .sport = static_cast<uint16_t>(40000 + i)}));
	auto start = std::chrono::steady_clock::now();
	ASSERT_EQ(send_frames(frames), 360);
	double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	auto slack = [took](double rate) { return static_cast<uint64_t>(rate * took) + 2; };
	uint64_t source_pass = passed("dns-per-source"), source_drop = dropped("dns-per-source");
	EXPECT_EQ(source_pass + source_drop, 360u);
	EXPECT_GE(source_pass, 6u * 40u) << "each source's burst";
	EXPECT_LE(source_pass, 6u * (40u + slack(20))) << "burst + rate x time, over " << took << " s";
	uint64_t net_pass = passed("udp-per-24"), net_drop = dropped("udp-per-24");
	EXPECT_EQ(net_pass + net_drop, source_pass) << "the /24 rule sees what the per-source rule passed";
	EXPECT_GE(net_pass, 100u + 40u) << "the first /24's burst, and all the other /24 sent past its own limit";
	EXPECT_LE(net_pass, 100u + slack(100) + 40u + slack(20)) << "the first /24 held to its aggregate";
	EXPECT_GE(net_drop, 5u * 40u - 100u - slack(100) - 5u * slack(20)) << "what five sources' limits let through";
	CommandResult r = cli({"stats", "--json", "--rule", "udp-per-24"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	bool named = false;
	json stats = json::parse(r.out);
	for (const auto &src : stats["sources"])
		named |= src["source"] == "10.229.0.0/24";
	EXPECT_TRUE(named) << "a /24 is one bucket, named by its prefix: " << r.out;
}

// A source that comes back over the limit is banned at its first drop, for
// all its traffic; `sluice bans` lists it, `explain` says so, `ban del`
// lifts it; `sluice events` writes the ban and the unban. A new source over
// the limit at its first burst (on probation) is dropped, not banned.
TEST_F(Recipes, ARepeatOffenderBanned)
{
	auto cmds = recipe("A repeat offender banned");
	ASSERT_EQ(cmds.size(), 4u);
	add(cmds[0]);
	const std::string OFFENDER = "192.0.2.7", NEWCOMER = "192.0.2.8";
	auto udp = [](const std::string &src, uint16_t dport, int n) {
		std::vector<std::vector<uint8_t>> frames;
		for (int i = 0; i < n; i++)
			frames.push_back(build_packet({.src = src, .dst = DST, .dport = dport, .payload = 40, .sport = 5000}));
		return send_frames(frames);
	};
	auto global = [](const char *name) {
		CommandResult r = cli({"stats", "--json"});
		EXPECT_EQ(r.exit_code, 0) << r.err;
		return json::parse(r.out)["global"][name]["packets"].get<uint64_t>();
	};

	ASSERT_EQ(udp(NEWCOMER, 9000, 6), 6);
	ASSERT_EQ(udp(OFFENDER, 9000, 1), 1);
	std::this_thread::sleep_for(std::chrono::milliseconds(1500)); // back after its probation
	ASSERT_EQ(udp(OFFENDER, 9000, 4), 4);
	EXPECT_EQ(passed("offender"), 3u + 3u) << "each source's burst";
	EXPECT_EQ(dropped("offender"), 3u + 1u) << "the newcomer's three, the offender's banning drop";
	EXPECT_EQ(global("drop_ban"), 1u) << "the offender's packet after its ban";

	CommandResult r = cli(cmds[1]); // sluice bans
	ASSERT_EQ(r.exit_code, 0) << r.err;
	EXPECT_NE(r.out.find(OFFENDER + "  offender"), std::string::npos) << r.out;
	EXPECT_EQ(r.out.find(NEWCOMER), std::string::npos) << "a source on probation is not banned: " << r.out;
	r = cli(cmds[2]); // sluice explain 192.0.2.7
	ASSERT_EQ(r.exit_code, 0) << r.err;
	EXPECT_NE(r.out.find("banned: " + OFFENDER + " is banned by rule "), std::string::npos) << r.out;
	EXPECT_NE(r.out.find("(offender) until "), std::string::npos) << r.out;

	ASSERT_EQ(udp(OFFENDER, 40000, 3), 3);
	EXPECT_EQ(global("drop_ban"), 4u) << "a ban covers the source's traffic to any port";

	r = cli(cmds[3]); // sluice ban del 192.0.2.7
	ASSERT_EQ(r.exit_code, 0) << r.err;
	EXPECT_EQ(r.out, "lifted the ban of " + OFFENDER + " after 4 drops\n");
	ASSERT_EQ(udp(OFFENDER, 40000, 3), 3);
	EXPECT_EQ(global("drop_ban"), 4u) << "it passes again";
	EXPECT_EQ(global("pass_no_match"), 3u);

	// The ban and its end, the one the controller wrote as the program writes its own.
	r = cli({"events", "--json", "--timeout", "2s"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	std::istringstream lines(r.out);
	std::vector<json> events; // the throttle events of the drops aside
	for (std::string line; std::getline(lines, line);)
		if (json e = json::parse(line); e["event"] == "ban" || e["event"] == "unban")
			events.push_back(e);
	ASSERT_EQ(events.size(), 2u) << r.out;
	EXPECT_EQ(events[0]["event"], "ban");
	EXPECT_EQ(events[1]["event"], "unban");
	for (const auto &e : events) {
		EXPECT_EQ(e["source"], OFFENDER);
		EXPECT_EQ(e["rule"], "offender");
	}
	EXPECT_EQ(events[1]["since"], events[0]["time"]) << "the unban names when its ban began";

	// Scraped from the agent: the ban made, and lifted by `ban del`.
	AgentProcess agent(SLUICE_BIN, {});
	std::string scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_bans_total"), 1) << scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_bans"), 0);
	EXPECT_EQ(metric_sample(scrape, "sluice_unbans_total{reason=\"deleted\"}"), 1) << scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_unbans_total{reason=\"expired\"}"), 0);
	EXPECT_EQ(metric_sample(scrape, "sluice_unbans_total{reason=\"rule\"}"), 0);
	// Banned again at its next drop, then the rule goes, and its ban with it.
	ASSERT_EQ(udp(OFFENDER, 9000, 2), 2);
	scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_bans_total"), 2) << scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_bans"), 1);
	r = cli({"rule", "del", "offender"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	scrape = agent.scrape();
	EXPECT_EQ(metric_sample(scrape, "sluice_bans"), 0) << scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_unbans_total{reason=\"rule\"}"), 1) << scrape;
	EXPECT_EQ(metric_sample(scrape, "sluice_unbans_total{reason=\"deleted\"}"), 1);
}

// `attach --max-bans N` sizes the ban table like the other tables: status
// and export show it, another size on a loaded program is refused in one
// line, and the exported policy applies as no change.
TEST_F(Selectors, MaxBansIsATableSize)
{
	ASSERT_EQ(cli({"detach", "--all"}).exit_code, 0);
	auto attach = [](const std::string &n) {
		return cli_in(DST_NS, {"attach", DST_IF, "--mode", "native", "--max-bans", n});
	};
	CommandResult r = attach("8");
	ASSERT_EQ(r.exit_code, 0) << r.err;
	r = cli({"status", "--json"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	EXPECT_EQ(json::parse(r.out)["max_bans"], 8u);
	r = cli({"status"});
	EXPECT_NE(r.out.find("bans: 0 of 8\n"), std::string::npos) << r.out;
	r = cli_in(DST_NS, {"export"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	EXPECT_NE(r.out.find("tables:\n  max_bans: 8\n"), std::string::npos) << r.out;
	std::string policy = run_dir() + "-policy.yaml";
	std::ofstream(policy) << r.out;
	CommandResult applied = cli_in(DST_NS, {"apply", policy});
	EXPECT_EQ(applied.exit_code, 0) << applied.err;
	EXPECT_EQ(applied.out, "no changes\n");
	unlink(policy.c_str());
	r = cli_in(DST_NS, {"detach", DST_IF});
	ASSERT_EQ(r.exit_code, 0) << r.err; // the program stays loaded, its tables with it
	r = attach("16");
	EXPECT_EQ(r.exit_code, 1);
	EXPECT_EQ(r.err, "sluice: sluice is loaded with --max-bans 8; change it with `sluice apply` (tables:), which "
			 "keeps the rules, or remove everything with `sluice detach --all`\n");
}
