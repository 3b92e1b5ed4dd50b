// SPDX-License-Identifier: GPL-2.0-only
// Two first fragments of one datagram key racing on two CPUs. A later
// fragment takes the protocol, ports and TCP flags its datagram's first
// fragment showed; with two first fragments judged at once, both decided and
// both wrote the key's entry, so the later fragments could be judged as the
// other one's datagram (a port-53 datagram's fragments passing as port 123's
// allow), and two different datagrams both passed where the kernel keeps
// one. Now a first fragment claims its key before it is judged, and another
// first fragment meeting the claim is dropped (bpf/lib/fragments.h).
//
// The interleavings are generated, not picked: every round two threads
// pinned to CPU 0 and CPU 1 send first fragments of one key, each after a
// random delay, with random shapes (ports, protocol, TCP flags); then the
// datagram's later fragments follow, and the rule each one is counted on is
// read back.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "fixture.h"

using namespace sluice;
using namespace sluice::test;
using Frag = PacketSpec::Frag;

namespace {

/// A first fragment's selectors, and the rule its datagram lands on.
struct Shape {
	const char *name;
	uint8_t proto;
	uint16_t dport;
	uint8_t tcp_flags;
	int rule; ///< index into FragmentRace::rules_, or NO_RULE
};
constexpr int NO_RULE = -1;
constexpr int UNKNOWN = -2; ///< judged as a fragment whose first fragment was not seen

// IPv4 keys on the protocol, so only UDP shapes share one; IPv6 does not, so
// its shapes differ in protocol and TCP flags too.
const Shape DNS{"udp/53", 17, 53, 0, 0}, NTP{"udp/123", 17, 123, 0, 1}, SYN{"tcp/22 syn", 6, 22, 0x02, 2},
	ACK{"tcp/22 ack", 6, 22, 0x10, NO_RULE};
const std::vector<Shape> SHAPES4 = {DNS, NTP}, SHAPES6 = {DNS, NTP, SYN, ACK};

class FragmentRace : public Datapath {
protected:
	void SetUp() override
	{
		Datapath::SetUp();
		if (HasFatalFailure())
			return;
		for (const char *net : {"192.0.2.0/24", "2001:db8::/32"}) {
			// Limits that never drop: which rule counted a fragment is what is read.
			rules_.push_back(table_->add(limit_spec(net, "1000/s", 1000000, "", Proto::udp, {53, 53})));
			rules_.push_back(add_action(net, Action::allow, "", Proto::udp, {123, 123}));
			RuleSpec syn = limit_spec(net, "1000/s", 1000000, "", Proto::tcp, {22, 22});
			syn.tcp_flags = SYN_ONLY;
			rules_.push_back(table_->add(syn));
		}
	}

	/// Packets counted on each rule (of either family), summed over CPUs.
	std::vector<uint64_t> counted()
	{
		static const int cpus = libbpf_num_possible_cpus();
		std::vector<uint64_t> n(3, 0);
		std::vector<struct sluice_rule_counters> v(cpus);
		for (size_t i = 0; i < rules_.size(); i++) {
			EXPECT_EQ(bpf_map_lookup_elem(maps_.rule_counters.get(), &rules_[i].slot, v.data()), 0);
			for (const auto &c : v)
				n[i % 3] += c.passed_packets + c.dropped_packets;
		}
		return n;
	}

	/// The rule a frame was counted on: the one rule whose count moved,
	/// NO_RULE if none, UNKNOWN if several (charged to each candidate).
	static int moved(const std::vector<uint64_t> &before, const std::vector<uint64_t> &after)
	{
		int which = NO_RULE, n = 0;
		for (int i = 0; i < 3; i++)
			if (after[i] != before[i])
				which = i, n++;
		return n > 1 ? UNKNOWN : which;
	}

	/// Frames in the verdict counters, summed.
	uint64_t verdicts()
	{
		Stats st = stats();
		uint64_t n = 0;
		for (int i = 0; i < SLUICE_CNT_VERDICT_END; i++)
			n += st.global[i].packets;
		return n;
	}

	void clear_fragment_table()
	{
		struct sluice_frag_key k;
		while (bpf_map_get_next_key(maps_.frags.get(), nullptr, &k) == 0)
			ASSERT_EQ(bpf_map_delete_elem(maps_.frags.get(), &k), 0);
	}

	std::vector<InstalledRule> rules_;
};

void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
}

void spin(uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		asm volatile("" ::: "memory");
}

} // namespace

// The invariant a user relies on: a datagram's later fragments are judged by
// the one first fragment that passed under its key, so no later fragment
// passes under a rule its datagram's counted first fragment did not meet; two
// first fragments of one key that name different selectors never both pass;
// and the counters add up to the frames sent.
TEST_F(FragmentRace, TwoFirstFragmentsOfOneKeyOnTwoCpus)
{
	ASSERT_GE(sysconf(_SC_NPROCESSORS_ONLN), 2) << "this test needs two CPUs";
	// At least this many rounds, on until 10 pairs of copies met each other's
	// claim (the rounds overlapped both CPUs' decisions), at most MAX_ROUNDS.
	constexpr int ROUNDS = 20000, MAX_ROUNDS = 100000;
	constexpr int LATER = 2;
	std::mt19937 rng(20261127);

	// The round's frames and delays, written by the main thread before it
	// starts the round; each worker's verdict.
	std::vector<uint8_t> frame[2];
	uint32_t delay[2] = {0, 0};
	int verdict[2] = {0, 0};
	std::atomic<int> round{0}, done{0};
	std::atomic<bool> stop{false};
	auto worker = [&](int cpu) {
		pin(cpu);
		int seen = 0;
		for (;;) {
			int r;
			uint32_t idle = 0;
			while ((r = round.load(std::memory_order_acquire)) == seen && !stop.load())
				if (++idle > 20000)
					std::this_thread::yield();
			if (stop.load())
				return;
			seen = r;
			spin(delay[cpu]);
			verdict[cpu] = run_frame(frame[cpu]);
			done.fetch_add(1, std::memory_order_release);
		}
	};
	struct Workers {
		std::atomic<bool> &stop;
		std::atomic<int> &round;
		std::thread a, b;
		~Workers()
		{
			stop.store(true);
			round.store(-1);
			a.join();
			b.join();
		}
	} workers{stop, round, std::thread(worker, 0), std::thread(worker, 1)};

	std::vector<uint64_t> expect(3, 0);
	uint64_t sent = 0, refused = 0, both_passed_same = 0, raced_same = 0, unknown_later = 0;
	uint64_t malformed0 = global(SLUICE_CNT_DROP_MALFORMED), frames0 = verdicts();
	std::vector<uint64_t> start = counted();
	int r = 1;
	for (; (r <= ROUNDS || raced_same < 10) && r <= MAX_ROUNDS && !HasFailure(); r++) {
		const bool v6 = r % 2;
		const std::vector<Shape> &shapes = v6 ? SHAPES6 : SHAPES4;
		const std::string src = v6 ? "2001:db8::10" : "192.0.2.10";
		const uint32_t id = 1000 + r;
		Shape s[2];
		for (int c = 0; c < 2; c++) {
			s[c] = shapes[rng() % shapes.size()];
			delay[c] = rng() % 400;
			frame[c] = build_packet({.src = src, .proto = s[c].proto, .dport = s[c].dport,
						 .tcp_flags = s[c].tcp_flags, .frag = Frag::first, .frag_id = id,
						 .more_fragments = 1});
		}
		done.store(0);
		round.store(r, std::memory_order_release);
		while (done.load(std::memory_order_acquire) < 2)
			std::this_thread::yield();
		sent += 2;
		SCOPED_TRACE(std::string("round ") + std::to_string(r) + ": " + s[0].name + " on CPU 0, " + s[1].name +
			     " on CPU 1");
		const bool same = s[0].proto == s[1].proto && s[0].dport == s[1].dport && s[0].tcp_flags == s[1].tcp_flags;
		int passed = 0, which = -1;
		for (int c = 0; c < 2; c++) {
			if (verdict[c] == XDP_PASS) {
				passed++;
				which = c;
				if (s[c].rule >= 0)
					expect[s[c].rule]++;
			} else {
				ASSERT_EQ(verdict[c], XDP_DROP);
				refused++;
			}
		}
		if (same) {
			ASSERT_GE(passed, 1) << "a copy is refused only while the other is judged";
			both_passed_same += passed == 2;
			raced_same += passed == 1; // a serial copy passes: this one met the other's claim
		} else {
			ASSERT_EQ(passed, 1) << "of two first fragments naming different selectors, exactly one passes";
		}
		// The later fragments: counted on the rule of the first fragment that passed.
		for (int i = 0; i < LATER; i++) {
			std::vector<uint64_t> before = counted();
			int v = run({.src = src, .proto = s[which].proto, .dport = 9, .frag = Frag::later, .frag_id = id,
				     .more_fragments = 1});
			sent++;
			ASSERT_EQ(v, XDP_PASS) << "no rule here drops";
			int got = moved(before, counted());
			unknown_later += got == UNKNOWN;
			ASSERT_EQ(got, s[which].rule) << "a later fragment of the datagram whose first fragment (" << s[which].name
						      << ") passed";
			if (got >= 0)
				expect[got]++;
		}
		clear_fragment_table();
	}

	// Every frame counted once: on its rule, or refused as malformed.
	std::vector<uint64_t> end = counted();
	for (int i = 0; i < 3; i++)
		EXPECT_EQ(end[i] - start[i], expect[i]) << "rule " << i;
	EXPECT_EQ(global(SLUICE_CNT_DROP_MALFORMED) - malformed0, refused) << "every refused first fragment";
	EXPECT_EQ(verdicts() - frames0, sent) << "every frame in one verdict counter";
	std::printf("%d rounds, %llu frames: %llu first fragments refused, %llu copies met the other's claim, %llu "
		    "pairs of copies both passed\n",
		    r - 1, (unsigned long long)sent, (unsigned long long)refused, (unsigned long long)raced_same,
		    (unsigned long long)both_passed_same);
	EXPECT_GT(raced_same, 0u) << "the rounds overlapped the two CPUs' decisions at least once";
}

// The claim reads its clock before it finds the key's entry, so the entry
// may carry a later time than the claimant's clock: another CPU's first
// fragment passed and stamped it after the coarse clock's next tick. Such
// an entry is new, not expired (an unsigned age below zero read as 2^64 ns
// let the second first fragment claim the key and pass: both passed, 1
// round in 3,000 of the race above, at a tick). Here the stamp is set ahead
// by hand: a first fragment naming other selectors is refused, and the
// later fragments still take the first one's.
TEST_F(FragmentRace, AnEntryStampedAfterTheClaimantsClockIsLive)
{
	for (const bool v6 : {false, true}) {
		SCOPED_TRACE(v6 ? "IPv6" : "IPv4");
		clear_fragment_table();
		const std::string src = v6 ? "2001:db8::10" : "192.0.2.10";
		const uint32_t id = v6 ? 77 : 78;
		auto first = [&](const Shape &s) {
			return run({.src = src, .proto = s.proto, .dport = s.dport, .tcp_flags = s.tcp_flags,
				    .frag = Frag::first, .frag_id = id, .more_fragments = 1});
		};
		ASSERT_EQ(first(DNS), XDP_PASS);
		struct sluice_frag_key k;
		struct sluice_frag_info fi;
		ASSERT_EQ(bpf_map_get_next_key(maps_.frags.get(), nullptr, &k), 0) << "the first fragment's entry";
		ASSERT_EQ(bpf_map_lookup_elem(maps_.frags.get(), &k, &fi), 0);
		fi.first_ns += 1000000000ull; // a clock read later than the next packet's
		ASSERT_EQ(bpf_map_update_elem(maps_.frags.get(), &k, &fi, BPF_EXIST), 0);

		uint64_t malformed = global(SLUICE_CNT_DROP_MALFORMED);
		EXPECT_EQ(first(NTP), XDP_DROP) << "another first fragment under a live entry";
		EXPECT_EQ(global(SLUICE_CNT_DROP_MALFORMED), malformed + 1);
		std::vector<uint64_t> before = counted();
		EXPECT_EQ(run({.src = src, .proto = DNS.proto, .dport = 9, .frag = Frag::later, .frag_id = id,
			       .more_fragments = 1}),
			  XDP_PASS);
		EXPECT_EQ(moved(before, counted()), DNS.rule) << "the later fragment is the passed first one's datagram";
	}
}
