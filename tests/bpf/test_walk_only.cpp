// SPDX-License-Identifier: GPL-2.0-only
// The decision's caches against the decision: the test build of the program
// (sluice_test_bpf: the drop memo, the fast path, then the walk) and the same
// build without its caches (sluice_walk_test_bpf, SLUICE_WALK_ONLY: every
// packet takes the walk) loaded side by side, each with its own maps, fed
// the same frames at the same test-clock time on the same CPU, with the same
// rule changes between frames. On every frame both must give the same XDP
// verdict and land in the same verdict counter; after every frame both must
// hold the same global counters, per-rule counters and per-source counters
// (passed and dropped, packets and bytes).
//
// Rule changes are `rule add`, `rule set` and `rule del`, written as the
// operator types them: each option of `rule add` and `rule set` is read from
// the CLI's own option declarations (add_rule_options, add_edit_options), so
// a new option fails this test until the generator gives it values. Every
// algorithm is taken from the Algo enum.
//
// Cluster rules' buckets are granted credit or withheld refill now and then,
// the same grant written to both builds' grants maps as the cluster sync
// writes it (Twin::grant): the fast path takes a grant as the walk does.
//
// The seed is printed; SLUICE_WALK_SEED=N replays a run, and a mismatch is
// reported with the seed, the frame's index, both rule sets, both verdicts
// and the changes before it.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "adversarial.h"
#include "corpus_shapes.h"
#include "grants.h"
#include "net.h"
#include "policy.h"
#include "replay.h"
#include "rule_args.h"
#include "sluice_algos.h"
#include "rule_lines.h"
#include "sluice_walk_test_bpf.skel.h"

using namespace sluice;
using namespace sluice::test;

namespace {

ObjectImage walk_only_object()
{
	ObjectImage image;
	image.data = sluice_walk_test_bpf__elf_bytes(&image.size);
	return image;
}

uint64_t seed_for(const char *what)
{
	const char *text = std::getenv("SLUICE_WALK_SEED");
	uint64_t seed = text ? std::strtoull(text, nullptr, 0) : std::random_device{}();
	std::printf("%s: seed %llu (replay with SLUICE_WALK_SEED=%llu)\n", what, (unsigned long long)seed,
		    (unsigned long long)seed);
	return seed;
}

/// Everything a step is compared on, read as `sluice stats` reads it.
struct Counts {
	std::array<struct sluice_counter, SLUICE_CNT_MAX> global{};
	std::map<std::string, struct sluice_rule_counters> rules; ///< by rule name
	/// by rule name, bucket id and source: passed packets, bytes, dropped packets, bytes
	std::map<std::tuple<std::string, uint32_t, std::string>, std::array<uint64_t, 4>> sources;
};

Counts read_counts(const ProgramUnderTest &p)
{
	Stats st = collect_stats(p.maps(), {0, ""});
	Counts c;
	c.global = st.global;
	for (const auto &r : st.rules)
		c.rules[r.rule.spec.name] = r.counters;
	for (const auto &s : st.sources)
		c.sources[{s.rule, s.bucket_id, s.source}] = {s.passed_packets, s.passed_bytes, s.dropped_packets,
							      s.dropped_bytes};
	return c;
}

/// The global counters alone (packets and bytes), summed over CPUs: cheap
/// enough for every frame; read_counts reads every bucket too.
std::array<struct sluice_counter, SLUICE_CNT_MAX> read_global(const ProgramUnderTest &p)
{
	std::array<struct sluice_counter, SLUICE_CNT_MAX> out{};
	std::vector<struct sluice_counter> per_cpu(static_cast<size_t>(possible_cpus()));
	for (__u32 i = 0; i < SLUICE_CNT_MAX; i++) {
		if (bpf_map_lookup_elem(p.maps().counters.get(), &i, per_cpu.data()))
			throw std::runtime_error("cannot read global counter " + std::to_string(i));
		for (const auto &c : per_cpu) {
			out[i].packets += c.packets;
			out[i].bytes += c.bytes;
		}
	}
	return out;
}

std::string rule_counts_text(const struct sluice_rule_counters &r)
{
	std::ostringstream s;
	s << "passed " << r.passed_packets << "/" << r.passed_bytes << "B dropped " << r.dropped_packets << "/"
	  << r.dropped_bytes << "B failopen_table " << r.failopen_table << " passed_contention "
	  << r.passed_contention;
	return s.str();
}

std::string global_difference(const std::array<struct sluice_counter, SLUICE_CNT_MAX> &full,
			      const std::array<struct sluice_counter, SLUICE_CNT_MAX> &walk)
{
	for (int i = 0; i < SLUICE_CNT_MAX; i++) {
		// Not a decision: an event is lost when the ring is full, and the
		// throttle timers that write RELEASED events run on the kernel's real
		// clock, not the test clock, so the two builds' rings fill at
		// different instants (the events themselves are compared through the
		// decisions and counts that cause them).
		if (i == SLUICE_CNT_INFO_EVENTS_LOST)
			continue;
		if (full[i].packets != walk[i].packets || full[i].bytes != walk[i].bytes)
			return "global counter " + std::string(counter_name(i)) + ": full " + std::to_string(full[i].packets) +
			       "/" + std::to_string(full[i].bytes) + "B, walk-only " + std::to_string(walk[i].packets) + "/" +
			       std::to_string(walk[i].bytes) + "B";
	}
	return "";
}

/// The first difference between the two builds' counts, "" if none.
std::string first_difference(const Counts &full, const Counts &walk)
{
	if (std::string g = global_difference(full.global, walk.global); !g.empty())
		return g;
	if (full.rules.size() != walk.rules.size())
		return "rule count: full " + std::to_string(full.rules.size()) + ", walk-only " +
		       std::to_string(walk.rules.size());
	for (const auto &[name, f] : full.rules) {
		auto it = walk.rules.find(name);
		if (it == walk.rules.end())
			return "rule " + name + " only in the full build";
		if (std::memcmp(&f, &it->second, sizeof(f)))
			return "rule " + name + ": full " + rule_counts_text(f) + "; walk-only " + rule_counts_text(it->second);
	}
	auto text = [](const std::array<uint64_t, 4> &v) {
		return "passed " + std::to_string(v[0]) + "/" + std::to_string(v[1]) + "B dropped " + std::to_string(v[2]) +
		       "/" + std::to_string(v[3]) + "B";
	};
	for (const auto &[key, f] : full.sources) {
		const auto &[rule, bucket, source] = key;
		auto it = walk.sources.find(key);
		std::string who = "source " + source + " under " + rule + " (bucket id " + std::to_string(bucket) + ")";
		if (it == walk.sources.end())
			return who + ": only in the full build (" + text(f) + ")";
		if (it->second != f)
			return who + ": full " + text(f) + "; walk-only " + text(it->second);
	}
	for (const auto &[key, w] : walk.sources)
		if (!full.sources.count(key))
			return "source " + std::get<2>(key) + " under " + std::get<0>(key) + ": only in the walk-only build (" +
			       text(w) + ")";
	return "";
}

/// The hash seed both builds key their source tables with, drawn from the
/// test's seed: a load draws its own at random (getrandom), and which sources
/// share a set, so which insert evicts and which bucket it evicts, follows
/// from it. Two builds with seeds of their own differ there whatever their
/// caches do, and a replay of the test's seed would not replay the evictions.
uint64_t table_hash_seed(uint64_t seed)
{
	uint64_t z = seed + 0x9e3779b97f4a7c15ull; // splitmix64: not the generator's stream
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct sluice_config read_config(const MapSet &maps)
{
	uint32_t zero = 0;
	struct sluice_config cfg = {};
	if (bpf_map_lookup_elem(maps.config.get(), &zero, &cfg) != 0)
		throw Error("cannot read the config map");
	return cfg;
}

void pin_cpu(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		throw std::runtime_error("cannot pin to CPU " + std::to_string(cpu));
}

/// The two builds side by side: the same table sizes and hash seed
/// (table_hash_seed), the same test clock, CPU, frames and rule changes.
class Twin {
public:
	/// Small tables: both builds' every bucket is read after every step.
	Twin(std::string test, uint64_t seed, uint32_t max_sources)
		: test_(std::move(test)), seed_(seed), full_(TableSizes{max_sources, 256, 256}, test_clock_object()),
		  walk_(TableSizes{max_sources, 256, 256}, walk_only_object())
	{
		pin_cpu(0);
		// Before any bucket is made: the tables are empty, so no bucket
		// sits where the new seed would not look for it.
		for (ProgramUnderTest *p : {&full_, &walk_}) {
			struct sluice_config cfg = read_config(p->maps());
			cfg.hash_seed = table_hash_seed(seed);
			uint32_t zero = 0;
			if (bpf_map_update_elem(p->maps().config.get(), &zero, &cfg, BPF_ANY) != 0)
				throw Error("cannot write the config map");
		}
	}
	~Twin() { pin_cpu_any(); }

	/// A rule change, applied to both: both must accept it or both refuse it.
	/// Returns true if accepted.
	bool change(const std::string &what, const std::function<void(RuleTable &)> &fn)
	{
		// Refused alike, not always in the same words: CLI11 names either
		// of two options that exclude each other.
		std::string full_err = apply(full_, fn), walk_err = apply(walk_, fn);
		note("before frame " + std::to_string(frames_) + ": " + what +
		     (full_err.empty() ? "" : " (refused: " + full_err + ")"));
		changes_ += full_err.empty();
		refused_ += !full_err.empty();
		if (full_err.empty() != walk_err.empty())
			mismatch("the change " + what + " was " + (full_err.empty() ? "accepted" : "refused: " + full_err) +
				 " by the full build, " + (walk_err.empty() ? "accepted" : "refused: " + walk_err) +
				 " by the walk-only build", {});
		else
			compare_counts({});
		return full_err.empty();
	}

	/// Runs one frame through both at `t_ns` on `cpu`; false once they differed.
	bool send(const std::vector<uint8_t> &frame, uint64_t t_ns, int cpu = 0, const std::string &what = "")
	{
		if (failed_)
			return false;
		if (cpu != cpu_) {
			pin_cpu(cpu);
			cpu_ = cpu;
		}
		if (t_ns != now_) {
			full_.set_clock(t_ns);
			walk_.set_clock(t_ns);
			now_ = t_ns;
		}
		int got_full = full_.run(frame), got_walk = walk_.run(frame);
		auto moved_full = full_.moved(), moved_walk = walk_.moved();
		frames_++;
		verdicts_[moved_full.verdict]++;
		last_frame_ = what;
		if (got_full != got_walk || moved_full.verdict != moved_walk.verdict)
			mismatch(std::string("verdicts differ: full ") + xdp_name(got_full) + " " + moved_full.verdict +
					 ", walk-only " + xdp_name(got_walk) + " " + moved_walk.verdict,
				 frame);
		else if (std::string g = global_difference(read_global(full_), read_global(walk_)); !g.empty())
			mismatch("counters differ after it: " + g, frame);
		else
			last_ = frame;
		return !failed_;
	}

	/// The end of a step (a send, a burst at one clock reading): every
	/// counter, per rule and per source too, compared.
	void step()
	{
		if (!failed_)
			compare_counts(last_, "at the end of the step this frame ended (frames since the last change or step)");
	}

	/// A grant of `ticks` (negative: refill withheld) to every cluster
	/// rule's bucket of `src`, written to both builds as the cluster sync
	/// writes it (each build's own way and record, each its own ledger);
	/// how many grants were written to the full build.
	int grant(const std::string &src, int64_t ticks)
	{
		Cidr host = parse_cidr(src);
		int written = 0;
		for (ProgramUnderTest *p : {&full_, &walk_}) {
			struct sluice_config cfg = read_config(p->maps());
			std::vector<struct sluice_grant_key> keys;
			std::vector<struct sluice_grant> grants;
			for (const auto &r : RuleTable(p->maps()).list()) {
				if (r.spec.scope != Scope::cluster || r.spec.cidr.family != host.family)
					continue;
				std::array<uint8_t, 16> addr = host.addr;
				mask_address(addr, r.spec.bucket_prefix());
				uint32_t id = r.bucket_id ? r.bucket_id : r.id;
				auto place = host.family == 4
						     ? SourceTable4(p->maps().src4.get()).grant_place(id, addr.data(), cfg.hash_seed)
						     : SourceTable6(p->maps().src6.get()).grant_place(id, addr.data(), cfg.hash_seed);
				if (!place)
					continue;
				taken_ += p == &full_ && place->taken != 0;
				keys.push_back(place->key);
				grants.push_back(ledgers_[{p == &walk_, std::to_string(id) + " " + src}].grant(
					place->name, place->taken, ticks));
			}
			if (!keys.empty())
				write_grants(p->maps().grants.get(), keys, grants);
			if (p == &full_)
				written = static_cast<int>(keys.size());
		}
		grants_ += written;
		note("before frame " + std::to_string(frames_) + ": " + std::to_string(written) + " grants of " +
		     std::to_string(ticks) + " ticks to " + src);
		return written;
	}

	bool failed() const { return failed_; }
	uint64_t frames() const { return frames_; }
	uint64_t grants() const { return grants_; }
	/// Grants written to buckets that had taken one before (full build).
	uint64_t grants_taken() const { return taken_; }
	uint64_t now() const { return now_; }
	const MapSet &maps() const { return full_.maps(); }
	/// The full build's and the walk-only build's hash seeds, as loaded.
	std::pair<uint64_t, uint64_t> hash_seeds() const
	{
		return {read_config(full_.maps()).hash_seed, read_config(walk_.maps()).hash_seed};
	}
	/// Buckets the full build evicted so far.
	uint64_t evicted() const
	{
		return collect_stats(full_.maps(), {0, ""}).global[SLUICE_CNT_INFO_EVICTED].packets;
	}

	/// Frames, changes and verdicts: what the run covered.
	/// How many frames got verdict counter `name` (the two builds agree on each).
	uint64_t verdicts(const std::string &name) const
	{
		auto it = verdicts_.find(name);
		return it == verdicts_.end() ? 0 : it->second;
	}

	void summary(double seconds) const
	{
		std::printf("%s: %llu frames, %llu rule changes (%llu refused by both), %llu grants (%llu to buckets that "
			    "had taken one) in %.1f s (%.1f s comparing counters); verdicts:",
			    test_.c_str(), (unsigned long long)frames_, (unsigned long long)changes_,
			    (unsigned long long)refused_, (unsigned long long)grants_, (unsigned long long)taken_, seconds,
			    compare_s_);
		for (const auto &[name, n] : verdicts_)
			std::printf(" %s %llu", name.c_str(), (unsigned long long)n);
		Stats st = collect_stats(full_.maps(), {0, ""});
		std::printf("\n%s: full build: %llu buckets made, %llu evicted\n", test_.c_str(),
			    (unsigned long long)st.global[SLUICE_CNT_INFO_NEW_BUCKET].packets,
			    (unsigned long long)st.global[SLUICE_CNT_INFO_EVICTED].packets);
	}

private:
	static std::string apply(ProgramUnderTest &p, const std::function<void(RuleTable &)> &fn)
	{
		try {
			RuleTable table(p.maps()); // afresh, as each CLI call opens it
			fn(table);
			return "";
		} catch (const std::exception &e) {
			return e.what();
		}
	}

	static void pin_cpu_any()
	{
		cpu_set_t set;
		CPU_ZERO(&set);
		for (int i = 0; i < CPU_SETSIZE; i++)
			CPU_SET(i, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}

	void note(std::string event)
	{
		history_.push_back(std::move(event));
		if (history_.size() > 30)
			history_.pop_front();
	}

	void compare_counts(const std::vector<uint8_t> &frame, const std::string &when = "after it")
	{
		auto start = std::chrono::steady_clock::now();
		std::string diff = first_difference(read_counts(full_), read_counts(walk_));
		compare_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
		if (!diff.empty())
			mismatch("counters differ " + when + ": " + diff, frame);
	}

	static std::string rules_text(const ProgramUnderTest &p)
	{
		std::string out;
		for (const auto &r : RuleTable(p.maps()).list())
			out += "\n    " + r.spec.name + " (id " + std::to_string(r.id) + "): " + describe_rule(r.spec);
		return out.empty() ? "\n    (none)" : out;
	}

	void mismatch(const std::string &what, const std::vector<uint8_t> &frame)
	{
		failed_ = true;
		std::ostringstream s;
		s << test_ << ": the caches disagree with the walk at frame " << frames_ - (frame.empty() ? 0 : 1)
		  << " (seed " << seed_ << "; replay with SLUICE_WALK_SEED=" << seed_ << "), clock " << now_ << " ns, CPU "
		  << cpu_ << ":\n  " << what;
		if (!frame.empty())
			s << "\n  the frame: " << last_frame_ << "\n" << hex_dump(frame);
		s << "\n  rules (full build):" << rules_text(full_) << "\n  rules (walk-only build):" << rules_text(walk_)
		  << "\n  the last changes:";
		for (const auto &h : history_)
			s << "\n    " << h;
		ADD_FAILURE() << s.str();
	}

	std::string test_;
	uint64_t seed_;
	ProgramUnderTest full_, walk_;
	uint64_t now_ = 0, frames_ = 0, changes_ = 0, refused_ = 0, grants_ = 0, taken_ = 0;
	std::map<std::pair<bool, std::string>, GrantLedger> ledgers_; ///< per build, per bucket
	int cpu_ = 0;
	bool failed_ = false;
	std::string last_frame_;
	std::vector<uint8_t> last_; ///< the last frame sent
	std::deque<std::string> history_;
	std::map<std::string, uint64_t> verdicts_;
	double compare_s_ = 0;
};

/// Where the generated traffic comes from: IPv4 10.1-4.0-1.1-5 (the corpus
/// roles' networks, the traces' 10.0.0.x) and IPv6 2001:db8:1-4:0-1::1-5.
std::string pool_source(std::mt19937_64 &rng, bool v6)
{
	auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
	if (!v6)
		return "10." + std::to_string(pick(5)) + "." + std::to_string(pick(2)) + "." + std::to_string(1 + pick(5));
	char buf[64];
	std::snprintf(buf, sizeof(buf), "2001:db8:%d:%d::%d", pick(5), pick(2), 1 + pick(5));
	return buf;
}

/// The values the generated rule lines give each option: prefixes over
/// pool_source's networks (hosts, and /25 and /30 over them, so that a /24 of
/// the IPv4 table goes from a compact bitmap to a full block and back as
/// rules come and go), and values the program takes.
OptionValues walk_values()
{
	OptionValues v = {
		{"CIDR",
		 {"0.0.0.0/0", "10.0.0.0/8", "10.0.0.0/16", "10.0.0.0/24", "10.0.0.1/32", "10.1.0.0/16", "10.2.0.0/16",
		  "10.3.0.0/16", "10.4.0.0/16", "10.1.0.0/24", "10.1.1.0/24", "10.3.0.0/24", "10.2.0.3/32",
		  "10.1.0.1/32", "10.4.1.4/32", "10.0.0.3/32", "10.0.0.0/25", "10.1.0.0/30", "::/0", "2001:db8::/32", "2001:db8:1::/48", "2001:db8:2::/48",
		  "2001:db8:3::/48", "2001:db8:4::/48", "2001:db8:1::/64", "2001:db8:3:1::/64", "2001:db8:2::2/128",
		  "2001:db8:1:1::/64"}},
		{"--rate",
		 {"1/s", "10/s", "100/s", "1000/s", "100000/s", "5/min", "1/h", "100/10s", "3/100ms", "10kbit/s",
		  "1kB/s", "1MB/s", "100kB/10s"}},
		{"--fallback", {"1/s", "50/s", "5/min", "1kB/s", "0"}},
		{"--burst", {"1", "2", "3", "5", "20", "100", "1500", "64kB", "0"}},
		{"--proto", {"tcp", "udp", "icmp"}},
		{"--dport", {"53", "80", "22", "123", "1000-2000", "0-1023", "5353"}},
		{"--sport", {"123", "11211", "40000", "1024-65535", "0-1023", "40000-40003"}},
		{"--tcp-flags", {"syn,ack=syn", "syn=syn", "rst=rst", "ack=ack", "fin,syn,rst,ack=ack", "all=none"}},
		{"--ban", {"1s", "10s", "1min", "1h", "0"}},
		{"--ban-after", {"1", "2", "3", "5"}},
		{"--per", {"0", "8", "16", "24", "28", "32", "48", "56", "64", "128"}},
		{"--warmup", {"0", "200ms", "1s", "30s"}},
		{"--algo", algo_names()},
		{"--scope", scope_names()},
	};
	for (int i = 0; i < 1000; i++)
		v["--name"].push_back("renamed" + std::to_string(i));
	return v;
}

const OptionChances ADD_CHANCES{25, {{"--rate", 85}, {"--allow", 10}, {"--deny", 10}}};
const OptionChances SET_CHANCES{20, {}};

/// `rule add LINE`, as the CLI does it.
std::function<void(RuleTable &)> add_rule(const std::string &line)
{
	return [line](RuleTable &t) {
		auto spec = parse_rule_line(line);
		if (!spec)
			throw Error("an empty line");
		t.add(*spec);
	};
}

/// `rule set KEY LINE`, as the CLI does it.
std::function<void(RuleTable &)> set_rule(const std::string &key, const std::string &line)
{
	return [key, line](RuleTable &t) {
		CLI::App app;
		RuleEditArgs a;
		add_edit_options(&app, a);
		try {
			app.parse(line, false);
		} catch (const CLI::ParseError &e) {
			throw Error(e.what());
		}
		InstalledRule was = t.find(key);
		t.edit(key, to_edit(a, app, was.spec.rate.counts_bytes()));
	};
}

/// One random change between frames: add (half of them), set or delete.
void random_change(Twin &twin, RuleLines &lines, int &next_name)
{
	std::vector<InstalledRule> rules = RuleTable(twin.maps()).list();
	size_t roll = lines.below(100);
	if (rules.empty() || roll < 45 || (rules.size() < 4 && roll < 70)) {
		std::string name = "g" + std::to_string(next_name++);
		std::string line = lines.add_line(ADD_CHANCES, name);
		twin.change("rule add" + line, add_rule(line));
		return;
	}
	const std::string key = rules[lines.below(rules.size())].spec.name;
	if (roll < 85 || rules.size() < 3) {
		std::string line = lines.set_line(SET_CHANCES);
		twin.change("rule set " + key + line, set_rule(key, line));
	} else {
		twin.change("rule del " + key, [key](RuleTable &t) { t.remove(key); });
	}
}

/// The next clock reading: often the same tick (where the memo answers),
/// else microseconds, milliseconds or seconds later.
uint64_t advance(uint64_t now, RuleLines &g)
{
	size_t roll = g.below(100);
	if (roll < 50)
		return now;
	if (roll < 80)
		return now + 1000 * (1 + g.below(1000));
	if (roll < 96)
		return now + 1000000 * (1 + g.below(1000));
	return now + 1000000000ull * (1 + g.below(100));
}

/// The fuzz corpus's `rule import` lines, their CIDR replaced by one of the
/// generator's (so that the traffic meets them) and their name dropped.
std::vector<std::string> corpus_rule_lines(RuleLines &g)
{
	std::vector<std::string> out;
	for (const auto &entry : std::filesystem::directory_iterator(SLUICE_FUZZ_CORPUS "/rule_line")) {
		std::ifstream in(entry.path());
		for (std::string line; std::getline(in, line);) {
			std::istringstream words(line);
			std::string first, rest, w;
			if (!(words >> first) || first[0] == '#')
				continue;
			while (words >> w) {
				if (w == "--name")
					words >> w; // the test names its rules
				else if (w.rfind("--name=", 0) != 0)
					rest += " " + w;
			}
			out.push_back(g.value_for("CIDR") + rest);
		}
	}
	std::sort(out.begin(), out.end());
	return out;
}

double since(std::chrono::steady_clock::time_point start)
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// What each test starts from: root, its seed (printed; SLUICE_WALK_SEED
/// replays it), the rule-line generator drawn from it, and the time its
/// summary counts from. Each test makes its own Twin, with the table size it
/// needs.
class WalkOnly : public ::testing::Test {
protected:
	void SetUp() override { ASSERT_EQ(geteuid(), 0u) << "loads the real XDP program: run as root"; }

	const ::testing::TestInfo &info = *::testing::UnitTest::GetInstance()->current_test_info();
	const std::string test_name = std::string(info.test_suite_name()) + "." + info.name();
	const uint64_t seed = seed_for(test_name.c_str());
	const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
	std::mt19937_64 rng{seed};
	RuleLines g{rng, walk_values()};

	/// `p`, given a payload of 64 to 263 bytes, as a datagram of three
	/// fragments: shuffled 30 % of the time, the list's first left out 15 %.
	Frames fragmented(PacketSpec &p)
	{
		p.payload = 64 + g.below(200);
		size_t len = fragmentable_length(p);
		Frames frames = build_fragments(p, {{0, 24, true}, {24, 24, true}, {48, len - 48, false}});
		if (g.chance(30))
			std::shuffle(frames.begin(), frames.end(), rng);
		if (g.chance(15))
			frames.erase(frames.begin());
		return frames;
	}

	/// The corpus run of tests (a) and (e), on source tables of `max_sources`
	/// (each family): at least `min_evicted` buckets evicted by the end.
	void corpus_shapes_agree(uint32_t max_sources, uint64_t min_evicted)
	{
		Twin twin(test_name, seed, max_sources);
		for (const auto &r : role_rules()) {
			std::string line = std::string(r.cidr) + " --name " + r.name;
			if (r.action == ModelRule::Action::limit)
				line += std::string(" --rate ") + r.rate + " --burst " + std::to_string(r.burst);
			else
				line += r.action == ModelRule::Action::allow ? " --allow" : " --deny";
			if (r.proto)
				line += std::string(" --proto ") +
					(r.proto == 6 ? "tcp" : r.proto == 17 ? "udp" : "icmp");
			if (r.port)
				line += " --dport " + std::to_string(r.port);
			if (r.sport)
				line += " --sport " + std::to_string(r.sport);
			if (r.flags_mask)
				line += " --tcp-flags " + format_tcp_flags({r.flags_mask, r.flags_value});
			ASSERT_TRUE(twin.change("rule add " + line, add_rule(line))) << line;
		}
		int next_name = 0;
		size_t accepted = 0;
		std::vector<std::string> corpus = corpus_rule_lines(g);
		for (const auto &line : corpus) {
			std::string named = line + " --name c" + std::to_string(next_name++);
			accepted += twin.change("rule add " + named, add_rule(named));
		}
		std::printf("corpus: %zu of the fuzz corpus's %zu rule lines accepted\n", accepted, corpus.size());

		uint64_t now = TRACE_START_NS;
		const auto &shapes = corpus_shapes();
		for (size_t i = 0; i < shapes.size() && !twin.failed(); i++)
			for (Role role : ALL_ROLES) {
				const std::string src = role_source(role, static_cast<int>(i % 8), shapes[i].v6);
				Frames frames = shapes[i].frames(src, "");
				for (int rep = 0; rep < shapes[i].repeat; rep++) {
					if (g.chance(5))
						random_change(twin, g, next_name);
					now = advance(now, g);
					for (size_t f = 0; f < frames.size(); f++)
						twin.send(frames[f], now, 0,
							  shapes[i].name + " from " + role_name(role) + ", send " +
								  std::to_string(rep) + ", frame " + std::to_string(f));
				}
				twin.step();
			}
		twin.summary(since(start));
		EXPECT_TRUE(twin.failed() || twin.frames() > 2000u) << twin.frames() << " frames";
		EXPECT_TRUE(twin.failed() || twin.evicted() >= min_evicted)
			<< twin.evicted() << " buckets evicted, fewer than " << min_evicted;
	}
};

} // namespace

// (a) The corpus: every shape of corpus_shapes() from each of the four
// roles (their rules installed, with the fuzz corpus's rule lines), each
// send repeated at one clock reading (where the drop memo answers), with a
// random rule change before 1 send in 20. Tables of 512 sources a family,
// which the run seldom fills.
TEST_F(WalkOnly, CorpusShapesAgree)
{
	corpus_shapes_agree(512, 0);
}

// (e) The same on tables of 16 sources a family (four sets), which every
// seed's rules overflow: a third to nine tenths of the buckets made evict
// one (36 to 867 evictions over the seeds tried), chosen by the keyed hash
// and the ways' ranks, and a source evicted comes back to a new bucket. The
// caches must evict as the walk does.
TEST_F(WalkOnly, CorpusShapesAgreeWhileTheTablesEvict)
{
	corpus_shapes_agree(16, 20);
}

// (f) The two builds key their source tables with one hash seed, drawn from
// the test's seed: what a run evicts is the same in both, and a replay of
// the seed replays it.
TEST_F(WalkOnly, BuildsShareTheHashSeedOfTheTestSeed)
{
	Twin first(test_name, seed, 16);
	const auto [full, walk] = first.hash_seeds();
	EXPECT_EQ(full, walk) << "the full build's hash seed is not the walk-only build's";
	Twin again(test_name, seed, 16);
	EXPECT_EQ(again.hash_seeds().first, full) << "a replay of seed " << seed << " keys its tables otherwise";
	Twin other(test_name, seed + 1, 16);
	EXPECT_NE(other.hash_seeds().first, full) << "seeds " << seed << " and " << seed + 1 << " share a hash seed";
}

// (b) Replayed traces (replay.h): for every algorithm in turn, a rule over
// the traces' sources at a random rate (the rules flushed between
// algorithms), and each trace replayed at its own CPUs and its times read as
// a coarse clock of 4 ms ticks would read them (so the drop memo answers
// within a tick), with a random rule change before 1 frame in 200 and
// every counter compared every 10 frames.
TEST_F(WalkOnly, ReplayedTracesAgree)
{
	const int cpus = std::min(2, libbpf_num_possible_cpus());
	const uint64_t tick_ns = 4000000;
	Twin twin(test_name, seed, 512);
	int next_name = 0;
	uint64_t base = TRACE_START_NS;
	for (int a = 0; a < 256 && !twin.failed(); a++) {
		std::string algo(algo_name(static_cast<Algo>(a)));
		if (algo == "unknown")
			continue;
		twin.change("rule flush", [](RuleTable &t) { t.flush(); });
		// A rate the algorithm takes, packets or bytes.
		bool added = false;
		for (int tries = 0; tries < 100 && !added; tries++) {
			std::string line = "10.0.0.0/8 --name trace --algo " + algo + " --rate " + g.value_for("--rate");
			if (g.chance(50))
				line += " --burst " + g.value_for("--burst");
			added = twin.change("rule add " + line, add_rule(line));
		}
		ASSERT_TRUE(added) << algo;
		const std::vector<std::pair<std::string, Trace>> traces = {
			{"constant flood", constant_flood(4000, 100000000, 4)},
			{"on-off", on_off(10000, 20000000, 100000000, 3)},
			{"boundary attack", boundary_attack(40, 1000000000, 10000000, 2)},
			{"poisson", poisson(2000, 150000000, seed)},
			{"two CPUs", two_cpus(4000, 50000000)},
		};
		for (const auto &[name, trace] : traces) {
			for (size_t i = 0; i < trace.size() && !twin.failed(); i++) {
				const Arrival &arr = trace[i];
				if (g.chance(1) && g.chance(50))
					random_change(twin, g, next_name);
				uint64_t t = base + (arr.t_ns - TRACE_START_NS) / tick_ns * tick_ns;
				twin.send(build_packet({.src = source_address(arr.source), .payload = arr.payload}),
					  std::max(t, twin.now()), arr.cpu % cpus,
					  algo + ": " + name + " arrival " + std::to_string(i));
				if (i % 10 == 9)
					twin.step();
			}
			twin.step();
			base = twin.now() + 1000000000ull; // the next trace starts later, on the same buckets
		}
	}
	twin.summary(since(start));
}

// (c) Generated traffic: plain packets of every protocol, fragmented
// datagrams (in order, reordered, first missing) and corpus shapes, from
// sources of both families that the generated rules cover, sent in bursts at
// one clock reading, with a random rule change (add, set of any option, del)
// before 1 burst in 4 and before 15 % of the repeats inside a burst.
TEST_F(WalkOnly, GeneratedMixesWithRuleChangesAgree)
{
	Twin twin(test_name, seed, 256);
	const auto &shapes = corpus_shapes();
	int next_name = 0;
	uint64_t now = TRACE_START_NS;
	const int bursts = 2500;
	std::string last_src;
	for (int b = 0; b < bursts && !twin.failed(); b++) {
		if (b < 8 || g.chance(25))
			random_change(twin, g, next_name);
		now = advance(now, g);
		// Often the last burst's source again: what the memo and the buckets hold.
		const bool again = !last_src.empty() && g.chance(30);
		const bool v6 = again ? last_src.find(':') != std::string::npos : g.chance(35);
		const std::string src = again ? last_src : pool_source(rng, v6);
		last_src = src;
		Frames frames;
		std::string what;
		size_t kind = g.below(100);
		static const uint8_t protos4[] = {17, 6, 1}, protos6[] = {17, 6, 58};
		static const uint16_t ports[] = {53, 80, 22, 123, 1500, 5353, 0};
		static const uint16_t sports[] = {40000, 40001, 40003, 123, 11211, 1000, 0};
		static const uint8_t flags[] = {0x02, 0x12, 0x10, 0x18, 0x04, 0x11, 0x00};
		PacketSpec p{.src = src,
			     .proto = v6 ? protos6[g.below(3)] : protos4[g.below(3)],
			     .dport = ports[g.below(std::size(ports))],
			     .tcp_flags = flags[g.below(std::size(flags))],
			     .frag_id = static_cast<uint32_t>(1 + g.below(50)),
			     .payload = g.chance(50) ? 32 : g.below(1400)};
		if (p.dport == 0)
			p.dport = static_cast<uint16_t>(g.below(65536));
		p.sport = sports[g.below(std::size(sports))];
		if (p.sport == 0)
			p.sport = static_cast<uint16_t>(g.below(65536));
		if (kind < 55) {
			frames = {build_packet(p)};
			what = "packet";
		} else if (kind < 75) {
			frames = fragmented(p);
			what = "fragments";
		} else {
			const Shape *s = nullptr;
			while (!s || s->v6 != v6)
				s = &shapes[g.below(shapes.size())];
			frames = s->frames(src, "");
			what = "shape " + s->name;
		}
		what += " from " + src + " proto " + std::to_string(p.proto) + " sport " + std::to_string(p.sport) +
			" dport " + std::to_string(p.dport) + " flags " + std::to_string(p.tcp_flags);
		const size_t repeat = 1 + g.below(6);
		for (size_t r = 0; r < repeat && !twin.failed(); r++) {
			// A change inside the burst, at the same clock reading: what
			// the memo remembered must not outlive the rules it was decided on.
			if (r > 0 && g.chance(15))
				random_change(twin, g, next_name);
			// A grant to the source's cluster buckets, before the burst or
			// inside it: credit or withheld refill of up to 2 s.
			if (g.chance(r == 0 ? 20 : 10)) {
				int64_t ticks = int64_t(1000000 * (1 + g.below(2000))) << SLUICE_TICK_SHIFT;
				twin.grant(src, g.chance(40) ? -ticks : ticks);
			}
			// A plain packet's repeats change protocol, ports, flags or
			// length now and then: a SYN's drop says nothing of the ACK.
			if (kind < 55 && r > 0 && g.chance(30)) {
				p.proto = v6 ? protos6[g.below(3)] : protos4[g.below(3)];
				p.dport = ports[g.below(std::size(ports) - 1)];
				if (g.chance(50))
					p.sport = sports[g.below(std::size(sports) - 1)];
				if (g.chance(50))
					p.tcp_flags = flags[g.below(std::size(flags))];
				p.payload = g.below(1400);
				frames = {build_packet(p)};
				what += "; then proto " + std::to_string(p.proto) + " sport " + std::to_string(p.sport) +
					" dport " + std::to_string(p.dport) + " flags " + std::to_string(p.tcp_flags) +
					" payload " + std::to_string(p.payload);
			}
			for (size_t f = 0; f < frames.size(); f++)
				twin.send(frames[f], now, 0, what + ", send " + std::to_string(r) + ", frame " + std::to_string(f));
		}
		twin.step();
	}
	// Rules with --ban are generated, and sources come back: on most seeds
	// the mix makes bans that decide frames, not on every one (3581233780
	// made none). So, after the mix and whatever it left in the caches:
	// every rule deleted (lifting their bans), a rule that bans a source at
	// its first drop off probation, and that source: a frame, then frames 2 s
	// later (it returned after its first second: settled), in both builds.
	for (const auto &r : RuleTable(twin.maps()).list())
		twin.change("rule del " + r.spec.name, [key = r.spec.name](RuleTable &t) { t.remove(key); });
	const std::string ban_line = "10.9.9.9/32 --name banning --rate 1/s --burst 1 --ban 1min --ban-after 1";
	EXPECT_TRUE(twin.change("rule add " + ban_line, add_rule(ban_line)));
	for (int f = 0; f < 6; f++) {
		now += f < 2 ? 2000000000ull : 0;
		twin.send(build_packet({.src = "10.9.9.9"}), now, 0, "the banning rule's source, frame " + std::to_string(f));
	}
	twin.step();
	// The same for grants (3907604871 gave none to a bucket that had taken
	// one): a cluster rule's source, a grant before each of its frames, so
	// that the later grants go to a bucket that took the one before.
	const std::string cluster_line = "10.9.9.10/32 --name shared --rate 1/s --burst 5 --scope cluster";
	EXPECT_TRUE(twin.change("rule add " + cluster_line, add_rule(cluster_line)));
	for (int f = 0; f < 4; f++) {
		if (f > 0)
			twin.grant("10.9.9.10", int64_t(1000000) << SLUICE_TICK_SHIFT);
		twin.send(build_packet({.src = "10.9.9.10"}), now, 0, "the cluster rule's source, frame " + std::to_string(f));
	}
	twin.step();
	twin.summary(since(start));
	EXPECT_TRUE(twin.failed() || twin.frames() > 5000u) << twin.frames() << " frames";
	EXPECT_TRUE(twin.failed() || twin.verdicts("drop_ban") > 0u) << "no frame was dropped by a ban";
	// Cluster buckets are generated and take grants (18 to 84 a run over the seeds tried).
	EXPECT_TRUE(twin.failed() || (twin.grants() > 5u && twin.grants_taken() > 0u))
		<< twin.grants() << " grants, " << twin.grants_taken() << " to buckets that had taken one";
}

// (d) Rules on TCP flags and source ports under the drop memo: generated
// rules that select flags (--syn, --tcp-flags) or source ports (--sport),
// most of them limits a few packets exceed, and bursts at one clock reading
// from one source whose packets change only what those rules read: its SYNs
// dropped, then its ACKs, SYN-ACKs and RSTs, a header cut before its flags
// (ports shown, flags hidden), another source port, the same again, and its
// datagram in fragments (the later ones take the first's flags and port);
// IPv4 and IPv6, with a rule change (of any option) before 1 burst in 5 and
// inside bursts now and then. The memo remembers the drops of the rules on
// flags and ports: each such packet must be decided as the walk decides it.
TEST_F(WalkOnly, SelectorRulesUnderTheMemoAgree)
{
	// Tables the run does not fill: which bucket an insert evicts is not
	// what this test is about ((e) is).
	Twin twin(test_name, seed, 8192);
	auto pick = [&](std::initializer_list<const char *> values) {
		return std::string(values.begin()[g.below(values.size())]);
	};
	// A rule on flags or a source port, over the pool's sources.
	auto selector_line = [&](const std::string &name) {
		std::string line = g.value_for("CIDR") + " --name " + name;
		size_t action = g.below(100);
		if (action < 70)
			line += " --rate " + pick({"1/h", "1/s", "5/min", "10/s", "100/s", "1kB/s"}) + " --burst " +
				pick({"1", "2", "3", "5"});
		else
			line += action < 90 ? " --deny" : " --allow";
		const bool tcp = g.chance(75);
		line += tcp ? " --proto tcp" : " --proto udp";
		if (tcp && g.chance(80))
			line += g.chance(50) ? " --syn" : " --tcp-flags " + g.value_for("--tcp-flags");
		if (g.chance(tcp ? 35 : 85))
			line += " --sport " + g.value_for("--sport");
		if (g.chance(40))
			line += " --dport " + pick({"22", "80", "53", "0-1023"});
		if (g.chance(20))
			line += " --per " + g.value_for("--per");
		if (g.chance(25))
			line += " --algo " + g.value_for("--algo");
		if (g.chance(5))
			line += " --ban " + pick({"1s", "10s"});
		return line;
	};
	int next_name = 0;
	auto add_selector_rule = [&] {
		std::string line = selector_line("s" + std::to_string(next_name++));
		twin.change("rule add " + line, add_rule(line));
	};
	for (int i = 0; i < 12; i++)
		add_selector_rule();

	static const uint8_t flags[] = {0x02, 0x10, 0x12, 0x18, 0x04, 0x11, 0x14, 0x00, 0xc2};
	static const uint16_t sports[] = {40000, 40001, 40003, 123, 11211, 1000};
	static const uint16_t dports[] = {22, 80, 53, 123};
	uint64_t now = TRACE_START_NS;
	for (int b = 0; b < 1500 && !twin.failed(); b++) {
		if (g.chance(20)) {
			if (g.chance(60))
				add_selector_rule();
			else
				random_change(twin, g, next_name);
		}
		now = advance(now, g);
		const bool v6 = g.chance(35);
		const std::string src = pool_source(rng, v6);
		PacketSpec base{.src = src,
				.proto = static_cast<uint8_t>(g.chance(75) ? 6 : 17),
				.dport = dports[g.below(std::size(dports))],
				.tcp_flags = 0x02,
				.frag_id = static_cast<uint32_t>(1 + g.below(50)),
				.payload = g.chance(70) ? 0 : g.below(600)};
		base.sport = sports[g.below(std::size(sports))];
		// A few of the base packet first (the memo learns the drop), then
		// one change of what the selectors read at a time, and back.
		const size_t length = 4 + g.below(12);
		for (size_t k = 0; k < length && !twin.failed(); k++) {
			if (k > 0 && g.chance(5))
				random_change(twin, g, next_name);
			PacketSpec p = base;
			Frames frames;
			std::string what;
			size_t kind = k < 3 ? 0 : g.below(100);
			if (kind < 35) {
				what = "the base packet";
			} else if (kind < 60) {
				p.tcp_flags = flags[g.below(std::size(flags))];
				what = "flags " + std::to_string(p.tcp_flags);
			} else if (kind < 75) {
				p.sport = sports[g.below(std::size(sports))];
				what = "sport " + std::to_string(p.sport);
			} else if (kind < 85) {
				p.l4_bytes = 4 + static_cast<int>(g.below(10)); // ports shown, TCP flags hidden
				p.payload = 0;
				what = "transport header cut at " + std::to_string(p.l4_bytes);
			} else if (kind < 92) {
				p.payload = g.below(1400);
				what = "payload " + std::to_string(p.payload);
			} else {
				frames = fragmented(p);
				what = "fragments";
			}
			if (frames.empty())
				frames = {build_packet(p)};
			what += " (of proto " + std::to_string(base.proto) + " from " + src + " sport " +
				std::to_string(base.sport) + " dport " + std::to_string(base.dport) + " flags " +
				std::to_string(base.tcp_flags) + ")";
			for (size_t f = 0; f < frames.size(); f++)
				twin.send(frames[f], now, 0,
					  what + ", burst " + std::to_string(b) + " packet " + std::to_string(k) + " frame " +
						  std::to_string(f));
		}
		twin.step();
	}
	twin.summary(since(start));
	EXPECT_TRUE(twin.failed() || twin.frames() > 8000u) << twin.frames() << " frames";
	EXPECT_TRUE(twin.failed() || twin.verdicts("drop_rate") > 1000u) << "the selector rules' limits drop";
}
