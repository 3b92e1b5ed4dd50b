// SPDX-License-Identifier: GPL-2.0-only
#include "oracle.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace sluice::test {

namespace {

bool is_vlan(uint16_t type) { return type == 0x8100 || type == 0x88a8; }

bool is_ipv6_ext(uint8_t nh) { return nh == 0 || nh == 43 || nh == 44 || nh == 51 || nh == 60; }

bool is_encap(uint8_t proto) { return proto == 4 || proto == 41 || proto == 47 || proto == 50; }

// The transport layer at `l4` with `avail` bytes of the datagram left.
void read_transport(FrameFacts &f, const uint8_t *l4, size_t avail)
{
	f.proto_known = true;
	f.encapsulated = is_encap(f.proto);
	if (f.proto != 6 && f.proto != 17)
		return;
	if (avail >= 4) {
		f.ports_known = true;
		f.sport = static_cast<uint16_t>(l4[0] << 8 | l4[1]);
		f.dport = static_cast<uint16_t>(l4[2] << 8 | l4[3]);
		// TCP's flags: its 14th byte, when the datagram holds it.
		if (f.proto == 6 && avail >= 14) {
			f.flags_known = true;
			f.tcp_flags = l4[13];
		}
	} else if (f.frag == FrameFacts::Frag::first) {
		f.tiny_first = true;
	}
}

} // namespace

FrameFacts inspect_frame(const std::vector<uint8_t> &frame)
{
	using Kind = FrameFacts::Kind;
	FrameFacts f;
	const uint8_t *p = frame.data();
	const size_t n = frame.size();
	auto be16 = [&](size_t at) { return static_cast<uint16_t>(p[at] << 8 | p[at + 1]); };

	f.kind = Kind::failopen_parse;
	if (n < 14)
		return f;
	uint16_t type = be16(12);
	size_t off = 14;
	while (is_vlan(type)) {
		if (f.vlan_tags == SPEC_MAX_VLAN_TAGS) {
			f.kind = Kind::too_many_tags;
			return f;
		}
		if (off + 4 > n)
			return f;
		type = be16(off + 2);
		off += 4;
		f.vlan_tags++;
	}
	if (type == 0x8864) {
		f.pppoe = f.encapsulated = true;
		f.kind = Kind::not_ip;
		return f;
	}
	if (type != 0x0800 && type != 0x86dd) {
		f.kind = Kind::not_ip;
		return f;
	}
	const size_t l3 = n - off;
	const uint8_t *ip = p + off;

	// The source, where its bytes are there, even in a frame that fails open:
	// a test can then tell whose malformed frame it is.
	if (type == 0x0800 && l3 >= 16) {
		f.family = 4;
		std::memcpy(f.src.data(), ip + 12, 4);
	} else if (type == 0x86dd && l3 >= 24) {
		f.family = 6;
		std::memcpy(f.src.data(), ip + 8, 16);
	}
	if (type == 0x0800) {
		if (l3 < 20 || ip[0] >> 4 != 4 || (ip[0] & 15) < 5)
			return f;
		size_t hl = (ip[0] & 15) * 4u;
		if (hl > l3)
			return f;
		size_t tot = be16(off + 2);
		if (tot == 0)
			tot = l3; // BIG TCP: the whole frame
		else if (tot < hl || tot > l3)
			return f;
		f.kind = Kind::ip;
		f.family = 4;
		std::memcpy(f.src.data(), ip + 12, 4);
		std::memcpy(f.dst.data(), ip + 16, 4);
		f.ip_bytes = tot;
		f.proto = ip[9];
		f.frag_id = be16(off + 4);
		uint16_t frag = be16(off + 6);
		if (frag & 0x1fff) {
			// A later fragment keeps its protocol (reassembly keys on it), not its ports.
			f.frag = FrameFacts::Frag::later;
			f.last_frag = !(frag & 0x2000);
			f.proto_known = true;
			f.encapsulated = is_encap(f.proto);
			return f;
		}
		if (frag & 0x2000)
			f.frag = FrameFacts::Frag::first;
		read_transport(f, ip + hl, tot - hl);
		return f;
	}

	if (l3 < 40 || ip[0] >> 4 != 6)
		return f;
	size_t total = be16(off + 4);
	total = total ? 40 + total : l3; // jumbo / BIG TCP: the whole frame
	if (total > l3)
		return f;
	f.kind = Kind::ip;
	f.family = 6;
	std::memcpy(f.src.data(), ip + 8, 16);
	std::memcpy(f.dst.data(), ip + 24, 16);
	f.ip_bytes = total;
	const size_t end = total;
	uint8_t nh = ip[6];
	size_t pos = 40;
	int count = 0;
	for (;;) {
		if (!is_ipv6_ext(nh)) {
			f.proto = nh;
			read_transport(f, ip + pos, end - pos);
			return f;
		}
		if (count == SPEC_MAX_IPV6_EXT_HDRS) {
			f.chain_too_long = true; // protocol and ports unknown
			return f;
		}
		count++;
		if (nh == 44) {
			if (pos + 8 > end)
				break;
			uint16_t fo = be16(off + pos + 2);
			uint32_t id = static_cast<uint32_t>(be16(off + pos + 4)) << 16 | be16(off + pos + 6);
			if (fo & 0xfff8) {
				f.frag = FrameFacts::Frag::later; // RFC 8200: only the first fragment names the protocol
				f.frag_id = id;
				f.last_frag = !(fo & 1);
				return f;
			}
			if (fo & 1) {
				f.frag = FrameFacts::Frag::first;
				f.frag_id = id;
			}
			nh = ip[pos];
			pos += 8;
			continue;
		}
		if (pos + 2 > end)
			break;
		size_t len = nh == 51 ? (ip[pos + 1] + 2) * 4u : (ip[pos + 1] + 1) * 8u;
		nh = ip[pos];
		pos += len;
		if (pos > end)
			break;
	}
	// Truncated inside the chain: protocol and ports unknown; in a first
	// fragment, the chain ends before the upper-layer header.
	if (f.frag == FrameFacts::Frag::first)
		f.tiny_first = true;
	return f;
}

std::string FrameFacts::source_text() const
{
	char buf[INET6_ADDRSTRLEN] = "?";
	if (family)
		inet_ntop(family == 4 ? AF_INET : AF_INET6, src.data(), buf, sizeof(buf));
	return buf;
}

std::string FrameFacts::describe() const
{
	static const char *kinds[] = {"not IP", "malformed (fail-open)", ">8 VLAN tags", "IP"};
	std::string d = kinds[static_cast<int>(kind)];
	if (kind != Kind::ip)
		return d + (pppoe ? " (PPPoE)" : "");
	d += family == 4 ? "v4 " : "v6 ";
	d += source_text();
	d += proto_known ? " proto " + std::to_string(proto) : " proto ?";
	d += ports_known ? " sport " + std::to_string(sport) + " dport " + std::to_string(dport) : "";
	d += flags_known ? " flags " + std::to_string(tcp_flags) : "";
	if (frag == Frag::first)
		d += " first-fragment";
	if (frag == Frag::later)
		d += " later-fragment";
	if (tiny_first)
		d += " tiny";
	if (chain_too_long)
		d += " chain>12";
	return d;
}

uint64_t ModelRule::strictness() const
{
	switch (action) {
	case Action::deny:
		return UINT64_MAX;
	case Action::allow:
		return 0;
	default:
		return ns_per_packet;
	}
}

size_t Oracle::add_rule(const ModelRule &r)
{
	Rule m{r, 0, {}, 0};
	auto slash = r.cidr.find('/');
	std::string addr = r.cidr.substr(0, slash);
	m.family = addr.find(':') != std::string::npos ? 6 : 4;
	if (inet_pton(m.family == 4 ? AF_INET : AF_INET6, addr.c_str(), m.addr.data()) != 1)
		throw std::invalid_argument("oracle: bad cidr " + r.cidr);
	m.len = slash == std::string::npos ? (m.family == 4 ? 32 : 128) : std::stoi(r.cidr.substr(slash + 1));
	rules_.push_back(m);
	return rules_.size() - 1;
}

bool Oracle::in_prefix(const Rule &r, const FrameFacts &f) const
{
	if (r.family != f.family)
		return false;
	for (int bit = 0; bit < r.len; bit++) {
		int byte = bit / 8, mask = 0x80 >> (bit % 8);
		if ((r.addr[byte] & mask) != (f.src[byte] & mask))
			return false;
	}
	return true;
}

std::vector<size_t> Oracle::candidates(const FrameFacts &f) const
{
	std::vector<size_t> c;
	for (size_t i = 0; i < rules_.size(); i++)
		if (in_prefix(rules_[i], f))
			c.push_back(i);
	// Longer prefix first; at one prefix a port rule (narrowest first), then
	// a source port rule (narrowest first), then a flag rule (more flags
	// first), then a protocol rule, then a rule for any traffic; then the
	// order of adding.
	auto rank = [&](size_t i) {
		const ModelRule &r = rules_[i].spec;
		return std::make_tuple(-rules_[i].len, r.port_hi - r.port_lo, r.sport_hi - r.sport_lo,
				       -__builtin_popcount(r.flags_mask), r.proto ? 0 : 1, i);
	};
	std::sort(c.begin(), c.end(), [&](size_t a, size_t b) { return rank(a) < rank(b); });
	return c;
}

Oracle::FragKey Oracle::frag_key(const FrameFacts &f)
{
	return {f.family, f.family == 4 ? f.proto : uint8_t(0), f.frag_id, f.src, f.dst};
}

void Oracle::remember_fragment(const FrameFacts &f)
{
	// A first fragment that names its datagram: its ports were read, or its
	// protocol has none (ICMP, GRE, 156...). One that hides them (a chain past
	// the bound, a tiny header) names nothing and is not remembered.
	bool port_proto = f.proto == 6 || f.proto == 17;
	if (f.kind == FrameFacts::Kind::ip && f.frag == FrameFacts::Frag::first && f.proto_known &&
	    (f.ports_known || !port_proto)) {
		auto it = frags_.find(frag_key(f));
		if (it != frags_.end() && it->second.proto == f.proto && it->second.ports_known == f.ports_known &&
		    (!f.ports_known || (it->second.dport == f.dport && it->second.sport == f.sport &&
					it->second.flags_known == f.flags_known && it->second.tcp_flags == f.tcp_flags))) {
			// The same ports again relabel nothing: a live entry stays as
			// it is; one that no longer serves later fragments (ended, or
			// expired) is made again, keeping what later fragments did.
			it->second.ended = it->second.expired = false;
			return;
		}
		// A new entry (or, where the program lost the old one, a new
		// datagram under its key).
		frags_[frag_key(f)] = {f.proto, f.dport, f.ports_known, f.sport, f.flags_known, f.tcp_flags};
	}
}

void Oracle::follow_later_fragment(const FrameFacts &f)
{
	auto it = frags_.find(frag_key(f));
	if (f.kind != FrameFacts::Kind::ip || f.frag != FrameFacts::Frag::later || it == frags_.end() ||
	    it->second.ended)
		return;
	// An expired entry may still be live in the program: judged all the same.
	it->second.judged = true;
	it->second.ended = f.last_frag && !it->second.expired;
}

uint64_t &Oracle::tokens(size_t rule, const FrameFacts &f)
{
	const ModelRule &r = rules_[rule].spec;
	// Without --per: per IPv4 address, per IPv6 /64.
	int keep = r.per_prefix >= 0 ? r.per_prefix : (f.family == 4 ? 32 : 64);
	std::array<uint8_t, 16> key{};
	for (int bit = 0; bit < keep && bit < 128; bit++)
		key[bit / 8] |= f.src[bit / 8] & (0x80 >> (bit % 8));
	auto it = buckets_.find({rule, key});
	if (it == buckets_.end())
		it = buckets_.insert({{rule, key}, r.burst}).first;
	return it->second;
}

Expected Oracle::decide(const FrameFacts &in, bool track_state)
{
	using Kind = FrameFacts::Kind;
	Expected e;
	switch (in.kind) {
	case Kind::not_ip:
		e.counter = "pass_not_ip";
		e.why = "not IP";
		return e;
	case Kind::failopen_parse:
		// The stack drops it; passing it would cost the host an skb. Where
		// its source can be read and a rule covers it, it is dropped here.
		if (in.family && !candidates(in).empty()) {
			e.xdp = 1;
			e.counter = "drop_malformed";
			e.why = "malformed, from a source a rule covers";
			return e;
		}
		e.counter = "failopen_parse";
		e.why = in.family ? "malformed, from a source no rule covers" : "malformed, no source to read";
		return e;
	case Kind::too_many_tags:
		e.xdp = 1;
		e.counter = "drop_malformed";
		e.why = "more than 8 VLAN tags";
		return e;
	case Kind::ip:
		break;
	}

	std::vector<size_t> cands = candidates(in);
	FrameFacts f = in;
	if (f.frag == FrameFacts::Frag::first) {
		// A first fragment of another protocol or port than its key's
		// entry (the table keeps it 91 s, longer than any run): the kernel
		// keeps the first first fragment and drops a copy, so the datagram
		// it would complete was judged, or will be, by another rule.
		auto it = frags_.find(frag_key(f));
		if (it != frags_.end() &&
		    (!f.proto_known || it->second.proto != f.proto || it->second.ports_known != f.ports_known ||
		     (f.ports_known && (it->second.dport != f.dport || it->second.sport != f.sport ||
					it->second.flags_known != f.flags_known || it->second.tcp_flags != f.tcp_flags)))) {
			e.xdp = 1;
			e.counter = "drop_malformed";
			e.why = "first fragment of another port than its key's entry";
			return e;
		}
	}
	if (f.frag == FrameFacts::Frag::later) {
		auto it = frags_.find(frag_key(f));
		if (it != frags_.end() && !it->second.ended && !it->second.expired) {
			f.proto_known = true;
			f.ports_known = it->second.ports_known;
			f.proto = it->second.proto;
			f.dport = it->second.dport;
			f.sport = it->second.sport;
			f.flags_known = it->second.flags_known;
			f.tcp_flags = it->second.tcp_flags;
			e.why = "later fragment judged as its first; ";
			if (track_state)
				follow_later_fragment(in);
		} else if (f.family == 6) {
			f.proto_known = false;
			e.why = "later fragment, first unseen: protocol and ports unknown; ";
		} else {
			e.why = "later fragment, first unseen: ports unknown; ";
		}
	}

	int pproto = f.proto == 58 ? 1 : f.proto;
	bool has_ports = pproto == 6 || pproto == 17;
	std::vector<size_t> pool;
	bool definite = false;
	for (size_t i : cands) {
		const ModelRule &r = rules_[i].spec;
		if (r.proto && f.proto_known && r.proto != pproto)
			continue; // NO
		if (r.has_ports() && f.proto_known && has_ports && f.ports_known &&
		    (f.dport < r.port_lo || f.dport > r.port_hi))
			continue; // NO
		if (r.has_sport() && f.proto_known && has_ports && f.ports_known &&
		    (f.sport < r.sport_lo || f.sport > r.sport_hi))
			continue; // NO
		if (r.flags_mask && f.proto_known && f.flags_known && pproto == 6 &&
		    (f.tcp_flags & r.flags_mask) != r.flags_value)
			continue; // NO
		bool def = (r.proto == 0 || f.proto_known) && (!r.has_ports() || (f.ports_known && has_ports)) &&
			   (!r.has_sport() || (f.ports_known && has_ports)) &&
			   (!r.flags_mask || (f.flags_known && pproto == 6));
		if (!def && r.action == ModelRule::Action::allow)
			continue; // an allow never matches on an unknown selector
		pool.push_back(i);
		if (def) {
			definite = true;
			break;
		}
	}
	if (pool.empty()) {
		// Passed: where a rule covers the source, a first fragment is
		// remembered here too, so that its later fragments are not charged
		// to a port rule of another port.
		e.counter = "pass_no_match";
		e.why += cands.empty() ? "no rule covers it" : "no rule matches";
		if (track_state && !cands.empty())
			remember_fragment(in);
		return e;
	}
	if (f.tiny_first) {
		// Where a rule may decide it (its ports unknown), a tiny first
		// fragment is dropped, and charged to no bucket.
		e.xdp = 1;
		e.counter = "drop_malformed";
		e.why += "tiny first fragment that a rule may decide";
		return e;
	}
	// Each candidate that may match is charged, in walk order, up to 8 of
	// them; then the strictest of any further ones and the definite one (the
	// definite one alone, if no further one may match). A drop ends it.
	std::vector<size_t> charge, weigh;
	for (size_t k = 0; k < pool.size(); k++) {
		bool maybe = !(definite && k + 1 == pool.size());
		(maybe && charge.size() < SPEC_MAX_UNKNOWN_CHARGED ? charge : weigh).push_back(pool[k]);
	}
	if (!weigh.empty()) {
		size_t win = weigh[0];
		for (size_t i : weigh)
			if (rules_[i].spec.strictness() > rules_[win].spec.strictness())
				win = i;
		charge.push_back(win);
	}
	for (size_t i : charge) {
		const ModelRule &r = rules_[i].spec;
		bool decides = i == charge.back();
		e.rule = static_cast<int>(i);
		e.why += (decides ? (definite ? "decided by " : "strictest possible rule ") : "charged as it may match: ") +
			 r.name + (decides ? "" : "; ");
		if (r.action == ModelRule::Action::allow) {
			e.counter = "pass_allow";
			e.allowed = true;
			break;
		}
		if (r.action == ModelRule::Action::deny) {
			e.xdp = 1;
			e.counter = "drop_deny";
			break;
		}
		e.charged = true;
		if (!track_state) {
			// Whether it passes depends on buckets the oracle does not track.
			e.xdp = -1;
			e.counter = "limit";
			return e;
		}
		uint64_t &t = tokens(i, f);
		if (t == 0) {
			e.xdp = 1;
			e.counter = "drop_rate";
			break;
		}
		t--;
		e.counter = "pass_limit";
	}
	if (e.xdp == 2 && track_state)
		remember_fragment(in);
	return e;
}

} // namespace sluice::test
