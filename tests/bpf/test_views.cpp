// SPDX-License-Identifier: GPL-2.0-only
// What the operator sees after an edit is what runs: for every field that
// `rule set` and `apply` can change, alone and in pairs, a limited source
// stays visible in stats, in top's view and in the agent's metrics, with the
// drops its receiver missed; and each row of the table of edits that keep or
// restart buckets (bucket_change) holds in the real program.
#include <gtest/gtest.h>

#include <linux/bpf.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "error.h"
#include "events.h"
#include "explain.h"
#include "fixture.h"
#include "metrics.h"
#include "policy.h"
#include "rates.h"
#include "rule_args.h"
#include "rule_lines.h"

using namespace sluice;
using namespace sluice::test;

namespace {

/// The rule every case starts from: a slow limit (nothing refills during a
/// test), so that 5 of 20 packets pass and 15 are dropped.
const char *const BASE = "10.0.0.0/8 --name exp --proto udp --rate 10/h --burst 5";
const char *const SOURCE = "10.1.2.3";

RuleSpec spec_of(const std::string &line)
{
	auto s = parse_rule_line(line);
	if (!s)
		throw Error("no rule in '" + line + "'");
	validate_rule(*s);
	return *s;
}

/// One edit as `rule set` takes it: options parsed by the CLI's own parser.
RuleEdit rule_set_edit(const std::vector<std::string> &args, bool rate_counts_bytes)
{
	CLI::App app;
	RuleEditArgs a;
	add_edit_options(&app, a);
	std::vector<std::string> reversed(args.rbegin(), args.rend()); // CLI11 takes them last first
	app.parse(reversed);
	return to_edit(a, app, rate_counts_bytes);
}

/// A new value for each `rule set` option that takes one, from BASE: one
/// that keeps the rule a limit on SOURCE. A new option fails the test until
/// it has one; a new flag is given as itself.
const OptionValues RULE_SET_VALUES = {
	{"--rate", {"20/h"}},	 {"--burst", {"8"}},	     {"--algo", {"gcra"}},
	{"--warmup", {"10s"}},	 {"--per", {"16"}},	     {"--name", {"exp2"}},
	{"--scope", {"cluster"}}, {"--fallback", {"5/h"}},	     {"--ban", {"10min"}},
	{"--ban-after", {"3"}},
};

/// A change of each policy key to BASE's rule (what `apply` of a file
/// with that key changed does). A new key fails the test until it has one.
const std::map<std::string, std::function<void(RuleSpec &)>> POLICY_CHANGES = {
	{"name", [](RuleSpec &s) { s.name = "exp2"; }},
	{"cidr", [](RuleSpec &s) { s.cidr = parse_cidr("10.0.0.0/9"); }},
	{"action", [](RuleSpec &s) { s = RuleSpec{s.name, s.cidr, Action::deny, s.proto, s.dport}; }},
	{"proto", [](RuleSpec &s) { s.proto = Proto::any; }},
	{"dport", [](RuleSpec &s) { s.dport = {53, 53}; }},
	{"sport", [](RuleSpec &s) { s.sport = {40000, 40000}; }},
	// The traffic is UDP: a flag selector is refused on it, and not taken as
	// the protocol where the pair made it any (a rule no packet meets).
	{"tcp_flags", [](RuleSpec &s) {
		 s.tcp_flags = SYN_ONLY;
		 s.proto = Proto::udp;
	 }},
	{"rate", [](RuleSpec &s) { s.rate = parse_rate("20/h"); }},
	{"burst", [](RuleSpec &s) { s.burst = 8; }},
	{"algo", [](RuleSpec &s) { s.algo = Algo::gcra; }},
	{"per", [](RuleSpec &s) { s.per_prefix = 16; }},
	{"warmup", [](RuleSpec &s) { s.warmup_ns = 10000000000ULL; }},
	{"shadow", [](RuleSpec &s) { s.shadow = true; }},
	{"continue", [](RuleSpec &s) { s.layered = true; }},
	{"scope", [](RuleSpec &s) { s.scope = Scope::cluster; }},
	{"fallback", [](RuleSpec &s) { s.fallback = parse_rate("5/h"); }},
	{"ban", [](RuleSpec &s) { s.ban.ns = 600000000000ULL; }},
	{"ban_after", [](RuleSpec &s) { s.ban = {600000000000ULL, 3}; }},
};

/// The given fields alone and in pairs.
template <typename Field> std::vector<std::vector<Field>> singles_and_pairs(const std::vector<Field> &fields)
{
	std::vector<std::vector<Field>> out;
	for (size_t i = 0; i < fields.size(); i++) {
		out.push_back({fields[i]});
		for (size_t j = i + 1; j < fields.size(); j++)
			out.push_back({fields[i], fields[j]});
	}
	return out;
}

std::string joined(const std::vector<std::string> &v)
{
	std::string s;
	for (const auto &x : v)
		s += (s.empty() ? "" : " + ") + x;
	return s;
}

class Views : public Datapath {
protected:
	void SetUp() override
	{
		Datapath::SetUp();
		namer_ = std::make_unique<EventNamer>(maps_);
		reader_ = std::make_unique<EventReader>(maps_.events.get(), [this](const struct sluice_event &e) {
			events_.push_back({e, namer_->name(e)});
		});
	}

	/// The throttle events in the ring now, as read and as named.
	std::vector<std::pair<struct sluice_event, ThrottleEvent>> take_events()
	{
		reader_->poll(std::chrono::milliseconds(0));
		return std::exchange(events_, {});
	}

	std::unique_ptr<EventNamer> namer_;
	std::unique_ptr<EventReader> reader_;
	std::vector<std::pair<struct sluice_event, ThrottleEvent>> events_;

	/// Sends `n` packets from `src`; returns how many the program dropped.
	uint64_t send(const char *src, uint32_t n)
	{
		uint64_t dropped = 0;
		// Nearly full-size: a byte limit's smallest burst (1,500 bytes) passes one.
		auto frame = build_packet({.src = src, .payload = 1400});
		for (uint32_t i = 0; i < n; i++)
			dropped += run_frame(frame) == XDP_DROP;
		return dropped;
	}

	/// The rule named `name`; fails the test if there is none.
	std::optional<InstalledRule> rule(const std::string &name)
	{
		for (const auto &r : table_->list())
			if (r.spec.name == name)
				return r;
		return std::nullopt;
	}

	/// What an edit starts from: the rule BASE alone and new, SOURCE's 20
	/// packets through it (`dropped_before` of them dropped), and the stats
	/// read then.
	struct Start {
		InstalledRule before;
		uint64_t dropped_before = 0;
		Stats pre;
	};

	/// Sets the table to `start`'s state, with no events left in the ring.
	void start_afresh(Start &start)
	{
		table_->flush();
		take_events();
		start.before = table_->add(spec_of(BASE));
		start.dropped_before = send(SOURCE, 20);
		ASSERT_EQ(start.dropped_before, 15u);
		start.pre = stats();
	}

	/// Checks every view of `after` (the rule as edited from `start`'s)
	/// once SOURCE sent 20 more packets after the edit (`dropped_after`
	/// dropped). `same_rule`: the edit kept the rule (its id and counters).
	void expect_views(const std::string &what, const Start &start, const InstalledRule &after, bool same_rule,
			  uint64_t dropped_after)
	{
		SCOPED_TRACE(what);
		const InstalledRule &before = start.before;
		const uint64_t dropped_before = start.dropped_before;
		const Stats &pre = start.pre;
		bool restarted = !same_rule || bucket_id(after) != bucket_id(before);
		if (same_rule) {
			EXPECT_EQ(restarted, edit_restarts_buckets(before.spec, after.spec))
				<< "the table did what bucket_change decides";
		}
		uint64_t sent = restarted ? 20 : 40;
		uint64_t missed = (restarted ? 0 : dropped_before) + dropped_after;
		const std::string &name = after.spec.name;

		Stats st = stats();
		auto rs = std::find_if(st.rules.begin(), st.rules.end(),
				       [&](const RuleStats &r) { return r.rule.id == after.id; });
		ASSERT_NE(rs, st.rules.end());
		uint64_t rule_drops = (same_rule ? dropped_before : 0) + dropped_after;
		if (!after.spec.shadow) {
			EXPECT_EQ(rs->counters.dropped_packets, rule_drops) << "the rule's drops";
		} else {
			EXPECT_GE(rs->counters.dropped_packets, rule_drops) << "the rule's drops and would-be drops";
		}
		if (after.spec.action != Action::limit) {
			EXPECT_EQ(rs->sources, 0u) << "an allow or deny rule keeps no buckets";
			return;
		}
		Cidr expect{4, parse_cidr(SOURCE).addr, after.spec.bucket_prefix()};
		mask_address(expect.addr, expect.prefix_len);
		std::string source = format_cidr(expect);

		// stats and stats --rule.
		EXPECT_EQ(rs->sources, 1u) << "stats counts the rule's source";
		for (const Stats &view : {st, stats(name)}) {
			auto src = std::find_if(view.sources.begin(), view.sources.end(),
						[&](const SourceStats &s) { return s.rule == name; });
			ASSERT_NE(src, view.sources.end()) << "stats lost the limited source";
			EXPECT_EQ(src->source, source);
			EXPECT_EQ(src->passed_packets + src->dropped_packets, sent) << "each packet counted once";
			if (!after.spec.shadow) {
				EXPECT_EQ(src->dropped_packets, missed) << "the drops its receiver missed";
			} else {
				EXPECT_GE(src->dropped_packets, missed) << "the drops, and the would-be drops";
			}
		}
		auto src = *std::find_if(st.sources.begin(), st.sources.end(),
					 [&](const SourceStats &s) { return s.rule == name; });

		// top: the view between the reading before the edit and this one.
		RateView view = rate_view(&pre, st, 1.0);
		auto row = std::find_if(view.sources.begin(), view.sources.end(),
					[&](const SourceRates &r) { return r.rule == name && r.source == source; });
		ASSERT_NE(row, view.sources.end()) << "top lost the limited source";
		ASSERT_TRUE(row->rates);
		EXPECT_EQ(row->rates->dropped.packets_per_s + row->rates->passed.packets_per_s, 20.0)
			<< "top's rates: the packets since the reading before the edit";
		if (!after.spec.shadow) {
			EXPECT_EQ(row->rates->dropped.packets_per_s, double(dropped_after));
		}

		// Events of the rule's buckets carry its name and id.
		for (const auto &[raw, ev] : take_events()) {
			if (raw.key.bucket_id != bucket_id(after))
				continue;
			EXPECT_EQ(ev.rule, name) << "an event of the rule's bucket names the rule";
			EXPECT_EQ(ev.rule_id, after.id);
		}

		// explain finds the bucket.
		ExplainPacket pkt;
		pkt.src = parse_cidr(SOURCE).addr;
		pkt.proto = 17;
		pkt.dport = 53;
		Explanation e = explain(maps_, pkt, ClockReading::now());
		auto applied = std::find_if(e.applied.begin(), e.applied.end(), [&](const AppliedRule &a) {
			return e.walk.candidates[a.candidate].rule.id == after.id;
		});
		ASSERT_NE(applied, e.applied.end()) << "explain applies the rule";
		ASSERT_TRUE(applied->state);
		EXPECT_TRUE(applied->state->exists) << "explain finds the bucket";
		EXPECT_EQ(sluice_cnt_value(applied->state->counters.dropped_packets), src.dropped_packets);

		// The agent's metrics.
		agent::Reading reading;
		reading.loaded = reading.readable = true;
		reading.stats = st;
		double tracked = -1, drops = -1;
		for (const auto &f : agent::metric_families(reading)) {
			for (const auto &m : f.metric) {
				auto label = [&m](const std::string &k) {
					for (const auto &l : m.label)
						if (l.name == k)
							return l.value;
					return std::string();
				};
				if (f.name == "sluice_rule_sources" && label("rule") == name)
					tracked = m.gauge.value;
				std::string family = src.shadow ? "sluice_top_source_would_drop_packets_total"
								: "sluice_top_source_dropped_packets_total";
				if (f.name == family && label("rule") == name && label("source") == source)
					drops = m.counter.value;
			}
		}
		EXPECT_EQ(tracked, 1) << "metrics: the rule's tracked sources";
		if (src.dropped_packets) {
			EXPECT_EQ(drops, double(src.dropped_packets)) << "metrics: the source's drops";
		}
	}
};

TEST_F(Views, EveryRuleSetEditKeepsTheLimitedSourceInView)
{
	// The option list comes from the CLI: each has a value here.
	std::vector<DeclaredOption> options = rule_set_options();
	ASSERT_GE(options.size(), 10u);
	std::mt19937_64 rng; // one value per option: nothing is left to chance
	RuleLines lines(rng, RULE_SET_VALUES);
	for (const auto &o : lines.missing(options))
		ADD_FAILURE() << "no value for `rule set " << o << "`: add one";
	ASSERT_FALSE(HasFailure());

	size_t applied = 0, refused = 0;
	for (const auto &fields : singles_and_pairs(options)) {
		std::vector<std::string> args;
		for (const auto &f : fields)
			for (const auto &a : lines.words_for(f))
				args.push_back(a);
		std::string what = "rule set exp " + joined(args);
		Start start;
		ASSERT_NO_FATAL_FAILURE(start_afresh(start));

		RuleEdit edit;
		try {
			edit = rule_set_edit(args, false);
		} catch (const CLI::Error &) {
			refused++; // options that exclude each other (--shadow --no-shadow)
			continue;
		}
		std::optional<InstalledRule> after;
		try {
			after = table_->edit("exp", edit);
		} catch (const Error &) {
			refused++; // a combination the rule checks refuse (--warmup with gcra)
			auto still = rule("exp");
			ASSERT_TRUE(still) << what << ": a refused edit changed the rule";
			EXPECT_TRUE(same_spec(still->spec, start.before.spec)) << what;
			continue;
		}
		applied++;
		uint64_t dropped_after = send(SOURCE, 20);
		expect_views(what, start, *after, true, dropped_after);
	}
	std::cout << "rule set edits applied " << applied << ", refused " << refused << "\n";
	EXPECT_GT(applied, 3 * refused) << "most combinations apply";
}

TEST_F(Views, EveryApplyChangeKeepsTheLimitedSourceInView)
{
	std::vector<std::string> keys = policy_rule_keys();
	for (const auto &k : keys)
		ASSERT_TRUE(POLICY_CHANGES.count(k)) << "no change for the policy key '" << k << "': add one";

	size_t applied = 0, refused = 0;
	for (const auto &fields : singles_and_pairs(keys)) {
		std::string what = "apply with " + joined(fields) + " changed";
		Start start;
		ASSERT_NO_FATAL_FAILURE(start_afresh(start));

		RuleSpec desired = start.before.spec;
		for (const auto &f : fields)
			POLICY_CHANGES.at(f)(desired);
		try {
			validate_rule(desired);
			Transaction(*table_).replace({desired}).commit();
		} catch (const Error &) {
			refused++; // --dport without a protocol, a fallback on a local rule...
			auto still = rule("exp");
			ASSERT_TRUE(still) << what << ": a refused policy changed the rule";
			EXPECT_TRUE(same_spec(still->spec, start.before.spec)) << what;
			continue;
		}
		applied++;
		auto after = rule(desired.name);
		ASSERT_TRUE(after) << what;
		bool same_rule = after->id == start.before.id; // a rename is a removal and an addition
		uint64_t dropped_after = send(SOURCE, 20);
		expect_views(what, start, *after, same_rule, dropped_after);
	}
	std::cout << "policy changes applied " << applied << ", refused " << refused << "\n";
	EXPECT_GT(applied, 2 * refused) << "most combinations apply";
}

// ---- The table of edits that keep or restart buckets.

/// A row: a rule (`rule add` options) and the same rule edited.
struct BucketRow {
	const char *before, *after;
};

/// One example of each row of the table (docs/packets.md), every
/// reason bucket_change gives among them; each holds in the real program.
const BucketRow BUCKET_ROWS[] = {
	// kept
	{"--rate 10/h --burst 5", "--rate 20/h --burst 5"},
	{"--rate 10/h --burst 5", "--rate 10/h --burst 8"},
	{"--rate 10/h --burst 5", "--rate 10/h --burst 3"},
	{"--rate 10/h --burst 6 --warmup 10s", "--rate 10/h --burst 6 --warmup 20s"},
	{"--rate 10/h --burst 6 --warmup 10s", "--rate 10/h --burst 9 --warmup 10s"},
	{"--rate 10/h --burst 6 --warmup 10s", "--rate 5/h --burst 6 --warmup 10s"},
	{"--rate 10/h --burst 5", "--rate 10/h --burst 5 --shadow"},
	{"--rate 10/h --burst 5", "--rate 10/h --burst 5 --continue"},
	{"--rate 10/h --burst 5", "--rate 10/h --burst 5 --scope cluster"},
	{"--rate 10/h --burst 5 --scope cluster", "--rate 10/h --burst 5 --scope cluster --fallback 5/h"},
	{"--rate 5/h --algo fixed-window", "--rate 8/h --algo fixed-window"},
	{"--rate 5/h --algo sliding-window", "--rate 3/h --algo sliding-window"},
	{"--rate 5/h --algo sliding-log", "--rate 5/2h --algo sliding-log"},
	{"--rate 15kB/h --burst 1500", "--rate 120kbit/h --burst 1500"},
	// restarted
	{"--rate 10/h --burst 5", "--rate 10/h --burst 5 --per 16"},
	{"--rate 10/h --burst 5", "--rate 10/h --burst 5 --algo gcra"},
	{"--rate 10/h --burst 5 --algo gcra", "--rate 5/h --algo fixed-window"},
	{"--rate 10/h --burst 5", "--rate 15kB/h --burst 1500"},
	{"--rate 10/h --burst 6", "--rate 10/h --burst 6 --warmup 10s"},
	{"--rate 10/h --burst 6 --warmup 10s", "--rate 10/h --burst 6"},
	{"--rate 15kB/h --burst 4500", "--rate 15kB/h --burst 4500 --warmup 10s"},
	{"--rate 15kB/h --burst 4500 --warmup 10s", "--rate 15kB/h --burst 4500"},
	{"--rate 5/h --algo fixed-window", "--rate 5/2h --algo fixed-window"},
	{"--rate 5/h --algo sliding-window", "--rate 10/2h --algo sliding-window"},
	{"--rate 5/h --algo sliding-log", "--rate 8/h --algo sliding-log"},
	{"--rate 10/h --burst 9 --warmup 10s", "--rate 10/h --burst 6 --warmup 10s"},
	{"--rate 10/h --burst 9 --warmup 10s", "--rate 20/h --burst 9 --warmup 10s"},
};

TEST_F(Views, EachRowOfTheBucketTableHoldsInTheProgram)
{
	// The selector and the action, which `apply` alone changes.
	std::vector<std::pair<std::string, std::string>> rows = {
		{"10.0.0.0/8 --rate 10/h --burst 5", "10.0.0.0/9 --rate 10/h --burst 5"},
		{"10.0.0.0/8 --rate 10/h --burst 5", "10.0.0.0/8 --deny"},
	};
	for (const auto &r : BUCKET_ROWS)
		rows.push_back({std::string("10.0.0.0/8 ") + r.before, std::string("10.0.0.0/8 ") + r.after});

	std::set<BucketChange> seen;
	for (const auto &[b, a] : rows) {
		std::string what = b + "  ->  " + a;
		SCOPED_TRACE(what);
		RuleSpec before_spec = spec_of(b + " --name exp"), after_spec = spec_of(a + " --name exp");
		BucketChange decided = bucket_change(before_spec, after_spec);
		seen.insert(decided);

		table_->flush();
		InstalledRule before = table_->add(before_spec);
		// Several sources, exhausted: a bucket's stored words differ from one
		// to the next (a sequence lock's parity among them).
		// 64 of them, each in a /16 of its own (a --per 16 bucket is then
		// one source's too): a stored word misread passes in about one
		// bucket in eight.
		std::vector<std::string> sources;
		for (int i = 1; i <= 64; i++)
			sources.push_back("10." + std::to_string(i) + ".2.3");
		for (const auto &s : sources)
			send(s.c_str(), 20);
		// And one that rested: its bucket nearly full.
		const char *rested = "10.101.2.3";
		send(rested, 1);
		Transaction(*table_).replace({after_spec}).commit();
		InstalledRule after = *rule("exp");
		EXPECT_EQ(bucket_id(after) != bucket_id(before), decided != BucketChange::keep)
			<< "apply restarts the buckets exactly when bucket_change says ("
			<< bucket_change_reason(decided) << ")";
		// A source never seen: what a fresh bucket of the edited rule passes.
		uint32_t passed_fresh = 200 - static_cast<uint32_t>(send("10.100.9.9", 200));
		uint64_t contention = global(SLUICE_CNT_PASS_CONTENTION);
		for (const auto &s : sources) {
			uint32_t passed_after = 200 - static_cast<uint32_t>(send(s.c_str(), 200));
			if (decided == BucketChange::keep) {
				EXPECT_LE(passed_after, passed_fresh) << s << ": a kept bucket gives no more than a fresh one";
			} else {
				EXPECT_EQ(passed_after, passed_fresh) << s << ": a restarted bucket starts afresh";
			}
		}
		uint32_t rested_after = 200 - static_cast<uint32_t>(send(rested, 200));
		EXPECT_LE(rested_after, passed_fresh) << "a rested bucket, kept or not, gives no more than a fresh one";
		EXPECT_EQ(global(SLUICE_CNT_PASS_CONTENTION), contention) << "one CPU contends with no one";
		if (after_spec.action == Action::limit) {
			Cidr bucket{4, parse_cidr(SOURCE).addr, after_spec.bucket_prefix()};
			mask_address(bucket.addr, bucket.prefix_len);
			auto src = source(format_cidr(bucket), "exp");
			EXPECT_EQ(src.passed_packets + src.dropped_packets, decided == BucketChange::keep ? 220u : 200u);
		}
	}
	for (int c = int(BucketChange::keep); c <= int(BucketChange::warm_capacity); c++)
		EXPECT_TRUE(seen.count(BucketChange(c))) << "no row for " << bucket_change_reason(BucketChange(c));
}

} // namespace
