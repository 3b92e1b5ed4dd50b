// SPDX-License-Identifier: GPL-2.0-only
// The set tables' protocol (include/sluice_settable.h) under ThreadSanitizer:
// threads play the XDP program (look up, charge, choose a victim, claim,
// freeze, install, publish) on in-memory IPv4 and IPv6 source tables while
// others play the controller through SetTable (scan, find, reset, refill,
// read a grant's place, purge, insert, place). Any TSan report ends the run (halt_on_error);
// at every step and at the end the protocol's promises are checked:
//  - no torn key: a key read is empty, busy, or one of the keys made, in one
//    of its two sets; an IPv6 way's address line hashes to its key;
//  - no lost publication: a bucket reached by its key carries the
//    certificate its maker wrote before publishing it (a plain write, which
//    TSan checks is ordered before the read: the publish's release and the
//    lookup's acquire), and when the threads stop no way is left busy;
//  - consistent copies: a locked bucket's state read between two equal even
//    words is one writer's (cur == prev, its window its key's); the four
//    counter words carry one generation's tag; a way's word only grows;
//  - counts conserved: every count a charger added (and saw land on its
//    bucket) is in its bucket's counters, exactly, unless a reset zeroed it
//    (checked at checkpoints, every 100 ms, with every thread stopped);
//  - one writer of the GCRA offset: a published bucket's offset never
//    changes (only its claimer writes it, before publishing; the cluster
//    sync's grants are the program's to apply), checked at checkpoints.
// Usage: settable_stress [SECONDS [SETS [ADDRESSES]]] (default 60, 16, 16).
// Prints ops/s per role.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <time.h>

#include "sources.h"
#include "sluice_settable.h"

extern "C" const char *__tsan_default_options()
{
	return "halt_on_error=1:exitcode=66:second_deadlock_stack=1";
}

namespace {

using sluice::SetTable;

constexpr uint32_t kMaxSets = 16;
// Sets a table and sources a rule: by default 64 ways a table for 6 * 16
// sources, constant eviction; fewer (settable_stress SECONDS SETS ADDRS)
// bring a source back to the same way more often.
uint32_t g_sets = kMaxSets;
constexpr uint32_t kRules = 6; // odd ids: the GCRA form; even: a locked (sliding-window) state
uint32_t g_addrs = 16;
constexpr uint64_t kSeed = 0x5eed5eed12345678ULL;
constexpr uint64_t kCost = 1000; // ticks a GCRA charge moves the word
constexpr size_t kCerts = 1 << 24;

std::atomic<bool> g_stop{false};
// Checkpoints: every thread stops at the next round's end, the tables are
// checked as at the end, and they go on.
std::atomic<bool> g_pause{false};
std::atomic<int> g_paused{0};

// Called by every thread between rounds: waits out a checkpoint.
void checkpoint_wait()
{
	if (!g_pause.load())
		return;
	g_paused.fetch_add(1);
	while (g_pause.load())
		std::this_thread::yield();
	g_paused.fetch_sub(1);
}
std::atomic<uint64_t> g_failures{0};

#define CHECK(cond, ...)                                                                                       \
	do {                                                                                                   \
		if (!(cond)) {                                                                                 \
			if (g_failures.fetch_add(1, std::memory_order_relaxed) < 20) {                        \
				std::fprintf(stderr, "settable_stress: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
				std::fprintf(stderr, __VA_ARGS__);                                             \
				std::fputc('\n', stderr);                                                      \
			}                                                                                      \
		}                                                                                              \
	} while (0)

uint64_t now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

// The address of source a (1..g_addrs): IPv4, and the IPv6 line.
uint32_t addr4(uint32_t a) { return 0x0a000000u + a; }
struct sluice_addr6 addr6(uint32_t a)
{
	return {0x20010db8ULL << 32, 0x1000ULL + a};
}

bool is_gcra(uint32_t rule) { return rule & 1; }
uint64_t window_of(uint64_t key) { return key ^ 0x5a5a5a5a5a5a5a5aULL; }

// Certificates: written (plain) by a bucket's maker before it publishes the
// bucket, once each, and read (plain) by whoever reaches the bucket by its
// key. The index travels in the bucket's dropped_bytes counter (nobody adds
// to it here; a reset zeroes it to "none").
uint64_t *g_certs;
std::atomic<uint64_t> g_next_cert{1};

// Per way of each table: the counts added to its current bucket, as
// (gen << 48 | count), and the newest generation an add of uncertain
// destination may have landed on (gen << 48 | 1 << 47), and the generation a
// reset zeroed.
struct WayBook {
	std::atomic<uint64_t> tally{0};
	std::atomic<uint64_t> taint{0};
	std::atomic<uint64_t> zeroed{0};
	/// The generation and offset of the GCRA bucket a program thread made
	/// last: written by the way's claimer before it publishes (the claim
	/// makes it the only writer), read at checkpoints.
	uint64_t made_gen = 0, made_off = 0;
};
WayBook g_book[2][kMaxSets * SLUICE_SET_WAYS];

// Whether generation a is newer than b (15-bit sequence numbers, gen >> 1).
bool newer(uint16_t a, uint16_t b)
{
	uint16_t d = ((a >> 1) - (b >> 1)) & 0x7fff;
	return d != 0 && d < 0x4000;
}

void tally_add(int table, int way, uint16_t gen, uint64_t n)
{
	std::atomic<uint64_t> &t = g_book[table][way].tally;
	uint64_t v = t.load(std::memory_order_relaxed);
	for (;;) {
		uint16_t have = uint16_t(v >> 48);
		uint64_t next;
		if (v && have == gen)
			next = v + n;
		else if (!v || newer(gen, have))
			next = (uint64_t(gen) << 48) | (1 + n); // a bucket starts with one pass
		else
			return; // its bucket was replaced: its counts went with it
		if (t.compare_exchange_weak(v, next, std::memory_order_relaxed))
			return;
	}
}

void taint(int table, int way, uint16_t gen)
{
	std::atomic<uint64_t> &t = g_book[table][way].taint;
	uint64_t v = t.load(std::memory_order_relaxed);
	while (!v || newer(gen, uint16_t(v >> 48)))
		if (t.compare_exchange_weak(v, (uint64_t(gen) << 48) | 1, std::memory_order_relaxed))
			return;
}

template <class Set> struct Table {
	static constexpr int family = sluice::SetTraits<Set>::family;
	static constexpr int index = family == 4 ? 0 : 1;
	std::vector<Set> sets = std::vector<Set>(g_sets);
	SetTable<Set> table{sets.data(), g_sets};

	uint64_t key_of(uint32_t rule, uint32_t a, uint32_t &first, uint32_t &second) const
	{
		if constexpr (family == 4) {
			uint64_t key = sluice_src4_key(rule, addr4(a));
			sluice_src4_sets(key, kSeed, g_sets, &first, &second);
			return key;
		} else {
			struct sluice_addr6 ad = addr6(a);
			uint64_t h = sluice_src6_hash(rule, ad.hi, ad.lo, kSeed);
			sluice_hash_sets(h, g_sets, &first, &second);
			return sluice_src6_key(rule, h);
		}
	}
	void addr_bytes(uint32_t a, uint8_t *out) const
	{
		if constexpr (family == 4) {
			uint32_t w = addr4(a);
			std::memcpy(out, &w, 4);
		} else {
			struct sluice_addr6 ad = addr6(a);
			std::memcpy(out, &ad, 16);
		}
	}
	// Whether way w of set s holds source a's line (IPv6), read relaxed.
	bool line_holds(Set &s, int w, uint32_t a)
	{
		if constexpr (family == 6) {
			struct sluice_addr6 ad = addr6(a);
			return sluice_load_relaxed(&s.addr[w].hi) == ad.hi && sluice_load_relaxed(&s.addr[w].lo) == ad.lo;
		}
		return true;
	}
	// A key read anywhere: empty, busy, or one made, in one of its sets.
	void check_key(uint64_t key, uint32_t set)
	{
		if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY)
			return;
		uint32_t rule = uint32_t(key >> 32);
		CHECK(rule >= 1 && rule <= kRules, "IPv%d set %u: key %#" PRIx64 " names no rule", family, set, key);
		if constexpr (family == 4) {
			uint32_t a = uint32_t(key) - addr4(0);
			CHECK(a >= 1 && a <= g_addrs, "IPv4 set %u: key %#" PRIx64 " names no source", set, key);
		}
	}
};

Table<struct sluice_set_v4> *g_t4;
Table<struct sluice_set_v6> *g_t6;

// Reads the certificate of a bucket reached by `key`, whose dropped_bytes read `idx`.
void check_cert(uint64_t idx, uint64_t key, const char *how)
{
	idx = sluice_cnt_value(idx);
	if (idx == 0 || idx >= kCerts)
		return;
	CHECK(g_certs[idx] == key, "%s: certificate %" PRIu64 " says %#" PRIx64 ", the bucket's key is %#" PRIx64, how,
	      idx, g_certs[idx], key);
}

struct Counts {
	uint64_t charges = 0, inserts = 0, reads = 0, writes = 0;
};

// The program's side: one CPU.
template <class Set> struct DataPlane {
	Table<Set> &tb;
	std::mt19937_64 rng;
	Counts &n;

	int lookup(uint64_t key, uint32_t a, const uint32_t sets[2], uint32_t &set_out, bool &busy)
	{
		for (int i = 0; i < 2; i++) {
			Set &s = tb.sets[sets[i]];
			for (int w = 0; w < SLUICE_SET_WAYS; w++) {
				uint64_t k = sluice_load_acquire(&s.tag.key[w]);
				tb.check_key(k, sets[i]);
				if (k == key && tb.line_holds(s, w, a)) {
					set_out = sets[i];
					return w;
				}
				if (k == SLUICE_KEY_BUSY)
					busy = true;
			}
		}
		return -1;
	}

	void count(Set &s, uint32_t set, int w, uint64_t key, uint16_t g)
	{
		int way = int(set) * SLUICE_SET_WAYS + w;
		if (!sluice_cnt_add(&s.way[w].cnt.passed_packets, sluice_gen_tag(g), 1, 1 << 20, 0))
			return; // evicted: its counts went with it
		// Landed on generation g's bucket if the way still holds it.
		// Else on g's (gone: its counts went with it), or on a later
		// bucket whose tag (gen >> 1, 8 bits) is g's: possible only if
		// 256 buckets came in between.
		bool still = sluice_way_still(&s.tag, w, key);
		uint16_t now_gen = sluice_load_acquire(&s.tag.gen[w]);
		if (still && now_gen == g)
			tally_add(Table<Set>::index, way, g, 1);
		else if ((((now_gen >> 1) - (g >> 1)) & 0x7fff) >= 256)
			taint(Table<Set>::index, way, now_gen);
	}

	void charge(Set &s, uint32_t set, int w, uint64_t key, uint64_t now)
	{
		__u64 *word = &s.way[w].word;
		for (int attempt = 0; attempt < SLUICE_LOCK_RETRIES; attempt++) {
			// The generation, then the key: a generation a claimer is
			// writing meets a busy key (docs/design/source-table.md).
			uint16_t g = sluice_load_acquire(&s.tag.gen[w]);
			if (sluice_load_acquire(&s.tag.key[w]) != key)
				return;
			uint64_t wv = sluice_load_acquire(word);
			if (!(g & 1)) { // the GCRA form, as charge_gcra
				uint64_t off = sluice_load_relaxed(&s.way[w].algo.gcra.off);
				uint64_t idx = sluice_load_relaxed(&s.way[w].cnt.dropped_bytes);
				if (!sluice_way_still(&s.tag, w, key))
					return;
				if (sluice_load_acquire(&s.tag.gen[w]) != g)
					continue;
				check_cert(idx, key, "charge");
				if (sluice_cas(word, wv, wv + kCost) != wv)
					continue;
				count(s, set, w, key, g);
				sluice_way_touch(&s.tag, w, key, now, sluice_tick_stamp(wv + kCost - off));
				return;
			}
			// A locked state, as locked_attempt: decided on a copy read
			// between two equal even words, written back under the lock.
			if (wv & 1)
				continue;
			union sluice_algo_state copy;
			sluice_words_load(reinterpret_cast<__u64 *>(&copy),
					  reinterpret_cast<const __u64 *>(&s.way[w].algo), 3);
			uint64_t idx = sluice_load_relaxed(&s.way[w].cnt.dropped_bytes);
			if (!sluice_way_still(&s.tag, w, key))
				return;
			if (sluice_load_acquire(word) != wv || sluice_load_acquire(&s.tag.gen[w]) != g)
				continue;
			check_cert(idx, key, "charge");
			CHECK(copy.sliding.cur == copy.sliding.prev && copy.sliding.window == window_of(key),
			      "IPv%d set %u way %d: a torn locked state (cur %" PRIu64 ", prev %" PRIu64 ")",
			      Table<Set>::family, set, w, uint64_t(copy.sliding.cur), uint64_t(copy.sliding.prev));
			if (!sluice_word_lock(word, wv))
				continue;
			if (!sluice_way_still(&s.tag, w, key)) {
				sluice_word_unlock(word, wv);
				return;
			}
			sluice_store_relaxed(&s.way[w].algo.sliding.cur, copy.sliding.cur + 1);
			sluice_store_relaxed(&s.way[w].algo.sliding.prev, copy.sliding.cur + 1);
			sluice_word_unlock(word, wv);
			count(s, set, w, key, g);
			sluice_way_touch(&s.tag, w, key, now, sluice_stamp(now));
			return;
		}
	}

	// A new bucket: the victim among both sets (empty first, else the lowest
	// rank), claimed, frozen, written and published.
	void insert(uint64_t key, uint32_t rule, uint32_t a, const uint32_t sets[2], uint64_t now)
	{
		int best_set = -1, best_w = 0;
		uint64_t best_key = 0;
		int32_t best_rank = 0;
		for (int i = 0; i < 2 && !(best_set >= 0 && best_key == SLUICE_KEY_EMPTY); i++) {
			Set &s = tb.sets[sets[i]];
			for (int w = 0; w < SLUICE_SET_WAYS; w++) {
				uint64_t k = sluice_load_acquire(&s.tag.key[w]);
				if (k == SLUICE_KEY_BUSY)
					continue;
				int32_t rank = sluice_way_rank(&s.tag, w, sluice_stamp(now));
				if (best_set < 0 || k == SLUICE_KEY_EMPTY || rank < best_rank) {
					best_set = int(sets[i]);
					best_w = w;
					best_key = k;
					best_rank = rank;
					if (k == SLUICE_KEY_EMPTY)
						break;
				}
			}
		}
		if (best_set < 0)
			return;
		Set &s = tb.sets[best_set];
		int w = best_w;
		if (!sluice_way_claim(&s.tag, w, best_key))
			return;
		__u64 frozen;
		if (!sluice_way_freeze(&s.tag, w, &s.way[w].word, &frozen)) {
			sluice_way_unclaim(&s.tag, w, best_key);
			return;
		}
		uint64_t idx = g_next_cert.fetch_add(1, std::memory_order_relaxed);
		if (idx < kCerts)
			g_certs[idx] = key; // plain: the publish orders it before every reader's
		else
			idx = 0;
		if constexpr (Table<Set>::family == 6) {
			struct sluice_addr6 ad = addr6(a);
			sluice_way_set_addr(s.addr, w, &ad);
		}
		struct sluice_source_state init = {};
		bool gcra = is_gcra(rule);
		if (!gcra)
			init.algo.sliding = {window_of(key), 0, 0};
		init.cnt.passed_packets = 1;
		init.cnt.dropped_bytes = idx;
		if (gcra) {
			// What sluice_way_install writes: the generation after the
			// way's, and the offset that puts the arrival time at now.
			WayBook &book = g_book[Table<Set>::index][uint32_t(best_set) * SLUICE_SET_WAYS + uint32_t(w)];
			book.made_gen = uint64_t(uint16_t(((sluice_load_relaxed(&s.tag.gen[w]) >> 1) + 1) << 1)) | 1ULL << 32;
			book.made_off = frozen + 1 - sluice_ns_to_ticks(now);
		}
		sluice_way_install(&s.tag, &s.way[w], w, frozen, &init, gcra, now, key);
		n.inserts++;
	}

	void step()
	{
		uint32_t rule = 1 + uint32_t(rng() % kRules), a = 1 + uint32_t(rng() % g_addrs);
		uint32_t sets[2];
		uint64_t key = tb.key_of(rule, a, sets[0], sets[1]);
		for (int attempt = 0; attempt < 8; attempt++) {
			uint64_t now = now_ns();
			uint32_t set = 0;
			bool busy = false;
			int w = lookup(key, a, sets, set, busy);
			if (w >= 0) {
				charge(tb.sets[set], set, w, key, now);
				n.charges++;
				return;
			}
			if (busy) {
				std::this_thread::yield(); // another CPU is writing a way: maybe this bucket
				continue;
			}
			insert(key, rule, a, sets, now);
			return;
		}
	}
};

void data_plane(unsigned seed, Counts &n)
{
	DataPlane<struct sluice_set_v4> d4{*g_t4, std::mt19937_64(seed), n};
	DataPlane<struct sluice_set_v6> d6{*g_t6, std::mt19937_64(seed ^ 0x6666), n};
	while (!g_stop.load(std::memory_order_relaxed)) {
		checkpoint_wait();
		for (int i = 0; i < 64; i++) {
			d4.step();
			d6.step();
		}
	}
}

// The controller's readers: scan (for_each) and find.
template <class Set> void check_bucket(Table<Set> &tb, uint32_t rule, const uint8_t *addr,
				       const struct sluice_source_state &b, const char *how)
{
	uint64_t tag = b.cnt.passed_packets & ~SLUICE_CNT_VALUE_MASK;
	CHECK((b.cnt.passed_bytes & ~SLUICE_CNT_VALUE_MASK) == tag &&
		      (b.cnt.dropped_packets & ~SLUICE_CNT_VALUE_MASK) == tag &&
		      (b.cnt.dropped_bytes & ~SLUICE_CNT_VALUE_MASK) == tag,
	      "IPv%d %s: rule %u: counters of two generations", Table<Set>::family, how, rule);
	uint64_t key;
	if constexpr (Table<Set>::family == 4) {
		uint32_t w;
		std::memcpy(&w, addr, 4);
		key = sluice_src4_key(rule, w);
	} else {
		uint64_t hi, lo;
		std::memcpy(&hi, addr, 8);
		std::memcpy(&lo, addr + 8, 8);
		key = sluice_src6_key(rule, sluice_src6_hash(rule, hi, lo, kSeed));
	}
	check_cert(b.cnt.dropped_bytes, key, how);
	(void)tb;
}

template <class Set> void read_table(Table<Set> &tb, std::mt19937_64 &rng, std::vector<uint64_t> &last_word, Counts &n)
{
	tb.table.for_each([&](uint32_t rule, const uint8_t *addr, const struct sluice_source_state &b) {
		CHECK(rule >= 1 && rule <= kRules, "IPv%d scan: rule %u", Table<Set>::family, rule);
		check_bucket(tb, rule, addr, b, "scan");
	});
	n.reads++;
	for (int i = 0; i < 32; i++) {
		uint32_t rule = 1 + uint32_t(rng() % kRules), a = 1 + uint32_t(rng() % g_addrs), first, second;
		uint8_t addr[16] = {};
		tb.addr_bytes(a, addr);
		uint64_t key = tb.key_of(rule, a, first, second);
		std::optional<struct sluice_source_state> b;
		try {
			b = tb.table.find(rule, addr, kSeed);
		} catch (const std::exception &) {
			continue; // the lock stayed held: the caller tries again
		}
		n.reads++;
		if (!b)
			continue;
		check_bucket(tb, rule, addr, *b, "find");
		if (!is_gcra(rule))
			CHECK(b->algo.sliding.cur == b->algo.sliding.prev && b->algo.sliding.window == window_of(key),
			      "IPv%d find: rule %u: a torn locked state (cur %" PRIu64 ", prev %" PRIu64 ")",
			      Table<Set>::family, rule, uint64_t(b->algo.sliding.cur), uint64_t(b->algo.sliding.prev));
		(void)first;
		(void)second;
	}
	// A way's word only grows (read here word by word, in order).
	for (uint32_t s = 0; s < g_sets; s++)
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t v = sluice_load_acquire(&tb.sets[s].way[w].word);
			uint64_t &last = last_word[s * SLUICE_SET_WAYS + w];
			CHECK(v >= last, "IPv%d set %u way %d: the word went back from %" PRIu64 " to %" PRIu64,
			      Table<Set>::family, s, w, last, v);
			last = v;
			tb.check_key(sluice_load_acquire(&tb.sets[s].tag.key[w]), s);
		}
}

void controller_reader(unsigned seed, Counts &n)
{
	std::mt19937_64 rng(seed);
	std::vector<uint64_t> last4(g_sets * SLUICE_SET_WAYS), last6(g_sets * SLUICE_SET_WAYS);
	while (!g_stop.load(std::memory_order_relaxed)) {
		checkpoint_wait();
		read_table(*g_t4, rng, last4, n);
		read_table(*g_t6, rng, last6, n);
	}
}

// The controller's writers: reset, refill (release), purge (remove), insert and
// place; and the cluster sync's read of a grant's place (it writes no bucket word).
template <class Set> void write_table(Table<Set> &tb, std::mt19937_64 &rng, Counts &n)
{
	uint32_t rule = 1 + uint32_t(rng() % kRules), a = 1 + uint32_t(rng() % g_addrs), first, second;
	uint8_t addr[16] = {};
	tb.addr_bytes(a, addr);
	uint64_t key = tb.key_of(rule, a, first, second);
	uint64_t now = now_ns();
	struct sluice_rule r = {};
	r.algo = SLUICE_ALGO_SLIDING_WINDOW;
	switch (rng() % 16) {
	case 0: case 1: case 2: case 3:
		tb.table.zero_counters(
			[&](uint32_t id, const uint8_t *) { return id == rule; },
			[&](uint32_t set, int w, uint16_t gen, uint64_t) {
				g_book[Table<Set>::index][set * SLUICE_SET_WAYS + w].zeroed.store(
					(uint64_t(gen) << 48) | 1, std::memory_order_relaxed);
			});
		break;
	case 4: case 5: case 6: case 7:
		try {
			if (tb.table.refill(rule, addr, kSeed, r, sluice_ns_to_ticks(now)) && is_gcra(rule)) {
				// Made again with its counts carried (a new
				// generation, not one pass): not checked exactly.
				if (auto g = tb.table.grant_place(rule, addr, kSeed))
					taint(Table<Set>::index,
					      int(uint32_t(g->name) * SLUICE_SET_WAYS + ((g->name >> 32) & 0xff)),
					      uint16_t(g->name >> 48));
			}
		} catch (const std::exception &) {
		}
		break;
	case 8: case 9: case 10:
		if (auto g = tb.table.grant_place(rule, addr, kSeed))
			CHECK(g->key.want == key && (g->name >> 48) % 2 == 0,
			      "IPv%d: a grant's place names another bucket", Table<Set>::family);
		break;
	case 11:
		tb.table.purge(rule);
		break;
	default: {
		struct sluice_source_state b = {};
		b.cnt.passed_packets = 1;
		if (!is_gcra(rule)) {
			b.algo.sliding = {window_of(key), 0, 0};
		} else {
			b.word = sluice_ns_to_ticks(now) + 4096;
			b.algo.gcra.off = 4096;
		}
		if constexpr (Table<Set>::family == 4) {
			if (is_gcra(rule) && (rng() & 1)) {
				tb.table.insert(rule, addr, b, kSeed);
				break;
			}
		}
		tb.table.place(rule, addr, b, is_gcra(rule), kSeed, now);
		break;
	}
	}
	n.writes++;
	(void)first;
	(void)second;
}

void controller_writer(unsigned seed, Counts &n)
{
	std::mt19937_64 rng(seed);
	while (!g_stop.load(std::memory_order_relaxed)) {
		checkpoint_wait();
		write_table(*g_t4, rng, n);
		write_table(*g_t6, rng, n);
	}
}

// When every thread has stopped: nothing busy, every lock free, every count in its place.
uint64_t offsets = 0; ///< GCRA offsets checked at checkpoints

template <class Set> void check_quiet(Table<Set> &tb, uint64_t &verified, uint64_t &unverifiable)
{
	for (uint32_t s = 0; s < g_sets; s++) {
		Set &set = tb.sets[s];
		for (int w = 0; w < SLUICE_SET_WAYS; w++) {
			uint64_t key = set.tag.key[w];
			CHECK(key != SLUICE_KEY_BUSY, "IPv%d set %u way %d: left busy (a claim never published)",
			      Table<Set>::family, s, w);
			if (key == SLUICE_KEY_EMPTY || key == SLUICE_KEY_BUSY)
				continue;
			tb.check_key(key, s);
			uint16_t gen = set.tag.gen[w];
			const struct sluice_source_state &b = set.way[w];
			if (gen & 1) {
				CHECK(!(b.word & 1), "IPv%d set %u way %d: its lock left held", Table<Set>::family, s, w);
				CHECK(b.algo.sliding.cur == b.algo.sliding.prev && b.algo.sliding.window == window_of(key),
				      "IPv%d set %u way %d: a torn locked state", Table<Set>::family, s, w);
			}
			CHECK((b.cnt.passed_packets & ~SLUICE_CNT_VALUE_MASK) == sluice_gen_tag(gen),
			      "IPv%d set %u way %d: counters tagged for another generation", Table<Set>::family, s, w);
			WayBook &book = g_book[Table<Set>::index][s * SLUICE_SET_WAYS + w];
			if (!(gen & 1) && book.made_gen == (uint64_t(gen) | 1ULL << 32)) {
				offsets++;
				CHECK(b.algo.gcra.off == book.made_off,
				      "IPv%d set %u way %d: a published bucket's offset was written", Table<Set>::family, s, w);
			}
			uint64_t tally = book.tally.load(), tainted = book.taint.load(), zeroed = book.zeroed.load();
			uint64_t expect = tally && uint16_t(tally >> 48) == gen ? tally & ((1ULL << 48) - 1) : 1;
			uint64_t have = sluice_cnt_value(b.cnt.passed_packets);
			if (tainted && !newer(gen, uint16_t(tainted >> 48))) {
				unverifiable++;
				continue; // an add of uncertain destination may have landed here
			}
			verified++;
			if (zeroed && uint16_t(zeroed >> 48) == gen)
				CHECK(have <= expect, "IPv%d set %u way %d: %" PRIu64 " passes counted, %" PRIu64
				      " added before and after a reset", Table<Set>::family, s, w, have, expect);
			else
				CHECK(have == expect, "IPv%d set %u way %d: %" PRIu64 " passes counted, %" PRIu64 " added",
				      Table<Set>::family, s, w, have, expect);
		}
	}
}

} // namespace

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? std::atof(argv[1]) : 60;
	if (argc > 2)
		g_sets = uint32_t(std::atoi(argv[2]));
	if (argc > 3)
		g_addrs = uint32_t(std::atoi(argv[3]));
	if (argc > 4 || seconds <= 0 || g_sets < 1 || g_sets > kMaxSets || g_addrs < 1 || g_addrs > 255) {
		std::fprintf(stderr, "usage: settable_stress [SECONDS [SETS (1-%u) [ADDRESSES (1-255)]]]\n", kMaxSets);
		return 2;
	}
	g_certs = static_cast<uint64_t *>(std::calloc(kCerts, sizeof(uint64_t)));
	Table<struct sluice_set_v4> t4;
	Table<struct sluice_set_v6> t6;
	g_t4 = &t4;
	g_t6 = &t6;

	// Roles: three CPUs of the program, a reading and a writing controller.
	constexpr int kPlanes = 3;
	std::vector<Counts> counts(kPlanes + 2);
	std::vector<std::thread> threads;
	for (int i = 0; i < kPlanes; i++)
		threads.emplace_back(data_plane, 100 + i, std::ref(counts[i]));
	threads.emplace_back(controller_reader, 200, std::ref(counts[kPlanes]));
	threads.emplace_back(controller_writer, 300, std::ref(counts[kPlanes + 1]));
	auto start = std::chrono::steady_clock::now();
	uint64_t verified = 0, unverifiable = 0, checkpoints = 0;
	while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds) &&
	       g_failures.load() == 0) {
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
		g_pause = true;
		while (g_paused.load() < int(threads.size()))
			std::this_thread::yield();
		check_quiet(t4, verified, unverifiable);
		check_quiet(t6, verified, unverifiable);
		checkpoints++;
		g_pause = false;
		while (g_paused.load() > 0)
			std::this_thread::yield();
	}
	g_stop = true;
	for (auto &t : threads)
		t.join();
	double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

	check_quiet(t4, verified, unverifiable);
	check_quiet(t6, verified, unverifiable);

	Counts total;
	for (int i = 0; i < kPlanes; i++) {
		total.charges += counts[i].charges;
		total.inserts += counts[i].inserts;
	}
	total.reads = counts[kPlanes].reads;
	total.writes = counts[kPlanes + 1].writes;
	std::printf("settable_stress: %.1f s; program: %.0f charges/s, %.0f new buckets/s (%d threads); "
		    "controller: %.0f reads/s, %.0f writes/s; certificates %" PRIu64 "; %" PRIu64
		    " checkpoints and the end: %" PRIu64 " buckets' counts checked exactly, %" PRIu64
		    " not (an add of uncertain destination); %" PRIu64 " GCRA offsets as their maker wrote them\n",
		    took, total.charges / took, total.inserts / took, kPlanes, total.reads / took, total.writes / took,
		    std::min<uint64_t>(g_next_cert.load() - 1, kCerts - 1), checkpoints, verified, unverifiable, offsets);
	if (g_failures.load()) {
		std::fprintf(stderr, "settable_stress: %" PRIu64 " failed checks\n", g_failures.load());
		return 1;
	}
	std::printf("settable_stress: every check held\n");
	return 0;
}
