package lockmgr_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// validName is the rule for resource and owner names, written apart from
// the package's one-pass check.
func validName(s string, max int) bool {
	if s == "" || len(s) > max || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, unicode.IsControl)
}

// FuzzNames: any resource and owner string is either refused with
// ErrBadResource or ErrBadOwner and changes nothing, or works and comes
// back unchanged from Inspect.
func FuzzNames(f *testing.F) {
	for _, s := range [][2]string{{"task:123", "agent-1"}, {"", "a"}, {"r", ""}, {"\x00", "a"},
		{strings.Repeat("r", lockmgr.MaxResourceLen), strings.Repeat("o", lockmgr.MaxOwnerLen)},
		{strings.Repeat("r", lockmgr.MaxResourceLen+1), "o"}, {"ü", "\u0085"}, {"\xc3", "a"}} {
		f.Add(s[0], s[1])
	}
	m, _ := newManager(f, 4, lockmgr.Options{Logger: discard()})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, resource, owner string) {
		before := m.Stats()
		info, err := m.Acquire(ctx, resource, owner, lockmgr.Exclusive, lockmgr.AcquireOptions{})
		okRes, okOwn := validName(resource, lockmgr.MaxResourceLen), validName(owner, lockmgr.MaxOwnerLen)
		switch {
		case !okRes:
			require.ErrorIs(t, err, lockmgr.ErrBadResource)
		case !okOwn:
			require.ErrorIs(t, err, lockmgr.ErrBadOwner)
		default:
			require.NoError(t, err)
		}
		if err != nil {
			require.Equal(t, lockmgr.Failed, info.State)
			require.Equal(t, before, m.Stats())
			_, ierr := m.Inspect(resource)
			require.Equal(t, okRes, ierr == nil)
			return
		}
		ri, err := m.Inspect(resource)
		require.NoError(t, err)
		require.Equal(t, resource, ri.Resource)
		require.Len(t, ri.Holders, 1)
		require.Equal(t, owner, ri.Holders[0].Owner)
		require.NoError(t, m.Release(resource, owner))
	})
}

// tableSnapshot is the bytes of a lock table after a varied workload:
// exclusive and collaborative holds, an overflow chain, expiry, a
// declared resource, recycled entries.
func tableSnapshot(tb testing.TB) []byte {
	tb.Helper()
	clk := newFakeClock()
	m, seg := newManager(tb, 8, lockmgr.Options{Clock: clk, Logger: discard()})
	ctx := context.Background()
	must := func(_ lockmgr.LockInfo, err error) { require.NoError(tb, err) }
	require.NoError(tb, m.Declare("declared"))
	must(m.Acquire(ctx, "x", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Second}))
	for i := range 5 {
		must(m.Acquire(ctx, "c", fmt.Sprint("owner-", i), lockmgr.Collaborative, lockmgr.AcquireOptions{}))
	}
	for i := range 6 {
		must(m.Acquire(ctx, fmt.Sprint("tmp-", i), "a", lockmgr.Exclusive, lockmgr.AcquireOptions{}))
		require.NoError(tb, m.Release(fmt.Sprint("tmp-", i), "a"))
	}
	clk.Advance(2 * time.Second)
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(tb, err)
	return append([]byte(nil), mem...)
}

// FuzzTable: whatever bytes the lock table holds (a corrupted or hostile
// segment), whatever its size, and whoever its entries' lock words name,
// the Manager's calls return, with an error or not, and never panic, a
// hold that was granted is released and gone, and an acquisition that
// waits (200 µs) ends.
//
// ctl says the rest. Its first byte, odd, sets the insert lock (the header
// entry's) to a dead process's identity: the next change of an entry's
// kind takes it over and frees the overflow entries no chain reaches, in
// whatever table the rest of the input made. Its second byte picks the
// table's size (tableSizes). Each further byte sets one entry's lock word
// (lockModes): cleared, a dead process, this live process, or the table's
// own bytes left as they are. A live holder of an entry lock is a process
// inside the entry, which the calls wait out (TestDeadEntryLock): with one
// in the table the calls run on a segment of their own that is closed
// under them (closeAfter), and each then ends, with a grant or a typed
// error (ErrClosed), instead of waiting for ever.
func FuzzTable(f *testing.F) {
	snap := tableSnapshot(f)
	f.Add(snap, []byte{})
	f.Add([]byte{}, []byte{})
	f.Add(snap, []byte{1})
	f.Add(snap, []byte{0, 1, lockDead, lockSelf, lockGarbage, lockClear, lockDead})
	f.Add(snap, []byte{1, 3, lockGarbage, lockDead, lockDead, lockDead, lockDead, lockDead, lockDead, lockDead})
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // our pid, reused by us
	// One table of each size, for the inputs with no live holder.
	shared := map[int]tableUnderTest{}
	for _, n := range tableSizes {
		shared[n] = newTableUnderTest(f, n)
	}
	f.Fuzz(func(t *testing.T, table, ctl []byte) {
		entries := tableSizes[0]
		if len(ctl) > 1 {
			entries = tableSizes[int(ctl[1])%len(tableSizes)]
		}
		modes := []byte(nil)
		if len(ctl) > 2 {
			modes = ctl[2:]
		}
		words := make([]uint64, entries)
		for i := range words {
			mode := lockClear
			if i < len(modes) {
				mode = int(modes[i]) % numLockModes
			}
			switch mode {
			case lockDead:
				words[i] = dead
			case lockSelf:
				words[i] = self.Pack()
			case lockGarbage:
				off := i * layout.LockMgrEntrySize
				if off+8 <= len(table) {
					words[i] = binary.LittleEndian.Uint64(table[off:])
				}
			}
		}
		if len(ctl) > 0 && ctl[0]&1 != 0 {
			words[0] = dead
		}
		live := slices.ContainsFunc(words, func(w uint64) bool { return w == self.Pack() || proc.AlivePacked(w) })
		u := shared[entries]
		if live {
			u = newTableUnderTest(t, entries)
		}
		clear(u.mem)
		copy(u.mem, table)
		for i, w := range words {
			binary.LittleEndian.PutUint64(u.mem[i*layout.LockMgrEntrySize:], w)
		}
		if live {
			stop := testproc.CloseAfter(u.seg.Close, time.Millisecond)
			defer stop()
		}
		stop := testproc.Watchdog(time.Minute, "the calls of FuzzTable")
		defer stop()
		exerciseTable(t, u.m, u.seg.Closed)
	})
}

// tableSizes are the sizes of lock table FuzzTable runs on (the header
// entry included): the size of its snapshot first, then the smallest
// tables, and one with a long probe.
var tableSizes = []int{8, 1, 2, 3, 5, 17}

// The modes of an entry's lock word in FuzzTable.
const (
	lockClear   = iota // 0: nobody inside
	lockDead           // a dead process (this pid, reused by this process)
	lockSelf           // this process, which is inside no entry
	lockGarbage        // the word the table's bytes hold
	numLockModes
)

// tableUnderTest is a lock table FuzzTable writes and calls.
type tableUnderTest struct {
	m   *lockmgr.Manager
	seg *shm.Segment
	mem []byte
}

func newTableUnderTest(tb testing.TB, entries int) tableUnderTest {
	m, seg := newManager(tb, entries, lockmgr.Options{Logger: discard()})
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(tb, err)
	return tableUnderTest{m, seg, mem}
}

// exerciseTable makes the calls of FuzzTable on m, and checks what they
// promise whatever the table holds. closed reports whether m's segment
// has been closed (then a call may fail with ErrClosed's code where it
// would otherwise have to succeed).
func exerciseTable(t *testing.T, m *lockmgr.Manager, closed func() bool) {
	ctx := context.Background()
	requireCode := func(what string, err error) {
		t.Helper()
		// A closed segment's failure too has its code (ErrClosed).
		if err != nil && lockmgr.Code(err) == "" && !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: an error without a code: %v", what, err)
		}
	}
	mustUnlessClosed := func(what string, err error) {
		t.Helper()
		if err != nil && !(closed() && errors.Is(err, lockmgr.ErrClosed)) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_ = m.List()
	_ = m.Stats()
	for _, r := range []string{"x", "c", "declared", "new"} {
		_, err := m.Inspect(r)
		requireCode("Inspect", err)
		info, err := m.Acquire(ctx, r, "fuzz", lockmgr.Collaborative, lockmgr.AcquireOptions{TTL: time.Hour})
		requireCode("Acquire", err)
		if err != nil {
			continue
		}
		require.Equal(t, lockmgr.Acquired, info.State)
		requireCode("CheckVersion", m.CheckVersion(r, info.Version))
		// The holder of a live grant may always say the data is whole
		// again, and then nobody is told otherwise.
		mustUnlessClosed(fmt.Sprintf("MarkConsistent %q", r), m.MarkConsistent(r, "fuzz"))
		if ri, err := m.Inspect(r); err == nil && ri.Inconsistent && !closed() {
			t.Fatalf("%q: inconsistent after its holder marked it consistent: %+v", r, ri)
		}
		_, err = m.Refresh(r, "fuzz", time.Minute)
		requireCode("Refresh", err)
		mustUnlessClosed(fmt.Sprintf("Release %q", r), m.Release(r, "fuzz"))
		if ri, err := m.Inspect(r); err == nil && !closed() {
			for _, h := range ri.Holders {
				if h.Owner == "fuzz" && h.State == lockmgr.Acquired {
					t.Fatalf("%q: still held by the owner that released it: %+v", r, ri)
				}
			}
		}
	}
	// A wait ends by its deadline, whatever the table (the watchdog makes a
	// hang a failure); a grant is released again.
	for _, r := range []string{"x", "c"} {
		_, err := m.Acquire(ctx, r, "waiter", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: 200 * time.Microsecond})
		requireCode("Acquire with Wait", err)
		if err == nil {
			mustUnlessClosed("Release of the waiter", m.Release(r, "waiter"))
		}
	}
	// An operator's ForceRelease ends every hold: the next exclusive
	// acquisition finds none in its way.
	for _, r := range []string{"x", "c"} {
		_, err := m.ForceRelease(r)
		requireCode("ForceRelease", err)
		if err != nil {
			continue
		}
		_, err = m.Acquire(ctx, r, "after", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		if (errors.Is(err, lockmgr.ErrResourceLocked) || errors.Is(err, lockmgr.ErrTooManyHolders)) && !closed() {
			ri, _ := m.Inspect(r)
			t.Fatalf("%q: held after ForceRelease: %v (%+v)", r, err, ri)
		}
		requireCode("Acquire after ForceRelease", err)
		if err == nil {
			mustUnlessClosed("Release after ForceRelease", m.Release(r, "after"))
		}
	}
	_, err := m.Reclaim(false)
	requireCode("Reclaim", err)
	_, err = m.Check()
	requireCode("Check", err)
	_, err = m.Overview()
	requireCode("Overview", err)
	requireCode("Declare", m.Declare("d2"))
	requireCode("Undeclare", m.Undeclare("declared"))
	_ = m.Stats()
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzTable/snapshot from
// tableSnapshot, when LOCKMGR_UPDATE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("LOCKMGR_UPDATE_CORPUS") != "1" {
		t.Skip("set LOCKMGR_UPDATE_CORPUS=1 to regenerate the fuzz corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzTable")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	data := tableSnapshot(t)
	body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(\"\")\n", data)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "snapshot"), []byte(body), 0o644))
	// The same with a cycle in an overflow chain and a holder record whose
	// identity is garbage.
	bad := append([]byte(nil), data...)
	for off := 0; off+layout.LockMgrEntrySize <= len(bad); off += layout.LockMgrEntrySize {
		bad[off+20] = byte(off/layout.LockMgrEntrySize) % 8 // Next points at itself
		bad[off+128] = 0xff                                 // first holder's Process, low byte
	}
	body = fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(\"\")\n", bad)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cycles"), []byte(body), 0o644))
}
