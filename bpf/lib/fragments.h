/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Fragments: a first fragment that passed leaves its datagram's protocol,
 * ports and TCP flags (struct sluice_frag_info) for its later fragments,
 * which take them.
 */
#ifndef SLUICE_LIB_FRAGMENTS_H
#define SLUICE_LIB_FRAGMENTS_H

#include "lib/clock.h"
#include "lib/maps.h"
#include "lib/parse.h"

/* A later fragment takes its datagram's protocol, ports and TCP flags,
 * remembered when the first fragment passed, until the datagram's last
 * fragment. */
static __always_inline void recall_first_fragment(struct packet_info *pkt)
{
	const struct sluice_frag_key *fk = frag_key();
	struct sluice_frag_info *fi = fk ? bpf_map_lookup_elem(&SLUICE_MAP_FRAGS, fk) : NULL;
	__u32 mark;

	if (!fi || (fi->flags & SLUICE_FRAG_ENDED) || frag_clock() - fi->first_ns > SLUICE_FRAG_TIMEOUT_NS)
		return;
	pkt->proto = fi->proto;
	pkt->proto_known = 1;
	pkt->dport = fi->dport;
	pkt->sport = fi->sport;
	pkt->tcp_flags = fi->tcp_flags;
	pkt->ports_known = fi->ports_known;
	mark = SLUICE_FRAG_JUDGED | (pkt->flags & PKT_LAST_FRAG ? SLUICE_FRAG_ENDED : 0);
	if ((fi->flags & mark) != mark)
		__sync_fetch_and_or(&fi->flags, mark);
}

/*
 * A first fragment meets its key's entry (struct sluice_frag_info) for
 * SLUICE_FRAG_TIMEOUT_NS + SLUICE_FRAG_QUEUE_NS after the entry was made:
 * that long the kernel may hold a queue with the entry's first fragment in
 * it, or with later fragments judged by the entry. One that names another
 * protocol, port or TCP flags (or hides them) conflicts: the kernel keeps the first
 * first fragment and drops a copy, so the datagram delivered would not be
 * the one its later fragments were judged as; it is dropped. One that names
 * the same does not relabel anything: while the entry still serves later
 * fragments it is left as it is (PKT_FRAG_LIVE: not made younger), and after
 * that it is made again with its JUDGED mark (PKT_FRAG_JUDGED), so that the
 * window above runs from the last later fragment that may take its ports.
 */
static __always_inline int first_fragment_conflicts(struct packet_info *pkt)
{
	const struct sluice_frag_key *fk = frag_key();
	const struct sluice_frag_info *fi = fk ? bpf_map_lookup_elem(&SLUICE_MAP_FRAGS, fk) : NULL;
	__u64 age;

	if (!fi)
		return 0;
	age = frag_clock() - fi->first_ns;
	if (age > SLUICE_FRAG_TIMEOUT_NS + SLUICE_FRAG_QUEUE_NS)
		return 0;
	if (fi->proto != pkt->proto || fi->ports_known != pkt->ports_known ||
	    (pkt->ports_known &&
	     (fi->dport != pkt->dport || fi->sport != pkt->sport || fi->tcp_flags != pkt->tcp_flags)) ||
	    !pkt->proto_known)
		return 1;
	if (fi->flags & SLUICE_FRAG_JUDGED)
		pkt->flags |= PKT_FRAG_JUDGED;
	if (!(fi->flags & SLUICE_FRAG_ENDED) && age <= SLUICE_FRAG_TIMEOUT_NS)
		pkt->flags |= PKT_FRAG_LIVE;
	return 0;
}

/* A first fragment that passed: its datagram's entry, unless the same entry
 * is live (first_fragment_conflicts). */
static __always_inline void remember_first_fragment(const struct packet_info *pkt)
{
	const struct sluice_frag_key *fk = frag_key();
	struct sluice_frag_info fi = {
		.first_ns = frag_clock(),
		.dport = pkt->dport,
		.proto = pkt->proto,
		.ports_known = pkt->ports_known,
		.sport = pkt->sport,
		.tcp_flags = pkt->tcp_flags,
		.flags = pkt->flags & PKT_FRAG_JUDGED ? SLUICE_FRAG_JUDGED : 0,
	};

	if (fk && !(pkt->flags & PKT_FRAG_LIVE))
		bpf_map_update_elem(&SLUICE_MAP_FRAGS, fk, &fi, BPF_ANY);
}

#endif /* SLUICE_LIB_FRAGMENTS_H */
