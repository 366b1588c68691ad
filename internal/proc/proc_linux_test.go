package proc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/proc"
)

// helperEnv marks the re-executed test binary as the helper process, which
// reads stdin until it is closed and then exits.
const helperEnv = "PROC_TEST_HELPER"

// testTimeout bounds every wait on the helper process.
const testTimeout = 10 * time.Second

// TestHelperProcess is not a test: it is the body of the child processes
// started by startHelper.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		return
	}
	if os.Getenv(helperSaysSelfEnv) != "" {
		fmt.Println(proc.Self().StartTicks)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// helperSaysSelfEnv makes the helper print its start ticks, as it reads
// them itself, on a line of its own before it reads stdin.
const helperSaysSelfEnv = "PROC_TEST_HELPER_SAYS_SELF"

// startHelper starts a child that runs until its stdin is closed.
func startHelper(tb testing.TB) (*exec.Cmd, io.WriteCloser) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*testTimeout)
	tb.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait() // reaps the child if the test failed half-way
	})
	return cmd, stdin
}

func TestSelf(t *testing.T) {
	t.Parallel()
	self := proc.Self()
	looked, err := proc.Lookup(uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if self != looked {
		t.Errorf("Self: got %v, want Lookup(getpid) = %v", self, looked)
	}
	if self.StartTicks == 0 {
		t.Error("Self: start ticks are 0")
	}
	if again := proc.Self(); again != self {
		t.Errorf("Self again: got %v, want %v", again, self)
	}
	if !proc.Alive(self) {
		t.Errorf("Alive(Self() = %v): got false, want true", self)
	}
	if !proc.AlivePacked(self.Pack()) {
		t.Errorf("AlivePacked(Self().Pack()): got false, want true")
	}
}

func TestAliveStartMismatch(t *testing.T) {
	t.Parallel()
	for _, delta := range []int64{+1, -1, proc.MaxStart + 1} {
		id := proc.Self()
		id.StartTicks = uint64(int64(id.StartTicks) + delta)
		want := delta == proc.MaxStart+1 // invisible once truncated to 41 bits
		if got := proc.Alive(id); got != want {
			t.Errorf("Alive(%v), start %+d: got %v, want %v", id, delta, got, want)
		}
	}
}

func TestLookupNoProcess(t *testing.T) {
	t.Parallel()
	for _, pid := range []uint32{0, proc.MaxPID + 1, 1<<32 - 1} {
		if id, err := proc.Lookup(pid); !errors.Is(err, proc.ErrNoProcess) {
			t.Errorf("Lookup(%d): got %v, %v; want ErrNoProcess", pid, id, err)
		}
	}
}

func TestAliveExitedChild(t *testing.T) {
	t.Parallel()
	cmd, stdin := startHelper(t)
	pid := uint32(cmd.Process.Pid)
	id, err := proc.Lookup(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !proc.Alive(id) {
		t.Fatalf("running child %v: Alive got false, want true", id)
	}

	// Let it exit, but do not reap it yet: a zombie.
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	waitZombie(t, pid)
	// The leader shows Z as soon as it exits; its other threads (a Go
	// process has several) may take a moment more, and until the last has
	// exited the process counts as alive (see TestAliveLeaderExited).
	deadline := time.Now().Add(testTimeout)
	for proc.Alive(id) || proc.AlivePacked(id.Pack()) {
		if time.Now().After(deadline) {
			t.Fatalf("zombie child %v: Alive got true, want false", id)
		}
		time.Sleep(time.Millisecond)
	}

	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if proc.Alive(id) || proc.AlivePacked(id.Pack()) {
		t.Errorf("reaped child %v: Alive got true, want false", id)
	}
	if got, err := proc.Lookup(pid); !errors.Is(err, proc.ErrNoProcess) {
		// The pid may have been reused meanwhile; then it is someone else.
		if err != nil || got == id {
			t.Errorf("Lookup(reaped %d): got %v, %v; want ErrNoProcess", pid, got, err)
		}
	}
}

// waitZombie polls until process pid is a zombie.
func waitZombie(tb testing.TB, pid uint32) {
	tb.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			tb.Fatal(err)
		}
		state, _, err := proc.ParseStat(b)
		if err != nil {
			tb.Fatal(err)
		}
		if state == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("child %d: got state %q, want Z", pid, state)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAliveDecisions drives Alive through each answer /proc and kill(2)
// can give. It replaces package variables, so it does not run in parallel.
func TestAliveDecisions(t *testing.T) {
	const pid, start = 4321, 280923
	id := proc.Identity{PID: pid, StartTicks: start}
	stat := func(state string, start uint64) []byte {
		return fmt.Appendf(nil, "%d (my (prog)) %s 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, state, start)
	}
	statErr := func(err error) error {
		return &fs.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/stat", pid), Err: err}
	}
	tests := []struct {
		name     string
		stat     []byte
		statErr  error
		killErr  error
		wantKill bool
		want     bool
		// tasks are the states of the threads in /proc/<pid>/task (the
		// leader's first), read for a zombie leader; taskErr its error.
		tasks   []string
		taskErr error
	}{
		{name: "running", stat: stat("S", start), want: true},
		{name: "running, ticks beyond 41 bits", stat: stat("R", start+proc.MaxStart+1), want: true},
		{name: "pid reused", stat: stat("S", start+1), want: false},
		{name: "zombie", stat: stat("Z", start), tasks: []string{"Z"}, want: false},
		{name: "zombie, its threads exiting", stat: stat("Z", start), tasks: []string{"Z", "X", "Z"}, want: false},
		{name: "zombie, reaped meanwhile", stat: stat("Z", start), taskErr: syscall.ENOENT, want: false},
		{name: "main thread exited, another runs", stat: stat("Z", start), tasks: []string{"Z", "S"}, want: true},
		{name: "main thread exited, threads unreadable", stat: stat("Z", start), taskErr: syscall.EACCES, want: true},
		{name: "zombie of a reused pid", stat: stat("Z", start+1), tasks: []string{"Z", "S"}, want: false},
		{name: "dead", stat: stat("X", start), want: false},
		{name: "dead, old kernel", stat: stat("x", start), want: false},
		{name: "gone", statErr: statErr(syscall.ENOENT), want: false},
		{name: "reaped while reading", statErr: statErr(syscall.ESRCH), want: false},
		{name: "hidepid, other user's process", statErr: statErr(syscall.EACCES), killErr: syscall.EPERM, wantKill: true, want: true},
		{name: "hidepid, own process", statErr: statErr(syscall.EACCES), killErr: nil, wantKill: true, want: true},
		{name: "hidepid, no process", statErr: statErr(syscall.EACCES), killErr: syscall.ESRCH, wantKill: true, want: false},
		{name: "read error, process", statErr: statErr(syscall.EIO), killErr: nil, wantKill: true, want: true},
		{name: "malformed, process", stat: []byte("garbage"), killErr: syscall.EPERM, wantKill: true, want: true},
		{name: "malformed, no process", stat: []byte("garbage"), killErr: syscall.ESRCH, wantKill: true, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc.SetReadStatFile(t, func(path string) ([]byte, error) {
				for i, st := range tt.tasks {
					if path == fmt.Sprintf("/proc/%d/task/%d/stat", pid, pid+i) {
						return stat(st, start), nil
					}
				}
				if want := fmt.Sprintf("/proc/%d/stat", pid); path != want {
					t.Errorf("read %s, want %s", path, want)
				}
				return tt.stat, tt.statErr
			})
			proc.SetReadTaskDir(t, func(path string) ([]os.DirEntry, error) {
				if want := fmt.Sprintf("/proc/%d/task/", pid); path != want {
					t.Errorf("read dir %s, want %s", path, want)
				}
				if tt.taskErr != nil {
					return nil, &fs.PathError{Op: "open", Path: path, Err: tt.taskErr}
				}
				var ents []os.DirEntry
				for i := range tt.tasks {
					ents = append(ents, fakeDirEntry(fmt.Sprint(pid+i)))
				}
				return ents, nil
			})
			killed := false
			proc.SetKill(t, func(p int, sig syscall.Signal) error {
				killed = true
				if p != pid || sig != 0 {
					t.Errorf("kill(%d, %d), want kill(%d, 0)", p, sig, pid)
				}
				return tt.killErr
			})
			if got := proc.Alive(id); got != tt.want {
				t.Errorf("Alive: got %v, want %v", got, tt.want)
			}
			if killed != tt.wantKill {
				t.Errorf("kill called: got %v, want %v", killed, tt.wantKill)
			}
		})
	}
}

func TestBootID(t *testing.T) {
	t.Parallel()
	id, err := proc.BootID()
	if err != nil {
		t.Fatal(err)
	}
	if id == [16]byte{} {
		t.Error("BootID is zero")
	}
	if again, err := proc.BootID(); err != nil || again != id {
		t.Errorf("BootID again: got %x, %v; want %x, nil", again, err, id)
	}
	text, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
	if want := strings.TrimSpace(string(text)); got != want {
		t.Errorf("BootID: got %s, want %s", got, want)
	}
}

func TestPIDNamespace(t *testing.T) {
	t.Parallel()
	ns, err := proc.PIDNamespace()
	if err != nil {
		t.Fatal(err)
	}
	if ns == 0 {
		t.Error("PIDNamespace is 0")
	}
	link, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("pid:[%d]", ns); link != want {
		t.Errorf("/proc/self/ns/pid: got %s, want %s", link, want)
	}
}

func TestThreadID(t *testing.T) {
	t.Parallel()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := proc.ThreadID()
	link, err := os.Readlink("/proc/thread-self")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d/task/%d", os.Getpid(), tid); link != want {
		t.Errorf("/proc/thread-self: got %s, want %s", link, want)
	}
}

func TestStartTime(t *testing.T) {
	t.Parallel()
	start, err := proc.Self().StartTime()
	if err != nil {
		t.Fatal(err)
	}
	// btime has whole seconds and may drift a second against the clock.
	now := time.Now()
	if start.After(now.Add(2*time.Second)) || start.Before(now.Add(-time.Hour)) {
		t.Errorf("StartTime: got %v, want shortly before %v", start, now)
	}
	bootAt, err := proc.Identity{}.StartTime()
	if err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(stat, fmt.Appendf(nil, "\nbtime %d\n", bootAt.Unix())) {
		t.Errorf("StartTime of tick 0: got %v, want btime of /proc/stat", bootAt)
	}
	tick, err := proc.Identity{StartTicks: 150}.StartTime()
	if err != nil || tick.Sub(bootAt) != 1500*time.Millisecond {
		t.Errorf("StartTime of tick 150: got boot%+v, %v; want boot+1.5s", tick.Sub(bootAt), err)
	}
}

// MappedBy leaves out this process and any process in its address space
// (a child between clone and exec); kcmp tells those apart from a child
// that runs an image of its own.
func TestSharesOurVM(t *testing.T) {
	t.Parallel()
	if !proc.SharesOurVM(os.Getpid()) {
		t.Skip("kcmp(2) is not available here: MappedBy counts every other process, as before")
	}
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	if proc.SharesOurVM(child.Process.Pid) {
		t.Errorf("a child that has exec'd (Start returned) shares our address space")
	}
	if proc.SharesOurVM(1 << 22) { // above every pid: no such process
		t.Errorf("a missing process shares our address space")
	}
}

// leaderExitC is a C program whose main thread exits (pthread_exit) while
// another thread runs on, reading stdin until it is closed.
const leaderExitC = `#include <pthread.h>
#include <unistd.h>
static void *run(void *a) { char c; (void)a; while (read(0, &c, 1) > 0) {} return 0; }
int main(void) { pthread_t t; pthread_create(&t, 0, run, 0); pthread_exit(0); }
`

// A process whose main thread exited shows Z in /proc/<pid>/stat while its
// other threads run (and may hold locks): it is alive until the last one
// exits. (Zombie meant dead, so such a C process's locks were taken over
// under its running threads: two holders.)
func TestAliveLeaderExited(t *testing.T) {
	t.Parallel()
	cc, err := exec.LookPath("cc") // the tests need a C compiler (README, Set-up)
	if err != nil {
		t.Fatalf("no C compiler to build the program: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/leader.c", []byte(leaderExitC), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-pthread", "-o", dir+"/leader", dir+"/leader.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	cmd := exec.Command(dir + "/leader")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	id, err := proc.Lookup(pid)
	if err != nil {
		t.Fatal(err)
	}
	waitZombie(t, pid) // the main thread exited
	if !proc.Alive(id) || !proc.AlivePacked(id.Pack()) {
		t.Errorf("process %v with a running thread, its main thread exited: Alive got false, want true", id)
	}
	if err := stdin.Close(); err != nil { // its last thread exits
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for proc.Alive(id) {
		if time.Now().After(deadline) {
			t.Fatalf("process %v after its last thread exited: Alive still true", id)
		}
		time.Sleep(time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("leader program: %v", err)
	}
}

// fakeDirEntry is a directory entry with only a name.
type fakeDirEntry string

func (d fakeDirEntry) Name() string               { return string(d) }
func (d fakeDirEntry) IsDir() bool                { return true }
func (d fakeDirEntry) Type() fs.FileMode          { return fs.ModeDir }
func (d fakeDirEntry) Info() (fs.FileInfo, error) { return nil, fs.ErrNotExist }

// A child of this process is among Children, and gone from it once reaped.
func TestChildren(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if got := proc.Children(); !slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("child %d not among %v", cmd.Process.Pid, got)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got := proc.Children(); slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("reaped child %d still among %v", cmd.Process.Pid, got)
	}
}

// A scan of this /proc judges this process alive, and a process of a PID
// namespace that has none (no namespace's inode is 1) dead where this is
// the initial namespace, which sees every process; elsewhere that
// namespace may be out of sight.
func TestScanPIDNamespaces(t *testing.T) {
	t.Parallel()
	own, err := proc.PIDNamespace()
	if err != nil {
		t.Fatal(err)
	}
	s := proc.ScanPIDNamespaces()
	if alive, err := s.Alive(own, proc.Self()); !alive || err != nil {
		t.Errorf("this process: got %v, %v; want true, nil", alive, err)
	}
	alive, err := s.Alive(1, proc.Self())
	switch {
	case own == proc.InitialPIDNamespace:
		if alive || err != nil {
			t.Errorf("in the initial namespace, a process of a namespace with none: got %v, %v; want false, nil", alive, err)
		}
	case alive || !errors.Is(err, proc.ErrCannotTell):
		t.Errorf("in pid:[%d], a process of a namespace not shown: got %v, %v; want false, ErrCannotTell", own, alive, err)
	}
	t.Logf("this is pid:[%d] (initial: %v); a namespace not shown: %v", own, own == proc.InitialPIDNamespace, err)
}

// A process of another time namespace than the judge's, in the same PID
// namespace, reads its own start time shifted by the boot-time offset of
// its namespace (Linux 5.6 and later add it to field 22): its identity is
// not what the judge reads at its pid, and it still runs. Alive must not
// take it for dead (a lock it holds would be taken over under it). The
// child is made with unshare(1), which needs the privilege to make a
// time namespace.
func TestAliveOtherTimeNamespace(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*testTimeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, unshare, "--time", "--boottime", "1000", os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperSaysSelfEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	var own uint64
	if _, err := fmt.Fscanln(stdout, &own); err != nil {
		_ = stdin.Close()
		_ = cmd.Wait()
		t.Skipf("no child in a time namespace of its own (%v): %s", err, stderr.Bytes())
	}
	id := proc.Identity{PID: uint32(cmd.Process.Pid), StartTicks: own}
	seen, err := proc.Lookup(id.PID)
	if err != nil {
		t.Fatal(err)
	}
	if seen.StartTicks == own {
		t.Skip("the child's start time is not shifted: no time namespace of its own")
	}
	if !proc.Alive(id) || !proc.AlivePacked(id.Pack()) {
		t.Fatalf("child %v, which reads its start as %d here, runs: Alive got false", seen, own)
	}
}
