// SPDX-License-Identifier: GPL-2.0-only
#include "sources.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>
#include <unordered_map>

#include "error.h"
#include "maps.h"
#include "sluice_settable.h"

// tests/tsan builds a variant whose scan yields the CPU before it reads a
// way's generation (a preempted controller), where an order that admits a
// torn copy fails within seconds. Nothing in other builds.
#ifdef SLUICE_TEST_READER_PAUSE
#include <sched.h>
#define READER_PAUSE() sched_yield()
#else
#define READER_PAUSE() \
	do {           \
	} while (0)
#endif

namespace sluice {

namespace {

/// The address of way w's bucket: an IPv4 key's low word, an IPv6 set's address line.
template <class Set> void way_address(const Set &set, int w, uint64_t key, uint8_t *out)
{
	if constexpr (SetTraits<Set>::family == 4) {
		uint32_t addr = static_cast<uint32_t>(key);
		std::memcpy(out, &addr, 4);
	} else {
		uint64_t words[2] = {sluice_load_relaxed(&set.addr[w].hi), sluice_load_relaxed(&set.addr[w].lo)};
		std::memcpy(out, words, 16);
	}
}

/// A copy of a bucket that other CPUs may be writing: one relaxed load per
/// word (sluice_settable.h), never a memcpy of shared memory.
template <class Bucket> Bucket copy_bucket(const Bucket &shared)
{
	static_assert(sizeof(Bucket) % sizeof(__u64) == 0 && std::is_trivially_copyable_v<Bucket>);
	__u64 words[sizeof(Bucket) / sizeof(__u64)];
	sluice_words_load(words, reinterpret_cast<const __u64 *>(&shared), sizeof(Bucket) / sizeof(__u64));
	Bucket copy;
	std::memcpy(&copy, words, sizeof(copy));
	return copy;
}

} // namespace

PendingDrops::PendingDrops(std::vector<struct sluice_pending_drops> slots, std::vector<struct sluice_owed> owed)
	: slots_(std::move(slots)), owed_(std::move(owed))
{
	for (size_t i = 0; i < slots_.size(); i++)
		if (slots_[i].packets)
			by_way_.emplace(way_key(slots_[i].table, slots_[i].set, slots_[i].way), i);
	for (size_t i = 0; i < owed_.size(); i++) {
		// The name is a pending-drops slot's first 8 bytes.
		struct sluice_pending_drops name = {};
		std::memcpy(&name, &owed_[i].name, sizeof(owed_[i].name));
		if (owed_[i].packets)
			owed_by_way_.emplace(way_key(name.table, name.set, name.way), i);
	}
}

void PendingDrops::add_to(struct sluice_source_counters &cnt, int table, uint32_t set, int way, uint16_t gen) const
{
	if (table < 0)
		return;
	// The same table, set and way (the key folds them), and not counted
	// for an earlier bucket of the way.
	auto names = [&](const struct sluice_pending_drops &p) {
		return int(p.table) == table && p.set == set && (p.way & (SLUICE_SET_WAYS - 1)) == way && p.gen == gen;
	};
	auto [from, to] = by_way_.equal_range(way_key(table, set, way));
	for (auto it = from; it != to; ++it) {
		const struct sluice_pending_drops &p = slots_[it->second];
		if (names(p)) {
			cnt.dropped_packets += p.packets;
			cnt.dropped_bytes += p.bytes;
		}
	}
	auto [ofrom, oto] = owed_by_way_.equal_range(way_key(table, set, way));
	for (auto it = ofrom; it != oto; ++it) {
		const struct sluice_owed &o = owed_[it->second];
		struct sluice_pending_drops name = {};
		std::memcpy(&name, &o.name, sizeof(o.name));
		if (names(name)) {
			cnt.passed_packets += o.packets;
			cnt.passed_bytes += o.bytes;
		}
	}
}

void PendingDrops::add_to(struct sluice_source_counters &cnt, int table, uint32_t set, int way, uint16_t gen,
			  uint64_t key) const
{
	add_to(cnt, table, set, way, gen);
	auto [from, to] = debit_by_way_.equal_range(way_key(table, set, way));
	for (auto it = from; it != to; ++it) {
		const Debit &d = debits_[it->second];
		if (d.table != table || d.set != set || d.way != way || d.gen != gen || d.key != key)
			continue;
		// The words carry their generation's tag above the count: take
		// the debit from the count alone, and stop at zero (a count the
		// program lost to a race with the reset is not owed twice).
		auto take = [](__u64 &word, uint64_t debit) {
			uint64_t value = sluice_cnt_value(word);
			word = (word & ~SLUICE_CNT_VALUE_MASK) | (value > debit ? value - debit : 0);
		};
		take(cnt.passed_packets, d.cnt.passed_packets);
		take(cnt.passed_bytes, d.cnt.passed_bytes);
		take(cnt.dropped_packets, d.cnt.dropped_packets);
		take(cnt.dropped_bytes, d.cnt.dropped_bytes);
	}
}

void PendingDrops::subtract(const std::vector<Debit> &debits)
{
	debits_ = debits;
	debit_by_way_.clear();
	for (size_t i = 0; i < debits_.size(); i++)
		if (debits_[i].table >= 0)
			debit_by_way_.emplace(way_key(debits_[i].table, debits_[i].set, debits_[i].way), i);
}

template <class Set> SetTable<Set>::SetTable(Set *sets, uint32_t count) : sets_ptr_(sets), sets_(count) {}

template <class Set> SetTable<Set>::SetTable(int fd) : sets_(map_max_entries(fd))
{
	long page = sysconf(_SC_PAGESIZE);
	length_ = (size_t(sets_) * sizeof(Set) + page - 1) / page * page;
	void *p = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		throw_errno("cannot map the IPv" + std::to_string(family) + " source table", errno);
	sets_ptr_ = static_cast<Set *>(p);
}

template <class Set> SetTable<Set>::~SetTable()
{
	if (length_)
		munmap(sets_ptr_, length_);
}

template <class Set>
void SetTable<Set>::for_each(const std::function<void(uint32_t, const uint8_t *, const Bucket &)> &f,
			     const PendingDrops &pending) const
{
	for (uint32_t i = 0; i < sets_; i++) {
		const Set &set = sets_ptr_[i];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = sluice_load_acquire(&set.tag.key[w]);
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY)
				continue;
			// A copy of one bucket: the way held the generation, then
			// the key, before it, and both after it (evicted while
			// being copied: dropped; evicted and made again for the
			// same source: again). The generation comes first: a
			// claimer writes the new one while the key is busy, so a
			// key read after it that is not busy is its publish (or
			// a later one, which the generation's re-read sees).
			uint16_t gen = 0;
			Bucket copy;
			uint8_t addr[16] = {};
			bool held = false;
			for (int attempt = 0; attempt < SLUICE_LOCK_RETRIES && !held; attempt++) {
				READER_PAUSE();
				gen = sluice_load_acquire(&set.tag.gen[w]);
				if (sluice_load_acquire(&set.tag.key[w]) != key)
					break;
				copy = copy_bucket(set.way[w]);
				way_address(set, w, key, addr);
				if (!sluice_way_still(&set.tag, w, key))
					break;
				held = sluice_load_acquire(&set.tag.gen[w]) == gen;
			}
			if (!held)
				continue; // evicted while being copied
			pending.add_to(copy.cnt, SetTraits<Set>::table, i, w, gen, key);
			f(static_cast<uint32_t>(key >> 32), addr, copy);
		}
	}
}

template <class Set>
uint64_t SetTable<Set>::place_of(uint32_t rule_id, const uint8_t *addr, uint64_t seed, uint32_t &first,
				 uint32_t &second) const
{
	if constexpr (family == 4) {
		uint32_t word;
		std::memcpy(&word, addr, 4);
		uint64_t key = sluice_src4_key(rule_id, word);
		sluice_src4_sets(key, seed, sets_, &first, &second);
		return key;
	} else {
		uint64_t hi, lo;
		std::memcpy(&hi, addr, 8);
		std::memcpy(&lo, addr + 8, 8);
		uint64_t h = sluice_src6_hash(rule_id, hi, lo, seed);
		sluice_hash_sets(h, sets_, &first, &second);
		return sluice_src6_key(rule_id, h);
	}
}

template <class Set>
bool SetTable<Set>::holds(const Set &set, int w, uint64_t key, const uint8_t *addr) const
{
	if (sluice_load_acquire(&set.tag.key[w]) != key)
		return false;
	if constexpr (family == 6) {
		uint8_t line[16];
		way_address(set, w, key, line);
		return std::memcmp(line, addr, 16) == 0;
	}
	return true;
}

template <class Set> bool SetTable<Set>::holds_address(const Set &set, int w, const uint8_t *addr) const
{
	if constexpr (family == 6) {
		uint8_t line[16];
		way_address(set, w, SLUICE_KEY_BUSY, line);
		return std::memcmp(line, addr, 16) == 0;
	}
	return true;
}

template <class Set>
std::optional<std::pair<uint32_t, int>> SetTable<Set>::locate(uint32_t rule_id, const uint8_t *addr,
								uint64_t seed, uint64_t &key) const
{
	uint32_t first, second;
	key = place_of(rule_id, addr, seed, first, second);
	for (uint32_t idx : {first, second})
		for (int w = 0; w < SLUICE_SET_WAYS; w++)
			if (holds(sets_ptr_[idx], w, key, addr))
				return std::pair{idx, w};
	return std::nullopt;
}

template <class Set>
std::optional<typename SetTable<Set>::Bucket>
SetTable<Set>::find(uint32_t rule_id, const uint8_t *addr, uint64_t seed,
		    const PendingDrops &pending) const
{
	uint64_t key;
	auto place = locate(rule_id, addr, seed, key);
	if (!place)
		return std::nullopt;
	auto [idx, w] = *place;
	const Set &set = sets_ptr_[idx];
	// A locked algorithm's state is read as the program reads it:
	// between two equal even values of its word. The GCRA form's
	// word is one value, read once with the copy.
	for (int attempt = 0; attempt < SLUICE_LOCK_RETRIES; attempt++) {
		// The generation, then the key (as for_each): a generation
		// read while a claimer writes the way is followed by a busy key.
		uint16_t gen = sluice_load_acquire(&set.tag.gen[w]);
		if (!holds(set, w, key, addr))
			return std::nullopt; // evicted
		bool locked = gen & 1;
		uint64_t before = sluice_load_acquire(&set.way[w].word);
		if (locked && (before & 1))
			continue; // a charger holds the lock
		Bucket copy = copy_bucket(set.way[w]);
		sluice_fence_acquire();
		if (locked && sluice_load_acquire(&set.way[w].word) != before)
			continue;
		if (!holds(set, w, key, addr))
			return std::nullopt; // evicted while being copied
		// Evicted and made again for the same source while being
		// copied: the word and its offset may be of two buckets.
		if (sluice_load_acquire(&set.tag.gen[w]) != gen)
			continue;
		pending.add_to(copy.cnt, SetTraits<Set>::table, idx, w, gen, key);
		return copy;
	}
	throw Error("the bucket's lock stayed held; try again");
}

template <class Set>
std::optional<GrantPlace> SetTable<Set>::grant_place(uint32_t rule_id, const uint8_t *addr,
									    uint64_t seed) const
	requires std::is_same_v<typename SetTraits<Set>::Bucket, struct sluice_source_state>
{
	uint64_t key;
	auto place = locate(rule_id, addr, seed, key);
	if (!place)
		return std::nullopt;
	auto [idx, w] = *place;
	const Set &set = sets_ptr_[idx];
	uint16_t gen = sluice_load_acquire(&set.tag.gen[w]);
	if (gen & 1)
		return std::nullopt; // a locked algorithm's bucket: no arrival time to move
	if (!holds(set, w, key, addr))
		return std::nullopt; // evicted (a generation read before a busy key)
	uint64_t record = sluice_load_relaxed(&set.way[w].algo.gcra.granted);
	sluice_fence_acquire();
	if (!holds(set, w, key, addr) || sluice_load_acquire(&set.tag.gen[w]) != gen)
		return std::nullopt; // evicted meanwhile
	GrantPlace g;
	g.key.want = key;
	g.key.table = static_cast<__u32>(SetTraits<Set>::table);
	if (SetTraits<Set>::table == SLUICE_TABLE_V6)
		std::memcpy(&g.key.addr, addr, sizeof(g.key.addr));
	g.name = sluice_way_name(idx, static_cast<uint32_t>(w), g.key.table, gen);
	g.taken = sluice_grant_taken(record, gen);
	return g;
}

template <class Set>
uint64_t SetTable<Set>::zero_counters(const std::function<bool(uint32_t, const uint8_t *)> &pick,
				     const std::function<void(uint32_t, int, uint16_t, uint64_t)> &zeroed)
{
	uint64_t count = 0;
	for (uint32_t i = 0; i < sets_; i++) {
		Set &set = sets_ptr_[i];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = sluice_load_acquire(&set.tag.key[w]);
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY)
				continue;
			// The generation, then the address and the key: a
			// generation a claimer is writing meets a busy key.
			uint8_t addr[16] = {};
			uint16_t gen = sluice_load_acquire(&set.tag.gen[w]);
			if (sluice_load_acquire(&set.tag.key[w]) != key)
				continue;
			way_address(set, w, key, addr);
			if (!sluice_way_still(&set.tag, w, key) ||
			    sluice_load_acquire(&set.tag.gen[w]) != gen ||
			    !pick(static_cast<uint32_t>(key >> 32), addr))
				continue;
			// The program adds to these words by compare-and-swap or
			// fetch-and-add, checking the tag in the top bits: keep the
			// tag, zero the count; only while the tag is this
			// generation's (the way may hold another bucket by now).
			auto &cnt = set.way[w].cnt;
			uint64_t tag = sluice_gen_tag(gen);
			for (__u64 *word : {&cnt.passed_packets, &cnt.passed_bytes, &cnt.dropped_packets,
					    &cnt.dropped_bytes}) {
				uint64_t v = sluice_load_relaxed(word), old;
				while ((v & ~SLUICE_CNT_VALUE_MASK) == tag &&
				       (old = sluice_cas(word, v, v & ~SLUICE_CNT_VALUE_MASK)) != v)
					v = old;
			}
			count++;
			zeroed(i, w, gen, key);
		}
	}
	return count;
}

template <class Set>
bool SetTable<Set>::remake_full(uint32_t idx, int w, uint64_t key, const uint8_t *addr, uint64_t now_ticks,
				const PendingDrops &pending)
	requires std::is_same_v<typename SetTraits<Set>::Bucket, struct sluice_source_state>
{
	Set &set = sets_ptr_[idx];
	// The claim: chargers of the bucket now look again (and wait for the
	// publish); the freeze: no compare-and-swap begun on it lands. Only the
	// claimer writes a bucket's state, so the offset keeps one writer at a
	// time: the program, or the controller while the way is busy.
	if (!sluice_way_claim(&set.tag, w, key))
		return false;
	__u64 frozen = 0;
	uint16_t old_gen = sluice_load_relaxed(&set.tag.gen[w]);
	if ((old_gen & 1) || !holds_address(set, w, addr) ||
	    !sluice_way_freeze(&set.tag, w, &set.way[w].word, &frozen)) {
		sluice_way_unclaim(&set.tag, w, key);
		return false;
	}
	uint64_t now_ns = now_ticks >> SLUICE_TICK_SHIFT;
	uint64_t tag = sluice_way_begin(&set.tag, w, 0, now_ns), old_tag = sluice_gen_tag(old_gen);
	// Full: its arrival time now, as a new bucket's (sluice_way_install).
	union sluice_algo_state algo = {};
	algo.gcra.off = frozen + 1 - sluice_ns_to_ticks(now_ns);
	sluice_words_store(reinterpret_cast<__u64 *>(&set.way[w].algo), reinterpret_cast<const __u64 *>(&algo),
			   sizeof(algo) / sizeof(__u64));
	// The counters carried, with what CPUs hold for the old generation
	// (which its slots then no longer name), retagged by compare-and-swap: a
	// count the program adds meanwhile lands before (and is carried) or
	// finds the new tag and is dropped with the old bucket, as at eviction.
	struct sluice_source_counters extra = {};
	pending.add_to(extra, SetTraits<Set>::table, idx, w, old_gen, key);
	auto &cnt = set.way[w].cnt;
	std::pair<__u64 *, uint64_t> words[] = {{&cnt.passed_packets, extra.passed_packets},
						{&cnt.passed_bytes, extra.passed_bytes},
						{&cnt.dropped_packets, extra.dropped_packets},
						{&cnt.dropped_bytes, extra.dropped_bytes}};
	for (auto [word, more] : words) {
		uint64_t v = sluice_load_relaxed(word);
		for (;;) {
			uint64_t count = ((v & ~SLUICE_CNT_VALUE_MASK) == old_tag ? sluice_cnt_value(v) : 0) + more;
			uint64_t old = sluice_cas(word, v, (count & SLUICE_CNT_VALUE_MASK) | tag);
			if (old == v)
				break;
			v = old;
		}
	}
	sluice_way_publish(&set.tag, w, &set.way[w].word, frozen + 1, key);
	return true;
}

template <class Set>
bool SetTable<Set>::refill(uint32_t rule_id, const uint8_t *addr, uint64_t seed, const struct sluice_rule &rule,
			   uint64_t now_ticks, const PendingDrops &pending)
{
	uint64_t key;
	auto place = locate(rule_id, addr, seed, key);
	if (!place)
		return false;
	auto [idx, w] = *place;
	Set &set = sets_ptr_[idx];
	uint16_t gen = sluice_load_acquire(&set.tag.gen[w]);
	if constexpr (std::is_same_v<Bucket, struct sluice_source_state>) {
		if (!(gen & 1)) // the GCRA form: made again, full
			return remake_full(idx, w, key, addr, now_ticks, pending);
	}
	// The sequence lock, taken as the program takes it: from an even
	// value to the next odd one by compare-and-swap, released two above.
	for (int attempt = 0; attempt < 1000000; attempt++) {
		uint64_t s = sluice_load_acquire(&set.way[w].word);
		if (!sluice_word_lock(&set.way[w].word, s))
			continue;
		// Evicted before the lock was taken: the way is another bucket's now.
		bool ours = holds(set, w, key, addr) && sluice_load_acquire(&set.tag.gen[w]) == gen;
		if (ours) {
			// Relaxed stores: optimistic readers copy the state as it is written.
			if constexpr (std::is_same_v<Bucket, struct sluice_log_state>) {
				for (__u64 &slot : set.way[w].ring)
					sluice_store_relaxed(&slot, 0);
				sluice_store_relaxed(&set.way[w].head, 0);
			} else {
				union sluice_algo_state &a = set.way[w].algo;
				switch (rule.algo) {
				case SLUICE_ALGO_FIXED_WINDOW:
					sluice_store_relaxed(&a.fixed.count, 0);
					break;
				case SLUICE_ALGO_SLIDING_WINDOW:
					sluice_store_relaxed(&a.sliding.cur, 0);
					sluice_store_relaxed(&a.sliding.prev, 0);
					break;
				default: // a token bucket with warm-up: full and cold, as a new one (sluice_tb_init)
					sluice_store_relaxed(&a.tb.tokens, rule.bucket.capacity);
					sluice_store_relaxed(&a.tb.cold, rule.bucket.warmup);
					break;
				}
			}
		}
		sluice_word_unlock(&set.way[w].word, s);
		return ours;
	}
	throw Error("the bucket's lock stayed held; try again");
}

template <class Set> uint64_t SetTable<Set>::purge(uint32_t rule_id)
{
	return purge_if([rule_id](uint32_t id) { return id == rule_id; });
}

template <class Set> uint64_t SetTable<Set>::purge_if(const std::function<bool(uint32_t)> &doomed)
{
	uint64_t purged = 0;
	for (uint32_t i = 0; i < sets_; i++) {
		Set &set = sets_ptr_[i];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = sluice_load_acquire(&set.tag.key[w]);
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY || !doomed(static_cast<uint32_t>(key >> 32)))
				continue;
			// Lost only to the program evicting it for a new bucket: gone either way.
			purged += sluice_way_release(&set.tag, w, key);
		}
	}
	return purged;
}

template <class Set>
template <class Install>
bool SetTable<Set>::claim_empty_way(uint32_t first, uint32_t second, Install install)
{
	for (uint32_t idx : {first, second}) {
		Set &set = sets_ptr_[idx];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			if (!sluice_way_claim(&set.tag, w, SLUICE_KEY_EMPTY))
				continue;
			__u64 frozen;
			if (!sluice_way_freeze(&set.tag, w, &set.way[w].word, &frozen)) {
				sluice_way_unclaim(&set.tag, w, SLUICE_KEY_EMPTY);
				continue;
			}
			install(set, w, frozen);
			return true;
		}
	}
	return false;
}

template <class Set>
bool SetTable<Set>::insert(uint32_t rule_id, const uint8_t addr[4], const struct sluice_source_state &state,
			   uint64_t seed)
	requires std::is_same_v<Set, struct sluice_set_v4>
{
	uint32_t first, second;
	uint64_t key = place_of(rule_id, addr, seed, first, second);
	return claim_empty_way(first, second, [&](Set &set, int w, __u64 frozen) {
		struct sluice_source_state init = state;
		init.word = 0; // arrival time `now` = 0: ages ago, a full bucket
		sluice_way_install(&set.tag, &set.way[w], w, frozen, &init, 1, 0, key);
	});
}

template <class Set>
bool SetTable<Set>::place(uint32_t rule_id, const uint8_t *addr, const Bucket &bucket, bool gcra, uint64_t seed,
			  uint64_t now_ns)
{
	uint32_t first, second;
	uint64_t key = place_of(rule_id, addr, seed, first, second);
	return claim_empty_way(first, second, [&](Set &set, int w, __u64 frozen) {
		if constexpr (family == 6) {
			struct sluice_addr6 line;
			std::memcpy(&line, addr, 16);
			sluice_way_set_addr(set.addr, w, &line);
		}
		uint64_t tag = sluice_way_begin(&set.tag, w, !gcra, now_ns);
		Bucket b = bucket;
		uint64_t word = frozen + 1; // even: an unlocked lock
		uint32_t keep = sluice_stamp(now_ns);
		if constexpr (std::is_same_v<Bucket, struct sluice_source_state>) {
			if (gcra) {
				// The arrival time is word - off: lift both above the way's past.
				uint64_t tat = b.word - b.algo.gcra.off;
				word = std::max<uint64_t>(b.word, frozen + 1);
				b.algo.gcra.off = word - tat;
				uint32_t full = sluice_tick_stamp(tat);
				if (static_cast<int32_t>(full - keep) > 0)
					keep = full; // in debt: kept as long as a fresh bucket's would be
			}
		}
		b.cnt.passed_packets = sluice_cnt_value(b.cnt.passed_packets) | tag;
		b.cnt.passed_bytes = sluice_cnt_value(b.cnt.passed_bytes) | tag;
		b.cnt.dropped_packets = sluice_cnt_value(b.cnt.dropped_packets) | tag;
		b.cnt.dropped_bytes = sluice_cnt_value(b.cnt.dropped_bytes) | tag;
		// Everything after the word, which stays frozen until published.
		static_assert(offsetof(Bucket, word) == 0 && sizeof(Bucket) % sizeof(__u64) == 0);
		sluice_words_store(reinterpret_cast<__u64 *>(&set.way[w]) + 1, reinterpret_cast<const __u64 *>(&b) + 1,
				   sizeof(b) / sizeof(__u64) - 1);
		sluice_store_relaxed(&set.tag.keep[w], keep);
		sluice_store_relaxed(&set.tag.born[w], SLUICE_BORN_SETTLED);
		sluice_way_publish(&set.tag, w, &set.way[w].word, word, key);
	});
}

template class SetTable<struct sluice_set_v4>;
template class SetTable<struct sluice_set_v6>;
template class SetTable<struct sluice_log_set_v4>;
template class SetTable<struct sluice_log_set_v6>;

} // namespace sluice
