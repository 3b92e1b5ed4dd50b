// SPDX-License-Identifier: GPL-2.0-only
// What the commands print for people and for scripts: `stats --json` (valid
// JSON whatever the strings hold, equal to the document built whole) and the
// table printer every human table goes through.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "bans.h"
#include "error.h"
#include "stats.h"
#include "text_table.h"

using namespace sluice;
using nlohmann::ordered_json;

namespace {

/// A string of what JSON must escape and what it must carry through: quotes,
/// backslashes, every control character, slashes, and one- to four-byte
/// UTF-8 characters.
std::string random_text(std::mt19937_64 &rng)
{
	static const char32_t extra[] = {U'"', U'\\', U'/', U'\x7f', U'é', U'€', U'\u2028', U'\U0001F600', U'\uFFFD'};
	std::string out;
	size_t n = rng() % 24;
	for (size_t i = 0; i < n; i++) {
		char32_t c;
		switch (rng() % 4) {
		case 0: c = static_cast<char32_t>(rng() % 0x20); break; // control, NUL included
		case 1: c = extra[rng() % std::size(extra)]; break;
		default: c = static_cast<char32_t>(0x20 + rng() % 0x5f); break; // printable ASCII
		}
		if (c < 0x80) {
			out += static_cast<char>(c);
		} else if (c < 0x800) {
			out += static_cast<char>(0xc0 | (c >> 6));
			out += static_cast<char>(0x80 | (c & 0x3f));
		} else if (c < 0x10000) {
			out += static_cast<char>(0xe0 | (c >> 12));
			out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
			out += static_cast<char>(0x80 | (c & 0x3f));
		} else {
			out += static_cast<char>(0xf0 | (c >> 18));
			out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
			out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
			out += static_cast<char>(0x80 | (c & 0x3f));
		}
	}
	return out;
}

const Algo ALGOS[] = {Algo::token_bucket, Algo::gcra, Algo::fixed_window, Algo::sliding_window, Algo::sliding_log};

Stats random_stats(std::mt19937_64 &rng)
{
	Stats s;
	size_t rules = rng() % 3, sources = rng() % 6;
	for (size_t i = 0; i < rules; i++) {
		RuleStats rs;
		rs.rule.id = static_cast<uint32_t>(i + 1);
		rs.rule.spec.name = random_text(rng);
		rs.rule.spec.cidr = parse_cidr("10.0.0.0/8");
		rs.rule.spec.action = i % 2 ? Action::deny : Action::limit;
		rs.rule.spec.rate = parse_rate("100/s");
		rs.rule.spec.burst = 10;
		rs.rule.spec.shadow = rng() % 2;
		rs.sources = rng() % 1000;
		rs.counters = {rng(), rng(), rng(), rng(), rng(), rng()};
		s.rules.push_back(rs);
	}
	for (size_t i = 0; i < sources; i++) {
		SourceStats src;
		src.source = random_text(rng);
		src.rule = random_text(rng);
		src.rule_id = static_cast<uint32_t>(rng());
		src.shadow = rng() % 2;
		// Sums of passed and would-drop counts stay within 64 bits.
		src.passed_packets = rng() >> 1;
		src.passed_bytes = rng() >> 1;
		src.dropped_packets = rng() >> 1;
		src.dropped_bytes = rng() >> 1;
		src.algo = ALGOS[rng() % std::size(ALGOS)];
		s.sources.push_back(src);
	}
	s.tracked_sources = rng() % 100000;
	s.bans = rng() % 1000;
	for (auto &g : s.global)
		g = {rng(), rng()};
	return s;
}

/// `stats --json` as a tree built whole: what the streamed text must parse to.
ordered_json reference_document(const Stats &s, bool with_global, bool with_rules)
{
	ordered_json sources = ordered_json::array();
	for (const SourceStats &src : s.sources) {
		bool sh = src.shadow;
		ordered_json j = {{"source", src.source},
				  {"rule", src.rule},
				  {"rule_id", src.rule_id},
				  {"algo", algo_name(src.algo)},
				  {"passed_packets", src.passed_packets + (sh ? src.dropped_packets : 0)},
				  {"passed_bytes", src.passed_bytes + (sh ? src.dropped_bytes : 0)},
				  {"dropped_packets", sh ? 0 : src.dropped_packets},
				  {"dropped_bytes", sh ? 0 : src.dropped_bytes}};
		if (sh) {
			j["would_drop_packets"] = src.dropped_packets;
			j["would_drop_bytes"] = src.dropped_bytes;
		}
		sources.push_back(j);
	}
	ordered_json rules = ordered_json::array();
	for (const RuleStats &rs : s.rules) {
		ordered_json j = rule_json(rs.rule);
		const auto &c = rs.counters;
		bool sh = rs.rule.spec.shadow;
		j["sources"] = rs.sources;
		j["passed_packets"] = c.passed_packets + (sh ? c.dropped_packets : 0);
		j["passed_bytes"] = c.passed_bytes + (sh ? c.dropped_bytes : 0);
		j["dropped_packets"] = sh ? 0 : c.dropped_packets;
		j["dropped_bytes"] = sh ? 0 : c.dropped_bytes;
		if (sh) {
			j["would_drop_packets"] = c.dropped_packets;
			j["would_drop_bytes"] = c.dropped_bytes;
		}
		j["failopen_table"] = c.failopen_table;
		j["passed_contention"] = c.passed_contention;
		rules.push_back(j);
	}
	ordered_json doc = {{"sources", sources}, {"tracked_sources", s.tracked_sources}};
	if (!with_rules) // `stats --source`: that source's lines and the count, as its text
		return doc;
	doc["bans"] = s.bans;
	doc["rules"] = rules;
	if (with_global) {
		ordered_json global = ordered_json::object();
		for (int i = 0; i < SLUICE_CNT_MAX; i++)
			global[counter_name(i)] = {{"packets", s.global[i].packets}, {"bytes", s.global[i].bytes}};
		doc["global"] = global;
	}
	return doc;
}

std::vector<std::string> split_lines(const std::string &text)
{
	std::vector<std::string> out;
	std::istringstream in(text);
	for (std::string line; std::getline(in, line);)
		out.push_back(line);
	return out;
}

} // namespace

// Names, addresses and every other string reach the JSON escaped: whatever
// they hold (quotes, backslashes, NULs, newlines, any Unicode), the output
// parses, back to the very strings, in the fields and field order of the
// document built whole; each source stays on a line of its own.
TEST(StatsJson, AnyStringsParseBackToThemselvesInTheDocumentBuiltWhole)
{
	std::mt19937_64 rng(20261127);
	for (int round = 0; round < 3000; round++) {
		Stats s = random_stats(rng);
		bool with_global = round % 4 != 0, with_rules = round % 3 != 0;
		std::ostringstream out;
		write_stats_json(out, s, with_global, with_rules);
		ordered_json got;
		ASSERT_NO_THROW(got = ordered_json::parse(out.str())) << "round " << round << ":\n" << out.str();
		ASSERT_EQ(got, reference_document(s, with_global, with_rules)) << "round " << round << ":\n" << out.str();
		for (size_t i = 0; i < s.sources.size(); i++) {
			EXPECT_EQ(got["sources"][i]["source"].get<std::string>(), s.sources[i].source);
			EXPECT_EQ(got["sources"][i]["rule"].get<std::string>(), s.sources[i].rule);
		}
		for (size_t i = 0; with_rules && i < s.rules.size(); i++)
			EXPECT_EQ(got["rules"][i]["name"].get<std::string>(), s.rules[i].rule.spec.name);

		// Laid out as before: "sources" first, one source per line.
		std::vector<std::string> lines = split_lines(out.str());
		ASSERT_GE(lines.size(), 2u);
		EXPECT_EQ(lines[0], "{");
		if (s.sources.empty()) {
			EXPECT_EQ(lines[1], "  \"sources\": [],");
			continue;
		}
		EXPECT_EQ(lines[1], "  \"sources\": [");
		for (size_t i = 0; i < s.sources.size(); i++) {
			const std::string &line = lines[2 + i];
			ASSERT_EQ(line.rfind("    {", 0), 0u) << line;
			std::string entry = line.substr(4, line.size() - 4 - (i + 1 < s.sources.size() ? 1 : 0));
			EXPECT_EQ(ordered_json::parse(entry), got["sources"][i]) << line;
		}
		EXPECT_EQ(lines[2 + s.sources.size()], "  ],");
	}
}

// A name that is not UTF-8 (a damaged map) is written as U+FFFD: the
// output still parses, rather than stopping halfway through.
TEST(StatsJson, BytesThatAreNotUtf8BecomeReplacementCharacters)
{
	Stats s;
	SourceStats src;
	src.source = "10.0.0.1";
	src.rule = std::string("bad\xff\xc3", 5);
	s.sources.push_back(src);
	RuleStats rs;
	rs.rule.spec.name = std::string("r\x80", 2);
	rs.rule.spec.cidr = parse_cidr("10.0.0.0/8");
	rs.rule.spec.action = Action::deny;
	s.rules.push_back(rs);
	std::ostringstream out;
	write_stats_json(out, s);
	nlohmann::json j;
	ASSERT_NO_THROW(j = nlohmann::json::parse(out.str())) << out.str();
	EXPECT_EQ(j["sources"][0]["rule"], "bad\uFFFD\uFFFD");
	EXPECT_EQ(j["rules"][0]["name"], "r\uFFFD");
}

// The commands' tables, exactly: columns as wide as their widest cell, two
// spaces apart, nothing after the last cell.
TEST(TextTable, PrintsLeftAlignedColumnsSizedToTheirCells)
{
	std::ostringstream out;
	print_table(out, {"ID", "NAME", "RATE"}, {{"1", "per-host", "100/s"}, {"12", "x", "-"}});
	EXPECT_EQ(out.str(), "ID  NAME      RATE\n"
			     "1   per-host  100/s\n"
			     "12  x         -\n");

	TextTable t({{"SOURCE"}, {"PKT/S", Align::right}, {"BIT/S", Align::right}});
	t.add_row({"10.0.0.1", "5", "40"});
	t.add_row({"fd00::1", "1.2k", "9.8M"});
	EXPECT_EQ(t.lines(), (std::vector<std::string>{"SOURCE    PKT/S  BIT/S", "10.0.0.1      5     40",
						       "fd00::1    1.2k   9.8M"}));
	EXPECT_EQ(t.rows(), 2u);
}

TEST(TextTable, CountsCharactersNotBytesAndRefusesRowsWiderThanItsColumns)
{
	TextTable t(std::vector<std::string>{"A", "B"});
	t.add_row({"é€", "x"});
	t.add_row({"abc"}); // a row may end early
	EXPECT_EQ(t.lines(), (std::vector<std::string>{"A    B", "é€   x", "abc"}));
	EXPECT_THROW(t.add_row({"1", "2", "3"}), Error);
}

// Over random tables: each cell sits in its column (left-aligned cells at the
// column's start, right-aligned ones ending at its end), a column is as wide
// as its widest cell, columns are two spaces apart, no line ends in a blank.
TEST(TextTable, EveryCellSitsInItsColumnOverRandomTables)
{
	std::mt19937_64 rng(7);
	auto word = [&rng] {
		std::string w(1 + rng() % 12, ' ');
		for (char &c : w)
			c = static_cast<char>('!' + rng() % 94);
		return w;
	};
	for (int round = 0; round < 2000; round++) {
		size_t ncol = 1 + rng() % 7, nrow = rng() % 6;
		std::vector<Column> cols;
		for (size_t i = 0; i < ncol; i++)
			cols.push_back({word(), rng() % 2 ? Align::right : Align::left});
		std::vector<std::vector<std::string>> rows(nrow);
		for (auto &r : rows)
			for (size_t i = 0, n = 1 + rng() % ncol; i < n; i++)
				r.push_back(word());
		TextTable t(cols);
		for (const auto &r : rows)
			t.add_row(r);
		std::vector<size_t> width(ncol);
		for (size_t i = 0; i < ncol; i++) {
			width[i] = cols[i].title.size();
			for (const auto &r : rows)
				if (i < r.size())
					width[i] = std::max(width[i], r[i].size());
		}
		std::vector<std::vector<std::string>> all{{}};
		for (const auto &c : cols)
			all[0].push_back(c.title);
		all.insert(all.end(), rows.begin(), rows.end());
		std::vector<std::string> lines = t.lines();
		ASSERT_EQ(lines.size(), all.size());
		for (size_t l = 0; l < lines.size(); l++) {
			const std::string &line = lines[l];
			ASSERT_FALSE(line.empty());
			EXPECT_NE(line.back(), ' ') << line;
			size_t start = 0;
			for (size_t i = 0; i < all[l].size(); i++) {
				const std::string &cell = all[l][i];
				bool last = i + 1 == all[l].size();
				size_t at = cols[i].align == Align::right ? start + width[i] - cell.size() : start;
				ASSERT_EQ(line.substr(at, cell.size()), cell) << "round " << round << " line " << l << ": " << line;
				EXPECT_EQ(line.find_first_not_of(' ', start), at) << line;
				if (last)
					EXPECT_EQ(line.size(), at + cell.size()) << line;
				else
					EXPECT_EQ(line.substr(at + cell.size(), start + width[i] + 2 - at - cell.size()),
						  std::string(start + width[i] + 2 - at - cell.size(), ' '))
						<< line;
				start += width[i] + 2;
			}
		}
	}
}

// `sluice bans` and `explain` print a ban's start and end as UTC: a start
// lies behind the monotonic reading, an end ahead of it. Generated
// offsets, past and future, each read back through timegm.
TEST(Output, MonotonicTimesPastAndFutureAsUtc)
{
	// 2026-11-27T20:50:04Z, a ban of ten minutes begun then.
	EXPECT_EQ(monotonic_to_utc(5000000000000ULL + 600000000000ULL, 5000000000000ULL, 1795812604),
		  "2026-11-27T21:00:04Z");
	EXPECT_EQ(monotonic_to_utc(5000000000000ULL, 5000000000000ULL, 1795812604), "2026-11-27T20:50:04Z");
	std::mt19937_64 rng(7);
	for (int round = 0; round < 10000; round++) {
		int64_t wall = 1000000000 + int64_t(rng() % 3000000000ULL);
		uint64_t mono_now = 400ULL * 86400 * 1000000000ULL + rng() % (1ULL << 60);
		int64_t secs = int64_t(rng() % (2ULL * 366 * 86400 + 1)) - 366 * 86400; // a ban is at most 366 days
		uint64_t mono = mono_now + uint64_t(secs * 1000000000LL);
		std::string text = monotonic_to_utc(mono, mono_now, wall);
		struct tm tm = {};
		ASSERT_NE(strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm), nullptr) << text;
		EXPECT_EQ(int64_t(timegm(&tm)), wall + secs) << "offset " << secs << "s: " << text;
	}
}
