package upgrade_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/upgrade"
)

// The unique lock's two forms (state.go): an uncontended Lock holds it in
// one CAS of the Writer word (writerUnique, the state word untouched); a
// Lock that meets readers steps back and holds it through stateWrite. Each
// keeps readers and upgrade seekers out, each Unlock leaves the mutex free
// with the generation moved on, and a hold is never in both forms.
func TestUniqueHoldForms(t *testing.T) {
	t.Parallel()
	self := proc.Self().Pack()
	for _, tc := range []struct {
		name          string
		lock          func(tb testing.TB, w, r *upgrade.Mutex, st func() upgrade.Status) // takes w's unique lock; r may help
		writer, state uint64                                                             // the words while w holds
	}{
		{
			name:   "uncontended",
			lock:   func(tb testing.TB, w, _ *upgrade.Mutex, _ func() upgrade.Status) { require.NoError(tb, w.Lock()) },
			writer: self | upgrade.WriterUnique,
		},
		{
			name:   "uncontended, through the Locker",
			lock:   func(_ testing.TB, w, _ *upgrade.Mutex, _ func() upgrade.Status) { w.Locker().Lock() },
			writer: self | upgrade.WriterUnique,
		},
		{
			name: "behind a reader",
			lock: func(tb testing.TB, w, r *upgrade.Mutex, st func() upgrade.Status) {
				require.NoError(tb, r.LockShared())
				got := make(chan error, 1)
				go func() { got <- w.Lock() }()
				waitFor(tb, func() bool { return st().WriteLocked }, "the writer to drain")
				require.NoError(tb, r.UnlockShared())
				require.NoError(tb, testproc.Receive(tb, got, "Lock once the reader left"))
			},
			writer: self,
			state:  uint64(upgrade.StateWrite),
		},
		{
			name:   "TryLock (no fast path)",
			lock:   func(tb testing.TB, w, _ *upgrade.Mutex, _ func() upgrade.Status) { require.NoError(tb, w.TryLock()) },
			writer: self,
			state:  uint64(upgrade.StateWrite),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg, _ := newSegment(t)
			e := entry(t, seg)
			w, r := open(t, seg), open(t, seg)
			gen := e.Generation.Load()
			tc.lock(t, w, r, func() upgrade.Status { return status(t, seg) })
			require.Equal(t, tc.writer, e.Writer.Load(), "Writer word")
			require.Equal(t, tc.state, uint64(e.State.Load()), "state word")
			st := status(t, seg)
			require.True(t, st.WriteLocked)
			require.Equal(t, self, st.Writer, "Inspect shows the identity without the bit")
			found, err := upgrade.Check(seg, 0)
			require.NoError(t, err)
			require.Empty(t, found)

			require.ErrorIs(t, r.TryLockShared(), upgrade.ErrWouldBlock, "readers are kept out")
			require.ErrorIs(t, r.TryLockUpgrade(), upgrade.ErrWouldBlock, "upgrade seekers are kept out")
			require.ErrorIs(t, r.TryLock(), upgrade.ErrWouldBlock)
			require.ErrorIs(t, r.Unlock(), upgrade.ErrNotOwner)
			require.ErrorIs(t, r.UniqueToShared(), upgrade.ErrNotOwner)
			require.NoError(t, w.MarkConsistent(), "the holder holds the unique lock")
			require.Equal(t, tc.writer, e.Writer.Load(), "the failed tries changed nothing")
			require.Equal(t, tc.state, uint64(e.State.Load()))

			require.NoError(t, w.Unlock())
			require.Equal(t, gen+1, e.Generation.Load())
			checkFree(t, status(t, seg))
			require.ErrorIs(t, w.Unlock(), upgrade.ErrNotHeld)
		})
	}
}

// The writer's half of Dekker's pair: a fast-path Lock that finds the
// upgrade lock held steps back to the Writer word alone and waits; given
// up, it leaves the upgrade holder's words as they were. Once the upgrade
// lock goes, the writer gets in.
func TestLockStepsBackFromUpgradeHolder(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	e := entry(t, seg)
	u, w := open(t, seg), open(t, seg)
	require.NoError(t, u.LockUpgrade())
	before := status(t, seg)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.LockContext(ctx), context.DeadlineExceeded)
	require.Zero(t, e.Writer.Load(), "the given-up writer left no word")
	after := status(t, seg)
	after.Generation = before.Generation
	require.Equal(t, before, after, "the upgrade holder's words are as they were")

	got := make(chan error, 1)
	go func() { got <- w.Lock() }()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.UniqueWaiters == 1 }, "the writer to wait for the upgrade lock")
	require.Zero(t, e.Writer.Load()&upgrade.WriterUnique, "a waiting writer holds no unique bit")
	require.NoError(t, u.UnlockUpgrade())
	require.NoError(t, testproc.Receive(t, got, "Lock once the upgrade lock went"))
	require.NoError(t, w.Unlock())
	checkFree(t, status(t, seg))
}

// Check reports a writer word whose unique bit no protocol step leaves:
// the bit with no writer beside it, and a hold in both forms at once; the
// words of a sound hold in either form give no finding.
func TestCheckUniqueBit(t *testing.T) {
	t.Parallel()
	self := proc.Self().Pack()
	for _, tc := range []struct {
		name   string
		writer uint64
		state  uint32
		want   string // a substring of the one finding; "" for none
	}{
		{"one-CAS hold", self | upgrade.WriterUnique, 0, ""},
		{"one-CAS hold, hungry, inconsistent", self | upgrade.WriterUnique | upgrade.WriterHungry, upgrade.StateInconsistent, ""},
		{"stateWrite hold", self, upgrade.StateWrite, ""},
		{"unique bit with no writer", upgrade.WriterUnique, 0, "with no writer recorded"},
		{"both forms", self | upgrade.WriterUnique, upgrade.StateWrite, "in both forms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg, _ := newSegment(t)
			e := entry(t, seg)
			e.Writer.Store(tc.writer)
			e.State.Store(tc.state)
			found, err := upgrade.Check(seg, 0)
			require.NoError(t, err)
			if tc.want == "" {
				require.Empty(t, found)
				return
			}
			require.Len(t, found, 1, "%q", found)
			require.Contains(t, found[0], tc.want)
		})
	}
}
