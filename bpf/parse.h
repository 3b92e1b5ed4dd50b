/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Packet parsing for the XDP program: a cursor walks Ethernet (up to two VLAN
 * tags), IPv4 or IPv6 (with a bounded extension-header walk), and reads the
 * transport protocol and destination port when they can be trusted.
 *
 * What cannot be read is not guessed: a packet whose protocol or ports are
 * unknown (non-first fragment, truncated or unknown transport header, too many
 * extension headers) says so, and rule matching treats unknown selectors as
 * matching, so that hiding a header never slips a packet past a limit.
 */
#ifndef SLUICE_PARSE_H
#define SLUICE_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "sluice_abi.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

#define IPV6_NEXTHDR_HOP      0
#define IPV6_NEXTHDR_ROUTING  43
#define IPV6_NEXTHDR_FRAGMENT 44
#define IPV6_NEXTHDR_AUTH     51
#define IPV6_NEXTHDR_DEST     60
#define IPPROTO_ICMPV6_NUM    58

#define IPV4_FRAG_OFFSET_MASK 0x1fff

struct hdr_cursor {
	void *pos;
};

/* What the data plane knows about a packet once parsed. */
struct packet_info {
	__u8  saddr[16];   /* network order; IPv4 in the first 4 bytes */
	__u32 l3_len;      /* bytes from the IP header to the end of the frame */
	__u16 dport;       /* host order; valid when ports_known */
	__u8  family;      /* 4 or 6 */
	__u8  proto;       /* enum sluice_proto for TCP/UDP/ICMP(v6), else the IP protocol */
	__u8  proto_known;
	__u8  ports_known;
	__u8  fragment;    /* a non-first fragment */
};

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

struct ipv6_ext_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct ipv6_frag_hdr {
	__u8   nexthdr;
	__u8   reserved;
	__be16 frag_off; /* offset in 8-byte units << 3 | flags */
	__be32 id;
};

/* Ethernet and up to SLUICE_MAX_VLAN_DEPTH tags. Returns the EtherType of the
 * payload in network order, or -1 if the frame is truncated or too deeply tagged. */
static __always_inline int parse_ethhdr(struct hdr_cursor *c, void *data_end)
{
	struct ethhdr *eth = c->pos;
	__be16 proto;
	int i;

	if ((void *)(eth + 1) > data_end)
		return -1;
	c->pos = eth + 1;
	proto = eth->h_proto;

#pragma unroll
	for (i = 0; i < SLUICE_MAX_VLAN_DEPTH; i++) {
		struct vlan_hdr *vlan = c->pos;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(vlan + 1) > data_end)
			return -1;
		c->pos = vlan + 1;
		proto = vlan->encap_proto;
	}
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
		return -1;
	return proto;
}

/* IPv4 with options skipped. Returns the IP protocol, or -1 if malformed. */
static __always_inline int parse_ipv4(struct hdr_cursor *c, void *data_end,
				      struct packet_info *pkt)
{
	struct iphdr *iph = c->pos;
	__u32 hdr_len;

	if ((void *)(iph + 1) > data_end)
		return -1;
	if (iph->version != 4 || iph->ihl < 5)
		return -1;
	hdr_len = iph->ihl * 4;
	if (c->pos + hdr_len > data_end)
		return -1;

	pkt->family = 4;
	__builtin_memcpy(pkt->saddr, &iph->saddr, 4);
	/* Every fragment of a datagram carries its protocol and reassembly keys on
	 * it, so the protocol of a non-first fragment is trusted; its ports are not there. */
	if (iph->frag_off & bpf_htons(IPV4_FRAG_OFFSET_MASK))
		pkt->fragment = 1;
	c->pos += hdr_len;
	return iph->protocol;
}

/*
 * IPv6 and its extension headers, at most SLUICE_MAX_IPV6_EXT_HDRS of them.
 * Returns the upper-layer protocol, -2 if it cannot be known (chain too long or
 * a non-first fragment: RFC 8200 uses only the first fragment's next header),
 * or -1 if the fixed header is truncated.
 */
static __always_inline int parse_ipv6(struct hdr_cursor *c, void *data_end,
				      struct packet_info *pkt)
{
	struct ipv6hdr *ip6h = c->pos;
	__u8 nexthdr;
	int i;

	if ((void *)(ip6h + 1) > data_end)
		return -1;
	if (ip6h->version != 6)
		return -1;

	pkt->family = 6;
	__builtin_memcpy(pkt->saddr, &ip6h->saddr, 16);
	c->pos = ip6h + 1;
	nexthdr = ip6h->nexthdr;

	for (i = 0; i < SLUICE_MAX_IPV6_EXT_HDRS; i++) {
		struct ipv6_ext_hdr *ext = c->pos;

		switch (nexthdr) {
		case IPV6_NEXTHDR_HOP:
		case IPV6_NEXTHDR_ROUTING:
		case IPV6_NEXTHDR_DEST:
			if ((void *)(ext + 1) > data_end)
				return -2;
			nexthdr = ext->nexthdr;
			c->pos += (ext->hdrlen + 1) * 8;
			break;
		case IPV6_NEXTHDR_AUTH:
			if ((void *)(ext + 1) > data_end)
				return -2;
			nexthdr = ext->nexthdr;
			c->pos += (ext->hdrlen + 2) * 4;
			break;
		case IPV6_NEXTHDR_FRAGMENT: {
			struct ipv6_frag_hdr *frag = c->pos;

			if ((void *)(frag + 1) > data_end)
				return -2;
			if (frag->frag_off & bpf_htons(0xfff8)) {
				pkt->fragment = 1;
				return -2;
			}
			nexthdr = frag->nexthdr;
			c->pos = frag + 1;
			break;
		}
		default:
			return nexthdr;
		}
	}
	/* Still an extension header after the bound: the protocol stays unknown. */
	return -2;
}

/* Reads the destination port of TCP and UDP when the header is all there. */
static __always_inline void parse_l4(struct hdr_cursor *c, void *data_end,
				     struct packet_info *pkt, int ipproto)
{
	pkt->proto_known = 1;
	switch (ipproto) {
	case IPPROTO_TCP: {
		struct tcphdr *tcph = c->pos;

		pkt->proto = SLUICE_PROTO_TCP;
		if (pkt->fragment)
			return;
		if ((void *)(tcph + 1) > data_end || tcph->doff < 5)
			return;
		pkt->dport = bpf_ntohs(tcph->dest);
		pkt->ports_known = 1;
		return;
	}
	case IPPROTO_UDP: {
		struct udphdr *udph = c->pos;

		pkt->proto = SLUICE_PROTO_UDP;
		if (pkt->fragment)
			return;
		if ((void *)(udph + 1) > data_end)
			return;
		pkt->dport = bpf_ntohs(udph->dest);
		pkt->ports_known = 1;
		return;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6_NUM:
		pkt->proto = SLUICE_PROTO_ICMP;
		return;
	default:
		pkt->proto = ipproto;
		return;
	}
}

/*
 * Parses a whole frame. Returns 1 for an IP packet whose source is known
 * (pkt filled), 0 for a frame that is not IP, -1 for a malformed frame.
 * *payload is set to where the bytes after L2 begin, for byte counters.
 */
static __always_inline int parse_packet(void *data, void *data_end, struct packet_info *pkt,
					void **payload)
{
	struct hdr_cursor c = { .pos = data };
	int eth_proto, ipproto;

	*payload = data;
	eth_proto = parse_ethhdr(&c, data_end);
	if (eth_proto < 0)
		return -1;
	*payload = c.pos;

	if (eth_proto == bpf_htons(ETH_P_IP))
		ipproto = parse_ipv4(&c, data_end, pkt);
	else if (eth_proto == bpf_htons(ETH_P_IPV6))
		ipproto = parse_ipv6(&c, data_end, pkt);
	else
		return 0;
	if (ipproto == -1)
		return -1;

	pkt->l3_len = data_end - *payload;
	if (ipproto >= 0)
		parse_l4(&c, data_end, pkt, ipproto);
	return 1;
}

#endif /* SLUICE_PARSE_H */
