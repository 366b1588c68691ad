/* boost_ipc.cpp: Boost.Interprocess, header-only, placement-new in the shared
 * mapping. Built twice: UPGRADABLE=0 is interprocess_mutex (on Linux a
 * process-shared, non-robust pthread mutex behind a C++ class); UPGRADABLE=1 is
 * interprocess_upgradable_mutex (an internal mutex and two condition
 * variables): lock() for the exclusive workloads, lock_sharable() for rw90's
 * reads. A lock call that throws ends the worker. */
#ifndef UPGRADABLE
#error "build with -DUPGRADABLE=0 or -DUPGRADABLE=1"
#endif
#include <boost/version.hpp>
#if UPGRADABLE
#define PEER_NAME "boost_upgradable"
#define PEER_ABOUT "Boost.Interprocess interprocess_upgradable_mutex (Boost " BOOST_LIB_VERSION ")"
#define PEER_SHARED 1
#include <boost/interprocess/sync/interprocess_upgradable_mutex.hpp>
typedef boost::interprocess::interprocess_upgradable_mutex peer_mutex;
#else
#define PEER_NAME "boost_mutex"
#define PEER_ABOUT "Boost.Interprocess interprocess_mutex (Boost " BOOST_LIB_VERSION ")"
#define PEER_SHARED 0
#include <boost/interprocess/sync/interprocess_mutex.hpp>
typedef boost::interprocess::interprocess_mutex peer_mutex;
#endif
#include "../c/harness.h"

#include <new>

static_assert(sizeof(peer_mutex) <= sizeof(((struct h_file *)0)->area), "the mutex fits the area");

static inline peer_mutex *mutex_at(void *area) { return static_cast<peer_mutex *>(area); }

static int peer_setup(void *area, const char *)
{
    try {
        new (area) peer_mutex();
    } catch (const std::exception &e) {
        fprintf(stderr, "%s: setup: %s\n", PEER_NAME, e.what());
        return EINVAL;
    }
    return 0;
}

static int peer_attach(void *, const char *) { return 0; }

/* call runs one lock call, ending the worker if it throws. */
template <typename F> static inline void call(const char *what, F f)
{
    try {
        f();
    } catch (const std::exception &e) {
        fprintf(stderr, "%s: %s: %s\n", PEER_NAME, what, e.what());
        _exit(1);
    }
}

static inline void peer_lock(void *area) { call("lock", [&] { mutex_at(area)->lock(); }); }
static inline void peer_unlock(void *area) { call("unlock", [&] { mutex_at(area)->unlock(); }); }
#if UPGRADABLE
static inline void peer_lock_shared(void *area)
{
    call("lock_sharable", [&] { mutex_at(area)->lock_sharable(); });
}
static inline void peer_unlock_shared(void *area)
{
    call("unlock_sharable", [&] { mutex_at(area)->unlock_sharable(); });
}
#endif
