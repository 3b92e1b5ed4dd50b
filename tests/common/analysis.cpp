// SPDX-License-Identifier: GPL-2.0-only
#include "analysis.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace sluice::test {

uint64_t max_in_sliding_window(const Trace &trace, const std::vector<bool> &passed, uint64_t window_ns,
			       bool bytes)
{
	std::map<uint32_t, std::deque<const Arrival *>> open;
	std::map<uint32_t, uint64_t> sum;
	uint64_t best = 0;
	for (size_t i = 0; i < trace.size(); i++) {
		if (!passed[i])
			continue;
		const Arrival &a = trace[i];
		auto &q = open[a.source];
		uint64_t &s = sum[a.source];
		while (!q.empty() && a.t_ns - q.front()->t_ns >= window_ns) {
			s -= units(*q.front(), bytes);
			q.pop_front();
		}
		q.push_back(&a);
		s += units(a, bytes);
		best = std::max(best, s);
	}
	return best;
}

uint64_t max_in_aligned_window(const Trace &trace, const std::vector<bool> &passed, uint64_t window_ns,
			       bool bytes)
{
	std::map<std::pair<uint32_t, uint64_t>, uint64_t> per_window;
	uint64_t best = 0;
	for (size_t i = 0; i < trace.size(); i++)
		if (passed[i])
			best = std::max(best, per_window[{trace[i].source, trace[i].t_ns / window_ns}] +=
					      units(trace[i], bytes));
	return best;
}

bool within_token_bucket_bound(const Trace &trace, const std::vector<bool> &passed, double units_per_sec,
			       double burst, bool bytes, double slack)
{
	struct Envelope {
		double level;
		uint64_t last;
	};
	std::map<uint32_t, Envelope> env;
	for (size_t i = 0; i < trace.size(); i++) {
		if (!passed[i])
			continue;
		const Arrival &a = trace[i];
		auto it = env.find(a.source);
		if (it == env.end())
			it = env.emplace(a.source, Envelope{burst, a.t_ns}).first;
		Envelope &e = it->second;
		e.level = std::min(burst, e.level + units_per_sec * double(a.t_ns - e.last) / 1e9);
		e.last = a.t_ns;
		e.level -= double(units(a, bytes));
		if (e.level < -slack)
			return false;
	}
	return true;
}

double passed_rate(const Trace &trace, const std::vector<bool> &passed, bool bytes)
{
	if (trace.size() < 2)
		return 0;
	uint64_t total = 0;
	std::set<uint32_t> sources;
	for (size_t i = 0; i < trace.size(); i++) {
		sources.insert(trace[i].source);
		if (passed[i])
			total += units(trace[i], bytes);
	}
	double seconds = double(trace.back().t_ns - trace.front().t_ns) / 1e9;
	return double(total) / seconds / double(sources.size());
}

} // namespace sluice::test
