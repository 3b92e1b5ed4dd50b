/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The maps an event goes to: the global counters and the throttle events'
 * ring buffer. The XDP program (maps.h) and the controller's event note
 * (event_note.bpf.c, which reuses the program's pinned maps) both define
 * them from here, so that the two definitions cannot drift apart and a
 * reuse meet a map of another shape.
 */
#ifndef SLUICE_LIB_EVENT_MAPS_H
#define SLUICE_LIB_EVENT_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sluice_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_CNT_MAX);
	__type(key, __u32);
	__type(value, struct sluice_counter);
} SLUICE_MAP_COUNTERS SEC(".maps");

/* Throttle events (struct sluice_event), read by `sluice events` or the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SLUICE_EVENT_RING_BYTES);
} SLUICE_MAP_EVENTS SEC(".maps");

#endif /* SLUICE_LIB_EVENT_MAPS_H */
