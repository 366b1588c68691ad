package proc

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process states from field 3 of /proc/<pid>/stat that mean the process
// has exited. A zombie has released nothing but its memory: it will never
// unlock anything, so it counts as dead. But the state is the thread-group
// leader's: a process whose main thread exited (pthread_exit in a C
// program's main) shows Z while its other threads run and hold locks; so
// a zombie leader is dead only if no thread of its group runs (groupRuns).
const (
	stateZombie  = 'Z'
	stateDead    = 'X'
	stateDeadOld = 'x' // "dead" in Linux 2.6.33 to 3.13
)

// Self returns the identity of this process, read once from /proc. On
// Linux it panics if /proc has no readable entry for our own pid, since
// then no owner could ever be checked; elsewhere StartTicks is 0.
func Self() Identity {
	return self()
}

// Lookup returns the identity of the process that has pid now, which may
// be a zombie (Alive says whether it still runs). It returns an error
// wrapping ErrNoProcess if there is no such process.
func Lookup(pid uint32) (Identity, error) {
	if pid == 0 || pid > MaxPID {
		return Identity{}, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
	}
	_, start, err := readStat(pid)
	if err != nil {
		return Identity{}, err
	}
	return Identity{PID: pid, StartTicks: start}, nil
}

// Alive reports whether the process id names is still running: its pid
// has a process that is not a zombie and that started at id.StartTicks
// (compared on the low StartBits bits, as Pack keeps them). A different
// start time means the pid was reused by a later process, unless the
// process at the pid is of another time namespace than this one, where
// start times read shifted (readsOurClock): then the pid's process counts
// as id, as long as it runs (kill(pid, 0) cannot see reuse either).
//
// When /proc cannot tell (it is mounted with hidepid, or reading fails for
// another reason than a missing process), Alive asks kill(pid, 0) instead,
// which cannot see pid reuse: it then says "alive" for any process holding
// the pid. Erring that way only delays a takeover; the other way would let
// two processes hold one lock. Alive never reports a live process as dead.
func Alive(id Identity) bool {
	if id.PID == 0 || id.PID > MaxPID {
		return false
	}
	state, start, err := readStat(id.PID)
	switch {
	case err == nil:
		if start&startMask != id.StartTicks&startMask {
			if same, err := readsOurClock(id.PID); same || errors.Is(err, ErrNoProcess) {
				return false
			}
		}
		switch {
		case state == stateDead, state == stateDeadOld:
			return false
		case state == stateZombie:
			return groupRuns(id.PID)
		}
		return true
	case errors.Is(err, ErrNoProcess):
		return false
	default:
		return signalAlive(id.PID)
	}
}

// readsOurClock reports whether process pid reads start times as this
// process does, so that a start time it read of itself can be compared
// with the one this process reads at its pid: the kernel adds the
// boot-time offset of the reader's time namespace to field 22 (Linux 5.6
// and later), and processes of one PID namespace may be of different time
// namespaces (unshare --time). Where a time namespace cannot be read (the
// process is another user's, and its namespaces are not ours to see), it
// says yes, and the start times are compared as on a kernel without time
// namespaces: a process of another time namespace and another user, whose
// own start reads shifted, can still be taken for dead. An error wrapping
// ErrNoProcess means the process ended.
func readsOurClock(pid uint32) (bool, error) {
	own, err := timeNamespace(0)
	if err != nil || own == 0 { // 0: a kernel without time namespaces
		return true, nil
	}
	ns, err := timeNamespace(int(pid))
	switch {
	case errors.Is(err, ErrNoProcess):
		return false, err
	case err != nil:
		return true, nil
	}
	return ns == own, nil
}

// signalAlive reports whether kill(pid, 0) finds a process: only ESRCH
// means none. EPERM means the process exists but belongs to another user.
func signalAlive(pid uint32) bool {
	err := kill(int(pid), 0)
	return !errors.Is(err, syscall.ESRCH)
}

// BootID returns the kernel's random id of the current boot, read once
// from /proc/sys/kernel/random/boot_id. Comparing it with a value stored
// in a segment tells whether the machine rebooted since.
func BootID() ([16]byte, error) {
	return bootID()
}

// PIDNamespace returns the inode number of /proc/self/ns/pid, read once.
// Pids, and so identities, mean something only to processes in the same
// PID namespace.
func PIDNamespace() (uint64, error) {
	return pidNamespace()
}

// ThreadID returns the kernel id of the OS thread running the caller
// (gettid(2) on Linux, 0 elsewhere). Goroutines move between threads at
// any time unless they called runtime.LockOSThread, so the answer is only
// stable for a locked goroutine.
func ThreadID() uint64 {
	return threadID()
}

// CPUTime is the CPU time all threads of this process have used so far
// (CLOCK_PROCESS_CPUTIME_ID, exact to the nanosecond where getrusage
// counts in ticks). shmctl bench's workers report the CPU time of their
// workload with it, beside its throughput: a lock whose waiters spin uses
// the CPUs it does not get its throughput from.
func CPUTime() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("proc: clock_gettime(CLOCK_PROCESS_CPUTIME_ID): %w", err)
	}
	return time.Duration(ts.Nano()), nil
}
