// The controller's side of the IPv4 source table (sluice_abi.h): the array
// of sets mapped into this process, read for statistics and edited with the
// same compare-and-swap protocol the XDP program uses.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sluice_abi.h"

namespace sluice {

class SourceTable4 {
public:
	/// Maps the table behind `fd` (SLUICE_MAP_SOURCES_V4).
	explicit SourceTable4(int fd);
	~SourceTable4();
	SourceTable4(const SourceTable4 &) = delete;
	SourceTable4 &operator=(const SourceTable4 &) = delete;

	/// Calls f(rule id, address bytes, bucket) for every published bucket: a
	/// copy, taken while the way held that key (the data plane reuses ways),
	/// with the drops pending in `pending` (every CPU's slot) added.
	void for_each(const std::function<void(uint32_t, const uint8_t *, const struct sluice_source_state &)> &f,
		      const std::vector<struct sluice_pending_drops> &pending = {}) const;

	/// Empties every way holding a bucket of `rule_id`; returns how many.
	uint64_t purge(uint32_t rule_id);
	/// Empties every way holding a bucket of a rule id for which doomed(id) holds.
	uint64_t purge_if(const std::function<bool(uint32_t)> &doomed);

	/// Places a bucket of a GCRA-form rule in an empty way of its two sets, as
	/// the program would (for tools that fill the table): its counters as
	/// given, its bucket full. False if both sets are full.
	bool insert(uint32_t rule_id, const uint8_t addr[4], const struct sluice_source_state &state, uint64_t seed);

private:
	struct sluice_set_v4 *sets_ptr_ = nullptr;
	uint32_t sets_ = 0;
	size_t length_ = 0;
};

} // namespace sluice
