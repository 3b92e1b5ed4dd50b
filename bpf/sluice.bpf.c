// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Sluice XDP program: per-source rate limiting at layer 3/4.
 *
 * For each frame: parse (parse.h); a later fragment takes its datagram's
 * protocol and port from the fragment table; find the rules covering the
 * source address with one lookup (a multibit table for IPv4, an LPM trie for
 * IPv6; the controller compiles each prefix's candidate list, most specific
 * first), take the first rule whose protocol and port match (or, when they
 * are unknown, the strictest rule the packet may belong to), then allow, deny,
 * or charge the source's bucket (sluice_algos.h) in a set table of our own
 * (sluice_settable.h): IPv4, IPv6 and sliding-log buckets alike.
 *
 * Every frame lands in exactly one verdict counter. Fail-open: whenever the
 * program cannot decide, the frame passes and a counter says why.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "lib/parse.h"
#include "lib/walk.h"
#include "lib/fast.h"
#ifdef SLUICE_BENCH_SOURCES
#include "bench_sources.h"
#endif

/* The bytes after L2 of a frame that was not parsed as IP: what its counter counts. */
static __always_inline __u32 bytes_after(void *data, void *data_end, __u32 l3_off)
{
	void *l3 = data + (l3_off & (SLUICE_MAX_HDR_OFF - 1)); /* the verifier wants it bounded */

	return l3 < data_end ? data_end - l3 : 0;
}

/*
 * A malformed frame (truncated, or lengths that disagree with the frame or
 * the header: the stack drops it) whose source can be read and some rule
 * covers: passed, it would cost the host an skb for nothing, so it is
 * dropped (drop_malformed), whatever the rules say of the source. Without a
 * source to read, or from a source no rule covers, it fails open.
 */
static __always_inline __u32 malformed_verdict(struct xdp_md *ctx, __u32 l3_off, struct packet_info *pkt)
{
	__u32 set;

	if (!malformed_source(ctx, l3_off, pkt))
		return SLUICE_CNT_FAILOPEN_PARSE;
	set = sluice_lookup_set(active_sets());
	if (pkt->family == 4 ? lookup_v4(pkt->saddr, set) != 0 : lookup_v6(pkt->saddr, set) != NULL)
		return SLUICE_CNT_DROP_MALFORMED;
	return SLUICE_CNT_FAILOPEN_PARSE;
}

/* The verdict counter of a frame that is not an IP packet we can judge. */
static __always_inline __u32 unparsed_verdict(struct xdp_md *ctx, __u32 l3_off, struct packet_info *pkt,
					      int parsed)
{
	switch (parsed) {
	case PARSE_NOT_IP:
		return SLUICE_CNT_PASS_NOT_IP;
	case PARSE_TOO_DEEP:
		return SLUICE_CNT_DROP_MALFORMED;
	default:
		return malformed_verdict(ctx, l3_off, pkt);
	}
}

SEC("xdp.frags")
int SLUICE_PROG_NAME(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct packet_info pkt = {};
	__u32 verdict, l3_off;
	int parsed;

#ifdef SLUICE_BENCH_SOURCES
	bench_rewrite_source(ctx);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
#endif
	parsed = parse_packet(ctx, &pkt, &l3_off);
	if (parsed == PARSE_IP) {
		if (!decide_fast(ctx, &pkt, &verdict))
			verdict = decide_packet(ctx, &pkt);
		count_global(verdict, pkt.l3_len);
	} else {
		__u32 bytes = bytes_after(data, data_end, l3_off);

		if (pkt.flags & PKT_ENCAP)
			count_global(SLUICE_CNT_INFO_ENCAPSULATED, bytes);
		verdict = unparsed_verdict(ctx, l3_off, &pkt, parsed);
		count_global(verdict, bytes);
	}
	if ((SLUICE_DROP_VERDICTS >> verdict) & 1)
		return XDP_DROP;
	/* Only where a rule covers the source (the table is kept for them), and
	 * only a first fragment that names its datagram's protocol. */
	if ((pkt.flags & (PKT_FIRST_FRAG | PKT_TINY_FRAG | PKT_COVERED)) == (PKT_FIRST_FRAG | PKT_COVERED) &&
	    pkt.proto_known)
		remember_first_fragment(&pkt);
	/* attach --then: on to the interface's next program. Without one the
	 * tail call falls through. */
	bpf_tail_call(ctx, &SLUICE_MAP_THEN, ctx->ingress_ifindex);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
