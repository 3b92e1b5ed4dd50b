// SPDX-License-Identifier: GPL-2.0-only
// The cluster sync's side of the grants map (struct sluice_grant in
// sluice_abi.h): what it writes so that the program moves a cluster rule's
// bucket itself, each grant once.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "sluice_abi.h"

namespace sluice {

/// One bucket's grants, as the sync makes them: each step's move is a grant
/// with the next seq; the map entry carries every grant after the last one
/// the bucket took (its record, read from the table), summed. Grants made for
/// a bucket that is gone (its way holds another generation) go with it.
class GrantLedger {
public:
	/// Adds a grant of `ticks` to the bucket whose way is named `name`
	/// (sluice_way_name) and which took grant `taken` last; returns the entry
	/// to write for it.
	struct sluice_grant grant(uint64_t name, uint64_t taken, int64_t ticks);

	/// Grants made and not yet known taken, in ticks.
	int64_t outstanding(uint64_t taken) const;

private:
	void follow(uint64_t name, uint64_t taken);

	uint64_t name_ = 0, next_seq_ = 1;
	uint64_t total_ = 0; ///< every grant made for this bucket, summed (wrapping)
	/// (seq, total after it): the last one the bucket is known to have taken
	/// first, then the entries written since (the few latest only: the
	/// program takes the entry the map holds).
	std::deque<std::pair<uint64_t, uint64_t>> made_;
};

/// Writes grant entries into the grants map `fd`, one batch.
void write_grants(int fd, const std::vector<struct sluice_grant_key> &keys,
		  const std::vector<struct sluice_grant> &grants);

} // namespace sluice
