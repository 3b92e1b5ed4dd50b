/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Applying one rule to a packet: what the packet is charged on the wire,
 * the charge of a limit, the rule's counters and the verdict counter.
 */
#ifndef SLUICE_LIB_RULE_H
#define SLUICE_LIB_RULE_H

#include "lib/charge.h"
#include "lib/bans.h"

/*
 * The wire packets and bytes a frame carries. A TCP or UDP frame longer than
 * its interface's MTU is a super-packet (GRO in generic mode, BIG TCP): it is
 * charged as the segments it was or will be cut into, each with its headers.
 */
static __always_inline void wire_charge(const struct xdp_md *ctx, const struct packet_info *pkt,
					struct charge *ch)
{
	__u32 ifindex, mtu = SLUICE_DEFAULT_MTU, *m;
	__u64 segment, segs;

	ch->packets = 1;
	ch->bytes = pkt->l3_len;
	ch->pending = source_slot(pkt);
	if (pkt->l3_len <= SLUICE_DEFAULT_MTU || !pkt->ports_known)
		return;
	/* Read here, not above: the verifier turns it into three dependent
	 * loads (the frame's queue, its device, the index). */
	ifindex = ctx->ingress_ifindex;
	m = bpf_map_lookup_elem(&SLUICE_MAP_IFACE_MTU, &ifindex);
	if (m)
		mtu = *m;
	if (pkt->l3_len <= mtu || pkt->hdr_len >= mtu)
		return;
	segment = mtu - pkt->hdr_len;
	segs = (pkt->l3_len - pkt->hdr_len + segment - 1) / segment;
	ch->packets = segs;
	ch->bytes = pkt->l3_len + (segs - 1) * pkt->hdr_len;
}

/* The verdict counter of a limit rule's bucket result. */
static __always_inline __u32 limit_verdict(enum bucket_result res, const struct sluice_rule *rule)
{
	int shadow = rule->flags & SLUICE_RULE_SHADOW;

	switch (res) {
	case BUCKET_PASS:
		return SLUICE_CNT_PASS_LIMIT;
	case BUCKET_FORCED:
		return SLUICE_CNT_PASS_CONTENTION;
	case BUCKET_DROP:
		return shadow ? SLUICE_CNT_PASS_SHADOW : SLUICE_CNT_DROP_RATE;
	default:
		return SLUICE_CNT_FAILOPEN_TABLE;
	}
}

static __always_inline void count_rule(__u32 slot, enum bucket_result res, const struct charge *ch)
{
	struct sluice_rule_counters *rc = rule_counters(slot);

	if (!rc)
		return;
	switch (res) {
	case BUCKET_FORCED:
		rc->passed_contention += ch->packets;
		/* fallthrough */
	case BUCKET_PASS:
		rc->passed_packets += ch->packets;
		rc->passed_bytes += ch->bytes;
		break;
	case BUCKET_DROP:
		rc->dropped_packets += ch->packets;
		rc->dropped_bytes += ch->bytes;
		break;
	case BUCKET_FAIL_TABLE:
		rc->failopen_table += ch->packets;
		break;
	}
}

/* Not a verdict counter: decide_fast leaves the packet to the walk. */
#define VERDICT_WALK SLUICE_CNT_MAX

/* Applies one rule to a packet: charges its bucket if it is a limit, counts
 * it in the rule's counters, and returns the verdict counter. `fast` (a
 * constant) is decide_fast's: the rule, if a limit, is a GCRA-form
 * bucket, charged only if it exists (charge_v4_held, charge_v6_held); else
 * nothing is counted and VERDICT_WALK returned. */
static __always_inline __u32 apply_rule(struct xdp_md *ctx, const struct packet_info *pkt,
					const struct sluice_rule *rule, __u32 slot, const int fast)
{
	enum bucket_result res;
	struct charge ch;
	__u32 verdict;

	wire_charge(ctx, pkt, &ch);
	if (rule->action == SLUICE_ACTION_ALLOW) {
		res = BUCKET_PASS;
		verdict = SLUICE_CNT_PASS_ALLOW;
	} else if (rule->action == SLUICE_ACTION_DENY) {
		res = BUCKET_DROP;
		verdict = (rule->flags & SLUICE_RULE_SHADOW) ? SLUICE_CNT_PASS_SHADOW : SLUICE_CNT_DROP_DENY;
	} else if (fast) {
		int held = pkt->family == 4 ? charge_v4_held(source_key_v4(pkt, rule), rule, now_ns(rule), &ch)
					    : charge_v6_held(pkt, rule, now_ns(rule), &ch);

		if (held < 0)
			return VERDICT_WALK;
		res = held;
		verdict = limit_verdict(res, rule);
	} else {
		res = apply_limit(pkt, rule, &ch);
		verdict = limit_verdict(res, rule);
	}
	count_rule(slot, res, &ch);
	if (verdict == SLUICE_CNT_DROP_RATE && rule->ban.secs)
		sluice_ban_strike(rule, slot);
	return verdict;
}

#endif /* SLUICE_LIB_RULE_H */
