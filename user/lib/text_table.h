// SPDX-License-Identifier: GPL-2.0-only
// Text in columns, for every table a person reads: `sluice rule list`,
// `stats`, `explain`, `top`'s screen. Scripts read --json instead. And
// counted nouns, for every message that gives a count.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace sluice {

/// How a column's cells sit in its width: words to the left, figures to
/// the right so that their digits line up.
enum class Align : uint8_t { left, right };

/// A column: its title and how its cells (title included) align.
struct Column {
	std::string title;
	Align align = Align::left;
};

/// Rows of text cells under titled columns. Each column is as wide as its
/// widest cell, in characters (UTF-8 code points); columns are two spaces
/// apart; a line has no blanks after its last cell. A row may have fewer
/// cells than there are columns (it ends early), never more.
class TextTable {
public:
	explicit TextTable(std::vector<Column> columns);
	/// Left-aligned columns with these titles.
	explicit TextTable(const std::vector<std::string> &titles);

	/// Throws Error for a row of more cells than there are columns.
	void add_row(std::vector<std::string> cells);
	size_t rows() const { return rows_.size(); }

	/// The title line, then one line per row.
	std::vector<std::string> lines() const;
	/// The lines, each ended by '\n'.
	void print(std::ostream &out) const;

private:
	std::vector<Column> columns_;
	std::vector<std::vector<std::string>> rows_;
};

/// "1 rule", "0 rules", "2 rules": `n` and the noun that agrees with it.
std::string plural(uint64_t n, const std::string &one, const std::string &many);

/// Prints left-aligned columns: the commands' usual table.
void print_table(const std::vector<std::string> &titles, const std::vector<std::vector<std::string>> &rows);
void print_table(std::ostream &out, const std::vector<std::string> &titles,
		 const std::vector<std::vector<std::string>> &rows);

} // namespace sluice
