// SPDX-License-Identifier: GPL-2.0-only
// The IPv6 prefixes' trie (SLUICE_MAP_MATCH_V6): one LPM trie holds both
// lookup sets' prefixes, each key led by its set's number. A commit writes
// the idle set's prefixes over what that set held before (what the live set
// held before the last switch, or a killed commit's leftovers).
//
// Knowing what the idle set holds is the costly part: reading the trie back
// walks every entry of both sets, a million-prefix set load's most kernel
// time. So the controller keeps a record of what each set holds, written by
// itself after each switch, in the instance's run directory:
//   ipv6-trie.index  the trie's map id, the live-set word and the trie's
//                    memlock when it was written, and each set file's size
//                    and checksum;
//   ipv6-trie.0, .1  each lookup set's entries: keys sorted, values.
// The record is a cache of a read of the trie, trusted only when all of it
// checks out: the same trie (map id), no switch since (the live-set word,
// whose switch count every writer moves on), no entry added or removed since
// (the trie's memlock counts its entries), and the set file whole (size,
// checksum, keys sorted and of that set). Anything else, or none, and the
// trie is read in full as before. A commit removes the index before it
// writes the trie, so that a killed one leaves none. The record guards
// against staleness and writers that do not keep it, not against root
// forging it: root can write the trie itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rule.h"
#include "sluice_abi.h"

namespace sluice {

/// One lookup set's entries as the trie holds them.
struct Trie6Set {
	struct Entry {
		struct sluice_lpm_v6 key;
		uint32_t value; ///< index into values
	};
	std::vector<struct sluice_match_list> values;
	std::vector<Entry> entries; ///< sorted by key bytes, unique
};

/// How the last write() knew what the idle set held, and what it changed.
struct Trie6WriteReport {
	bool from_record = false; ///< the record; else a read of the whole trie
	size_t removed = 0, written = 0;
};

/// Writes the idle set of the trie and keeps its record. One a commit:
/// write() before the switch, switched() after it.
class Trie6Writer {
public:
	/// `fd`: the trie; `record_dir`: the run directory ("" or missing: no
	/// record); `word`: the live-set word (struct sluice_active's set) now.
	Trie6Writer(int fd, std::string record_dir, uint32_t word);

	/// Makes lookup set `set` (the idle one) hold exactly each IPv6 prefix
	/// of `lists.first` with its first list. Throws if the kernel refuses a
	/// change; the live set is never touched.
	void write(uint32_t set, const MatchLists &lists);

	/// After the switch to `word`: records what each set holds now. Never
	/// throws: without a record the next commit reads the trie.
	void switched(uint32_t word) noexcept;

	const Trie6WriteReport &report() const { return report_; }

private:
	int fd_;
	std::string dir_;
	uint32_t word_;
	uint32_t set_ = 0;
	bool wrote_ = false, live_known_ = false, live_file_kept_ = false;
	Trie6Set written_, live_;
	uint64_t live_size_ = 0;
	uint32_t live_crc_ = 0;
	Trie6WriteReport report_;
};

/// After a switch of the rule entries alone (the lookups untouched) from
/// word `before` to `after`: a record good for `before` is made good for
/// `after`. Never throws.
void trie6_rules_switched(int fd, const std::string &record_dir, uint32_t before, uint32_t after) noexcept;

/// Removes the record kept in `run_dir` (detach).
void remove_trie6_record(const std::string &run_dir);

/// What the last Trie6Writer::write of this process did (for tests).
Trie6WriteReport last_trie6_write();

/// The record's file names in `run_dir`: the index, and set `set`'s entries.
std::string trie6_index_path(const std::string &run_dir);
std::string trie6_set_path(const std::string &run_dir, uint32_t set);

} // namespace sluice
