// SPDX-License-Identifier: GPL-2.0-only
// `sluice top` end to end: the real binary in a detached tmux session of a
// fixed size, watched with capture-pane and driven with send-keys, while a
// namespace sends paced UDP through veth into a limited rule. What is on the
// screen is compared with what was sent and what the rule allows.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli.h"
#include "process.h"
#include "sockaddr.h"

using namespace sluice::test;
using namespace std::chrono_literals;

namespace {

const std::string SRC_NS = "sltop-src", DST_NS = "sltop-dst";
const std::string SRC_IF = "sltop-s", DST_IF = "sltop-d";
const std::string PIN_DIR = "/sys/fs/bpf/sltop";
const std::string DST = "10.201.0.1";
// LIMITED_SRC sends into a 50/s rule at 200/s; OPEN_SRC into a rule it stays under.
const std::string LIMITED_SRC = "10.201.0.11", OPEN_SRC = "10.201.1.11";
constexpr int LIMITED_PPS = 200, OPEN_PPS = 100, LIMIT_PPS = 50;
constexpr uint16_t PORT = 9000;
constexpr size_t PAYLOAD = 64;
constexpr double BITS_PER_PACKET = (PAYLOAD + 8 + 20) * 8; // the kernel counts L3 bytes
// A rate read off one refresh is within this fraction of what was sent or allowed.
constexpr double TOLERANCE = 0.2;

const std::string TMUX_SOCKET = "sltop-" + std::to_string(getpid());
const std::string SESSION = "sltop";

CommandResult cli_dst(std::vector<std::string> args) { return cli_in(DST_NS, std::move(args)); }

CommandResult tmux(std::vector<std::string> args)
{
	args.insert(args.begin(), {"tmux", "-L", TMUX_SOCKET});
	return run_command(args);
}

std::string capture() { return tmux({"capture-pane", "-p", "-t", SESSION}).out; }

void keys(const std::vector<std::string> &k)
{
	std::vector<std::string> args{"send-keys", "-t", SESSION};
	args.insert(args.end(), k.begin(), k.end());
	CommandResult r = tmux(args);
	ASSERT_EQ(r.exit_code, 0) << r.err;
}

/// Captures the pane until `ok` accepts it or `limit` passes; returns the
/// last capture. Polling, not sleeping a fixed time: a slow machine waits longer.
std::string wait_for_screen(const std::function<bool(const std::string &)> &ok, std::chrono::seconds limit,
			    bool &accepted)
{
	auto deadline = std::chrono::steady_clock::now() + limit;
	std::string screen;
	do {
		screen = capture();
		if (ok(screen)) {
			accepted = true;
			return screen;
		}
		std::this_thread::sleep_for(100ms);
	} while (std::chrono::steady_clock::now() < deadline);
	accepted = false;
	return screen;
}

/// The words of the screen line that starts with `first` and a space.
std::vector<std::string> row(const std::string &screen, const std::string &first)
{
	std::istringstream lines(screen);
	for (std::string line; std::getline(lines, line);)
		if (line.rfind(first + " ", 0) == 0) {
			std::vector<std::string> words;
			std::istringstream in(line);
			for (std::string w; in >> w;)
				words.push_back(w);
			return words;
		}
	return {};
}

/// Line number of the first line that is `first` or starts with it and a
/// space, or -1. (capture-pane drops trailing spaces.)
int line_of(const std::string &screen, const std::string &first)
{
	std::istringstream lines(screen);
	int n = 0;
	for (std::string line; std::getline(lines, line); n++)
		if (line == first || line.rfind(first + " ", 0) == 0)
			return n;
	return -1;
}

/// "150", "36.8k", "1.25M" as a number; NaN for anything else ("-").
double parse_si(const std::string &text)
{
	size_t used = 0;
	double v = 0;
	try {
		v = std::stod(text, &used);
	} catch (const std::exception &) {
		return NAN;
	}
	std::string suffix = text.substr(used);
	if (suffix.empty())
		return v;
	if (suffix == "k")
		return v * 1e3;
	if (suffix == "M")
		return v * 1e6;
	return NAN;
}

/// The shell's report after top (see run_top): "top exited N, terminal: FLAGS".
bool top_exited(const std::string &screen) { return line_of(screen, "top exited") >= 0; }
/// stty said "icanon echo", not "-icanon" or "-echo".
bool terminal_restored(const std::string &screen)
{
	return screen.find(", terminal: icanon echo\n") != std::string::npos;
}

bool near(double got, double want) { return std::fabs(got - want) <= TOLERANCE * want; }

/// Pass and drop rates of a row: the last four words, PASS_PKT/S PASS_BIT/S DROP_PKT/S DROP_BIT/S.
struct RowRates {
	double pass_pps = NAN, pass_bps = NAN, drop_pps = NAN, drop_bps = NAN;
};
RowRates rates_of(const std::vector<std::string> &words)
{
	RowRates r;
	if (words.size() < 4)
		return r;
	size_t n = words.size();
	r.pass_pps = parse_si(words[n - 4]);
	r.pass_bps = parse_si(words[n - 3]);
	r.drop_pps = parse_si(words[n - 2]);
	r.drop_bps = parse_si(words[n - 1]);
	return r;
}

/// The limited rule passes LIMIT_PPS and drops the rest of LIMITED_PPS; the
/// open rule passes all of OPEN_PPS.
bool limited_row_right(const std::vector<std::string> &words)
{
	RowRates r = rates_of(words);
	return near(r.pass_pps, LIMIT_PPS) && near(r.pass_bps, LIMIT_PPS * BITS_PER_PACKET) &&
	       near(r.drop_pps, LIMITED_PPS - LIMIT_PPS) && near(r.drop_bps, (LIMITED_PPS - LIMIT_PPS) * BITS_PER_PACKET);
}

bool open_row_right(const std::vector<std::string> &words)
{
	RowRates r = rates_of(words);
	return near(r.pass_pps, OPEN_PPS) && near(r.pass_bps, OPEN_PPS * BITS_PER_PACKET) && r.drop_pps == 0 &&
	       r.drop_bps == 0;
}

/// The header's totals, "total: passed P pkt/s B bit/s, dropped P pkt/s B bit/s; ...":
/// everything sent passes but what the limited rule drops.
bool totals_right(const std::string &screen)
{
	std::vector<std::string> w = row(screen, "total:");
	if (w.size() < 10)
		return false;
	double passed = LIMIT_PPS + OPEN_PPS, dropped = LIMITED_PPS - LIMIT_PPS;
	return near(parse_si(w[2]), passed) && near(parse_si(w[4]), passed * BITS_PER_PACKET) &&
	       near(parse_si(w[7]), dropped) && near(parse_si(w[9]), dropped * BITS_PER_PACKET);
}

/// UDP from both sources, paced on a 10 ms tick, until stop().
class PacedSender {
public:
	void start()
	{
		ASSERT_EQ(pipe(stop_), 0);
		pid_ = fork();
		if (pid_ == 0) {
			close(stop_[1]);
			_exit(in_netns(SRC_NS, [this]() { return run(); }));
		}
		close(stop_[0]);
	}

	void stop()
	{
		if (pid_ <= 0)
			return;
		close(stop_[1]); // the child sees end of file and exits
		waitpid(pid_, nullptr, 0);
		pid_ = -1;
	}

	~PacedSender() { stop(); }

private:
	int run()
	{
		sockaddr_storage to{}, from{};
		socklen_t len = 0;
		make_sockaddr(DST, PORT, to, len);
		int fds[2];
		const std::string sources[2] = {LIMITED_SRC, OPEN_SRC};
		for (int i = 0; i < 2; i++) {
			make_sockaddr(sources[i], 0, from, len);
			fds[i] = socket(AF_INET, SOCK_DGRAM, 0);
			if (fds[i] < 0 || bind(fds[i], reinterpret_cast<sockaddr *>(&from), len))
				return 1;
		}
		std::vector<char> payload(PAYLOAD, 'x');
		auto start = std::chrono::steady_clock::now();
		for (uint64_t tick = 0;; tick++) {
			pollfd p{stop_[0], POLLIN, 0};
			if (poll(&p, 1, 0) != 0)
				return 0;
			// Per 10 ms tick: LIMITED_PPS/100 and OPEN_PPS/100 datagrams.
			for (int i = 0; i < LIMITED_PPS / 100; i++)
				sendto(fds[0], payload.data(), payload.size(), 0, reinterpret_cast<sockaddr *>(&to), len);
			for (int i = 0; i < OPEN_PPS / 100; i++)
				sendto(fds[1], payload.data(), payload.size(), 0, reinterpret_cast<sockaddr *>(&to), len);
			std::this_thread::sleep_until(start + (tick + 1) * 10ms);
		}
	}

	pid_t pid_ = -1;
	int stop_[2] = {-1, -1};
};

void remove_topology() { VethPair{SRC_NS, DST_NS}.remove(); }

class TopEndToEnd : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "end-to-end tests create namespaces and attach XDP: run as root";
		ASSERT_EQ(run_command({"tmux", "-V"}).exit_code, 0) << "tmux is needed (scripts/setup.sh installs it)";
		setenv("SLUICE_PIN_DIR", PIN_DIR.c_str(), 1);
		cli({"detach", "--all"}); // leftovers of an interrupted run
		remove_topology();
		VethPair{SRC_NS, DST_NS, SRC_IF, DST_IF, DST + "/16", {LIMITED_SRC + "/16", OPEN_SRC + "/16"},
			 "02:00:00:00:01"}
			.create();
	}

	void TearDown() override
	{
		sender.stop();
		tmux({"kill-server"});
		cli({"detach", "--all"});
		rmdir(PIN_DIR.c_str());
		rmdir((PIN_DIR + "-lock").c_str()); // the instance's lock, beside it
		remove_topology();
	}

	/// A shell in a detached tmux window of `width` x `height`; commands are typed into it.
	void start_shell(int width, int height)
	{
		CommandResult r = tmux({"-f", "/dev/null", "new-session", "-d", "-s", SESSION, "-x",
					std::to_string(width), "-y", std::to_string(height), "env", "-i",
					"TERM=xterm-256color", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
					"SLUICE_PIN_DIR=" + PIN_DIR, "PS1=$ ", "bash", "--norc", "--noprofile"});
		ASSERT_EQ(r.exit_code, 0) << r.err;
	}

	/// The pid of sluice top: the child of the shell's child, `bash -c` (see run_top), or 0.
	pid_t top_pid()
	{
		std::string pid = tmux({"display-message", "-p", "-t", SESSION, "#{pane_pid}"}).out;
		for (int level = 0; level < 2; level++) {
			CommandResult r = run_command({"pgrep", "-P", pid.substr(0, pid.find('\n'))});
			if (r.exit_code != 0)
				return 0;
			pid = r.out;
		}
		return static_cast<pid_t>(std::stol(pid));
	}

	/// Types `sluice top ARGS` into the shell. When top ends, one line says
	/// how, and how the terminal is left: "top exited 0, terminal: icanon
	/// echo" (canonical mode and echo on, as before). The inner bash -c carries
	/// on after its child dies of SIGINT, where an interactive shell would
	/// drop the rest of the line.
	void run_top(const std::string &args)
	{
		keys({"clear; bash -c 'nsenter --net=/run/netns/" + DST_NS + " " + SLUICE_BIN + " top " + args +
			      "; rc=$?; flags=$(stty -a | grep -o -- \"-\\?icanon\\|-\\?echo \" | tr \"\\n\" \" \"); "
			      "echo \"top exited $rc, terminal: $flags\"'",
		      "Enter"});
	}

	PacedSender sender;
};

} // namespace

TEST_F(TopEndToEnd, ShowsRuleAndSourceRatesSortsByKeyAndQuitsRestoringTheTerminal)
{
	ASSERT_EQ(cli_dst({"attach", DST_IF}).exit_code, 0);
	ASSERT_EQ(cli({"rule", "add", "10.201.0.0/24", "--rate", std::to_string(LIMIT_PPS) + "/s", "--burst", "10",
		       "--proto", "udp", "--name", "limited"})
			  .exit_code,
		  0);
	ASSERT_EQ(cli({"rule", "add", "10.201.1.0/24", "--rate", "10000/s", "--name", "open"}).exit_code, 0);

	start_shell(120, 40);
	run_top("");
	sender.start();

	bool ok = false;
	// Every refresh once traffic has settled: the limited rule's and its
	// source's pass and drop rates, the open rule's pass rate.
	std::string screen = wait_for_screen(
		[](const std::string &s) {
			return limited_row_right(row(s, "limited")) && limited_row_right(row(s, LIMITED_SRC)) &&
			       open_row_right(row(s, "open")) && open_row_right(row(s, OPEN_SRC)) && totals_right(s);
		},
		30s, ok);
	ASSERT_TRUE(ok) << "the rates never matched the traffic:\n" << screen;
	std::cout << "sluice top showed:\n" << screen;
	EXPECT_NE(screen.find("interfaces: " + DST_IF + " (native)"), std::string::npos) << screen;
	EXPECT_NE(screen.find("sort: DROP_PKT/S, largest first"), std::string::npos) << screen;
	EXPECT_NE(screen.find("2 rules, 2 sources tracked"), std::string::npos) << screen;
	EXPECT_EQ(row(screen, "limited")[1], "50/s");
	// Sorted by drops: the limited rule and source above the open ones.
	EXPECT_LT(line_of(screen, "limited"), line_of(screen, "open")) << screen;
	EXPECT_LT(line_of(screen, LIMITED_SRC), line_of(screen, OPEN_SRC)) << screen;

	// `p` sorts by passed packets: the open rule and its source come first.
	keys({"p"});
	screen = wait_for_screen(
		[](const std::string &s) {
			return s.find("sort: PASS_PKT/S, largest first") != std::string::npos &&
			       s.find("PASS_PKT/S*") != std::string::npos && line_of(s, "open") >= 0 &&
			       line_of(s, "open") < line_of(s, "limited") && line_of(s, OPEN_SRC) >= 0 &&
			       line_of(s, OPEN_SRC) < line_of(s, LIMITED_SRC);
		},
		10s, ok);
	EXPECT_TRUE(ok) << "p did not sort by passed packets:\n" << screen;
	// `r` reverses it.
	keys({"r"});
	screen = wait_for_screen(
		[](const std::string &s) {
			return s.find("sort: PASS_PKT/S, smallest first") != std::string::npos &&
			       line_of(s, "limited") >= 0 && line_of(s, "limited") < line_of(s, "open");
		},
		10s, ok);
	EXPECT_TRUE(ok) << "r did not reverse the order:\n" << screen;

	// A window too small for the tables says so; grown again, they are back.
	ASSERT_EQ(tmux({"resize-window", "-t", SESSION, "-x", "50", "-y", "8"}).exit_code, 0);
	screen = wait_for_screen(
		[](const std::string &s) { return s.find("window too small (50x8)") != std::string::npos; }, 10s, ok);
	EXPECT_TRUE(ok) << screen;
	ASSERT_EQ(tmux({"resize-window", "-t", SESSION, "-x", "120", "-y", "40"}).exit_code, 0);
	screen = wait_for_screen([](const std::string &s) { return line_of(s, "limited") >= 0; }, 10s, ok);
	EXPECT_TRUE(ok) << screen;

	pid_t top = top_pid();
	ASSERT_GT(top, 0) << "sluice top is not running";
	keys({"q"});
	screen = wait_for_screen(
		top_exited, 10s, ok);
	ASSERT_TRUE(ok) << "q did not end sluice top:\n" << screen;
	EXPECT_NE(screen.find("top exited 0"), std::string::npos) << screen;
	EXPECT_TRUE(terminal_restored(screen)) << "terminal not restored:\n" << screen;
	EXPECT_EQ(screen.find("DROP_PKT/S"), std::string::npos) << "still on the alternate screen:\n" << screen;
	EXPECT_NE(kill(top, 0), 0) << "the process is gone";
}

TEST_F(TopEndToEnd, CtrlCQuitsAndSignalsRestoreTheTerminalAndEndTheProcessBySignal)
{
	ASSERT_EQ(cli_dst({"attach", DST_IF}).exit_code, 0);
	start_shell(100, 30);
	// Ctrl-C is a key in raw mode: it quits as q does.
	run_top("");
	bool ok = false;
	std::string screen = wait_for_screen(
		[](const std::string &s) { return s.find("no rules; add one") != std::string::npos; }, 10s, ok);
	ASSERT_TRUE(ok) << screen;
	keys({"C-c"});
	screen = wait_for_screen(top_exited, 10s, ok);
	ASSERT_TRUE(ok) << screen;
	EXPECT_NE(screen.find("top exited 0, terminal: icanon echo"), std::string::npos) << screen;

	for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
		SCOPED_TRACE(sig);
		run_top("--interval 0.2");
		bool ok = false;
		std::string screen = wait_for_screen(
			[](const std::string &s) { return s.find("no rules; add one") != std::string::npos; }, 10s, ok);
		ASSERT_TRUE(ok) << screen;
		pid_t top = top_pid();
		ASSERT_GT(top, 0);
		ASSERT_EQ(kill(top, sig), 0);
		screen = wait_for_screen(
			top_exited, 10s, ok);
		ASSERT_TRUE(ok) << screen;
		EXPECT_NE(screen.find("top exited " + std::to_string(128 + sig)), std::string::npos) << screen;
		EXPECT_TRUE(terminal_restored(screen)) << "terminal not restored:\n" << screen;
	}
}

TEST_F(TopEndToEnd, ADetachWhileItRunsEndsItWithOneLineAndTheTerminalRestored)
{
	ASSERT_EQ(cli_dst({"attach", DST_IF}).exit_code, 0);
	start_shell(100, 30);
	run_top("--interval 0.2");
	bool ok = false;
	std::string screen = wait_for_screen(
		[](const std::string &s) { return s.find("no rules; add one") != std::string::npos; }, 10s, ok);
	ASSERT_TRUE(ok) << screen;
	ASSERT_EQ(cli({"detach", "--all"}).exit_code, 0);
	screen = wait_for_screen(top_exited, 10s, ok);
	ASSERT_TRUE(ok) << screen;
	EXPECT_NE(screen.find("sluice: sluice is not attached to any interface; run `sluice attach IFACE`\ntop "
			      "exited 1, terminal: icanon echo"),
		  std::string::npos)
		<< screen;
}

TEST_F(TopEndToEnd, OnceReportsRatesForScripts)
{
	ASSERT_EQ(cli_dst({"attach", DST_IF}).exit_code, 0);
	ASSERT_EQ(cli({"rule", "add", "10.201.0.0/24", "--rate", std::to_string(LIMIT_PPS) + "/s", "--burst", "10",
		       "--proto", "udp", "--name", "limited"})
			  .exit_code,
		  0);
	ASSERT_EQ(cli({"rule", "add", "10.201.1.0/24", "--rate", "10000/s", "--name", "open"}).exit_code, 0);
	sender.start();
	// The first report may span the traffic's start; a later one must match.
	CommandResult r;
	bool matched = false;
	for (int attempt = 0; attempt < 10 && !matched; attempt++) {
		r = cli_dst({"top", "--once", "--interval", "2s", "--sort", "pass-pps"});
		ASSERT_EQ(r.exit_code, 0) << r.err;
		matched = limited_row_right(row(r.out, "limited")) && open_row_right(row(r.out, "open"));
	}
	EXPECT_TRUE(matched) << r.out;
	EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "no escape sequences in a report";
	EXPECT_NE(r.out.find("every 2s - interfaces: " + DST_IF + " (native)"), std::string::npos) << r.out;
	EXPECT_LT(line_of(r.out, "open"), line_of(r.out, "limited")) << r.out;
	EXPECT_EQ(r.out.find("[q quit"), std::string::npos) << r.out;
}

TEST_F(TopEndToEnd, BadInputAndNoStateAreOneLineAndANonZeroExit)
{
	// Nothing loaded: the same hint as every other command.
	CommandResult r = cli({"top", "--once"});
	EXPECT_EQ(r.exit_code, 1);
	EXPECT_EQ(r.err, "sluice: sluice is not attached to any interface; run `sluice attach IFACE`\n");
	EXPECT_EQ(r.out, "");

	const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
		{{"top", "--interval", "0"}, "sluice: --interval must be from 100ms to 1h, not '0'\n"},
		{{"top", "--interval", "abc"},
		 "sluice: invalid --interval 'abc': seconds (1, 0.5) or a duration (500ms, 2s)\n"},
		{{"top", "--interval", "2h"}, "sluice: --interval must be from 100ms to 1h, not '2h'\n"},
		{{"top", "--sort", "drops"},
		 "sluice: unknown sort key 'drops': one of name, pass-pps, pass-bps, drop-pps, drop-bps\n"},
		{{"top"}, "sluice: top needs a terminal on standard input and output; `sluice top --once` prints "
			  "one report\n"},
	};
	for (const auto &[args, message] : bad) {
		SCOPED_TRACE(args.back());
		r = cli(args);
		EXPECT_NE(r.exit_code, 0);
		EXPECT_EQ(r.err, message);
	}
	// In a terminal too: the line is printed on a terminal left as it was.
	start_shell(100, 30);
	run_top("");
	bool ok = false;
	std::string screen = wait_for_screen(
		top_exited, 10s, ok);
	ASSERT_TRUE(ok) << screen;
	EXPECT_NE(screen.find("sluice: sluice is not attached to any interface"), std::string::npos) << screen;
	EXPECT_NE(screen.find("top exited 1"), std::string::npos) << screen;
	EXPECT_TRUE(terminal_restored(screen)) << screen;
}
