// SPDX-License-Identifier: GPL-2.0-only
// Passes on account (struct sluice_owed, "The bound" there) through the real
// program, built with its clock in a map: a CPU alone decides as GCRA does,
// whatever path decides (the fast path, the walk, the memo); an account left
// on a CPU is never charged again as if new; and, randomized against GCRA fed
// the very passes the program made, two CPUs never pass beyond the bound and
// never drop a packet that GCRA would pass.
#include <gtest/gtest.h>

#include <linux/bpf.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "maps.h"
#include "packet.h"
#include "reference.h"
#include "replay.h"
#include "rule_table.h"
#include "sluice_algos.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t MS = 1000000ULL, SEC = 1000 * MS, HOUR = 3600 * SEC;
constexpr uint64_t T0 = 1000 * SEC;

RuleSpec gcra_rule(const char *rate, uint64_t burst, int per = -1, const char *name = "owed")
{
	RuleSpec r;
	r.name = name;
	r.cidr = parse_cidr("10.0.0.0/8");
	r.algo = Algo::gcra;
	r.rate = parse_rate(rate);
	r.burst = burst;
	r.per_prefix = per;
	validate_rule(r);
	return r;
}

void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		throw std::runtime_error("cannot pin to CPU " + std::to_string(cpu));
}

/// Runs `frame` `repeat` times on this CPU; returns the last verdict.
int run_frame(int prog_fd, const std::vector<uint8_t> &frame, uint32_t repeat = 1)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_size_in = static_cast<__u32>(frame.size()),
		    .repeat = static_cast<int>(repeat));
	if (bpf_prog_test_run_opts(prog_fd, &opts))
		throw std::runtime_error("BPF_PROG_TEST_RUN failed");
	return static_cast<int>(opts.retval);
}

uint64_t owed_passes(const MapSet &maps)
{
	uint64_t n = 0;
	for (const auto &o : read_owed(maps.owed.get()))
		n += o.packets;
	return n;
}

/// The doubt every CPU's owed slots hold (ticks: slots without passes).
uint64_t owed_doubt(const MapSet &maps)
{
	uint64_t n = 0;
	const MappedArray slots(maps.owed.get());
	for (uint32_t i = 0; i < slots.size(); i++)
		if (const auto *o = slots.at<struct sluice_owed>(i); !o->packets)
			n += o->ticks;
	return n;
}

/// A rule's passed and dropped packets, summed over CPUs.
std::pair<uint64_t, uint64_t> rule_passed_dropped(const MapSet &maps, uint32_t slot)
{
	std::vector<struct sluice_rule_counters> v(static_cast<size_t>(libbpf_num_possible_cpus()));
	if (bpf_map_lookup_elem(maps.rule_counters.get(), &slot, v.data()))
		throw std::runtime_error("cannot read the rule's counters");
	uint64_t p = 0, d = 0;
	for (const auto &c : v) {
		p += c.passed_packets;
		d += c.dropped_packets;
	}
	return {p, d};
}

/// GCRA fed every pass the program made, in the order it made them, with the
/// time each was made at: where the bucket would stand if every CPU's
/// charges were written at once. In ticks, with the program's own arithmetic.
struct Truth {
	uint64_t capacity = 0, inc = 0, tat = 0;

	explicit Truth(const struct sluice_rule &dp)
		: capacity(dp.bucket.capacity),
		  inc(sluice_charge_ticks(dp.bucket.inc_mult, dp.inc_shift, 1, 1))
	{
	}
	void pass(uint64_t t_ns, uint64_t n)
	{
		uint64_t now = sluice_ns_to_ticks(t_ns);
		if (n)
			tat = ((int64_t)(tat - now) > 0 ? tat : now) + n * inc;
	}
	/// Whether one more packet at t_ns is within the limit.
	bool conforms(uint64_t t_ns) const
	{
		uint64_t now = sluice_ns_to_ticks(t_ns);
		return ((int64_t)(tat - now) > 0 ? tat : now) + inc - now <= capacity;
	}
	/// How far the passes so far reach past the limit at t_ns, in ticks (<= 0: within it).
	int64_t excess(uint64_t t_ns, uint64_t slack) const
	{
		return (int64_t)(tat - sluice_ns_to_ticks(t_ns) - capacity - slack);
	}
};

/// The bound's slack in ticks (struct sluice_owed, "The bound"): per CPU, one
/// account or its doubt, at most SLUICE_OWED_MAX packets and an eighth of
/// the capacity.
uint64_t owed_slack(const Truth &t, int cpus)
{
	return uint64_t(cpus) * std::min<uint64_t>(SLUICE_OWED_MAX * t.inc, t.capacity / 8);
}

/// Sends a frame through the program on a CPU at a clock, feeding GCRA
/// (Truth) the passes made and counting every verdict that differs from it:
/// where one CPU's decisions must be exactly GCRA's.
struct ExactSender {
	Replayer &kernel;
	Truth &truth;
	const std::vector<uint8_t> &frame;
	int false_drops = 0, false_passes = 0;

	ExactSender(Replayer &k, Truth &t, const std::vector<uint8_t> &f) : kernel(k), truth(t), frame(f) {}
	/// Sends `n` at clock `t` from `cpu`; how many passed.
	int send(int cpu, uint64_t t, int n)
	{
		pin(cpu);
		kernel.set_clocks({t, t});
		int passed = 0;
		for (int i = 0; i < n; i++) {
			bool conforms = truth.conforms(t);
			bool pass = run_frame(kernel.prog_fd(), frame) == XDP_PASS;
			truth.pass(t, pass);
			false_drops += !pass && conforms;
			false_passes += pass && !conforms;
			passed += pass;
		}
		return passed;
	}
	/// What a run of exact sends ends with: no packet within GCRA over the
	/// passes made dropped, none beyond it passed, no ticks held as doubt;
	/// and the test back on CPU 0.
	void expect_exact_and_no_doubt() const
	{
		EXPECT_EQ(false_drops, 0) << "a packet within the limit is dropped";
		EXPECT_EQ(false_passes, 0) << "a packet beyond GCRA over the passes made is passed";
		EXPECT_EQ(owed_doubt(kernel.maps()), 0u) << "ticks held as doubt";
		pin(0);
	}
};

/// A fresh bucket shared by two CPUs at t0: the walk makes it on CPU 0, each
/// CPU's write finds the other's, and CPU 1's second packet goes on account.
void cpu1_on_account(ExactSender &sender, uint64_t t0)
{
	ASSERT_EQ(sender.send(0, t0, 1), 1); // the walk makes the bucket
	ASSERT_EQ(sender.send(1, t0, 1), 1); // written
	ASSERT_EQ(sender.send(0, t0, 1), 1); // written
	ASSERT_EQ(sender.send(1, t0, 1), 1); // CPU 1 finds CPU 0's write: on account
}

/// A randomized test's seed: SLUICE_OWED_SEED, or a fresh one.
uint64_t run_seed()
{
	if (const char *s = std::getenv("SLUICE_OWED_SEED"))
		return std::strtoull(s, nullptr, 0);
	return std::random_device{}();
}

/// The trace line that names the seed and how to replay the run.
std::string seed_line(uint64_t seed)
{
	return "seed " + std::to_string(seed) + " (SLUICE_OWED_SEED=" + std::to_string(seed) + " replays this run)";
}

/// One GCRA rule loaded in the real program, for a test of two CPUs: GCRA
/// fed the program's passes beside it, the nanoseconds a packet is worth,
/// and a frame of source 10.0.0.1 that takes the fast path.
struct OneGcraSource {
	RuleSpec rule;
	Replayer kernel;
	Truth truth;
	uint64_t inc_ns;
	std::vector<uint8_t> fast = build_packet({.src = "10.0.0.1"});

	OneGcraSource(const char *rate, uint64_t burst)
		: rule(gcra_rule(rate, burst)), kernel(rule), truth(truth_of(kernel, rule)),
		  inc_ns(truth.inc >> SLUICE_TICK_SHIFT)
	{
	}
	static Truth truth_of(const Replayer &k, const RuleSpec &r)
	{
		RuleTable table(k.maps());
		return Truth(table.datapath_rule(table.find(r.name).slot));
	}
};

} // namespace

// Issue 26, finding 3: the walk charged the word without the CPU's own
// account, and the fast path then took the walk's write for another CPU's:
// one CPU, a frozen clock and a burst of 256 passed 288. Now a CPU alone
// decides as GCRA does, packet by packet, whichever path decides, and owes
// nothing.
TEST(Owed, ACpuAloneDecidesAsGcraOnEveryPath)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	const std::vector<uint8_t> fast = build_packet({.src = "10.0.0.1"});
	const std::vector<uint8_t> walk = build_packet({.src = "10.0.0.1", .proto = 1}); // ICMP: no ports
	auto turns = [&](std::vector<const std::vector<uint8_t> *> cycle) {
		std::vector<const std::vector<uint8_t> *> seq;
		for (int i = 0; i < 600; i++)
			seq.push_back(cycle[i % cycle.size()]);
		return seq;
	};
	// The walk's write makes the fast path owe; then the walk decides the rest.
	std::vector<const std::vector<uint8_t> *> account_then_walk = {&fast, &fast, &walk};
	account_then_walk.insert(account_then_walk.end(), 40, &fast);
	account_then_walk.insert(account_then_walk.end(), 558, &walk);
	struct Case {
		const char *name;
		std::vector<const std::vector<uint8_t> *> seq;
	} cases[] = {
		{"fast path and walk in turn", turns({&fast, &fast, &walk})},
		{"walk, then the fast path twice", turns({&walk, &fast, &fast})},
		{"passes on account, then the walk", account_then_walk},
	};
	for (const auto &c : cases) {
		SCOPED_TRACE(c.name);
		RuleSpec r = gcra_rule("1/h", 256);
		Replayer kernel(r);
		ReferenceModel model(r);
		pin(0);
		kernel.set_clocks({T0, T0});
		size_t passed = 0, mismatches = 0;
		for (const auto *frame : c.seq) {
			bool got = run_frame(kernel.prog_fd(), *frame) == XDP_PASS;
			mismatches += got != model.admit(0, T0, 1);
			passed += got;
		}
		EXPECT_EQ(mismatches, 0u);
		EXPECT_EQ(passed, 256u) << "a frozen clock passes the burst, exactly";
		EXPECT_EQ(owed_passes(kernel.maps()), 0u) << "a CPU alone owes nothing";
		// Later, refilled: the same again, packet by packet.
		kernel.set_clocks({T0 + HOUR / 2, T0 + HOUR / 2});
		for (int i = 0; i < 200; i++)
			EXPECT_EQ(run_frame(kernel.prog_fd(), i % 2 ? walk : fast) == XDP_PASS,
				  model.admit(0, T0 + HOUR / 2, 1))
				<< "packet " << i << " half an hour later";
	}
}

// Issue 26, finding 3: charges left on a CPU's account were written an hour
// later on top of the bucket as it stood then: of a full burst of 256, 224
// passed, then 0 of 32. An account is paid as of its own time; what cannot be
// placed is doubt, which never drops a packet.
TEST(Owed, AnAccountLeftAnHourIsNotChargedAgain)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	RuleSpec r = gcra_rule("100/s", 256); // an hour refills it
	Replayer kernel(r);
	std::vector<uint8_t> fast = build_packet({.src = "10.0.0.1"}), walk = build_packet({.src = "10.0.0.1", .proto = 1});
	for (const auto *then : {&fast, &walk}) {
		SCOPED_TRACE(then == &fast ? "paid on the fast path" : "paid on the walk");
		static uint64_t start = T0;
		start += 1000 * HOUR; // the bucket refilled since the last round
		kernel.set_clocks({start, start});
		// CPU 0 makes the bucket and writes, CPU 1 writes, and CPU 0, finding the other's
		// write, passes on account.
		for (int i = 0; i < 12; i++) {
			pin(i == 2 ? 1 : 0);
			ASSERT_EQ(run_frame(kernel.prog_fd(), fast), XDP_PASS);
		}
		ASSERT_GT(owed_passes(kernel.maps()), 0u) << "passes on account";
		// An hour later, refilled: 224 from CPU 1, then 32 from CPU 0,
		// whose account of an hour ago must not be charged again.
		kernel.set_clocks({start + HOUR, start + HOUR});
		pin(1);
		int passed = 0;
		for (int i = 0; i < 224; i++)
			passed += run_frame(kernel.prog_fd(), fast) == XDP_PASS;
		pin(0);
		for (int i = 0; i < 32; i++)
			passed += run_frame(kernel.prog_fd(), *then) == XDP_PASS;
		EXPECT_EQ(passed, 256) << "the full burst passes";
		int beyond = 0;
		for (int i = 0; i < 64; i++) {
			pin(i % 2);
			beyond += run_frame(kernel.prog_fd(), fast) == XDP_PASS;
		}
		EXPECT_LE(beyond, 2 * int(std::min<uint64_t>(SLUICE_OWED_MAX, 256 / 8))) << "the bound";
	}
	pin(0);
}


// A CPU may read a clock earlier than another CPU's that wrote the bucket
// since its account was made: CPU 1's write found the bucket full at a later
// clock and forgot part of it, then CPU 0, its clock behind the account's
// arrival time, wrote its account as stacked on that write: 2 ticks' worth
// too many, and a packet GCRA over the passes made would pass was dropped
// (SLUICE_OWED_SEED=4254761116, batch 1328). The account settles against the
// later clock that write noted.
TEST(Owed, AnAccountIsNotStackedOnAWriteMadeAtALaterClock)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	OneGcraSource one("100/s", 32); // 10 ms a packet
	auto &[rule, kernel, truth, inc_ns, fast] = one;
	const uint64_t t0 = T0;
	auto send = [&](int cpu, uint64_t t, int n) {
		pin(cpu);
		kernel.set_clocks({t, t});
		int passed = 0;
		for (int i = 0; i < n; i++)
			passed += run_frame(kernel.prog_fd(), fast) == XDP_PASS;
		truth.pass(t, uint64_t(passed));
		return passed;
	};
	// CPU 0 writes, CPU 1 writes, CPU 0 finds the other's write and passes on account.
	ASSERT_EQ(send(0, t0, 2), 2);
	ASSERT_EQ(send(1, t0, 1), 1);
	ASSERT_EQ(send(0, t0, 2), 2);
	ASSERT_EQ(owed_passes(kernel.maps()), 2u) << "CPU 0 holds an account";
	// Past the account's arrival time (t0 + 3 packets), CPU 1 finds the
	// bucket, without the account, full: a burst from its clock.
	EXPECT_GE(send(1, t0 + 7 * inc_ns / 2, 40), 30);
	// CPU 0's clock reads earlier: its packet settles the account, and drops.
	EXPECT_EQ(send(0, t0, 1), 0);
	EXPECT_EQ(owed_passes(kernel.maps()), 0u) << "the account is settled";
	// GCRA over the passes made passes a packet at t0 + 6.25 packets; so must the program.
	const uint64_t t3 = t0 + 25 * inc_ns / 4;
	ASSERT_TRUE(truth.conforms(t3));
	EXPECT_EQ(send(0, t3, 1), 1) << "a packet within the limit is dropped";
	pin(0);
}

// An account made from a clock beyond the bucket's word (the bucket, with
// the account, found full) hid that clock from every other CPU: CPU 0 passed
// 4 on account an hour later, then CPU 1, its clock reading 24 packets'
// worth earlier, found the old word, refilled, and passed a burst from its
// own clock: 4 packets beyond burst + rate x T and both CPUs' accounts
// (SLUICE_OWED_SEED=3379286711, batch 4342). A pass at a bucket that is full
// with the account is written, so that an account always sits on the word.
TEST(Owed, AnAccountIsNotMadeFromAClockBeyondTheWord)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	OneGcraSource one("100/s", 32); // 10 ms a packet; an account holds at most 4 (an eighth)
	auto &[rule, kernel, truth, inc_ns, fast] = one;
	const uint64_t t0 = T0, later = T0 + HOUR;
	int64_t worst = INT64_MIN;
	auto send = [&](int cpu, uint64_t t, int n) {
		pin(cpu);
		kernel.set_clocks({t, t});
		int passed = 0, false_drops = 0;
		for (int i = 0; i < n; i++) {
			bool conforms = truth.conforms(t);
			bool pass = run_frame(kernel.prog_fd(), fast) == XDP_PASS;
			truth.pass(t, pass);
			false_drops += !pass && conforms;
			passed += pass;
			if (pass)
				worst = std::max(worst, truth.excess(t, owed_slack(truth, 2)));
		}
		EXPECT_EQ(false_drops, 0) << "a packet within the limit is dropped";
		return passed;
	};
	// CPU 0 writes, CPU 1 writes: CPU 0 finds the other's write.
	ASSERT_EQ(send(0, t0, 2), 2);
	ASSERT_EQ(send(1, t0, 1), 1);
	// An hour later, refilled: CPU 0 passes 4, the most an account could hold.
	ASSERT_EQ(send(0, later, 4), 4);
	// CPU 1's clock reads 24 packets' worth earlier: GCRA over the passes
	// made holds them 28 packets ahead of it, and the bound leaves room for
	// 12 more (burst 32 and two accounts of 4).
	int passed = send(1, later - 24 * inc_ns, 40);
	EXPECT_LE(worst, 0) << "ticks beyond burst + rate x T and the accounts, " << passed << " passed";
	EXPECT_GE(passed, 4) << "CPU 1 passes what the bucket holds for it";
	pin(0);
}

// An account is stacked on the writes made since whenever none of them found
// the bucket full, however far the clock has moved: the slot held the doubt
// back when the clock alone had passed the account's word, and then two CPUs
// taking turns at one bucket passed more than GCRA would (the walk-only build
// dropped packet 132 of a replayed two-CPU trace that the full build passed,
// SLUICE_WALK_SEED=3155644438), and wrote the shared word at every pass until
// the clock moved again.
TEST(Owed, AnAccountIsStackedWhenNoWriteFoundTheBucketFull)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	OneGcraSource one("100/s", 32); // 10 ms a packet
	auto &[rule, kernel, truth, inc_ns, fast] = one;
	const uint64_t t0 = T0;
	ExactSender sender(kernel, truth, fast);
	auto send = [&](int cpu, uint64_t t, int n) { return sender.send(cpu, t, n); };
	// CPU 0 writes, CPU 1 writes, CPU 0 finds the other's write and passes
	// 2 on account, made on the word at t0 + 3 packets; CPU 1 writes again.
	ASSERT_EQ(send(0, t0, 2), 2);
	ASSERT_EQ(send(1, t0, 1), 1);
	ASSERT_EQ(send(0, t0, 2), 2);
	ASSERT_EQ(owed_passes(kernel.maps()), 2u) << "CPU 0 holds an account";
	ASSERT_EQ(send(1, t0, 1), 1);
	// The clock passes the account's word (t0 + 3 packets), not the
	// bucket's (t0 + 4): no write found the bucket full. CPU 0 settles its
	// account on top and passes what GCRA over every pass made leaves: 29.
	EXPECT_EQ(send(0, t0 + 7 * inc_ns / 2, 40), 29);
	sender.expect_exact_and_no_doubt();
}

// A write that refills the bucket of one source surely (the bucket with
// every CPU's account, at most an account's worth per CPU, would have been
// full too) marks its note: GCRA fed every pass made refilled it as well and
// forgot every charge before it, so an account made before it is settled
// without writing anything and without doubt. Held as doubt, it kept the CPU
// writing the shared word at every pass until the bucket filled up again.
TEST(Owed, AnAccountBeforeASureRefillIsForgottenWithoutDoubt)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	OneGcraSource one("1000000/s", 1000); // 1 us a packet; an account holds at most SLUICE_OWED_MAX
	auto &[rule, kernel, truth, inc_ns, fast] = one;
	const uint64_t t0 = T0, t1 = T0 + 500 * inc_ns;
	ExactSender sender(kernel, truth, fast);
	auto send = [&](int cpu, uint64_t t, int n) { return sender.send(cpu, t, n); };
	// Each CPU finds the other's write, and both hold an account at t0.
	ASSERT_NO_FATAL_FAILURE(cpu1_on_account(sender, t0));
	ASSERT_EQ(send(0, t0, 1), 1); // written
	// CPU 1 writes its account when it is full, then owes again.
	ASSERT_EQ(send(1, t0, SLUICE_OWED_MAX + 8), SLUICE_OWED_MAX + 8);
	ASSERT_EQ(send(0, t0, 1), 1);   // CPU 0 finds that write: on account
	const uint64_t owed = owed_passes(kernel.maps());
	ASSERT_GE(owed, 2u) << "each CPU holds an account";
	// 500 packets' time later the bucket, with both accounts, is full: CPU 0
	// writes its account and a pass from the clock, a sure refill.
	ASSERT_EQ(send(0, t1, 1), 1);
	// CPU 1's account came before it: forgotten, as GCRA forgot it. CPU 1
	// then passes what GCRA over every pass made leaves, and holds no doubt.
	EXPECT_EQ(send(1, t1, 1200), 999);
	sender.expect_exact_and_no_doubt();
}

// A doubt from before a sure refill is forgotten at the CPU's next write, as
// the account would have been. Before, doubt went only once the bucket with
// it was behind the CPU's clock at its write; a CPU that the other always
// wrote first after each tick of a coarse clock never found it so, and wrote
// the shared word at every pass (CI, SLUICE_OWED_SEED=2162674253: CPU 1 wrote
// 3934 of 3934 passes at a 4 ms tick). Here: CPU 1's account is settled
// against a walk's refill, which is not marked sure, and leaves doubt; at the
// next refill CPU 0 writes first, surely.
TEST(Owed, ADoubtFromBeforeASureRefillIsForgottenAtTheNextWrite)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	OneGcraSource one("1000000/s", 1000); // 1 us a packet; an account holds at most SLUICE_OWED_MAX
	auto &[rule, kernel, truth, inc_ns, fast] = one;
	const std::vector<uint8_t> walk = build_packet({.src = "10.0.0.1", .proto = 1}); // ICMP: no ports
	const uint64_t t0 = T0, t1 = T0 + 2000 * inc_ns, t2 = t1 + 2000 * inc_ns;
	ExactSender sender(kernel, truth, fast);
	auto send = [&](int cpu, uint64_t t, int n) { return sender.send(cpu, t, n); };
	ASSERT_NO_FATAL_FAILURE(cpu1_on_account(sender, t0));
	ASSERT_EQ(owed_passes(kernel.maps()), 1u) << "CPU 1 holds an account";
	// The bucket refilled: CPU 0's walk writes from t1, noting the clock unmarked.
	pin(0);
	kernel.set_clocks({t1, t1});
	ASSERT_EQ(run_frame(kernel.prog_fd(), walk), XDP_PASS);
	truth.pass(t1, 1);
	// CPU 1 settles its account against that write: what came first is unknown.
	ASSERT_EQ(send(1, t1, 1), 1);
	ASSERT_EQ(owed_passes(kernel.maps()), 0u);
	ASSERT_GT(owed_doubt(kernel.maps()), 0u) << "CPU 1 holds doubt";
	for (int a = 0; a < 20; a++)
		for (int cpu = 0; cpu < 2; cpu++)
			ASSERT_EQ(send(cpu, t1, 1), 1);
	// Refilled again; CPU 0 writes first, a sure refill, and CPU 1's next
	// write forgets the doubt. Then CPU 1 owes again.
	ASSERT_EQ(send(0, t2, 1), 1);
	ASSERT_EQ(send(1, t2, 1), 1);
	EXPECT_EQ(owed_doubt(kernel.maps()), 0u) << "CPU 1 still holds its doubt after a sure refill";
	uint64_t writes = 0, passes = 0;
	for (int a = 0; a < 100; a++) {
		ASSERT_EQ(send(0, t2, 1), 1);
		const uint64_t before = owed_passes(kernel.maps());
		ASSERT_EQ(send(1, t2, 1), 1);
		passes++;
		writes += owed_passes(kernel.maps()) != before + 1;
	}
	EXPECT_LE(writes * 32, passes) << "CPU 1 wrote the shared word at " << writes << " of " << passes << " passes";
	sender.expect_exact_and_no_doubt();
}

// Issue 26, Required 4: two CPUs, the fast path, the walk, the memo, accounts
// and their doubt, rule edits, and a clock that stands, steps, jumps an hour
// ahead or back: 10 million packets in batches, each batch from one CPU at
// one time. GCRA fed the passes the program made (Truth) must find every
// drop over the limit, and every pass within burst + rate x T plus the
// bound's slack: one account's worth per CPU.
TEST(Owed, TwoCpusKeepTheBoundAndDropNothingUnderTheLimitRandomized)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	const uint64_t seed = run_seed();
	SCOPED_TRACE(seed_line(seed));
	std::mt19937_64 rng(seed);
	auto pick = [&](uint64_t n) { return n ? uint64_t(rng() % n) : 0; };
	uint64_t total = 10000000;
	if (const char *s = std::getenv("SLUICE_OWED_PACKETS")) // shorter runs by hand
		total = std::strtoull(s, nullptr, 0);

	const char *rates[] = {"1/h", "100/s", "10000/s", "1000000/s"};
	const uint64_t bursts[] = {4, 32, 256, 1000, 100000};
	auto random_rule = [&](int epoch) {
		uint64_t rate = pick(4);
		return gcra_rule(rates[rate], bursts[pick(rate ? 5 : 3)], pick(2) ? 24 : -1,
				 ("owed" + std::to_string(epoch)).c_str());
	};
	RuleSpec other = gcra_rule("5/s", 3, -1, "unrelated");
	other.cidr = parse_cidr("172.16.0.0/12");

	RuleSpec spec = random_rule(0);
	Replayer kernel(spec);
	const MapSet &maps = kernel.maps();
	RuleTable table(maps);
	InstalledRule rule = table.find(spec.name);
	Truth truth(table.datapath_rule(rule.slot));
	std::vector<std::vector<uint8_t>> frames = {
		build_packet({.src = "10.0.0.1"}),              // the fast path, and its memo
		build_packet({.src = "10.0.0.1", .proto = 1}),  // ICMP: no ports, the walk
		build_packet({.src = "10.0.0.1", .frag = PacketSpec::Frag::later, .frag_id = 77}), // the walk
	};

	uint64_t now = T0, sent = 0, batches = 0, epoch = 0, epoch_passed = 0, false_drops = 0, over = 0;
	uint64_t counted_p = 0, counted_d = 0, edits = 0, unrelated = 0;
	int64_t worst = INT64_MIN;
	std::string first_failure;
	int cpu = 0;
	// SLUICE_OWED_TRACE=1: on a failure, print the last batches with the
	// owed slots and the bucket's word after each.
	const bool tracing = std::getenv("SLUICE_OWED_TRACE") != nullptr;
	std::vector<std::string> trace;
	auto owed_state = [&]() {
		std::ostringstream o;
		const MappedArray slots(maps.owed.get());
		for (uint32_t k = 0; k < SLUICE_PENDING_SLOTS; k++) {
			for (uint32_t c = 0; c < 2 && sluice_cpu_slot(c, k) < slots.size(); c++) {
				const auto &s = *slots.at<struct sluice_owed>(sluice_cpu_slot(c, k));
				if (!s.name)
					continue;
				struct sluice_set_v4 set {};
				uint32_t idx = uint32_t(s.name);
				uint64_t word = 0, off = 0;
				if (!bpf_map_lookup_elem(maps.src4.get(), &idx, &set)) {
					word = set.way[(s.name >> 32) & 0xff].word;
					off = set.way[(s.name >> 32) & 0xff].algo.gcra.off;
				}
				o << " | cpu" << c << " slot " << k << " name " << std::hex << s.name << std::dec
				  << " written-off " << int64_t(s.written - off) << " since " << s.since << " ticks "
				  << s.ticks << " packets " << s.packets << " shared_until " << s.shared_until
				  << " word-off " << int64_t(word - off);
			}
		}
		return o.str();
	};
	auto start = std::chrono::steady_clock::now();
	auto check_counts = [&](const char *when) {
		// Every pass is on the bucket's counters or in an owed slot.
		uint64_t in_stats = 0;
		for (const auto &s : collect_stats(maps, {0, rule.spec.name}).sources)
			if (s.rule == rule.spec.name)
				in_stats += s.passed_packets;
		EXPECT_EQ(in_stats, epoch_passed) << when << ", epoch " << epoch;
	};
	while (sent < total && first_failure.empty()) {
		// The clock: mostly small steps or none, at times an hour ahead or
		// a while back.
		uint64_t r = pick(1000);
		uint64_t inc_ns = std::max<uint64_t>(1, truth.inc >> SLUICE_TICK_SHIFT);
		if (r < 300)
			; // frozen
		else if (r < 900)
			now += pick(4 * inc_ns + 1);
		else if (r < 970)
			now += pick(std::min<uint64_t>(truth.capacity >> SLUICE_TICK_SHIFT, HOUR) + 1);
		else if (r < 985)
			now += HOUR;
		else
			now -= std::min<uint64_t>(now - T0, pick(50 * inc_ns + 1));
		kernel.set_clocks({now, now});
		// Rule edits: another rule comes or goes (the rule sets flip, the
		// memo forgets), or this rule is replaced (new buckets; accounts
		// of the old ones left behind).
		r = pick(1000);
		if (r < 5) {
			if (unrelated++ % 2 == 0)
				table.add(other);
			else
				table.remove("unrelated");
		} else if (r < 10) {
			check_counts("before an edit");
			table.remove(rule.spec.name);
			spec = random_rule(int(++epoch));
			rule = table.add(spec);
			truth = Truth(table.datapath_rule(rule.slot));
			epoch_passed = 0;
			auto [p, d] = rule_passed_dropped(maps, rule.slot);
			counted_p = p;
			counted_d = d;
			edits++;
		}
		// A batch from one CPU, often the other one.
		if (pick(3) == 0)
			cpu ^= 1;
		size_t kind = pick(10) < 7 ? 0 : 1 + pick(2);
		const std::vector<uint8_t> &frame = frames[kind];
		// Each BPF_PROG_TEST_RUN call costs milliseconds (the kernel
		// swaps the XDP dispatcher's program in and out), so most batches
		// are short and one in five is long: a flood at one time, decided
		// mostly by the memo.
		uint32_t n = pick(5) == 0 ? 4000 + uint32_t(pick(12000)) : 1 + uint32_t(pick(pick(4) ? 8 : 300));
		pin(cpu);
		run_frame(kernel.prog_fd(), frame, n);
		auto [p, d] = rule_passed_dropped(maps, rule.slot);
		uint64_t passed = p - counted_p, dropped = d - counted_d;
		counted_p = p;
		counted_d = d;
		sent += n;
		batches++;
		if (passed + dropped != n) {
			first_failure = "a packet not counted as a pass or a drop of the rule";
			break;
		}
		if (tracing) {
			std::ostringstream o;
			o << "batch " << batches << " cpu " << cpu << " kind " << kind << " n " << n << " now_t "
			  << sluice_ns_to_ticks(now) << " passed " << passed << " dropped " << dropped
			  << " truth before " << truth.tat << " inc " << truth.inc << " cap " << truth.capacity
			  << owed_state();
			trace.push_back(o.str());
			if (trace.size() > 60)
				trace.erase(trace.begin());
		}
		truth.pass(now, passed);
		epoch_passed += passed;
		// Checked where the program passed: a clock set back makes the
		// same passes look further ahead of it, and the program then waits.
		int64_t excess = truth.excess(now, owed_slack(truth, 2));
		if (passed)
			worst = std::max(worst, excess);
		if (passed && excess > 0) {
			over++;
			std::ostringstream o;
			o << "batch " << batches << " (CPU " << cpu << ", " << n << " packets at " << now << " ns, "
			  << passed << " passed): " << excess << " ticks beyond the bound; rule " << spec.rate.amount << "/"
			  << spec.rate.period_ns << "ns burst " << spec.burst << " per " << spec.per_prefix << ", frame "
			  << kind << ", truth " << truth.tat << " inc " << truth.inc << " cap " << truth.capacity;
			first_failure = o.str();
		}
		if (dropped && truth.conforms(now)) {
			false_drops++;
			std::ostringstream o;
			o << "batch " << batches << " (CPU " << cpu << ", " << n << " packets at " << now << " ns): "
			  << dropped << " dropped, yet GCRA over the passes made would pass the next";
			first_failure = o.str();
		}
	}
	check_counts("at the end");
	pin(0);
	if (!first_failure.empty())
		for (const auto &line : trace)
			std::printf("%s\n", line.c_str());
	double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	EXPECT_EQ(first_failure, "");
	EXPECT_EQ(over, 0u);
	EXPECT_EQ(false_drops, 0u);
	EXPECT_GE(sent, total);
	std::printf("seed %llu: %llu packets in %llu batches from two CPUs, %llu rule replacements, %.1f s; "
		    "closest to the bound: %lld ticks past it (<= 0: within)\n",
		    (unsigned long long)seed, (unsigned long long)sent, (unsigned long long)batches,
		    (unsigned long long)edits, seconds, (long long)worst);
}

// Two CPUs at one bucket well under its limit, on a coarse clock that steps a
// kernel tick at a time (1, 4 or 10 ms: HZ 1000, 250, 100): every CPU goes on
// account and writes the shared word about once per SLUICE_OWED_MAX passes,
// tick after tick. With a sharing window shorter than a tick, a CPU found the
// bucket unshared at each new tick and wrote every pass until the other's
// account filled: 7 % of its passes at 10 ms and 300 alternations a tick.
// Generated: the tick, the number of alternations per tick, and each batch's
// size. Counted from the second tick, once each CPU has found the other's
// write; passes must stay exact too (the bucket is far from empty).
TEST(Owed, TwoCpusOnACoarseClockWriteTheWordOncePerAccount)
{
	ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	const uint64_t seed = run_seed();
	SCOPED_TRACE(seed_line(seed));
	std::mt19937_64 rng(seed);
	OneGcraSource one("1000000000/s", 100000000); // as the bench's two-CPU row: one pass is 1 ns of credit
	auto &[rule, kernel, truth, inc_ns, fast] = one;
	ExactSender sender(kernel, truth, fast);
	const uint64_t ticks_ns[] = {MS, 4 * MS, 10 * MS};
	for (int run = 0; run < 3; run++) {
		const uint64_t tick = ticks_ns[rng() % 3];
		const int per_tick = 200 + int(rng() % 400);
		uint64_t t = T0 + (run + 1) * 60 * SEC, passes[2] = {0, 0}, writes[2] = {0, 0};
		for (int k = 0; k < 6; k++, t += tick)
			for (int a = 0; a < per_tick; a++)
				for (int cpu = 0; cpu < 2; cpu++)
					for (int n = 1 + int(rng() % 4); n > 0; n--) {
						const uint64_t before = owed_passes(kernel.maps());
						ASSERT_EQ(sender.send(cpu, t, 1), 1);
						if (k == 0)
							continue; // the first tick finds the bucket shared
						passes[cpu]++;
						writes[cpu] += owed_passes(kernel.maps()) != before + 1;
					}
		std::printf("tick %llu ms, %d alternations a tick: CPU 0 wrote %llu of %llu passes, CPU 1 %llu of %llu\n",
			    (unsigned long long)(tick / MS), per_tick, (unsigned long long)writes[0],
			    (unsigned long long)passes[0], (unsigned long long)writes[1], (unsigned long long)passes[1]);
		for (int cpu = 0; cpu < 2; cpu++)
			EXPECT_LE(writes[cpu] * 32, passes[cpu])
				<< "CPU " << cpu << " wrote the shared word at " << writes[cpu] << " of " << passes[cpu]
				<< " passes (tick " << tick / MS << " ms, " << per_tick << " alternations a tick)";
	}
	sender.expect_exact_and_no_doubt();
}
