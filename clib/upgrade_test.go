package clib_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// The upgrade mutex shared by Go and C processes: the C helper is
// tests/helpers/upgrade.c, the Go one upgWorker below; both keep the same
// record (upgRecordWords plain words in a file, all equal when whole, word
// 0 the counter) under the mutex upgName.
const (
	upgName        = "clib-upgrade"
	upgRecordWords = 8
)

func init() { helpers["upg-worker"] = upgWorker }

// upgSegment creates a segment and the record file, both removed when the
// test ends.
func upgSegment(t *testing.T) (segPath, recPath string, seg *shm.Segment) {
	t.Helper()
	segPath = testproc.SegmentPath(t)
	seg, err := shm.Create(segPath, shm.Options{Options: layout.Options{Upgrades: 4, UpgradeReaders: 64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = seg.Close() })
	recPath = testproc.SegmentPath(t)
	if err := os.WriteFile(recPath, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	return segPath, recPath, seg
}

// mapRecord maps the record file; its words are plain memory, changed only
// under the mutex.
func mapRecord(path string) (*[upgRecordWords]uint64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return (*[upgRecordWords]uint64)(unsafe.Pointer(&b[0])), nil
}

// fenced checks the fencing token of a unique or upgrade hold that has
// just begun, Go's or C's: it must exceed every earlier one. The word after
// the record keeps 1 + the last token (0 before any); see fenced in the C
// helper.
func fenced(m *upgrade.Mutex, r *[upgRecordWords]uint64) error {
	last := (*uint64)(unsafe.Add(unsafe.Pointer(r), 8*upgRecordWords))
	g := m.Generation() + 1
	if g <= *last {
		return fmt.Errorf("fencing token %d after %d", g-1, *last-1)
	}
	*last = g
	return nil
}

func whole(r *[upgRecordWords]uint64) bool {
	for j := 1; j < upgRecordWords; j++ {
		if r[j] != r[0] {
			return false
		}
	}
	return true
}

// toldLate: see told_late in the C helper (Go's releaseDeadUpgrader sets
// the inconsistent bit just after it clears the dead one's unique hold).
func toldLate(m *upgrade.Mutex) bool {
	for range 10000 {
		if m.Inconsistent() {
			return true
		}
		runtime.Gosched()
	}
	return false
}

// upgWrite is write_record of the C helper: the caller holds the unique
// lock; reported says its acquisition was told of a dead holder.
func upgWrite(m *upgrade.Mutex, r *[upgRecordWords]uint64, reported bool) error {
	if !reported && !whole(r) {
		if !toldLate(m) {
			return fmt.Errorf("writer: torn record without a report: %d %d", r[0], r[upgRecordWords-1])
		}
		reported = true
	}
	if reported {
		fmt.Println("report")
		for j := 1; j < upgRecordWords; j++ {
			r[j] = r[0]
		}
		if err := m.MarkConsistent(); err != nil {
			return err
		}
	}
	v := r[0] + 1
	for j := range upgRecordWords {
		r[j] = v
	}
	return nil
}

// upgWorker is the Go twin of the C helper's worker command: SEG FILE NAME
// ROLE ROUNDS.
func upgWorker(args []string) int {
	if len(args) != 5 {
		return 2
	}
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		return 1
	}
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return fail("open", err)
	}
	m, err := upgrade.Named(seg, args[2])
	if err != nil {
		return fail("named", err)
	}
	r, err := mapRecord(args[1])
	if err != nil {
		return fail("map", err)
	}
	role := args[3]
	rounds, _ := strconv.Atoi(args[4])
	writes, reads := 0, 0
	fmt.Println("ready")
	for i := 0; rounds < 0 || i < rounds; i++ {
		k := role[0]
		if k == 'm' {
			k = "wur"[i%3]
		}
		switch k {
		case 'w':
			if err := m.Lock(); err != nil {
				return fail("lock", err)
			}
			if err := fenced(m, r); err != nil {
				return fail("lock", err)
			}
			if err := upgWrite(m, r, m.Reclaimed()); err != nil {
				return fail("write", err)
			}
			if err := m.Unlock(); err != nil {
				return fail("unlock", err)
			}
			writes++
		case 'u':
			if err := m.LockUpgrade(); err != nil {
				return fail("lock upgrade", err)
			}
			if err := fenced(m, r); err != nil {
				return fail("lock upgrade", err)
			}
			if err := m.UpgradeToUnique(); err != nil {
				return fail("upgrade to unique", err)
			}
			if err := upgWrite(m, r, m.Reclaimed()); err != nil {
				return fail("write", err)
			}
			if err := m.UniqueToUpgrade(); err != nil {
				return fail("unique to upgrade", err)
			}
			if err := m.UnlockUpgrade(); err != nil {
				return fail("unlock upgrade", err)
			}
			writes++
		default:
			if err := m.LockShared(); err != nil {
				return fail("lock shared", err)
			}
			if !whole(r) && !m.Inconsistent() && !toldLate(m) {
				return fail("reader", fmt.Errorf("torn record, mutex consistent"))
			}
			if err := m.UnlockShared(); err != nil {
				return fail("unlock shared", err)
			}
			reads++
		}
	}
	fmt.Printf("done %d %d\n", writes, reads)
	if err := m.Close(); err != nil {
		return fail("close", err)
	}
	_ = seg.Close()
	return 0
}

// upgProc is a helper process of either language, its stdout read line by
// line.
type upgProc struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	errs  strings.Builder
	done  chan struct{}
	err   error
	stdin interface{ Write([]byte) (int, error) }
}

func startUpg(t *testing.T, name string, cmd *exec.Cmd) *upgProc {
	t.Helper()
	p := &upgProc{name: name, cmd: cmd, done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedWriter{&p.mu, &p.errs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// startUpgradeC starts the C helper with args; startGo the Go worker.
func startUpgradeC(t *testing.T, args ...string) *upgProc {
	return startUpg(t, "C "+args[0], exec.Command(helper("upgrade"), args...))
}

func startGo(t *testing.T, args ...string) *upgProc {
	return startUpg(t, "Go worker", testproc.Command("upg-worker", args...))
}

// count is the number of lines that begin with prefix.
func (p *upgProc) count(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// waitLine waits for a line that begins with prefix and returns the rest;
// it fails if the process ends first.
func (p *upgProc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				p.mu.Unlock()
				return rest
			}
		}
		p.mu.Unlock()
		select {
		case <-p.done:
			p.mu.Lock()
			for _, l := range p.lines {
				if rest, ok := strings.CutPrefix(l, prefix); ok {
					p.mu.Unlock()
					return rest
				}
			}
			p.mu.Unlock()
			t.Fatalf("%s ended (%v) before a %q line: stderr %s", p.name, p.err, prefix, p.stderr())
		case <-time.After(time.Millisecond):
		}
	}
}

func (p *upgProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errs.String()
}

// waitOK waits for the process to exit 0.
func (p *upgProc) waitOK(t *testing.T) {
	t.Helper()
	<-p.done
	if p.err != nil {
		t.Fatalf("%s: %v: %s", p.name, p.err, p.stderr())
	}
}

// TestUpgradeMixedCounter: Go and C writers (unique, and upgrade then
// unique) and readers on one mutex; the record is never torn and its
// counter is exactly the writes made.
func TestUpgradeMixedCounter(t *testing.T) {
	segPath, recPath, seg := upgSegment(t)
	m, _ := namedUpg(t, seg)
	rounds := "1200"
	if testproc.Long() {
		rounds = "30000"
	}
	var ps []*upgProc
	for _, role := range []string{"m", "w", "u", "r"} {
		ps = append(ps, startUpgradeC(t, "worker", segPath, recPath, upgName, role, rounds))
		ps = append(ps, startGo(t, segPath, recPath, upgName, role, rounds))
	}
	writes, reads := 0, 0
	for _, p := range ps {
		var w, r int
		if _, err := fmt.Sscanf(p.waitLine(t, "done "), "%d %d", &w, &r); err != nil {
			t.Fatal(err)
		}
		p.waitOK(t)
		if n := p.count("report"); n != 0 {
			t.Errorf("%s: %d reports with no holder killed", p.name, n)
		}
		writes, reads = writes+w, reads+r
	}
	rec, err := mapRecord(recPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LockShared(); err != nil {
		t.Fatal(err)
	}
	defer m.UnlockShared()
	if !whole(rec) || rec[0] != uint64(writes) {
		t.Fatalf("record %v, want every word %d", *rec, writes)
	}
	t.Logf("%d writes, %d reads", writes, reads)
}

// TestUpgradeWakeAcross: a waiter of one language asleep on the mutex is
// woken by a release of the other. Each waiter is seen registered as a
// sleeper on its gate (Inspect) before the release, so it slept.
func TestUpgradeWakeAcross(t *testing.T) {
	segPath, _, seg := upgSegment(t)
	m, status := namedUpg(t, seg)
	// C waiters, Go holder.
	for _, c := range []struct {
		mode   string
		asleep func(upgrade.Status) bool
	}{
		{"unique", func(s upgrade.Status) bool { return s.WriterWaiters == 1 }},
		{"shared", func(s upgrade.Status) bool { return s.SharedWaiters == 1 }},
		{"upgrade", func(s upgrade.Status) bool { return s.SharedWaiters == 1 }},
	} {
		if err := m.Lock(); err != nil {
			t.Fatal(err)
		}
		p := startUpgradeC(t, "wait", segPath, upgName, c.mode)
		p.waitLine(t, "waiting")
		testproc.WaitFor(t, func() bool { return c.asleep(status()) }, "C %s waiter asleep", c.mode)
		if err := m.Unlock(); err != nil {
			t.Fatal(err)
		}
		if got := p.waitLine(t, "got "); got != "0" {
			t.Fatalf("C %s waiter got %s", c.mode, got)
		}
		p.waitOK(t)
	}
	// Go waiters, C holder.
	for _, c := range []struct {
		hold, mode string
		take       func() error
		give       func() error
		asleep     func(upgrade.Status) bool
	}{
		{"unique", "unique", m.Lock, m.Unlock, func(s upgrade.Status) bool { return s.WriterWaiters == 1 }},
		{"unique", "shared", m.LockShared, m.UnlockShared, func(s upgrade.Status) bool { return s.SharedWaiters == 1 }},
		{"upgrade", "upgrade", m.LockUpgrade, m.UnlockUpgrade, func(s upgrade.Status) bool { return s.SharedWaiters == 1 }},
		{"shared", "unique", m.Lock, m.Unlock, func(s upgrade.Status) bool { return s.UniqueWaiters == 1 }},
	} {
		p := startUpgradeC(t, "hold", segPath, upgName, c.hold)
		p.waitLine(t, "held")
		if c.hold == "unique" {
			// C's uncontended lock holds in the one-CAS form (Writer bit
			// 61, State untouched), which Go's readers and writers must
			// respect, and C's release must clear.
			e, err := seg.Upgrade(m.Index())
			if err != nil {
				t.Fatal(err)
			}
			if w, st := e.Writer.Load(), e.State.Load(); w&layout.UpgradeWriterUnique == 0 || st != 0 {
				t.Fatalf("C's uncontended hold: Writer %#x, State %#x; want bit 61 and 0", w, st)
			}
		}
		got := make(chan error, 1)
		go func() { got <- c.take() }()
		testproc.WaitFor(t, func() bool { return c.asleep(status()) }, "Go %s waiter asleep for C %s", c.mode, c.hold)
		if _, err := p.stdin.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("Go %s waiter: %v", c.mode, err)
		}
		p.waitOK(t)
		if err := c.give(); err != nil {
			t.Fatal(err)
		}
	}
	// A Go upgrade draining a C reader is woken by its release.
	p := startUpgradeC(t, "hold", segPath, upgName, "shared")
	p.waitLine(t, "held")
	if err := m.LockUpgrade(); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- m.UpgradeToUniqueContext(context.Background()) }()
	testproc.WaitFor(t, func() bool { return status().UniqueWaiters == 1 }, "Go upgrade draining a C reader")
	if _, err := p.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	p.waitOK(t)
	if err := m.UniqueToUpgrade(); err != nil {
		t.Fatal(err)
	}
	if err := m.UnlockUpgrade(); err != nil {
		t.Fatal(err)
	}
}

// namedUpg opens the tests' mutex (upgName) in seg, closed when the test
// ends, and a reader of its status.
func namedUpg(t *testing.T, seg *shm.Segment) (*upgrade.Mutex, func() upgrade.Status) {
	t.Helper()
	m, err := upgrade.Named(seg, upgName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, func() upgrade.Status { return upgStatus(t, seg, m.Index()) }
}

// upgStatus is upgrade mutex i's status.
func upgStatus(t *testing.T, seg *shm.Segment, i int) upgrade.Status {
	t.Helper()
	s, err := upgrade.Inspect(seg, i)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An operator's force (Go's ForceUnlock) of a stuck Go holder while a C
// process waits for it: the C waiter holds its word but was not granted,
// so the force leaves it (libshmlock writes the holder id only at the
// grant, as Go does), and it gets the lock once the stuck hold is freed.
func TestUpgradeForceLeavesCWaiter(t *testing.T) {
	segPath, _, seg := upgSegment(t)
	m, status := namedUpg(t, seg)
	self := proc.Self().Pack()
	for _, c := range []struct {
		stuck, waiter string
		take          func() error
		release       func() error
		asleep        func(upgrade.Status) bool
	}{
		{"upgrade", "unique", m.LockUpgrade, m.UnlockUpgrade,
			func(s upgrade.Status) bool { return s.UniqueWaiters == 1 && s.Writer != 0 }},
		{"unique", "upgrade", m.Lock, m.Unlock,
			func(s upgrade.Status) bool { return s.SharedWaiters == 1 && s.Upgrader != 0 }},
	} {
		if err := c.take(); err != nil {
			t.Fatal(err)
		}
		p := startUpgradeC(t, "wait", segPath, upgName, c.waiter)
		p.waitLine(t, "waiting")
		testproc.WaitFor(t, func() bool { return c.asleep(status()) }, "C %s waiter asleep behind Go's %s hold", c.waiter, c.stuck)
		f, err := upgrade.ForceUnlock(seg, m.Index())
		if err != nil {
			t.Fatal(err)
		}
		freed, waiting := f.Upgrader, f.WaitingWriter
		if c.stuck == "unique" {
			freed, waiting = f.Writer, f.WaitingUpgrader
		}
		if freed != self || waiting == 0 || waiting == self {
			t.Fatalf("force of Go's %s hold with a C %s waiter: %+v", c.stuck, c.waiter, f)
		}
		if got := p.waitLine(t, "got "); got != "0" {
			t.Fatalf("C %s waiter got %s", c.waiter, got)
		}
		p.waitOK(t)
		if err := c.release(); !errors.Is(err, upgrade.ErrNotHeld) {
			t.Fatalf("the forced Go holder's release: %v, want ErrNotHeld", err)
		}
	}
}

// TestUpgradeKillTorture: Go and C workers of every role SIGKILLed at
// random moments and replaced. No torn record is ever seen without a
// report, no process fails, every report stands for a kill (a reclaim is
// reported once, until marked consistent), and the mutex is usable at the
// end with the record whole and nothing left to repair.
func TestUpgradeKillTorture(t *testing.T) {
	segPath, recPath, seg := upgSegment(t)
	m, _ := namedUpg(t, seg)
	kills := 12
	if testproc.Long() {
		kills = 200
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	start := func(i int) *upgProc {
		role := string("mwur"[i%4])
		if i%2 == 0 {
			return startUpgradeC(t, "worker", segPath, recPath, upgName, role, "-1")
		}
		return startGo(t, segPath, recPath, upgName, role, "-1")
	}
	const workers = 6
	live := make([]*upgProc, workers)
	var all []*upgProc
	for i := range live {
		live[i] = start(i)
		all = append(all, live[i])
	}
	for k := 0; k < kills; k++ {
		i := rng.IntN(workers)
		live[i].waitLine(t, "ready")
		time.Sleep(time.Duration(rng.IntN(20000)) * time.Microsecond)
		select {
		case <-live[i].done:
			t.Fatalf("%s ended: %v: %s", live[i].name, live[i].err, live[i].stderr())
		default:
		}
		_ = live[i].cmd.Process.Signal(syscall.SIGKILL)
		<-live[i].done
		live[i] = start(i + k*workers)
		all = append(all, live[i])
	}
	for _, p := range live {
		p.waitLine(t, "ready")
		select {
		case <-p.done:
			t.Fatalf("%s ended: %v: %s", p.name, p.err, p.stderr())
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	reports := 0
	for _, p := range all {
		if s := p.stderr(); s != "" {
			t.Errorf("%s: %s", p.name, s)
		}
		reports += p.count("report")
	}
	killed := kills + workers
	if reports > killed {
		t.Errorf("%d reports for %d kills", reports, killed)
	}
	// Everyone is dead: the next writer reclaims what they held.
	if err := m.Lock(); err != nil {
		t.Fatal(err)
	}
	rec, err := mapRecord(recPath)
	if err != nil {
		t.Fatal(err)
	}
	if !whole(rec) && !m.Reclaimed() {
		t.Fatalf("torn record %v and no report", *rec)
	}
	if err := m.MarkConsistent(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, err := upgrade.Reclaim(seg, m.Index(), false); err != nil {
		t.Fatal(err)
	}
	if found, err := upgrade.Check(seg, m.Index()); err != nil || len(found) != 0 {
		t.Fatalf("check: %v %v", found, err)
	}
	t.Logf("%d kills, %d reports, counter %d", killed, reports, rec[0])
}
