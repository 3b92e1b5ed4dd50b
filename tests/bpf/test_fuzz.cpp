// SPDX-License-Identifier: GPL-2.0-only
// A mutation fuzzer through BPF_PROG_TEST_RUN: the corpus's frames from the
// four roles, mutated (bit flips, truncation, appended bytes, header fields,
// inserted or removed VLAN tags and IPv6 extension headers, fragment fields,
// ports, sources), run against the real program for SLUICE_FUZZ_SECONDS
// (default 60). The oracle's own parser says what each frame is; the
// invariants must hold on every frame:
//   - every frame lands in exactly one verdict counter;
//   - a frame that is not IP passes;
//   - a frame the stack drops as malformed is dropped (drop_malformed) if its
//     source can be read and a rule covers it, and passes otherwise, as the
//     oracle says;
//   - an IP frame from a denied source is dropped;
//   - an IP frame from a source no rule covers passes, unless it has more than
//     8 VLAN tags;
//   - allowed traffic (every selector known, an allow rule matches) passes;
//   - a limited source passes at most its burst (rates of 1-2/h: no refill
//     during the run), and a port-scoped source at most its two limits' bursts
//     of what those limits must charge.
// The first violating frame is printed in hex with the seed, the shape and the
// mutations that made it; SLUICE_FUZZ_SEED replays a run, SLUICE_FUZZ_TRACE=ADDR
// prints every frame from one source.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <random>
#include <set>
#include <sstream>

#include "adversarial.h"
#include "corpus_shapes.h"

using namespace sluice;
using namespace sluice::test;

namespace {

using Clock = std::chrono::steady_clock;

/// Where the IP header starts (after up to 12 tags) and its EtherType.
struct L3At {
	size_t off = 0;
	uint16_t type = 0;
};

L3At locate(const std::vector<uint8_t> &f)
{
	L3At at;
	if (f.size() < 14)
		return at;
	size_t off = 12;
	uint16_t type = static_cast<uint16_t>(f[12] << 8 | f[13]);
	for (int i = 0; i < 12 && (type == 0x8100 || type == 0x88a8) && off + 8 <= f.size(); i++) {
		off += 4;
		type = static_cast<uint16_t>(f[off] << 8 | f[off + 1]);
	}
	at.off = off + 2;
	at.type = type;
	return at;
}

void set16(std::vector<uint8_t> &f, size_t at, uint16_t v)
{
	if (at + 2 <= f.size()) {
		f[at] = v >> 8;
		f[at + 1] = v & 0xff;
	}
}

class Mutator {
public:
	explicit Mutator(uint64_t seed) : rng_(seed) {}

	uint32_t below(uint32_t n) { return n ? std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_) : 0; }
	bool chance(int percent) { return below(100) < static_cast<uint32_t>(percent); }

	/// Applies 1-3 mutations; appends what it did to `log`.
	void mutate(std::vector<uint8_t> &f, std::string &log)
	{
		int n = 1 + below(3);
		for (int i = 0; i < n; i++)
			one(f, log);
		if (f.size() < 14)
			f.resize(14, 0); // BPF_PROG_TEST_RUN needs an Ethernet header
	}

private:
	uint16_t interesting16()
	{
		static const uint16_t v[] = {0, 1, 4, 5, 7, 8, 19, 20, 21, 39, 40, 41, 0x7fff, 0x8000, 0xffff, 0x2000, 0x1fff};
		return chance(50) ? v[below(std::size(v))] : static_cast<uint16_t>(below(65536));
	}

	void one(std::vector<uint8_t> &f, std::string &log)
	{
		L3At l3 = locate(f);
		bool v4 = l3.type == 0x0800, v6 = l3.type == 0x86dd;
		switch (below(13)) {
		case 0: { // bit flips
			int bits = 1 + below(4);
			for (int i = 0; i < bits && !f.empty(); i++) {
				size_t at = below(static_cast<uint32_t>(f.size()));
				f[at] ^= static_cast<uint8_t>(1u << below(8));
				log += " flip@" + std::to_string(at);
			}
			break;
		}
		case 1: { // truncate
			size_t len = 14 + below(static_cast<uint32_t>(f.size() > 14 ? f.size() - 14 : 1));
			f.resize(len);
			log += " cut@" + std::to_string(len);
			break;
		}
		case 2: { // trailing bytes (padding)
			size_t n = 1 + below(64);
			uint8_t b = chance(50) ? 0 : static_cast<uint8_t>(below(256));
			f.insert(f.end(), n, b);
			log += " pad+" + std::to_string(n);
			break;
		}
		case 3: { // insert a tag
			static const uint16_t tpids[] = {0x8100, 0x88a8, 0x9100};
			uint16_t tpid = tpids[below(3)];
			uint16_t vid = chance(50) ? 0 : static_cast<uint16_t>(below(4096));
			size_t at = 12 + 4 * below(3);
			if (at > f.size())
				at = 12;
			uint8_t tag[4] = {uint8_t(tpid >> 8), uint8_t(tpid), uint8_t(vid >> 8), uint8_t(vid)};
			f.insert(f.begin() + static_cast<long>(at), tag, tag + 4);
			log += " tag" + std::to_string(tpid) + "@" + std::to_string(at);
			break;
		}
		case 4: // remove a tag
			if (f.size() >= 18 && (f[12] == 0x81 || f[12] == 0x88)) {
				f.erase(f.begin() + 12, f.begin() + 16);
				log += " untag";
			}
			break;
		case 5: // IPv4 header length / version nibble
			if (l3.off < f.size()) {
				if (chance(50)) {
					f[l3.off] = static_cast<uint8_t>((f[l3.off] & 0xf0) | below(16));
					log += " ihl=" + std::to_string(f[l3.off] & 15);
				} else {
					f[l3.off] = static_cast<uint8_t>((f[l3.off] & 0x0f) | below(16) << 4);
					log += " version=" + std::to_string(f[l3.off] >> 4);
				}
			}
			break;
		case 6: // IP length fields
			if (v4) {
				set16(f, l3.off + 2, interesting16());
				log += " totlen";
			} else if (v6) {
				set16(f, l3.off + 4, interesting16());
				log += " payloadlen";
			}
			break;
		case 7: // fragment fields
			if (v4) {
				uint16_t fr = static_cast<uint16_t>((chance(50) ? 0x2000 : 0) | (chance(50) ? 0 : below(0x2000)));
				set16(f, l3.off + 6, fr);
				if (chance(30))
					set16(f, l3.off + 4, static_cast<uint16_t>(below(4)));
				log += " frag=" + std::to_string(fr);
			} else if (v6) {
				insert_ext(f, l3, 44, log);
			}
			break;
		case 8: // the upper-layer protocol
			if (v4 && l3.off + 10 <= f.size()) {
				static const uint8_t p[] = {6, 17, 1, 58, 4, 41, 47, 50, 0, 44, 253};
				f[l3.off + 9] = p[below(std::size(p))];
				log += " proto=" + std::to_string(f[l3.off + 9]);
			} else if (v6 && l3.off + 7 <= f.size()) {
				static const uint8_t p[] = {6, 17, 58, 0, 43, 44, 50, 51, 59, 60, 253};
				f[l3.off + 6] = p[below(std::size(p))];
				log += " nexthdr=" + std::to_string(f[l3.off + 6]);
			}
			break;
		case 9: { // insert an IPv6 extension header
			static const uint8_t t[] = {0, 43, 44, 50, 51, 59, 60, 60, 60, 253};
			if (v6)
				insert_ext(f, l3, t[below(std::size(t))], log);
			break;
		}
		case 10: { // a port or TCP's flags, where an unfragmented TCP/UDP header would be
			static const uint16_t ports[] = {53, 123, 22, 80, 5353, 11211};
			static const uint8_t flags[] = {0x02, 0x12, 0x10, 0x18, 0x04, 0x14, 0x01, 0x11, 0x00, 0xff};
			size_t l4 = v4 && l3.off < f.size() ? l3.off + (f[l3.off] & 15) * 4u : v6 ? l3.off + 40 : 0;
			if (!l4)
				break;
			uint32_t which = below(3);
			if (which == 2) {
				if (l4 + 14 <= f.size()) {
					uint8_t fl = chance(80) ? flags[below(std::size(flags))] : static_cast<uint8_t>(below(256));
					f[l4 + 13] = fl;
					log += " tcpflags=" + std::to_string(fl);
				}
				break;
			}
			uint16_t port = chance(80) ? ports[below(std::size(ports))] : static_cast<uint16_t>(below(65536));
			set16(f, l4 + (which ? 0 : 2), port);
			log += (which ? " sport=" : " dport=") + std::to_string(port);
			break;
		}
		case 11: { // another source: a role's address or a neighbour of it
			if (v4 && l3.off + 16 <= f.size()) {
				f[l3.off + 12] = 10;
				f[l3.off + 13] = static_cast<uint8_t>(1 + below(5));
				f[l3.off + 15] = static_cast<uint8_t>(below(8));
				log += " src=10." + std::to_string(f[l3.off + 13]) + ".x." + std::to_string(f[l3.off + 15]);
			} else if (v6 && l3.off + 24 <= f.size()) {
				f[l3.off + 13] = static_cast<uint8_t>(1 + below(5));
				f[l3.off + 15] = static_cast<uint8_t>(below(8));
				log += " src=2001:db8:" + std::to_string(f[l3.off + 13]) + ":x" + std::to_string(f[l3.off + 15]);
			}
			break;
		}
		default: { // a random byte in the headers
			size_t lim = std::min<size_t>(f.size(), l3.off + 80);
			if (lim) {
				size_t at = below(static_cast<uint32_t>(lim));
				f[at] = static_cast<uint8_t>(below(256));
				log += " byte@" + std::to_string(at);
			}
		}
		}
	}

	/// Inserts an extension header of `type` right after the IPv6 fixed header.
	void insert_ext(std::vector<uint8_t> &f, const L3At &l3, uint8_t type, std::string &log)
	{
		if (l3.off + 40 > f.size())
			return;
		uint8_t next = f[l3.off + 6];
		std::vector<uint8_t> e;
		if (type == 44) {
			uint16_t fo = static_cast<uint16_t>((chance(50) ? 0 : (1 + below(200)) << 3) | (chance(50) ? 1 : 0));
			e = {next, 0, uint8_t(fo >> 8), uint8_t(fo), 0, 0, 0, static_cast<uint8_t>(below(4))};
		} else if (type == 51) {
			e = {next, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
		} else if (type == 50) {
			e = {0, 0, 1, 0, 0, 0, 0, 1};
		} else if (type == 59) {
			e = {};
		} else {
			e = {next, 0, 1, 4, 0, 0, 0, 0};
		}
		f.insert(f.begin() + static_cast<long>(l3.off + 40), e.begin(), e.end());
		f[l3.off + 6] = type;
		uint16_t plen = static_cast<uint16_t>(f[l3.off + 4] << 8 | f[l3.off + 5]);
		if (plen)
			set16(f, l3.off + 4, static_cast<uint16_t>(plen + e.size()));
		log += " ext" + std::to_string(type);
	}

	std::mt19937_64 rng_;
};

/// A seed frame: which shape and role it came from.
struct Seed {
	std::vector<uint8_t> frame;
	std::string origin;
};

std::vector<Seed> seed_frames()
{
	std::vector<Seed> seeds;
	const auto &shapes = corpus_shapes();
	for (size_t i = 0; i < shapes.size(); i++)
		for (Role role : ALL_ROLES) {
			// Sources from a small pool per role, each in its own /64 for IPv6.
			int host = static_cast<int>(i % 8);
			Frames frames = shapes[i].frames(role_source(role, 1000 + host, shapes[i].v6), "");
			for (auto &f : frames)
				if (f.size() >= 14)
					seeds.push_back({std::move(f), shapes[i].name + " from " + role_name(role)});
		}
	return seeds;
}

std::string port_name_of(uint8_t proto, uint16_t port)
{
	return std::string(proto == 6 ? "tcp/" : "udp/") + std::to_string(port);
}

double env_seconds()
{
	const char *s = std::getenv("SLUICE_FUZZ_SECONDS");
	return s ? std::atof(s) : 60.0;
}

} // namespace

TEST(Fuzz, MutatedFramesKeepTheInvariants)
{
	ASSERT_EQ(geteuid(), 0u) << "the fuzzer loads the real XDP program and must run as root";
	const double seconds = env_seconds();
	const char *seed_text = std::getenv("SLUICE_FUZZ_SEED");
	const uint64_t seed = seed_text ? std::strtoull(seed_text, nullptr, 0) : std::random_device{}();
	std::printf("fuzz: seed %llu, %.0f s (replay with SLUICE_FUZZ_SEED=%llu SLUICE_FUZZ_SECONDS=%.0f)\n",
		    (unsigned long long)seed, seconds, (unsigned long long)seed, seconds);

	ProgramUnderTest put(1u << 18); // room for every source the mutations make: no eviction
	put.add_roles();
	const std::vector<Seed> seeds = seed_frames();
	const char *trace = std::getenv("SLUICE_FUZZ_TRACE"); // a source address: print its every frame
	Mutator mut(seed);

	// Later fragments are judged by what the program remembered of their first:
	// the fuzzer tracks that from the program's own passes, with their age.
	std::map<Oracle::FragKey, Clock::time_point> remembered;
	std::map<std::string, uint64_t> limited_passes, charged_passes;
	std::map<std::string, std::string> pass_history; // a source's passes: their counters
	std::map<std::string, uint64_t> verdicts_seen;
	uint64_t runs = 0, differs = 0, skipped = 0;
	std::map<std::string, std::pair<uint64_t, std::string>> differences; // by kind: count, first example
	const auto start = Clock::now();
	auto last_forget = start;

	// Violations by kind: how many, and the first of each in full.
	std::map<std::string, std::pair<uint64_t, std::string>> violations;
	auto violation = [&](const std::string &what, const std::vector<uint8_t> &f, const std::string &origin,
			     const FrameFacts &facts, int got, const std::string &counter) {
		auto &v = violations[what];
		if (v.first++ == 0) {
			std::ostringstream s;
			s << what << ", first after " << runs << " frames\n  frame from " << origin << "\n  oracle: "
			  << facts.describe() << "\n  program: " << xdp_name(got) << " " << counter << "\n"
			  << hex_dump(f);
			v.second = s.str();
		}
	};

	while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
		for (int batch = 0; batch < 256; batch++) {
			const Seed &s = seeds[mut.below(static_cast<uint32_t>(seeds.size()))];
			std::vector<uint8_t> f = s.frame;
			std::string log;
			if (mut.chance(90))
				mut.mutate(f, log);
			std::string origin = s.origin + (log.empty() ? " (unmutated)" : ", mutated:" + log);

			FrameFacts facts = inspect_frame(f);
			// Entries the program may have let expire (30 s) or evicted: the
			// oracle knows only those it can be sure of.
			bool frag_unsure = false;
			if (facts.kind == FrameFacts::Kind::ip && facts.frag == FrameFacts::Frag::later) {
				auto it = remembered.find(Oracle::frag_key(facts));
				if (it != remembered.end() && (Clock::now() - it->second > std::chrono::seconds(20) ||
							       it->second < last_forget || remembered.size() > 6000))
					frag_unsure = true;
			}
			// A first fragment meets an entry that later fragments took
			// (the oracle keeps those); one the table evicted, it may not.
			if (facts.kind == FrameFacts::Kind::ip && facts.frag == FrameFacts::Frag::first &&
			    remembered.size() > 6000)
				frag_unsure = true;
			Expected exp = put.oracle.decide(facts, false);
			put.oracle.follow_later_fragment(facts);
			int got = put.run(f);
			auto moved = put.moved();
			runs++;
			verdicts_seen[moved.verdict]++;

			if (moved.verdict_total != 1) {
				violation("COUNTERS: a frame moved " + std::to_string(moved.verdict_total) + " verdict counters", f,
					  origin, facts, got, moved.verdict);
				continue;
			}
			if (got != XDP_PASS && got != XDP_DROP) {
				violation("BPF_PROG_TEST_RUN returned " + std::to_string(got), f, origin, facts, got, moved.verdict);
				continue;
			}
			// Remembered where a rule covers the source, as the program does.
			if (got == XDP_PASS && facts.kind == FrameFacts::Kind::ip && facts.frag == FrameFacts::Frag::first &&
			    facts.proto_known && (facts.ports_known || (facts.proto != 6 && facts.proto != 17)) &&
			    !put.oracle.candidates(facts).empty()) {
				remembered[Oracle::frag_key(facts)] = Clock::now();
				put.oracle.remember_fragment(facts);
			}

			using Kind = FrameFacts::Kind;
			std::vector<size_t> cands = facts.family ? put.oracle.candidates(facts) : std::vector<size_t>{};
			std::string src = facts.source_text();
			bool denied = false, limited = false, port_scoped = false;
			for (size_t c : cands) {
				const std::string &name = put.oracle.rule(c).name;
				denied |= name.rfind("denied", 0) == 0;
				limited |= name.rfind("limited", 0) == 0;
				port_scoped |= name.rfind("dns", 0) == 0 || name.rfind("sel-", 0) == 0;
			}
			if (trace && src == trace)
				std::printf("trace %llu: %s; oracle %s %s (%s); program %s %s\n  from %s\n",
					    (unsigned long long)runs, facts.describe().c_str(),
					    exp.xdp == -1 ? "limit" : xdp_name(exp.xdp), exp.counter.c_str(), exp.why.c_str(),
					    xdp_name(got), moved.verdict.c_str(), origin.c_str());
			std::string bad;
			if (got == XDP_PASS && (limited || port_scoped) && pass_history[src].size() < 400)
				pass_history[src] += " " + moved.verdict;
			if (facts.kind == Kind::not_ip && got == XDP_DROP)
				bad = "FALSE DROP: a frame that is not IP was dropped";
			else if (facts.kind != Kind::too_many_tags && cands.empty() && got == XDP_DROP)
				bad = "FALSE DROP: a source no rule covers was dropped";
			else if (denied && facts.kind == Kind::ip && got == XDP_PASS)
				bad = "BYPASS: an IP frame from a denied source passed";
			else if (!frag_unsure && exp.allowed && got == XDP_DROP)
				bad = "FALSE DROP: allowed traffic (every selector known) was dropped";
			else if (limited && facts.kind == Kind::ip && got == XDP_PASS && ++limited_passes[src] > 3)
				bad = "BYPASS: more passes than the burst of 3 from a limited source";
			else if (port_scoped && !frag_unsure && exp.charged && got == XDP_PASS && ++charged_passes[src] > 6)
				bad = "BYPASS: more passes than the bursts (3 + 3) of what the port or selector limits must charge";
			else if (!frag_unsure && exp.counter == "drop_deny" && facts.kind == Kind::ip && got == XDP_PASS)
				bad = "BYPASS: a frame a deny rule must decide passed";
			else if (facts.kind == Kind::failopen_parse && !cands.empty() && got == XDP_PASS)
				bad = "MALFORMED: a frame the stack drops, from a source a rule covers, passed";
			else if (facts.kind == Kind::failopen_parse && (exp.xdp != got || exp.counter != moved.verdict))
				bad = "MALFORMED: a frame the stack drops was decided otherwise than the oracle";
			if (!bad.empty())
				violation(bad, f, origin, facts, got,
					  moved.verdict + (bad.rfind("BYPASS: more", 0) == 0 ? "; this source's passes so far:" +
											   pass_history[src] : ""));
			if (frag_unsure)
				skipped++;
			// Informational: decisions other than a limit's that differ from the oracle.
			if (exp.xdp != -1 && !frag_unsure && (exp.xdp != got || exp.counter != moved.verdict)) {
				differs++;
				std::string kind = exp.counter + " -> " + moved.verdict + " (" + exp.why + ")";
				auto &d = differences[kind];
				if (d.first++ == 0)
					d.second = facts.describe() + "\n      from " + origin + "\n" + hex_dump(f);
			}
		}
		if (Clock::now() - last_forget > std::chrono::seconds(20)) {
			// The oracle forgets what the program may have forgotten (entries live 30 s).
			put.oracle.forget_fragments();
			last_forget = Clock::now();
		}
	}
	double took = std::chrono::duration<double>(Clock::now() - start).count();
	Stats st = put.stats();
	std::printf("fuzz: %llu frames from %zu seeds in %.1f s: %.0f frames/s; %llu later fragments not judged "
		    "(their first's entry may have expired)\n",
		    (unsigned long long)runs, seeds.size(), took, double(runs) / took, (unsigned long long)skipped);
	std::printf("fuzz: verdicts:");
	for (const auto &[name, n] : verdicts_seen)
		std::printf(" %s %llu", name.c_str(), (unsigned long long)n);
	std::printf("\nfuzz: evicted %llu buckets, %llu new\n",
		    (unsigned long long)st.global[SLUICE_CNT_INFO_EVICTED].packets,
		    (unsigned long long)st.global[SLUICE_CNT_INFO_NEW_BUCKET].packets);
	std::printf("fuzz: %llu frames decided otherwise than the oracle (informational; a limit's pass or drop is "
		    "not compared), by kind:\n",
		    (unsigned long long)differs);
	for (const auto &[kind, d] : differences)
		std::printf("  %llu x oracle %s\n    first: %s\n", (unsigned long long)d.first, kind.c_str(),
			    d.second.c_str());
	EXPECT_GT(runs, 0u);
	for (const auto &[what, v] : violations)
		ADD_FAILURE() << "fuzz (seed " << seed << "): " << v.first << " frame(s): " << v.second;
}

// Fragment sequences (issue 26, finding 1): generated datagrams under one
// key each (a fresh source per sequence, so nothing is shared and nothing
// expires or is evicted during the run), two to four datagrams per key, each
// of a port from the roles' rules, their fragments shuffled, with copies of
// first fragments (the same port) and first fragments of other ports
// inserted anywhere. Every frame's verdict and counter must be the oracle's,
// which keeps buckets and the fragment table as the specification says; a
// limited source passes at most its burst, a denied source nothing, a
// source no rule covers everything. SLUICE_FUZZ_SEED replays a run.
TEST(FragmentSequences, DuplicateAndConflictingFirstFragmentsFollowTheOracle)
{
	ASSERT_EQ(geteuid(), 0u) << "loads the real XDP program: run as root";
	const char *seed_text = std::getenv("SLUICE_FUZZ_SEED");
	const uint64_t seed = seed_text ? std::strtoull(seed_text, nullptr, 0) : std::random_device{}();
	std::printf("fragment sequences: seed %llu (replay with SLUICE_FUZZ_SEED=%llu)\n", (unsigned long long)seed,
		    (unsigned long long)seed);
	std::mt19937_64 rng(seed);
	auto below = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };

	ProgramUnderTest put(1u << 16);
	put.add_roles();
	const std::pair<uint8_t, uint16_t> ports[] = {{17, 53}, {17, 123}, {17, 5353}, {6, 22}, {6, 80}};
	const int sequences = 1200; // fragment entries: one key each, well under the table's 8,192
	uint64_t frames = 0, differ = 0, conflicts = 0, copies = 0;
	std::map<std::string, uint64_t> counters;
	std::string first_differ;
	for (int seq = 0; seq < sequences; seq++) {
		const Role role = ALL_ROLES[below(std::size(ALL_ROLES))];
		const bool v6 = below(2);
		const std::string src = role_source(role, 2000 + seq, v6);
		// One protocol per key for IPv4 (reassembly keys on it); IPv6 mixes them.
		const uint8_t proto = below(2) ? 17 : 6;
		const uint32_t id = 1 + static_cast<uint32_t>(below(60000));
		std::vector<std::pair<std::string, std::vector<uint8_t>>> seqf;
		const size_t datagrams = 2 + below(3);
		for (size_t d = 0; d < datagrams; d++) {
			auto [p_proto, port] = ports[below(std::size(ports))];
			if (!v6)
				p_proto = proto;
			PacketSpec p{.src = src, .proto = p_proto, .dport = port, .frag_id = id, .payload = 64};
			// Source ports and TCP flags the selected role's rules name, or not.
			static const uint16_t sports[] = {40000, 123, 11211};
			static const uint8_t tcp_flags[] = {0x02, 0x10, 0x12, 0x04};
			p.sport = sports[below(std::size(sports))];
			p.tcp_flags = tcp_flags[below(std::size(tcp_flags))];
			const size_t len = fragmentable_length(p);
			std::string name = "datagram " + std::to_string(d) + " " + port_name_of(p_proto, port) + " from " +
					   std::to_string(p.sport) + (p_proto == 6 ? " flags " + std::to_string(p.tcp_flags) : "");
			auto pieces = build_fragments(p, {{0, 24, true}, {24, 24, true}, {48, len - 48, false}});
			std::vector<std::pair<std::string, std::vector<uint8_t>>> mine = {
				{name + " first", pieces[0]}, {name + " middle", pieces[1]}, {name + " last", pieces[2]}};
			if (below(2)) {
				mine.push_back({name + " first (copy)", pieces[0]});
				copies++;
			}
			if (below(2)) {
				PacketSpec q = p;
				auto [o_proto, o_port] = ports[below(std::size(ports))];
				q.proto = v6 ? o_proto : p_proto;
				q.dport = o_port;
				if (below(2))
					q.sport = sports[below(std::size(sports))];
				if (below(2))
					q.tcp_flags = tcp_flags[below(std::size(tcp_flags))];
				mine.push_back({name + " first naming " + port_name_of(q.proto, o_port) + " from " +
							std::to_string(q.sport) + " flags " + std::to_string(q.tcp_flags),
						build_fragments(q, {{0, 24, true}})[0]});
			}
			// Mostly in order within a datagram, sometimes shuffled.
			if (below(3) == 0)
				std::shuffle(mine.begin() + 1, mine.end(), rng);
			if (below(4) == 0)
				std::shuffle(mine.begin(), mine.end(), rng);
			seqf.insert(seqf.end(), mine.begin(), mine.end());
		}
		// Datagrams overlap now and then.
		for (size_t swaps = below(3); swaps > 0; swaps--)
			std::swap(seqf[below(seqf.size())], seqf[below(seqf.size())]);

		std::string trace;
		int passed = 0;
		for (const auto &[what, frame] : seqf) {
			FrameFacts facts = inspect_frame(frame);
			Expected exp = put.oracle.decide(facts);
			int got = put.run(frame);
			auto moved = put.moved();
			frames++;
			counters[moved.verdict]++;
			conflicts += exp.why.rfind("first fragment of another port", 0) == 0;
			passed += got == XDP_PASS;
			if (role == Role::denied && got == XDP_PASS)
				ADD_FAILURE() << "BYPASS: a denied source's fragment passed: " << src << " " << what;
			if (role == Role::limited && passed > 3)
				ADD_FAILURE() << "BYPASS: pass " << passed << " from a source limited to a burst of 3: " << src
					      << " " << what;
			if (role == Role::uncovered && got != XDP_PASS)
				ADD_FAILURE() << "FALSE DROP: a source no rule covers: " << src << " " << what;
			trace += "\n    " + what + ": oracle " + xdp_name(exp.xdp) + " " + exp.counter + ", program " +
				 xdp_name(got) + " " + moved.verdict;
			if (got != exp.xdp || moved.verdict != exp.counter || moved.verdict_total != 1) {
				if (differ++ == 0)
					first_differ = std::string(role_name(role)) + " source " + src + ", id " +
						       std::to_string(id) + ": " + what + " (" + facts.describe() + "): expected " +
						       xdp_name(exp.xdp) + " " + exp.counter + " (" + exp.why + "), got " +
						       xdp_name(got) + " " + moved.verdict + "\n  the sequence so far:" + trace +
						       "\n" + hex_dump(frame);
				break; // the oracle's state for this key is no longer the program's
			}
		}
	}
	std::printf("fragment sequences: %d sequences, %llu frames (%llu copies of first fragments), %llu first "
		    "fragments dropped for naming another port; verdicts:",
		    sequences, (unsigned long long)frames, (unsigned long long)copies, (unsigned long long)conflicts);
	for (const auto &[name, n] : counters)
		std::printf(" %s %llu", name.c_str(), (unsigned long long)n);
	std::printf("\n");
	EXPECT_EQ(differ, 0u) << "seed " << seed << ": " << differ << " sequence(s) differ from the oracle; first: "
			      << first_differ;
	EXPECT_GT(conflicts, uint64_t(sequences / 4)) << "the generator makes conflicting first fragments";
}
