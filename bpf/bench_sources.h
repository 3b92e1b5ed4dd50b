/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Benchmark builds only: BPF_PROG_TEST_RUN repeats one frame, so this rewrites
 * each frame's source address to one of `count` sources, 10.0.0.0 upwards for
 * IPv4 (header checksum fixed, so the kernel stack accepts it) or bits 32-63
 * of the IPv6 source (each its own /64, which IPv6 buckets aggregate by
 * default). Sources are drawn from a per-CPU xorshift, or in turn when
 * `sequential` is set. The production program never includes this.
 */
#ifndef SLUICE_BENCH_SOURCES_H
#define SLUICE_BENCH_SOURCES_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct bench_gen {
	__u64 state;      /* xorshift state, or the next index when sequential */
	__u32 count;      /* sources to draw from; 0 leaves frames alone */
	__u32 sequential;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_gen);
} bench_gen SEC(".maps");

static __always_inline __u16 csum_fold32(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

static __always_inline void bench_rewrite_source(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct bench_gen *g;
	__u32 zero = 0, idx;
	__be32 addr;

	g = bpf_map_lookup_elem(&bench_gen, &zero);
	if (!g || !g->count || (void *)(eth + 1) > data_end)
		return;
	if (g->sequential) {
		idx = (__u32)(g->state++ % g->count);
	} else {
		__u64 x = g->state ? g->state : 88172645463325252ULL;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		g->state = x;
		idx = (__u32)(((x & 0xffffffff) * g->count) >> 32);
	}
	addr = bpf_htonl(0x0a000000 + idx);

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = (void *)(eth + 1);
		__u32 sum;

		if ((void *)(iph + 1) > data_end)
			return;
		/* RFC 1624 incremental update: ~HC' = ~HC + ~m + m' */
		sum = (__u16)~iph->check;
		sum += (__u16)~(iph->saddr & 0xffff) + (__u16)~(iph->saddr >> 16);
		sum += (__u16)(addr & 0xffff) + (__u16)(addr >> 16);
		iph->saddr = addr;
		iph->check = ~csum_fold32(sum);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6h = (void *)(eth + 1);

		if ((void *)(ip6h + 1) > data_end)
			return;
		ip6h->saddr.in6_u.u6_addr32[1] = addr;
	}
}

#endif /* SLUICE_BENCH_SOURCES_H */
