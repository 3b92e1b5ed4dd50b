// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * The controller's own events (struct sluice_event): an UNBAN of a ban it
 * lifted (`sluice ban del`, a rule that no longer bans) or found run out
 * before its source came back. Run through BPF_PROG_TEST_RUN with the event
 * and its counter as its context (struct sluice_event_note), it writes the
 * event into the XDP program's ring buffer (the controller reuses the pinned
 * map for it), so that `sluice events` and the agent read it in order with
 * the program's own, and counts it in the program's counters (the pinned
 * map too), where the program counts the bans it lifts. User space cannot
 * write a BPF ring buffer otherwise.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sluice_abi.h"
#include "lib/event_maps.h"

SEC("syscall")
int sluice_event_note(struct sluice_event_note *ctx)
{
	struct sluice_event e;
	struct sluice_counter *c;
	__u32 idx = ctx->counter;

	/* Only the controller's own counts: the bans it lifts. */
	if (idx >= SLUICE_CNT_INFO_UNBANS_EXPIRED && idx <= SLUICE_CNT_INFO_UNBANS_RULE) {
		c = bpf_map_lookup_elem(&SLUICE_MAP_COUNTERS, &idx);
		/* Atomic: the XDP program may interrupt this on the same CPU. */
		if (c)
			__sync_fetch_and_add(&c->packets, 1);
	}
	/* The verifier: a helper reads the stack, not the context. */
	__builtin_memcpy(&e, &ctx->event, sizeof(e));
	return bpf_ringbuf_output(&SLUICE_MAP_EVENTS, &e, sizeof(e), 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
