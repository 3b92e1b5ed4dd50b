/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The accessors of every word the XDP program and the controller share
 * without a lock, each named for the ordering it needs (why each word needs
 * the one it has: include/sluice_settable.h and docs/design/source-table.md).
 * One header, compiled by both sides, so that the algorithms' own writes
 * under a lock (sluice_log_admit in sluice_algos.h) use them too.
 */
#ifndef SLUICE_ATOMIC_H
#define SLUICE_ATOMIC_H

#include <linux/types.h>

#if defined(__bpf__)

#define sluice_compiler_barrier() __asm__ __volatile__("" ::: "memory")
#define sluice_load_relaxed(p) (*(volatile __typeof__(*(p)) *)(p))
#define sluice_load_acquire(p)                                                  \
	({                                                                      \
		__typeof__(*(p)) sluice_v_ = *(volatile __typeof__(*(p)) *)(p); \
		sluice_compiler_barrier();                                      \
		sluice_v_;                                                      \
	})
#define sluice_store_relaxed(p, v) (*(volatile __typeof__(*(p)) *)(p) = (v))
#define sluice_store_release(p, v)                             \
	do {                                                   \
		sluice_compiler_barrier();                     \
		*(volatile __typeof__(*(p)) *)(p) = (v);       \
	} while (0)
#define sluice_fence_acquire() sluice_compiler_barrier()
#define sluice_fence_release() sluice_compiler_barrier()
/* Read-modify-writes, each a full barrier: the old value. */
#define sluice_cas(p, old, new) __sync_val_compare_and_swap((p), (old), (new))
#define sluice_xchg(p, v) __sync_lock_test_and_set((p), (v))
#define sluice_fetch_add(p, v) __sync_fetch_and_add((p), (v))

#else /* user space */

#if !defined(__x86_64__)
#error "sluice_settable.h: the set tables' memory ordering is checked on x86-64 only (the XDP program's side relies on the x86-64 JIT and TSO; see the comment at the top of this header)"
#endif

#ifdef __cplusplus
template <class T> static inline T sluice_load_relaxed(const T *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
template <class T> static inline T sluice_load_acquire(const T *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
template <class T, class V> static inline void sluice_store_relaxed(T *p, V v)
{
	__atomic_store_n(p, static_cast<T>(v), __ATOMIC_RELAXED);
}
template <class T, class V> static inline void sluice_store_release(T *p, V v)
{
	__atomic_store_n(p, static_cast<T>(v), __ATOMIC_RELEASE);
}
template <class T, class V, class W> static inline T sluice_cas(T *p, V old, W want)
{
	T expected = static_cast<T>(old);

	__atomic_compare_exchange_n(p, &expected, static_cast<T>(want), false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return expected;
}
template <class T, class V> static inline T sluice_xchg(T *p, V v)
{
	return __atomic_exchange_n(p, static_cast<T>(v), __ATOMIC_SEQ_CST);
}
template <class T, class V> static inline T sluice_fetch_add(T *p, V v)
{
	return __atomic_fetch_add(p, static_cast<T>(v), __ATOMIC_SEQ_CST);
}
#else
#define sluice_load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define sluice_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define sluice_store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define sluice_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define sluice_cas(p, old, new)                                                                   \
	({                                                                                        \
		__typeof__(*(p)) sluice_o_ = (old);                                               \
		__atomic_compare_exchange_n((p), &sluice_o_, (new), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
		sluice_o_;                                                                        \
	})
#define sluice_xchg(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
#define sluice_fetch_add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#endif
#define sluice_fence_acquire() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define sluice_fence_release() __atomic_thread_fence(__ATOMIC_RELEASE)

#endif

#endif /* SLUICE_ATOMIC_H */
