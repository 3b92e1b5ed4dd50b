// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * The controller's own events (struct sluice_event): an UNBAN of a ban it
 * lifted (`sluice ban del`, a rule that no longer bans) or found run out
 * before its source came back. Run through BPF_PROG_TEST_RUN with the event
 * as its context, it writes the event into the XDP program's ring buffer
 * (the controller reuses the pinned map for it), so that `sluice events` and
 * the agent read it in order with the program's own. User space cannot
 * write a BPF ring buffer otherwise.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sluice_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SLUICE_EVENT_RING_BYTES);
} SLUICE_MAP_EVENTS SEC(".maps");

SEC("syscall")
int sluice_event_note(struct sluice_event *ctx)
{
	struct sluice_event e;

	/* The verifier: a helper reads the stack, not the context. */
	__builtin_memcpy(&e, ctx, sizeof(e));
	return bpf_ringbuf_output(&SLUICE_MAP_EVENTS, &e, sizeof(e), 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
