// SPDX-License-Identifier: GPL-2.0-only
#include "reference.h"

#include "sluice_algos.h"

namespace sluice::test {

ReferenceModel::ReferenceModel(const RuleSpec &rule) : rule_(rule)
{
	if (rule.has_burst())
		bucket_ = compile_limit(rule.rate, rule.burst);
	else
		window_ = compile_window(rule.rate);
	warmup_ticks_ = rule.warmup_ns << SLUICE_TICK_SHIFT;
}

uint64_t ReferenceModel::ticks_for(uint64_t cost) const
{
	// ceil(cost * mult / 2^shift), in 128 bits: no overflow to mirror.
	unsigned __int128 x = static_cast<unsigned __int128>(cost) * bucket_.inc_mult;
	return static_cast<uint64_t>((x + ((static_cast<unsigned __int128>(1) << bucket_.inc_shift) - 1)) >>
				     bucket_.inc_shift);
}

bool ReferenceModel::admit(uint32_t source, uint64_t t_ns, uint64_t cost)
{
	Bucket &b = buckets_[source];
	switch (rule_.algo) {
	case Algo::gcra: return gcra(b, t_ns, cost);
	case Algo::fixed_window: return fixed_window(b, t_ns, cost);
	case Algo::sliding_window: return sliding_window(b, t_ns, cost);
	case Algo::sliding_log: return sliding_log(b, t_ns);
	case Algo::token_bucket: break;
	}
	return token_bucket(b, t_ns, cost);
}

// Tokens and the time of the last refill: refill, then take.
bool ReferenceModel::token_bucket(Bucket &b, uint64_t t_ns, uint64_t cost)
{
	uint64_t now = t_ns << SLUICE_TICK_SHIFT;
	if (b.fresh) {
		b.fresh = false;
		b.level = bucket_.capacity;
		b.last = now;
		b.cold = warmup_ticks_;
	}
	uint64_t level = b.level + (now - b.last);
	if (level > bucket_.capacity) {
		// Time spent full cools a bucket with a warm-up.
		b.cold = std::min(warmup_ticks_, b.cold + (level - bucket_.capacity));
		level = bucket_.capacity;
	}
	b.level = level;
	b.last = now;
	uint64_t take = ticks_for(cost);
	if (warmup_ticks_)
		take = std::min<uint64_t>(sluice_warm_cost(take, b.cold, warmup_ticks_), bucket_.capacity);
	if (b.level < take)
		return false;
	b.level -= take;
	b.cold = b.cold > take ? b.cold - take : 0;
	return true;
}

// The theoretical arrival time: pass if it stays within the burst tolerance.
bool ReferenceModel::gcra(Bucket &b, uint64_t t_ns, uint64_t cost)
{
	uint64_t now = t_ns << SLUICE_TICK_SHIFT;
	uint64_t tat = std::max(b.tat, now) + ticks_for(cost);
	if (tat - now > bucket_.capacity)
		return false;
	b.tat = tat;
	return true;
}

bool ReferenceModel::fixed_window(Bucket &b, uint64_t t_ns, uint64_t cost)
{
	uint64_t &used = b.windows[t_ns / window_.window_ns];
	if (used + cost > window_.limit)
		return false;
	used += cost;
	return true;
}

// Current count plus the previous window's, weighted by its remaining overlap.
bool ReferenceModel::sliding_window(Bucket &b, uint64_t t_ns, uint64_t cost)
{
	uint64_t w = t_ns / window_.window_ns;
	uint64_t pos = t_ns % window_.window_ns;
	uint64_t cur = b.windows[w];
	uint64_t prev = w ? b.windows[w - 1] : 0;
	uint64_t weight = ((window_.window_ns - pos) << 16) / window_.window_ns; // 1/65536ths
	uint64_t estimate = cur + (prev * weight + 0xffff) / 65536;
	if (estimate + cost > window_.limit)
		return false;
	b.windows[w] += cost;
	return true;
}

// Every pass remembered; those a full window old are forgotten.
bool ReferenceModel::sliding_log(Bucket &b, uint64_t t_ns)
{
	while (!b.log.empty() && t_ns - b.log.front() >= window_.window_ns)
		b.log.pop_front();
	if (b.log.size() >= window_.limit)
		return false;
	b.log.push_back(t_ns);
	return true;
}

} // namespace sluice::test
