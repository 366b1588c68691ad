package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A contender is one lock under test: a driver of the contract and the
// fixed arguments that select the lock. Its name is the JSON's "peer".
type contender struct {
	Name  string
	About string   // one line for people
	Argv  []string // the binary in the bin directory, then fixed arguments
	Ours  bool     // a shmlock lock, drawn bold in the plot
}

// contenders are every lock the matrix knows, in the order of its table.
var contenders = []contender{
	{"shmlock_spin", "shmlock spinlock, pid/tid mode (robust)", []string{"shmctl", "bench", "--lock", "spin"}, true},
	{"shmlock_spin_token", "shmlock spinlock, token mode (a token per worker; not robust)", []string{"shmctl", "bench", "--lock", "spin-token"}, true},
	{"shmlock_spin_c", "libshmlock spinlock from C, pid/tid mode (robust)", []string{"shmlock_spin_c"}, true},
	{"shmlock_upgrade", "shmlock upgrade mutex, unique and shared holds (robust)", []string{"shmctl", "bench", "--lock", "upgrade"}, true},
	{"shmlock_upgrade_c", "libshmlock upgrade mutex from C, unique and shared holds (robust)", []string{"shmlock_upgrade_c"}, true},
	{"shmlock_lockmgr", "shmlock lock manager, one named resource, exclusive and collaborative holds (robust)", []string{"shmctl", "bench", "--lock", "lockmgr"}, true},
	{"shmlock_lockmgr_eager", "the same with eager waiters (AcquireOptions.Eager: a handoff at every release)", []string{"shmctl", "bench", "--lock", "lockmgr-eager"}, true},
	{"pthread_mutex_robust", "glibc pthread mutex, process-shared, robust", []string{"pthread_mutex_robust"}, false},
	{"pthread_mutex", "glibc pthread mutex, process-shared, not robust", []string{"pthread_mutex"}, false},
	{"pthread_rwlock", "glibc pthread rwlock, process-shared, not robust", []string{"pthread_rwlock"}, false},
	{"boost_mutex", "Boost.Interprocess interprocess_mutex, not robust", []string{"boost_mutex"}, false},
	{"boost_upgradable", "Boost.Interprocess interprocess_upgradable_mutex, not robust", []string{"boost_upgradable"}, false},
	{"flock", "flock(2) on a file, one descriptor per process", []string{"flock"}, false},
	{"ofd", "fcntl(2) OFD lock on a file, one descriptor per process", []string{"ofd"}, false},
	{"cas_floor", "floor: CAS to lock, store to unlock, spin (not a usable lock)", []string{"cas_floor"}, false},
}

// lookupContenders returns the contenders named in a comma-separated list,
// in the list's order; "" means all of them.
func lookupContenders(list string) ([]contender, error) {
	if list == "" {
		return slices.Clone(contenders), nil
	}
	var out []contender
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(contenders, func(c contender) bool { return c.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown contender %q (known: %s)", name, strings.Join(contenderNames(contenders), ", "))
		}
		out = append(out, contenders[i])
	}
	return out, nil
}

func contenderNames(cs []contender) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return names
}

// A cell is one workload at one process count.
type cell struct {
	Workload string
	Procs    int
}

func (c cell) String() string { return fmt.Sprintf("%s:%d", c.Workload, c.Procs) }

// Title is the cell as the table and plot name it.
func (c cell) Title() string { return fmt.Sprintf("%s P=%d", c.Workload, c.Procs) }

// Unit is what the cell's throughput counts.
func (c cell) Unit() string {
	switch c.Workload {
	case "pingpong", "pingpong_retry":
		return "round trips/s"
	case "uncontended":
		return "lock+unlock pairs/s"
	case "uncontended_shared":
		return "shared lock+unlock pairs/s"
	}
	return "ops/s"
}

// defaultCells is the matrix: the contract's workloads at 1 to 8 processes.
const defaultCells = "uncontended:1,uncontended_shared:1,counter:2,counter:4,counter:8,pingpong:2,pingpong_retry:2,rw90:2,rw90:4,rw90:8"

var workloads = []string{"uncontended", "counter", "pingpong", "pingpong_retry", "rw90", "uncontended_shared"}

// uncontended reports whether workload w is one process's lock+unlock
// pairs, shown as the time of a pair.
func uncontended(w string) bool { return w == "uncontended" || w == "uncontended_shared" }

// parseCells reads "workload:procs,..." and checks each against the
// contract's rules.
func parseCells(list string) ([]cell, error) {
	var out []cell
	for s := range strings.SplitSeq(list, ",") {
		w, p, ok := strings.Cut(s, ":")
		n, err := strconv.Atoi(p)
		switch {
		case !ok || err != nil || n < 1 || n > 64:
			return nil, fmt.Errorf("cell %q: want workload:procs, procs 1 to 64", s)
		case !slices.Contains(workloads, w):
			return nil, fmt.Errorf("cell %q: workload must be one of %s", s, strings.Join(workloads, ", "))
		case uncontended(w) && n != 1:
			return nil, fmt.Errorf("cell %q: %s runs with 1 process", s, w)
		case strings.HasPrefix(w, "pingpong") && n != 2:
			return nil, fmt.Errorf("cell %q: %s runs with 2 processes", s, w)
		}
		out = append(out, cell{w, n})
	}
	return out, nil
}
