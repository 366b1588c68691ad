package lockmgr_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// segment), the Manager's calls return, with an error or not, and never
// panic, a hold that was granted is released and gone, and an
// acquisition that waits (200 µs) ends. Entry lock words are cleared
// first: a set one is a process inside an entry, which the calls wait out
// (TestDeadEntryLock). A byte past the table, odd, sets the insert lock
// (the header entry's) to a dead process's identity instead: the next
// change of an entry's kind takes it over and frees the overflow entries
// no chain reaches, in whatever table the rest of the input made.
func FuzzTable(f *testing.F) {
	snap := tableSnapshot(f)
	f.Add(snap)
	f.Add([]byte{})
	f.Add(append(snap, 1))
	m, seg := newManager(f, 8, lockmgr.Options{Logger: discard()})
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(f, err)
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // our pid, reused by us
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		clear(mem)
		data = data[copy(mem, data):]
		for off := 0; off < len(mem); off += layout.LockMgrEntrySize {
			clear(mem[off : off+8]) // Lock
		}
		if len(data) > 0 && data[0]&1 != 0 {
			binary.LittleEndian.PutUint64(mem, dead)
		}
		_ = m.List()
		_ = m.Stats()
		for _, r := range []string{"x", "c", "declared", "new"} {
			_, _ = m.Inspect(r)
			info, err := m.Acquire(ctx, r, "fuzz", lockmgr.Collaborative, lockmgr.AcquireOptions{TTL: time.Hour})
			if err == nil {
				require.Equal(t, lockmgr.Acquired, info.State)
				_ = m.CheckVersion(r, info.Version)
				// The holder of a live grant may always say the data is
				// whole again, and then nobody is told otherwise.
				require.NoError(t, m.MarkConsistent(r, "fuzz"), "%q", r)
				if ri, err := m.Inspect(r); err == nil && ri.Inconsistent {
					t.Fatalf("%q: inconsistent after its holder marked it consistent: %+v", r, ri)
				}
				_, _ = m.Refresh(r, "fuzz", time.Minute)
				require.NoError(t, m.Release(r, "fuzz"))
				if ri, err := m.Inspect(r); err == nil {
					for _, h := range ri.Holders {
						if h.Owner == "fuzz" && h.State == lockmgr.Acquired {
							t.Fatalf("%q: still held by the owner that released it: %+v", r, ri)
						}
					}
				}
			} else if lockmgr.Code(err) == "" && !errors.Is(err, context.Canceled) {
				t.Fatalf("error without a code: %v", err)
			}
		}
		// A wait ends by its deadline, whatever the table (the watchdog
		// makes a hang a failure); a grant is released again.
		for _, r := range []string{"x", "c"} {
			stop := testproc.Watchdog(time.Minute, "Acquire with Wait")
			_, err := m.Acquire(ctx, r, "waiter", lockmgr.Exclusive, lockmgr.AcquireOptions{Wait: 200 * time.Microsecond})
			stop()
			if err == nil {
				require.NoError(t, m.Release(r, "waiter"))
			} else if lockmgr.Code(err) == "" {
				t.Fatalf("%q: a wait that ended with an error without a code: %v", r, err)
			}
		}
		// An operator's ForceRelease ends every hold: the next exclusive
		// acquisition finds none in its way.
		for _, r := range []string{"x", "c"} {
			if _, err := m.ForceRelease(r); err != nil {
				if lockmgr.Code(err) == "" {
					t.Fatalf("%q: ForceRelease failed with an error without a code: %v", r, err)
				}
				continue
			}
			_, err := m.Acquire(ctx, r, "after", lockmgr.Exclusive, lockmgr.AcquireOptions{})
			if errors.Is(err, lockmgr.ErrResourceLocked) || errors.Is(err, lockmgr.ErrTooManyHolders) {
				ri, _ := m.Inspect(r)
				t.Fatalf("%q: held after ForceRelease: %v (%+v)", r, err, ri)
			}
			if err == nil {
				require.NoError(t, m.Release(r, "after"))
			}
		}
		_, _ = m.Reclaim(false)
		_, _ = m.Check()
		_, _ = m.Overview()
		_ = m.Declare("d2")
		_ = m.Undeclare("declared")
		_ = m.Stats()
	})
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
	body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "snapshot"), []byte(body), 0o644))
	// The same with a cycle in an overflow chain and a holder record whose
	// identity is garbage.
	bad := append([]byte(nil), data...)
	for off := 0; off+layout.LockMgrEntrySize <= len(bad); off += layout.LockMgrEntrySize {
		bad[off+20] = byte(off/layout.LockMgrEntrySize) % 8 // Next points at itself
		bad[off+128] = 0xff                                 // first holder's Process, low byte
	}
	body = fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", bad)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cycles"), []byte(body), 0o644))
}
