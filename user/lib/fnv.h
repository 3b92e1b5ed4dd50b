// SPDX-License-Identifier: GPL-2.0-only
// FNV-1a, the one byte hash of the controller: the stored layout's hash
// (layout_hash), the rule-set digest hosts compare (rule_set_digest), a run
// directory's name (run_dir_for) and the rule-name index. Each value is kept
// somewhere (pinned, compared across hosts, a path), so the function is fixed:
// http://www.isthe.com/chongo/tech/comp/fnv/ (offset basis, prime, xor then
// multiply, byte by byte).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice {

/// FNV-1a of `Word` bits, fed a byte at a time: add() any number of times,
/// then value().
template <class Word, Word Basis, Word Prime> class BasicFnv1a {
public:
	BasicFnv1a &add(const void *data, size_t n)
	{
		const auto *p = static_cast<const unsigned char *>(data);
		for (size_t i = 0; i < n; i++)
			h_ = static_cast<Word>((h_ ^ p[i]) * Prime);
		return *this;
	}
	BasicFnv1a &add(std::string_view s) { return add(s.data(), s.size()); }
	Word value() const { return h_; }

private:
	Word h_ = Basis;
};

using Fnv1a64 = BasicFnv1a<uint64_t, 0xcbf29ce484222325ULL, 0x100000001b3ULL>;
using Fnv1a32 = BasicFnv1a<uint32_t, 0x811c9dc5u, 0x01000193u>;

} // namespace sluice
