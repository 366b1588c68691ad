// Command shmctl inspects and manages shmlock segments: the shared-memory
// files, by default in /dev/shm, in which package shm keeps cross-process
// locks.
//
// A segment argument is a path, or a bare name such as "jobs" that means
// /dev/shm/jobs. A segment is private to its owner (mode 0600) unless it is
// created with --group (mode 0660, shm.Options.GroupAccess): every command
// then opens it with --group, which lets it open such a segment owned by
// another user too when the file's group is one of the caller's groups.
// Without --group, a segment whose mode lets its group in is refused, and so
// is one owned by another user; demo, bench and rm ignore --group. The
// commands are:
//
//	shmctl create SEGMENT [--slots N] [--upgrades N] [--upgrade-readers N]
//	                      [--txn-records N] [--txn-arena BYTES] [--lockmgr-entries N]
//	                      [--claim-refs N] [--data BYTES] [--data-regions N]
//	                      [--group] [--json]
//	    make a new segment (zero sizes mean the defaults, negative ones none)
//	shmctl info SEGMENT [--json]
//	    print the header: size, creator, boot, PID namespace and each table
//	shmctl check SEGMENT [--json]
//	    validate every entry of every table; status 1 if anything is damaged
//	shmctl data SEGMENT [--json]
//	    print the data regions: name, offset, size
//	shmctl slots SEGMENT [--all] [--json]
//	    print the owner slots in use: name, claims, owner and its liveness
//	shmctl rm SEGMENT...
//	    remove segments; files that are not segments are refused
//	shmctl rwlocks SEGMENT [--all] [--json]
//	    print the upgrade mutexes in use: how held, readers, writer, upgrade
//	    holder, pending upgrade, sleepers and dead holders
//	shmctl txns SEGMENT [--all] [--json]
//	    print the transactions: state, owner, arena use, pins per process
//	shmctl reclaim SEGMENT [--dry-run] [--wait D] [--json]
//	    free the owner slots whose holder died (take over, release at once),
//	    what dead processes hold on upgrade mutexes, and close the
//	    transactions whose owner died
//	shmctl locks SEGMENT [--all] [--json]
//	    print the named resource locks (package lockmgr), one row per holder
//	shmctl stats SEGMENT [--json]
//	    print the lock manager's statistics
//	shmctl top SEGMENT [--interval D] [--once]
//	    the busiest locks, redrawn every second
//	shmctl serve SEGMENT... [--listen ADDR] [--public]
//	    Prometheus metrics (package metrics) and a live page, over HTTP
//	shmctl lock [-s|-x] [-n|-w SECS] [-E N] [--ttl D] SEGMENT RESOURCE [--] CMD ARGS... | -c 'CMD'
//	    run CMD while holding the named lock, as flock(1) does; CMD's exit
//	    status is shmctl's (75 if -n or -w gave up)
//	shmctl lock --hold-for PID SEGMENT RESOURCE
//	    hold the lock for process PID (a shell) until unlock or its end
//	shmctl unlock SEGMENT NAME --hold-for PID | --owner O | --force [--kind K]
//	    release that hold, or, with --force, free a lock of any holder
//	shmctl demo [--path SEGMENT] [--workers N] [--duration D] [--keep]
//	    worker processes share locks; one is killed holding one; the others
//	    take it over and every increment is accounted for
//	shmctl bench --workload W --procs P --iters N --path FILE [--lock spin|spin-token|upgrade|lockmgr]
//	    one cell of the lock benchmark (bench/README.md): one JSON line
//	    (rw90 runs on the upgrade mutex, the other workloads on the spinlock,
//	    unless --lock says otherwise)
//	shmctl version, shmctl completion SHELL
//	    the versions of shmctl and of the format it reads; a completion script
//
// info, check, data, slots, rwlocks, txns, locks, stats, top and serve open
// the segment read-only and change nothing in it. slots, rwlocks, txns, locks, stats and lock
// fail (status 1) on a segment created without the table they read or use,
// naming it and the create flag that sizes it; info and reclaim take any
// segment. demo and bench start worker processes: this
// program again (demo through the hidden demo-worker command, bench with
// SHMCTL_BENCH_WORKER set); lock runs CMD under the hidden lock-guard
// command, the hold's companion, which kills CMD's whole subtree if shmctl
// dies.
//
// Output is for people on a terminal (aligned columns, local times) and for
// programs in a pipe (tab-separated rows, RFC 3339 times); tables have a
// header row either way, unless --no-header.
// --json prints a document of a versioned schema (its "schema" field),
// whose fields docs/JSON.md describes. Errors are one line on stderr,
// "shmctl: <message>"; the exit status is 0 on success, 1 on failure and 2
// for a usage error (bench follows the benchmark contract instead: 3 for a
// workload the lock does not support; lock exits with CMD's status, 128+N
// if signal N killed it or ended the wait, 126 or 127 if it could not be
// started).
//
//	$ shmctl create jobs --slots 8
//	$ shmctl slots jobs --all --json | jq '.slots[] | select(.process.liveness == "dead")'
//	$ shmctl rm jobs
package main
