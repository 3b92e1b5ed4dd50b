// SPDX-License-Identifier: GPL-2.0-only
// Names looked up among many (a rule set's 100,000): an open-addressing table
// of positions in the caller's list, which keeps the names. A node-based map
// chases a pointer per entry; this reads one small array and, on a hash
// match, the name.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "fnv.h"

namespace sluice {

class NameIndex {
public:
	static constexpr uint32_t NONE = UINT32_MAX;

	/// Room for `count` names.
	explicit NameIndex(size_t count)
	{
		size_t size = 16;
		while (size < 2 * count)
			size *= 2;
		slots_.assign(size, Slot{0, NONE});
	}

	/// The position of `name`, NONE if absent. name_of(position) gives the
	/// name at a position.
	template <class NameOf> uint32_t find(std::string_view name, NameOf name_of) const
	{
		uint32_t h = hash(name);
		for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
			const Slot &s = slots_[i];
			if (s.pos == NONE)
				return NONE;
			if (s.hash == h && name_of(s.pos) == name)
				return s.pos;
		}
	}

	/// Adds `pos` for `name` unless the name is there: returns the position
	/// it had, or `pos` if it is new.
	template <class NameOf> uint32_t insert(std::string_view name, uint32_t pos, NameOf name_of)
	{
		uint32_t h = hash(name);
		for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
			Slot &s = slots_[i];
			if (s.pos == NONE) {
				s = {h, pos};
				return pos;
			}
			if (s.hash == h && name_of(s.pos) == name)
				return s.pos;
		}
	}

private:
	struct Slot {
		uint32_t hash, pos;
	};
	static uint32_t hash(std::string_view s)
	{
		uint64_t h = Fnv1a64().add(s).value(); // then mixed: names are short
		h ^= h >> 32;
		h *= 0x9e3779b97f4a7c15ULL;
		return static_cast<uint32_t>(h >> 32);
	}

	std::vector<Slot> slots_;
};

} // namespace sluice
