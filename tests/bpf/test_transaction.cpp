// SPDX-License-Identifier: GPL-2.0-only
// The transaction against a reference model: generated sequences of staged
// changes (add, delete, edit, rename, flush), each committed, checked, or
// stopped midway by the failure hook. After every commit the table lists
// exactly what the model holds, kept rules keep their ids, and the program
// decides packets by exactly those rules; a commit that fails (a step that
// does not apply, a full table, or a failure injected after the idle set is
// written) leaves the table as it was.
//
// And the check of `rule add` / `rule import` before anything is loaded
// (check_adds_on_empty) against a commit into a loaded, empty table, on
// forms generated from the CLI's option declarations.
#include "fixture.h"


#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "rule_args.h"
#include "rule_lines.h"
#include "transaction.h"

namespace sluice::test {
namespace {

constexpr uint32_t MAX_RULES = 8;
constexpr int PLACES = 12; ///< disjoint prefixes: 10.0.K.0/24 and 2001:db8:K::/48

std::string place_cidr(int k)
{
	return k % 2 ? "2001:db8:" + std::to_string(k) + "::/48" : "10.0." + std::to_string(k) + ".0/24";
}

std::string place_source(int k)
{
	return k % 2 ? "2001:db8:" + std::to_string(k) + "::7" : "10.0." + std::to_string(k) + ".7";
}

/// A rule as the model holds it: a limit rule (its rate editable) or a deny
/// rule (its shadow flag editable). `uid` names it across renames.
struct ModelRule {
	int uid = 0;
	std::string name;
	int place = 0;
	bool deny = false;
	bool shadow = false;
	uint64_t rate = 0; ///< per second, limit rules
};

using Model = std::vector<ModelRule>;

struct Step {
	enum Kind { add, remove, edit_rate, edit_shadow, rename, flush } kind;
	ModelRule rule;      ///< add
	std::string key;     ///< remove, edit, rename
	uint64_t rate = 0;   ///< edit_rate
	bool shadow = false; ///< edit_shadow
	std::string to;      ///< rename
};

ModelRule *named(Model &m, const std::string &name)
{
	for (auto &r : m)
		if (r.name == name)
			return &r;
	return nullptr;
}

/// The model's commit: the steps applied in order (a step naming a rule
/// finds the first of that name: the running rules, then those added, in
/// order); false if one does not apply or the result does not fit (names
/// and selectors unique, at most MAX_RULES), and then `m` stays as it was.
bool model_commit(Model &m, const std::vector<Step> &steps)
{
	Model after = m;
	for (const auto &s : steps) {
		ModelRule *r = s.kind == Step::add || s.kind == Step::flush ? nullptr : named(after, s.key);
		switch (s.kind) {
		case Step::add:
			after.push_back(s.rule);
			break;
		case Step::remove:
			if (!r)
				return false;
			after.erase(after.begin() + (r - after.data()));
			break;
		case Step::edit_rate:
			if (!r || r->deny)
				return false;
			r->rate = s.rate;
			break;
		case Step::edit_shadow:
			if (!r)
				return false;
			r->shadow = s.shadow;
			break;
		case Step::rename:
			if (!r)
				return false;
			r->name = s.to;
			break;
		case Step::flush:
			after.clear();
			break;
		}
	}
	// The result as a whole: names and selectors unique, within the table.
	std::set<std::string> names;
	std::set<int> places;
	for (const auto &r : after)
		if (!names.insert(r.name).second || !places.insert(r.place).second)
			return false;
	if (after.size() > MAX_RULES)
		return false;
	m = after;
	return true;
}

void stage(Transaction &t, const Step &s)
{
	RuleEdit e;
	switch (s.kind) {
	case Step::add: {
		RuleSpec spec;
		spec.name = s.rule.name;
		spec.cidr = parse_cidr(place_cidr(s.rule.place));
		spec.action = s.rule.deny ? Action::deny : Action::limit;
		spec.shadow = s.rule.shadow;
		if (!s.rule.deny) {
			spec.rate = parse_rate(std::to_string(s.rule.rate) + "/s");
			spec.burst = 1000000;
		}
		t.add(spec);
		return;
	}
	case Step::remove:
		t.remove(s.key);
		return;
	case Step::edit_rate:
		e.rate = parse_rate(std::to_string(s.rate) + "/s");
		e.burst = 1000000;
		break;
	case Step::edit_shadow:
		e.shadow = s.shadow;
		break;
	case Step::rename:
		e.name = s.to;
		break;
	case Step::flush:
		t.flush();
		return;
	}
	t.edit(s.key, e);
}

class TransactionModel : public Datapath {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "BPF tests load a real XDP program and must run as root";
		set_libbpf_verbose(false);
		prog_ = std::make_unique<LoadedProgram>(TableSizes{4096, MAX_RULES});
		maps_ = prog_->maps();
		table_ = std::make_unique<RuleTable>(maps_);
		ASSERT_EQ(maps_.max_rules(), MAX_RULES);
	}
	void TearDown() override { unsetenv("SLUICE_APPLY_FAIL_AT"); }

	/// A step that may or may not apply, mostly about rules the model has.
	Step random_step(std::mt19937 &rng, const Model &m, int &uids)
	{
		auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
		auto some_name = [&] {
			if (!m.empty() && pick(5))
				return m[static_cast<size_t>(pick(static_cast<int>(m.size())))].name;
			return "r" + std::to_string(pick(20));
		};
		Step s{Step::flush, {}, {}, 0, false, {}};
		int kind = pick(20);
		if (kind < 8) {
			s.kind = Step::add;
			s.rule = {++uids, "r" + std::to_string(pick(20)), pick(PLACES), pick(2) == 0, pick(4) == 0,
				  static_cast<uint64_t>(1 + pick(1000))};
		} else if (kind < 11) {
			s.kind = Step::remove;
			s.key = some_name();
		} else if (kind < 14) {
			s.kind = Step::edit_rate;
			s.key = some_name();
			s.rate = static_cast<uint64_t>(1 + pick(1000));
		} else if (kind < 17) {
			s.kind = Step::edit_shadow;
			s.key = some_name();
			s.shadow = pick(2);
		} else if (kind < 19) {
			s.kind = Step::rename;
			s.key = some_name();
			s.to = "r" + std::to_string(pick(20));
		}
		return s;
	}

	/// The table equals the model: names, prefixes, actions, rates, and the
	/// ids of rules that were there before (by uid); the program drops a
	/// packet from a place iff an enforced deny rule covers it.
	void expect_table(const Model &m, std::map<int, uint32_t> &ids, const std::string &when)
	{
		auto rules = table_->list();
		ASSERT_EQ(rules.size(), m.size()) << when;
		std::map<int, uint32_t> now;
		for (const auto &want : m) {
			auto it = std::find_if(rules.begin(), rules.end(),
					       [&](const InstalledRule &r) { return r.spec.name == want.name; });
			ASSERT_NE(it, rules.end()) << when << ": rule " << want.name << " missing";
			EXPECT_EQ(format_cidr(it->spec.cidr), place_cidr(want.place)) << when << ": " << want.name;
			EXPECT_EQ(it->spec.action == Action::deny, want.deny) << when << ": " << want.name;
			EXPECT_EQ(it->spec.shadow, want.shadow) << when << ": " << want.name;
			if (!want.deny) {
				EXPECT_EQ(format_rate(it->spec.rate), format_rate(parse_rate(std::to_string(want.rate) + "/s")))
					<< when << ": " << want.name;
			}
			if (ids.count(want.uid)) {
				EXPECT_EQ(it->id, ids[want.uid]) << when << ": " << want.name << " kept its id";
			}
			now[want.uid] = it->id;
		}
		ids = now;
		for (int k = 0; k < PLACES; k++) {
			bool drop = std::any_of(m.begin(), m.end(),
						[&](const ModelRule &r) { return r.place == k && r.deny && !r.shadow; });
			PacketSpec p;
			p.src = place_source(k);
			EXPECT_EQ(run(p), drop ? XDP_DROP : XDP_PASS) << when << ": a packet from " << p.src;
		}
	}
};

TEST_F(TransactionModel, GeneratedSequencesCommitAllOrNone)
{
	int commits = 0, refused = 0, injected = 0, checked = 0;
	for (unsigned seed = 1; seed <= 10; seed++) {
		std::mt19937 rng(seed);
		Model model;
		std::map<int, uint32_t> ids;
		int uids = 0;
		Transaction(maps_).flush().commit();
		for (int round = 0; round < 100; round++) {
			std::vector<Step> steps;
			Model staged = model;
			size_t n = 1 + rng() % (round % 3 == 0 ? 5 : 2); // single edits take the in-place path
			for (size_t i = 0; i < n; i++)
				steps.push_back(random_step(rng, staged, uids));
			Model expected = model;
			bool applies = model_commit(expected, steps);
			int mode = static_cast<int>(rng() % 8); // 0: injected failure, 1: check only
			Transaction t(maps_);
			for (const auto &s : steps)
				stage(t, s);
			std::string when = "seed " + std::to_string(seed) + " round " + std::to_string(round);
			if (mode == 0)
				setenv("SLUICE_APPLY_FAIL_AT", "rules-written", 1);
			bool threw = false;
			try {
				if (mode == 1)
					t.check();
				else
					t.commit();
			} catch (const Error &e) {
				threw = true;
				if (applies) {
					EXPECT_EQ(std::string(e.what()), "injected failure at rules-written") << when;
				}
			}
			unsetenv("SLUICE_APPLY_FAIL_AT");
			EXPECT_EQ(threw, !applies || mode == 0) << when;
			if (applies && mode > 1)
				model = expected;
			commits += applies && mode > 1;
			refused += !applies;
			injected += applies && mode == 0;
			checked += applies && mode == 1;
			expect_table(model, ids, when);
			if (HasFailure())
				return;
		}
	}
	// The generator reaches every outcome.
	EXPECT_GT(commits, 300);
	EXPECT_GT(refused, 100);
	EXPECT_GT(injected, 20);
	EXPECT_GT(checked, 20);
}

} // namespace
} // namespace sluice::test

namespace sluice::test {
namespace {

/// `rule add` and `rule import` before anything is loaded: the CLI checks the
/// rules with Transaction::check_adds_on_empty, with no maps, then loads the
/// program and commits. Every form, generated from the CLI's own option
/// declarations (add_rule_options: a new option fails this test until the
/// generator gives it values), must fare there as it does on a loaded, empty
/// table: refused with the same line, or taken as the same rules (an unnamed
/// one named rule<ID> alike).
class EmptyTableChecks : public Datapath {
protected:
	std::mt19937_64 rng_{20261127};

	size_t below(size_t n) { return static_cast<size_t>(rng_() % n); }

	/// Values that the rule checks take and refuse alike (/129, a port 0,
	/// a burst 0, a name that looks like an id).
	RuleLines lines_{rng_,
			 {
				 {"CIDR", {"0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/16", "10.0.0.1", "::/0", "2001:db8::/32"}},
				 {"--rate", {"10/s", "5/min", "100/10s", "10mbit", "1MB/s"}},
				 {"--burst", {"1", "3", "20", "64kB", "0"}},
				 {"--proto", {"tcp", "udp", "icmp", "47"}},
				 {"--dport", {"53", "1000-2000", "0"}},
				 {"--sport", {"123", "11211", "1024-65535", "0", "2000-1000"}},
				 {"--tcp-flags", {"syn,ack=syn", "rst=rst", "all=none", "fin=fin", "bogus=syn"}},
				 {"--per", {"0", "16", "24", "32", "64", "128", "129"}},
				 {"--name", {"web", "rule1", "rule2", "a-b", "123"}},
				 {"--algo", {"token-bucket", "fixed-window", "sliding-window", "sliding-log", "gcra"}},
				 {"--warmup", {"0", "1s", "2d"}},
				 {"--scope", {"local", "cluster"}},
				 {"--fallback", {"1/s", "0"}},
				 {"--ban", {"10min", "1s", "1h", "90s", "1500ms", "400day"}},
				 {"--ban-after", {"1", "3", "5", "1000001"}},
			 }};

	/// A `rule add` argument line: the CIDR, each option with a chance.
	/// --ban-after mostly beside --ban (alone, it is refused: a few cases show that).
	std::string add_line()
	{
		return lines_.add_line({20, {{"--rate", 85}, {"--allow", 8}, {"--deny", 8}}, {{"--ban-after", {"--ban", 3}}}});
	}

	/// Commits `specs` (imported with `import`) into the loaded table, emptied
	/// first: the rules it then lists, or the error.
	std::pair<std::vector<InstalledRule>, std::string> on_loaded(const std::vector<RuleSpec> &specs,
								     const std::vector<std::string> &where, bool import)
	{
		Transaction(maps_).flush().commit();
		std::vector<InstalledRule> listed;
		std::string error;
		try {
			Transaction t(maps_);
			for (size_t i = 0; i < specs.size(); i++)
				import ? t.import(specs[i], where[i]) : t.add(specs[i], where[i]);
			t.commit();
			listed = table_->list();
		} catch (const Error &e) {
			error = e.what();
		}
		return {listed, error};
	}
};

std::string rules_text(std::vector<InstalledRule> rules)
{
	std::sort(rules.begin(), rules.end(), match_order);
	std::string out;
	for (auto &r : rules) {
		r.id = 0; // ids differ: the loaded table's go on rising; the names follow them
		out += rule_json(r).dump() + "\n";
	}
	return out;
}

TEST_F(EmptyTableChecks, EveryAddAndImportFormFaresAsOnALoadedTable)
{
	// The loaded table gives ids on from its last; an empty one from 1. So
	// that unnamed rules are named alike, each case makes new tables: the
	// program's own (tables_only), without verifying the program again,
	// which a transaction does not run.
	int taken = 0, refused = 0;
	for (int i = 0; i < 240; i++) {
		bool import = i % 2;
		size_t n = import ? 1 + below(4) : 1;
		std::vector<RuleSpec> specs;
		std::vector<std::string> where, lines;
		while (lines.size() < n) {
			std::string line = add_line();
			if (!lines.empty() && below(4) == 0)
				line = lines[below(lines.size())]; // a line given twice
			try {
				auto spec = parse_rule_line(line);
				ASSERT_TRUE(spec) << line;
				specs.push_back(*spec);
			} catch (const Error &) {
				continue; // refused by the parser, before either path
			}
			lines.push_back(line);
			where.push_back(import ? "rules.txt line " + std::to_string(lines.size()) : "");
		}
		std::string what;
		for (const auto &l : lines)
			what += (import ? "\n  import: " : "rule add ") + l;
		prog_ = LoadedProgram::tables_only(TableSizes{64, 256});
		maps_ = prog_->maps();
		table_ = std::make_unique<RuleTable>(maps_);
		auto [listed, loaded_error] = on_loaded(specs, where, import);
		std::string empty_error;
		std::vector<InstalledRule> added;
		try {
			added = Transaction::check_adds_on_empty(specs, where, import, maps_.rule_room()).added;
		} catch (const Error &e) {
			empty_error = e.what();
		}
		ASSERT_EQ(empty_error, loaded_error) << what;
		ASSERT_EQ(rules_text(added), rules_text(listed)) << what;
		(loaded_error.empty() ? taken : refused)++;
	}
	RecordProperty("taken", taken);
	RecordProperty("refused", refused);
	std::cout << "forms taken " << taken << ", refused " << refused << "\n";
	EXPECT_GT(taken, 60);
	EXPECT_GT(refused, 60);
}

} // namespace
} // namespace sluice::test
