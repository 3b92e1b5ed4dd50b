// SPDX-License-Identifier: GPL-2.0-only
// Temporary bans through BPF_PROG_TEST_RUN on the test clock: a rule with
// --ban bans a source off probation that it drops often enough, every
// packet of it is then dropped as drop_ban until the ban runs out (an UNBAN
// event), and a flood of new (spoofed) sources never bans or pushes a ban
// out.
#include <random>

#include <gtest/gtest.h>

#include "adversarial.h"
#include "fixture.h"
#include "packet.h"
#include "bans.h"
#include "events.h"
#include "rule_maps.h"
#include "transaction.h"
#include "metrics.h"
#include "stats.h"

namespace sluice::test {
namespace {

constexpr uint64_t S = 1000000000ULL;

class Bans : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "BPF tests load a real XDP program and must run as root";
		// The test clock starts near CLOCK_MONOTONIC: the controller lifts
		// bans it finds run out by that clock at a rule change.
		T0 = (ban_clock_ns() / S + 10) * S;
		put_ = std::make_unique<ProgramUnderTest>(4096, true);
		table_ = std::make_unique<RuleTable>(put_->maps());
		reader_ = std::make_unique<EventReader>(put_->maps().events.get(),
							[this](const struct sluice_event &e) { events_.push_back(e); });
	}

	InstalledRule add(const char *cidr, uint64_t ban_s, uint32_t after = 0, int per = -1, const char *name = "ssh")
	{
		RuleSpec s = limit_spec(cidr, "1/s", 2, name, Proto::udp, {53, 53}, per);
		s.ban = {ban_s * S, after};
		return Transaction(*table_).add(s).commit().added.front();
	}

	/// One packet from `src` at `t`: its verdict counter's name.
	std::string send(const std::string &src, uint64_t t)
	{
		put_->set_clock(t);
		put_->run(build_packet({.src = src}));
		return put_->moved().verdict;
	}

	/// Makes `src` a returning source (off probation) with a full bucket by
	/// `t`: one packet 3 s before, one 2 s before.
	void settle(const std::string &src, uint64_t t)
	{
		EXPECT_EQ(send(src, t - 3 * S), "pass_limit");
		EXPECT_EQ(send(src, t - 1 * S), "pass_limit");
	}

	std::vector<Ban> bans(uint64_t t) { return list_bans(put_->maps(), t); }

	/// A rule that bans at the third drop within 10 s, and two drops of
	/// `src` at `t`: the count started, no ban yet.
	void two_drops_of_three(const std::string &src, uint64_t t)
	{
		add("10.1.0.0/16", 10, 3);
		settle(src, t);
		put_->moved();
		send(src, t);
		send(src, t);
		EXPECT_EQ(send(src, t), "drop_rate");
		EXPECT_EQ(send(src, t), "drop_rate");
		EXPECT_TRUE(bans(t).empty()) << "two drops of three";
	}

	std::vector<struct sluice_event> take_events()
	{
		reader_->poll(std::chrono::milliseconds(0));
		return std::exchange(events_, {});
	}

	uint64_t T0 = 0;
	std::unique_ptr<ProgramUnderTest> put_;
	std::unique_ptr<RuleTable> table_;
	std::unique_ptr<EventReader> reader_;
	std::vector<struct sluice_event> events_;
};

TEST_F(Bans, ThresholdBansThenExpiresIPv4)
{
	InstalledRule r = add("10.1.0.0/16", 60);
	settle("10.1.0.5", T0);
	put_->moved();
	EXPECT_EQ(send("10.1.0.5", T0), "pass_limit");
	EXPECT_EQ(send("10.1.0.5", T0), "pass_limit");
	EXPECT_EQ(send("10.1.0.5", T0), "drop_rate") << "the drop that bans is the rule's";
	ASSERT_EQ(bans(T0).size(), 1u);
	Ban b = bans(T0)[0];
	EXPECT_EQ(format_cidr(b.prefix), "10.1.0.5");
	EXPECT_EQ(b.slot, r.slot);
	EXPECT_EQ(b.until_ns - b.since_ns, 60 * S);
	auto ev = take_events();
	ASSERT_FALSE(ev.empty());
	EXPECT_EQ(ev.back().kind, uint32_t(SLUICE_EVENT_BAN));
	EXPECT_EQ(ev.back().pad, 32u);
	EXPECT_EQ(format_address(4, ev.back().key.addr), "10.1.0.5");
	{
		EventNamer namer(put_->maps());
		ThrottleEvent named = namer.name(ev.back());
		EXPECT_EQ(named.kind, ThrottleEvent::Kind::ban);
		EXPECT_EQ(named.source, "10.1.0.5");
		EXPECT_EQ(named.rule, "ssh");
		std::string line = format_event(named);
		EXPECT_NE(line.find(" banned 10.1.0.5 by rule ssh (" + std::to_string(r.id) + ")"), std::string::npos)
			<< line;
		std::string json = event_json(named);
		EXPECT_NE(json.find("\"event\":\"ban\""), std::string::npos) << json;
		EXPECT_EQ(event_from_json(json).kind, ThrottleEvent::Kind::ban);
	}

	// Every packet, whatever rule it meets (another port here), is the ban's.
	for (int i = 1; i <= 30; i++)
		EXPECT_EQ(send("10.1.0.5", T0 + i * S), "drop_ban") << "second " << i;
	put_->set_clock(T0 + 30 * S);
	put_->run(build_packet({.src = "10.1.0.5", .proto = 6, .dport = 22}));
	EXPECT_EQ(put_->moved().verdict, "drop_ban") << "a ban covers all the source's traffic";
	EXPECT_EQ(send("10.1.0.6", T0 + 30 * S), "pass_limit") << "another source";
	EXPECT_EQ(bans(T0 + 30 * S).at(0).drops, 31u);

	// Runs out at T0 + 60 s: the next packet passes, with an UNBAN.
	EXPECT_EQ(send("10.1.0.5", T0 + 60 * S - 1), "drop_ban");
	EXPECT_EQ(send("10.1.0.5", T0 + 60 * S), "pass_limit");
	EXPECT_TRUE(bans(T0 + 60 * S).empty());
	ev = take_events();
	ASSERT_FALSE(ev.empty());
	EXPECT_EQ(ev.back().kind, uint32_t(SLUICE_EVENT_UNBAN));
	EXPECT_EQ(ev.back().since_ns, T0);
	{
		EventNamer namer(put_->maps());
		ThrottleEvent named = namer.name(ev.back());
		EXPECT_EQ(named.kind, ThrottleEvent::Kind::unban);
		std::string line = format_event(named);
		EXPECT_NE(line.find(" unbanned 10.1.0.5 (banned by rule ssh"), std::string::npos) << line;
		EXPECT_NE(line.find("after 60.0 s"), std::string::npos) << line;
		EXPECT_EQ(event_from_json(event_json(named)).kind, ThrottleEvent::Kind::unban);
	}
	EXPECT_EQ(put_->read_counters()[SLUICE_CNT_INFO_BANS], 1u);
}

TEST_F(Bans, OnProbationNeverBanned)
{
	add("10.1.0.0/16", 60);
	for (int i = 0; i < 5; i++)
		send("10.2.0.1", T0); // not covered: pass_no_match
	EXPECT_EQ(send("10.1.0.7", T0), "pass_limit");
	EXPECT_EQ(send("10.1.0.7", T0), "pass_limit");
	for (int i = 0; i < 10; i++)
		EXPECT_EQ(send("10.1.0.7", T0), "drop_rate") << "a new source is dropped, not banned";
	EXPECT_TRUE(bans(T0).empty());
}

TEST_F(Bans, AfterCountsDropsWithinTheDuration)
{
	two_drops_of_three("10.1.0.5", T0);
	// The count restarts once the duration has passed since its first drop.
	send("10.1.0.5", T0 + 11 * S);
	send("10.1.0.5", T0 + 11 * S);
	EXPECT_EQ(send("10.1.0.5", T0 + 11 * S), "drop_rate");
	EXPECT_TRUE(bans(T0 + 11 * S).empty()) << "one drop in a new count";
	EXPECT_EQ(send("10.1.0.5", T0 + 11 * S), "drop_rate");
	EXPECT_EQ(send("10.1.0.5", T0 + 11 * S), "drop_rate");
	ASSERT_EQ(bans(T0 + 11 * S).size(), 1u) << "three drops within 10 s";
	EXPECT_EQ(send("10.1.0.5", T0 + 11 * S), "drop_ban");
}

// Another CPU may stamp a source's first drop after this CPU read its clock
// (the coarse clock's next tick in between): this CPU's next drop then reads
// a clock before the count's start. That drop is within the duration, and
// counts (an unsigned age below zero read as 2^64 ns restarted the count:
// a ban came a drop late, or never). The test clock stands for the two CPUs.
TEST_F(Bans, ADropWhoseClockIsBeforeTheCountsStartCounts)
{
	two_drops_of_three("10.1.0.5", T0);
	EXPECT_EQ(send("10.1.0.5", T0 - 4000000), "drop_rate") << "the third drop, on a clock a tick behind";
	ASSERT_EQ(bans(T0).size(), 1u) << "three drops within 10 s";
	EXPECT_EQ(send("10.1.0.5", T0), "drop_ban");
}

TEST_F(Bans, PerPrefixIPv6)
{
	add("2001:db8::/32", 60, 0, 64);
	settle("2001:db8:0:1::5", T0);
	put_->moved();
	send("2001:db8:0:1::5", T0);
	send("2001:db8:0:1::5", T0);
	EXPECT_EQ(send("2001:db8:0:1::5", T0), "drop_rate");
	ASSERT_EQ(bans(T0).size(), 1u);
	EXPECT_EQ(format_cidr(bans(T0)[0].prefix), "2001:db8:0:1::/64");
	EXPECT_EQ(send("2001:db8:0:1::99", T0 + S), "drop_ban") << "the whole /64 is banned";
	EXPECT_EQ(send("2001:db8:0:2::1", T0 + S), "pass_limit") << "another /64";
	auto ev = take_events();
	ASSERT_FALSE(ev.empty());
	EXPECT_EQ(ev.back().kind, uint32_t(SLUICE_EVENT_BAN));
	EXPECT_EQ(ev.back().pad, 64u);
}

TEST_F(Bans, PerPrefixIPv4AndBanDel)
{
	add("10.1.0.0/16", 600, 0, 24);
	settle("10.1.2.3", T0);
	put_->moved();
	send("10.1.2.3", T0);
	send("10.1.2.3", T0);
	send("10.1.2.3", T0);
	ASSERT_EQ(bans(T0).size(), 1u);
	EXPECT_EQ(format_cidr(bans(T0)[0].prefix), "10.1.2.0/24");
	EXPECT_EQ(send("10.1.2.200", T0 + S), "drop_ban");
	EXPECT_FALSE(remove_ban(put_->maps(), parse_cidr("10.1.3.1"), T0 + S)) << "no ban covers it";
	take_events();
	auto gone = remove_ban(put_->maps(), parse_cidr("10.1.2.200"), T0 + S);
	ASSERT_TRUE(gone);
	EXPECT_EQ(format_cidr(gone->prefix), "10.1.2.0/24");
	// `ban del` writes the unban into the program's ring, as the program would.
	auto ev = take_events();
	ASSERT_EQ(ev.size(), 1u);
	EXPECT_EQ(ev[0].kind, uint32_t(SLUICE_EVENT_UNBAN));
	EXPECT_EQ(ev[0].ns, T0 + S);
	EXPECT_EQ(ev[0].since_ns, T0);
	EXPECT_EQ(ev[0].pad, 24u);
	EXPECT_EQ(format_address(4, ev[0].key.addr), "10.1.2.0");
	ThrottleEvent named = EventNamer(put_->maps()).name(ev[0]);
	EXPECT_EQ(named.kind, ThrottleEvent::Kind::unban);
	EXPECT_EQ(named.source, "10.1.2.0/24");
	EXPECT_EQ(named.rule, "ssh");
	EXPECT_EQ(send("10.1.2.200", T0 + 5 * S), "pass_limit");
	EXPECT_TRUE(take_events().empty()) << "one unban a ban";
}

// A ban whose source has gone quiet ends on time all the same: the sweep
// (the agent's, `sluice events`') removes it at its end with its unban, once;
// the source's next packet passes and reports nothing more. Before its end
// the sweep leaves it.
TEST_F(Bans, ARunOutBanOfAQuietSourceIsSweptWithOneUnban)
{
	add("10.1.0.0/16", 60);
	settle("10.1.0.5", T0);
	send("10.1.0.5", T0);
	send("10.1.0.5", T0);
	EXPECT_EQ(send("10.1.0.5", T0), "drop_rate");
	ASSERT_EQ(bans(T0).size(), 1u);
	take_events();
	EXPECT_EQ(sweep_bans(put_->maps(), T0 + 60 * S - 1), 0u) << "not run out yet";
	EXPECT_EQ(read_ban_entries(put_->maps().bans.get()).size(), 1u);
	EXPECT_EQ(sweep_bans(put_->maps(), T0 + 61 * S), 1u);
	EXPECT_TRUE(read_ban_entries(put_->maps().bans.get()).empty());
	auto ev = take_events();
	ASSERT_EQ(ev.size(), 1u);
	EXPECT_EQ(ev[0].kind, uint32_t(SLUICE_EVENT_UNBAN));
	EXPECT_EQ(ev[0].since_ns, T0);
	EXPECT_EQ(ev[0].ns, T0 + 61 * S);
	EXPECT_EQ(EventNamer(put_->maps()).name(ev[0]).source, "10.1.0.5");
	EXPECT_EQ(sweep_bans(put_->maps(), T0 + 62 * S), 0u);
	EXPECT_EQ(send("10.1.0.5", T0 + 62 * S), "pass_limit");
	EXPECT_TRUE(take_events().empty()) << "one unban a ban";
}

TEST_F(Bans, RuleSetKeepsBansRuleDelLiftsThem)
{
	add("10.1.0.0/16", 600);
	add("10.9.0.0/16", 600, 0, -1, "web");
	for (const char *src : {"10.1.0.5", "10.9.0.5"}) {
		settle(src, T0);
		send(src, T0);
		send(src, T0);
		send(src, T0);
	}
	ASSERT_EQ(bans(T0).size(), 2u);
	RuleEdit e;
	e.rate = parse_rate("2/s");
	Transaction(*table_).edit("ssh", e).commit();
	e = {};
	e.algo = Algo::gcra; // restarts the buckets: the ban stays with the rule
	Transaction(*table_).edit("ssh", e).commit();
	EXPECT_EQ(bans(T0).size(), 2u) << "a rule set keeps its bans";
	put_->moved();
	EXPECT_EQ(send("10.1.0.5", T0 + S), "drop_ban");
	e = {};
	e.ban.ns = 0;
	take_events();
	Transaction(*table_).edit("ssh", e).commit();
	ASSERT_EQ(bans(T0 + S).size(), 1u) << "--ban 0 lifts the rule's bans";
	auto lifted = take_events();
	ASSERT_EQ(lifted.size(), 1u) << "with their unban";
	EXPECT_EQ(lifted[0].kind, uint32_t(SLUICE_EVENT_UNBAN));
	EXPECT_EQ(format_address(4, lifted[0].key.addr), "10.1.0.5");
	EXPECT_EQ(send("10.1.0.5", T0 + 2 * S), "pass_limit");
	Transaction(*table_).remove("web").commit();
	EXPECT_TRUE(bans(T0 + 2 * S).empty()) << "a deleted rule's bans go with it";
	EXPECT_EQ(send("10.9.0.5", T0 + 2 * S), "pass_no_match");
	EXPECT_EQ(rule_maps::read_active(put_->maps()).bans, 0u) << "no rule bans: packets skip the check";
}

// The ban switch shares the live-set entry (struct sluice_active) with the
// live-set word, and every commit writes that entry from its own copy. Over
// generated commits of every kind (a rule added or deleted with or without
// --ban, --ban turned on or off, an edit in place, two edits the long way)
// and `ban del`s, the switch is on after each exactly while a rule bans, and
// a ban in the table keeps dropping its source whatever is committed.
TEST_F(Bans, TheSwitchFollowsEveryCommit)
{
	const char *nets[] = {"10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16"};
	const char *names[] = {"r0", "r1", "r2"};
	const uint64_t ban_s = 100000; // outlasts the run, by the test clock and the controller's
	bool present[3] = {}, banning[3] = {}, banned[3] = {};
	auto source = [](int i) { return "10." + std::to_string(i + 1) + ".0.5"; };
	std::mt19937_64 rng(20261129);
	uint64_t t = T0;
	for (int step = 0; step < 240; step++) {
		int i = int(rng() % 3), op = int(rng() % 6);
		SCOPED_TRACE("step " + std::to_string(step) + ", rule " + names[i] + ", op " + std::to_string(op));
		t += 5 * S;
		RuleEdit e;
		if (!present[i] || op == 0) {
			if (present[i]) {
				Transaction(*table_).remove(names[i]).commit();
				present[i] = banning[i] = banned[i] = false;
			} else {
				banning[i] = rng() % 2;
				add(nets[i], banning[i] ? ban_s : 0, 0, -1, names[i]);
				present[i] = true;
			}
		} else if (op == 1) { // --ban on or off: its bans go when off
			banning[i] = !banning[i];
			e.ban.ns = banning[i] ? ban_s * S : 0;
			Transaction(*table_).edit(names[i], e).commit();
			banned[i] = banned[i] && banning[i];
		} else if (op == 2) { // in place
			e.rate = parse_rate(rng() % 2 ? "1/s" : "2/s");
			Transaction(*table_).edit(names[i], e).commit();
		} else if (op == 3) { // the long way: two edits in one commit
			int j = (i + 1) % 3;
			Transaction tx(*table_);
			e.burst = 2 + rng() % 2;
			tx.edit(names[i], e);
			if (present[j])
				tx.edit(names[j], e);
			tx.commit();
		} else if (op == 4 && banning[i] && !banned[i]) { // a ban, made by the program
			settle(source(i), t);
			std::string v;
			for (int n = 0; n < 10 && (v = send(source(i), t)) == "pass_limit"; n++)
				;
			ASSERT_EQ(v, "drop_rate");
			banned[i] = true;
		} else if (op == 5 && banned[i]) {
			ASSERT_TRUE(remove_ban(put_->maps(), parse_cidr(source(i)), t));
			banned[i] = false;
		}
		bool any = banning[0] || banning[1] || banning[2];
		ASSERT_EQ(rule_maps::read_active(put_->maps()).bans != 0, any) << "the switch, with a rule that bans";
		for (int k = 0; k < 3; k++) {
			if (banned[k]) {
				ASSERT_EQ(send(source(k), t), "drop_ban") << source(k);
			}
		}
		ASSERT_EQ(bans(t).size(), size_t(banned[0] + banned[1] + banned[2]));
	}
}

// Every ban lifted is counted once, under why it was lifted: run out (found
// by the program when its source came back, or by the sweep), lifted with
// `ban del`, or with its rule (`rule set --ban 0`). The agent serves them as
// sluice_unbans_total{reason}, beside sluice_bans_total.
TEST_F(Bans, UnbansAreCountedByReason)
{
	add("10.1.0.0/16", 60);
	add("10.9.0.0/16", 600, 0, -1, "web");
	for (const char *src : {"10.1.0.5", "10.1.0.6", "10.9.0.5", "10.9.0.6"}) {
		settle(src, T0);
		send(src, T0);
		send(src, T0);
		EXPECT_EQ(send(src, T0), "drop_rate") << src;
	}
	ASSERT_EQ(bans(T0).size(), 4u);
	auto counts = [this] {
		auto c = put_->read_counters();
		return std::array<uint64_t, 3>{c[SLUICE_CNT_INFO_UNBANS_EXPIRED], c[SLUICE_CNT_INFO_UNBANS_DELETED],
					       c[SLUICE_CNT_INFO_UNBANS_RULE]};
	};
	using Counts = std::array<uint64_t, 3>;
	EXPECT_EQ(counts(), (Counts{0, 0, 0}));

	EXPECT_EQ(send("10.1.0.5", T0 + 60 * S), "pass_limit") << "run out: the program lifts it";
	EXPECT_EQ(counts(), (Counts{1, 0, 0}));
	EXPECT_EQ(sweep_bans(put_->maps(), T0 + 61 * S), 1u) << "10.1.0.6, quiet, run out";
	EXPECT_EQ(counts(), (Counts{2, 0, 0}));
	EXPECT_EQ(sweep_bans(put_->maps(), T0 + 62 * S), 0u);
	ASSERT_TRUE(remove_ban(put_->maps(), parse_cidr("10.9.0.5"), T0 + 62 * S));
	EXPECT_FALSE(remove_ban(put_->maps(), parse_cidr("10.9.0.5"), T0 + 62 * S));
	EXPECT_EQ(counts(), (Counts{2, 1, 0}));
	RuleEdit e;
	e.ban.ns = 0;
	Transaction(*table_).edit("web", e).commit();
	EXPECT_EQ(counts(), (Counts{2, 1, 1})) << "rule set --ban 0";
	EXPECT_TRUE(read_ban_entries(put_->maps().bans.get()).empty());
	size_t unbans = 0;
	for (const auto &ev : take_events())
		unbans += ev.kind == SLUICE_EVENT_UNBAN;
	EXPECT_EQ(unbans, 4u) << "one unban event for each count";

	// As the agent serves them.
	agent::Reading reading;
	reading.loaded = reading.readable = true;
	reading.stats = collect_stats(put_->maps(), {});
	std::map<std::string, double> served;
	for (const auto &f : agent::metric_families(reading))
		for (const auto &m : f.metric) {
			std::string key = f.name;
			for (const auto &l : m.label)
				key += "," + l.name + "=" + l.value;
			served[key] = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
		}
	EXPECT_EQ(served["sluice_bans_total"], 4);
	EXPECT_EQ(served["sluice_unbans_total,reason=expired"], 2);
	EXPECT_EQ(served["sluice_unbans_total,reason=deleted"], 1);
	EXPECT_EQ(served["sluice_unbans_total,reason=rule"], 1);
	EXPECT_EQ(served["sluice_bans"], 0);
}

// A flood of new sources, each over the threshold at once (spoofed: none
// comes back), against a table holding real bans: no ban is made and none
// pushed out; a returning source is banned after it as before. A full
// table refuses a new ban, counted, and keeps every old one.
TEST_F(Bans, SpoofedFloodCannotPushBansOut)
{
	add("10.0.0.0/8", 600);
	std::vector<std::string> real = {"10.1.0.1", "10.1.0.2", "10.1.0.3"};
	for (const auto &src : real) {
		settle(src, T0);
		for (int i = 0; i < 3; i++)
			send(src, T0);
	}
	ASSERT_EQ(bans(T0).size(), 3u);
	uint64_t t = T0 + S;
	put_->set_clock(t);
	for (uint32_t i = 0; i < 20000; i++) {
		std::string src = "10.2." + std::to_string(i >> 8 & 255) + "." + std::to_string(i & 255);
		auto frame = build_packet({.src = src});
		for (int k = 0; k < 4; k++)
			put_->run(frame);
	}
	auto m = put_->moved();
	EXPECT_GT(m.delta[SLUICE_CNT_DROP_RATE], 20000u) << "the flood was over the limit";
	auto after = bans(t);
	ASSERT_EQ(after.size(), 3u) << "no spoofed source banned";
	for (size_t i = 0; i < real.size(); i++)
		EXPECT_EQ(send(real[i], t), "drop_ban") << real[i];

	// Banning works as before for a source that returns.
	settle("10.1.0.9", t + 5 * S);
	for (int i = 0; i < 3; i++)
		send("10.1.0.9", t + 5 * S);
	EXPECT_EQ(bans(t + 5 * S).size(), 4u);

	// Full: filled to the brim, a new ban is refused and counted.
	int fd = put_->maps().bans.get();
	struct sluice_ban v = {};
	v.until_ns = t + 500 * S;
	for (uint32_t i = 0; i < SLUICE_DEFAULT_MAX_BANS; i++) {
		Cidr c = parse_cidr("2001:db8:ff00::/128");
		c.addr[14] = uint8_t(i >> 8);
		c.addr[15] = uint8_t(i);
		struct sluice_ban_key k = ban_key(c);
		v.key = k;
		if (bpf_map_update_elem(fd, &k, &v, BPF_NOEXIST))
			break;
	}
	ASSERT_EQ(read_ban_entries(fd).size(), size_t(SLUICE_DEFAULT_MAX_BANS));
	settle("10.1.0.10", t + 10 * S);
	put_->moved();
	for (int i = 0; i < 3; i++)
		send("10.1.0.10", t + 10 * S);
	EXPECT_EQ(put_->read_counters()[SLUICE_CNT_INFO_BAN_TABLE_FULL], 1u);
	for (const auto &src : real)
		EXPECT_EQ(send(src, t + 10 * S), "drop_ban") << src << " still banned";
	EXPECT_EQ(send("10.1.0.10", t + 11 * S), "pass_limit") << "refused, not banned";
}

// `attach --max-bans 8`: the table holds eight bans; the ninth source that
// earns one is refused, counted, and held to its rule's limit; none of the
// eight is pushed out, and a lifted one makes room again.
TEST_F(Bans, MaxBansSizesTheTable)
{
	reader_.reset();
	table_.reset();
	put_ = std::make_unique<ProgramUnderTest>(TableSizes{4096, 256, 0, 8}, test_clock_object());
	table_ = std::make_unique<RuleTable>(put_->maps());
	ASSERT_EQ(put_->maps().max_bans(), 8u);
	add("10.0.0.0/8", 600);
	auto earn = [this](const std::string &src, uint64_t t) {
		settle(src, t);
		for (int i = 0; i < 3; i++)
			send(src, t);
	};
	for (int i = 1; i <= 9; i++)
		earn("10.1.0." + std::to_string(i), T0);
	EXPECT_EQ(bans(T0).size(), 8u);
	EXPECT_EQ(put_->read_counters()[SLUICE_CNT_INFO_BAN_TABLE_FULL], 1u);
	for (int i = 1; i <= 8; i++)
		EXPECT_EQ(send("10.1.0." + std::to_string(i), T0), "drop_ban") << i;
	EXPECT_EQ(send("10.1.0.9", T0), "drop_rate") << "refused a ban, still over its limit";
	ASSERT_TRUE(remove_ban(put_->maps(), parse_cidr("10.1.0.1"), T0 + S));
	earn("10.1.0.10", T0 + 10 * S);
	EXPECT_EQ(bans(T0 + 10 * S).size(), 8u) << "a lifted ban makes room";
	EXPECT_EQ(send("10.1.0.10", T0 + 11 * S), "drop_ban");
}

} // namespace
} // namespace sluice::test
