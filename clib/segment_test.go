package clib_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

func init() {
	helpers["gochurn"] = goChurn
}

// goChurn is the Go side of TestSegmentChurn: args path, rounds.
func goChurn(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer seg.Close()
	n, _ := strconv.Atoi(args[1])
	own := fmt.Sprintf("go-%d", os.Getpid())
	for r := range n {
		a, err := seg.ClaimAs(layout.KindOwnerSlots, "shared", 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		b, err := seg.ClaimAs(layout.KindOwnerSlots, own, 1)
		if err != nil || a == b {
			fmt.Fprintln(os.Stderr, "claim", own, a, b, err)
			return 1
		}
		if _, err := seg.Data(fmt.Sprintf("r-%d", r%8), 64); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := seg.Release(layout.KindOwnerSlots, b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := seg.Release(layout.KindOwnerSlots, a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println("done", n)
	return 0
}

// startSegmentC starts C helper name and returns it with a reader of its stdout.
func startSegmentC(t *testing.T, name string, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(helper(name), args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, bufio.NewScanner(out)
}

// checkClean fails the test if Go's checks find anything wrong in seg.
func checkClean(t *testing.T, seg *shm.Segment) {
	t.Helper()
	if found, err := seg.CheckDirectories(); err != nil || len(found) != 0 {
		t.Errorf("CheckDirectories: %v %q", err, found)
	}
	if found, err := spinlock.Check(seg); err != nil || len(found) != 0 {
		t.Errorf("spinlock.Check: %v %q", err, found)
	}
}

// A C process opens a segment Go made: its claims and regions are the ones
// Go sees, at the same indices and offsets; killed, its references are dropped.
func TestSegmentGoCreatesCClaims(t *testing.T) {
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	alpha, err := seg.ClaimAs(layout.KindOwnerSlots, "alpha", 1)
	if err != nil {
		t.Fatal(err)
	}
	counter, err := seg.Data("gocounter", 16)
	if err != nil {
		t.Fatal(err)
	}
	cmd, out := startSegmentC(t, "segment", "claim", path)
	got := map[string]int{}
	for out.Scan() && out.Text() != "ready" {
		f := strings.Fields(out.Text())
		n, _ := strconv.Atoi(f[2])
		got[f[0]+" "+f[1]] = n
	}
	if got["slot alpha"] != alpha {
		t.Errorf("C claimed alpha at %d, Go at %d", got["slot alpha"], alpha)
	}
	if got["data gocounter"] != counter.Offset() {
		t.Errorf("C found gocounter at %d, Go at %d", got["data gocounter"], counter.Offset())
	}
	claims := func(k layout.Kind) map[string]shm.Claim {
		cs, err := seg.Claims(k)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]shm.Claim{}
		for _, c := range cs {
			m[c.Name] = c
		}
		return m
	}
	slots, ups := claims(layout.KindOwnerSlots), claims(layout.KindUpgrades)
	if c := slots["alpha"]; c.Refs != 2 || c.Use != 1 {
		t.Errorf("alpha: %+v, want 2 refs, use 1", c)
	}
	if c, ok := slots["beta"]; !ok || c.Index != got["slot beta"] || c.Refs != 1 || c.Claimer != uint64(cmdIdentity(t, cmd)) {
		t.Errorf("beta: %+v (C said index %d)", c, got["slot beta"])
	}
	if c, ok := ups["gamma"]; !ok || c.Index != got["upgrade gamma"] || c.Refs != 1 {
		t.Errorf("gamma: %+v (C said index %d)", c, got["upgrade gamma"])
	}
	r, err := seg.Data("cdata", 0)
	if err != nil || r.Offset() != got["data cdata"] || r.Len() != 100 {
		t.Errorf("cdata: %v, %v (C said offset %d)", r, err, got["data cdata"])
	}
	checkClean(t, seg)

	// Killed holding its claims: Go drops its references.
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	dropped, err := seg.DropDeadClaims(false)
	if err != nil || len(dropped) != 3 {
		t.Fatalf("DropDeadClaims: %v %+v, want the 3 of the C process", err, dropped)
	}
	slots, ups = claims(layout.KindOwnerSlots), claims(layout.KindUpgrades)
	if c := slots["alpha"]; c.Refs != 1 {
		t.Errorf("alpha after the C process died: %+v, want 1 ref (Go's)", c)
	}
	if _, ok := slots["beta"]; ok {
		t.Errorf("beta still claimed after its only claimant died")
	}
	if _, ok := ups["gamma"]; ok {
		t.Errorf("gamma still claimed after its only claimant died")
	}
	checkClean(t, seg)
}

func cmdIdentity(t *testing.T, cmd *exec.Cmd) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return uint64(cmd.Process.Pid) | (start&(1<<41-1))<<22
}

// A segment C made is the one Go would make, and Go opens it, finds its
// claims and regions, and its checks pass.
func TestSegmentCCreatesGoOpens(t *testing.T) {
	path := testproc.SegmentPath(t)
	cmd, out := startSegmentC(t, "segment", "create", path)
	if !out.Scan() || out.Text() != "created" {
		t.Fatalf("C helper: %q", out.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	want, err := layout.Plan(layout.Options{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	h := seg.Header()
	if h.TotalSize != want.TotalSize || h.Tables != want.Tables || h.Flags != 0 {
		t.Errorf("C's layout %+v, Go's %+v", h, want)
	}
	goPath := testproc.SegmentPath(t)
	goSeg, err := shm.Create(goPath, shm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer goSeg.Close()
	if h.BootID != goSeg.Header().BootID || h.PIDNamespace != goSeg.Header().PIDNamespace {
		t.Errorf("C recorded boot %x pidns %d, Go %x %d", h.BootID, h.PIDNamespace, goSeg.Header().BootID, goSeg.Header().PIDNamespace)
	}
	cb, _ := os.ReadFile(path)
	gb, _ := os.ReadFile(goPath)
	// Equal but for Created and Creator (and so the checksum).
	for _, r := range [][2]int{{0, 24}, {32, 56}, {64, layout.OffMutable}} {
		if !bytes.Equal(cb[r[0]:r[1]], gb[r[0]:r[1]]) {
			t.Errorf("header bytes [%d, %d) differ", r[0], r[1])
		}
	}
	if i, err := seg.Lookup(layout.KindOwnerSlots, "x"); err != nil || i != 0 {
		t.Errorf("Lookup x: %d, %v", i, err)
	}
	r, err := seg.Data("d", 64)
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := r.Uint64(0); w.Load() != 42 {
		t.Errorf("region d holds %d, want 42", w.Load())
	}
	checkClean(t, seg)
	// The creator exited holding its claim: its reference is dead.
	if dropped, err := seg.DropDeadClaims(false); err != nil || len(dropped) != 1 {
		t.Errorf("DropDeadClaims: %v %+v", err, dropped)
	}
}

// Go and C processes claim, find regions and release at once, and C ones
// are killed at random moments: no wedge, and the directory ends empty.
func TestSegmentChurn(t *testing.T) {
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 16}})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	rounds := "2000"
	if testproc.Long() {
		rounds = "50000"
	}
	var goKids []*testproc.Child
	for range 2 {
		goKids = append(goKids, testproc.Start(t, "gochurn", path, rounds))
	}
	var cKids []*exec.Cmd
	for range 2 {
		cmd, _ := startSegmentC(t, "segment", "churn", path, rounds)
		cKids = append(cKids, cmd)
	}
	// Victims: C churners killed as soon as they are under way.
	for range 2 {
		cmd, out := startSegmentC(t, "segment", "churn", path, "1000000")
		go func() {
			for out.Scan() {
			}
		}()
		testproc.WaitFor(t, func() bool {
			cs, _ := seg.Claims(layout.KindOwnerSlots)
			for _, c := range cs {
				if c.Name == fmt.Sprintf("c-%d", cmd.Process.Pid) {
					return true
				}
			}
			return false
		}, "C churner %d under way", cmd.Process.Pid)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	for _, c := range goKids {
		c.WaitOK(t)
	}
	for _, c := range cKids {
		if err := c.Wait(); err != nil {
			t.Errorf("C churner: %v", err)
		}
	}
	if _, err := seg.DropDeadClaims(false); err != nil {
		t.Fatal(err)
	}
	cs, err := seg.Claims(layout.KindOwnerSlots)
	if err != nil || len(cs) != 0 {
		t.Errorf("claims left: %v %+v", err, cs)
	}
	regions, err := seg.Regions()
	if err != nil || len(regions) != 8 {
		t.Errorf("regions: %v, %d, want 8", err, len(regions))
	}
	checkClean(t, seg)
}

// TestSegmentFuzzCorpusC replays the corpus of layout's FuzzValidate (with
// SHMLOCK_FUZZ_CORPUS=DIR also the fuzz cache's inputs, see fuzzCorpus)
// against C's open: each input's header, its checksum recomputed as
// FuzzValidate's second try
// does and marked ready, is the start of a file of the input's size (or of the header's,
// for a size no file has), and a C process that opens it, claims in it and
// uses its lock table must end, with a code or not, never die of a signal
// or print a sanitizer's report.
func TestSegmentFuzzCorpusC(t *testing.T) {
	for _, f := range fuzzCorpus(t, "layout", "FuzzValidate") {
		args := fuzzArgs(t, f)
		require.Len(t, args, 2, f)
		data := fuzzBytes(t, f, args[0])
		size, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(args[1], "int64("), ")"), 10, 64)
		require.NoError(t, err, f)
		if len(data) >= layout.HeaderSize {
			binary.LittleEndian.PutUint32(data[layout.OffChecksum:], layout.Checksum(data))
			// Finished by its creator: the open goes on to the tables
			// rather than waiting for an initialisation nobody makes.
			binary.LittleEndian.PutUint32(data[layout.OffReady:], layout.ReadyMark)
		}
		if size < 0 || size > 16<<20 {
			size = int64(max(len(data), layout.HeaderSize))
		}
		file := make([]byte, max(size, int64(len(data))))
		copy(file, data)
		path := testproc.SegmentPath(t)
		require.NoError(t, os.WriteFile(path, file[:size], 0o600))
		for _, run := range [][]string{{"lockmgr", "try", path, "x", "fuzz", "collaborative"}, {"segment", "churn", path, "1"}} {
			requireEnded(t, startC(t, run[0], run[1:]...), fmt.Sprintf("%s: %s", filepath.Base(f), strings.Join(run[:2], " ")))
		}
	}
}

// TestReleaseWithoutReferenceC: C's release of a claim its process holds
// no reference to (Go's) is refused and changes nothing, as Go's is
// (shm's TestReleaseWithoutReference).
func TestReleaseWithoutReferenceC(t *testing.T) {
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close(); _ = shm.Remove(path) })
	i, err := seg.Claim(layout.KindOwnerSlots, "go's")
	require.NoError(t, err)
	line := testproc.RunLine(t, "release ", "exec-c", helper("segment"), "release", path, "1", strconv.Itoa(i))
	require.Equal(t, "-32", line, "SHMLOCK_ENOTFOUND (shm.ErrNotClaimed)")
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Equal(t, []shm.Claim{{Index: i, Name: "go's", Refs: 1, Claimer: proc.Self().Pack()}}, claims)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}
