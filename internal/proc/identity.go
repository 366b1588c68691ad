package proc

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by this package, declared together so callers can test
// them with errors.Is.
var (
	// ErrNoProcess means the pid names no process (it exited and was reaped,
	// or it never existed).
	ErrNoProcess = errors.New("proc: no such process")
	// ErrMalformedStat is wrapped by every failure to parse a /proc stat file.
	ErrMalformedStat = errors.New("proc: malformed /proc stat")
	// ErrMalformedStatus is wrapped by every failure to parse the NSpid
	// line of a /proc status file.
	ErrMalformedStatus = errors.New("proc: malformed /proc status")
	// ErrCannotTell: a scan of /proc (ScanPIDNamespaces) cannot tell
	// whether a process of another PID namespace runs.
	ErrCannotTell = errors.New("proc: cannot tell whether the process runs")
)

// A lock owner is stored in shared memory as one uint64, the packed
// identity, so that a single compare-and-swap records both which process
// holds the lock and which incarnation of that pid it is:
//
//	bit  63      stale: recorded under a previous boot
//	bits 22..62  start time, clock ticks since boot (41 bits)
//	bits  0..21  pid (22 bits)
//
// The pid field is wide enough for every Linux pid: PID_MAX_LIMIT, the
// largest value /proc/sys/kernel/pid_max accepts, is 1<<22, and pids are
// below it. 41 bits of 100 Hz ticks last about 697 years of uptime; longer
// start times are truncated to their low 41 bits, on both sides of every
// comparison.
//
// The zero word means "no owner": a real identity has pid >= 1.
//
// The stale bit is set (MarkStale) by whoever notices that the machine
// rebooted since the word was written: start ticks count from the boot, so
// after a reboot they say nothing about which process now has the pid, and
// a stale identity is never alive. Set it only with a CAS from the exact
// word that was read, so a word written by a live owner meanwhile is kept.
const (
	PIDBits    = 22                      // width of the pid field
	StartBits  = 41                      // width of the start-ticks field
	StartShift = PIDBits                 // position of the start-ticks field
	StaleBit   = uint64(1) << 63         // the identity predates this boot
	MaxPID     = 1<<PIDBits - 1          // largest pid that fits; Linux pids are < 1<<22
	MaxStart   = 1<<StartBits - 1        // mask of the start ticks a packed word keeps
	pidMask    = uint64(MaxPID)          // the pid field, in place
	startMask  = uint64(MaxStart)        // the start field, before shifting
	usedBits   = PIDBits + StartBits + 1 // with the stale bit: the whole word
)

// The three fields fill the word exactly.
var _ = [1]struct{}{}[usedBits-64]

// ClockTicksPerSecond is the unit of Identity.StartTicks. The kernel reports
// process times in /proc in USER_HZ units, which is 100 on every Linux ABI
// whatever the kernel's internal HZ, so it is a constant here rather than a
// sysconf(_SC_CLK_TCK) call (which would need cgo to return the same 100).
const ClockTicksPerSecond = 100

// Identity names one process incarnation: a pid together with the time
// the process started, which no later process reusing the pid during the
// same boot can share.
type Identity struct {
	PID        uint32 // process id (in our PID namespace)
	StartTicks uint64 // start time in clock ticks since boot, from /proc/<pid>/stat field 22
}

// Pack returns id as a packed identity word. Start ticks that do not fit
// in StartBits bits are truncated to their low bits; Alive compares
// truncated values, so the round trip keeps the answer. The zero Identity
// packs to 0, "no owner". Pack panics if id.PID exceeds MaxPID, which no
// Linux pid does.
func (id Identity) Pack() uint64 {
	if id.PID > MaxPID {
		panic(fmt.Sprintf("proc: pid %d does not fit in %d bits", id.PID, PIDBits))
	}
	return uint64(id.PID) | (id.StartTicks&startMask)<<StartShift
}

// Unpack splits a packed identity word. It reports separately whether the
// word was marked stale; the returned Identity does not carry the bit.
func Unpack(w uint64) (id Identity, stale bool) {
	return Identity{
		PID:        uint32(w & pidMask),
		StartTicks: w >> StartShift & startMask,
	}, w&StaleBit != 0
}

// MarkStale returns w with the stale bit set; 0 (no owner) stays 0.
func MarkStale(w uint64) uint64 {
	if w == 0 {
		return 0
	}
	return w | StaleBit
}

// AlivePacked reports whether the packed identity w names a live process.
// It is false for 0 (no owner) and for a stale word.
func AlivePacked(w uint64) bool {
	id, stale := Unpack(w)
	return w != 0 && !stale && Alive(id)
}

// String returns a form such as "pid 1234 (start 5678)".
func (id Identity) String() string {
	return fmt.Sprintf("pid %d (start %d)", id.PID, id.StartTicks)
}

// StartTime returns the wall-clock time the process started: the boot time
// ("btime" in /proc/stat, whole seconds) plus StartTicks. Start times
// recorded under an earlier boot give meaningless answers.
func (id Identity) StartTime() (time.Time, error) {
	boot, err := bootTime()
	if err != nil {
		return time.Time{}, err
	}
	sec := id.StartTicks / ClockTicksPerSecond
	frac := id.StartTicks % ClockTicksPerSecond
	return time.Unix(boot+int64(sec), int64(frac)*int64(time.Second/ClockTicksPerSecond)), nil
}
