/* stats.c: the contention counters of the lock_stats table (layout/stats.go).
 *
 * Only slow paths touch them: a lock taken at the first try costs nothing
 * extra. Every counter is a plain atomic add, as in Go; a process killed
 * mid-wait never records that wait. */
#include "internal.h"

/* Upper bounds (inclusive) of the wait histogram's buckets, in ns
 * (layout.StatsBuckets); the last bucket counts the longer waits. */
static const int64_t bucket_bounds[SHM_STATS_BUCKETS - 1] = {
	10 * INT64_C(1000), 100 * INT64_C(1000), INT64_C(1000000), 10 * INT64_C(1000000), 100 * INT64_C(1000000),
};

/* The tables with a stats entry per entry, in the stats table's order. */
static const int stats_kinds[] = {SHM_OWNER_SLOTS, SHM_UPGRADES, SHM_LOCKMGR, SHM_TXN_RECORDS};

struct shm_lock_stats *shm_lock_stats(shmlock_segment *seg, int kind, uint64_t index)
{
	struct shm_lock_stats *st = seg->tables[SHM_LOCK_STATS].base;
	if (!st)
		return NULL;
	uint64_t base = 0;
	for (size_t i = 0; i < sizeof stats_kinds / sizeof stats_kinds[0]; i++) {
		uint64_t n = seg->tables[stats_kinds[i]].count;
		if (stats_kinds[i] == kind)
			return index < n ? st + base + index : NULL;
		base += n;
	}
	return NULL;
}

void shm_stats_reset(struct shm_lock_stats *st)
{
	if (!st)
		return;
	a64 *w = (a64 *)(void *)st;
	for (size_t j = 0; j < sizeof *st / 8; j++)
		atomic_store(&w[j], 0);
}

void shm_stats_wait(struct shm_lock_stats *st, int64_t since, bool gave_up)
{
	if (!st)
		return;
	int64_t d = shm_now_ns() - since;
	if (d < 0)
		d = 0;
	int b = 0;
	while (b < SHM_STATS_BUCKETS - 1 && d > bucket_bounds[b])
		b++;
	atomic_fetch_add(&st->contended, 1);
	atomic_fetch_add(&st->wait_nanos, (uint64_t)d);
	atomic_fetch_add(&st->wait_hist[b], 1);
	if (gave_up)
		atomic_fetch_add(&st->timeouts, 1);
}

void shm_stats_spun(struct shm_lock_stats *st, bool gave_up)
{
	if (!st)
		return;
	atomic_fetch_add(&st->contended, 1);
	atomic_fetch_add(&st->wait_hist[0], 1);
	if (gave_up)
		atomic_fetch_add(&st->timeouts, 1);
}
