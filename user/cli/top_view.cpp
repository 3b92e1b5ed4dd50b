// SPDX-License-Identifier: GPL-2.0-only
#include "top_view.h"

#include <algorithm>

#include "error.h"
#include "rate.h"
#include "text_table.h"

namespace sluice {

namespace {

std::string title(RateKey column, const TopHeader &h)
{
	return std::string(rate_key_title(column)) + (h.key == column ? "*" : "");
}

/// The four rate cells of a row, "-" before there is a delta.
void add_rate_cells(std::vector<std::string> &cells, const std::optional<FlowRates> &r)
{
	if (!r) {
		cells.insert(cells.end(), 4, "-");
		return;
	}
	cells.push_back(format_si(r->passed.packets_per_s));
	cells.push_back(format_si(r->passed.bits_per_s));
	cells.push_back(format_si(r->dropped.packets_per_s));
	cells.push_back(format_si(r->dropped.bits_per_s));
}

std::string limit_cell(const RuleSpec &s)
{
	switch (s.action) {
	case Action::limit: return format_rate(s.rate);
	case Action::allow: return "allow";
	case Action::deny: return "deny";
	}
	return "?";
}

std::string rates_text(const Throughput &t)
{
	return format_si(t.packets_per_s) + " pkt/s " + format_si(t.bits_per_s) + " bit/s";
}

std::vector<std::string> header_lines(const RateView &view, const TopHeader &h)
{
	std::vector<std::string> out;
	out.push_back("sluice top - " + h.clock + " - every " + format_duration(h.interval_ns) +
		      " - interfaces: " + h.interfaces);
	std::string totals = "total: ";
	if (view.total)
		totals += "passed " + rates_text(view.total->passed) + ", dropped " + rates_text(view.total->dropped);
	else
		totals += "rates after the first interval";
	out.push_back(totals + "; " + plural(view.rules.size(), "rule", "rules") + ", " +
		      plural(view.tracked_sources, "source", "sources") + " tracked");
	std::string order = h.key == RateKey::name ? (h.reverse ? "Z to A" : "A to Z")
						 : (h.reverse ? "smallest first" : "largest first");
	std::string sort = "sort: " + std::string(rate_key_title(h.key)) + ", " + order;
	if (h.interactive)
		sort += "  [q quit, < > sort, r reverse]";
	out.push_back(sort);
	return out;
}

} // namespace

std::vector<std::string> render_top(const RateView &view, const TopHeader &h, const TopLayout &layout)
{
	bool bounded = layout.width > 0 && layout.height > 0;
	if (bounded && (layout.width < TOP_MIN_WIDTH || layout.height < TOP_MIN_HEIGHT)) {
		std::string msg = "window too small (" + std::to_string(layout.width) + "x" +
				  std::to_string(layout.height) + "); sluice top needs " + std::to_string(TOP_MIN_WIDTH) +
				  "x" + std::to_string(TOP_MIN_HEIGHT) + ", q quits";
		return {msg.substr(0, static_cast<size_t>(layout.width))};
	}

	std::vector<std::string> out = header_lines(view, h);
	// Blank, rules title, blank, sources title.
	const int fixed = static_cast<int>(out.size()) + 4;
	size_t source_count = view.sources.size();
	if (layout.max_sources)
		source_count = std::min(source_count, layout.max_sources);
	size_t rule_rows = view.rules.size(), source_rows = source_count;
	if (bounded) {
		int avail = layout.height - fixed;
		int rules_want = static_cast<int>(view.rules.size());
		int sources_want = static_cast<int>(std::min<size_t>(source_count, static_cast<size_t>(avail)));
		// Rules first, but sources keep at least half of the rows they need.
		int r = std::min(rules_want, std::max(avail / 2, avail - sources_want));
		rule_rows = static_cast<size_t>(r);
		source_rows = static_cast<size_t>(std::min(sources_want, avail - r));
	}

	out.push_back("");
	if (view.rules.empty()) {
		out.push_back("no rules; add one with `sluice rule add CIDR --rate RATE`");
	} else {
		TextTable t({{h.key == RateKey::name ? "RULE*" : "RULE"},
			     {"LIMIT"},
			     {"SOURCES", Align::right},
			     {title(RateKey::pass_packets, h), Align::right},
			     {title(RateKey::pass_bits, h), Align::right},
			     {title(RateKey::drop_packets, h), Align::right},
			     {title(RateKey::drop_bits, h), Align::right}});
		bool cut = rule_rows < view.rules.size();
		size_t shown = cut && rule_rows ? rule_rows - 1 : rule_rows;
		for (size_t i = 0; i < shown; i++) {
			const RuleRates &r = view.rules[i];
			std::vector<std::string> cells{r.rule.spec.name + (r.rule.spec.shadow ? " (shadow)" : ""),
						       limit_cell(r.rule.spec), std::to_string(r.sources)};
			add_rate_cells(cells, r.rates);
			t.add_row(std::move(cells));
		}
		auto lines = t.lines();
		out.insert(out.end(), lines.begin(), lines.end());
		if (cut)
			out.push_back("(" + std::to_string(view.rules.size() - shown) + " more rules)");
	}

	out.push_back("");
	if (view.sources.empty()) {
		out.push_back("no tracked sources");
	} else {
		TextTable t({{h.key == RateKey::name ? "SOURCE*" : "SOURCE"},
			     {"RULE"},
			     {title(RateKey::pass_packets, h), Align::right},
			     {title(RateKey::pass_bits, h), Align::right},
			     {title(RateKey::drop_packets, h), Align::right},
			     {title(RateKey::drop_bits, h), Align::right}});
		bool cut = source_rows < view.sources.size();
		// Bounded, the last row says how many more; unbounded (--top N), a line is added.
		size_t shown = cut && bounded && source_rows ? source_rows - 1 : source_rows;
		for (size_t i = 0; i < shown; i++) {
			const SourceRates &s = view.sources[i];
			std::vector<std::string> cells{s.source, s.rule + (s.shadow ? " (shadow)" : "")};
			add_rate_cells(cells, s.rates);
			t.add_row(std::move(cells));
		}
		auto lines = t.lines();
		out.insert(out.end(), lines.begin(), lines.end());
		if (cut)
			out.push_back("(" + std::to_string(shown) + " of " + std::to_string(view.sources.size()) +
				      " sources shown)");
	}

	if (bounded) {
		out.resize(std::min(out.size(), static_cast<size_t>(layout.height)));
		for (auto &line : out)
			if (line.size() > static_cast<size_t>(layout.width))
				line.resize(static_cast<size_t>(layout.width));
	}
	return out;
}

std::string_view rate_key_option(RateKey k)
{
	switch (k) {
	case RateKey::name: return "name";
	case RateKey::pass_packets: return "pass-pps";
	case RateKey::pass_bits: return "pass-bps";
	case RateKey::drop_packets: return "drop-pps";
	case RateKey::drop_bits: return "drop-bps";
	}
	return "?";
}

RateKey parse_rate_key(std::string_view text)
{
	for (RateKey k : RATE_KEYS)
		if (text == rate_key_option(k))
			return k;
	throw Error("unknown sort key '" + std::string(text) +
		    "': one of name, pass-pps, pass-bps, drop-pps, drop-bps");
}

} // namespace sluice
