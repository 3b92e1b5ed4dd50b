// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Sluice XDP program: per-source rate limiting at layer 3/4.
 *
 * The outline of one decision per frame; each step lives in its room under
 * bpf/lib/ (docs/design.md):
 *
 *   parse            lib/parse.h      Ethernet, VLANs, IPv4/IPv6, L4 ports
 *   banned?          lib/bans.h       a source under a temporary ban: dropped
 *   find candidates  lib/match.h      the live rule set, the source's match lists
 *                    lib/selectors.h  a rule's source ports and TCP flags
 *                    lib/fragments.h  a later fragment takes its first's ports;
 *                                     a first fragment claims its key
 *   decide           lib/walk.h       the walk down the match lists: the decision
 *                    lib/rule.h       one rule applied: allow, deny, or charge
 *                    lib/charge.h     a limit's bucket, found or made
 *                    lib/sources.h    the set tables (sluice_settable.h)
 *                    lib/algos/       GCRA, the locked algorithms, the sliding
 *                                     log (sluice_algos.h), lib/owed.h
 *   caches           lib/fast.h       the common case, decided without the walk
 *                    lib/memo.h       a drop repeated without the lookups
 *   count            lib/counters.h   every frame in exactly one verdict counter
 *                    lib/pending.h    a bucket's counters, a flood's drops per CPU
 *                    lib/events.h     throttle events
 *
 * The caches are caches of the walk's decision: each states, beside it, what
 * keeps its verdict equal to the walk's. Built with -DSLUICE_WALK_ONLY, the
 * program has neither, and every packet takes the walk, so that a test can
 * compare the two builds packet by packet.
 *
 * Fail-open: whenever the program cannot decide, the frame passes and a
 * counter says why.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "lib/parse.h"
#include "lib/walk.h"
#ifndef SLUICE_WALK_ONLY
#include "lib/fast.h"
#endif
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
	const struct sluice_active *live;

	if (!malformed_source(ctx, l3_off, pkt))
		return SLUICE_CNT_FAILOPEN_PARSE;
	live = live_entry();
	return source_covered(pkt, live ? live->set : 0) ? SLUICE_CNT_DROP_MALFORMED : SLUICE_CNT_FAILOPEN_PARSE;
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

/* An IP packet's verdict counter: a ban's drop, before anything else (the
 * same in every build); else the walk's decision (decide_packet), or the
 * same decision from a cache in front of it (decide_fast, with the drop
 * memo), unless the program is built without them (SLUICE_WALK_ONLY). One
 * lookup reads the live-set entry for all of them: the live-set word and
 * the ban switch. */
static __always_inline __u32 decide_ip(struct xdp_md *ctx, struct packet_info *pkt)
{
	const struct sluice_active *live = live_entry();
	__u32 verdict, word = 0, bans = 0;

	if (live) {
		word = live->set;
		bans = live->bans;
	}
	verdict = ban_verdict(pkt, bans);
	if (verdict)
		return verdict;
#ifndef SLUICE_WALK_ONLY
	if (decide_fast(ctx, pkt, word, &verdict))
		return verdict;
#endif
	return decide_packet(ctx, pkt, word);
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
		verdict = decide_ip(ctx, &pkt);
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
	/* attach --then: on to the interface's next program. Without one the
	 * tail call falls through. */
	bpf_tail_call(ctx, &SLUICE_MAP_THEN, ctx->ingress_ifindex);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
