#include "sources4.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "error.h"
#include "maps.h"
#include "sluice_settable.h"

namespace sluice {

SourceTable4::SourceTable4(int fd) : sets_(map_max_entries(fd))
{
	long page = sysconf(_SC_PAGESIZE);
	length_ = (size_t(sets_) * sizeof(struct sluice_set_v4) + page - 1) / page * page;
	void *p = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		throw_errno("cannot map the IPv4 source table", errno);
	sets_ptr_ = static_cast<struct sluice_set_v4 *>(p);
}

SourceTable4::~SourceTable4() { munmap(sets_ptr_, length_); }

void SourceTable4::for_each(
	const std::function<void(uint32_t, const uint8_t *, const struct sluice_source_state &)> &f,
	const std::vector<struct sluice_pending_drops> &pending) const
{
	std::unordered_multimap<uint64_t, const struct sluice_pending_drops *> by_way;
	for (const auto &p : pending)
		if (p.packets && p.set < sets_)
			by_way.emplace(uint64_t(p.set) * SLUICE_SET_WAYS + (p.way & (SLUICE_SET_WAYS - 1)), &p);
	for (uint32_t i = 0; i < sets_; i++) {
		const struct sluice_set_v4 &set = sets_ptr_[i];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = __atomic_load_n(&set.key[w], __ATOMIC_ACQUIRE);
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY)
				continue;
			struct sluice_source_state copy;
			std::memcpy(&copy, const_cast<const struct sluice_source_state *>(&set.way[w]), sizeof(copy));
			uint16_t gen = __atomic_load_n(&set.gen[w], __ATOMIC_ACQUIRE);
			if (__atomic_load_n(&set.key[w], __ATOMIC_ACQUIRE) != key)
				continue; // evicted while being copied
			auto [from, to] = by_way.equal_range(uint64_t(i) * SLUICE_SET_WAYS + w);
			for (auto it = from; it != to; ++it) {
				if (it->second->gen != gen)
					continue; // counted for an earlier bucket of the way
				copy.cnt.dropped_packets += it->second->packets;
				copy.cnt.dropped_bytes += it->second->bytes;
			}
			uint32_t addr = static_cast<uint32_t>(key);
			uint8_t bytes[4];
			std::memcpy(bytes, &addr, 4);
			f(static_cast<uint32_t>(key >> 32), bytes, copy);
		}
	}
}

uint64_t SourceTable4::purge(uint32_t rule_id)
{
	return purge_if([rule_id](uint32_t id) { return id == rule_id; });
}

uint64_t SourceTable4::purge_if(const std::function<bool(uint32_t)> &doomed)
{
	uint64_t purged = 0;
	for (uint32_t i = 0; i < sets_; i++) {
		struct sluice_set_v4 &set = sets_ptr_[i];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = __atomic_load_n(&set.key[w], __ATOMIC_ACQUIRE);
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY || !doomed(static_cast<uint32_t>(key >> 32)))
				continue;
			// Lost only to the program evicting it for a new bucket: gone either way.
			purged += sluice_way_release(&set, w, key);
		}
	}
	return purged;
}

bool SourceTable4::insert(uint32_t rule_id, const uint8_t addr[4], const struct sluice_source_state &state,
			  uint64_t seed)
{
	uint32_t word;
	std::memcpy(&word, addr, 4);
	uint64_t key = sluice_src4_key(rule_id, word);
	uint32_t first, second;
	sluice_src4_sets(key, seed, sets_, &first, &second);
	for (uint32_t idx : {first, second}) {
		struct sluice_set_v4 &set = sets_ptr_[idx];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			if (!sluice_way_claim(&set, w, SLUICE_KEY_EMPTY))
				continue;
			__u64 frozen;
			if (!sluice_way_freeze(&set, w, &frozen)) {
				sluice_way_unclaim(&set, w, SLUICE_KEY_EMPTY);
				continue;
			}
			struct sluice_source_state init = state;
			init.word = 0; // arrival time `now` = 0: ages ago, a full bucket
			sluice_way_install(&set, w, frozen, &init, 1, 0, 0, key);
			return true;
		}
	}
	return false;
}

} // namespace sluice
