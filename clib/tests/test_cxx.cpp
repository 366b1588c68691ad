// test_cxx.cpp: the C++ wrapper (shmlock.hpp) under ASan and UBSan: the
// standard guards on its lock types, timeouts, the upgrade_lock, lock-
// manager holds released by their destructors, errors as exceptions.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unistd.h>

#include "shmlock.hpp"

using namespace std::chrono_literals;

static int failures;

#define CHECK(cond)                                                                \
	do {                                                                       \
		if (!(cond)) {                                                     \
			std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
			failures++;                                                \
		}                                                                  \
	} while (0)

static std::string temp_path()
{
	return "/dev/shm/shmlock-ctest-cxx-" + std::to_string(getpid());
}

static void test_spinlock(shmlock::segment &seg)
{
	shmlock::spinlock lock(seg, "cxx.spin");
	auto *counter = seg.data<uint64_t>("cxx.counter");
	std::thread t[4];
	for (auto &th : t)
		th = std::thread([&] {
			for (int i = 0; i < 10000; i++) {
				std::lock_guard<shmlock::spinlock> g(lock);
				++*counter;
			}
		});
	for (auto &th : t)
		th.join();
	CHECK(*counter == 40000);

	// Held by another thread: a timed try gives up, false, not a throw.
	std::unique_lock<shmlock::spinlock> held(lock);
	bool got = true;
	std::thread([&] { got = lock.try_lock_for(20ms); }).join();
	CHECK(!got);
	held.unlock();
	std::thread([&] {
		got = lock.try_lock_until(std::chrono::steady_clock::now() + 1s);
		if (got)
			lock.unlock();
	}).join();
	CHECK(got);

	// Recursive in pid/tid mode, per thread.
	lock.lock();
	CHECK(lock.try_lock());
	lock.unlock();
	lock.unlock();
	CHECK(!lock.owner_died() && !lock.inconsistent());

	// A release by a thread that does not hold it throws ENOTOWNER.
	try {
		lock.unlock();
		CHECK(false);
	} catch (const shmlock::error &e) {
		CHECK(e.code().value() == SHMLOCK_ENOTOWNER);
		CHECK(e.code().category() == shmlock::category());
	}
}

static void test_token(shmlock::segment &seg)
{
	shmlock::spinlock lock(seg, "cxx.token", SHMLOCK_TOKEN);
	lock.lock();
	bool got = true;
	std::thread([&] { got = lock.try_lock(); }).join();
	CHECK(!got);
	std::thread([&] { lock.unlock(); }).join(); // whoever has the token releases
	CHECK(lock.try_lock());
	lock.unlock();
	// The other mode's name is refused.
	try {
		shmlock::spinlock other(seg, "cxx.token", SHMLOCK_PIDTID);
		CHECK(false);
	} catch (const shmlock::error &e) {
		CHECK(e.code().value() == SHMLOCK_EUSEMISMATCH);
	}
}

static void test_upgrade(shmlock::segment &seg)
{
	shmlock::upgrade_mutex a(seg, "cxx.rw"), b(seg, "cxx.rw"), c(seg, "cxx.rw");
	{
		std::shared_lock<shmlock::upgrade_mutex> ra(a);
		std::shared_lock<shmlock::upgrade_mutex> rb(b); // readers share
		CHECK(!c.try_lock_for(10ms));                   // a writer waits for them
		try {
			a.lock(); // a handle holding shared cannot wait for unique: it would wait for itself
			CHECK(false);
		} catch (const shmlock::error &e) {
			CHECK(e.code().value() == SHMLOCK_EHELD);
		}
	}
	{
		shmlock::upgrade_lock up(a);
		CHECK(!up.unique());
		CHECK(b.try_lock_shared()); // the upgrade lock lets readers in
		bool upgraded = a.try_unlock_upgrade_and_lock_for(10ms);
		CHECK(!upgraded); // not while b reads
		b.unlock_shared();
		up.upgrade();
		CHECK(up.unique());
		CHECK(!b.try_lock_shared());
	} // released as unique; c, which gave up waiting, may have asked for a
	  // handoff that stays reserved for about a millisecond: so wait a little
	CHECK(b.try_lock_for(1s));
	b.unlock_and_lock_shared();
	CHECK(a.try_lock_shared());
	a.unlock_shared();
	b.unlock_shared();
	try {
		a.unlock();
		CHECK(false);
	} catch (const shmlock::error &e) {
		CHECK(e.code().value() == SHMLOCK_ENOTHELD);
	}
}

// A handle destroyed while it holds (an exception unwinding past it)
// releases its holds: the next one gets the lock at once.
static void test_upgrade_destroyed_holding(shmlock::segment &seg)
{
	{
		shmlock::upgrade_mutex w(seg, "cxx.rw2");
		w.lock();
	}
	{
		shmlock::upgrade_mutex r(seg, "cxx.rw2");
		r.lock_shared();
		r.lock_shared();
	}
	shmlock::upgrade_mutex next(seg, "cxx.rw2");
	CHECK(next.try_lock());
	next.unlock();
}

// A handle that outlives its segment handle (the segment closed first,
// the handle still holding) still gives its holds back as it is destroyed:
// the next one gets the lock at once.
static void test_upgrade_outlives_segment(const std::string &path)
{
	{
		auto first = std::make_unique<shmlock::segment>(shmlock::segment::open(path));
		shmlock::upgrade_mutex r(*first, "cxx.rw3");
		r.lock_shared();
		shmlock::upgrade_mutex w(*first, "cxx.rw4");
		w.lock();
		first.reset(); // shmlock_close, with both holding
	}
	auto seg = shmlock::segment::open(path);
	shmlock::upgrade_mutex next(seg, "cxx.rw3"), next_w(seg, "cxx.rw4");
	CHECK(next.try_lock());
	next.unlock();
	CHECK(next_w.try_lock_shared());
	next_w.unlock_shared();
}

static void test_lock_manager(shmlock::segment &seg)
{
	shmlock::lock_manager mgr(seg);
	uint64_t first;
	{
		auto h = mgr.acquire("cxx.job", "one");
		first = h.version();
		CHECK(mgr.check_version("cxx.job", first));
		try {
			mgr.acquire("cxx.job", "two");
			CHECK(false);
		} catch (const shmlock::error &e) {
			CHECK(e.code().value() == SHMLOCK_ERESOURCE_LOCKED);
			CHECK(std::string(shmlock_error_code(e.code().value())) == "RESOURCE_LOCKED");
		}
		h.refresh(10s);
		CHECK(h.info().expires_ns != 0);
	} // released here
	auto h2 = mgr.acquire("cxx.job", "two");
	CHECK(h2.version() > first);
	CHECK(!mgr.check_version("cxx.job", first));
	auto moved = std::move(h2);
	moved.release();
	auto s1 = mgr.acquire("cxx.doc", "a", SHMLOCK_COLLABORATIVE);
	auto s2 = mgr.acquire("cxx.doc", "b", SHMLOCK_COLLABORATIVE);
	CHECK(s1.version() != s2.version());
}

int main()
{
	std::string path = temp_path();
	try {
		auto seg = shmlock::segment::create(path);
		test_spinlock(seg);
		test_token(seg);
		test_upgrade(seg);
		test_upgrade_destroyed_holding(seg);
		test_upgrade_outlives_segment(path);
		test_lock_manager(seg);
		try {
			shmlock::segment::create(path);
			CHECK(false);
		} catch (const shmlock::error &e) {
			CHECK(e.code().value() == SHMLOCK_EEXIST);
		}
	} catch (const std::exception &e) {
		std::fprintf(stderr, "unexpected: %s\n", e.what());
		failures++;
	}
	shmlock::segment::remove(path);
	std::fprintf(stderr, "%s test_cxx\n", failures ? "FAIL" : "ok  ");
	return failures != 0;
}
