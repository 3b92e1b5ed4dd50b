// SPDX-License-Identifier: GPL-2.0-only
#include "grants.h"

#include "maps.h"

namespace sluice {

namespace {
/// The entries kept past the bucket's record: the program takes the entry
/// the map holds (or one it read a moment before it was replaced).
constexpr size_t KEEP_WRITTEN = 8;
} // namespace

void GrantLedger::follow(uint64_t name, uint64_t taken)
{
	if (name != name_ || made_.empty()) {
		// Another bucket in the way (or the first sight of this one): the
		// old one's grants went with it; this one's start after its record.
		name_ = name;
		total_ = 0;
		made_.assign(1, {taken, 0});
		next_seq_ = taken + 1;
		return;
	}
	for (size_t i = 0; i < made_.size(); i++) {
		if (made_[i].first == taken) {
			made_.erase(made_.begin(), made_.begin() + static_cast<long>(i));
			return;
		}
	}
	// A record of no entry this ledger wrote (a sync before this one): what
	// this one granted since is still to be taken.
	uint64_t base = made_.front().second;
	made_.assign(1, {taken, base});
	if (next_seq_ <= taken)
		next_seq_ = taken + 1;
}

struct sluice_grant GrantLedger::grant(uint64_t name, uint64_t taken, int64_t ticks)
{
	follow(name, taken & SLUICE_GRANT_SEQ_MASK);
	total_ += static_cast<uint64_t>(ticks);
	uint64_t seq = next_seq_++ & SLUICE_GRANT_SEQ_MASK;
	made_.push_back({seq, total_});
	if (made_.size() > KEEP_WRITTEN + 1)
		made_.erase(made_.begin() + 1);
	struct sluice_grant g = {};
	g.name = name_;
	g.base = made_.front().first;
	g.seq = seq;
	g.ticks = static_cast<__s64>(total_ - made_.front().second);
	return g;
}

int64_t GrantLedger::outstanding(uint64_t taken) const
{
	for (const auto &[seq, total] : made_)
		if (seq == taken)
			return static_cast<int64_t>(total_ - total);
	return made_.empty() ? 0 : static_cast<int64_t>(total_ - made_.front().second);
}

void write_grants(int fd, const std::vector<struct sluice_grant_key> &keys,
		  const std::vector<struct sluice_grant> &grants)
{
	if (!keys.empty())
		map_update_batch(fd, keys.data(), grants.data(), keys.size(), "cluster grants");
}

} // namespace sluice
