// SPDX-License-Identifier: GPL-2.0-only
// Sharing the XDP hook end to end, over veth with real traffic: another XDP
// program chained after Sluice (`attach --then`), Sluice run from another
// loader's program array (`attach --prog-array`), each doing its own job, and
// libxdp's dispatcher refused plainly where the kernel cannot run it.
#include <gtest/gtest.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "chain.h"
#include "chain_test_bpf.skel.h"
#include "cli.h"
#include "process.h"
#include "sockaddr.h"

using namespace sluice::test;
using nlohmann::json;

namespace {

const std::string SRC_NS = "slch-src", DST_NS = "slch-dst";
const std::string SRC_IF = "slch-s", DST_IF = "slch-d";
const std::string PIN_DIR = "/sys/fs/bpf/slch";
const std::string ROOT_PIN = "/sys/fs/bpf/slch-root", JMP_PIN = "/sys/fs/bpf/slch-jmp";
const std::string DST = "10.203.0.1", DENIED = "10.203.0.11", OPEN = "10.203.0.12";
const VethPair TOPOLOGY{SRC_NS, DST_NS, SRC_IF, DST_IF, DST + "/16", {DENIED + "/16", OPEN + "/16"},
			"02:00:00:00:03"};
constexpr uint16_t OPEN_PORT = 8888, FILTERED_PORT = 7777; // chain_test.bpf.c drops 7777
enum { SEEN, FILTERED, ROOT_EMPTY_SLOT };

CommandResult cli_dst(std::vector<std::string> args) { return cli_in(DST_NS, std::move(args)); }

json status()
{
	CommandResult r = cli_dst({"status", "--json"});
	EXPECT_EQ(r.exit_code, 0) << r.err;
	return json::parse(r.out);
}

/// Datagrams that reach a socket on DST:port while `send` runs (at most 254).
int arrivals(uint16_t port, const std::function<void()> &send)
{
	int arrived = -1;
	std::thread receiver([&] { arrived = count_udp_arrivals(DST_NS, DST, port, 700); });
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	send();
	receiver.join();
	return arrived;
}

int send_from(const std::string &src, uint16_t port, int n)
{
	return arrivals(port, [&] { EXPECT_EQ(send_udp_in(SRC_NS, src, DST, port, n, 32), n); });
}

/// The counters of a loaded chain_test program, found by its id.
std::vector<uint64_t> counts_of_prog(uint32_t prog_id)
{
	int prog = bpf_prog_get_fd_by_id(prog_id);
	EXPECT_GE(prog, 0);
	uint32_t map_ids[4] = {};
	struct bpf_prog_info info = {};
	info.nr_map_ids = 4;
	info.map_ids = reinterpret_cast<__u64>(map_ids);
	__u32 len = sizeof(info);
	EXPECT_EQ(bpf_obj_get_info_by_fd(prog, &info, &len), 0);
	close(prog);
	for (uint32_t i = 0; i < info.nr_map_ids && i < 4; i++) {
		int fd = bpf_map_get_fd_by_id(map_ids[i]);
		struct bpf_map_info mi = {};
		__u32 ml = sizeof(mi);
		bpf_obj_get_info_by_fd(fd, &mi, &ml);
		if (std::string(mi.name) == "chain_counts") {
			std::vector<uint64_t> out(3);
			for (uint32_t k = 0; k < 3; k++)
				bpf_map_lookup_elem(fd, &k, &out[k]);
			close(fd);
			return out;
		}
		close(fd);
	}
	ADD_FAILURE() << "program " << prog_id << " has no chain_counts map";
	return {0, 0, 0};
}

class Chaining : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "end-to-end tests create namespaces and attach XDP: run as root";
		setenv("SLUICE_PIN_DIR", PIN_DIR.c_str(), 1);
		TearDown(); // leftovers of an interrupted run
		TOPOLOGY.create();
	}

	void TearDown() override
	{
		cli_in(DST_NS, {"detach", "--all"});
		run_command({"ip", "-n", DST_NS, "link", "set", "dev", DST_IF, "xdp", "off"});
		unlink(ROOT_PIN.c_str());
		unlink(JMP_PIN.c_str());
		rmdir(PIN_DIR.c_str());
		rmdir((PIN_DIR + "-lock").c_str()); // the instance's lock, beside it
		TOPOLOGY.remove();
	}
};

TEST_F(Chaining, ThenHandsWhatSluicePassesToTheNextProgramAndEachDoesItsJob)
{
	// A bad program changes nothing.
	CommandResult bad = cli_dst({"attach", DST_IF, "--then", "/nonexistent/prog.o"});
	EXPECT_NE(bad.exit_code, 0);
	EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
	EXPECT_FALSE(status()["loaded"].get<bool>()) << "a refused attach loads nothing";

	CommandResult r = cli_dst({"attach", DST_IF, "--then", std::string(CHAIN_TEST_OBJ) + ":port_filter"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	ASSERT_EQ(cli_dst({"rule", "add", DENIED, "--deny", "--name", "deny"}).exit_code, 0);
	json s = status();
	ASSERT_EQ(s["links"].size(), 1u);
	uint32_t next = s["links"][0]["then_prog_id"];
	ASSERT_NE(next, 0u);
	EXPECT_NE(cli_dst({"status"}).out.find("then port_filter"), std::string::npos) << cli_dst({"status"}).out;

	EXPECT_EQ(send_from(OPEN, OPEN_PORT, 20), 20) << "passed by sluice and by the next program";
	EXPECT_EQ(send_from(OPEN, FILTERED_PORT, 20), 0) << "passed by sluice, dropped by the next program";
	EXPECT_EQ(send_from(DENIED, OPEN_PORT, 20), 0) << "dropped by sluice: the next program never sees it";
	std::vector<uint64_t> c = counts_of_prog(next);
	EXPECT_EQ(c[FILTERED], 20u);
	EXPECT_GE(c[SEEN], 40u);
	EXPECT_LT(c[SEEN], 60u) << "the denied source's datagrams did not reach the next program";

	// An upgrade keeps the chain.
	CommandResult up = cli_dst({"upgrade"});
	ASSERT_EQ(up.exit_code, 0) << up.err;
	json after = status();
	EXPECT_EQ(after["links"][0]["then_prog_id"], next);
	EXPECT_EQ(send_from(OPEN, FILTERED_PORT, 10), 0) << "still chained after the upgrade";
	EXPECT_EQ(send_from(DENIED, OPEN_PORT, 10), 0);

	// Detached, the chain goes with the link.
	ASSERT_EQ(cli_dst({"detach", DST_IF}).exit_code, 0);
	EXPECT_EQ(send_from(OPEN, FILTERED_PORT, 5), 5);
}

TEST_F(Chaining, SluiceRunsFromAnotherLoadersProgramArray)
{
	struct chain_test_bpf *skel = chain_test_bpf__open_and_load();
	ASSERT_NE(skel, nullptr);
	ASSERT_EQ(bpf_obj_pin(bpf_program__fd(skel->progs.root), ROOT_PIN.c_str()), 0);
	ASSERT_EQ(bpf_obj_pin(bpf_map__fd(skel->maps.root_jmp), JMP_PIN.c_str()), 0);
	// nsenter, not `ip -n`: that remounts /sys, and the pin would not be found.
	shell("nsenter --net=/run/netns/" + DST_NS + " ip link set dev " + DST_IF + " xdp pinned " + ROOT_PIN);
	auto empty_slot = [&] {
		uint32_t k = ROOT_EMPTY_SLOT;
		uint64_t v = 0;
		bpf_map_lookup_elem(bpf_map__fd(skel->maps.chain_counts), &k, &v);
		return v;
	};

	// The interface's hook is taken: a plain attach says how to share it.
	CommandResult taken = cli_dst({"attach", DST_IF});
	EXPECT_NE(taken.exit_code, 0);
	EXPECT_EQ(std::count(taken.err.begin(), taken.err.end(), '\n'), 1) << taken.err;
	EXPECT_NE(taken.err.find("root"), std::string::npos) << taken.err;
	EXPECT_NE(taken.err.find("--then"), std::string::npos) << taken.err;
	EXPECT_NE(taken.err.find("--multiprog"), std::string::npos) << taken.err;

	CommandResult r = cli_dst({"attach", "--prog-array", JMP_PIN, "--index", "0"});
	ASSERT_EQ(r.exit_code, 0) << r.err;
	ASSERT_EQ(cli_dst({"rule", "add", DENIED, "--deny", "--name", "deny"}).exit_code, 0);
	json s = status();
	ASSERT_EQ(s["prog_arrays"].size(), 1u);
	EXPECT_EQ(s["prog_arrays"][0]["prog_id"], s["prog_id"]);
	EXPECT_EQ(s["prog_arrays"][0]["map_name"], "root_jmp");

	uint64_t before = empty_slot(); // frames of the interfaces' start (IPv6 neighbour discovery)
	EXPECT_EQ(send_from(OPEN, OPEN_PORT, 20), 20);
	EXPECT_EQ(send_from(DENIED, OPEN_PORT, 20), 0) << "sluice, called from the root program, drops it";
	EXPECT_EQ(empty_slot(), before) << "every packet went on to sluice";
	std::string deny_stats = cli_dst({"stats", "--json"}).out;
	EXPECT_EQ(json::parse(deny_stats)["global"]["drop_deny"]["packets"], 20u) << deny_stats;

	// An upgrade moves the slot to the new program.
	uint32_t old_prog = s["prog_id"];
	CommandResult up = cli_dst({"upgrade"});
	ASSERT_EQ(up.exit_code, 0) << up.err;
	json after = status();
	EXPECT_NE(after["prog_id"], old_prog);
	EXPECT_EQ(after["prog_arrays"][0]["prog_id"], after["prog_id"]);
	EXPECT_EQ(send_from(DENIED, OPEN_PORT, 10), 0) << "the new program, in the slot, drops it";
	EXPECT_EQ(empty_slot(), before);

	// A second install in the same slot, or one into something that is no program array, is refused.
	EXPECT_NE(cli_dst({"attach", "--prog-array", JMP_PIN, "--index", "0"}).exit_code, 0);
	EXPECT_NE(cli_dst({"attach", "--prog-array", ROOT_PIN, "--index", "1"}).exit_code, 0);

	// Taken out: the root program finds its slot empty, the denied source gets through.
	ASSERT_EQ(cli_dst({"detach", "--prog-array", JMP_PIN, "--index", "0"}).exit_code, 0);
	EXPECT_FALSE(status()["attached"].get<bool>()) << "the last placement gone, attached nowhere";
	EXPECT_TRUE(status()["loaded"].get<bool>()) << "the rules are kept until `detach --all`";
	EXPECT_EQ(send_from(DENIED, OPEN_PORT, 20), 20);
	EXPECT_GE(empty_slot(), before + 20);
	chain_test_bpf__destroy(skel);
}

TEST_F(Chaining, MultiprogIsRefusedPlainlyWhereLibxdpWouldFallBackToOneProgram)
{
	CommandResult r = cli_dst({"attach", DST_IF, "--multiprog", "--priority", "10"});
	EXPECT_NE(r.exit_code, 0);
	EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
	if (!sluice::kernel_has_trampolines()) {
		EXPECT_NE(r.err.find("no BPF trampolines"), std::string::npos) << r.err;
	}
	EXPECT_FALSE(status()["loaded"].get<bool>());
	EXPECT_EQ(run_command({"ip", "-n", DST_NS, "link", "show", DST_IF}).out.find("xdp"), std::string::npos)
		<< "nothing was attached";
}

} // namespace
