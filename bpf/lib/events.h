/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Throttle events: a bucket's first drop starts an episode (THROTTLED and a
 * timer), the timer reports its RELEASED; drops are noted at most once per
 * SLUICE_NOTE_EVERY_NS per CPU and bucket.
 */
#ifndef SLUICE_LIB_EVENTS_H
#define SLUICE_LIB_EVENTS_H

#include "lib/counters.h"
#include "lib/request.h"

#define EEXIST 17

/* Writes a throttle event; counts it lost if the ring buffer is full. */
static __always_inline void emit_event(const struct sluice_throttle_key *key, __u32 kind, __u64 now,
				       __u64 since)
{
	struct sluice_event *e = bpf_ringbuf_reserve(&SLUICE_MAP_EVENTS, sizeof(*e), 0);

	if (!e) {
		count_global(SLUICE_CNT_INFO_EVENTS_LOST, 0);
		return;
	}
	e->ns = now;
	e->since_ns = since;
	e->kind = kind;
	e->pad = 0;
	__builtin_memcpy(&e->key, key, sizeof(e->key));
	bpf_ringbuf_submit(e, 0);
}

/*
 * A throttled bucket's timer: RELEASED once no drop was noted for an
 * interval; a bucket throttled again within an interval of its release gets
 * its THROTTLED when that interval ends; a bucket quiet for an interval
 * after its release is forgotten. Runs at most once per interval per bucket.
 */
static int throttle_timer(void *map, struct sluice_throttle_key *key, struct sluice_throttle *t)
{
	__u64 now = bpf_ktime_get_ns(), next = SLUICE_EVENT_INTERVAL_NS;
	__u64 quiet = now - sluice_load_relaxed(&t->last_drop_ns), since_event = now - t->last_event_ns;

	if (t->reported) {
		if ((__s64)quiet >= (__s64)SLUICE_EVENT_INTERVAL_NS) {
			emit_event(key, SLUICE_EVENT_RELEASED, now, t->since_ns);
			t->reported = 0;
			t->last_event_ns = now;
		} else if ((__s64)quiet > 0) {
			next = SLUICE_EVENT_INTERVAL_NS - quiet;
		}
	} else if ((__s64)quiet < (__s64)SLUICE_EVENT_INTERVAL_NS) {
		/* Dropped again since its release. */
		if ((__s64)since_event >= (__s64)SLUICE_EVENT_INTERVAL_NS) {
			emit_event(key, SLUICE_EVENT_THROTTLED, now, now);
			t->reported = 1;
			t->since_ns = now;
			t->last_event_ns = now;
		} else {
			next = SLUICE_EVENT_INTERVAL_NS - since_event;
		}
	} else if ((__s64)since_event >= (__s64)SLUICE_EVENT_INTERVAL_NS) {
		bpf_map_delete_elem(map, key); /* cancels this timer: nothing runs after */
		return 0;
	}
	bpf_timer_start(&t->timer, next, 0);
	return 0;
}

/*
 * Notes a drop of req's bucket for throttle events: the first starts an
 * episode (THROTTLED now, a timer for the release), later ones move its
 * last drop. Called at most once per SLUICE_NOTE_EVERY_NS per CPU and bucket
 * (count_source), so a source that stays throttled costs nothing more. A
 * global function: verified once; the key is built in the request, off the
 * stack.
 */
__noinline int sluice_note_drop(struct charge_req *req)
{
	struct sluice_throttle_key *key;
	struct sluice_throttle *t;
	__u64 now;
	__u32 lo;
	int err;

	if (!req)
		return 0; /* the verifier: arguments of a global function may be NULL */
	key = &req->tkey;
	key->bucket_id = (__u32)(req->want >> 32);
	key->family = req->table;
	if (req->table == SLUICE_TABLE_V6) {
		__builtin_memcpy(key->addr, &req->addr, 16);
	} else {
		lo = (__u32)req->want;
		__builtin_memset(key->addr, 0, sizeof(key->addr));
		__builtin_memcpy(key->addr, &lo, 4);
	}
	/* The timer's clock, whatever clock the rule charges with. */
	now = bpf_ktime_get_ns();
	t = bpf_map_lookup_elem(&SLUICE_MAP_THROTTLED, key);
	if (t) {
		sluice_store_relaxed(&t->last_drop_ns, now);
		return 0;
	}
	__builtin_memset(req->tzero, 0, sizeof(req->tzero));
	err = bpf_map_update_elem(&SLUICE_MAP_THROTTLED, key, req->tzero, BPF_NOEXIST);
	if (err == -EEXIST)
		return 0; /* another CPU began this episode a moment ago */
	t = err ? NULL : bpf_map_lookup_elem(&SLUICE_MAP_THROTTLED, key);
	if (!t) {
		count_global(SLUICE_CNT_INFO_EVENTS_LOST, 0);
		return 0;
	}
	t->last_drop_ns = now;
	t->last_event_ns = now;
	t->since_ns = now;
	t->reported = 1;
	if (bpf_timer_init(&t->timer, &SLUICE_MAP_THROTTLED, 1 /* CLOCK_MONOTONIC */) ||
	    bpf_timer_set_callback(&t->timer, throttle_timer) ||
	    bpf_timer_start(&t->timer, SLUICE_EVENT_INTERVAL_NS, 0)) {
		/* No timer, no release: forget the episode rather than report half of it. */
		bpf_map_delete_elem(&SLUICE_MAP_THROTTLED, key);
		count_global(SLUICE_CNT_INFO_EVENTS_LOST, 0);
		return 0;
	}
	t->armed = 1;
	emit_event(key, SLUICE_EVENT_THROTTLED, now, now);
	return 1;
}

/*
 * The buckets this CPU noted a drop of lately, beyond the one its pending
 * slot names: a direct-mapped table, so that a flood of many sources over
 * their limits, interleaved, notes each bucket once per SLUICE_NOTE_EVERY_NS
 * per CPU as one source's flood does, instead of once per packet. The
 * program's own: not pinned, and a fresh program starts it empty.
 */
#define NOTED_SLOTS_LOG2 10
struct noted {
	__u64 want;
	__u64 noted_ns;
	__u32 table;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << NOTED_SLOTS_LOG2);
	__type(key, __u32);
	__type(value, struct noted);
} sluice_noted SEC(".maps");

/* Notes a drop of req's bucket (sluice_note_drop) unless this CPU did within
 * SLUICE_NOTE_EVERY_NS; the pending slot `p` names the bucket from now on. */
static __always_inline void note_if_due(struct charge_req *req, struct sluice_pending_drops *p)
{
	__u32 i = (__u32)(((req->want ^ req->table) * 0x9e3779b97f4a7c15ULL) >> (64 - NOTED_SLOTS_LOG2));
	struct noted *n = bpf_map_lookup_elem(&sluice_noted, &i);
	int due = !n || n->want != req->want || n->table != req->table ||
		  req->now - n->noted_ns >= SLUICE_NOTE_EVERY_NS;

	if (due && n) {
		n->want = req->want;
		n->table = req->table;
		n->noted_ns = req->now;
	}
	p->note_want = req->want;
	p->note_table = req->table;
	p->noted_ns = n ? n->noted_ns : req->now;
	if (due)
		sluice_note_drop(req);
}

#endif /* SLUICE_LIB_EVENTS_H */
