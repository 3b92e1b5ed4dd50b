// SPDX-License-Identifier: GPL-2.0-only
// Throttle events through the real program: a source a rule starts dropping
// is reported once, stays quiet while it stays throttled, and is released by
// the entry's timer an interval after its last drop; at most one event per
// bucket per interval.
#include "fixture.h"

#include "events.h"

#include <filesystem>
#include <functional>

namespace sluice::test {
namespace {

class ThrottleEvents : public Datapath {
protected:
	void SetUp() override
	{
		Datapath::SetUp();
		namer_ = std::make_unique<EventNamer>(maps_);
		reader_ = std::make_unique<EventReader>(maps_.events.get(), [this](const struct sluice_event &e) {
			raw_.push_back(e);
			events_.push_back(namer_->name(e));
		});
	}

	/// Reads what is in the ring now, then waits up to `wait` for more until `want` have come.
	void collect(size_t want, std::chrono::milliseconds wait)
	{
		auto deadline = std::chrono::steady_clock::now() + wait;
		reader_->poll(std::chrono::milliseconds(0));
		while (events_.size() < want && std::chrono::steady_clock::now() < deadline)
			reader_->poll(std::chrono::milliseconds(50));
	}

	std::unique_ptr<EventNamer> namer_;
	std::unique_ptr<EventReader> reader_;
	std::vector<struct sluice_event> raw_;
	std::vector<ThrottleEvent> events_;
};

TEST_F(ThrottleEvents, ASourceIsReportedWhenDroppingStartsAndReleasedAnIntervalAfterItEnds)
{
	InstalledRule lim = add("10.1.0.0/16", "10/s", 5, "lim");
	PacketSpec hot{.src = "10.1.0.7"}, calm{.src = "10.1.0.8"};
	run(hot, 20); // 5 pass, 15 dropped
	run(calm, 3); // within its burst: never throttled
	collect(1, std::chrono::milliseconds(500));
	ASSERT_EQ(events_.size(), 1u);
	EXPECT_TRUE(events_[0].throttled);
	EXPECT_EQ(events_[0].source, "10.1.0.7");
	EXPECT_EQ(events_[0].rule, "lim");
	EXPECT_EQ(events_[0].rule_id, lim.id);

	// Still throttled: more drops, from both CPUs, write no event.
	run_on_two_cpus([&](int) { run(hot, 2000); });
	collect(2, std::chrono::milliseconds(300));
	EXPECT_EQ(events_.size(), 1u) << "a source that stays throttled is reported once";

	// Quiet: released about an interval after its last drop, by the timer.
	auto quiet_from = std::chrono::steady_clock::now();
	collect(2, std::chrono::milliseconds(3000));
	ASSERT_EQ(events_.size(), 2u);
	double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - quiet_from).count();
	EXPECT_FALSE(events_[1].throttled);
	EXPECT_EQ(events_[1].source, "10.1.0.7");
	EXPECT_EQ(raw_[1].since_ns, raw_[0].ns) << "the release names the episode's start";
	EXPECT_GE(raw_[1].ns - raw_[0].ns, SLUICE_EVENT_INTERVAL_NS);
	EXPECT_LT(waited, 2.5);

	// Throttled again at once: reported, but not within an interval of the release.
	run(hot, 40);
	collect(3, std::chrono::milliseconds(3000));
	ASSERT_EQ(events_.size(), 3u);
	EXPECT_TRUE(events_[2].throttled);
	EXPECT_GE(raw_[2].ns - raw_[1].ns, SLUICE_EVENT_INTERVAL_NS - 1000000) << "one event per bucket per interval";
	EXPECT_EQ(global(SLUICE_CNT_INFO_EVENTS_LOST), 0u);
}

TEST_F(ThrottleEvents, AnIpv6SourceIsNamedByItsSlash64AndAShadowRuleSaysSo)
{
	add("2001:db8::/32", "10/s", 3, "v6");
	RuleSpec s;
	s.name = "watch";
	s.cidr = parse_cidr("10.2.0.0/16");
	s.rate = parse_rate("10/s");
	s.burst = 3;
	s.shadow = true;
	table_->add(s);
	run(PacketSpec{.src = "2001:db8:0:1::5"}, 2);
	run(PacketSpec{.src = "2001:db8:0:1::6"}, 6); // the same /64 bucket
	EXPECT_EQ(run(PacketSpec{.src = "10.2.3.4"}, 10), XDP_PASS);
	collect(2, std::chrono::milliseconds(500));
	ASSERT_EQ(events_.size(), 2u);
	std::sort(events_.begin(), events_.end(), [](const auto &a, const auto &b) { return a.rule < b.rule; });
	EXPECT_EQ(events_[0].source, "2001:db8:0:1::/64");
	EXPECT_FALSE(events_[0].shadow);
	EXPECT_EQ(events_[1].source, "10.2.3.4");
	EXPECT_TRUE(events_[1].shadow);
	EXPECT_NE(format_event(events_[1]).find("shadow"), std::string::npos);
	EXPECT_NE(event_json(events_[0]).find("\"source\":\"2001:db8:0:1::/64\""), std::string::npos);
}

// Sources dropped in turn, as in a flood of many: each CPU notes each bucket's
// drops once per SLUICE_NOTE_EVERY_NS, as it does one source's, so the
// throttled entries keep their first drop's time while the turns go on.
TEST_F(ThrottleEvents, SourcesDroppedInTurnAreNotedOncePerIntervalNotPerPacket)
{
	add("10.3.0.0/16", "1/min", 1, "turns");
	const std::vector<PacketSpec> sources = {{.src = "10.3.0.1"}, {.src = "10.3.0.2"}, {.src = "10.3.0.3"}};
	double took = 0;
	run_on_two_cpus([&](int cpu) {
		if (cpu != 0)
			return; // one CPU: its notes are what is checked
		for (const auto &src : sources)
			run(src, 2); // a pass, then the first drop: throttled
		auto start = std::chrono::steady_clock::now();
		for (int i = 0; i < 100; i++)
			for (const auto &src : sources)
				EXPECT_EQ(run(src), XDP_DROP);
		took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	});
	ASSERT_LT(took, double(SLUICE_NOTE_EVERY_NS) / 1e9) << "the turns must fit in one noting interval";
	collect(3, std::chrono::milliseconds(500));
	EXPECT_EQ(events_.size(), 3u) << "one throttled event per source";
	struct sluice_throttle_key key = {}, next = {};
	int entries = 0;
	for (void *prev = nullptr; bpf_map_get_next_key(maps_.throttled.get(), prev, &next) == 0; prev = &key) {
		key = next;
		struct sluice_throttle t = {};
		ASSERT_EQ(bpf_map_lookup_elem(maps_.throttled.get(), &key, &t), 0);
		EXPECT_EQ(t.last_drop_ns, t.since_ns) << "a bucket's drops were noted again within the interval";
		entries++;
	}
	EXPECT_EQ(entries, 3);
}


// An event read after its rule was deleted, or after an edit restarted the
// rule's buckets, by a reader started only then (as the agent started after
// the deletion), carries the rule's name and id as they were: every way a
// change retires buckets records the rules it retired. Each way, for an IPv4
// source and an IPv6 one (named by its --per prefix).
TEST_F(ThrottleEvents, EventsOfRetiredBucketsCarryTheRulesNameAndIdForAReaderStartedLater)
{
	std::string run_dir = "/tmp/sluice-bpf-events-" + std::to_string(getpid());
	setenv("SLUICE_RUN_DIR", run_dir.c_str(), 1);
	using Retire = std::function<void(const std::string &name)>;
	const std::vector<std::pair<std::string, Retire>> ways = {
		{"rule del", [&](const std::string &name) { table_->remove(name); }},
		{"rule flush", [&](const std::string &) { table_->flush(); }},
		{"apply without it", [&](const std::string &) { Transaction(*table_).replace({}).commit(); }},
		{"rule set --algo (buckets restart)",
		 [&](const std::string &name) {
			 RuleEdit e;
			 e.algo = Algo::gcra;
			 table_->edit(name, e);
		 }},
		{"rule set --per (buckets restart)",
		 [&](const std::string &name) {
			 RuleEdit e;
			 e.per_prefix = table_->find(name).spec.cidr.family == 6 ? 56 : 24;
			 table_->edit(name, e);
		 }},
	};
	int n = 0;
	for (const auto &[way, retire] : ways) {
		for (bool v6 : {false, true}) {
			SCOPED_TRACE(way + (v6 ? ", IPv6" : ", IPv4"));
			table_->flush();
			std::string name = "r" + std::to_string(n++);
			InstalledRule r = v6 ? add("2001:db8:7::/48", "10/s", 3, name.c_str(), Proto::any, {}, 64)
					     : add("10.7.0.0/16", "10/s", 3, name.c_str());
			run(PacketSpec{.src = v6 ? "2001:db8:7:1::9" : "10.7.1.9"}, 10); // throttled: an event in the ring
			retire(name);
			// A reader started now: all it has is the ring and the record.
			std::vector<ThrottleEvent> got;
			EventNamer later(maps_);
			EventReader fresh(maps_.events.get(), [&](const struct sluice_event &e) { got.push_back(later.name(e)); });
			for (int i = 0; i < 10 && got.empty(); i++)
				fresh.poll(std::chrono::milliseconds(50));
			ASSERT_EQ(got.size(), 1u);
			EXPECT_TRUE(got[0].throttled);
			EXPECT_EQ(got[0].rule, name);
			EXPECT_EQ(got[0].rule_id, r.id);
			EXPECT_EQ(got[0].source, v6 ? "2001:db8:7:1::/64" : "10.7.1.9");
			EXPECT_EQ(event_json(got[0]).find("\"rule\":null"), std::string::npos) << event_json(got[0]);
			// The release, an interval later, is named too.
			for (int i = 0; i < 60 && got.size() < 2; i++)
				fresh.poll(std::chrono::milliseconds(50));
			ASSERT_EQ(got.size(), 2u);
			EXPECT_FALSE(got[1].throttled);
			EXPECT_EQ(got[1].rule, name);
			EXPECT_EQ(got[1].rule_id, r.id);
		}
	}
	std::filesystem::remove_all(run_dir);
	unsetenv("SLUICE_RUN_DIR");
}

} // namespace
} // namespace sluice::test
