package upgrade_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// handles of the table test: A makes the call under test, B holds what the
// state says, C is a reader that keeps B's upgrade pending.
type handles struct {
	seg     *shm.Segment
	a, b, c *upgrade.Mutex
	pending chan error // B's blocked UpgradeToUnique, in state B:U+P
}

// describe names the mutex's state from the handles' point of view, as
// the table writes it: "free", or holds such as "A:S B:U+W".
func (h *handles) describe(tb testing.TB) string {
	tb.Helper()
	st := status(tb, h.seg)
	who := func(tid uint64) string {
		switch tid {
		case h.a.HolderID():
			return "A"
		case h.b.HolderID():
			return "B"
		}
		return "?"
	}
	var parts []string
	for _, m := range []struct {
		name string
		m    *upgrade.Mutex
	}{{"A", h.a}, {"B", h.b}, {"C", h.c}} {
		if m.m.SharedHolds() > 0 {
			parts = append(parts, m.name+":S")
		}
	}
	switch {
	case st.UpgradeLocked:
		s := who(st.UpgraderTID) + ":U"
		if st.WriteLocked {
			s += "+W"
		}
		if st.UpgradePending {
			s += "+P"
		}
		parts = append(parts, s)
	case st.WriteLocked:
		parts = append(parts, who(st.WriterTID)+":W")
	}
	if len(parts) == 0 {
		return "free"
	}
	return strings.Join(parts, " ")
}

// states sets up each state of the table with handle B (and C).
var states = map[string]func(tb testing.TB, h *handles){
	"free": func(testing.TB, *handles) {},
	"A:S":  func(tb testing.TB, h *handles) { require.NoError(tb, h.a.LockShared()) },
	"B:S":  func(tb testing.TB, h *handles) { require.NoError(tb, h.b.LockShared()) },
	"A:U":  func(tb testing.TB, h *handles) { require.NoError(tb, h.a.LockUpgrade()) },
	"B:U":  func(tb testing.TB, h *handles) { require.NoError(tb, h.b.LockUpgrade()) },
	"A:W":  func(tb testing.TB, h *handles) { require.NoError(tb, h.a.Lock()) },
	"B:W":  func(tb testing.TB, h *handles) { require.NoError(tb, h.b.Lock()) },
	"A:U+W": func(tb testing.TB, h *handles) {
		require.NoError(tb, h.a.LockUpgrade())
		require.NoError(tb, h.a.UpgradeToUnique())
	},
	"B:U+W": func(tb testing.TB, h *handles) {
		require.NoError(tb, h.b.LockUpgrade())
		require.NoError(tb, h.b.UpgradeToUnique())
	},
	"C:S B:U+P": func(tb testing.TB, h *handles) {
		require.NoError(tb, h.c.LockShared())
		require.NoError(tb, h.b.LockUpgrade())
		h.pending = make(chan error, 1)
		go func() { h.pending <- h.b.UpgradeToUnique() }()
		// If the test fails before releaseAll, the upgrade must still end
		// before the segment is unmapped: a goroutine left waiting would
		// write into whatever is mapped there next.
		tb.Cleanup(func() {
			if h.pending != nil {
				_ = h.c.UnlockShared()
				<-h.pending
			}
		})
		waitStatus(tb, h.seg, func(st upgrade.Status) bool { return st.UpgradePending }, "the upgrade to be pending")
	},
}

// calls are the calls of the table, blocking ones in their Try form.
var calls = map[string]func(m *upgrade.Mutex) error{
	"TryLockShared":      (*upgrade.Mutex).TryLockShared,
	"UnlockShared":       (*upgrade.Mutex).UnlockShared,
	"TryLockUpgrade":     (*upgrade.Mutex).TryLockUpgrade,
	"UnlockUpgrade":      (*upgrade.Mutex).UnlockUpgrade,
	"TryLock":            (*upgrade.Mutex).TryLock,
	"Unlock":             (*upgrade.Mutex).Unlock,
	"TryUpgradeToUnique": (*upgrade.Mutex).TryUpgradeToUnique,
	"UniqueToUpgrade":    (*upgrade.Mutex).UniqueToUpgrade,
	"UniqueToShared":     (*upgrade.Mutex).UniqueToShared,
}

// outcome is a successful call's resulting state, or an error (the state
// then stays as it was).
type outcome struct {
	state string
	err   error
}

func ok(state string) outcome { return outcome{state: state} }
func fails(err error) outcome { return outcome{err: err} }

var (
	notHeld  = fails(upgrade.ErrNotHeld)
	notOwner = fails(upgrade.ErrNotOwner)
	blocks   = fails(upgrade.ErrWouldBlock)
	held     = fails(upgrade.ErrHeld)
)

// table is every state against every call.
var table = map[string]map[string]outcome{
	"free": {
		"TryLockShared": ok("A:S"), "UnlockShared": notHeld,
		"TryLockUpgrade": ok("A:U"), "UnlockUpgrade": notHeld,
		"TryLock": ok("A:W"), "Unlock": notHeld,
		"TryUpgradeToUnique": notHeld, "UniqueToUpgrade": notHeld, "UniqueToShared": notHeld,
	},
	"A:S": {
		"TryLockShared": ok("A:S"), "UnlockShared": ok("free"),
		"TryLockUpgrade": ok("A:S A:U"), "UnlockUpgrade": notHeld,
		"TryLock": held, "Unlock": notHeld,
		"TryUpgradeToUnique": notHeld, "UniqueToUpgrade": notHeld, "UniqueToShared": notHeld,
	},
	"B:S": {
		"TryLockShared": ok("A:S B:S"), "UnlockShared": notHeld,
		"TryLockUpgrade": ok("B:S A:U"), "UnlockUpgrade": notHeld,
		"TryLock": blocks, "Unlock": notHeld,
		"TryUpgradeToUnique": notHeld, "UniqueToUpgrade": notHeld, "UniqueToShared": notHeld,
	},
	"A:U": {
		"TryLockShared": ok("A:S A:U"), "UnlockShared": notHeld,
		"TryLockUpgrade": held, "UnlockUpgrade": ok("free"),
		"TryLock": held, "Unlock": notHeld,
		"TryUpgradeToUnique": ok("A:U+W"), "UniqueToUpgrade": notHeld, "UniqueToShared": notHeld,
	},
	"B:U": {
		"TryLockShared": ok("A:S B:U"), "UnlockShared": notHeld,
		"TryLockUpgrade": blocks, "UnlockUpgrade": notOwner,
		"TryLock": blocks, "Unlock": notHeld,
		"TryUpgradeToUnique": notOwner, "UniqueToUpgrade": notHeld, "UniqueToShared": notHeld,
	},
	"A:W": {
		"TryLockShared": held, "UnlockShared": notHeld,
		"TryLockUpgrade": held, "UnlockUpgrade": notHeld,
		"TryLock": held, "Unlock": ok("free"),
		"TryUpgradeToUnique": notHeld, "UniqueToUpgrade": ok("A:U"), "UniqueToShared": ok("A:S"),
	},
	"B:W": {
		"TryLockShared": blocks, "UnlockShared": notHeld,
		"TryLockUpgrade": blocks, "UnlockUpgrade": notHeld,
		"TryLock": blocks, "Unlock": notOwner,
		"TryUpgradeToUnique": notHeld, "UniqueToUpgrade": notOwner, "UniqueToShared": notOwner,
	},
	"A:U+W": {
		"TryLockShared": held, "UnlockShared": notHeld,
		"TryLockUpgrade": held, "UnlockUpgrade": notHeld,
		"TryLock": held, "Unlock": notHeld,
		"TryUpgradeToUnique": held, "UniqueToUpgrade": ok("A:U"), "UniqueToShared": ok("A:S"),
	},
	"B:U+W": {
		"TryLockShared": blocks, "UnlockShared": notHeld,
		"TryLockUpgrade": blocks, "UnlockUpgrade": notOwner,
		"TryLock": blocks, "Unlock": notHeld,
		"TryUpgradeToUnique": notOwner, "UniqueToUpgrade": notOwner, "UniqueToShared": notOwner,
	},
	"C:S B:U+P": {
		"TryLockShared": blocks, "UnlockShared": notHeld,
		"TryLockUpgrade": blocks, "UnlockUpgrade": notOwner,
		"TryLock": blocks, "Unlock": notHeld,
		"TryUpgradeToUnique": notOwner, "UniqueToUpgrade": notHeld, "UniqueToShared": notHeld,
	},
}

func TestEveryStateEveryCall(t *testing.T) {
	t.Parallel()
	require.Len(t, table, len(states))
	for state, row := range table {
		require.Len(t, row, len(calls), "row %s", state)
		for call, want := range row {
			t.Run(state+"/"+call, func(t *testing.T) {
				t.Parallel()
				seg, _ := newSegment(t)
				h := &handles{seg: seg, a: open(t, seg), b: open(t, seg), c: open(t, seg)}
				states[state](t, h)
				require.Equal(t, state, h.describe(t), "setting up")
				before := status(t, seg)

				err := calls[call](h.a)
				if want.err != nil {
					require.ErrorIs(t, err, want.err)
					after := status(t, seg)
					// The generation may move (a Try that got the writers'
					// mutex and gave it back); nothing else may.
					before.Generation, after.Generation = 0, 0
					before.Readers, after.Readers = nil, nil
					// B's pending upgrade wakes every liveness interval,
					// and is not counted while it is awake.
					before.SharedWaiters, after.SharedWaiters = 0, 0
					before.UniqueWaiters, after.UniqueWaiters = 0, 0
					require.Equal(t, before, after, "a failed call changed the state")
					require.Equal(t, state, h.describe(t))
				} else {
					require.NoError(t, err)
					require.Equal(t, want.state, h.describe(t))
				}
				releaseAll(t, h)
			})
		}
	}
}

// blockingCalls are the calls that wait, and the Locker's methods: in the
// states where they do not wait, each must end as the call of the table it
// is like (its Try form, or the same call) does. Their fast paths are not
// the Try forms' (and the Locker's are copies of the handle's: see
// guard.go), so the table alone would not check them. A Locker method's
// panic is its error.
var blockingCalls = map[string]struct {
	like string
	call func(m *upgrade.Mutex) error
}{
	"Lock":            {"TryLock", (*upgrade.Mutex).Lock},
	"LockShared":      {"TryLockShared", (*upgrade.Mutex).LockShared},
	"LockUpgrade":     {"TryLockUpgrade", (*upgrade.Mutex).LockUpgrade},
	"UpgradeToUnique": {"TryUpgradeToUnique", (*upgrade.Mutex).UpgradeToUnique},
	"Locker.Lock":     {"TryLock", lockerCall((*upgrade.Locker).Lock)},
	"Locker.Unlock":   {"Unlock", lockerCall((*upgrade.Locker).Unlock)},
	"Locker.RLock":    {"TryLockShared", lockerCall((*upgrade.Locker).RLock)},
	"Locker.RUnlock":  {"UnlockShared", lockerCall((*upgrade.Locker).RUnlock)},
}

func lockerCall(f func(*upgrade.Locker)) func(*upgrade.Mutex) error {
	return func(m *upgrade.Mutex) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = v.(*upgrade.LockerPanic)
			}
		}()
		f(m.Locker())
		return nil
	}
}

func TestBlockingCallsEveryState(t *testing.T) {
	t.Parallel()
	for state, row := range table {
		for name, bc := range blockingCalls {
			want := row[bc.like]
			if errors.Is(want.err, upgrade.ErrWouldBlock) {
				continue // it would wait
			}
			t.Run(state+"/"+name, func(t *testing.T) {
				t.Parallel()
				seg, _ := newSegment(t)
				h := &handles{seg: seg, a: open(t, seg), b: open(t, seg), c: open(t, seg)}
				states[state](t, h)
				before := status(t, seg)

				res := make(chan error, 1)
				go func() { res <- bc.call(h.a) }()
				var err error
				select {
				case err = <-res:
				case <-time.After(testproc.Timeout):
					t.Fatalf("waited %v, where %s returns at once", testproc.Timeout, bc.like)
				}
				if want.err == nil {
					require.NoError(t, err)
					require.Equal(t, want.state, h.describe(t))
				} else {
					require.ErrorIs(t, err, want.err)
					after := status(t, seg)
					before.Generation, after.Generation = 0, 0 // as in TestEveryStateEveryCall
					before.Readers, after.Readers = nil, nil
					before.SharedWaiters, after.SharedWaiters = 0, 0
					before.UniqueWaiters, after.UniqueWaiters = 0, 0
					require.Equal(t, before, after, "a failed call changed the state")
					require.Equal(t, state, h.describe(t))
				}
				releaseAll(t, h)
			})
		}
	}
}

// The Locker's Lock waits for readers to leave, and its RLock for the
// writer, as the handle's methods do.
func TestLockerWaits(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	a, b := open(t, seg), open(t, seg)
	require.NoError(t, b.LockShared())
	done := make(chan struct{})
	go func() {
		a.Locker().Lock()
		close(done)
	}()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.WriteLocked }, "the writer to set its bit")
	select {
	case <-done:
		t.Fatal("Lock returned while a reader held the lock")
	default:
	}
	require.NoError(t, b.UnlockShared())
	<-done
	g := a.Generation()
	read := make(chan struct{})
	go func() {
		b.Locker().RLock()
		close(read)
	}()
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.SharedWaiters == 1 }, "the reader to sleep")
	select {
	case <-read:
		t.Fatal("RLock returned while the writer held the lock")
	default:
	}
	a.Locker().Unlock()
	<-read
	require.Equal(t, g+1, a.Generation(), "the Locker's Unlock moves the fencing token")
	require.Equal(t, uint32(1), b.SharedHolds())
	b.Locker().RUnlock()
	require.Equal(t, "free", (&handles{seg: seg, a: a, b: b, c: b}).describe(t))
}

// releaseAll releases every hold of the handles and checks that the mutex
// is free and usable.
func releaseAll(tb testing.TB, h *handles) {
	tb.Helper()
	if h.pending != nil {
		require.NoError(tb, h.c.UnlockShared())
		require.NoError(tb, <-h.pending)
		h.pending = nil
	}
	for _, m := range []*upgrade.Mutex{h.a, h.b, h.c} {
		_ = m.UniqueToUpgrade()
		for m.UnlockShared() == nil {
		}
		_ = m.UnlockUpgrade()
		_ = m.Unlock()
	}
	require.Equal(tb, "free", h.describe(tb))
	require.NoError(tb, h.a.Lock())
	require.NoError(tb, h.a.Unlock())
	for _, m := range []*upgrade.Mutex{h.a, h.b, h.c} {
		require.NoError(tb, m.Close())
	}
}

func TestContextAlreadyDone(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	m := open(t, seg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, m.LockSharedContext(ctx), context.Canceled)
	// Again once the handle has its reader record, where the fast path
	// could take the hold.
	require.NoError(t, m.LockShared())
	require.NoError(t, m.UnlockShared())
	require.ErrorIs(t, m.LockSharedContext(ctx), context.Canceled)
	for _, r := range status(t, seg).Readers {
		require.Zero(t, r.Count, "a refused shared lock holds nothing")
	}
	require.ErrorIs(t, m.LockUpgradeContext(ctx), context.Canceled)
	require.ErrorIs(t, m.LockContext(ctx), context.Canceled)
	require.NoError(t, m.LockUpgrade())
	require.ErrorIs(t, m.UpgradeToUniqueContext(ctx), context.Canceled)
	st := status(t, seg)
	require.True(t, st.UpgradeLocked)
	require.False(t, st.UpgradePending || st.WriteLocked)
	require.NoError(t, m.UnlockUpgrade())
	require.NoError(t, m.Close())
	require.ErrorIs(t, m.Close(), upgrade.ErrClosed)
	require.ErrorIs(t, m.LockShared(), upgrade.ErrClosed)
	require.ErrorIs(t, m.Lock(), upgrade.ErrClosed)
}

func TestCloseWhileHeld(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	m := open(t, seg)
	require.NoError(t, m.LockShared())
	require.ErrorIs(t, m.Close(), upgrade.ErrHeld)
	require.NoError(t, m.UnlockShared())
	require.NoError(t, m.Close())
}

func TestOverflow(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	m := open(t, seg)
	require.NoError(t, m.SetSharedHolds(upgrade.MaxShared))
	require.ErrorIs(t, m.LockShared(), upgrade.ErrOverflow)
	require.ErrorIs(t, m.TryLockShared(), upgrade.ErrOverflow)
	require.Equal(t, uint32(upgrade.MaxShared), m.SharedHolds())
	require.NoError(t, m.SetSharedHolds(0))
}

func TestTooManyReaders(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	var ms []*upgrade.Mutex
	for range seg.ReadersPerUpgrade() {
		m := open(t, seg)
		require.NoError(t, m.LockShared())
		ms = append(ms, m)
	}
	extra := open(t, seg)
	require.ErrorIs(t, extra.LockShared(), upgrade.ErrTooManyReaders)
	// Writers and upgraders need no record.
	require.NoError(t, extra.LockUpgrade())
	require.NoError(t, extra.UnlockUpgrade())
	// A handle that closes gives its record back.
	require.NoError(t, ms[0].UnlockShared())
	require.NoError(t, ms[0].Close())
	require.NoError(t, extra.LockShared())
	require.NoError(t, extra.UnlockShared())
	for _, m := range ms[1:] {
		require.NoError(t, m.UnlockShared())
	}
}

func TestErrorsAreDistinct(t *testing.T) {
	t.Parallel()
	errs := []error{upgrade.ErrNotHeld, upgrade.ErrNotOwner, upgrade.ErrWouldBlock, upgrade.ErrHeld,
		upgrade.ErrOverflow, upgrade.ErrTooManyReaders, upgrade.ErrClosed, upgrade.ErrNoFunc}
	for i, a := range errs {
		for j, b := range errs {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v is %v", a, b)
			}
		}
	}
}

// Bad input gets a typed error and changes nothing: an index out of
// range, a bad name, a nil function for WithUnique, a segment without
// upgrade mutexes, a closed or read-only segment, and every call on a
// closed handle.
func TestBadInput(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t)
	for _, i := range []int{-1, testOptions.Upgrades, 1 << 40} {
		_, err := upgrade.Open(seg, i)
		require.ErrorIs(t, err, shm.ErrIndex, "Open(%d)", i)
		_, err = upgrade.Inspect(seg, i)
		require.ErrorIs(t, err, shm.ErrIndex, "Inspect(%d)", i)
		_, err = upgrade.Reclaim(seg, i, false)
		require.ErrorIs(t, err, shm.ErrIndex, "Reclaim(%d)", i)
	}
	for _, name := range []string{"nul\x00name", strings.Repeat("n", layout.MaxNameLen+1)} {
		_, err := upgrade.Named(seg, name)
		require.ErrorIs(t, err, layout.ErrBadName, "Named(%q)", name)
	}

	u := open(t, seg)
	require.NoError(t, u.LockUpgrade())
	require.ErrorIs(t, u.WithUnique(context.Background(), nil), upgrade.ErrNoFunc)
	st := status(t, seg)
	require.True(t, st.UpgradeLocked && !st.WriteLocked && !st.UpgradePending, "WithUnique(nil) leaves the upgrade lock as it was")
	require.NoError(t, u.UnlockUpgrade())

	opts := testOptions
	opts.Upgrades = -1
	none, err := shm.Create(testproc.SegmentPath(t), opts)
	require.NoError(t, err)
	_, err = upgrade.Open(none, 0)
	require.ErrorIs(t, err, shm.ErrIndex, "a segment without upgrade mutexes")
	require.NoError(t, none.Close())
	_, err = upgrade.Open(none, 0)
	require.ErrorIs(t, err, shm.ErrClosed)
	_, err = upgrade.Inspect(none, 0)
	require.ErrorIs(t, err, shm.ErrClosed)

	// A read-only segment can be inspected, and reclaimed in a dry run
	// only: a handle's first store would fault.
	ro, err := shm.Open(seg.Path(), shm.Options{ReadOnly: true})
	require.NoError(t, err)
	_, err = upgrade.Open(ro, 0)
	require.ErrorIs(t, err, shm.ErrReadOnly)
	_, err = upgrade.Named(ro, "table")
	require.ErrorIs(t, err, shm.ErrReadOnly)
	_, err = upgrade.Reclaim(ro, 0, false)
	require.ErrorIs(t, err, shm.ErrReadOnly)
	rep, err := upgrade.Reclaim(ro, 0, true)
	require.NoError(t, err)
	require.True(t, rep.Empty())
	_ = status(t, ro)
	require.NoError(t, ro.Close())

	m := open(t, seg)
	require.NoError(t, m.Close())
	ctx := context.Background()
	for name, call := range map[string]struct {
		f    func() error
		want error
	}{
		"Lock":                   {m.Lock, upgrade.ErrClosed},
		"TryLock":                {m.TryLock, upgrade.ErrClosed},
		"LockContext":            {func() error { return m.LockContext(ctx) }, upgrade.ErrClosed},
		"LockShared":             {m.LockShared, upgrade.ErrClosed},
		"TryLockShared":          {m.TryLockShared, upgrade.ErrClosed},
		"LockSharedContext":      {func() error { return m.LockSharedContext(ctx) }, upgrade.ErrClosed},
		"LockUpgrade":            {m.LockUpgrade, upgrade.ErrClosed},
		"TryLockUpgrade":         {m.TryLockUpgrade, upgrade.ErrClosed},
		"LockUpgradeContext":     {func() error { return m.LockUpgradeContext(ctx) }, upgrade.ErrClosed},
		"Unlock":                 {m.Unlock, upgrade.ErrNotHeld},
		"UnlockShared":           {m.UnlockShared, upgrade.ErrNotHeld},
		"UnlockUpgrade":          {m.UnlockUpgrade, upgrade.ErrNotHeld},
		"UpgradeToUnique":        {m.UpgradeToUnique, upgrade.ErrNotHeld},
		"TryUpgradeToUnique":     {m.TryUpgradeToUnique, upgrade.ErrNotHeld},
		"UpgradeToUniqueContext": {func() error { return m.UpgradeToUniqueContext(ctx) }, upgrade.ErrNotHeld},
		"UniqueToUpgrade":        {m.UniqueToUpgrade, upgrade.ErrNotHeld},
		"UniqueToShared":         {m.UniqueToShared, upgrade.ErrNotHeld},
		"Upgrade":                {func() error { _, err := m.Upgrade(ctx); return err }, upgrade.ErrNotHeld},
		"WithUnique":             {func() error { return m.WithUnique(ctx, func() error { return nil }) }, upgrade.ErrNotHeld},
		"Close":                  {m.Close, upgrade.ErrClosed},
		"Reclaim":                {func() error { _, err := m.Reclaim(); return err }, upgrade.ErrClosed},
		"MarkConsistent":         {m.MarkConsistent, upgrade.ErrNotHeld},
	} {
		require.ErrorIs(t, call.f(), call.want, name)
	}
	st = status(t, seg)
	checkFree(t, st)
	require.Empty(t, st.Readers, "a closed handle claims no record")
}
