// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Two small XDP programs for the chaining tests, standing in for "another XDP
 * program" on the same interface:
 *  - port_filter: a firewall of its own that drops UDP to port 7777 and
 *    counts what it sees; chained after Sluice (`attach --then`);
 *  - root: another loader's dispatcher that tail-calls slot 0 of its program
 *    array (where `attach --prog-array` installs Sluice) and counts the
 *    packets that found the slot empty.
 * Both are frags-aware, as Sluice's program is: the kernel lets a program
 * tail-call only programs of its own kind.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define FILTERED_PORT 7777

enum { SEEN, FILTERED, ROOT_EMPTY_SLOT, COUNTS };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} chain_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} root_jmp SEC(".maps");

static __always_inline void bump(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&chain_counts, &i);

	if (c)
		__sync_fetch_and_add(c, 1);
}

SEC("xdp.frags")
int port_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	bump(SEEN);
	if (ip->protocol != IPPROTO_UDP || ip->ihl != 5)
		return XDP_PASS;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	if (udp->dest == bpf_htons(FILTERED_PORT)) {
		bump(FILTERED);
		return XDP_DROP;
	}
	return XDP_PASS;
}

SEC("xdp.frags")
int root(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, &root_jmp, 0);
	bump(ROOT_EMPTY_SLOT);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
