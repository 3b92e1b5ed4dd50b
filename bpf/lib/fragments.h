/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Fragments: a first fragment that passed leaves its datagram's protocol,
 * ports and TCP flags (struct sluice_frag_info) for its later fragments,
 * which take them.
 *
 * One first fragment per datagram, also across CPUs. A first fragment that
 * may leave an entry claims its key before it is judged (claim_first_fragment):
 * it makes the entry with BPF_NOEXIST, or takes an entry that no longer
 * holds a datagram with a compare-and-swap of its flags word, either way
 * marked SLUICE_FRAG_CLAIMED; after the decision, the same CPU settles the
 * claim (settle_first_fragment): the entry is written if the fragment
 * passed; if it was dropped, an entry it made is deleted (a dropped first
 * fragment takes no room in the table, as before) and one it took is left
 * as it was before the claim.
 * A first fragment that meets a claimed entry is dropped (drop_malformed),
 * whatever it names: two first fragments of one datagram racing on two CPUs
 * are what the kernel's reassembly drops one of (a copy at the same offset;
 * an overlap discards the queue), and the kernel keeps the one it queues
 * first, which the program cannot know. So the entry's selectors are always
 * those of the one first fragment that was judged under the key and passed,
 * and later fragments are judged by nothing else.
 *
 * The flags word holds the entry's state and its generation, which every
 * claim changes: a reader reads the word (an atomic read: a full barrier),
 * then the fields, then the word again, and takes the fields only if the
 * word is unchanged. A claimed entry's fields are written only by its
 * claimant, after it checked the word is still its claim.
 */
#ifndef SLUICE_LIB_FRAGMENTS_H
#define SLUICE_LIB_FRAGMENTS_H

#include "lib/clock.h"
#include "lib/maps.h"
#include "lib/parse.h"

#define FRAG_GEN_ONE (1u << SLUICE_FRAG_GEN_SHIFT)

/* What claim_first_fragment found for a first fragment. */
enum frag_claim {
	FRAG_JUDGE,   /* judged by its rule; its key's entry is not touched */
	FRAG_CLAIMED, /* judged by its rule; settle_first_fragment writes the entry */
	FRAG_REFUSED, /* dropped: another first fragment holds its key (drop_malformed) */
};

/* A fragment entry's flags word, read with a full barrier. */
static __always_inline __u32 frag_word(struct sluice_frag_info *fi)
{
	return __sync_fetch_and_or(&fi->flags, 0);
}

/* A snapshot of a fragment entry into `seen`: the flags word, then the
 * fields, then the word again. Returns 0 if the word changed in between
 * (the entry was claimed or written meanwhile): `seen` is then not to be
 * used. */
static __always_inline int frag_snapshot(struct sluice_frag_info *fi, struct sluice_frag_info *seen)
{
	seen->flags = frag_word(fi);
	seen->first_ns = fi->first_ns;
	seen->dport = fi->dport;
	seen->sport = fi->sport;
	seen->proto = fi->proto;
	seen->ports_known = fi->ports_known;
	seen->tcp_flags = fi->tcp_flags;
	return frag_word(fi) == seen->flags;
}

/* A later fragment takes its datagram's protocol, ports and TCP flags,
 * remembered when the first fragment passed, until the datagram's last
 * fragment. An entry claimed or changed while read gives nothing:
 * the fragment is judged as one whose first fragment was not seen. */
static __always_inline void recall_first_fragment(struct packet_info *pkt)
{
	const struct sluice_frag_key *fk = frag_key();
	struct sluice_frag_info *fi = fk ? bpf_map_lookup_elem(&SLUICE_MAP_FRAGS, fk) : NULL;
	struct sluice_frag_info entry;
	__u32 word, mark, seen;

	if (!fi || !frag_snapshot(fi, &entry))
		return;
	word = entry.flags;
	if ((word & (SLUICE_FRAG_CLAIMED | SLUICE_FRAG_ENDED)) ||
	    clock_since(frag_clock(), entry.first_ns) > SLUICE_FRAG_TIMEOUT_NS)
		return;
	pkt->proto = entry.proto;
	pkt->proto_known = 1;
	pkt->dport = entry.dport;
	pkt->sport = entry.sport;
	pkt->tcp_flags = entry.tcp_flags;
	pkt->ports_known = entry.ports_known;
	mark = SLUICE_FRAG_JUDGED | (pkt->flags & PKT_LAST_FRAG ? SLUICE_FRAG_ENDED : 0);
	/* Marked only in the entry it read: a claim in between keeps its own word. */
	if ((word & mark) != mark) {
		seen = __sync_val_compare_and_swap(&fi->flags, word, word | mark);
		if (seen != word && !(seen & SLUICE_FRAG_CLAIMED) &&
		    (seen & ~(__u32)(SLUICE_FRAG_JUDGED | SLUICE_FRAG_ENDED)) ==
			    (word & ~(__u32)(SLUICE_FRAG_JUDGED | SLUICE_FRAG_ENDED)))
			__sync_val_compare_and_swap(&fi->flags, seen, seen | mark); /* another later fragment's mark */
	}
}

/* Whether a first fragment names what an entry says: protocol, ports and TCP flags. */
static __always_inline int frag_names_same(const struct packet_info *pkt, const struct sluice_frag_info *entry)
{
	return pkt->proto_known && entry->proto == pkt->proto && entry->ports_known == pkt->ports_known &&
	       (!pkt->ports_known || (entry->dport == pkt->dport && entry->sport == pkt->sport &&
				      entry->tcp_flags == pkt->tcp_flags));
}

/*
 * A first fragment meets its key's entry, and claims it when it may leave
 * one (`claim`: a rule covers its source, it names its protocol, it is not
 * tiny). The entry holds a datagram for SLUICE_FRAG_TIMEOUT_NS +
 * SLUICE_FRAG_QUEUE_NS after it was made: that long the kernel may hold a
 * queue with the entry's first fragment in it, or with later fragments
 * judged by the entry. Within that, a first fragment that names another
 * protocol, port or TCP flags (or hides them) is refused: the kernel keeps
 * the first first fragment and drops a copy, so the datagram delivered
 * would not be the one its later fragments were judged as. One that names
 * the same relabels nothing: while the entry still serves later fragments
 * (younger than SLUICE_FRAG_TIMEOUT_NS, its last fragment not seen) it is
 * judged by its rule and leaves the entry as it is; after that it is a new
 * datagram under a reused id and claims the entry, keeping its JUDGED mark,
 * so that the window above runs from the last later fragment that may take
 * its ports. A claimed entry refuses every first fragment. `out_word`: the
 * claim's flags word, and `*before` the word it replaced (0: a new entry).
 */
static __always_inline int claim_first_fragment(const struct packet_info *pkt, int claim, __u32 *out_word,
						__u32 *before)
{
	const struct sluice_frag_key *fk = frag_key();
	struct sluice_frag_info *fi, entry;
	__u32 word, mine;
	__u64 now, age;
	int same;

	if (!fk)
		return FRAG_JUDGE;
	now = frag_clock();
	fi = bpf_map_lookup_elem(&SLUICE_MAP_FRAGS, fk);
	if (!fi) {
		struct sluice_frag_info fresh = {
			.first_ns = now,
			.dport = pkt->dport,
			.proto = pkt->proto,
			.ports_known = pkt->ports_known,
			.sport = pkt->sport,
			.tcp_flags = pkt->tcp_flags,
		};

		if (!claim)
			return FRAG_JUDGE;
		/* A random generation: a reader holding a pointer to an element
		 * the LRU reused for this key sees another word. */
		fresh.flags = (bpf_get_prandom_u32() << SLUICE_FRAG_GEN_SHIFT) | SLUICE_FRAG_CLAIMED;
		if (bpf_map_update_elem(&SLUICE_MAP_FRAGS, fk, &fresh, BPF_NOEXIST))
			return FRAG_REFUSED; /* another CPU made it a moment ago */
		*out_word = fresh.flags;
		*before = 0;
		return FRAG_CLAIMED;
	}
	if (!frag_snapshot(fi, &entry) || (entry.flags & SLUICE_FRAG_CLAIMED))
		return FRAG_REFUSED; /* another first fragment is being judged under the key */
	word = entry.flags;
	age = clock_since(now, entry.first_ns);
	same = 0;
	if (age <= SLUICE_FRAG_TIMEOUT_NS + SLUICE_FRAG_QUEUE_NS) {
		if (!frag_names_same(pkt, &entry))
			return FRAG_REFUSED;
		if (!(word & SLUICE_FRAG_ENDED) && age <= SLUICE_FRAG_TIMEOUT_NS)
			return FRAG_JUDGE; /* a copy under a live entry */
		same = 1;
	}
	if (!claim)
		return FRAG_JUDGE;
	mine = ((word & ~(FRAG_GEN_ONE - 1)) + FRAG_GEN_ONE) | SLUICE_FRAG_CLAIMED |
	       (same ? word & SLUICE_FRAG_JUDGED : 0);
	if (__sync_val_compare_and_swap(&fi->flags, word, mine) != word)
		return FRAG_REFUSED; /* another CPU claimed it a moment ago */
	*out_word = mine;
	*before = word;
	return FRAG_CLAIMED;
}

/*
 * Settles a claim after its first fragment's decision: `passed`, the entry
 * takes the fragment's selectors and is made now; dropped, an entry the
 * claim made is deleted, and one it took is as it was before the claim,
 * with a new generation. If the
 * entry is no longer the claim (the LRU pushed it out), nothing is written:
 * the later fragments are judged as ones whose first fragment was not seen.
 */
static __always_inline void settle_first_fragment(const struct packet_info *pkt, __u32 word, __u32 before,
						  int passed)
{
	const struct sluice_frag_key *fk = frag_key();
	struct sluice_frag_info *fi = fk ? bpf_map_lookup_elem(&SLUICE_MAP_FRAGS, fk) : NULL;
	__u32 settled = word & ~(__u32)SLUICE_FRAG_CLAIMED;

	if (!fi || frag_word(fi) != word)
		return;
	if (passed) {
		fi->first_ns = frag_clock();
		fi->dport = pkt->dport;
		fi->proto = pkt->proto;
		fi->ports_known = pkt->ports_known;
		fi->sport = pkt->sport;
		fi->tcp_flags = pkt->tcp_flags;
	} else if (before) {
		settled = (word & ~(FRAG_GEN_ONE - 1)) + FRAG_GEN_ONE;
		settled |= before & (FRAG_GEN_ONE - 1);
	} else {
		/* No other CPU changes a claimed entry: it is still this claim's. */
		bpf_map_delete_elem(&SLUICE_MAP_FRAGS, fk);
		return;
	}
	__sync_val_compare_and_swap(&fi->flags, word, settled);
}

#endif /* SLUICE_LIB_FRAGMENTS_H */
