/* cas_floor.c: the floor, not a lock anyone should use. A 32-bit word in the
 * shared mapping: lock is a compare-and-swap from 0 to 1 (acquire), retried after
 * the word reads 0 again (plain loads with a pause, then a sched_yield per load
 * after H_SPIN_BEFORE_YIELD of them); unlock is a store of 0 (release, a plain
 * store on x86). Uncontended, no lock can do less: it has no owner, no waiters'
 * count, no sleeping and no robustness. Contended, it spins: with more processes
 * than CPUs a holder that loses its CPU stalls every waiter. It has no shared
 * mode, so no rw90. */
#define PEER_NAME "cas_floor"
#define PEER_ABOUT "CAS 0->1 to lock, store 0 to unlock, spin then sched_yield"
#define PEER_SHARED 0
#include "harness.h"

static int peer_setup(void *area, const char *path)
{
    (void)path;
    *(uint32_t *)area = 0;
    return 0;
}

static int peer_attach(void *area, const char *path)
{
    (void)area, (void)path;
    return 0;
}

static inline void peer_lock(void *area)
{
    uint32_t *word = (uint32_t *)area;
    unsigned spins = 0;
    for (;;) {
        uint32_t unlocked = 0;
        if (__atomic_compare_exchange_n(word, &unlocked, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        while (__atomic_load_n(word, __ATOMIC_RELAXED) != 0) {
            if (++spins > H_SPIN_BEFORE_YIELD) sched_yield();
            else h_cpu_relax();
        }
    }
}

static inline void peer_unlock(void *area)
{
    __atomic_store_n((uint32_t *)area, 0, __ATOMIC_RELEASE);
}
