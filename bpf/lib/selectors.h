/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The selectors a rule may add to its protocol and destination port: a
 * source port range (SLUICE_RULE_SPORT) and TCP flags (tcp_flags_mask and
 * tcp_flags_value: a TCP packet matches when its flags masked equal the
 * value). parse_l4 reads the source port with the destination port
 * (PORTS_KNOWN | PORTS_SPORT), and TCP's flags when the datagram holds the header's 14th
 * byte (PORTS_TCP_FLAGS). A packet that hides them (a later fragment whose
 * first was not seen, a truncated header, a first fragment cut inside the TCP
 * header, an extension chain past the bound) may match such a rule, as it may
 * match a port rule: an allow never matches it, and each other candidate is
 * charged or the strictest decides. A later fragment takes its first
 * fragment's source port and flags with its destination port (struct
 * sluice_frag_info).
 */
#ifndef SLUICE_LIB_SELECTORS_H
#define SLUICE_LIB_SELECTORS_H

#include "sluice_abi.h"
#include "lib/parse.h"

/* Whether rule r selects on more than the packet's selector word
 * (packet_selector: destination port, family, protocol): a source port or
 * TCP flags. */
static __always_inline int rule_selects_more(const struct sluice_rule *r)
{
	return r->tcp_flags_mask || (r->flags & SLUICE_RULE_SPORT);
}

/* A packet's struct packet_selectors as one word (parse_l4 stores it as one). */
static __always_inline __u32 packet_selectors(const struct packet_info *pkt)
{
	__u32 v;

	__builtin_memcpy(&v, &pkt->ports_known, sizeof(v));
	return v;
}

/* The bits of packet_selectors that rule r's match reads (selectors_match):
 * for TCP flags, whether the packet showed them and the flags under the
 * rule's mask; for a source port, whether the packet showed it and the whole
 * port (a packet is keyed by its own source port, as by its own destination
 * port). 0 for a rule with neither: no packet's word differs under it. */
static __always_inline __u32 rule_selectors_mask(const struct sluice_rule *r)
{
	struct packet_selectors m = {};
	__u32 v;

	if (r->tcp_flags_mask) {
		m.ports_known = PORTS_TCP_FLAGS;
		m.tcp_flags = r->tcp_flags_mask;
	}
	if (r->flags & SLUICE_RULE_SPORT) {
		m.ports_known |= PORTS_SPORT;
		m.sport = 0xffff;
	}
	__builtin_memcpy(&v, &m, sizeof(v));
	return v;
}

enum selectors_match {
	SELECTORS_DIFFER,  /* a source port or flags the packet shows differ */
	SELECTORS_UNKNOWN, /* the rule has them and the packet hides them */
	SELECTORS_MATCH,   /* the packet shows them and they match, or the rule has none */
};

/* Rule r's source-port and TCP-flag selectors on pkt (rule_matches checks
 * the protocol and destination port; a flag rule's protocol is TCP). */
static __always_inline enum selectors_match selectors_match(const struct sluice_rule *r,
							    const struct packet_info *pkt)
{
	enum selectors_match m = SELECTORS_MATCH;

	if (r->tcp_flags_mask) {
		if (!(pkt->ports_known & PORTS_TCP_FLAGS))
			m = SELECTORS_UNKNOWN;
		else if ((pkt->tcp_flags & r->tcp_flags_mask) != r->tcp_flags_value)
			return SELECTORS_DIFFER;
	}
	if (r->flags & SLUICE_RULE_SPORT) {
		if (!(pkt->ports_known & PORTS_SPORT))
			m = SELECTORS_UNKNOWN;
		else if (pkt->sport < r->sport_lo || pkt->sport > r->sport_hi)
			return SELECTORS_DIFFER;
	}
	return m;
}

#endif /* SLUICE_LIB_SELECTORS_H */
