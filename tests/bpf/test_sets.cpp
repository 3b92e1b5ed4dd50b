// SPDX-License-Identifier: GPL-2.0-only
// Rules on address sets in the real program: a deny or limit rule on @S acts
// on exactly the members of S (IPv4 and IPv6), and replacing S while packets
// flow never shows a packet a gap (no set, or half of one).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <thread>
#include <unordered_set>

#include "fixture.h"
#include "sets.h"
#include "trie6.h"

using namespace sluice;
using namespace sluice::test;

namespace {

class SetRules : public Datapath {
protected:
	void SetUp() override
	{
		ASSERT_EQ(geteuid(), 0u) << "BPF tests load a real XDP program and must run as root";
		set_libbpf_verbose(false);
		// Room for a few thousand host prefixes (two table blocks each).
		prog_ = std::make_unique<LoadedProgram>(TableSizes{4096, 4096});
		maps_ = prog_->maps();
		table_ = std::make_unique<RuleTable>(maps_);
		// A run directory of the test's own: commits keep the IPv6 trie's
		// record there (a million prefixes' is 56 MB).
		char tmpl[] = "/tmp/sluice-sets-XXXXXX";
		const char *d = mkdtemp(tmpl);
		ASSERT_NE(d, nullptr);
		run_dir_ = d;
		setenv("SLUICE_RUN_DIR", run_dir_.c_str(), 1);
	}
	void TearDown() override
	{
		unsetenv("SLUICE_RUN_DIR");
		unsetenv("SLUICE_APPLY_FAIL_AT");
		if (!run_dir_.empty()) {
			EXPECT_EQ(system(("rm -rf '" + run_dir_ + "' '" + run_dir_ + ".away'").c_str()), 0);
		}
	}
	std::string run_dir_;

	/// Adds a rule on set `name`, compiled with `sets` (not the store's).
	InstalledRule add_on_set(RuleSpec spec, const std::string &name, const SetContents &sets)
	{
		spec.set = name;
		spec.cidr = Cidr{sets.at(name).family, {}, 0};
		return Transaction(maps_).with_sets(sets).add(spec).commit().added.front();
	}

	/// Replaces the sets, as `set load` does: the rules recompiled with them.
	void load(const SetContents &sets) { Transaction(maps_).with_sets(sets).commit(); }

	/// The prefixes the IPv6 trie holds for the live rule set, read back key by key.
	std::set<Cidr> live_v6_prefixes()
	{
		struct sluice_active active = {};
		uint32_t zero = 0;
		if (bpf_map_lookup_elem(maps_.active.get(), &zero, &active))
			throw std::runtime_error("cannot read the live-set word");
		const uint32_t live = sluice_lookup_set(active.set);
		std::set<Cidr> held;
		struct sluice_lpm_v6 cur = {}, next = {};
		for (int err = bpf_map_get_next_key(maps_.match6.get(), nullptr, &next); !err;
		     err = bpf_map_get_next_key(maps_.match6.get(), &cur, &next)) {
			cur = next;
			if (cur.set != live)
				continue;
			Cidr c{6, {}, static_cast<int>(cur.prefixlen) - SLUICE_LPM_SET_BITS};
			std::memcpy(c.addr.data(), cur.addr, 16);
			held.insert(c);
		}
		return held;
	}

	/// Random sets "v4" (`v4_prefixes` under 10/8) and "v6" (600 under
	/// 2000::/8), the deny rules "deny4" and "deny6" on them, and `beside`
	/// (a CIDR rule) added with them; returns the sets.
	SetContents deny_both_sets(std::mt19937_64 &rng, size_t v4_prefixes, const RuleSpec &beside);
};

std::string host_text(const Cidr &c) { return format_address(c.family, c.addr.data()); }

/// A random address under `c`.
Cidr member(std::mt19937_64 &rng, const Cidr &c)
{
	Cidr h = c;
	for (int b = c.prefix_len; b < c.max_len(); b++)
		if (rng() % 2)
			h.addr[b / 8] |= static_cast<uint8_t>(0x80 >> (b % 8));
	h.prefix_len = c.max_len();
	return h;
}

AddressSet random_set(std::mt19937_64 &rng, int family, size_t n, uint8_t first_byte)
{
	AddressSet s{family, {}};
	for (size_t i = 0; i < n; i++) {
		Cidr c;
		c.family = family;
		c.prefix_len = family == 4 ? static_cast<int>(16 + rng() % 17) : static_cast<int>(32 + rng() % 97);
		for (size_t b = 0; b < (family == 4 ? 4u : 16u); b++)
			c.addr[b] = static_cast<uint8_t>(rng());
		c.addr[0] = first_byte;
		c.addr[1] = static_cast<uint8_t>(rng() % 8); // a few /16s: prefixes nest
		mask_address(c.addr, c.prefix_len);
		s.prefixes.push_back(c);
	}
	normalize(s.prefixes);
	return s;
}

SetContents SetRules::deny_both_sets(std::mt19937_64 &rng, size_t v4_prefixes, const RuleSpec &beside)
{
	SetContents sets{{"v4", random_set(rng, 4, v4_prefixes, 10)}, {"v6", random_set(rng, 6, 600, 0x20)}};
	RuleSpec deny;
	deny.action = Action::deny;
	deny.name = "deny4";
	add_on_set(deny, "v4", sets);
	deny.name = "deny6";
	add_on_set(deny, "v6", sets);
	Transaction(maps_).with_sets(sets).add(beside).commit(); // the sets are not in a store here
	return sets;
}

bool in_set(const AddressSet &s, const Cidr &host)
{
	return std::any_of(s.prefixes.begin(), s.prefixes.end(), [&](const Cidr &c) { return cidr_contains(c, host); });
}

} // namespace

TEST_F(SetRules, ADenyRuleOnASetDropsExactlyItsMembers)
{
	std::mt19937_64 rng(29);
	// A CIDR rule beside them: an allow inside the v4 set's space, which
	// ranks by its own length among the set's prefixes.
	RuleSpec allow;
	allow.name = "allow30";
	allow.cidr = parse_cidr("10.0.0.0/30");
	allow.action = Action::allow;
	SetContents sets = deny_both_sets(rng, 600, allow);
	Cidr allowed = parse_cidr("10.0.0.0/30");

	uint64_t drops = 0, passes = 0;
	for (int i = 0; i < 4000; i++) {
		int family = i % 2 ? 6 : 4;
		const AddressSet &s = sets.at(family == 4 ? "v4" : "v6");
		// Half the probes under a set prefix, half near them.
		Cidr host = member(rng, s.prefixes[rng() % s.prefixes.size()]);
		if (i % 4 == 2)
			host.addr[family == 4 ? 3 : 15] ^= static_cast<uint8_t>(1 + rng() % 255);
		else if (i % 4 == 3)
			host.addr[1] ^= 0x08; // a /16 the set has no prefix in

		bool denied = in_set(s, host);
		if (family == 4 && cidr_contains(allowed, host)) {
			// The /30 allow beats a set prefix of /30 or shorter.
			bool longer = std::any_of(s.prefixes.begin(), s.prefixes.end(), [&](const Cidr &c) {
				return c.prefix_len > 30 && cidr_contains(c, host);
			});
			denied = longer;
		}
		int verdict = run({.src = host_text(host)});
		ASSERT_EQ(verdict, denied ? XDP_DROP : XDP_PASS) << host_text(host);
		(denied ? drops : passes)++;
	}
	EXPECT_GT(drops, 1000u);
	EXPECT_GT(passes, 900u);
	EXPECT_EQ(rule_counters("deny4").dropped_packets + rule_counters("deny6").dropped_packets, drops);
}

// The /24s of sets of hosts are compact bitmaps while their members carry one
// rule, and full blocks once two rules meet in a /24: members added and
// deleted by `set load`, a second set's members and a CIDR /25 in the same
// /24s. After each change every address of those /24s gets the verdict of
// the rule of its longest prefix (a set's outermost; ties to the rule added
// first).
TEST_F(SetRules, CompactAndFullBlocksGiveEveryAddressItsRule)
{
	std::mt19937_64 rng(2429);
	auto host = [&] {
		Cidr c = parse_cidr("10.9.0.0");
		c.addr[2] = static_cast<uint8_t>(rng() % 4);
		c.addr[3] = static_cast<uint8_t>(rng());
		if (rng() % 5 == 0) {
			c.prefix_len = static_cast<int>(26 + rng() % 6);
			mask_address(c.addr, c.prefix_len);
		}
		return c;
	};
	AddressSet allowed{4, {}}, denied{4, {}};
	for (int i = 0; i < 300; i++)
		denied.prefixes.push_back(host());
	for (int i = 0; i < 3; i++)
		allowed.prefixes.push_back(host());
	normalize(allowed.prefixes);
	normalize(denied.prefixes);
	SetContents sets{{"allowed", allowed}, {"denied", denied}};
	RuleSpec rule;
	rule.action = Action::allow;
	rule.name = "allow";
	add_on_set(rule, "allowed", sets); // first: wins a tie
	rule.action = Action::deny;
	rule.name = "deny";
	add_on_set(rule, "denied", sets);
	const Cidr slash25 = parse_cidr("10.9.2.128/25");
	bool with_slash25 = false;

	// A rule on a set ranks at the set's outermost prefix over the address.
	auto outermost = [](const AddressSet &s, const Cidr &h) {
		int len = -1;
		for (const auto &c : s.prefixes)
			if (cidr_contains(c, h) && (len < 0 || c.prefix_len < len))
				len = c.prefix_len;
		return len;
	};
	size_t compact_seen = 0, full_seen = 0;
	for (int step = 0; step < 16; step++) {
		// A change: members added or deleted, the /25 allow added or deleted.
		auto &s = rng() % 3 ? sets.at("denied") : sets.at("allowed");
		for (int n = static_cast<int>(rng() % 40); n > 0; n--)
			s.prefixes.push_back(host());
		for (int n = static_cast<int>(rng() % 40); n > 0 && s.prefixes.size() > 1; n--)
			s.prefixes.erase(s.prefixes.begin() + static_cast<long>(rng() % s.prefixes.size()));
		normalize(s.prefixes);
		if (step % 4 == 3) {
			with_slash25 = !with_slash25;
			if (with_slash25) {
				RuleSpec allow;
				allow.cidr = slash25;
				allow.action = Action::allow;
				allow.name = "allow25";
				Transaction(maps_).with_sets(sets).add(allow).commit();
			} else {
				Transaction(maps_).with_sets(sets).remove("allow25").commit();
			}
		} else {
			load(sets);
		}

		struct sluice_active active = {};
		uint32_t zero = 0;
		ASSERT_EQ(bpf_map_lookup_elem(maps_.active.get(), &zero, &active), 0);
		uint32_t top_index = sluice_lookup_set(active.set) * SLUICE_DIR_TOP_SIZE + 0x0a09, top = 0;
		ASSERT_EQ(bpf_map_lookup_elem(maps_.dir4_top.get(), &top_index, &top), 0);
		ASSERT_TRUE(top & SLUICE_DIR_CHILD);
		struct sluice_dir_block level2 = {};
		uint32_t level2_index = top & ~SLUICE_DIR_CHILD;
		ASSERT_EQ(bpf_map_lookup_elem(maps_.dir4_blocks.get(), &level2_index, &level2), 0);
		for (uint32_t third = 0; third < 4; third++) {
			compact_seen += (level2.entry[third] & SLUICE_DIR_BITMAP) != 0;
			full_seen += (level2.entry[third] & SLUICE_DIR_CHILD) != 0;
			for (uint32_t low = 0; low < 256; low++) {
				Cidr h = parse_cidr("10.9.0.0");
				h.addr[2] = static_cast<uint8_t>(third);
				h.addr[3] = static_cast<uint8_t>(low);
				int a = outermost(sets.at("allowed"), h), d = outermost(sets.at("denied"), h);
				int c = with_slash25 && cidr_contains(slash25, h) ? 25 : -1;
				bool drop = d >= 0 && d > a && d >= c;
				ASSERT_EQ(run({.src = host_text(h)}), drop ? XDP_DROP : XDP_PASS)
					<< host_text(h) << " at step " << step;
			}
		}
	}
	EXPECT_GT(compact_seen, 5u) << "/24s of one rule's members are bitmaps";
	EXPECT_GT(full_seen, 5u) << "/24s of two rules' are full blocks";
}

// A load writes the IPv6 trie's idle set over what it held two loads ago:
// the stale keys go (in batches where the kernel has them), so the live set
// holds exactly the new set's prefixes, and no packet sees an old one.
TEST_F(SetRules, ALoadLeavesTheTrieHoldingExactlyTheNewSetsPrefixes)
{
	std::mt19937_64 rng(64);
	RuleSpec deny;
	deny.action = Action::deny;
	deny.name = "deny6";
	std::vector<AddressSet> versions;
	for (size_t n : {2000u, 300u, 1500u, 10u, 2500u})
		versions.push_back(random_set(rng, 6, n, 0x20));
	add_on_set(deny, "v6", SetContents{{"v6", versions[0]}});
	for (size_t v = 1; v < versions.size(); v++) {
		load(SetContents{{"v6", versions[v]}});
		std::set<Cidr> held = live_v6_prefixes();
		std::set<Cidr> want(versions[v].prefixes.begin(), versions[v].prefixes.end());
		ASSERT_EQ(held, want) << "load " << v;
		// A member of the version before that this one lacks passes.
		for (const auto &c : versions[v - 1].prefixes) {
			Cidr h = member(rng, c);
			if (!in_set(versions[v], h)) {
				ASSERT_EQ(run({.src = host_text(h)}), XDP_PASS) << host_text(h);
				break;
			}
		}
	}
}

TEST_F(SetRules, ALimitRuleOnASetLimitsEachMemberByItsPer)
{
	SetContents sets{{"six", AddressSet{6, {parse_cidr("2001:db8:1::/48"), parse_cidr("2001:db8:9::/48")}}},
			 {"four", AddressSet{4, {parse_cidr("192.0.2.0/24"), parse_cidr("198.51.100.7")}}}};
	add_on_set(limit_spec("::/0", "1/h", 3, "lim6", Proto::any, {}, 56), "six", sets);
	add_on_set(limit_spec("0.0.0.0/0", "1/h", 2, "lim4"), "four", sets);

	// IPv6, per /56: two addresses of one /56 share a bucket of 3.
	EXPECT_EQ(run({.src = "2001:db8:1::1"}, 1), XDP_PASS);
	EXPECT_EQ(run({.src = "2001:db8:1:ff::2"}, 2), XDP_PASS);
	EXPECT_EQ(run({.src = "2001:db8:1::3"}), XDP_DROP) << "the /56's bucket is empty";
	EXPECT_EQ(run({.src = "2001:db8:1:100::1"}), XDP_PASS) << "another /56 of the member";
	for (int i = 0; i < 20; i++)
		ASSERT_EQ(run({.src = "2001:db8:2::1"}), XDP_PASS) << "not a member: untouched";
	// IPv4, per address (the default).
	EXPECT_EQ(run({.src = "192.0.2.9"}, 2), XDP_PASS);
	EXPECT_EQ(run({.src = "192.0.2.9"}), XDP_DROP);
	EXPECT_EQ(run({.src = "192.0.2.10"}), XDP_PASS) << "its own bucket";
	EXPECT_EQ(run({.src = "198.51.100.7"}, 2), XDP_PASS);
	EXPECT_EQ(run({.src = "198.51.100.7"}), XDP_DROP);
	EXPECT_EQ(run({.src = "198.51.100.8"}, 5), XDP_PASS) << "not a member";
	EXPECT_EQ(source("2001:db8:1::/56", "lim6").dropped_packets, 1u);
	EXPECT_EQ(rule_counters("lim4").dropped_packets, 2u);
}

TEST_F(SetRules, ReplacingASetUnderTrafficNeverShowsAGap)
{
	// A member in every version of the set, sent from both CPUs while the
	// set is replaced over and over by sets of other sizes and shapes: each
	// of its packets meets the old set or the new one, and is dropped.
	std::mt19937_64 rng(4);
	const Cidr always4 = parse_cidr("10.5.5.5"), always6 = parse_cidr("2001:db8:5::5");
	std::vector<SetContents> versions;
	for (int v = 0; v < 6; v++) {
		AddressSet a = random_set(rng, 4, 200 + 700 * (v % 3), 10);
		AddressSet b = random_set(rng, 6, 200 + 700 * (v % 3), 0x20);
		a.prefixes.push_back(v % 2 ? always4 : parse_cidr("10.5.5.0/24")); // as a host or under a prefix
		b.prefixes.push_back(v % 2 ? always6 : parse_cidr("2001:db8:5::/64"));
		normalize(a.prefixes);
		normalize(b.prefixes);
		versions.push_back({{"v4", a}, {"v6", b}});
	}
	RuleSpec deny;
	deny.action = Action::deny;
	deny.name = "deny4";
	add_on_set(deny, "v4", versions[0]);
	deny.name = "deny6";
	add_on_set(deny, "v6", versions[0]);

	std::atomic<bool> done{false};
	std::atomic<uint64_t> sent{0}, passed{0};
	std::thread sender([&] {
		auto f4 = build_packet({.src = "10.5.5.5"}), f6 = build_packet({.src = "2001:db8:5::5"});
		while (!done.load()) {
			for (const auto *f : {&f4, &f6}) {
				LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = f->data(),
					    .data_size_in = static_cast<__u32>(f->size()), .repeat = 1);
				if (bpf_prog_test_run_opts(prog_->prog_fd(), &opts) == 0) {
					sent++;
					passed += opts.retval != XDP_DROP;
				}
			}
		}
	});
	int loads = 0;
	for (; loads < 60; loads++)
		load(versions[static_cast<size_t>(loads) % versions.size()]);
	done = true;
	sender.join();
	EXPECT_EQ(passed.load(), 0u) << "a packet saw no set, or a set half written";
	EXPECT_GT(sent.load(), 1000u) << "traffic flowed while the set was replaced";
	Stats st = stats();
	EXPECT_EQ(st.global[SLUICE_CNT_PASS_NO_MATCH].packets, 0u);
	EXPECT_EQ(st.global[SLUICE_CNT_DROP_DENY].packets, sent.load());
}

namespace {

/// An IPv6 address or prefix as two 64-bit halves, for a reference that
/// looks a source up by hashing, independently of the trie.
struct V6Key {
	uint64_t hi = 0, lo = 0;
	bool operator==(const V6Key &) const = default;
};
struct V6KeyHash {
	size_t operator()(const V6Key &k) const { return std::hash<uint64_t>()(k.hi * 0x9e3779b97f4a7c15ull ^ k.lo); }
};

Cidr v6_cidr(uint64_t hi, uint64_t lo, int len)
{
	Cidr c{6, {}, len};
	for (int i = 0; i < 8; i++) {
		c.addr[i] = static_cast<uint8_t>(hi >> (56 - 8 * i));
		c.addr[8 + i] = static_cast<uint8_t>(lo >> (56 - 8 * i));
	}
	return c;
}

V6Key v6_key(const Cidr &c)
{
	V6Key k;
	for (int i = 0; i < 8; i++) {
		k.hi = k.hi << 8 | c.addr[i];
		k.lo = k.lo << 8 | c.addr[8 + i];
	}
	return k;
}

/// A set of `n` distinct /64s and /128s under 2001:db8::/32, none inside
/// another (a prefix inside another of its set takes no room: the trie
/// holds exactly `n` of its prefixes), some /128s sharing a /64; `set64` and
/// `set128` get its members by length.
AddressSet million_v6(std::mt19937_64 &rng, size_t n, std::unordered_set<uint64_t> &set64,
		      std::unordered_set<V6Key, V6KeyHash> &set128)
{
	AddressSet s{6, {}};
	std::unordered_set<uint64_t> hosts64; // /64s that hold /128s of the set
	std::vector<uint64_t> host_his;
	while (set64.size() + set128.size() < n) {
		uint64_t hi = 0x20010db800000000ull | (rng() & 0xffffffffull), r = rng();
		if (r % 5 < 3) {
			if (!hosts64.count(hi) && set64.insert(hi).second)
				s.prefixes.push_back(v6_cidr(hi, 0, 64));
			continue;
		}
		if (r % 5 == 3 && !host_his.empty())
			hi = host_his[rng() % host_his.size()]; // beside another host of the set
		uint64_t lo = rng();
		if (set64.count(hi) || !set128.insert({hi, lo}).second)
			continue;
		s.prefixes.push_back(v6_cidr(hi, lo, 128));
		if (hosts64.insert(hi).second)
			host_his.push_back(hi);
	}
	normalize(s.prefixes);
	return s;
}

/// The memory the kernel charges a map (its fdinfo's memlock), in bytes.
uint64_t memlock_of(int fd)
{
	std::ifstream in("/proc/self/fdinfo/" + std::to_string(fd));
	for (std::string key; in >> key;) {
		if (key == "memlock:") {
			uint64_t v = 0;
			in >> v;
			return v;
		}
		in.ignore(1 << 20, '\n');
	}
	return 0;
}

/// How many keys the trie holds under each of its two rule sets.
std::array<size_t, 2> trie_keys(int fd)
{
	std::array<size_t, 2> n = {0, 0};
	struct sluice_lpm_v6 cur = {}, next = {};
	for (int err = bpf_map_get_next_key(fd, nullptr, &next); !err; err = bpf_map_get_next_key(fd, &cur, &next)) {
		cur = next;
		n.at(cur.set)++;
	}
	return n;
}

} // namespace

// A set of 1,000,000 IPv6 /64s and /128s fits a trie sized by
// --max-v6-prefixes beside 4,096 rule slots (no IPv4 table of a million
// rules), and the program matches it: sampled sources (members, their
// neighbours, addresses under /96 allows inside the set's /64s, others) each
// get the verdict a hash lookup of the set gives. A second million replaces
// it, filling the trie's two rule sets to the last entry; a load of one
// prefix more is refused with one line, and nothing changes.
TEST_F(SetRules, AMillionIPv6PrefixesFitTheirOwnRoomAndEverySampledSourceMeetsItsRule)
{
	constexpr size_t MILLION = 1000000;
	std::mt19937_64 rng(1000000);
	// Allows: the /32 all of the set is under (shorter: the set wins), and
	// /96s inside /64s of the set (longer: they win) and elsewhere.
	std::vector<Cidr> allows = {parse_cidr("2001:db8::/32")};
	const uint32_t room = static_cast<uint32_t>(MILLION + 1 + 16);
	table_.reset();
	prog_ = std::make_unique<LoadedProgram>(
		TableSizes{.max_sources = 4096, .max_rules = 4096, .max_v6_prefixes = room});
	maps_ = prog_->maps();
	table_ = std::make_unique<RuleTable>(maps_);
	ASSERT_EQ(maps_.max_v6_prefixes(), room);
	ASSERT_EQ(maps_.max_rules(), 4096u);

	std::unordered_set<uint64_t> set64[2];
	std::unordered_set<V6Key, V6KeyHash> set128[2];
	AddressSet versions[2];
	for (int v = 0; v < 2; v++)
		versions[v] = million_v6(rng, MILLION, set64[v], set128[v]);
	ASSERT_EQ(versions[0].prefixes.size(), MILLION);
	for (int i = 0; i < 16; i++) {
		// Anywhere; inside a /64 of either set (the allow is longer: it
		// wins); over a /128 of the second (the host is longer: denied).
		uint64_t hi = 0x20010db800000000ull | (rng() & 0xffffffffull), lo = rng();
		if (i % 4 == 1 || i % 4 == 2)
			hi = *std::next(set64[i % 4 - 1].begin(), static_cast<long>(rng() % 1000));
		if (i % 4 == 3) {
			const V6Key &k = *std::next(set128[1].begin(), static_cast<long>(rng() % 1000));
			hi = k.hi;
			lo = k.lo;
		}
		allows.push_back(v6_cidr(hi, lo & 0xffffffff00000000ull, 96));
	}
	ASSERT_EQ(allows.size() + MILLION, room) << "the rule set fills its room exactly";
	for (size_t i = 0; i < allows.size(); i++) {
		RuleSpec allow;
		allow.name = "allow" + std::to_string(i);
		allow.cidr = allows[i];
		allow.action = Action::allow;
		table_->add(allow);
	}
	RuleSpec deny;
	deny.action = Action::deny;
	deny.name = "deny-big";
	auto t0 = std::chrono::steady_clock::now();
	add_on_set(deny, "big", SetContents{{"big", versions[0]}});
	auto t1 = std::chrono::steady_clock::now();
	load(SetContents{{"big", versions[1]}});
	auto t2 = std::chrono::steady_clock::now();
	std::cout << "1,000,000 IPv6 prefixes: rule added in "
		  << std::chrono::duration<double>(t1 - t0).count() << " s, set replaced in "
		  << std::chrono::duration<double>(t2 - t1).count() << " s; the trie's memlock with both rule sets full: "
		  << memlock_of(maps_.match6.get()) << " bytes\n";

	// The reference: the set rule ranks at the outermost set prefix over
	// the source (its /64 if it has one), an allow at its own length.
	auto expect_drop = [&](int v, const Cidr &host) {
		V6Key k = v6_key(host);
		int d = set64[v].count(k.hi) ? 64 : set128[v].count(k) ? 128 : -1;
		int a = -1;
		for (const auto &c : allows)
			if (cidr_contains(c, host))
				a = std::max(a, c.prefix_len);
		return d >= 0 && d > a;
	};
	auto probe = [&](int v, int samples) {
		const AddressSet &s = versions[v];
		uint64_t drops = 0, passes = 0;
		for (int i = 0; i < samples; i++) {
			Cidr host;
			switch (i % 5) {
			case 0: // a member
			case 1:
				host = member(rng, s.prefixes[rng() % s.prefixes.size()]);
				break;
			case 2: // a neighbour: the next /64, or the next address
				host = member(rng, s.prefixes[rng() % s.prefixes.size()]);
				host.addr[rng() % 2 ? 7 : 15] ^= 1;
				break;
			case 3: // under an allow
				host = member(rng, allows[rng() % allows.size()]);
				break;
			default: // anywhere under 2001:db8::/31
				host = member(rng, parse_cidr("2001:db8::/31"));
			}
			bool drop = expect_drop(v, host);
			int verdict = run({.src = host_text(host)});
			EXPECT_EQ(verdict, drop ? XDP_DROP : XDP_PASS) << host_text(host) << " against version " << v;
			if (verdict != (drop ? XDP_DROP : XDP_PASS))
				return;
			(drop ? drops : passes)++;
		}
		EXPECT_GT(drops, uint64_t(samples) / 4) << "members were probed";
		EXPECT_GT(passes, uint64_t(samples) / 4) << "non-members were probed";
	};
	probe(1, 20000);
	// Members of the first million that the second lacks: passed.
	for (int i = 0; i < 2000; i++) {
		Cidr host = member(rng, versions[0].prefixes[rng() % MILLION]);
		if (!expect_drop(1, host)) {
			ASSERT_EQ(run({.src = host_text(host)}), XDP_PASS) << host_text(host);
		}
	}

	// One prefix more than the room: refused before anything is written.
	AddressSet over = versions[0];
	over.prefixes.push_back(v6_cidr(0x20010db9ull << 32, 1, 128)); // outside the others' /32
	normalize(over.prefixes);
	ASSERT_EQ(over.prefixes.size(), MILLION + 1);
	struct sluice_active before = {}, after = {};
	uint32_t zero = 0;
	ASSERT_EQ(bpf_map_lookup_elem(maps_.active.get(), &zero, &before), 0);
	uint64_t memlock = memlock_of(maps_.match6.get());
	EXPECT_EQ(trie_keys(maps_.match6.get()), (std::array<size_t, 2>{room, room})) << "both rule sets fill the room";
	try {
		load(SetContents{{"big", over}});
		ADD_FAILURE() << "a load of one prefix over the room went in";
	} catch (const Error &e) {
		EXPECT_EQ(std::string(e.what()), "the rules and sets need " + std::to_string(room + 1) +
							 " IPv6 prefixes and --max-v6-prefixes holds " +
							 std::to_string(room) +
							 "; raise it with `sluice apply` (tables: max_v6_prefixes)");
	}
	ASSERT_EQ(bpf_map_lookup_elem(maps_.active.get(), &zero, &after), 0);
	EXPECT_EQ(std::memcmp(&before, &after, sizeof(before)), 0) << "the live-set word is as it was";
	EXPECT_EQ(memlock_of(maps_.match6.get()), memlock) << "the trie holds what it held";
	EXPECT_EQ(trie_keys(maps_.match6.get()), (std::array<size_t, 2>{room, room}));
	EXPECT_EQ(run({.src = "2001:db9::1"}), XDP_PASS) << "the refused set's extra member";
	probe(1, 5000);
}

namespace {

std::vector<uint8_t> file_bytes(const std::string &path)
{
	std::ifstream in(path, std::ios::binary);
	return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void put_file(const std::string &path, const std::vector<uint8_t> &bytes)
{
	std::ofstream out(path, std::ios::binary | std::ios::trunc);
	out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// The prefixes of `s` that no other prefix of it holds, by brute force.
std::set<Cidr> outermost_by_hand(const AddressSet &s)
{
	std::set<Cidr> out;
	for (const auto &p : s.prefixes) {
		bool inside = std::any_of(s.prefixes.begin(), s.prefixes.end(),
					  [&](const Cidr &q) { return q.prefix_len < p.prefix_len && cidr_contains(q, p); });
		if (!inside)
			out.insert(p);
	}
	return out;
}

/// The next version of a set: grown, shrunk, replaced, or the same.
AddressSet next_version(std::mt19937_64 &rng, const AddressSet &now, int family, uint8_t first_byte)
{
	AddressSet next = now;
	switch (rng() % 4) {
	case 0: { // grown
		AddressSet more = random_set(rng, family, 1 + rng() % 800, first_byte);
		next.prefixes.insert(next.prefixes.end(), more.prefixes.begin(), more.prefixes.end());
		break;
	}
	case 1: // shrunk
		std::erase_if(next.prefixes, [&](const Cidr &) { return rng() % 3 == 0; });
		if (rng() % 8 == 0)
			next.prefixes.clear();
		break;
	case 2: // replaced
		next = random_set(rng, family, rng() % 1500, first_byte);
		break;
	default: // the same
		break;
	}
	normalize(next.prefixes);
	return next;
}

} // namespace

// The trie's record is kept where the run directory is not made yet (the
// first load of a boot, or the first after `detach --all` removed it): it
// was left unwritten, and every later set load read the trie back.
TEST_F(SetRules, TheTrieRecordIsKeptWhereTheRunDirectoryIsNotMadeYet)
{
	const std::string dir = run_dir_ + "/not-made-yet";
	setenv("SLUICE_RUN_DIR", dir.c_str(), 1);
	std::mt19937_64 rng(31);
	RuleSpec cidr_rule;
	cidr_rule.action = Action::deny;
	cidr_rule.name = "deny-cidr";
	cidr_rule.cidr = parse_cidr("2001:db8:ffff::/48");
	deny_both_sets(rng, 50, cidr_rule);
	EXPECT_EQ(access(trie6_index_path(dir).c_str(), F_OK), 0) << "no record of the trie in " << dir;
}

// Set loads write the trie's idle set from a record of what it holds, kept in
// the run directory, instead of reading the trie back. Whatever happens to
// the record between loads (removed, a byte changed, an old copy put back, a
// load that kept none, a load killed after writing the idle set, an entry
// written into the trie behind it), after each load the trie's live set holds
// every prefix the live rules and sets put there, and only those, and
// packets get the brute-force verdict. The record is used where it is good
// and refused where it is not.
TEST_F(SetRules, LoadsKeepTheTrieExactWhateverHappensToItsRecord)
{
	const std::string &dir = run_dir_;
	std::mt19937_64 rng(2929);
	// A CIDR rule beside the set: its prefix is a key of its own list.
	RuleSpec cidr_rule;
	cidr_rule.action = Action::deny;
	cidr_rule.name = "deny-cidr";
	cidr_rule.cidr = parse_cidr("2001:db8:ffff::/48");
	SetContents sets = deny_both_sets(rng, 400, cidr_rule);

	std::vector<SetContents> history{sets};
	std::vector<std::map<std::string, std::vector<uint8_t>>> saved; // the record after each load
	auto save_record = [&] {
		std::map<std::string, std::vector<uint8_t>> files;
		for (const auto &p : {trie6_index_path(dir), trie6_set_path(dir, 0), trie6_set_path(dir, 1)})
			files[p] = file_bytes(p);
		saved.push_back(files);
	};
	save_record();
	enum Tamper { none, no_index, no_idle_file, no_live_file, byte_flipped, old_copy, unrecorded, killed,
		      stray_key, rules_edited, TAMPERS };
	const char *tamper_names[] = {"none", "no index", "no idle set file", "no live set file", "a byte changed",
				      "an old copy", "a load before kept none", "a killed load before",
				      "an entry written behind it", "rule edits in place"};
	std::map<int, int> used_record, tried;
	bool record_good = true; // what the record should be trusted for at the next load
	for (int step = 0; step < 100; step++) {
		struct sluice_active active = {};
		uint32_t zero = 0;
		ASSERT_EQ(bpf_map_lookup_elem(maps_.active.get(), &zero, &active), 0);
		const uint32_t idle = sluice_lookup_set(active.set) ^ 1;
		int tamper = step < 3 ? none : static_cast<int>(rng() % TAMPERS);
		bool detectable = true;
		switch (tamper) {
		case none:
			detectable = false;
			break;
		case no_index:
			unlink(trie6_index_path(dir).c_str());
			break;
		case no_idle_file:
			unlink(trie6_set_path(dir, idle).c_str());
			break;
		case no_live_file:
			unlink(trie6_set_path(dir, idle ^ 1).c_str());
			detectable = false; // not read by this load; the next one reads the trie
			break;
		case byte_flipped: {
			std::string p = rng() % 2 ? trie6_index_path(dir) : trie6_set_path(dir, idle);
			auto bytes = file_bytes(p);
			if (bytes.empty()) {
				detectable = false;
				break;
			}
			bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
			put_file(p, bytes);
			break;
		}
		case old_copy:
			if (saved.size() < 2) {
				detectable = false;
				break;
			}
			for (const auto &[p, bytes] : saved[rng() % (saved.size() - 1)])
				put_file(p, bytes);
			break;
		case unrecorded: { // a load by a writer that keeps no record
			// (here: one that finds a file where its run directory would be)
			ASSERT_EQ(rename(dir.c_str(), (dir + ".away").c_str()), 0);
			std::ofstream(dir) << "not a directory\n";
			SetContents other = sets;
			other.at("v6") = next_version(rng, sets.at("v6"), 6, 0x20);
			load(other);
			ASSERT_EQ(unlink(dir.c_str()), 0);
			ASSERT_EQ(rename((dir + ".away").c_str(), dir.c_str()), 0);
			sets = other;
			history.push_back(sets);
			break;
		}
		case killed: { // a load stopped after writing the idle set, before its switch
			SetContents other = sets;
			other.at("v6") = random_set(rng, 6, 300, 0x20); // prefixes no set holds: left over, they would show
			setenv("SLUICE_APPLY_FAIL_AT", "rules-written", 1);
			EXPECT_THROW(load(other), Error);
			unsetenv("SLUICE_APPLY_FAIL_AT");
			EXPECT_NE(access(trie6_index_path(dir).c_str(), F_OK), 0) << "a killed load leaves no index";
			break;
		}
		case stray_key: { // an entry written into the idle set behind the record's back
			Cidr stray = member(rng, parse_cidr("2001:db8::/32"));
			mask_address(stray.addr, 100);
			struct sluice_lpm_v6 k = {};
			k.prefixlen = SLUICE_LPM_SET_BITS + 100;
			k.set = static_cast<__u8>(idle);
			std::memcpy(k.addr, stray.addr.data(), sizeof(k.addr));
			struct sluice_match_list v = {};
			ASSERT_EQ(bpf_map_update_elem(maps_.match6.get(), &k, &v, BPF_ANY), 0);
			break;
		}
		case rules_edited: { // switches of the rule entries alone: the record follows them
			RuleEdit on, off;
			on.shadow = true;
			off.shadow = false;
			table_->edit("deny-cidr", on);
			table_->edit("deny-cidr", off);
			detectable = false;
			break;
		}
		}
		tried[tamper]++;

		// The load: the IPv6 set, the IPv4 set, or both change.
		SetContents next = sets;
		int which = static_cast<int>(rng() % 3);
		if (which != 1)
			next.at("v6") = next_version(rng, sets.at("v6"), 6, 0x20);
		if (which != 0)
			next.at("v4") = next_version(rng, sets.at("v4"), 4, 10);
		load(next);
		sets = next;
		history.push_back(sets);
		Trie6WriteReport report = last_trie6_write();
		if (report.from_record)
			used_record[tamper]++;
		if (detectable) {
			EXPECT_FALSE(report.from_record) << "step " << step << ": " << tamper_names[tamper];
		} else if (record_good) {
			EXPECT_TRUE(report.from_record) << "step " << step << ": " << tamper_names[tamper];
		}
		record_good = tamper != no_live_file; // that load did not read the file it lost: the next one does
		save_record();

		// The live set of the trie holds exactly the live prefixes.
		std::set<Cidr> held = live_v6_prefixes();
		std::set<Cidr> want = outermost_by_hand(sets.at("v6"));
		want.insert(cidr_rule.cidr);
		ASSERT_EQ(held, want) << "step " << step << " after " << tamper_names[tamper];

		// Packets: members of the live sets are dropped, and addresses of
		// earlier versions that the live sets lack pass.
		for (const char *name : {"v4", "v6"}) {
			const AddressSet &s = sets.at(name);
			for (int probe = 0; probe < 20 && !s.prefixes.empty(); probe++) {
				Cidr h = member(rng, s.prefixes[rng() % s.prefixes.size()]);
				ASSERT_EQ(run({.src = host_text(h)}), XDP_DROP) << "step " << step << ": " << host_text(h);
			}
			for (int probe = 0; probe < 20; probe++) {
				const AddressSet &old = history[rng() % history.size()].at(name);
				if (old.prefixes.empty())
					continue;
				Cidr h = member(rng, old.prefixes[rng() % old.prefixes.size()]);
				bool denied = in_set(s, h) || (h.family == 6 && cidr_contains(cidr_rule.cidr, h));
				ASSERT_EQ(run({.src = host_text(h)}), denied ? XDP_DROP : XDP_PASS)
					<< "step " << step << ": " << host_text(h);
			}
		}
	}
	for (int t = 0; t < TAMPERS; t++)
		EXPECT_GT(tried[t], 0) << tamper_names[t] << " never happened";
	EXPECT_GT(used_record[none], 5) << "loads used the record";
}
