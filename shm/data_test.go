package shm_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

// regionsOf lists the regions of seg as "name@offset+len" strings.
func regionsOf(t *testing.T, seg *shm.Segment) []string {
	t.Helper()
	rs, err := seg.Regions()
	require.NoError(t, err)
	out := []string{}
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s@%d+%d", r.Name(), r.Offset(), r.Len()))
	}
	return out
}

func TestDataClaimAndFind(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{DataBytes: 1024, DataRegions: 4}})
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()

	q, err := seg.Data("queue", 100)
	require.NoError(t, err)
	require.True(t, q.Fresh(), "the first claim makes the region")
	require.Equal(t, "queue", q.Name())
	require.Equal(t, 100, q.Len())
	require.Equal(t, 0, q.Offset())
	require.Equal(t, 0, q.Index())
	require.Len(t, q.Bytes(), 100)
	require.Equal(t, 100, cap(q.Bytes()), "the slice ends where the region does")
	for i, b := range q.Bytes() {
		require.Zero(t, b, "byte %d of a new region", i)
	}

	q2, err := other.Data("queue", 100)
	require.NoError(t, err)
	require.False(t, q2.Fresh(), "a second claim finds the region")
	require.Equal(t, q.Offset(), q2.Offset())
	copy(q.Bytes(), "hello")
	require.Equal(t, "hello", string(q2.Bytes()[:5]), "one handle's write, seen through the other")

	anySize, err := other.Data("queue", 0)
	require.NoError(t, err, "size 0 finds a region of any size")
	require.Equal(t, 100, anySize.Len())

	s, err := other.Data("stats", 8)
	require.NoError(t, err)
	require.Equal(t, 128, s.Offset(), "the next region starts on the next cache line past the last")
	require.True(t, s.Fresh())

	require.Equal(t, []string{"queue@0+100", "stats@128+8"}, regionsOf(t, seg))
	size, used, err := seg.DataArea()
	require.NoError(t, err)
	require.Equal(t, 1024, size)
	require.Equal(t, 192, used)

	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	require.Empty(t, found)
}

// Every refused call leaves the regions as they were.
func TestDataErrors(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{DataBytes: 256, DataRegions: 3}})
	_, err := seg.Data("keep", 64)
	require.NoError(t, err)
	ro, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	noData, _ := create(t, shm.Options{Options: layout.Options{DataBytes: -1}})
	data := func(s *shm.Segment, name string, size int) func() error {
		return func() error { _, err := s.Data(name, size); return err }
	}

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"empty name", data(seg, "", 8), layout.ErrBadName},
		{"name too long", data(seg, strings.Repeat("x", layout.MaxNameLen+1), 8), layout.ErrBadName},
		{"control character", data(seg, "a\nb", 8), layout.ErrBadName},
		{"invalid UTF-8", data(seg, "\xff", 8), layout.ErrBadName},
		{"negative size", data(seg, "neg", -1), shm.ErrRegionSize},
		{"another size", data(seg, "keep", 65), shm.ErrRegionSize},
		{"another size, smaller", data(seg, "keep", 1), shm.ErrRegionSize},
		{"size 0 finds only", data(seg, "nosuch", 0), shm.ErrNotFound},
		{"more than is left", data(seg, "big", 256-64+1), shm.ErrDataFull},
		{"more than the area", data(seg, "huge", 1<<40), shm.ErrDataFull},
		{"no data area", data(noData, "x", 1), shm.ErrDataFull},
		{"claim on read-only", data(ro, "new", 8), shm.ErrReadOnly},
		{"another size on read-only", data(ro, "keep", 8), shm.ErrRegionSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.call(), tc.want)
			require.Equal(t, []string{"keep@0+64"}, regionsOf(t, seg))
		})
	}

	r, err := ro.Data("keep", 64)
	require.NoError(t, err, "a read-only segment finds regions")
	require.Equal(t, 0, r.Offset())

	// The directory fills before the area does.
	_, err = seg.Data("b", 1)
	require.NoError(t, err)
	_, err = seg.Data("c", 1)
	require.NoError(t, err)
	_, err = seg.Data("d", 1)
	require.ErrorIs(t, err, shm.ErrTableFull)
	require.Equal(t, []string{"keep@0+64", "b@64+1", "c@128+1"}, regionsOf(t, seg))
}

func TestRegionWords(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{})
	r, err := seg.Data("words", 20)
	require.NoError(t, err)
	other, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer other.Close()
	r2, err := other.Data("words", 20)
	require.NoError(t, err)

	w, err := r.Uint64(8)
	require.NoError(t, err)
	w2, err := r2.Uint64(8)
	require.NoError(t, err)
	w.Store(0x1122334455667788)
	require.Equal(t, uint64(0x1122334455667788), w2.Load(), "the same word through another handle")
	require.Equal(t, uint64(0x1122334455667788), binary.LittleEndian.Uint64(r2.Bytes()[8:]), "and through the bytes")

	u, err := r.Uint32(16)
	require.NoError(t, err, "the last whole 32-bit word")
	u.Add(3)
	require.Equal(t, uint32(3), binary.LittleEndian.Uint32(r2.Bytes()[16:]))

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"uint64 misaligned", func() error { _, err := r.Uint64(4); return err }},
		{"uint64 negative", func() error { _, err := r.Uint64(-8); return err }},
		{"uint64 past the end", func() error { _, err := r.Uint64(16); return err }},
		{"uint64 far past the end", func() error { _, err := r.Uint64(1 << 40); return err }},
		{"uint32 misaligned", func() error { _, err := r.Uint32(2); return err }},
		{"uint32 past the end", func() error { _, err := r.Uint32(20); return err }},
		{"uint32 negative", func() error { _, err := r.Uint32(-4); return err }},
	} {
		require.ErrorIs(t, tc.call(), shm.ErrRegionOffset, tc.name)
	}

	require.NoError(t, other.Close())
	_, err = r2.Uint64(0)
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = r2.Uint32(0)
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = other.Data("words", 20)
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = other.Regions()
	require.ErrorIs(t, err, shm.ErrClosed)
	_, _, err = other.DataArea()
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = other.Data("bad\x00name", 1)
	require.ErrorIs(t, err, layout.ErrBadName, "a bad name is a bad name, closed or not")
}

// Processes claim the same names at once: each name gets one region, at
// one offset, that exactly one of them made.
func TestDataClaimsAcrossProcesses(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{DataBytes: 64 << 10, DataRegions: 8}})
	names := []string{"alpha:100", "beta:64", "gamma:1", "delta:4096", "epsilon:65"}
	const procs = 6
	start := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixNano(), 10)
	children := make([]*testproc.Child, procs)
	for i := range children {
		children[i] = testproc.Start(t, "claim-regions", append([]string{path, start}, names...)...)
	}
	offsets, fresh := map[string]string{}, map[string]int{}
	for _, c := range children {
		for line := range strings.Lines(c.WaitOK(t)) {
			f := strings.Fields(line)
			require.Len(t, f, 3, "%s: line %q", c.Name, line)
			if prev, ok := offsets[f[0]]; ok && prev != f[1] {
				t.Fatalf("region %q: got offsets %s and %s, want one", f[0], prev, f[1])
			}
			offsets[f[0]] = f[1]
			if f[2] == "true" {
				fresh[f[0]]++
			}
		}
	}
	rs, err := seg.Regions()
	require.NoError(t, err)
	require.Len(t, rs, len(names))
	for _, r := range rs {
		require.Equal(t, strconv.Itoa(r.Offset()), offsets[r.Name()], "region %q: the directory and the children disagree", r.Name())
		require.Equal(t, 1, fresh[r.Name()], "region %q: processes that made it", r.Name())
		require.Zero(t, r.Offset()%layout.RegionAlign, "region %q offset", r.Name())
	}
	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	require.Empty(t, found)
}

// Processes add to a counter in a data region under a spinlock, with a
// plain load and store: only the lock keeps the total exact.
func TestDataCounterUnderLockAcrossProcesses(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{})
	const procs, iters = 4, 20000
	start := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixNano(), 10)
	children := make([]*testproc.Child, procs)
	for i := range children {
		children[i] = testproc.Start(t, "data-counter", path, start, strconv.Itoa(iters))
	}
	for _, c := range children {
		c.WaitOK(t)
	}
	r, err := seg.Data("counter", 0)
	require.NoError(t, err)
	require.Equal(t, uint64(procs*iters), binary.NativeEndian.Uint64(r.Bytes()), "increments under the lock")
	require.Equal(t, uint64(procs*iters), binary.NativeEndian.Uint64(r.Bytes()[64:]), "the atomic count beside it")
}

// A claimant killed between writing its entry and publishing it leaves a
// free entry with words set and the registry lock held: check reports the
// entry, the next claim takes the lock over and the entry, and the region
// is where it would have been.
func TestDataClaimantDiesMidClaim(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{DataBytes: 1024, DataRegions: 4}})
	_, err := seg.Data("first", 10)
	require.NoError(t, err)
	c := testproc.Start(t, "die-mid-region", path, "jobs")
	c.WaitKilled(t)

	_, err = seg.Data("jobs", 0)
	require.ErrorIs(t, err, shm.ErrNotFound, "a half-written claim stays invisible")
	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	require.Empty(t, found, "an unfinished claim is no damage")
	notes, err := seg.AbandonedClaims()
	require.NoError(t, err)
	require.Equal(t, []string{"region_directory[1]: a claim its claimant did not finish (it died); free, and the next claim reuses the entry"}, notes)

	done := make(chan error, 1)
	var r *shm.Region
	go func() {
		var err error
		r, err = seg.Data("other", 30)
		done <- err
	}()
	require.NoError(t, testproc.Receive(t, done, "the claim after a dead claimant"))
	require.Equal(t, 1, r.Index(), "the dead claimant's entry is taken")
	require.Equal(t, 64, r.Offset())
	require.Equal(t, []string{"first@0+10", "other@64+30"}, regionsOf(t, seg))
	found, err = seg.CheckDirectories()
	require.NoError(t, err)
	require.Empty(t, found)
}

// A damaged claimed entry stops new claims (they could overlap what it
// meant to hold) but not lookups of sound regions.
func TestDataDamagedDirectory(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{DataBytes: 1024, DataRegions: 4}})
	_, err := seg.Data("good", 10)
	require.NoError(t, err)
	_, err = seg.Data("bad", 10)
	require.NoError(t, err)
	dir, err := seg.Region(layout.KindRegionDirectory)
	require.NoError(t, err)
	binary.LittleEndian.PutUint64(dir[layout.RegionEntrySize+8:], 8) // entry 1's offset, misaligned

	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Contains(t, found[0], "region_directory[1]")
	_, err = seg.Data("new", 1)
	require.ErrorIs(t, err, layout.ErrTableRange)
	r, err := seg.Data("good", 10)
	require.NoError(t, err)
	require.Equal(t, 0, r.Offset())
	require.Equal(t, []string{"good@0+10"}, regionsOf(t, seg), "a damaged entry is left out")
}

func claimRegionsHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer seg.Close()
	start, _ := strconv.ParseInt(args[1], 10, 64)
	time.Sleep(time.Until(time.Unix(0, start)))
	for _, arg := range args[2:] {
		name, size, _ := strings.Cut(arg, ":")
		n, _ := strconv.Atoi(size)
		r, err := seg.Data(name, n)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println(name, r.Offset(), r.Fresh())
	}
	return 0
}

func dataCounterHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer seg.Close()
	start, _ := strconv.ParseInt(args[1], 10, 64)
	iters, _ := strconv.Atoi(args[2])
	r, err := seg.Data("counter", 128)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	counter := r.Bytes()[:8]
	count, err := r.Uint64(64)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	lock, err := spinlock.Named(seg, "counter", spinlock.PIDTID)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer lock.Close()
	me := spinlock.NewHolder()
	time.Sleep(time.Until(time.Unix(0, start))) // all at once, so that they contend
	for range iters {
		g, err := lock.Lock(me)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		binary.NativeEndian.PutUint64(counter, binary.NativeEndian.Uint64(counter)+1) // plain: only the lock keeps it exact
		count.Add(1)
		if err := g.Release(); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	return 0
}

func dieMidRegionHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return 1
	}
	shm.SetTestHookBeforePublish(func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
	_, _ = seg.Data(args[1], 100)
	return 3 // not reached
}
