// SPDX-License-Identifier: GPL-2.0-only
// Address sets: the set-file parser against a reference over generated files
// (and generated corruptions, which must name their line), the set store, and
// the compiled lookup tables of rules on sets against a reference model of
// "a rule on @S acts as that rule written once for each prefix of S".
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <set>
#include <sstream>

#include "datapath.h"
#include "dir4.h"
#include "error.h"
#include "fd.h"
#include "rule.h"
#include "sets.h"
#include "transaction.h"

using namespace sluice;

namespace {

Cidr random_prefix(std::mt19937_64 &rng, int family, int spread)
{
	Cidr c;
	c.family = family;
	c.prefix_len = static_cast<int>(rng() % (c.max_len() + 1));
	for (size_t i = 0; i < (family == 4 ? 4u : 16u); i++)
		c.addr[i] = static_cast<uint8_t>(rng() % spread);
	mask_address(c.addr, c.prefix_len);
	return c;
}

/// A prefix as an operator might write it: a host prefix bare or with its
/// length, IPv6 in its compressed or full form.
std::string written(std::mt19937_64 &rng, const Cidr &c)
{
	std::string s = format_cidr(c);
	if (c.prefix_len == c.max_len() && rng() % 2)
		s += "/" + std::to_string(c.prefix_len);
	return s;
}

std::string parse_error(const std::string &text, int family = 0)
{
	std::istringstream in(text);
	try {
		read_set_lines(in, "list.txt", family);
	} catch (const Error &e) {
		return e.what();
	}
	return "";
}

} // namespace

TEST(SetFile, GeneratedFilesParseToTheSetTheyList)
{
	std::mt19937_64 rng(29);
	const char *const BLANKS[] = {"", " ", "\t", "  \t "};
	const char *const COMMENTS[] = {"# a comment", "#", "; SBL123456", "# 10.0.0.0/8 is not a prefix here"};
	for (int round = 0; round < 400; round++) {
		int family = rng() % 2 ? 6 : 4;
		std::vector<Cidr> want;
		std::string text;
		for (size_t n = rng() % 60; n > 0; n--) {
			switch (rng() % 5) {
			case 0:
				text += std::string(BLANKS[rng() % 4]) + "\n";
				break;
			case 1:
				text += std::string(BLANKS[rng() % 4]) + COMMENTS[rng() % 4] + "\n";
				break;
			default: {
				Cidr c = random_prefix(rng, family, round % 2 ? 4 : 256);
				want.push_back(c);
				text += std::string(BLANKS[rng() % 4]) + written(rng, c) + BLANKS[rng() % 4];
				if (rng() % 3 == 0)
					text += std::string(" ") + COMMENTS[rng() % 4];
				text += rng() % 4 ? "\n" : "\r\n";
			}
			}
		}
		if (rng() % 2 && !text.empty() && text.back() == '\n')
			text.pop_back(); // no newline at the end
		std::istringstream in(text);
		AddressSet got = read_set_lines(in, "list.txt");
		normalize(want);
		EXPECT_EQ(got.prefixes, want) << text;
		if (!want.empty()) {
			EXPECT_EQ(got.family, family);
		}
	}
}

TEST(SetFile, GeneratedCorruptionsNameTheirLine)
{
	std::mt19937_64 rng(2029);
	const std::pair<const char *, const char *> BAD[] = {
		{"10.0.0.256", "invalid address '10.0.0.256' in '10.0.0.256'"},
		{"10.0.0.1/24", "'10.0.0.1/24' has host bits set; did you mean 10.0.0.0/24?"},
		{"10.0.0.0/33", "prefix length 33 is out of range for IPv4 (0-32) in '10.0.0.0/33'"},
		{"10.0.0.0/", "invalid prefix length in '10.0.0.0/'"},
		{"10.0.0.0 10.0.0.1", "one prefix a line, not '10.0.0.0 10.0.0.1'"},
		{"blocklist", "invalid address 'blocklist' in 'blocklist'"},
		{"2001:db8::/129", "prefix length 129 is out of range for IPv6 (0-128) in '2001:db8::/129'"},
	};
	for (int round = 0; round < 300; round++) {
		int family = rng() % 2 ? 6 : 4;
		std::vector<std::string> lines;
		for (size_t n = 1 + rng() % 30; n > 0; n--)
			lines.push_back(rng() % 5 ? written(rng, random_prefix(rng, family, 256)) : "# comment");
		size_t at = rng() % (lines.size() + 1);
		std::string reason;
		if (rng() % 4 == 0) {
			// The other family's prefix, after one of this family.
			lines.insert(lines.begin(), written(rng, random_prefix(rng, family, 256)));
			at = std::max<size_t>(at, 1);
			Cidr other = random_prefix(rng, family == 4 ? 6 : 4, 256);
			lines.insert(lines.begin() + static_cast<long>(at), format_cidr(other));
			reason = format_cidr(other) + " is IPv" + std::to_string(other.family) + ", and the set holds IPv" +
				 std::to_string(family) + " prefixes (a set is of one family)";
		} else {
			auto [bad, why] = BAD[rng() % std::size(BAD)];
			lines.insert(lines.begin() + static_cast<long>(at), std::string(bad) + (rng() % 2 ? " # why" : ""));
			reason = why;
		}
		std::string text;
		for (const auto &l : lines)
			text += l + "\n";
		// The family is fixed by the first prefix, or by the caller.
		std::string got = parse_error(text, rng() % 2 ? family : 0);
		EXPECT_EQ(got, "list.txt line " + std::to_string(at + 1) + ": " + reason) << text;
	}
}

TEST(SetFile, AFamilyGivenIsKeptByAnEmptyFile)
{
	std::istringstream in("# nothing yet\n\n");
	AddressSet s = read_set_lines(in, "x", 6);
	EXPECT_EQ(s.family, 6);
	EXPECT_TRUE(s.prefixes.empty());
	EXPECT_EQ(parse_error("10.0.0.0/8\n", 6),
		  "list.txt line 1: 10.0.0.0/8 is IPv4, and the set holds IPv6 prefixes (a set is of one family)");
}

TEST(SetNames, AreCheckedLikeRuleNames)
{
	for (const char *ok : {"bl", "drop.v4", "a_b-c", "123456789012345"})
		EXPECT_NO_THROW(check_set_name(ok)) << ok;
	for (const char *bad : {"", "1234567890123456", "-x", ".x", "a b", "a/b", "a@b"})
		EXPECT_THROW(check_set_name(bad), Error) << bad;
}

// The set store and the IPv6 trie's record read files whole through
// read_exact: every byte asked for, whatever sizes the reads come in, else
// why not (EIO for a file that ends early).
TEST(ReadExact, ReadsEveryByteInPiecesAndNamesAShortOrFailedRead)
{
	std::mt19937_64 rng(7);
	for (int round = 0; round < 50; round++) {
		std::vector<uint8_t> sent(1 + rng() % 200000), got(sent.size());
		for (auto &b : sent)
			b = static_cast<uint8_t>(rng());
		size_t short_by = round % 2 ? 1 + rng() % sent.size() : 0; // odd rounds: the writer stops early
		int fds[2];
		ASSERT_EQ(pipe(fds), 0);
		UniqueFd rd(fds[0]);
		pid_t writer = fork();
		ASSERT_GE(writer, 0);
		if (writer == 0) { // pieces of random sizes, so that reads return parts
			close(fds[0]);
			size_t at = 0, end = sent.size() - short_by;
			while (at < end) {
				size_t n = std::min<size_t>(end - at, 1 + rng() % 5000);
				if (write(fds[1], sent.data() + at, n) != static_cast<ssize_t>(n))
					_exit(1);
				at += n;
			}
			_exit(0);
		}
		close(fds[1]);
		int err = read_exact(rd.get(), got.data(), got.size());
		int status = 0;
		waitpid(writer, &status, 0);
		ASSERT_EQ(status, 0);
		if (short_by) {
			EXPECT_EQ(err, EIO) << "a file that ends " << short_by << " bytes early";
		} else {
			EXPECT_EQ(err, 0);
			EXPECT_EQ(got, sent) << "round " << round;
		}
	}
	uint8_t byte;
	UniqueFd dir(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	EXPECT_EQ(read_exact(dir.get(), &byte, 1), EISDIR);
	EXPECT_EQ(read_exact(-1, &byte, 1), EBADF);
	EXPECT_EQ(read_exact(dir.get(), &byte, 0), 0) << "nothing asked, nothing read";
}

TEST(SetStore, WritesReadsListsAndRemoves)
{
	char dir[] = "/tmp/sluice-sets-XXXXXX";
	ASSERT_TRUE(mkdtemp(dir));
	SetStore store(dir);
	EXPECT_TRUE(store.names().empty());
	std::mt19937_64 rng(7);
	AddressSet four{4, {}}, six{6, {}};
	for (int i = 0; i < 5000; i++) {
		four.prefixes.push_back(random_prefix(rng, 4, 256));
		six.prefixes.push_back(random_prefix(rng, 6, 256));
	}
	normalize(four.prefixes);
	normalize(six.prefixes);
	store.write("b4", four);
	store.write("a6", six);
	EXPECT_EQ(store.names(), (std::vector<std::string>{"a6", "b4"}));
	EXPECT_EQ(store.read("b4"), four);
	EXPECT_EQ(store.read("a6"), six);
	{
		// Staged and dropped: the set is unchanged.
		auto pending = store.stage("b4", six);
	}
	EXPECT_EQ(store.read("b4"), four);
	EXPECT_EQ(store.names().size(), 2u) << "no temporary file is left behind";
	auto pending = store.stage("b4", AddressSet{4, {}});
	pending.commit();
	EXPECT_TRUE(store.read("b4").prefixes.empty());
	EXPECT_TRUE(store.remove("b4"));
	EXPECT_FALSE(store.remove("b4"));
	try {
		store.read("b4");
		ADD_FAILURE() << "a removed set was read";
	} catch (const Error &e) {
		EXPECT_STREQ(e.what(), "no set named 'b4'; see `sluice set list`");
	}
	store.remove_all();
	EXPECT_EQ(rmdir(dir), 0);
}

// ---- The compiled tables against the reference model.

namespace {

/// The slots a packet from `addr` meets, in order, by the definition: every
/// rule covering it, a rule on a set at its outermost set prefix over the
/// address, longest prefix first, then match order.
std::vector<uint32_t> reference_walk(const std::vector<InstalledRule> &rules, const SetContents &sets, const Cidr &host)
{
	std::vector<std::pair<int, const InstalledRule *>> hits;
	for (const auto &r : rules) {
		if (r.spec.cidr.family != host.family)
			continue;
		int len = -1;
		if (r.spec.set.empty()) {
			if (cidr_contains(r.spec.cidr, host))
				len = r.spec.cidr.prefix_len;
		} else {
			for (const auto &c : sets.at(r.spec.set).prefixes)
				if (cidr_contains(c, host) && (len < 0 || c.prefix_len < len))
					len = c.prefix_len;
		}
		if (len >= 0)
			hits.push_back({len, &r});
	}
	std::sort(hits.begin(), hits.end(), [](const auto &a, const auto &b) {
		if (a.first != b.first)
			return a.first > b.first;
		const RuleSpec &x = a.second->spec, &y = b.second->spec;
		int wx = x.dport.hi - x.dport.lo, wy = y.dport.hi - y.dport.lo;
		if (wx != wy)
			return wx < wy;
		if ((x.proto != Proto::any) != (y.proto != Proto::any))
			return x.proto != Proto::any;
		return a.second->id < b.second->id;
	});
	std::vector<uint32_t> out;
	for (const auto &h : hits)
		out.push_back(h.second->slot);
	return out;
}

std::vector<uint32_t> walk_from(const MatchLists &m, uint32_t first)
{
	std::vector<uint32_t> slots;
	for (uint32_t i = first; i; i = m.at(i).next)
		slots.insert(slots.end(), m.at(i).slots, m.at(i).slots + m.at(i).count);
	return slots;
}

/// A /32, or now and then a /26 to /31, in 10.0.0.0/22: a set of hosts whose
/// /24s hold one rule's prefixes, or several's.
Cidr host_in_few_24s(std::mt19937_64 &rng)
{
	Cidr c = parse_cidr("10.0.0.0");
	c.addr[2] = static_cast<uint8_t>(rng() % 4);
	c.addr[3] = static_cast<uint8_t>(rng());
	if (rng() % 5 == 0)
		c.prefix_len = static_cast<int>(26 + rng() % 6);
	mask_address(c.addr, c.prefix_len);
	return c;
}

uint32_t host_order(const Cidr &c)
{
	return uint32_t(c.addr[0]) << 24 | uint32_t(c.addr[1]) << 16 | uint32_t(c.addr[2]) << 8 | c.addr[3];
}

} // namespace

TEST(SetRules, CompiledTablesWalkAsTheRulesWrittenOncePerPrefix)
{
	std::mt19937_64 rng(0x5e75);
	size_t compared = 0, set_hits = 0, full_blocks = 0, compact_blocks = 0;
	for (int round = 0; round < 60; round++) {
		int spread = round % 3 == 0 ? 256 : 3; // few distinct bytes: prefixes nest and meet
		SetContents sets;
		for (int k = 0; k < 3; k++) {
			for (int family : {4, 6}) {
				AddressSet s{family, {}};
				for (size_t n = rng() % (k == 2 ? 2000 : 40); n > 0; n--)
					s.prefixes.push_back(round % 3 == 1 && family == 4 ? host_in_few_24s(rng)
											: random_prefix(rng, family, spread));
				normalize(s.prefixes);
				sets.emplace("s" + std::to_string(k) + "v" + std::to_string(family), s);
			}
		}
		std::vector<InstalledRule> rules;
		std::vector<RuleSpec> taken;
		for (uint32_t i = 0; rules.size() < 30 && i < 200; i++) {
			RuleSpec s;
			int family = rng() % 2 ? 6 : 4;
			if (rng() % 3 == 0) {
				s.set = "s" + std::to_string(rng() % 3) + "v" + std::to_string(family);
				s.cidr = Cidr{family, {}, 0};
			} else if (round % 3 == 1 && family == 4 && rng() % 2) {
				s.cidr = host_in_few_24s(rng); // a second rule in a set's /24, or a /25 over its hosts
				if (rng() % 3 == 0)
					s.cidr.prefix_len = 25;
				mask_address(s.cidr.addr, s.cidr.prefix_len);
			} else {
				s.cidr = random_prefix(rng, family, spread);
			}
			s.action = rng() % 2 ? Action::deny : Action::allow;
			if (rng() % 3 == 0) {
				s.proto = rng() % 2 ? Proto::tcp : Proto::udp;
				if (rng() % 2)
					s.dport = {static_cast<uint16_t>(rng() % 100), static_cast<uint16_t>(100 + rng() % 100)};
			}
			if (std::any_of(taken.begin(), taken.end(), [&](const RuleSpec &t) { return same_selector(t, s); }))
				continue;
			taken.push_back(s);
			uint32_t id = static_cast<uint32_t>(rules.size() + 1);
			rules.push_back({id, id - 1, s});
		}
		std::shuffle(rules.begin(), rules.end(), rng);
		MatchLists m = compile_match_lists(rules, 1, 100000, &sets);

		// IPv4 through the 16-8-8 table, as the data plane looks up.
		std::vector<std::pair<Cidr, uint32_t>> prefixes4;
		for (const auto &[c, first] : m.first)
			if (c.family == 4)
				prefixes4.push_back({c, first});
		Dir4Tables t = build_dir4(prefixes4, 0, 1000000);
		for (uint32_t e : t.top)
			if (e & SLUICE_DIR_CHILD)
				for (uint32_t e2 : t.blocks[e & ~SLUICE_DIR_CHILD].entry) {
					full_blocks += (e2 & SLUICE_DIR_CHILD) != 0;
					compact_blocks += (e2 & SLUICE_DIR_BITMAP) != 0;
				}
		// Addresses near the prefixes (their ends and a random one under
		// each), and random ones.
		std::vector<Cidr> probes;
		for (const auto &[c, first] : m.first) {
			Cidr lo = c, hi = c, mid = c;
			lo.prefix_len = hi.prefix_len = mid.prefix_len = c.max_len();
			for (int b = c.prefix_len; b < c.max_len(); b++) {
				hi.addr[b / 8] |= static_cast<uint8_t>(0x80 >> (b % 8));
				if (rng() % 2)
					mid.addr[b / 8] |= static_cast<uint8_t>(0x80 >> (b % 8));
			}
			probes.insert(probes.end(), {lo, hi, mid});
		}
		for (int i = 0; i < 500; i++) {
			Cidr c = random_prefix(rng, rng() % 2 ? 6 : 4, spread);
			c.prefix_len = c.max_len();
			probes.push_back(c);
		}
		for (const Cidr &host : probes) {
			std::vector<uint32_t> got;
			if (host.family == 4) {
				got = walk_from(m, dir4_lookup(t, 0, host_order(host)));
			} else {
				// The trie's longest match.
				for (int len = 128; len >= 0; len--) {
					Cidr c = host;
					c.prefix_len = len;
					mask_address(c.addr, len);
					if (auto it = m.first.find(c); it != m.first.end()) {
						got = walk_from(m, it->second);
						break;
					}
				}
			}
			std::vector<uint32_t> want = reference_walk(rules, sets, host);
			ASSERT_EQ(got, want) << format_cidr(host) << " in round " << round;
			compared++;
			for (uint32_t slot : want)
				for (const auto &r : rules)
					set_hits += r.slot == slot && !r.spec.set.empty();
		}
	}
	EXPECT_GT(compared, 20000u);
	EXPECT_GT(set_hits, 5000u) << "the probes met rules on sets";
	// /24s of one entry's longer prefixes are bitmaps, of two or more full.
	EXPECT_GT(compact_blocks, 50u);
	EXPECT_GT(full_blocks, 50u);
}

TEST(SetRules, ASetOfAMillionPrefixesTakesAFewLists)
{
	std::mt19937_64 rng(1);
	AddressSet big{4, {}};
	for (int i = 0; i < 1000000; i++) {
		Cidr c;
		uint32_t a = static_cast<uint32_t>(rng());
		c.addr = {static_cast<uint8_t>(a >> 24), static_cast<uint8_t>(a >> 16), static_cast<uint8_t>(a >> 8),
			  static_cast<uint8_t>(a)};
		big.prefixes.push_back(c);
	}
	normalize(big.prefixes);
	SetContents sets{{"big", big}};
	RuleSpec set_rule, ten;
	set_rule.set = "big";
	set_rule.cidr = Cidr{4, {}, 0};
	set_rule.action = Action::deny;
	ten.cidr = parse_cidr("10.0.0.0/8");
	ten.action = Action::allow;
	std::vector<InstalledRule> rules = {{1, 0, set_rule}, {2, 1, ten}};
	MatchLists m = compile_match_lists(rules, 1, 16, &sets);
	// One list for the set's prefixes, one for 10/8, one for the set's
	// prefixes under 10/8 (which go on to 10/8's).
	EXPECT_EQ(m.lists.size(), 3u);
	EXPECT_EQ(m.first.size(), big.prefixes.size() + 1);
}

// The IPv6 trie has a room of its own (--max-v6-prefixes): a rule set fits
// when its distinct IPv6 prefixes, of rules on CIDRs and of the sets rules
// use, are at most that room, whatever --max-rules is; one more is refused
// with one line. Generated: /64s and /128s of a set, some of them also a
// CIDR rule's prefix or repeated in a second set, which count once.
TEST(SetRules, TheIPv6RoomCountsEachDistinctPrefixOnceWhateverMaxRules)
{
	for (uint64_t seed = 1; seed <= 20; seed++) {
		std::mt19937_64 rng(seed);
		auto prefix = [&rng] {
			Cidr c{6, {}, rng() % 2 ? 64 : 128};
			uint64_t hi = 0x20010db800000000ull | (rng() & 0xffffffff), lo = rng();
			for (int i = 0; i < 8; i++) {
				c.addr[i] = static_cast<uint8_t>(hi >> (56 - 8 * i));
				c.addr[8 + i] = c.prefix_len == 128 ? static_cast<uint8_t>(lo >> (56 - 8 * i)) : 0;
			}
			return c;
		};
		AddressSet a{6, {}}, b{6, {}};
		size_t n = 1 + rng() % 3000;
		for (size_t i = 0; i < n; i++)
			a.prefixes.push_back(prefix());
		for (size_t i = 0; i < n / 4; i++) // half shared with a, half new
			b.prefixes.push_back(i % 2 ? a.prefixes[rng() % n] : prefix());
		normalize(a.prefixes);
		normalize(b.prefixes);
		std::vector<RuleSpec> rules;
		std::set<Cidr> distinct(a.prefixes.begin(), a.prefixes.end());
		distinct.insert(b.prefixes.begin(), b.prefixes.end());
		for (int i = 0; i < 3; i++) {
			RuleSpec r;
			r.name = "cidr" + std::to_string(i);
			r.cidr = i == 0 ? a.prefixes.front() : prefix(); // the first on a prefix set a holds
			r.action = Action::allow;
			distinct.insert(r.cidr);
			rules.push_back(r);
		}
		for (const char *name : {"a", "b"}) {
			RuleSpec r;
			r.name = std::string("on-") + name;
			r.set = name;
			r.cidr = Cidr{6, {}, 0};
			r.action = Action::deny;
			rules.push_back(r);
		}
		SetContents sets{{"a", a}, {"b", b}};
		const uint32_t need = static_cast<uint32_t>(distinct.size());
		// Eight rule slots: far fewer than the prefixes.
		EXPECT_NO_THROW(Transaction::check_fits(rules, {8, need}, &sets)) << "seed " << seed;
		try {
			Transaction::check_fits(rules, {8, need - 1}, &sets);
			ADD_FAILURE() << "seed " << seed << ": " << need << " prefixes fit a room of " << need - 1;
		} catch (const Error &e) {
			EXPECT_EQ(std::string(e.what()), "the rules and sets need " + std::to_string(need) +
								 " IPv6 prefixes and --max-v6-prefixes holds " +
								 std::to_string(need - 1) +
								 "; raise it with `sluice apply` (tables: max_v6_prefixes)");
		}
	}
}

// The trie's room follows --max-rules unless it is given: the sizes of
// before it had one of its own.
TEST(SetRules, TheIPv6RoomIsMaxRulesUnlessGiven)
{
	EXPECT_EQ(TableSizes{}.rule_room(), (RuleRoom{SLUICE_DEFAULT_MAX_RULES, SLUICE_DEFAULT_MAX_RULES}));
	TableSizes t;
	t.max_rules = 100;
	EXPECT_EQ(t.rule_room(), (RuleRoom{100, 100}));
	t.max_v6_prefixes = 1000000;
	EXPECT_EQ(t.rule_room(), (RuleRoom{100, 1000000}));
	t.max_rules = 0;
	EXPECT_EQ(t.rule_room(), (RuleRoom{SLUICE_DEFAULT_MAX_RULES, 1000000}));
	EXPECT_EQ(TableSizes::stated_v6_prefixes(100, 100), 0u);
	EXPECT_EQ(TableSizes::stated_v6_prefixes(1000000, 100), 1000000u);
}

TEST(SetRules, ARuleOnAMissingSetOrOfTheOtherFamilyIsRefused)
{
	RuleSpec s;
	s.name = "blk";
	s.set = "nope";
	s.cidr = Cidr{4, {}, 0};
	s.action = Action::deny;
	std::vector<InstalledRule> rules = {{1, 0, s}};
	SetContents sets;
	try {
		compile_match_lists(rules, 1, 16, &sets);
		ADD_FAILURE();
	} catch (const Error &e) {
		EXPECT_STREQ(e.what(), "rule 'blk' uses set 'nope', which does not exist; see `sluice set list`");
	}
	sets.emplace("nope", AddressSet{6, {parse_cidr("2001:db8::/32")}});
	try {
		compile_match_lists(rules, 1, 16, &sets);
		ADD_FAILURE();
	} catch (const Error &e) {
		EXPECT_STREQ(e.what(), "rule 'blk' is an IPv4 rule, and set 'nope' holds IPv6 prefixes");
	}
	RuleSpec per = s;
	per.action = Action::limit;
	per.rate = parse_rate("10/s");
	per.per_prefix = 48;
	EXPECT_NO_THROW(validate_rule(per)) << "the family is not known yet";
	EXPECT_THROW(resolve_set_family(per, 4), Error);
	EXPECT_NO_THROW(resolve_set_family(per, 6));
}

TEST(SetRules, TheRuleEntriesKeepTheSetsName)
{
	RuleSpec s;
	s.name = "blk";
	s.set = "a.long-name_15c";
	s.cidr = Cidr{6, {}, 0};
	s.action = Action::limit;
	s.rate = parse_rate("5/s");
	s.per_prefix = 56;
	validate_rule(s);
	InstalledRule r{3, 2, s};
	InstalledRule back = from_maps(to_datapath(r), to_info(r));
	EXPECT_EQ(back.spec.set, s.set);
	EXPECT_EQ(back.spec.cidr.family, 6);
	EXPECT_TRUE(same_spec(back.spec, s));
	EXPECT_EQ(format_source(back.spec), "@a.long-name_15c");
	RuleSpec plain = s;
	plain.set.clear();
	EXPECT_FALSE(same_selector(plain, s)) << "a rule on ::/0 is not a rule on a set";
}
