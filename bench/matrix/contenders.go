package main

import (
	"fmt"
	"path/filepath"
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
	// Of is set for a baseline twin (-baseline): the contender it repeats
	// with the baseline's drivers, whose JSON names that contender.
	Of  string
	Bin string // the twin's bin directory; "": the matrix's
}

// baselineSuffix ends the name of a baseline twin.
const baselineSuffix = "@baseline"

// withBaseline returns cs with, right after each of shmlock's own locks
// whose driver dir has too, a twin that runs it from dir: the same lock
// as another build has it, run in every round beside this build's.
func withBaseline(cs []contender, dir string) []contender {
	var out []contender
	for _, c := range cs {
		out = append(out, c)
		if c.Ours && c.Of == "" && fileExists(filepath.Join(dir, c.Argv[0])) {
			twin := c
			twin.Name, twin.Of, twin.Bin = c.Name+baselineSuffix, c.Name, dir
			twin.About = c.About + ", as built in " + dir
			out = append(out, twin)
		}
	}
	return out
}

// peer is the name c's driver puts in its JSON line.
func (c contender) peer() string {
	if c.Of != "" {
		return c.Of
	}
	return c.Name
}

// contenders are every lock the matrix knows, in the order of its table.
var contenders = []contender{
	{Name: "shmlock_spin", About: "shmlock spinlock, pid/tid mode (robust)", Argv: []string{"shmctl", "bench", "--lock", "spin"}, Ours: true},
	{Name: "shmlock_spin_token", About: "shmlock spinlock, token mode (a token per worker; not robust)", Argv: []string{"shmctl", "bench", "--lock", "spin-token"}, Ours: true},
	{Name: "shmlock_spin_c", About: "libshmlock spinlock from C, pid/tid mode (robust)", Argv: []string{"shmlock_spin_c"}, Ours: true},
	{Name: "shmlock_upgrade", About: "shmlock upgrade mutex, unique and shared holds (robust)", Argv: []string{"shmctl", "bench", "--lock", "upgrade"}, Ours: true},
	{Name: "shmlock_upgrade_c", About: "libshmlock upgrade mutex from C, unique and shared holds (robust)", Argv: []string{"shmlock_upgrade_c"}, Ours: true},
	{Name: "shmlock_lockmgr", About: "shmlock lock manager, one named resource, exclusive and collaborative holds (robust)", Argv: []string{"shmctl", "bench", "--lock", "lockmgr"}, Ours: true},
	{Name: "shmlock_lockmgr_c", About: "libshmlock lock manager from C, one named resource, exclusive and collaborative holds (robust)", Argv: []string{"shmlock_lockmgr_c"}, Ours: true},
	{Name: "shmlock_lockmgr_eager", About: "the same with eager waiters (AcquireOptions.Eager: a handoff at every release)", Argv: []string{"shmctl", "bench", "--lock", "lockmgr-eager"}, Ours: true},
	{Name: "pthread_mutex_robust", About: "glibc pthread mutex, process-shared, robust", Argv: []string{"pthread_mutex_robust"}, Ours: false},
	{Name: "pthread_mutex", About: "glibc pthread mutex, process-shared, not robust", Argv: []string{"pthread_mutex"}, Ours: false},
	{Name: "pthread_rwlock", About: "glibc pthread rwlock, process-shared, not robust", Argv: []string{"pthread_rwlock"}, Ours: false},
	{Name: "boost_mutex", About: "Boost.Interprocess interprocess_mutex, not robust", Argv: []string{"boost_mutex"}, Ours: false},
	{Name: "boost_upgradable", About: "Boost.Interprocess interprocess_upgradable_mutex, not robust", Argv: []string{"boost_upgradable"}, Ours: false},
	{Name: "flock", About: "flock(2) on a file, one descriptor per process", Argv: []string{"flock"}, Ours: false},
	{Name: "ofd", About: "fcntl(2) OFD lock on a file, one descriptor per process", Argv: []string{"ofd"}, Ours: false},
	{Name: "cas_floor", About: "floor: CAS to lock, store to unlock, spin (not a usable lock)", Argv: []string{"cas_floor"}, Ours: false},
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
