// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Baselines for the benchmark: the cheapest possible XDP program, one that
 * parses exactly as Sluice does and then drops, one that only reads the clock,
 * and the source generator of the many-source scenarios. Sluice's cost per
 * packet is reported against them, measured in the same run.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "lib/parse.h"
#include "bench_sources.h"

SEC("xdp")
int bench_xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

SEC("xdp")
int bench_parse_only(struct xdp_md *ctx)
{
	struct packet_info pkt = {};
	__u32 l3_off;

	/* Keep the parse from being optimised away: its result picks the verdict. */
	if (parse_packet(ctx, &pkt, &l3_off) < 0)
		return XDP_PASS;
	return pkt.saddr[0] == 0xff && pkt.dport == 0xffff ? XDP_PASS : XDP_DROP;
}

/* What reading the clock costs: Sluice reads it once per limited packet. */
SEC("xdp")
int bench_clock_drop(struct xdp_md *ctx)
{
	return bpf_ktime_get_ns() == 1 ? XDP_PASS : XDP_DROP;
}

/* ...and the coarse clock, which rules with a burst of a tick or more read. */
SEC("xdp")
int bench_coarse_clock_drop(struct xdp_md *ctx)
{
	return bpf_ktime_get_coarse_ns() == 1 ? XDP_PASS : XDP_DROP;
}

/* For many-source scenarios: the source generator, then drop... */
SEC("xdp")
int bench_gen_drop(struct xdp_md *ctx)
{
	bench_rewrite_source(ctx);
	return XDP_DROP;
}

/* ...or pass to the kernel stack, where nftables or hashlimit decide. */
SEC("xdp")
int bench_gen_pass(struct xdp_md *ctx)
{
	bench_rewrite_source(ctx);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
