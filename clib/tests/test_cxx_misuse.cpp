// test_cxx_misuse.cpp: the C++ wrapper (shmlock.hpp) under ASan and UBSan
// with misuse: durations and time points at the ends of their range, a
// handle moved onto while it holds, a hold that outlives its lock_manager,
// moved-from objects, bad names and modes. Each must give a result or a
// shmlock::error, never overflow, leak or touch freed memory.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "check.h"
#include "shmlock.hpp"

using namespace std::chrono_literals;

// CHECK_THROWS(expr, rc): expr throws a shmlock::error of code rc.
#define CHECK_THROWS(expr, rc)                                                     \
	do {                                                                       \
		int got_ = 0;                                                      \
		try {                                                              \
			expr;                                                      \
		} catch (const shmlock::error &e) {                                \
			got_ = e.code().value();                                   \
		}                                                                  \
		if (got_ != (rc)) {                                                \
			std::fprintf(stderr, "%s:%d: %s threw %d, want %d\n", __FILE__, __LINE__, #expr, got_, (rc)); \
			check_failures++;                                          \
		}                                                                  \
	} while (0)

// The segment of every test, made by main, and its path.
static shmlock::segment *the_segment;
static const char *seg_path;

using steady = std::chrono::steady_clock;
using system_clock = std::chrono::system_clock;

// Another thread holds l while this one waits with a timeout that must
// wait for its release: the timeout is "for ever", whatever its type.
template <class Try>
static void check_waits(shmlock::spinlock &l, Try try_lock)
{
	bool got = false;
	l.lock();
	std::thread t([&] {
		got = try_lock();
		if (got)
			l.unlock();
	});
	std::this_thread::sleep_for(20ms); // only so that the waiter likely waits: nothing depends on it
	l.unlock();
	t.join();
	CHECK(got);
}

template <class Try>
static void check_gives_up(shmlock::spinlock &l, Try try_lock)
{
	bool got = true;
	l.lock();
	std::thread([&] { got = try_lock(); }).join();
	l.unlock();
	CHECK(!got);
}

static void test_spin_durations()
{
	shmlock::segment &seg = *the_segment;
	shmlock::spinlock l(seg, "cxx.misuse.spin");
	// Durations past what nanoseconds hold: for ever, not a wrapped count.
	check_waits(l, [&] { return l.try_lock_for(std::chrono::seconds::max()); });
	check_waits(l, [&] { return l.try_lock_for(std::chrono::hours::max()); });
	check_waits(l, [&] { return l.try_lock_for(std::chrono::nanoseconds::max()); });
	check_waits(l, [&] { return l.try_lock_for(std::chrono::duration<double>(1e300)); });
	check_waits(l, [&] { return l.try_lock_until(steady::time_point::max()); });
	check_waits(l, [&] { return l.try_lock_until(std::chrono::time_point<steady, std::chrono::hours>::max()); });
	check_waits(l, [&] { return l.try_lock_until(system_clock::time_point::max()); });
	// Negative and past: one try.
	check_gives_up(l, [&] { return l.try_lock_for(std::chrono::seconds::min()); });
	check_gives_up(l, [&] { return l.try_lock_for(std::chrono::nanoseconds::min()); });
	check_gives_up(l, [&] { return l.try_lock_for(std::chrono::duration<double>(-1e300)); });
	check_gives_up(l, [&] { return l.try_lock_for(0ns); });
	check_gives_up(l, [&] { return l.try_lock_until(steady::time_point::min()); });
	check_gives_up(l, [&] { return l.try_lock_until(std::chrono::time_point<steady, std::chrono::hours>::min()); });
	check_gives_up(l, [&] { return l.try_lock_until(system_clock::time_point::min()); });
	// Free: every one of them takes it.
	CHECK(l.try_lock_for(std::chrono::seconds::min()));
	l.unlock();
	CHECK(l.try_lock_until(steady::time_point::max()));
	l.unlock();
}

static void test_upgrade_durations()
{
	shmlock::segment &seg = *the_segment;
	shmlock::upgrade_mutex a(seg, "cxx.misuse.rw"), b(seg, "cxx.misuse.rw");
	a.lock();
	CHECK(!b.try_lock_for(std::chrono::seconds::min()));
	CHECK(!b.try_lock_shared_for(std::chrono::hours::min()));
	CHECK(!b.try_lock_upgrade_for(std::chrono::seconds::min()));
	CHECK(!b.try_lock_until(steady::time_point::min()));
	CHECK(!b.try_lock_shared_until(std::chrono::time_point<steady, std::chrono::hours>::min()));
	a.unlock();
	CHECK(b.try_lock_for(std::chrono::seconds::max()));
	b.unlock();
	CHECK(b.try_lock_shared_for(std::chrono::hours::max()));
	b.unlock_shared();
	CHECK(b.try_lock_until(std::chrono::time_point<steady, std::chrono::hours>::max()));
	b.unlock();
	CHECK(b.try_lock_shared_until(system_clock::time_point::max()));
	b.unlock_shared();
	CHECK(b.try_lock_upgrade_for(std::chrono::seconds::max()));
	CHECK(b.try_unlock_upgrade_and_lock_for(std::chrono::seconds::max()));
	b.unlock_and_lock_upgrade();
	b.unlock_upgrade();
}

// A handle moved onto while it holds gives its holds back first, as its
// destructor does: kept, they would stall every other holder.
static void test_upgrade_move_assign_holding()
{
	shmlock::segment &seg = *the_segment;
	shmlock::upgrade_mutex a(seg, "cxx.misuse.held"), b(seg, "cxx.misuse.other"), probe(seg, "cxx.misuse.held");
	a.lock();
	a = std::move(b);
	CHECK(probe.try_lock());
	probe.unlock();
	shmlock::upgrade_mutex c(seg, "cxx.misuse.held");
	c.lock_shared();
	c.lock_shared();
	c = shmlock::upgrade_mutex(seg, "cxx.misuse.other");
	CHECK(probe.try_lock());
	probe.unlock();
	// Moved from: every call is a shmlock::error (EINVAL), no crash.
	CHECK_THROWS(b.lock(), SHMLOCK_EINVAL);
	CHECK_THROWS(b.unlock(), SHMLOCK_EINVAL);
	CHECK_THROWS(b.try_lock(), SHMLOCK_EINVAL);
	CHECK_THROWS(b.lock_shared(), SHMLOCK_EINVAL);
	CHECK(!b.inconsistent());
	CHECK(b.generation() == 0);
}

// A hold may outlive the lock_manager that granted it (returned from a
// function that made the manager): its release still releases.
static std::optional<shmlock::hold> acquire_with_own_manager(shmlock::segment &seg, const std::string &owner)
{
	shmlock::lock_manager mgr(seg);
	return mgr.acquire("cxx.misuse.job", owner);
}

static void test_hold_outlives_manager()
{
	shmlock::segment &seg = *the_segment;
	auto h = acquire_with_own_manager(seg, "one");
	CHECK(h.has_value());
	h->refresh(1h);
	h->mark_consistent();
	shmlock::lock_manager other(seg);
	CHECK_THROWS(other.acquire("cxx.misuse.job", "two"), SHMLOCK_ERESOURCE_LOCKED);
	h.reset(); // the destructor's release
	auto h2 = other.acquire("cxx.misuse.job", "two");
	CHECK_THROWS(acquire_with_own_manager(seg, "three"), SHMLOCK_ERESOURCE_LOCKED);
}

static void test_bad_input()
{
	shmlock::segment &seg = *the_segment;
	CHECK_THROWS(shmlock::spinlock(seg, ""), SHMLOCK_EBADNAME);
	CHECK_THROWS(shmlock::spinlock(seg, std::string(41, 'x')), SHMLOCK_EBADNAME);
	CHECK_THROWS(shmlock::spinlock(seg, "x", 7), SHMLOCK_EINVAL);
	CHECK_THROWS(shmlock::upgrade_mutex(seg, "\xff"), SHMLOCK_EBADNAME);
	CHECK_THROWS(seg.data<int>(""), SHMLOCK_EBADNAME);
	shmlock::lock_manager mgr(seg);
	CHECK_THROWS(mgr.acquire("", "o"), SHMLOCK_EINVALID_RESOURCE);
	CHECK_THROWS(mgr.acquire("r", std::string(33, 'o')), SHMLOCK_EINVALID_OWNER);
	CHECK_THROWS(mgr.acquire("r", "o", 0), SHMLOCK_EINVALID_MODE);
	shmlock::lock_options bad;
	bad.ttl = -1ns;
	CHECK_THROWS(mgr.acquire("r", "o", SHMLOCK_EXCLUSIVE, bad), SHMLOCK_EINVALID_OPTIONS);
	auto h = mgr.acquire("r", "o");
	h.release();
	h.release(); // released once: a second is nothing
	CHECK_THROWS(h.refresh(1s), SHMLOCK_EINVAL);
	// A NUL inside a name: C would read the part before it, another name
	// ("x", "r", "o", the segment's own path), which Go refuses to name.
	const std::string nul("x\0y", 3);
	CHECK_THROWS(shmlock::spinlock(seg, nul), SHMLOCK_EBADNAME);
	CHECK_THROWS(shmlock::upgrade_mutex(seg, nul), SHMLOCK_EBADNAME);
	CHECK_THROWS(seg.data<int>(nul), SHMLOCK_EBADNAME);
	CHECK_THROWS(mgr.acquire(std::string("r\0s", 3), "o"), SHMLOCK_EINVALID_RESOURCE);
	CHECK_THROWS(mgr.acquire("r", std::string("o\0p", 3)), SHMLOCK_EINVALID_OWNER);
	CHECK_THROWS(mgr.check_version(std::string("r\0s", 3), 0), SHMLOCK_EINVALID_RESOURCE);
	const std::string other = std::string(seg_path) + std::string("\0other", 6);
	CHECK_THROWS(shmlock::segment::open(other), SHMLOCK_EBADPATH);
	CHECK_THROWS(shmlock::segment::create(other), SHMLOCK_EBADPATH);
	CHECK_THROWS(shmlock::segment::open_or_create(other), SHMLOCK_EBADPATH);
	CHECK_THROWS(shmlock::segment::remove(other), SHMLOCK_EBADPATH);
	CHECK(access(seg_path, F_OK) == 0);
	CHECK_THROWS(shmlock::segment::open(""), SHMLOCK_EBADPATH);
	CHECK_THROWS(shmlock::segment::remove("/dev/shm"), SHMLOCK_ENOTREGULAR);
	// A moved-from segment: its calls are errors.
	shmlock::segment moved = std::move(seg);
	CHECK_THROWS(seg.data<int>("d"), SHMLOCK_EINVAL);
	CHECK_THROWS(shmlock::spinlock(seg, "x"), SHMLOCK_EINVAL);
	seg = std::move(moved);
}

int main()
{
	char path[256];
	check_temp_path(path, sizeof path, "cxxmisuse");
	try {
		auto seg = shmlock::segment::create(path);
		the_segment = &seg;
		seg_path = path;
		RUN(test_spin_durations);
		RUN(test_upgrade_durations);
		RUN(test_upgrade_move_assign_holding);
		RUN(test_hold_outlives_manager);
		RUN(test_bad_input);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "unexpected: %s\n", e.what());
		check_failures++;
	}
	shmlock::segment::remove(path);
	return CHECK_DONE();
}
