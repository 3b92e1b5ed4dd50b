// SPDX-License-Identifier: GPL-2.0-only
// The source tables under the test clock: which bucket is evicted, what the
// eviction counters say, and what a flood of spoofed sources can do to a
// limited source, with every packet's time set by the test.
#include <gtest/gtest.h>

#include <linux/bpf.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "packet.h"
#include "replay.h"
#include "rule_table.h"
#include "sluice_algos.h"
#include "sources.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t MS = 1000000ULL, SEC = 1000 * MS;

RuleSpec limit_rule(const char *rate = "1000/s", uint64_t burst = 100)
{
	RuleSpec r;
	r.cidr = parse_cidr("10.0.0.0/8");
	r.rate = parse_rate(rate);
	r.burst = burst;
	r.name = "limit";
	validate_rule(r);
	return r;
}

bool tracked(const Stats &s, uint32_t source)
{
	return std::any_of(s.sources.begin(), s.sources.end(),
			   [&](const SourceStats &x) { return x.source == source_address(source); });
}

} // namespace

// A CPU whose coarse clock reads 4 ms behind another's finds the way that CPU
// stamped "in the future". That way is the freshest of its set, not 2^32
// stamps old: the new bucket evicts a way idle for 504 ms, and since that one
// was seen within the last second, the eviction is counted as active.
TEST(SourceTable, AWayStampedAheadOfTheClockIsTheFreshestNotTheOldest)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	Replayer kernel(limit_rule(), TableSizes{4, 64, 64}); // one set of four ways
	const uint64_t t = TRACE_START_NS + 10 * SEC;
	Trace before;
	for (uint32_t src : {0u, 1u, 2u}) // two packets each: on probation, but returned
		for (int i = 0; i < 2; i++)
			before.push_back({t - 504 * MS, src});
	for (int i = 0; i < 2; i++)
		before.push_back({t + 4 * MS, 3}); // stamped by a clock 4 ms ahead
	kernel.run(before);
	kernel.run({{t, 4}}); // a new source, on the clock that lags

	Stats s = collect_stats(kernel.maps(), {});
	EXPECT_TRUE(tracked(s, 3)) << "the freshest way was evicted";
	EXPECT_TRUE(tracked(s, 4));
	EXPECT_EQ(s.tracked_sources, 4u);
	EXPECT_EQ(s.global[SLUICE_CNT_INFO_EVICTED].packets, 1u);
	EXPECT_EQ(s.global[SLUICE_CNT_INFO_EVICTED_ACTIVE].packets, 1u) << "a source idle for 504 ms is active";
}

// The signal that the table is too small must fire when it is: 3,514 sources,
// each sending 140 packets a second, share a 1,024-bucket table. Every bucket
// evicted belongs to a source that sent within the last 7 ms, on probation or
// not, so every eviction is of an active source.
TEST(SourceTable, EvictedActiveFiresWhenTheTableIsTooSmallForTheActiveSources)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	const uint32_t sources = 3514;
	Replayer kernel(limit_rule(), TableSizes{1024, 64, 64});
	Trace flood = constant_flood(140.0 * sources, 2 * SEC, sources);
	kernel.run(flood);

	Stats s = collect_stats(kernel.maps(), {});
	uint64_t evicted = s.global[SLUICE_CNT_INFO_EVICTED].packets;
	uint64_t active = s.global[SLUICE_CNT_INFO_EVICTED_ACTIVE].packets;
	std::printf("%u sources at 140 pps in 1,024 buckets: %zu packets, %llu evicted, %llu of them active\n",
		    sources, flood.size(), (unsigned long long)evicted, (unsigned long long)active);
	EXPECT_GT(evicted, flood.size() / 2) << "most packets find their bucket gone";
	EXPECT_GE(double(active), 0.99 * double(evicted)) << "the table-too-small signal";
	EXPECT_LE(active, evicted);
}

// Quiet sources are evicted without being counted as active.
TEST(SourceTable, EvictingSourcesIdleForMoreThanASecondIsNotActive)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	Replayer kernel(limit_rule(), TableSizes{4, 64, 64});
	const uint64_t t = TRACE_START_NS + 10 * SEC;
	Trace trace;
	for (uint32_t src = 0; src < 4; src++) {
		trace.push_back({t, src});
		if (src % 2)
			trace.push_back({t, src}); // two of them leave probation
	}
	for (uint32_t src = 4; src < 8; src++)
		trace.push_back({t + 2200 * MS, src});
	kernel.run(trace);
	Stats s = collect_stats(kernel.maps(), {});
	EXPECT_EQ(s.global[SLUICE_CNT_INFO_EVICTED].packets, 4u);
	EXPECT_EQ(s.global[SLUICE_CNT_INFO_EVICTED_ACTIVE].packets, 0u);
}

namespace {

void pin_this_thread(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

int run_frame(int prog_fd, const std::vector<uint8_t> &frame, int repeat)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_size_in = static_cast<__u32>(frame.size()),
		    .repeat = repeat);
	return bpf_prog_test_run_opts(prog_fd, &opts) ? -1 : static_cast<int>(opts.retval);
}

} // namespace

// Defect 6 of issue 8: CPU 0 charges source A while CPU 1 keeps evicting A's
// way for new sources B (a table of one set, and CPU 1's clock 10 s ahead, so
// A is always the oldest way CPU 1 sees). A charge begun on A must never land
// on the B that took its way: every bucket's bytes stay a multiple of its own
// packet size, and a B's arrival time is exactly its one packet's cost past
// its creation. The test build wastes 1,000 reads between finding a bucket
// and charging it, so the eviction lands in that window often (without it the
// previous program showed the race once in 200,000 evictions here).
TEST(SourceTable, AChargeLandsOnlyOnTheBucketOfTheKeyLookedUp)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "the race needs two CPUs";
	RuleSpec r = limit_rule("1000000/s", 1000000);
	Replayer kernel(r, TableSizes{4, 64, 64});
	const uint64_t t0 = TRACE_START_NS, t1 = TRACE_START_NS + 10 * SEC;
	kernel.set_clocks({t0, t1});
	kernel.set_race_window(1000);
	struct sluice_rule dp = RuleTable(kernel.maps()).datapath_rule(0);
	ASSERT_NE(dp.id, 0u);
	const uint64_t inc = sluice_cost_ticks(dp.bucket.inc_mult, dp.inc_shift, 1);

	const std::string a_src = "10.200.0.1";
	const uint32_t a_len = 128, b_len = 328; // IP lengths: 100 and 300 bytes of UDP payload
	std::vector<uint8_t> a_frame = build_packet({.src = a_src, .payload = a_len - 28});
	std::atomic<bool> stop{false};
	std::atomic<int> ready{0};
	std::atomic<uint64_t> charger_calls{0};
	std::thread charger([&] {
		pin_this_thread(0);
		ready++;
		while (ready < 2) {
		}
		while (!stop) {
			run_frame(kernel.prog_fd(), a_frame, 2000);
			charger_calls++;
		}
	});

	SourceTable4 table(kernel.maps().src4.get());
	pin_this_thread(1);
	ready++;
	while (ready < 2) {
	}
	const uint32_t churn = 100000;
	uint64_t bad_bytes = 0, bad_tat = 0, checked = 0, a_seen = 0;
	std::string first_bad;
	for (uint32_t i = 0; i < churn; i++) {
		std::vector<uint8_t> b = build_packet({.src = source_address(i), .payload = b_len - 28});
		run_frame(kernel.prog_fd(), b, 1);
		table.for_each([&](uint32_t, const uint8_t *addr, const struct sluice_source_state &st) {
			char text[16];
			std::snprintf(text, sizeof(text), "%u.%u.%u.%u", addr[0], addr[1], addr[2], addr[3]);
			bool is_a = a_src == text;
			uint64_t len = is_a ? a_len : b_len;
			uint64_t pb = sluice_cnt_value(st.cnt.passed_bytes), db = sluice_cnt_value(st.cnt.dropped_bytes);
			checked++;
			a_seen += is_a;
			if (pb % len || db % len) {
				if (first_bad.empty())
					first_bad = std::string(text) + ": passed bytes " + std::to_string(pb) +
						    ", dropped bytes " + std::to_string(db);
				bad_bytes++;
			}
			if (!is_a && st.word - st.algo.gcra.off != sluice_ns_to_ticks(t1) + inc)
				bad_tat++;
		});
	}
	stop = true;
	charger.join();
	Stats totals = collect_stats(kernel.maps(), {});
	std::printf("charger calls %llu; packets: %llu passed, %llu dropped; %llu buckets created\n",
		    (unsigned long long)charger_calls.load(),
		    (unsigned long long)totals.global[SLUICE_CNT_PASS_LIMIT].packets,
		    (unsigned long long)totals.global[SLUICE_CNT_DROP_RATE].packets,
		    (unsigned long long)totals.global[SLUICE_CNT_INFO_NEW_BUCKET].packets);
	std::printf("%u evictions of a way CPU 0 was charging: %llu buckets read (%llu of A), %llu with another "
		    "source's bytes, %llu B arrival times moved by A\n",
		    churn, (unsigned long long)checked, (unsigned long long)a_seen, (unsigned long long)bad_bytes,
		    (unsigned long long)bad_tat);
	EXPECT_GT(a_seen, churn / 1000) << "A kept coming back: the race was run";
	EXPECT_EQ(bad_bytes, 0u) << "a charge of A landed on a B, e.g. " << first_bad;
	EXPECT_EQ(bad_tat, 0u) << "A's compare-and-swap advanced a B's arrival time";
}

// ---- Issue 8, defect 8: spoofed sources must not reset a limit.
//
// An established source (sending for more than a second) is limited; then a
// flood of spoofed sources five times the table, each sending k packets at
// once, passes through it within 0.2 s. Every packet of the established
// source during and after the flood must be dropped: a fresh bucket would
// pass it.

namespace {

struct Spoofing {
	std::string established;                        ///< its address
	std::function<std::string(uint32_t)> spoofed;   ///< the i-th spoofed address
	uint8_t proto = 17;
	uint16_t dport = 53;
};

struct FloodResult {
	uint64_t established_passed = 0; ///< of its packets during and after the flood
	uint64_t established_sent = 0;
	uint64_t evicted = 0;
	uint64_t failopen = 0;
};

/// The established source sends `burst + 1` packets at t, one more 1.5 s
/// later (it has been sending for more than a second: off probation), then
/// one per `every` spoofed sources (more than the table holds: an LRU would
/// have forgotten it) while `sources` spoofed sources send `k` packets each
/// (10 us apart), and one after. What it passed after its burst.
FloodResult spoofed_flood(Replayer &kernel, const Spoofing &s, uint64_t burst, uint32_t sources, int k,
			  uint32_t every = 5000)
{
	auto frame = [&](const std::string &src) {
		return build_packet({.src = src, .proto = s.proto, .dport = s.dport});
	};
	const std::vector<uint8_t> mine = frame(s.established);
	uint64_t t = TRACE_START_NS + 10 * SEC;
	FloodResult r;
	uint64_t passed = 0;
	for (uint64_t i = 0; i <= burst; i++)
		passed += kernel.send(mine, t);
	EXPECT_EQ(passed, burst) << "its burst, then a drop";
	t += 1500 * MS;
	auto established_sends = [&] {
		r.established_passed += kernel.send(mine, t);
		r.established_sent++;
	};
	established_sends();
	for (uint32_t i = 0; i < sources; i++) {
		const std::vector<uint8_t> spoof = frame(s.spoofed(i));
		t += 10000;
		for (int j = 0; j < k; j++)
			kernel.send(spoof, t);
		if (i % every == every - 1)
			established_sends();
	}
	established_sends();
	Stats st = collect_stats(kernel.maps(), {});
	r.evicted = st.global[SLUICE_CNT_INFO_EVICTED].packets;
	r.failopen = st.global[SLUICE_CNT_FAILOPEN_TABLE].packets;
	return r;
}

std::string v6_slash64(uint32_t i)
{
	char buf[64];
	std::snprintf(buf, sizeof(buf), "2001:db8:%x:%x::1", (i >> 16) + 1, i & 0xffff);
	return buf;
}

RuleSpec rule_of(const char *cidr, const char *rate, uint64_t burst, Algo algo = Algo::token_bucket)
{
	RuleSpec r;
	r.name = "limited";
	r.cidr = parse_cidr(cidr);
	r.rate = parse_rate(rate);
	r.burst = burst;
	r.algo = algo;
	validate_rule(r);
	return r;
}

} // namespace

// A strict per-source SYN limit on port 22. Before: the sliding log was an LRU hash with no
// probation, and 20,000 spoofed SYNs gave the limited source 5 fresh passes.
TEST(SpoofedFlood, AnEstablishedSlidingLogSourceGetsNoFreshPassFromOneAndTwoPacketSpoofs)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	for (int k : {1, 2}) {
		SCOPED_TRACE("spoofed sources sending " + std::to_string(k) + " SYNs each");
		RuleSpec r = rule_of("0.0.0.0/0", "5/min", 0, Algo::sliding_log);
		r.proto = Proto::tcp;
		r.dport = {22, 22};
		validate_rule(r);
		Replayer kernel(r, TableSizes{4096, 64, 4096});
		Spoofing s{"198.51.100.7", [](uint32_t i) { return source_address(i); }, 6, 22};
		FloodResult f = spoofed_flood(kernel, s, 5, 20000, k);
		std::printf("sliding log 5/min, 20,000 spoofed sources x %d SYNs in a 4,096-log table: the limited source "
			    "passed %llu of %llu, %llu logs evicted\n",
			    k, (unsigned long long)f.established_passed, (unsigned long long)f.established_sent,
			    (unsigned long long)f.evicted);
		EXPECT_EQ(f.established_passed, 0u) << "a fresh log let the limited source through";
		EXPECT_GT(f.evicted, 10000u) << "the flood filled the table";
		EXPECT_EQ(f.failopen, 0u);
	}
}

// Before: IPv6 buckets were per /128, so one /64 had 2^64 fresh bursts.
TEST(SpoofedFlood, OneSlash64SendingFromManyAddressesIsOneBucket)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	Replayer kernel(rule_of("2001:db8::/32", "1/h", 5), TableSizes{4096, 64, 64});
	uint64_t passed = 0;
	const uint32_t addresses = 1000;
	for (uint32_t i = 0; i < addresses; i++) {
		char src[64];
		std::snprintf(src, sizeof(src), "2001:db8:0:7:%x:%x:%x:%x", i * 7919 % 65536, i, i * 31 % 65536, i + 1);
		passed += kernel.send(build_packet({.src = src}), TRACE_START_NS + i * MS);
	}
	EXPECT_EQ(passed, 5u) << "the /64's burst, once";
	Stats s = collect_stats(kernel.maps(), {});
	ASSERT_EQ(s.sources.size(), 1u);
	EXPECT_EQ(s.sources[0].source, "2001:db8:0:7::/64");
	EXPECT_EQ(s.sources[0].passed_packets, 5u);
	EXPECT_EQ(s.sources[0].dropped_packets, addresses - 5);
}

// Before: IPv4 probation ended at a source's second packet, and IPv6 buckets
// had none, so spoofed sources sending 2 or 10 packets each pushed limited
// sources' buckets out and gave them a fresh burst.
TEST(SpoofedFlood, EstablishedLimitedSourcesStayLimitedUnderTwoAndTenPacketSpoofs)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	for (int family : {4, 6}) {
		for (int k : {2, 10}) {
			SCOPED_TRACE("IPv" + std::to_string(family) + ", spoofed sources sending " + std::to_string(k) +
				     " packets each");
			RuleSpec r = family == 4 ? rule_of("10.0.0.0/8", "1/h", 5) : rule_of("2001:db8::/32", "1/h", 5);
			Replayer kernel(r, TableSizes{4096, 64, 64});
			Spoofing s = family == 4 ? Spoofing{"10.200.0.1", [](uint32_t i) { return source_address(i); }}
						 : Spoofing{"2001:db8:ffff:1::1", v6_slash64};
			FloodResult f = spoofed_flood(kernel, s, 5, 20000, k);
			std::printf("IPv%d, 20,000 spoofed sources x %d packets in a 4,096-bucket table: the limited source "
				    "passed %llu of %llu, %llu buckets evicted\n",
				    family, k, (unsigned long long)f.established_passed,
				    (unsigned long long)f.established_sent, (unsigned long long)f.evicted);
			EXPECT_EQ(f.established_passed, 0u) << "a fresh bucket let the limited source through";
			EXPECT_GT(f.evicted, 10000u) << "the flood filled the table";
			EXPECT_EQ(f.failopen, 0u);
		}
	}
}

// Spoofed sources that wait out probation (their second packet 1.2 s after
// their first) hold settled buckets, but less in debt than a source held at
// its burst: they go first. One set of four ways, so every new bucket must
// evict one of them; 100 such sources, one after another, while the limited
// source sends once per ten of them. Before: the limited source, seen longest
// ago, was evicted.
TEST(SpoofedFlood, SettledSpoofsLessInDebtGoBeforeALimitedSource)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	Replayer kernel(rule_of("10.0.0.0/8", "1/h", 5), TableSizes{4, 64, 64});
	const std::vector<uint8_t> mine = build_packet({.src = "10.200.0.1"});
	uint64_t t = TRACE_START_NS + 10 * SEC, passed = 0, sent = 0;
	for (int i = 0; i < 6; i++)
		passed += kernel.send(mine, t);
	ASSERT_EQ(passed, 5u);
	passed = kernel.send(mine, t + 1500 * MS); // settled, 5 h in debt
	sent++;
	const uint32_t sources = 100;
	for (uint32_t i = 0; i < sources; i++) {
		const std::vector<uint8_t> spoof = build_packet({.src = source_address(i)});
		t += 2 * SEC;
		kernel.send(spoof, t);
		kernel.send(spoof, t + 1200 * MS); // settled, 2 h in debt
		if (i % 10 == 9) {
			passed += kernel.send(mine, t + 1300 * MS);
			sent++;
		}
	}
	Stats s = collect_stats(kernel.maps(), {});
	std::printf("%u spoofed sources, 2 packets 1.2 s apart, through one set: the limited source passed %llu of "
		    "%llu; %llu evicted\n",
		    sources, (unsigned long long)passed, (unsigned long long)sent,
		    (unsigned long long)s.global[SLUICE_CNT_INFO_EVICTED].packets);
	EXPECT_EQ(passed, 0u) << "a fresh bucket let the limited source through";
	EXPECT_GE(s.global[SLUICE_CNT_INFO_EVICTED].packets, sources - 3) << "every new bucket evicted one";
	EXPECT_TRUE(std::any_of(s.sources.begin(), s.sources.end(),
				[](const SourceStats &x) { return x.source == "10.200.0.1"; }))
		<< "the limited source kept its bucket";
}
