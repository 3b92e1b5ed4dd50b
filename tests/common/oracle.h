// SPDX-License-Identifier: GPL-2.0-only
// An independent model of what the data plane must decide for a frame, written
// from the specification (issue 8's semantics), not from the BPF program: its
// own parser (inspect_frame) and its own rule matching and buckets (Oracle).
// The corpus and the fuzzer compare the real program against it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace sluice::test {

/// Limits of the specified parser.
constexpr int SPEC_MAX_VLAN_TAGS = 8;
constexpr int SPEC_MAX_IPV6_EXT_HDRS = 12;
/// Rules a packet that hides its port is charged to before the strictest of the rest.
constexpr size_t SPEC_MAX_UNKNOWN_CHARGED = 8;

/// What the specified parser learns from a frame.
struct FrameFacts {
	enum class Kind {
		not_ip,         ///< not IPv4/IPv6 (ARP, PPPoE, other TPIDs): pass_not_ip
		failopen_parse, ///< truncated or inconsistent L2/L3: the stack drops it, we pass it
		too_many_tags,  ///< more than 8 VLAN tags: drop_malformed
		ip,             ///< an IP packet the stack would take: it is judged
	} kind = Kind::failopen_parse;
	int vlan_tags = 0;
	bool pppoe = false;
	int family = 0;
	std::array<uint8_t, 16> src{}, dst{};
	uint64_t ip_bytes = 0;      ///< what byte rates charge: tot_len, or 40 + payload_len
	bool proto_known = false;
	uint8_t proto = 0;          ///< the upper-layer IP protocol number, when known
	bool ports_known = false;
	uint16_t dport = 0;
	uint16_t sport = 0;
	bool flags_known = false;   ///< TCP: the header's first 14 bytes are in the datagram
	uint8_t tcp_flags = 0;      ///< when flags_known
	enum class Frag { none, first, later } frag = Frag::none;
	uint32_t frag_id = 0;
	bool last_frag = false;      ///< a later fragment that says no more follow
	bool tiny_first = false;     ///< a first fragment too short to hold the ports
	bool chain_too_long = false; ///< IPv6: an extension header after the 12th
	bool encapsulated = false;   ///< IPIP, IPv6-in-IP, GRE, ESP or PPPoE

	std::string source_text() const;
	std::string describe() const;
};

FrameFacts inspect_frame(const std::vector<uint8_t> &frame);

/// A rule as the oracle models it.
struct ModelRule {
	std::string name;
	std::string cidr;          ///< "10.1.0.0/16", "2001:db8::/32"
	int proto = 0;             ///< 0 any, 1 ICMP (and ICMPv6), 6 TCP, 17 UDP
	uint16_t port_lo = 0, port_hi = 65535; ///< 0-65535: no port selector
	enum class Action { limit, allow, deny } action = Action::limit;
	uint64_t burst = 0;        ///< limit: packets that pass before the first drop
	uint64_t ns_per_packet = 0; ///< limit: the sustained rate's cost (its strictness)
	int per_prefix = -1;       ///< bucket prefix; -1 per IPv4 address, per IPv6 /64
	uint16_t sport_lo = 0, sport_hi = 65535; ///< 0-65535: no source port selector
	uint8_t flags_mask = 0, flags_value = 0; ///< TCP flags: mask 0, no flag selector (proto 6 with one)

	bool has_ports() const { return !(port_lo == 0 && port_hi == 65535); }
	bool has_sport() const { return !(sport_lo == 0 && sport_hi == 65535); }
	uint64_t strictness() const;
};

/// The oracle's decision for one frame.
struct Expected {
	int xdp = 2;               ///< XDP_PASS (2) or XDP_DROP (1)
	std::string counter;       ///< the verdict counter's name, as `sluice stats` prints it
	int rule = -1;             ///< the deciding rule (index in the oracle), -1 for none
	bool allowed = false;      ///< an allow rule matched with every selector known
	bool charged = false;      ///< charged to a limit rule's bucket
	std::string why;
};

/// Rules, buckets and the fragment table, as the specification says the
/// program keeps them. Limits are modelled as `burst` passes and no refill:
/// the tests use rates of a few per hour and run for seconds.
class Oracle {
public:
	size_t add_rule(const ModelRule &r);
	const ModelRule &rule(size_t i) const { return rules_[i].spec; }
	size_t rule_count() const { return rules_.size(); }

	/// Candidate rules for a source, most specific first (the controller's match list).
	std::vector<size_t> candidates(const FrameFacts &f) const;

	/// Decides a frame and updates buckets and the fragment table. With
	/// `track_state` false nothing is updated and a limit's verdict is left
	/// open: xdp -1, counter "limit" (the fuzzer tracks state from the program).
	Expected decide(const FrameFacts &f, bool track_state = true);

	/// The fragment table, written when a first fragment that names its
	/// datagram (ports read, or a protocol without ports) passes: keyed by (family, IPv4 protocol or 0, id, source, destination).
	using FragKey = std::tuple<int, uint8_t, uint32_t, std::array<uint8_t, 16>, std::array<uint8_t, 16>>;
	/// `judged`: a later fragment took the ports; `ended`: the last one was
	/// seen, so no later fragment takes them; `expired`: forgotten by
	/// forget_fragments, so no later fragment takes them either, but a
	/// first fragment still meets the entry (the program keeps it 91 s,
	/// longer than a fuzzing run): one of another protocol or port is
	/// dropped, one of the same makes it serve later fragments again.
	struct FragEntry {
		uint8_t proto;
		uint16_t dport;
		bool ports_known;
		uint16_t sport = 0;
		bool flags_known = false;
		uint8_t tcp_flags = 0;
		bool judged = false;
		bool ended = false;
		bool expired = false;
	};
	void remember_fragment(const FrameFacts &f);
	/// What a later fragment does to its entry: taken (judged) until the
	/// datagram's last fragment (ended). decide() does it when tracking state.
	void follow_later_fragment(const FrameFacts &f);
	/// What the program may have let expire: later fragments no longer take
	/// any entry's ports.
	void forget_fragments()
	{
		for (auto &[key, entry] : frags_)
			entry.expired = true;
	}
	static FragKey frag_key(const FrameFacts &f);

	/// Sets a bucket's remaining passes (the fuzzer follows the program's own).
	uint64_t &tokens(size_t rule, const FrameFacts &f);

private:
	struct Rule {
		ModelRule spec;
		int family;
		std::array<uint8_t, 16> addr;
		int len;
	};
	bool in_prefix(const Rule &r, const FrameFacts &f) const;
	std::vector<Rule> rules_;
	std::map<std::pair<size_t, std::array<uint8_t, 16>>, uint64_t> buckets_;
	std::map<FragKey, FragEntry> frags_;
};

} // namespace sluice::test
