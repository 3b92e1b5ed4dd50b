// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * The controller's probe of the kernel's tick (struct sluice_clock): one run
 * through BPF_PROG_TEST_RUN reads jiffies, then CLOCK_MONOTONIC, then jiffies
 * again, as the XDP program would read them. Userspace has no jiffies of its
 * own to read.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 probe_jiffies_before;
__u64 probe_mono_ns;
__u64 probe_jiffies_after;

SEC("xdp")
int sluice_clock_probe(struct xdp_md *ctx)
{
	probe_jiffies_before = bpf_jiffies64();
	probe_mono_ns = bpf_ktime_get_ns();
	probe_jiffies_after = bpf_jiffies64();
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
