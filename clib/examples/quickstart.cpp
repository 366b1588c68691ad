// quickstart.cpp: the C++ wrapper on the three kinds of lock, beside any
// other process that uses the same segment.
//
//   c++ -std=c++17 -O2 quickstart.cpp -I../include ../build/libshmlock.a -pthread -o quickstart++
//   ./quickstart++ jobs 1000
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>

#include "shmlock.hpp"

struct record {
	uint64_t a, b; // always equal outside the writer's critical section
};

int main(int argc, char **argv)
try {
	if (argc != 3) {
		std::fprintf(stderr, "usage: quickstart++ SEGMENT N\n");
		return 2;
	}
	long n = std::atol(argv[2]);
	auto seg = shmlock::segment::open_or_create(argv[1]);

	// A spinlock and std::lock_guard: the counter the other examples count.
	shmlock::spinlock lock(seg, "counter");
	auto *counter = seg.data<uint64_t>("counter");
	for (long i = 0; i < n; i++) {
		std::lock_guard<shmlock::spinlock> hold(lock);
		if (lock.owner_died() || lock.inconsistent())
			lock.mark_consistent(); // an increment is never half done
		++*counter;
	}

	// An upgrade mutex: readers share, a writer upgrades.
	shmlock::upgrade_mutex rw(seg, "record");
	auto *rec = seg.data<record>("record");
	{
		std::shared_lock<shmlock::upgrade_mutex> read(rw);
		if (rec->a != rec->b)
			throw std::runtime_error("torn record");
	}
	{
		shmlock::upgrade_lock up(rw);
		if (rec->a % 2 == 0) { // decided under the upgrade lock, written under the unique one
			up.upgrade();
			rec->a++;
			rec->b++;
		}
	}

	// The lock manager: a named hold with a fencing version.
	shmlock::lock_manager mgr(seg);
	shmlock::lock_options opts;
	opts.retries = SHMLOCK_RETRY_FOREVER;
	auto job = mgr.acquire("report", "quickstart++", SHMLOCK_EXCLUSIVE, opts);
	uint64_t total;
	{
		std::lock_guard<shmlock::spinlock> hold(lock);
		total = *counter;
	}
	std::printf("counter %llu, report version %llu\n", (unsigned long long)total,
	            (unsigned long long)job.version());
	return 0;
} catch (const shmlock::error &e) {
	std::fprintf(stderr, "quickstart++: %s\n", e.what());
	return 1;
}
