// SPDX-License-Identifier: GPL-2.0-only
// Reference models: each algorithm written again in plain C++, in its
// textbook form, to check the kernel's decisions packet by packet. They share
// the controller's compiled rule parameters (and the warm-up cost quantiser),
// not its state machines.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>

#include "rule.h"

namespace sluice::test {

/// One algorithm for one rule, over any number of sources.
class ReferenceModel {
public:
	explicit ReferenceModel(const RuleSpec &rule);
	/// The decision for a packet of `cost` units (1, or bytes) from `source` at t_ns.
	/// Times must not go backwards.
	bool admit(uint32_t source, uint64_t t_ns, uint64_t cost);

private:
	struct Bucket {
		bool fresh = true;
		uint64_t level = 0, last = 0, cold = 0; // token bucket, in ticks
		uint64_t tat = 0;                       // GCRA, in ticks
		std::map<uint64_t, uint64_t> windows;   // window index -> units passed
		std::deque<uint64_t> log;               // times of passes, ns
	};
	bool token_bucket(Bucket &b, uint64_t t_ns, uint64_t cost);
	bool gcra(Bucket &b, uint64_t t_ns, uint64_t cost);
	bool fixed_window(Bucket &b, uint64_t t_ns, uint64_t cost);
	bool sliding_window(Bucket &b, uint64_t t_ns, uint64_t cost);
	bool sliding_log(Bucket &b, uint64_t t_ns);
	uint64_t ticks_for(uint64_t cost) const;

	RuleSpec rule_;
	LimitParams bucket_;
	WindowParams window_;
	uint64_t warmup_ticks_ = 0;
	std::map<uint32_t, Bucket> buckets_;
};

} // namespace sluice::test
