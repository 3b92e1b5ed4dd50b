// SPDX-License-Identifier: GPL-2.0-only
// The fixture of the BPF layer: the real XDP program, loaded from the embedded
// object, driven with crafted frames through BPF_PROG_TEST_RUN. Rules go in
// through the same RuleTable the CLI uses; verdicts and counters are read back
// as `sluice stats` reads them.
#pragma once

#include <gtest/gtest.h>

#include <linux/bpf.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "datapath.h"
#include "packet.h"
#include "process.h"
#include "rule_table.h"
#include "transaction.h"
#include "stats.h"

namespace sluice::test {

/// A limit rule's spec, for a test to change further before adding it.
inline RuleSpec limit_spec(const char *cidr, const char *rate, uint64_t burst, const char *name = "",
			   Proto proto = Proto::any, PortRange ports = {}, int per = -1)
{
	RuleSpec s;
	s.name = name;
	s.cidr = parse_cidr(cidr);
	s.rate = parse_rate(rate);
	s.burst = burst;
	s.proto = proto;
	s.dport = ports;
	s.per_prefix = per;
	return s;
}

class Datapath : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "BPF tests load a real XDP program and must run as root";
		set_libbpf_verbose(false);
		prog_ = std::make_unique<LoadedProgram>(TableSizes{4096, 256});
		maps_ = prog_->maps();
		table_ = std::make_unique<RuleTable>(maps_);
	}

	/// Runs one frame `repeat` times and returns the XDP verdict.
	int run_frame(const std::vector<uint8_t> &frame, uint32_t repeat = 1)
	{
		LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
			    .data_size_in = static_cast<__u32>(frame.size()), .repeat = static_cast<int>(repeat));
		int err = bpf_prog_test_run_opts(prog_->prog_fd(), &opts);
		EXPECT_EQ(err, 0) << "BPF_PROG_TEST_RUN failed: " << strerror(errno);
		return static_cast<int>(opts.retval);
	}
	int run(const PacketSpec &spec, uint32_t repeat = 1) { return run_frame(test::build_packet(spec), repeat); }

	InstalledRule add(const char *cidr, const char *rate, uint64_t burst, const char *name = "",
			  Proto proto = Proto::any, PortRange ports = {}, int per = -1)
	{
		return table_->add(limit_spec(cidr, rate, burst, name, proto, ports, per));
	}
	InstalledRule add_action(const char *cidr, Action a, const char *name = "", Proto proto = Proto::any,
				 PortRange ports = {})
	{
		RuleSpec s;
		s.name = name;
		s.cidr = parse_cidr(cidr);
		s.action = a;
		s.proto = proto;
		s.dport = ports;
		return table_->add(s);
	}

	Stats stats(const std::string &rule = "") { return collect_stats(maps_, {0, rule}); }
	uint64_t global(int index) { return stats().global[index].packets; }

	/// A rule's counters, summed over CPUs; fails the test if there is no such rule.
	struct sluice_rule_counters rule_counters(const std::string &name)
	{
		for (const auto &r : stats().rules)
			if (r.rule.spec.name == name)
				return r.counters;
		ADD_FAILURE() << "no rule " << name;
		return {};
	}

	/// The bucket of `source` under rule `rule`; fails the test if absent.
	SourceStats source(const std::string &src, const std::string &rule)
	{
		for (const auto &s : stats().sources)
			if (s.source == src && s.rule == rule)
				return s;
		ADD_FAILURE() << "no bucket for " << src << " under " << rule;
		return {};
	}

	/// Seconds a rule's clock may read late: a tick for the coarse clock.
	double clock_lag(const InstalledRule &r)
	{
		struct sluice_rule dp = RuleTable(maps_).datapath_rule(r.slot);
		return (dp.flags & SLUICE_RULE_COARSE_CLOCK) ? double(coarse_clock_tick_ns()) / 1e9 : 0;
	}

	/// Runs `frame` `per_thread` times on CPU 0 and CPU 1 at once; returns the seconds taken.
	double flood_from_two_cpus(const std::vector<uint8_t> &frame, uint32_t per_thread)
	{
		auto start = std::chrono::steady_clock::now();
		run_on_two_cpus([&](int) { run_frame(frame, per_thread); });
		return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	}

	/// After a two-CPU flood of `sent` packets from one source into a fresh
	/// table: each packet is on the source's counters, or passed fail-open
	/// (failopen_table) because the other CPU, creating the source's bucket,
	/// stayed in the middle of it through four lookups: preempted there (a
	/// busy host). Returns those fail-open passes.
	uint64_t expect_every_packet_counted(const SourceStats &src, const Stats &st, uint64_t sent)
	{
		uint64_t failopen = st.global[SLUICE_CNT_FAILOPEN_TABLE].packets;

		EXPECT_EQ(src.passed_packets + src.dropped_packets + failopen, sent) << "no counter update lost";
		EXPECT_EQ(st.rules.at(0).counters.failopen_table, failopen);
		// The margin, as for forced passes, is for busy hosts.
		EXPECT_LT(double(failopen), 0.10 * double(sent)) << "only the bucket's making can fail open";
		return failopen;
	}

	std::unique_ptr<LoadedProgram> prog_;
	MapSet maps_;
	std::unique_ptr<RuleTable> table_;
};

/// One row of the parsing table: a frame, its verdict and the counter it lands in.
struct ParseCase {
	const char *description;
	PacketSpec pkt;
	int verdict;
	int counter;
};

} // namespace sluice::test
