/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Packet parsing for the XDP program: a byte offset from the frame's start
 * walks Ethernet (up to SLUICE_MAX_VLAN_DEPTH tags), IPv4 or IPv6 (a bounded
 * extension-header walk), and reads the transport protocol, the ports and
 * TCP's flags when they are there. Offsets, not a pointer cursor: the verifier needs
 * them bounded (SLUICE_MAX_HDR_OFF) to see the walk's states converge.
 *
 * What cannot be read is not guessed: a packet whose protocol or ports are
 * unknown (a later fragment, a truncated transport header, an extension chain
 * beyond the bound) says so, and rule matching never lets an allow match on
 * an unknown selector and charges the strictest rule the packet may belong to.
 * Fragments are tied to their datagram by the caller (struct sluice_frag_key).
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
#define ETH_P_PPPOE_SESSION 0x8864
#define ETH_P_MPLS_UNICAST  0x8847
#define ETH_P_MPLS_MULTI    0x8848

#define IPV6_NEXTHDR_HOP      0
#define IPV6_NEXTHDR_ROUTING  43
#define IPV6_NEXTHDR_FRAGMENT 44
#define IPV6_NEXTHDR_AUTH     51
#define IPV6_NEXTHDR_DEST     60
#define IPPROTO_ICMPV6_NUM    58

#define IPV4_FRAG_OFFSET_MASK 0x1fff
#define IPV4_FRAG_MORE        0x2000
#define IPV6_FRAG_OFFSET_MASK 0xfff8
#define IPV6_FRAG_MORE        0x0001

/* parse_packet's verdicts on a frame. */
enum parse_result {
	PARSE_IP = 1,         /* an IP packet; struct packet_info is filled */
	PARSE_NOT_IP = 0,     /* another EtherType: untouched */
	PARSE_MALFORMED = -1, /* truncated or inconsistent: the stack drops it too; for
			       * IPv4 and IPv6, pkt->family is set (malformed_source) */
	PARSE_TOO_DEEP = -2,  /* more VLAN tags than we walk: the stack would deliver it */
};

/* packet_info.flags */
#define PKT_FIRST_FRAG 0x1 /* the first fragment of a datagram: its ports are remembered */
#define PKT_LATER_FRAG 0x2 /* a later fragment: its ports come from the first one */
#define PKT_TINY_FRAG  0x4 /* a first fragment too short to hold its ports: an attack */
#define PKT_ENCAP      0x8 /* IP in IP, GRE, ESP, PPPoE, MPLS: judged by the outer header */
#define PKT_COVERED    0x10 /* set by the program: some rule covers the source address */
#define PKT_LAST_FRAG  0x20 /* a later fragment that says no more follow */

/* packet_info.ports_known */
#define PORTS_KNOWN     0x1 /* dport was read */
#define PORTS_TCP_FLAGS 0x2 /* TCP: and tcp_flags (a header cut before its 14th byte shows the ports alone) */
#define PORTS_SPORT     0x4 /* and sport: always with PORTS_KNOWN, but in a fragment entry of 0.2.7's state */

/* What the data plane knows about a packet once parsed. Host order unless named addr. */
struct packet_info {
	__u8  saddr[16];   /* network order; IPv4 in the first 4 bytes */
	__u32 l3_len;      /* the IP total length: what byte rates charge (no Ethernet padding) */
	__u16 dport;       /* valid when ports_known; with family and proto, one aligned word */
	__u8  family;      /* 4 or 6 */
	__u8  proto;       /* enum sluice_proto for TCP/UDP/ICMP(v6), else the IP protocol */
	__u16 hdr_len;     /* IP header, options and extension headers, plus the TCP/UDP header */
	__u8  proto_known;
	__u8  flags;       /* PKT_* */
	__u8  ports_known; /* PORTS_*; with tcp_flags and sport, one aligned word */
	__u8  tcp_flags;   /* with PORTS_TCP_FLAGS: the TCP header's flags byte */
	__u16 sport;       /* valid with PORTS_SPORT */
};

/* What a packet shows of its source port and TCP flags, as one word: the
 * bytes of struct packet_info from ports_known to sport, which it keeps
 * together and aligned (parse_l4 stores them as one word, the drop memo
 * compares them with one load). */
struct packet_selectors {
	__u8  ports_known;
	__u8  tcp_flags;
	__u16 sport;
};
_Static_assert(__builtin_offsetof(struct packet_info, ports_known) % 4 == 0 &&
		       __builtin_offsetof(struct packet_info, tcp_flags) ==
			       __builtin_offsetof(struct packet_info, ports_known) + 1 &&
		       __builtin_offsetof(struct packet_info, sport) ==
			       __builtin_offsetof(struct packet_info, ports_known) + 2,
	       "packet_info keeps ports_known, tcp_flags and sport as one aligned word");

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
	__be16 frag_off; /* offset in 8-byte units << 3 | M flag */
	__be32 id;
};

static __always_inline int is_vlan(__be16 proto)
{
	return proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD);
}

/* Ethernet and up to SLUICE_MAX_VLAN_DEPTH tags. Returns the EtherType of the
 * payload in network order, PARSE_MALFORMED if truncated, PARSE_TOO_DEEP if
 * still tagged after the bound; *l3_off is where the payload begins. */
static __always_inline int parse_ethhdr(void *data, void *data_end, __u32 *l3_off)
{
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__be16 proto;
	int i;

	if ((void *)(eth + 1) > data_end)
		return PARSE_MALFORMED;
	proto = eth->h_proto;

#pragma unroll
	for (i = 0; i < SLUICE_MAX_VLAN_DEPTH; i++) {
		struct vlan_hdr *vlan = data + off;

		if (!is_vlan(proto))
			break;
		if ((void *)(vlan + 1) > data_end)
			return PARSE_MALFORMED;
		proto = vlan->encap_proto;
		off += sizeof(*vlan);
	}
	*l3_off = off;
	if (is_vlan(proto))
		return PARSE_TOO_DEEP;
	return proto;
}

/* Records a known upper-layer protocol. IP in IP, GRE and ESP carry other
 * packets, which are judged by this outer header. */
static __always_inline void set_proto(struct packet_info *pkt, int ipproto)
{
	pkt->proto_known = 1;
	pkt->proto = ipproto == IPPROTO_ICMP || ipproto == IPPROTO_ICMPV6_NUM ? SLUICE_PROTO_ICMP : ipproto;
	if (ipproto == IPPROTO_IPIP || ipproto == IPPROTO_IPV6 || ipproto == IPPROTO_GRE ||
	    ipproto == IPPROTO_ESP)
		pkt->flags |= PKT_ENCAP;
}

/* Headers deeper than this are not in the linear part of any frame; the bound
 * also lets the verifier see the offsets converge. */
#define SLUICE_MAX_HDR_OFF 4096

/* Writes the four bytes at `src` to `dst` (4-aligned) as one 32-bit store,
 * so that a later 4-byte load of them is forwarded from it; across several
 * smaller stores it would wait for them to retire. barrier_var keeps the
 * compiler from splitting the store into the fields the word was built from. */
static __always_inline void store_word(void *dst, const void *src)
{
	__u32 w;

	__builtin_memcpy(&w, src, sizeof(w));
	barrier_var(w);
	__builtin_memcpy(dst, &w, sizeof(w));
}

/*
 * The transport header at `off` (bytes from the frame's start): the protocol,
 * the ports of TCP and UDP when their first four bytes are in the datagram,
 * which ends at l3_end, and TCP's flags when its first fourteen are. A first
 * fragment too short for its ports is marked PKT_TINY_FRAG.
 */
static __always_inline void parse_l4(void *data, void *data_end, __u32 off, __u32 l3_end,
				     struct packet_info *pkt, int ipproto)
{
	struct {
		__u16 dport;
		__u8  family;
		__u8  proto;
	} selector;
	struct packet_selectors sel = {};
	__be16 *ports;

	set_proto(pkt, ipproto);
	if (ipproto != IPPROTO_TCP && ipproto != IPPROTO_UDP)
		return;
	if (off > SLUICE_MAX_HDR_OFF)
		goto unknown;
	ports = data + off;
	if ((void *)(ports + 2) > data_end || off + 4 > l3_end)
		goto unknown;
	/* The port, with the family and protocol again, as one word, and
	 * the source port and TCP's flags with what of them is known as
	 * another: the drop memo loads each as one (store_word). */
	selector.dport = bpf_ntohs(ports[1]);
	selector.family = pkt->family;
	selector.proto = pkt->proto;
	store_word(&pkt->dport, &selector);
	sel.sport = bpf_ntohs(ports[0]);
	sel.ports_known = PORTS_KNOWN | PORTS_SPORT;
	if (ipproto == IPPROTO_UDP) {
		pkt->hdr_len += sizeof(struct udphdr);
	} else {
		struct tcphdr *tcph = (void *)ports;

		if ((void *)(tcph + 1) <= data_end)
			pkt->hdr_len += tcph->doff * 4;
		/* The flags, the header's 14th byte, when the datagram holds it. */
		if ((void *)ports + 14 <= data_end && off + 14 <= l3_end) {
			sel.tcp_flags = ((__u8 *)ports)[13];
			sel.ports_known |= PORTS_TCP_FLAGS;
		}
	}
	store_word(&pkt->ports_known, &sel);
	return;
unknown:
	if (pkt->flags & PKT_FIRST_FRAG)
		pkt->flags |= PKT_TINY_FRAG;
}

/* The frame's fragment key, when it is a fragment: in a per-CPU slot, not
 * on the stack (the program's frames must fit 512 bytes across its calls),
 * and looked up only for fragments, so other packets read no map for it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_frag_key);
} sluice_fragkey SEC(".maps");

static __always_inline struct sluice_frag_key *frag_key(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&sluice_fragkey, &zero);
}

/* IPv4 with options skipped (enum parse_result). A later fragment has its
 * protocol (reassembly keys on it) but no ports. Fills the fragment key for
 * any fragment. */
/* Bytes from `l3_off` to the end of the frame, fragments of a multi-buffer
 * frame included (generic mode hands those to an xdp.frags program). */
static __always_inline __u32 datagram_room(struct xdp_md *ctx, __u32 l3_off, __u32 linear)
{
	__u32 len = bpf_xdp_get_buff_len(ctx);

	return len > l3_off ? len - l3_off : linear;
}

static __always_inline int parse_ipv4(struct xdp_md *ctx, void *data, void *data_end, __u32 l3_off,
				      struct packet_info *pkt)
{
	struct iphdr *iph = data + l3_off;
	struct sluice_frag_key *fk;
	__u32 hdr_len, tot_len, avail;
	__u64 saddr;
	__u16 frag;

	/* First: a malformed frame's source may still be read (its family
	 * says where); the store is made on every path, so it costs nothing. */
	pkt->family = 4;
	if ((void *)(iph + 1) > data_end)
		return PARSE_MALFORMED;
	if (iph->version != 4 || iph->ihl < 5)
		return PARSE_MALFORMED;
	hdr_len = iph->ihl * 4;
	if ((void *)iph + hdr_len > data_end)
		return PARSE_MALFORMED;
	/* The stack drops a datagram longer than its frame or shorter than its
	 * header; 0 is BIG TCP's "as long as the frame". */
	avail = data_end - (void *)iph;
	tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len == 0 || tot_len > avail)
		avail = datagram_room(ctx, l3_off, avail);
	if (tot_len == 0)
		tot_len = avail;
	if (tot_len < hdr_len || tot_len > avail)
		return PARSE_MALFORMED;

	pkt->l3_len = tot_len;
	pkt->hdr_len = hdr_len;
	/* One 8-byte store, the rest zero: a later 8-byte load of the
	 * address (source_slot, the drop memo) is forwarded from it, where
	 * after a 4-byte store it would wait for the store to retire. */
	saddr = iph->saddr;
	__builtin_memcpy(pkt->saddr, &saddr, 8);

	frag = bpf_ntohs(iph->frag_off);
	if (frag & (IPV4_FRAG_OFFSET_MASK | IPV4_FRAG_MORE)) {
		fk = frag_key();
		if (!fk)
			return PARSE_MALFORMED; /* cannot happen: a per-CPU array's one slot */
		__builtin_memset(fk, 0, sizeof(*fk));
		fk->family = 4;
		fk->proto = iph->protocol;
		fk->id = iph->id;
		__builtin_memcpy(fk->saddr, &iph->saddr, 4);
		__builtin_memcpy(fk->daddr, &iph->daddr, 4);
		if (frag & IPV4_FRAG_OFFSET_MASK) {
			pkt->flags |= PKT_LATER_FRAG | (frag & IPV4_FRAG_MORE ? 0 : PKT_LAST_FRAG);
			set_proto(pkt, iph->protocol);
			return PARSE_IP;
		}
		pkt->flags |= PKT_FIRST_FRAG;
	}
	parse_l4(data, data_end, l3_off + hdr_len, l3_off + tot_len, pkt, iph->protocol);
	return PARSE_IP;
}

static __always_inline int is_ipv6_ext(__u8 nexthdr)
{
	return nexthdr == IPV6_NEXTHDR_HOP || nexthdr == IPV6_NEXTHDR_ROUTING ||
	       nexthdr == IPV6_NEXTHDR_DEST || nexthdr == IPV6_NEXTHDR_AUTH ||
	       nexthdr == IPV6_NEXTHDR_FRAGMENT;
}

/* IPv6's fixed header at l3_off (enum parse_result): fills the length, the
 * family and the source, and *off, *l3_end and *nexthdr for what follows.
 * Writes the same whenever it runs, so the chain's walk may run it again. */
static __always_inline int parse_ipv6_header(struct xdp_md *ctx, void *data, void *data_end, __u32 l3_off,
					     struct packet_info *pkt, __u32 *off, __u32 *l3_end, __u8 *nexthdr)
{
	struct ipv6hdr *ip6h = data + l3_off;
	__u32 avail, payload;

	pkt->family = 6; /* first, as in parse_ipv4 */
	if ((void *)(ip6h + 1) > data_end)
		return PARSE_MALFORMED;
	if (ip6h->version != 6)
		return PARSE_MALFORMED;
	avail = data_end - (void *)ip6h;
	payload = bpf_ntohs(ip6h->payload_len);
	/* 0 is a jumbogram or BIG TCP: as long as the frame. */
	if (!payload || sizeof(*ip6h) + payload > avail)
		avail = datagram_room(ctx, l3_off, avail);
	pkt->l3_len = payload ? sizeof(*ip6h) + payload : avail;
	if (pkt->l3_len > avail)
		return PARSE_MALFORMED;

	__builtin_memcpy(pkt->saddr, &ip6h->saddr, 16);
	*l3_end = l3_off + pkt->l3_len;
	*off = l3_off + sizeof(*ip6h);
	*nexthdr = ip6h->nexthdr;
	return PARSE_IP;
}

/*
 * IPv6 and at most SLUICE_MAX_IPV6_EXT_HDRS extension headers (enum
 * parse_result). The protocol stays unknown for a chain longer than the bound
 * or cut short, and for a later fragment (RFC 8200 uses only the first
 * fragment's next header). Fills the fragment key for any fragment. A global function, so
 * the verifier checks the walk once, not once per VLAN depth.
 */
__noinline int sluice_parse_ipv6(struct xdp_md *ctx, __u32 l3_off, struct packet_info *pkt)
{
	struct sluice_frag_key *fk;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6h;
	__u32 off, l3_end;
	__u8 nexthdr;
	int i, parsed;

	if (!pkt || l3_off >= SLUICE_MAX_HDR_OFF) /* the verifier needs both */
		return PARSE_MALFORMED;
	/* The verifier again: the compiler may reload l3_off from the stack,
	 * where the check above no longer bounds it. */
	barrier_var(l3_off);
	l3_off &= SLUICE_MAX_HDR_OFF - 1;
	parsed = parse_ipv6_header(ctx, data, data_end, l3_off, pkt, &off, &l3_end, &nexthdr);
	if (parsed != PARSE_IP)
		return parsed;
	ip6h = data + l3_off;
	if ((void *)(ip6h + 1) > data_end) /* the verifier: checked in parse_ipv6_header */
		return PARSE_MALFORMED;

	for (i = 0; i < SLUICE_MAX_IPV6_EXT_HDRS; i++) {
		__u8 *hdr;
		__u16 frag;

		if (!is_ipv6_ext(nexthdr))
			break;
		if (off > SLUICE_MAX_HDR_OFF)
			return PARSE_IP; /* protocol unknown */
		hdr = data + off;
		/* Every extension header is at least 8 bytes long. */
		if ((void *)(hdr + 8) > data_end || off + 8 > l3_end)
			goto cut_short;
		if (nexthdr != IPV6_NEXTHDR_FRAGMENT) {
			off += nexthdr == IPV6_NEXTHDR_AUTH ? (hdr[1] + 2) * 4 : (hdr[1] + 1) * 8;
			nexthdr = hdr[0];
			if (off > l3_end) /* a header longer than the datagram */
				goto cut_short;
			continue;
		}
		frag = bpf_ntohs(((struct ipv6_frag_hdr *)hdr)->frag_off);
		nexthdr = hdr[0];
		off += sizeof(struct ipv6_frag_hdr);
		if (!(frag & (IPV6_FRAG_OFFSET_MASK | IPV6_FRAG_MORE)))
			continue; /* an atomic fragment: a whole packet */
		fk = frag_key();
		if (!fk)
			return PARSE_MALFORMED; /* cannot happen: a per-CPU array's one slot */
		__builtin_memset(fk, 0, sizeof(*fk));
		fk->family = 6;
		fk->id = ((struct ipv6_frag_hdr *)hdr)->id;
		__builtin_memcpy(fk->saddr, &ip6h->saddr, 16);
		__builtin_memcpy(fk->daddr, &ip6h->daddr, 16);
		if (frag & IPV6_FRAG_OFFSET_MASK) {
			/* After a first fragment's header too: a later fragment. */
			pkt->flags &= ~PKT_FIRST_FRAG;
			pkt->flags |= PKT_LATER_FRAG | (frag & IPV6_FRAG_MORE ? 0 : PKT_LAST_FRAG);
			return PARSE_IP;
		}
		pkt->flags |= PKT_FIRST_FRAG;
	}
	pkt->hdr_len = off - l3_off;
	/* Still an extension header after the bound: the protocol stays unknown. */
	if (is_ipv6_ext(nexthdr))
		return PARSE_IP;
	parse_l4(data, data_end, off, l3_end, pkt, nexthdr);
	return PARSE_IP;
cut_short:
	/* A first fragment must hold the whole chain (RFC 8200). */
	if (pkt->flags & PKT_FIRST_FRAG)
		pkt->flags |= PKT_TINY_FRAG;
	return PARSE_IP;
}

/* IPv6 (enum parse_result). A fixed header that names its upper-layer
 * protocol is parsed here, inline; a chain of extension headers, in
 * sluice_parse_ipv6, which walks it (and parses the fixed header again). */
static __always_inline int parse_ipv6(struct xdp_md *ctx, void *data, void *data_end, __u32 l3_off,
				      struct packet_info *pkt)
{
	__u32 off, l3_end;
	__u8 nexthdr;
	int parsed = parse_ipv6_header(ctx, data, data_end, l3_off, pkt, &off, &l3_end, &nexthdr);

	if (parsed != PARSE_IP)
		return parsed;
	if (is_ipv6_ext(nexthdr))
		return sluice_parse_ipv6(ctx, l3_off, pkt);
	pkt->hdr_len = sizeof(struct ipv6hdr);
	parse_l4(data, data_end, off, l3_end, pkt, nexthdr);
	return PARSE_IP;
}

/*
 * Parses a whole frame (enum parse_result). For PARSE_IP, *pkt is filled, and
 * the fragment key too if the packet is a fragment (pkt->flags says which kind).
 * *l3_off is set to where the bytes after L2 begin.
 */
static __always_inline int parse_packet(struct xdp_md *ctx, struct packet_info *pkt, __u32 *l3_off)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int eth_proto;

	*l3_off = 0;
	eth_proto = parse_ethhdr(data, data_end, l3_off);
	if (eth_proto < 0)
		return eth_proto;

	if (eth_proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(ctx, data, data_end, *l3_off, pkt);
	if (eth_proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(ctx, data, data_end, *l3_off, pkt);
	if (eth_proto == bpf_htons(ETH_P_PPPOE_SESSION) || eth_proto == bpf_htons(ETH_P_MPLS_UNICAST) ||
	    eth_proto == bpf_htons(ETH_P_MPLS_MULTI))
		pkt->flags |= PKT_ENCAP;
	return PARSE_NOT_IP;
}

/*
 * The source of a frame parse_packet found malformed (PARSE_MALFORMED), when
 * it can be read: an IPv4 or IPv6 EtherType and the family's source field
 * inside the frame, whatever else is wrong (version, lengths, the rest of
 * the header). Writes it to pkt->saddr (network order) and returns 1; 0 if
 * there is none. A multi-buffer frame whose linear part may end inside its
 * IP header is not malformed for sure (the header may go on in the frame's
 * fragments): 0 too, and it fails open as before.
 */
static __always_inline int malformed_source(struct xdp_md *ctx, __u32 l3_off, struct packet_info *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *ip = data + (l3_off & (SLUICE_MAX_HDR_OFF - 1)); /* the verifier wants it bounded */
	__u32 linear = data_end - data;

	if (bpf_xdp_get_buff_len(ctx) > linear && l3_off + (pkt->family == 4 ? 60 : 40) > linear)
		return 0;

	if (pkt->family == 4) {
		if ((void *)(ip + 16) > data_end)
			return 0;
		__builtin_memcpy(pkt->saddr, ip + 12, 4);
		return 1;
	}
	if (pkt->family == 6) {
		if ((void *)(ip + 24) > data_end)
			return 0;
		__builtin_memcpy(pkt->saddr, ip + 8, 16);
		return 1;
	}
	return 0;
}

#endif /* SLUICE_PARSE_H */
