package lockmgr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// The recovery protocol, across processes: a holder is killed; the next
// acquirer (another process) reclaims and is told; it releases without
// marking the resource consistent, so the next one (a third process) is
// told too; that one marks it, and from then on nobody is told.
func TestInconsistentUntilMarked(t *testing.T) {
	t.Parallel()
	_, _, path := newManagerAt(t, 4, lockmgr.Options{})
	holder := testproc.Start(t, "hold", path, "r", "dies", "exclusive")
	holder.WaitLine(t, "held")
	holder.Kill(t)

	tell := func(owner, mark string) string { return testproc.RunLine(t, "told ", "tell", path, "r", owner, mark) }
	require.Equal(t, "reclaimed=true inconsistent=true", tell("a", "no"), "the holder that reclaimed")
	require.Equal(t, "reclaimed=false inconsistent=true", tell("b", "mark"), "the next: nobody repaired")
	require.Equal(t, "reclaimed=false inconsistent=false", tell("c", "no"), "marked consistent")
}

// An expired hold marks the resource too: its owner may have stopped
// half-way through an update when its lease lapsed. MarkConsistent needs
// a live hold of the owner that calls it.
func TestExpiryMarksInconsistent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	m, _ := newManager(t, 4, lockmgr.Options{Clock: clk})
	ctx := context.Background()
	_, err := m.Acquire(ctx, "r", "slow", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: testTimeout})
	require.NoError(t, err)
	clk.Advance(testTimeout)
	info, err := m.Acquire(ctx, "r", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.True(t, info.Inconsistent)
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.True(t, ri.Inconsistent)
	require.ErrorIs(t, m.MarkConsistent("r", "slow"), lockmgr.ErrLockNotHeld, "the expired owner holds nothing")
	require.ErrorIs(t, m.MarkConsistent("other", "next"), lockmgr.ErrLockNotHeld)
	require.NoError(t, m.MarkConsistent("r", "next"))
	require.NoError(t, m.Release("r", "next"))
	info, err = m.Acquire(ctx, "r", "later", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.False(t, info.Inconsistent)
}

// A holder told of damage that repairs the data as it unwinds, after its
// segment's Close, says so and releases: the mark goes with it, as in
// packages spinlock and upgrade, and the next holder (another mapping of
// the same file) is not told. Only the holder may, closed or not; a
// read-only Manager may not.
func TestMarkConsistentAfterClose(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	observer, _, path := newManagerAt(t, 4, lockmgr.Options{Clock: clk})
	ctx := context.Background()
	_, err := observer.Acquire(ctx, "r", "slow", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Second})
	require.NoError(t, err)
	clk.Advance(time.Second) // its expiry marks r

	m, seg := openAgain(t, path, lockmgr.Options{Clock: clk})
	info, err := m.Acquire(ctx, "r", "repairer", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.True(t, info.Inconsistent)
	require.NoError(t, seg.Close())
	require.ErrorIs(t, m.MarkConsistent("r", "stranger"), lockmgr.ErrLockNotHeld)
	ri, err := observer.Inspect("r")
	require.NoError(t, err)
	require.True(t, ri.Inconsistent, "a stranger's MarkConsistent changed the mark")
	require.NoError(t, m.MarkConsistent("r", "repairer"), "the holder's, after Close")
	require.NoError(t, m.Release("r", "repairer"))

	info, err = observer.Acquire(ctx, "r", "next", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.False(t, info.Inconsistent, "the repair said after Close is lost")

	ro, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	view, err := lockmgr.Open(ro, lockmgr.Options{})
	require.NoError(t, err)
	require.NoError(t, ro.Close())
	require.ErrorIs(t, view.MarkConsistent("r", "next"), lockmgr.ErrReadOnly)
}

// tellHelper acquires RESOURCE as OWNER (waiting), prints what it was
// told, marks the resource consistent if MARK is "mark", and releases:
// PATH RESOURCE OWNER MARK.
func tellHelper(args []string) int {
	seg, m, _, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	res, owner := args[1], args[2]
	info, err := m.Acquire(context.Background(), res, owner, lockmgr.Exclusive,
		lockmgr.AcquireOptions{Retries: lockmgr.RetryForever, Wait: testTimeout})
	if err != nil {
		return fail("acquire: %v", err)
	}
	fmt.Printf("told reclaimed=%t inconsistent=%t\n", info.Reclaimed, info.Inconsistent)
	if args[3] == "mark" {
		if err := m.MarkConsistent(res, owner); err != nil {
			return fail("mark: %v", err)
		}
	}
	if err := m.Release(res, owner); err != nil {
		return fail("release: %v", err)
	}
	return 0
}

// Every expired owner's late release gets LOCK_TIMEOUT, not only the last
// one's: two collaborative holders whose leases lapse, noticed by a third
// grant, are both told, once each.
func TestEveryExpiredOwnerIsTold(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	m, _ := newManager(t, 4, lockmgr.Options{Clock: clk})
	ctx := context.Background()
	for _, o := range []string{"a", "b"} {
		_, err := m.Acquire(ctx, "r", o, lockmgr.Collaborative, lockmgr.AcquireOptions{TTL: testTimeout})
		require.NoError(t, err)
	}
	clk.Advance(testTimeout)
	_, err := m.Acquire(ctx, "r", "c", lockmgr.Exclusive, lockmgr.AcquireOptions{}) // ends both
	require.NoError(t, err)
	for _, o := range []string{"a", "b"} {
		err := m.Release("r", o)
		require.ErrorIs(t, err, lockmgr.ErrLockTimeout, "owner %s", o)
		require.Equal(t, "LOCK_TIMEOUT", lockmgr.Code(err))
		require.ErrorIs(t, m.Release("r", o), lockmgr.ErrLockNotHeld, "owner %s is told once", o)
	}
	require.NoError(t, m.Release("r", "c"))
}

// An expired owner is told even after another hold's end has taken
// LastExpired: a grant that finds no free record, only the one of a hold
// it has just ended for its TTL, grows the chain while it can, and leaves
// that record the owner's tombstone. Here "c" ends "a"'s hold with "b"
// still in the other record, and "d" then ends "b"'s.
func TestExpiredOwnerToldWhileTheChainGrows(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	m, _ := newManager(t, 8, lockmgr.Options{Clock: clk, Logger: discard()})
	ctx, C := context.Background(), lockmgr.Collaborative
	_, err := m.Acquire(ctx, "r", "a", C, lockmgr.AcquireOptions{TTL: time.Second})
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "r", "b", C, lockmgr.AcquireOptions{TTL: time.Minute})
	require.NoError(t, err)
	clk.Advance(time.Second)
	_, err = m.Acquire(ctx, "r", "c", C, lockmgr.AcquireOptions{}) // ends a's hold
	require.NoError(t, err)
	clk.Advance(time.Minute)
	_, err = m.Acquire(ctx, "r", "d", C, lockmgr.AcquireOptions{}) // ends b's hold
	require.NoError(t, err)
	for _, o := range []string{"a", "b"} {
		require.ErrorIs(t, m.Release("r", o), lockmgr.ErrLockTimeout, "owner %s", o)
	}
	for _, o := range []string{"c", "d"} {
		require.NoError(t, m.Release("r", o))
	}
	found, err := m.Check()
	require.NoError(t, err)
	require.Empty(t, found)
}

// Short-lived processes each acquire and release a resource of their own
// in a table with room for three, and exit (one in five killed with
// SIGKILL after its release): resources nobody holds are recycled, so none
// finds the table full. (A process killed while it holds its resource
// leaves it held, and marked inconsistent once reclaimed: such a resource
// is never recycled, since its next holder must be told.)
func TestDeadProcessesNamesComeBack(t *testing.T) {
	t.Parallel()
	_, _, path := newManagerAt(t, 4, lockmgr.Options{})
	procs := 1000
	if testproc.Race {
		procs = 200
	}
	testproc.Churn(t, procs, 3, "claim-exit", path, "job")
}

// claimExitHelper acquires and releases resource NAME, then exits or
// waits to be killed: PATH NAME exit|wait.
func claimExitHelper(args []string) int {
	seg, m, _, err := openHelper(args[0])
	if err != nil {
		return fail("%v", err)
	}
	defer seg.Close()
	if _, err := m.Acquire(context.Background(), args[1], "me", lockmgr.Exclusive, lockmgr.AcquireOptions{}); err != nil {
		return fail("acquire: %v", err)
	}
	if err := m.Release(args[1], "me"); err != nil {
		return fail("release: %v", err)
	}
	if args[2] == "exit" {
		fmt.Println("ready exiting")
		return 0
	}
	fmt.Println("ready")
	time.Sleep(2 * testTimeout)
	return fail("not killed")
}

// A waiter asleep behind a holder that dies (kill -9) takes the resource
// over at its next sleep slice, not at the end of its backoff: here an
// hour, far past the wait's deadline.
func TestSleeperNoticesDeadHolder(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 4, lockmgr.Options{})
	holder := testproc.Start(t, "hold", path, "r", "dies", "exclusive")
	holder.WaitLine(t, "held")

	// Cancelled, not timed out: a deadline would wake the sleeper itself.
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(testTimeout, cancel).Stop()
	defer cancel()
	got := make(chan error, 1)
	var info lockmgr.LockInfo
	go func() {
		var err error
		info, err = m.Acquire(ctx, "r", "waiter", lockmgr.Exclusive, lockmgr.AcquireOptions{
			Retries: lockmgr.RetryForever, Backoff: lockmgr.Backoff{Initial: time.Hour, Max: time.Hour}})
		got <- err
	}()
	waitFor(t, func() bool { return m.Stats().ConflictsDetected == 1 }, "the waiter to meet the holder")
	holder.Kill(t)
	require.NoError(t, testproc.Receive(t, got, "the waiter's grant"))
	require.True(t, info.Reclaimed)
	require.Equal(t, 2, info.Attempts)
}
