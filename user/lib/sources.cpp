#include "sources.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <type_traits>
#include <unordered_map>

#include "error.h"
#include "maps.h"
#include "sluice_settable.h"

namespace sluice {

namespace {

/// The address of way w's bucket: an IPv4 key's low word, an IPv6 set's address line.
template <class Set> void way_address(const Set &set, int w, uint64_t key, uint8_t *out)
{
	if constexpr (SetTraits<Set>::family == 4) {
		uint32_t addr = static_cast<uint32_t>(key);
		std::memcpy(out, &addr, 4);
	} else {
		std::memcpy(out, const_cast<const struct sluice_addr6 *>(&set.addr[w]), 16);
	}
}

} // namespace

template <class Set> SetTable<Set>::SetTable(int fd) : sets_(map_max_entries(fd))
{
	long page = sysconf(_SC_PAGESIZE);
	length_ = (size_t(sets_) * sizeof(Set) + page - 1) / page * page;
	void *p = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		throw_errno("cannot map the IPv" + std::to_string(family) + " source table", errno);
	sets_ptr_ = static_cast<Set *>(p);
}

template <class Set> SetTable<Set>::~SetTable() { munmap(sets_ptr_, length_); }

template <class Set>
void SetTable<Set>::for_each(const std::function<void(uint32_t, const uint8_t *, const Bucket &)> &f,
			     const std::vector<struct sluice_pending_drops> &pending) const
{
	std::unordered_multimap<uint64_t, const struct sluice_pending_drops *> by_way;
	for (const auto &p : pending)
		if (p.packets && p.table == SetTraits<Set>::table && p.set < sets_)
			by_way.emplace(uint64_t(p.set) * SLUICE_SET_WAYS + (p.way & (SLUICE_SET_WAYS - 1)), &p);
	for (uint32_t i = 0; i < sets_; i++) {
		const Set &set = sets_ptr_[i];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = __atomic_load_n(&set.tag.key[w], __ATOMIC_ACQUIRE);
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY)
				continue;
			Bucket copy;
			std::memcpy(&copy, const_cast<const Bucket *>(&set.way[w]), sizeof(copy));
			uint8_t addr[16] = {};
			way_address(set, w, key, addr);
			uint16_t gen = __atomic_load_n(&set.tag.gen[w], __ATOMIC_ACQUIRE);
			if (__atomic_load_n(&set.tag.key[w], __ATOMIC_ACQUIRE) != key)
				continue; // evicted while being copied
			auto [from, to] = by_way.equal_range(uint64_t(i) * SLUICE_SET_WAYS + w);
			for (auto it = from; it != to; ++it) {
				if (it->second->gen != gen)
					continue; // counted for an earlier bucket of the way
				copy.cnt.dropped_packets += it->second->packets;
				copy.cnt.dropped_bytes += it->second->bytes;
			}
			f(static_cast<uint32_t>(key >> 32), addr, copy);
		}
	}
}

template <class Set> uint64_t SetTable<Set>::purge(uint32_t rule_id)
{
	uint64_t purged = 0;
	for (uint32_t i = 0; i < sets_; i++) {
		Set &set = sets_ptr_[i];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = __atomic_load_n(&set.tag.key[w], __ATOMIC_ACQUIRE);
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY || (key >> 32) != rule_id)
				continue;
			// Lost only to the program evicting it for a new bucket: gone either way.
			purged += sluice_way_release(&set.tag, w, key);
		}
	}
	return purged;
}

template <class Set>
bool SetTable<Set>::insert(uint32_t rule_id, const uint8_t addr[4], const struct sluice_source_state &state,
			   uint64_t seed)
	requires std::is_same_v<Set, struct sluice_set_v4>
{
	uint32_t word;
	std::memcpy(&word, addr, 4);
	uint64_t key = sluice_src4_key(rule_id, word);
	uint32_t first, second;
	sluice_src4_sets(key, seed, sets_, &first, &second);
	for (uint32_t idx : {first, second}) {
		struct sluice_set_v4 &set = sets_ptr_[idx];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			if (!sluice_way_claim(&set.tag, w, SLUICE_KEY_EMPTY))
				continue;
			__u64 frozen;
			if (!sluice_way_freeze(&set.tag, w, &set.way[w].word, &frozen)) {
				sluice_way_unclaim(&set.tag, w, SLUICE_KEY_EMPTY);
				continue;
			}
			struct sluice_source_state init = state;
			init.word = 0; // arrival time `now` = 0: ages ago, a full bucket
			sluice_way_install(&set.tag, &set.way[w], w, frozen, &init, 1, 0, key);
			return true;
		}
	}
	return false;
}

template class SetTable<struct sluice_set_v4>;
template class SetTable<struct sluice_set_v6>;
template class SetTable<struct sluice_log_set_v4>;
template class SetTable<struct sluice_log_set_v6>;

} // namespace sluice
