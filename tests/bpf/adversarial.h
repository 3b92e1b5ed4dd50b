// SPDX-License-Identifier: GPL-2.0-only
// What the corpus and the fuzzer share: the real program loaded through
// BPF_PROG_TEST_RUN, the four roles' rules installed both in it and in the
// oracle, and the global counters read per frame.
#pragma once

#include <linux/bpf.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "datapath.h"
#include "oracle.h"
#include "rule_table.h"
#include "sluice_test_bpf.skel.h"
#include "stats.h"

namespace sluice::test {

/// The four roles of issue 8, who send each shape, and a fifth whose rules
/// select source ports and TCP flags.
enum class Role { limited, denied, port_scoped, uncovered, selected };
constexpr Role ALL_ROLES[] = {Role::limited, Role::denied, Role::port_scoped, Role::uncovered, Role::selected};

inline const char *role_name(Role r)
{
	static const char *names[] = {"limited", "denied", "port-scoped", "uncovered", "selected"};
	return names[static_cast<int>(r)];
}

/// The source a role uses for shape `index`: each shape and role has its own
/// address (its own bucket), IPv6 ones in their own /64 (bucket aggregation
/// may be per /64).
inline std::string role_source(Role r, int index, bool v6)
{
	int net = static_cast<int>(r) + 1; // 10.1/16 .. 10.4/16, 2001:db8:1::/48 .. :4::/48
	if (!v6)
		return "10." + std::to_string(net) + "." + std::to_string(index / 250) + "." +
		       std::to_string(index % 250 + 1);
	char buf[64];
	std::snprintf(buf, sizeof(buf), "2001:db8:%d:%x::10", net, index);
	return buf;
}

/// One rule, as the CLI would state it and as the oracle models it.
struct RoleRule {
	const char *name;
	const char *cidr;
	ModelRule::Action action;
	const char *rate; ///< limit rules
	uint64_t burst;
	int proto;
	uint16_t port;    ///< 0: no port selector
	uint64_t ns_per_packet;
	uint16_t sport = 0; ///< 0: no source port selector
	uint8_t flags_mask = 0, flags_value = 0; ///< TCP flags; mask 0: none (a mask makes it TCP)
};

constexpr uint64_t HOUR_NS = 3600ull * 1000000000ull;

/// limited: any traffic 1/h burst 3. denied: deny. port-scoped: at one prefix,
/// UDP/53 1/h burst 3 and UDP/123 allowed, TCP/22 2/h burst 3 and TCP/80
/// allowed (the two limits differ, so "the strictest" names one). uncovered: none.
/// selected: at one prefix, TCP/22 connection attempts (--syn) 1/h burst 3,
/// TCP RST denied, UDP from port 11211 denied, UDP from port 123 2/h burst 3,
/// and the rest allowed.
inline const std::vector<RoleRule> &role_rules()
{
	using A = ModelRule::Action;
	static const std::vector<RoleRule> rules = {
		{"limited4", "10.1.0.0/16", A::limit, "1/h", 3, 0, 0, HOUR_NS},
		{"limited6", "2001:db8:1::/48", A::limit, "1/h", 3, 0, 0, HOUR_NS},
		{"denied4", "10.2.0.0/16", A::deny, "", 0, 0, 0, 0},
		{"denied6", "2001:db8:2::/48", A::deny, "", 0, 0, 0, 0},
		{"dns4", "10.3.0.0/16", A::limit, "1/h", 3, 17, 53, HOUR_NS},
		{"ntp4", "10.3.0.0/16", A::allow, "", 0, 17, 123, 0},
		{"ssh4", "10.3.0.0/16", A::limit, "2/h", 3, 6, 22, HOUR_NS / 2},
		{"web4", "10.3.0.0/16", A::allow, "", 0, 6, 80, 0},
		{"dns6", "2001:db8:3::/48", A::limit, "1/h", 3, 17, 53, HOUR_NS},
		{"ntp6", "2001:db8:3::/48", A::allow, "", 0, 17, 123, 0},
		{"ssh6", "2001:db8:3::/48", A::limit, "2/h", 3, 6, 22, HOUR_NS / 2},
		{"web6", "2001:db8:3::/48", A::allow, "", 0, 6, 80, 0},
		{"sel-syn4", "10.5.0.0/16", A::limit, "1/h", 3, 6, 22, HOUR_NS, 0, SLUICE_TCP_SYN | SLUICE_TCP_ACK,
		 SLUICE_TCP_SYN},
		{"sel-rst4", "10.5.0.0/16", A::deny, "", 0, 6, 0, 0, 0, SLUICE_TCP_RST, SLUICE_TCP_RST},
		{"sel-mc4", "10.5.0.0/16", A::deny, "", 0, 17, 0, 0, 11211},
		{"sel-ntp4", "10.5.0.0/16", A::limit, "2/h", 3, 17, 0, HOUR_NS / 2, 123},
		{"sel-rest4", "10.5.0.0/16", A::allow, "", 0, 0, 0, 0},
		{"sel-syn6", "2001:db8:5::/48", A::limit, "1/h", 3, 6, 22, HOUR_NS, 0, SLUICE_TCP_SYN | SLUICE_TCP_ACK,
		 SLUICE_TCP_SYN},
		{"sel-rst6", "2001:db8:5::/48", A::deny, "", 0, 6, 0, 0, 0, SLUICE_TCP_RST, SLUICE_TCP_RST},
		{"sel-mc6", "2001:db8:5::/48", A::deny, "", 0, 17, 0, 0, 11211},
		{"sel-ntp6", "2001:db8:5::/48", A::limit, "2/h", 3, 17, 0, HOUR_NS / 2, 123},
		{"sel-rest6", "2001:db8:5::/48", A::allow, "", 0, 0, 0, 0},
	};
	return rules;
}

/// The program built with its clock in a map (sluice_test_bpf).
inline ObjectImage test_clock_object()
{
	ObjectImage image;
	image.data = sluice_test_bpf__elf_bytes(&image.size);
	return image;
}

/// The real program with a rule set mirrored in an oracle.
class ProgramUnderTest {
public:
	/// `test_clock`: the build whose clock is a map the test sets (set_clock).
	explicit ProgramUnderTest(uint32_t max_sources = 4096, bool test_clock = false)
		: ProgramUnderTest(TableSizes{max_sources, 256}, test_clock ? test_clock_object() : production_object())
	{
	}
	/// Another build of the program (a skeleton's bytes); set_clock works
	/// if it has the test clock.
	ProgramUnderTest(const TableSizes &sizes, ObjectImage image)
	{
		set_libbpf_verbose(false);
		prog_ = std::make_unique<LoadedProgram>(sizes, image);
		struct bpf_map *clock = bpf_object__find_map_by_name(prog_->object(), "sluice_clock");
		clock_fd_ = clock ? bpf_map__fd(clock) : -1;
		maps_ = prog_->maps();
		table_ = std::make_unique<RuleTable>(maps_);
		ncpu_ = libbpf_num_possible_cpus();
		for (int i = 0; i < SLUICE_CNT_MAX; i++)
			index_[counter_name(i)] = i;
		last_ = read_counters();
	}

	/// Installs a rule in the program and the oracle; returns the oracle's index.
	size_t add(const RoleRule &r)
	{
		RuleSpec s;
		s.name = r.name;
		s.cidr = parse_cidr(r.cidr);
		s.proto = r.proto == 17 ? Proto::udp : r.proto == 6 ? Proto::tcp : r.proto == 1 ? Proto::icmp : Proto::any;
		if (r.port)
			s.dport = {r.port, r.port};
		if (r.sport)
			s.sport = {r.sport, r.sport};
		s.tcp_flags = {r.flags_mask, r.flags_value};
		if (r.action == ModelRule::Action::limit) {
			s.rate = parse_rate(r.rate);
			s.burst = r.burst;
		} else {
			s.action = r.action == ModelRule::Action::allow ? Action::allow : Action::deny;
		}
		table_->add(s);
		ModelRule m;
		m.name = r.name;
		m.cidr = r.cidr;
		m.proto = r.proto;
		if (r.port)
			m.port_lo = m.port_hi = r.port;
		if (r.sport)
			m.sport_lo = m.sport_hi = r.sport;
		m.flags_mask = r.flags_mask;
		m.flags_value = r.flags_value;
		m.action = r.action;
		m.burst = r.burst;
		m.ns_per_packet = r.ns_per_packet;
		return oracle.add_rule(m);
	}
	void add_roles()
	{
		for (const auto &r : role_rules())
			add(r);
	}

	/// Runs one frame; returns the XDP verdict.
	int run(const std::vector<uint8_t> &frame)
	{
		LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
			    .data_size_in = static_cast<__u32>(frame.size()), .repeat = 1);
		if (bpf_prog_test_run_opts(prog_->prog_fd(), &opts))
			return -errno;
		return static_cast<int>(opts.retval);
	}

	/// Global counters (packets), summed over CPUs.
	std::array<uint64_t, SLUICE_CNT_MAX> read_counters() const
	{
		std::array<uint64_t, SLUICE_CNT_MAX> out{};
		std::vector<struct sluice_counter> v(ncpu_);
		// One syscall for every counter when the kernel has batch lookups.
		std::vector<__u32> keys(SLUICE_CNT_MAX);
		std::vector<struct sluice_counter> all(static_cast<size_t>(ncpu_) * SLUICE_CNT_MAX);
		__u32 count = SLUICE_CNT_MAX, out_batch = 0;
		LIBBPF_OPTS(bpf_map_batch_opts, bopts);
		int err = bpf_map_lookup_batch(maps_.counters.get(), nullptr, &out_batch, keys.data(), all.data(), &count,
					       &bopts);
		if ((err == 0 || errno == ENOENT) && count == SLUICE_CNT_MAX) {
			for (__u32 k = 0; k < count; k++)
				for (int c = 0; c < ncpu_; c++)
					out[keys[k]] += all[static_cast<size_t>(k) * ncpu_ + c].packets;
			return out;
		}
		for (__u32 i = 0; i < SLUICE_CNT_MAX; i++) {
			if (bpf_map_lookup_elem(maps_.counters.get(), &i, v.data()))
				continue;
			for (const auto &c : v)
				out[i] += c.packets;
		}
		return out;
	}

	/// Which verdict counters moved since the last call: their names joined
	/// by '+' ("pass_limit"), "none" if none did; and the informational deltas.
	struct Moved {
		std::string verdict;
		uint64_t verdict_total = 0;
		std::array<uint64_t, SLUICE_CNT_MAX> delta{};
	};
	Moved moved()
	{
		auto now = read_counters();
		Moved m;
		for (int i = 0; i < SLUICE_CNT_MAX; i++) {
			m.delta[i] = now[i] - last_[i];
			if (i < SLUICE_CNT_VERDICT_END && m.delta[i]) {
				m.verdict_total += m.delta[i];
				m.verdict += (m.verdict.empty() ? "" : "+") + std::string(counter_name(i));
			}
		}
		if (m.verdict.empty())
			m.verdict = "none";
		last_ = now;
		return m;
	}

	/// The index of a counter by name, -1 if this build has no such counter.
	int counter_index(const std::string &name) const
	{
		auto it = index_.find(name);
		return it == index_.end() ? -1 : it->second;
	}

	/// Sets the test clock on every CPU (test_clock builds only).
	void set_clock(uint64_t t_ns)
	{
		std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu_), t_ns);
		__u32 zero = 0;
		if (clock_fd_ < 0 || bpf_map_update_elem(clock_fd_, &zero, per_cpu.data(), BPF_ANY))
			throw std::runtime_error("cannot set the test clock");
	}

	Stats stats() { return collect_stats(maps_, {0, ""}); }
	const MapSet &maps() const { return maps_; }

	Oracle oracle;

private:
	std::unique_ptr<LoadedProgram> prog_;
	MapSet maps_;
	std::unique_ptr<RuleTable> table_;
	int ncpu_ = 1;
	int clock_fd_ = -1;
	std::map<std::string, int> index_;
	std::array<uint64_t, SLUICE_CNT_MAX> last_{};
};

inline const char *xdp_name(int v) { return v == XDP_PASS ? "XDP_PASS" : v == XDP_DROP ? "XDP_DROP" : "XDP_?"; }

} // namespace sluice::test
