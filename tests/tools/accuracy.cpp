// SPDX-License-Identifier: GPL-2.0-only
// sluice-accuracy: replays arrival traces through every algorithm of the real
// XDP program (its test-clock build) and reports how each one behaves: the
// long-run passed rate against the limit, the most passed in any window of
// the rule's length, whether the algorithm's bound held, whether the kernel
// agreed with the reference model on every packet, and how often the sliding
// window counter disagrees with the exact sliding log. Draws the passed and
// dropped traffic of every algorithm on one trace as an SVG.
//   sluice-accuracy [--svg FILE] [--quick]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <set>
#include <iostream>
#include <sstream>

#include "analysis.h"
#include "reference.h"
#include "replay.h"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr uint64_t MS = 1000000ULL, SEC = 1000 * MS;
constexpr uint64_t LIMIT = 50;         // per window
constexpr uint64_t WINDOW = SEC;
constexpr uint64_t BURST = 10;         // token bucket and GCRA

const Algo ALGOS[] = {Algo::token_bucket, Algo::gcra, Algo::fixed_window, Algo::sliding_log,
		      Algo::sliding_window};

RuleSpec rule_for(Algo a)
{
	RuleSpec r;
	r.cidr = parse_cidr("10.0.0.0/8");
	r.rate = parse_rate("50/s");
	r.algo = a;
	if (a == Algo::token_bucket || a == Algo::gcra)
		r.burst = BURST;
	validate_rule(r);
	return r;
}

struct Row {
	double rate = 0;
	uint64_t max_window = 0;
	bool bound = false;
	size_t mismatches = 0;
	size_t packets = 0;
	double vs_log = -1; // share of decisions differing from the exact log
};

// Passes per second per source over whole windows, leaving out the first
// tenth of the trace: the long-run rate, without the opening burst or a
// partial window at either end.
double long_run_rate(const Trace &trace, const std::vector<bool> &passed)
{
	uint64_t t0 = trace.front().t_ns, t1 = trace.back().t_ns;
	uint64_t from = (t0 + (t1 - t0) / 10 + WINDOW - 1) / WINDOW * WINDOW, to = t1 / WINDOW * WINDOW;
	if (to <= from)
		return 0;
	std::set<uint32_t> sources;
	uint64_t n = 0;
	for (size_t i = 0; i < trace.size(); i++) {
		sources.insert(trace[i].source);
		n += passed[i] && trace[i].t_ns >= from && trace[i].t_ns < to;
	}
	return double(n) * 1e9 / double(to - from) / double(sources.size());
}

Row evaluate(Algo a, const Trace &trace, std::vector<bool> *decisions = nullptr)
{
	RuleSpec r = rule_for(a);
	std::vector<bool> got = Replayer(r).run(trace);
	ReferenceModel model(r), log(rule_for(Algo::sliding_log));
	Row row;
	row.packets = trace.size();
	size_t differ = 0;
	for (size_t i = 0; i < trace.size(); i++) {
		row.mismatches += model.admit(trace[i].source, trace[i].t_ns, 1) != got[i];
		differ += log.admit(trace[i].source, trace[i].t_ns, 1) != got[i];
	}
	if (a == Algo::sliding_window)
		row.vs_log = double(differ) / double(trace.size());
	row.rate = long_run_rate(trace, got);
	row.max_window = max_in_sliding_window(trace, got, WINDOW, false);
	if (a == Algo::token_bucket || a == Algo::gcra)
		row.bound = within_token_bucket_bound(trace, got, double(LIMIT), double(BURST), false);
	else if (a == Algo::sliding_log)
		row.bound = row.max_window <= LIMIT;
	else
		row.bound = max_in_aligned_window(trace, got, WINDOW, false) <= LIMIT;
	if (decisions)
		*decisions = got;
	return row;
}

std::string fixed(double v, int digits)
{
	char buf[64];
	std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
	return buf;
}

void print_table(const std::string &title, const Trace &trace, bool &all_equal)
{
	std::cout << "\n### " << title << " (" << trace.size() << " packets)\n\n";
	std::cout << "| algorithm | long-run passed/s | of the limit | most in any 1 s | bound held | kernel = model | differs from exact log |\n";
	std::cout << "| --- | ---: | ---: | ---: | --- | --- | ---: |\n";
	for (Algo a : ALGOS) {
		Row r = evaluate(a, trace);
		all_equal = all_equal && r.mismatches == 0;
		std::cout << "| " << algo_name(a) << " | " << fixed(r.rate, 2) << " | "
			  << fixed(100.0 * r.rate / double(LIMIT), 2) << " % | " << r.max_window << " | "
			  << (r.bound ? "yes" : "**no**") << " | "
			  << (r.mismatches ? "**" + std::to_string(r.mismatches) + " differ**" : "yes") << " | "
			  << (r.vs_log >= 0 ? fixed(100.0 * r.vs_log, 3) + " %" : "") << " |\n";
	}
}

// Passed and dropped packets per 100 ms, one panel per algorithm.
void write_svg(const std::string &path, const Trace &trace, uint64_t duration)
{
	const int bins = static_cast<int>(duration / (100 * MS));
	const int panel_h = 110, left = 130, width = 900, top = 62;
	const double bin_w = double(width) / bins;
	const int ymax = 20; // 4x the limit per bin; taller bars are clipped and labelled
	std::vector<std::vector<int>> passed, dropped;
	for (Algo a : ALGOS) {
		std::vector<bool> got;
		evaluate(a, trace, &got);
		std::vector<int> p(bins), d(bins);
		for (size_t i = 0; i < trace.size(); i++) {
			int b = static_cast<int>((trace[i].t_ns - TRACE_START_NS) / (100 * MS));
			if (b >= 0 && b < bins)
				(got[i] ? p : d)[b]++;
		}
		passed.push_back(p);
		dropped.push_back(d);
	}
	std::ostringstream svg;
	int height = top + 5 * (panel_h + 26) + 30;
	svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << left + width + 30 << "' height='" << height
	    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
	svg << "<text x='" << left << "' y='16' font-size='14'>Packets per 100 ms, passed (green) and dropped "
	    << "(red); dashed: the limit, 50/s. Trace: steady 20/s, and 60 packets</text>\n"
	    << "<text x='" << left << "' y='32' font-size='14'>in the 40 ms on each side of the 3 s and 6 s "
	    << "window boundaries (clipped bars: passed/sent in the bin).</text>\n";
	for (size_t k = 0; k < passed.size(); k++) {
		int y0 = top + static_cast<int>(k) * (panel_h + 26);
		double scale = double(panel_h) / ymax;
		svg << "<text x='10' y='" << y0 + panel_h / 2 << "'>" << algo_name(ALGOS[k]) << "</text>\n";
		svg << "<rect x='" << left << "' y='" << y0 << "' width='" << width << "' height='" << panel_h
		    << "' fill='none' stroke='#999'/>\n";
		for (int b = 0; b < bins; b++) {
			double x = left + b * bin_w;
			double hp = std::min(passed[k][b], ymax) * scale;
			double hd = std::min(dropped[k][b], ymax - std::min(passed[k][b], ymax)) * scale;
			if (passed[k][b] + dropped[k][b] > ymax)
				svg << "<text x='" << fixed(x, 1) << "' y='" << y0 - (b % 2 ? 3 : 14)
				    << "' font-size='10'>" << passed[k][b] << "/" << passed[k][b] + dropped[k][b]
				    << "</text>";
			svg << "<rect x='" << fixed(x, 1) << "' y='" << fixed(y0 + panel_h - hp, 1) << "' width='"
			    << fixed(bin_w - 1, 1) << "' height='" << fixed(hp, 1) << "' fill='#2a9d4b'/>";
			svg << "<rect x='" << fixed(x, 1) << "' y='" << fixed(y0 + panel_h - hp - hd, 1) << "' width='"
			    << fixed(bin_w - 1, 1) << "' height='" << fixed(hd, 1) << "' fill='#e07070'/>\n";
		}
		double limit_y = y0 + panel_h - 5 * scale; // 50/s is 5 per 100 ms
		svg << "<line x1='" << left << "' x2='" << left + width << "' y1='" << fixed(limit_y, 1) << "' y2='"
		    << fixed(limit_y, 1) << "' stroke='black' stroke-dasharray='4 3'/>\n";
	}
	int axis_y = top + 5 * (panel_h + 26) - 8;
	for (uint64_t s = 0; s <= duration / SEC; s++)
		svg << "<text x='" << fixed(left + double(s) * SEC / duration * width - 4, 1) << "' y='" << axis_y
		    << "'>" << s << " s</text>\n";
	svg << "</svg>\n";
	std::ofstream(path) << svg.str();
}

} // namespace

int main(int argc, char **argv)
{
	CLI::App app{"sluice-accuracy: every algorithm on replayed traces"};
	std::string svg_path = "accuracy.svg";
	bool quick = false;
	app.add_option("--svg", svg_path, "Where to write the picture");
	app.add_flag("--quick", quick, "Shorter traces");
	CLI11_PARSE(app, argc, argv);

	try {
		uint64_t d = quick ? 20 * SEC : 120 * SEC;
		std::cout << "## Sluice accuracy report\n\n"
			  << "Every algorithm limited to 50 packets per 1 s window (token bucket and GCRA: 50/s, "
			     "burst 10), replayed through the real XDP program (its test-clock build) with "
			     "BPF_PROG_TEST_RUN. The long-run rate is per source, over whole windows after the "
			     "first tenth of the trace. \"Differs from exact log\": the share of packets the "
			     "sliding window decides otherwise than the exact sliding log on the same trace.\n";
		bool all_equal = true;
		print_table("Constant flood at 2x the limit", constant_flood(100, d), all_equal);
		print_table("Constant flood at 10x", constant_flood(500, d), all_equal);
		print_table("Constant flood at 100x", constant_flood(5000, d / 2), all_equal);
		print_table("On-off bursts: 1000/s for 0.3 s every 3 s", on_off(1000, 300 * MS, 2700 * MS, quick ? 6 : 30),
			    all_equal);
		print_table("Window-boundary attack: 75 in the 50 ms before a boundary, 75 after",
			    boundary_attack(75, WINDOW, 50 * MS, quick ? 6 : 30), all_equal);
		print_table("50 sources at 2x each", constant_flood(5000, d / 2, 50), all_equal);
		print_table("Two CPUs driving one source at 10x", two_cpus(500, d / 2), all_equal);

		// The picture: steady 20/s (under the limit) with a burst straddling the
		// 3 s and 6 s boundaries.
		Trace pic = constant_flood(20, 10 * SEC);
		for (uint64_t boundary : {3 * SEC, 6 * SEC})
			for (const Arrival &a : boundary_attack(60, boundary / 3, 40 * MS, 1))
				pic.push_back(a);
		std::sort(pic.begin(), pic.end(), [](const Arrival &a, const Arrival &b) { return a.t_ns < b.t_ns; });
		write_svg(svg_path, pic, 10 * SEC);
		std::cout << "\nPicture: " << svg_path << "\n";
		std::cout << (all_equal ? "Kernel decisions equal the reference models on every trace.\n"
					: "KERNEL AND MODEL DISAGREE: see the tables.\n");
		return all_equal ? 0 : 1;
	} catch (const std::exception &e) {
		std::cerr << "sluice-accuracy: " << e.what() << "\n";
		return 1;
	}
}
