// SPDX-License-Identifier: GPL-2.0-only
// The drop memo (bpf/lib/memo.h, recall_drop): within one reading of the
// coarse clock, a source's drop is repeated without the lookups, and only
// while everything it was decided on holds. Under the test clock every packet
// sent at one time is one reading; each test runs on one CPU, whose memo it is.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/bpf.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "maps.h"
#include "packet.h"
#include "replay.h"
#include "rule_table.h"
#include "sluice_algos.h"
#include "sources.h"
#include "stats.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t T = TRACE_START_NS + 5000000000ULL;
constexpr uint64_t SEC_TICKS = 1000000000ULL << SLUICE_TICK_SHIFT;

/// The pending-drops slot (of each CPU) of IPv4 source `src`.
uint32_t slot_of(const std::string &src)
{
	uint8_t addr[16] = {};
	EXPECT_EQ(inet_pton(AF_INET, src.c_str(), addr), 1);
	uint64_t lo, hi;
	std::memcpy(&lo, addr, 8);
	std::memcpy(&hi, addr + 8, 8);
	return sluice_source_slot(lo, hi);
}

void run_on(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0) << "cannot run on CPU " << cpu;
}

class DropMemo : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "loads a real XDP program: run as root";
		run_on(0); // one CPU: the memo is per CPU
		// The replayer's own rule covers other addresses than the tests'.
		RuleSpec other;
		other.cidr = parse_cidr("172.16.0.0/12");
		other.rate = parse_rate("1/h");
		validate_rule(other);
		kernel_ = std::make_unique<Replayer>(other);
		table_ = std::make_unique<RuleTable>(kernel_->maps());
	}

	InstalledRule add(const char *name, const char *rate, uint64_t burst, uint16_t dport = 0)
	{
		RuleSpec r;
		r.name = name;
		r.cidr = parse_cidr("10.0.0.0/8");
		r.rate = parse_rate(rate);
		r.burst = burst;
		r.algo = Algo::gcra;
		if (dport) {
			r.proto = Proto::udp;
			r.dport = PortRange{dport, dport};
		}
		validate_rule(r);
		return table_->add(r);
	}

	bool send(const char *src, uint64_t t = T, uint16_t dport = 53, size_t payload = 32)
	{
		return kernel_->send(build_packet({.src = src, .dport = dport, .payload = payload}), t);
	}

	Stats stats() { return collect_stats(kernel_->maps(), {}); }

	/// Empties rule r's live entry, as no change of the rules does without
	/// switching the live-set word; restore_entry() puts it back.
	void empty_entry(const InstalledRule &r)
	{
		uint32_t zero = 0;
		struct sluice_active active = {};
		ASSERT_EQ(bpf_map_lookup_elem(kernel_->maps().active.get(), &zero, &active), 0);
		emptied_ = sluice_rule_index(r.slot, active.set);
		struct sluice_rule empty = {};
		ASSERT_EQ(bpf_map_lookup_elem(kernel_->maps().rules.get(), &emptied_, &saved_), 0);
		ASSERT_EQ(bpf_map_update_elem(kernel_->maps().rules.get(), &emptied_, &empty, BPF_ANY), 0);
	}

	void restore_entry()
	{
		ASSERT_EQ(bpf_map_update_elem(kernel_->maps().rules.get(), &emptied_, &saved_, BPF_ANY), 0);
	}

	uint64_t rule_dropped(const char *name)
	{
		for (const auto &r : stats().rules)
			if (r.rule.spec.name == name)
				return r.counters.dropped_packets;
		ADD_FAILURE() << "no rule " << name;
		return 0;
	}

	uint64_t source_dropped(const char *src)
	{
		for (const auto &s : stats().sources)
			if (s.source == src)
				return s.dropped_packets;
		return 0;
	}

	std::unique_ptr<Replayer> kernel_;
	std::unique_ptr<RuleTable> table_;
	uint32_t emptied_ = 0;
	struct sluice_rule saved_ = {};
	std::vector<std::pair<uint32_t, struct sluice_rule>> saved_all_; ///< several entries emptied
};

} // namespace

// The memo is what decides: with the rule's live entry emptied under it (what
// no change does without switching the live-set word), the source it holds is
// still dropped at that reading and counted as every drop is; another source,
// or the same one at the next reading, finds the rule gone and fails open.
TEST_F(DropMemo, RepeatsADropWithinOneClockReadingAndCountsIt)
{
	InstalledRule r = add("limit", "1/h", 1);
	EXPECT_TRUE(send("10.0.0.1"));
	EXPECT_FALSE(send("10.0.0.1"));
	EXPECT_FALSE(send("10.0.0.1"));

	empty_entry(r);

	EXPECT_FALSE(send("10.0.0.1")) << "repeated from the memo";
	EXPECT_TRUE(send("10.0.0.2")) << "a source the memo does not hold";
	EXPECT_TRUE(send("10.0.0.1", T + 1)) << "the next reading";

	restore_entry();
	Stats s = stats();
	EXPECT_EQ(s.global[SLUICE_CNT_DROP_RATE].packets, 3u);
	EXPECT_EQ(s.global[SLUICE_CNT_DROP_RATE].bytes, 3u * 60);
	EXPECT_EQ(s.global[SLUICE_CNT_FAILOPEN_RULE].packets, 2u);
	EXPECT_EQ(rule_dropped("limit"), 3u);
	EXPECT_EQ(source_dropped("10.0.0.1"), 3u) << "through the CPU's pending slot";
}

// A deny's drop is memoized too, and a change of the rules reaches it at once.
TEST_F(DropMemo, ADenyIsRepeatedUntilTheRulesChange)
{
	RuleSpec d;
	d.name = "deny";
	d.cidr = parse_cidr("10.0.0.0/8");
	d.action = Action::deny;
	validate_rule(d);
	table_->add(d);
	EXPECT_FALSE(send("10.0.0.1"));
	EXPECT_FALSE(send("10.0.0.1"));
	table_->remove("deny");
	EXPECT_TRUE(send("10.0.0.1")) << "the rule is gone";
	EXPECT_EQ(stats().global[SLUICE_CNT_DROP_DENY].packets, 2u);
}

// Two edits in place switch the live rule set twice, back to the set the
// memo was made under: the word counts switches, so the memo is not taken
// for the edited rule's.
TEST_F(DropMemo, TwoEditsInPlaceAtOneReadingDecideAtOnce)
{
	add("limit", "1/h", 1);
	EXPECT_TRUE(send("10.0.0.1"));
	EXPECT_FALSE(send("10.0.0.1"));
	RuleEdit e;
	e.burst = 5;
	ASSERT_TRUE(table_->edit_in_place("limit", e));
	e.burst = 10;
	ASSERT_TRUE(table_->edit_in_place("limit", e));
	EXPECT_TRUE(send("10.0.0.1")) << "a burst of 10 admits the second packet";
}

// A released bucket (made again, full, by the controller as the claimer of
// its way: `sluice release`) reaches its next packet, at the same reading:
// its word moved.
TEST_F(DropMemo, AReleasedBucketReachesItsNextPacket)
{
	InstalledRule r = add("limit", "1/min", 1);
	EXPECT_TRUE(send("10.0.0.1"));
	EXPECT_FALSE(send("10.0.0.1"));
	EXPECT_FALSE(send("10.0.0.1"));
	uint32_t zero = 0;
	struct sluice_config cfg = {};
	ASSERT_EQ(bpf_map_lookup_elem(kernel_->maps().config.get(), &zero, &cfg), 0);
	uint8_t addr[16] = {};
	ASSERT_EQ(inet_pton(AF_INET, "10.0.0.1", addr), 1);
	struct sluice_rule dp = {};
	dp.algo = SLUICE_ALGO_GCRA;
	ASSERT_TRUE(SourceTable4(kernel_->maps().src4.get())
			    .refill(r.bucket_id ? r.bucket_id : r.id, addr, cfg.hash_seed, dp, sluice_ns_to_ticks(T)));
	EXPECT_TRUE(send("10.0.0.1")) << "full again";
	EXPECT_FALSE(send("10.0.0.1"));
}

// A purged bucket's way holds another word: the source's next packet makes a
// fresh bucket and passes.
TEST_F(DropMemo, APurgedBucketIsNotTakenForItsSuccessor)
{
	InstalledRule r = add("limit", "1/h", 1);
	EXPECT_TRUE(send("10.0.0.1"));
	EXPECT_FALSE(send("10.0.0.1"));
	EXPECT_EQ(SourceTable4(kernel_->maps().src4.get()).purge(r.bucket_id ? r.bucket_id : r.id), 1u);
	EXPECT_TRUE(send("10.0.0.1")) << "a fresh bucket";
}

// Under a byte rate the memo holds the length it dropped: a shorter packet
// that fits the bucket passes.
TEST_F(DropMemo, AShorterPacketUnderAByteRateIsDecidedAfresh)
{
	add("bytes", "1kB/s", 1500); // no refill within one reading
	EXPECT_TRUE(send("10.0.0.1", T, 53, 1000));  // 1,028 bytes of 1,500
	EXPECT_FALSE(send("10.0.0.1", T, 53, 1000)); // 2,056
	EXPECT_FALSE(send("10.0.0.1", T, 53, 1000));
	EXPECT_TRUE(send("10.0.0.1", T, 53, 32)) << "60 bytes fit in the 472 left";
	EXPECT_FALSE(send("10.0.0.1", T, 53, 400)) << "428 more do not";
}

// The memo holds the port: the same source to another port is decided by
// that port's rule.
TEST_F(DropMemo, AnotherPortIsDecidedByItsOwnRule)
{
	add("dns", "1/h", 1, 53);
	add("ntp", "1000/s", 1000, 123);
	EXPECT_TRUE(send("10.0.0.1", T, 53));
	EXPECT_FALSE(send("10.0.0.1", T, 53));
	EXPECT_FALSE(send("10.0.0.1", T, 53));
	EXPECT_TRUE(send("10.0.0.1", T, 123));
	EXPECT_EQ(rule_dropped("dns"), 2u);
	EXPECT_EQ(rule_dropped("ntp"), 0u);
}

// IPv6: the drop of a /64's bucket is repeated from the memo, and a purge of
// the bucket reaches the source's next packet.
TEST_F(DropMemo, AnIPv6SourcesDropIsRepeatedUntilItsBucketGoes)
{
	RuleSpec r;
	r.name = "v6";
	r.cidr = parse_cidr("2001:db8::/32");
	r.rate = parse_rate("1/h");
	r.burst = 1;
	r.algo = Algo::gcra;
	validate_rule(r);
	InstalledRule installed = table_->add(r);
	EXPECT_TRUE(send("2001:db8::1"));
	EXPECT_FALSE(send("2001:db8::1"));

	empty_entry(installed);
	EXPECT_FALSE(send("2001:db8::1")) << "repeated from the memo";
	EXPECT_TRUE(send("2001:db8::2")) << "another address of the /64: not in the memo, and the rule is gone";
	restore_entry();
	EXPECT_EQ(rule_dropped("v6"), 2u);

	EXPECT_EQ(SourceTable6(kernel_->maps().src6.get()).purge(installed.bucket_id ? installed.bucket_id : installed.id),
		  1u);
	EXPECT_TRUE(send("2001:db8::1")) << "a fresh bucket";
}

// Two sources dropped in turn: each has the pending slot its address hashes
// to, which holds its memo and its drops, so both are repeated from the memo
// and count every drop.
TEST_F(DropMemo, SourcesDroppedInTurnCountEveryDrop)
{
	InstalledRule r = add("limit", "1/h", 1);
	EXPECT_TRUE(send("10.0.0.1"));
	EXPECT_TRUE(send("10.0.0.2"));
	for (int i = 0; i < 2; i++) {
		EXPECT_FALSE(send("10.0.0.1"));
		EXPECT_FALSE(send("10.0.0.2"));
	}
	empty_entry(r);
	for (int i = 0; i < 3; i++) {
		EXPECT_FALSE(send("10.0.0.1")) << "from the memo";
		EXPECT_FALSE(send("10.0.0.2")) << "from the memo";
	}
	restore_entry();
	EXPECT_EQ(source_dropped("10.0.0.1"), 5u);
	EXPECT_EQ(source_dropped("10.0.0.2"), 5u);
	EXPECT_EQ(rule_dropped("limit"), 10u);
	EXPECT_EQ(stats().global[SLUICE_CNT_DROP_RATE].packets, 10u);
}

// Each CPU counts a source's drops in its own run of slots (sluice_cpu_slot),
// at the slot the source's address hashes to, and the readers add every CPU's:
// generated sources (of distinct slots), each dropped a generated number of
// times on each CPU.
TEST_F(DropMemo, EachCpuCountsASourcesDropsInItsOwnSlot)
{
	ASSERT_GE(libbpf_num_possible_cpus(), 2) << "needs two CPUs";
	add("limit", "1/h", 1);
	std::mt19937 rng(20261128);
	std::map<uint32_t, std::string> by_slot; // distinct slots: no source moves another's counts on
	while (by_slot.size() < 8) {
		std::string src = "10." + std::to_string(rng() % 256) + "." + std::to_string(rng() % 256) + "." +
				  std::to_string(1 + rng() % 254);
		by_slot.emplace(slot_of(src), src);
	}
	std::map<std::string, std::array<uint64_t, 2>> drops;
	for (int cpu = 0; cpu < 2; cpu++) {
		run_on(cpu);
		for (const auto &[slot, src] : by_slot) {
			uint64_t n = rng() % 6;
			for (uint64_t i = 0; i < n; i++)
				if (!send(src.c_str()))
					drops[src][size_t(cpu)]++;
		}
	}
	run_on(0);
	const MappedArray pending(kernel_->maps().pending.get());
	ASSERT_EQ(pending.size(), SLUICE_PENDING_SLOTS * uint32_t(libbpf_num_possible_cpus()));
	for (const auto &[slot, src] : by_slot) {
		for (uint32_t cpu = 0; cpu < 2; cpu++)
			EXPECT_EQ(pending.at<struct sluice_pending_drops>(sluice_cpu_slot(cpu, slot))->packets,
				  drops[src][cpu])
				<< src << " on CPU " << cpu;
		EXPECT_EQ(source_dropped(src.c_str()), drops[src][0] + drops[src][1]) << src;
	}
}

// Two sources whose addresses hash to one pending slot: the second, dropped
// by a rule the fast path leaves to the walk (a fixed window), renames the
// slot for its bucket and leaves the first's memo in it. The first's next
// packet at that reading is not counted on the memo (the slot names another
// bucket now): it is decided afresh, and each source counts its own drops.
TEST_F(DropMemo, ASlotRenamedForAnotherBucketIsNotCountedOnTheMemo)
{
	std::string other;
	for (uint32_t i = 2; other.empty() && i < (1u << 16); i++) {
		std::string candidate = "10.1." + std::to_string(i >> 8) + "." + std::to_string(i & 0xff);
		if (slot_of(candidate.c_str()) == slot_of("10.0.0.1"))
			other = candidate;
	}
	ASSERT_FALSE(other.empty()) << "no address of 10.1.0.0/16 shares 10.0.0.1's slot";

	add("limit", "1/h", 1);
	RuleSpec window;
	window.name = "window";
	window.cidr = parse_cidr(other + "/32");
	window.rate = parse_rate("1/h");
	window.algo = Algo::fixed_window;
	validate_rule(window);
	table_->add(window);

	EXPECT_TRUE(send("10.0.0.1"));
	EXPECT_TRUE(send(other.c_str()));
	EXPECT_FALSE(send("10.0.0.1")) << "the memo is made";
	EXPECT_FALSE(send(other.c_str())) << "the walk drops it and renames the slot";
	for (int i = 0; i < 3; i++) {
		EXPECT_FALSE(send("10.0.0.1"));
		EXPECT_FALSE(send(other.c_str()));
	}
	EXPECT_EQ(source_dropped("10.0.0.1"), 4u);
	EXPECT_EQ(source_dropped(other.c_str()), 4u);
	EXPECT_EQ(rule_dropped("limit"), 4u);
	EXPECT_EQ(rule_dropped("window"), 4u);
}

// A rule that selects TCP flags or source ports drops only what they match,
// at one reading too: the SYN a --syn rule drops says nothing of the ACK that
// follows it, nor a packet from a denied source port of the next one from
// another port.
TEST_F(DropMemo, ASelectorRulesDropIsNotRepeatedForOtherSegmentsOrPorts)
{
	RuleSpec syn;
	syn.name = "syn";
	syn.cidr = parse_cidr("10.0.0.0/8");
	syn.rate = parse_rate("1/h");
	syn.burst = 1;
	syn.algo = Algo::gcra;
	syn.tcp_flags = SYN_ONLY;
	syn.dport = {22, 22};
	validate_rule(syn);
	table_->add(syn);
	RuleSpec amp;
	amp.name = "memcached";
	amp.cidr = parse_cidr("10.0.0.0/8");
	amp.action = Action::deny;
	amp.proto = Proto::udp;
	amp.sport = {11211, 11211};
	validate_rule(amp);
	table_->add(amp);

	auto tcp = [&](uint8_t flags) {
		return kernel_->send(build_packet({.src = "10.0.0.1", .proto = 6, .dport = 22, .tcp_flags = flags}), T);
	};
	EXPECT_TRUE(tcp(0x02)) << "the burst";
	EXPECT_FALSE(tcp(0x02));
	EXPECT_FALSE(tcp(0x02));
	EXPECT_TRUE(tcp(0x10)) << "an ACK at the same reading, same port";
	EXPECT_TRUE(tcp(0x18));
	EXPECT_FALSE(tcp(0x02));

	auto udp = [&](uint16_t sport) {
		return kernel_->send(build_packet({.src = "10.0.0.2", .dport = 40000, .sport = sport}), T);
	};
	EXPECT_FALSE(udp(11211));
	EXPECT_FALSE(udp(11211));
	EXPECT_TRUE(udp(11212)) << "another source port at the same reading, same destination";
	EXPECT_FALSE(udp(11211));

	EXPECT_EQ(rule_dropped("syn"), 3u);
	EXPECT_EQ(rule_dropped("memcached"), 3u);
	Stats s = stats();
	EXPECT_EQ(s.global[SLUICE_CNT_PASS_NO_MATCH].packets, 3u);
}

// The memo holds a selector rule's drop with what the rule read: with the
// rules' live entries emptied under it (what no change does without switching
// the live-set word), the SYN a --syn rule dropped is still dropped, from the
// memo, and counted; the same source's ACK, SYN-ACK and a SYN whose TCP header
// is cut before its flags find the rule gone (the memo does not take them)
// and fail open. Likewise a --sport deny: its port again from the memo,
// another port decided afresh; and a rule on flags that a packet with flags
// hidden might match (syn=none): such a packet is not taken for the ACK it
// dropped. IPv4 and IPv6.
TEST_F(DropMemo, ASelectorRulesDropIsRepeatedOnlyForPacketsItsSelectorsMatch)
{
	auto rule = [&](const char *name, const char *cidr, const char *flags, uint16_t sport) {
		RuleSpec r;
		r.name = name;
		r.cidr = parse_cidr(cidr);
		if (sport) {
			r.action = Action::deny;
			r.proto = Proto::udp;
			r.sport = {sport, sport};
		} else {
			r.rate = parse_rate("1/h");
			r.burst = 1;
			r.algo = Algo::gcra;
			r.proto = Proto::tcp;
			r.tcp_flags = parse_tcp_flags(flags);
			r.dport = {22, 22};
		}
		validate_rule(r);
		return table_->add(r);
	};
	const InstalledRule syn4 = rule("syn4", "10.0.0.0/24", "syn,ack=syn", 0);
	const InstalledRule syn6 = rule("syn6", "2001:db8::/32", "syn,ack=syn", 0);
	const InstalledRule notsyn = rule("notsyn", "10.0.1.0/24", "syn=none", 0);
	const InstalledRule amp = rule("amp", "10.0.2.0/24", "", 11211);
	auto tcp = [&](const char *src, uint8_t flags, int l4_bytes = -1) {
		return kernel_->send(build_packet({.src = src,
						   .proto = 6,
						   .dport = 22,
						   .tcp_flags = flags,
						   .l4_bytes = l4_bytes,
						   .payload = 0}),
				     T);
	};
	auto udp = [&](uint16_t sport) {
		return kernel_->send(build_packet({.src = "10.0.2.1", .dport = 40000, .sport = sport}), T);
	};
	// Each source its own pending slot, so that each memo stays.
	std::set<uint32_t> slots;
	for (const char *src : {"10.0.0.1", "2001:db8::1", "10.0.1.1", "10.0.2.1"}) {
		uint8_t addr[16] = {};
		ASSERT_EQ(inet_pton(std::strchr(src, ':') ? AF_INET6 : AF_INET, src, addr), 1);
		uint64_t lo, hi;
		std::memcpy(&lo, addr, 8);
		std::memcpy(&hi, addr + 8, 8);
		slots.insert(sluice_source_slot(lo, hi));
	}
	ASSERT_EQ(slots.size(), 4u);
	for (const char *src : {"10.0.0.1", "2001:db8::1"}) {
		EXPECT_TRUE(tcp(src, 0x02)) << src << ": the burst";
		EXPECT_FALSE(tcp(src, 0x02)) << src << ": the memo learns the drop";
	}
	EXPECT_TRUE(tcp("10.0.1.1", 0x10));
	EXPECT_FALSE(tcp("10.0.1.1", 0x10));
	EXPECT_FALSE(udp(11211));

	for (const InstalledRule *r : {&syn4, &syn6, &notsyn, &amp}) {
		empty_entry(*r);
		saved_all_.emplace_back(emptied_, saved_);
	}
	for (const char *src : {"10.0.0.1", "2001:db8::1"}) {
		EXPECT_FALSE(tcp(src, 0x02)) << src << ": a SYN again, from the memo";
		EXPECT_TRUE(tcp(src, 0x10)) << src << ": its ACK is decided afresh";
		EXPECT_TRUE(tcp(src, 0x12)) << src << ": its SYN-ACK too";
		EXPECT_TRUE(tcp(src, 0x02, 12)) << src << ": a SYN with its flags cut off too";
		EXPECT_FALSE(tcp(src, 0x02)) << src << ": the SYN's drop is still in the memo";
	}
	EXPECT_FALSE(tcp("10.0.1.1", 0x18)) << "a PSH-ACK shows the ACK's flags under syn: from the memo";
	EXPECT_TRUE(tcp("10.0.1.1", 0x10, 12)) << "flags hidden: not taken for the ACK";
	EXPECT_FALSE(udp(11211)) << "the denied port again, from the memo";
	EXPECT_TRUE(udp(11212)) << "another source port is decided afresh";
	EXPECT_FALSE(udp(11211));
	for (const auto &[index, entry] : saved_all_)
		ASSERT_EQ(bpf_map_update_elem(kernel_->maps().rules.get(), &index, &entry, BPF_ANY), 0);

	EXPECT_EQ(rule_dropped("syn4"), 3u);
	EXPECT_EQ(rule_dropped("syn6"), 3u);
	EXPECT_EQ(rule_dropped("notsyn"), 2u);
	EXPECT_EQ(rule_dropped("amp"), 3u);
	Stats s = stats();
	EXPECT_EQ(s.global[SLUICE_CNT_DROP_RATE].packets, 8u);
	EXPECT_EQ(s.global[SLUICE_CNT_DROP_DENY].packets, 3u);
	EXPECT_EQ(s.global[SLUICE_CNT_FAILOPEN_RULE].packets, 8u) << "what the memo did not take found the rules gone";
	EXPECT_EQ(source_dropped("10.0.0.1"), 3u) << "through the CPU's pending slot";
}
