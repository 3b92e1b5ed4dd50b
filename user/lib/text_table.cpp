// SPDX-License-Identifier: GPL-2.0-only
#include "text_table.h"

#include <algorithm>
#include <iostream>

#include "error.h"

namespace sluice {

namespace {

/// Characters a terminal shows for `text`: its bytes less UTF-8's
/// continuation bytes.
size_t display_width(const std::string &text)
{
	return static_cast<size_t>(
		std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

} // namespace

TextTable::TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

TextTable::TextTable(const std::vector<std::string> &titles)
{
	for (const auto &t : titles)
		columns_.push_back({t, Align::left});
}

void TextTable::add_row(std::vector<std::string> cells)
{
	if (cells.size() > columns_.size())
		throw Error("a table row of " + plural(cells.size(), "cell", "cells") + " under " +
			    plural(columns_.size(), "column", "columns"));
	rows_.push_back(std::move(cells));
}

std::vector<std::string> TextTable::lines() const
{
	std::vector<size_t> width(columns_.size());
	for (size_t i = 0; i < columns_.size(); i++)
		width[i] = display_width(columns_[i].title);
	for (const auto &r : rows_)
		for (size_t i = 0; i < r.size(); i++)
			width[i] = std::max(width[i], display_width(r[i]));
	auto line = [&](auto cell_at, size_t cells) {
		std::string out;
		for (size_t i = 0; i < cells; i++) {
			const std::string &cell = cell_at(i);
			bool last = i + 1 == cells;
			std::string pad(width[i] - display_width(cell), ' ');
			if (columns_[i].align == Align::right)
				out += pad + cell;
			else
				out += last ? cell : cell + pad;
			if (!last)
				out += "  ";
		}
		return out;
	};
	std::vector<std::string> out;
	out.reserve(rows_.size() + 1);
	out.push_back(line([&](size_t i) -> const std::string & { return columns_[i].title; }, columns_.size()));
	for (const auto &r : rows_)
		out.push_back(line([&](size_t i) -> const std::string & { return r[i]; }, r.size()));
	return out;
}

void TextTable::print(std::ostream &out) const
{
	for (const auto &l : lines())
		out << l << "\n";
}

void print_table(std::ostream &out, const std::vector<std::string> &titles,
		 const std::vector<std::vector<std::string>> &rows)
{
	TextTable t(titles);
	for (const auto &r : rows)
		t.add_row(r);
	t.print(out);
}

std::string plural(uint64_t n, const std::string &one, const std::string &many)
{
	return std::to_string(n) + " " + (n == 1 ? one : many);
}

void print_table(const std::vector<std::string> &titles, const std::vector<std::vector<std::string>> &rows)
{
	print_table(std::cout, titles, rows);
}

} // namespace sluice
