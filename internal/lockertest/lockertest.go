// Package lockertest is the conformance suite of lockmgr.Locker: every
// behaviour that callers rely on, run against any backend. A backend's
// tests call Run with a constructor of fresh, empty lock tables.
package lockertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/lockmgr"
)

// Backend makes lock tables for the suite.
type Backend struct {
	// New returns two handles on one new, empty lock table of its own
	// (as two processes would have), each cleaned up when tb ends.
	New func(tb testing.TB) (lockmgr.Locker, lockmgr.Locker)
	// MinTTL is the shortest TTL the backend accepts; the expiry tests
	// use it, and last about as long.
	MinTTL time.Duration
}

// Bounds that only turn a hang into a failure.
const (
	patience  = 30 * time.Second
	pollEvery = 5 * time.Millisecond
)

const (
	X = lockmgr.Exclusive
	C = lockmgr.Collaborative
)

var none = lockmgr.AcquireOptions{}

// waitLong waits for the lock as long as the test may last.
var waitLong = lockmgr.AcquireOptions{Wait: patience}

// Run runs every behaviour as a parallel subtest of t.
func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		f    func(t *testing.T, b Backend)
	}{
		{"ExclusiveConflict", exclusiveConflict},
		{"AlreadyHeld", alreadyHeld},
		{"CollaborativeCoexist", collaborativeCoexist},
		{"CollaborativeWaitersJoinTogether", collaborativeWaiters},
		{"ReleaseErrors", releaseErrors},
		{"VersionFencing", versionFencing},
		{"WaiterWokenByRelease", waiterWoken},
		{"WaitTimeoutLeavesNothing", waitTimeout},
		{"CancelLeavesNothing", cancelWait},
		{"RetriesExhausted", retriesExhausted},
		{"TTLExpiry", ttlExpiry},
		{"ExpiredOwnerAcquiresAgain", expiredOwnerAgain},
		{"Refresh", refresh},
		{"DeclaredOnly", declaredOnly},
		{"DeclaredOnlyEndsWait", declaredOnlyEndsWait},
		{"InspectAndOverview", inspectAndOverview},
		{"BadInput", badInput},
		{"ExclusiveCounter", exclusiveCounter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.f(t, b)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return c
}

func acquire(t *testing.T, l lockmgr.Locker, res, owner string, mode lockmgr.Mode, opts lockmgr.AcquireOptions) lockmgr.LockInfo {
	t.Helper()
	info, err := l.Acquire(ctx(t), res, owner, mode, opts)
	require.NoError(t, err, "acquire %s by %s", res, owner)
	require.Equal(t, lockmgr.Acquired, info.State)
	return info
}

func release(t *testing.T, l lockmgr.Locker, res, owner string) {
	t.Helper()
	require.NoError(t, l.Release(res, owner), "release %s by %s", res, owner)
}

func holders(t *testing.T, l lockmgr.Locker, res string) []string {
	t.Helper()
	ri, err := l.Inspect(res)
	require.NoError(t, err)
	var out []string
	for _, h := range ri.Holders {
		if h.State == lockmgr.Acquired {
			out = append(out, h.Owner)
		}
	}
	return out
}

// eventually polls cond until it holds, failing after patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(patience); !cond(); time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after %v", what, patience)
		}
	}
}

type result struct {
	info lockmgr.LockInfo
	err  error
}

// background runs an acquisition in a goroutine; its result arrives on the
// channel.
func background(t *testing.T, l lockmgr.Locker, c context.Context, res, owner string, mode lockmgr.Mode, opts lockmgr.AcquireOptions) <-chan result {
	ch := make(chan result, 1)
	go func() {
		info, err := l.Acquire(c, res, owner, mode, opts)
		ch <- result{info, err}
	}()
	return ch
}

// waiting returns options that wait as long as the test may last and
// signal (once) when the acquisition first waits.
func waiting() (lockmgr.AcquireOptions, <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	o := waitLong
	o.OnWait = func(info lockmgr.LockInfo, _ time.Duration) {
		if info.State == lockmgr.Waiting {
			once.Do(func() { close(ch) })
		}
	}
	return o, ch
}

func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(patience):
		t.Fatalf("acquisition still running after %v", patience)
		return result{}
	}
}

func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(patience):
		t.Fatalf("no %s after %v", what, patience)
	}
}

func exclusiveConflict(t *testing.T, b Backend) {
	l, other := b.New(t)
	a := acquire(t, l, "r", "a", X, none)
	require.Equal(t, 1, a.Attempts)
	require.NotZero(t, a.Version)
	require.False(t, a.Inconsistent)
	for _, h := range []lockmgr.Locker{l, other} {
		info, err := h.Acquire(ctx(t), "r", "b", X, none)
		require.ErrorIs(t, err, lockmgr.ErrResourceLocked)
		require.Equal(t, "RESOURCE_LOCKED", lockmgr.Code(err))
		require.Equal(t, lockmgr.Failed, info.State)
		_, err = h.Acquire(ctx(t), "r", "b", C, none)
		require.ErrorIs(t, err, lockmgr.ErrResourceLocked, "collaborative beside exclusive")
	}
	release(t, l, "r", "a")
	got := acquire(t, other, "r", "b", X, none)
	require.Greater(t, got.Version, a.Version)
	release(t, other, "r", "b")
}

func alreadyHeld(t *testing.T, b Backend) {
	l, other := b.New(t)
	acquire(t, l, "r", "a", C, none)
	for _, mode := range []lockmgr.Mode{X, C} {
		_, err := other.Acquire(ctx(t), "r", "a", mode, none)
		require.ErrorIs(t, err, lockmgr.ErrAlreadyHeld)
	}
	release(t, l, "r", "a")
}

func collaborativeCoexist(t *testing.T, b Backend) {
	l, other := b.New(t)
	a := acquire(t, l, "r", "a", C, none)
	bb := acquire(t, other, "r", "b", C, none)
	require.Greater(t, bb.Version, a.Version, "a collaborative arrival moves the version")
	require.ElementsMatch(t, []string{"a", "b"}, holders(t, l, "r"))
	_, err := l.Acquire(ctx(t), "r", "x", X, none)
	require.ErrorIs(t, err, lockmgr.ErrResourceLocked)

	opts, waits := waiting()
	ch := background(t, other, ctx(t), "r", "x", X, opts)
	awaitSignal(t, waits, "wait of the exclusive acquisition")
	release(t, l, "r", "a")
	require.Equal(t, []string{"b"}, holders(t, l, "r"))
	select {
	case r := <-ch:
		t.Fatalf("exclusive granted beside collaborative holder b: %+v, %v", r.info, r.err)
	default:
	}
	release(t, other, "r", "b")
	r := await(t, ch)
	require.NoError(t, r.err)
	require.Greater(t, r.info.Version, bb.Version)
	require.Equal(t, []string{"x"}, holders(t, l, "r"))
	release(t, other, "r", "x")
}

// collaborativeWaiters: collaborative waiters behind an exclusive holder
// are all let in by its release, and hold together.
func collaborativeWaiters(t *testing.T, b Backend) {
	l, other := b.New(t)
	x := acquire(t, l, "r", "x", X, none)
	var chs []<-chan result
	for i, h := range []lockmgr.Locker{l, other, other} {
		opts, waits := waiting()
		chs = append(chs, background(t, h, ctx(t), "r", string(rune('a'+i)), C, opts))
		awaitSignal(t, waits, "wait")
	}
	release(t, l, "r", "x")
	for _, ch := range chs {
		r := await(t, ch)
		require.NoError(t, r.err)
		require.Greater(t, r.info.Version, x.Version)
	}
	require.ElementsMatch(t, []string{"a", "b", "c"}, holders(t, l, "r"))
	release(t, l, "r", "a")
	release(t, other, "r", "b")
	release(t, other, "r", "c")
}

func releaseErrors(t *testing.T, b Backend) {
	l, other := b.New(t)
	require.NoError(t, l.Release("nothing-here", "a"), "releasing a lock nobody holds warns only")
	acquire(t, l, "r", "a", X, none)
	require.ErrorIs(t, other.Release("r", "b"), lockmgr.ErrLockNotHeld)
	require.ErrorIs(t, l.Release("r", "b"), lockmgr.ErrLockNotHeld)
	release(t, other, "r", "a") // any handle may release an owner's hold
	require.Empty(t, holders(t, l, "r"))
	require.NoError(t, l.Release("r", "a"), "a second release finds nobody")
}

func versionFencing(t *testing.T, b Backend) {
	l, other := b.New(t)
	var last uint64
	for i := range 6 {
		h := []lockmgr.Locker{l, other}[i%2]
		info := acquire(t, h, "r", "a", X, none)
		require.Greater(t, info.Version, last, "grant %d", i)
		last = info.Version
		require.NoError(t, l.CheckVersion("r", info.Version))
		require.NoError(t, other.CheckVersion("r", info.Version))
		release(t, h, "r", "a")
		require.ErrorIs(t, l.CheckVersion("r", info.Version), lockmgr.ErrVersionConflict, "a release moves the version")
	}
	a := acquire(t, l, "r", "a", C, none)
	require.NoError(t, l.CheckVersion("r", a.Version))
	acquire(t, other, "r", "b", C, none)
	require.ErrorIs(t, l.CheckVersion("r", a.Version), lockmgr.ErrVersionConflict, "a join moves the version")
	release(t, l, "r", "a")
	release(t, other, "r", "b")
	require.ErrorIs(t, l.CheckVersion("never-used", 1), lockmgr.ErrVersionConflict)
}

func waiterWoken(t *testing.T, b Backend) {
	l, other := b.New(t)
	a := acquire(t, l, "r", "a", X, none)
	opts, waits := waiting()
	ch := background(t, other, ctx(t), "r", "b", X, opts)
	awaitSignal(t, waits, "wait")
	release(t, l, "r", "a")
	r := await(t, ch)
	require.NoError(t, r.err)
	require.Greater(t, r.info.Version, a.Version)
	require.GreaterOrEqual(t, r.info.Attempts, 1)
	require.Equal(t, []string{"b"}, holders(t, l, "r"))
	release(t, other, "r", "b")
}

func waitTimeout(t *testing.T, b Backend) {
	l, other := b.New(t)
	acquire(t, l, "r", "a", X, none)
	info, err := other.Acquire(ctx(t), "r", "b", X, lockmgr.AcquireOptions{Wait: 50 * time.Millisecond})
	require.ErrorIs(t, err, lockmgr.ErrTimeout)
	require.Equal(t, "WAIT_TIMEOUT", lockmgr.Code(err))
	require.Equal(t, lockmgr.Failed, info.State)
	// A context deadline is a timeout too.
	c, cancel := context.WithTimeout(ctx(t), 50*time.Millisecond)
	defer cancel()
	_, err = other.Acquire(c, "r", "b", X, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
	require.ErrorIs(t, err, lockmgr.ErrTimeout)
	release(t, l, "r", "a")
	// Nothing of the waits is left: a newcomer that does not wait gets
	// the resource.
	acquire(t, other, "r", "c", X, none)
	release(t, other, "r", "c")
}

func cancelWait(t *testing.T, b Backend) {
	l, other := b.New(t)
	acquire(t, l, "r", "a", X, none)
	c, cancel := context.WithCancel(ctx(t))
	opts, waits := waiting()
	ch := background(t, other, c, "r", "b", X, opts)
	awaitSignal(t, waits, "wait")
	cancel()
	r := await(t, ch)
	require.ErrorIs(t, r.err, context.Canceled)
	require.Equal(t, lockmgr.Failed, r.info.State)
	require.Equal(t, []string{"a"}, holders(t, l, "r"))
	release(t, l, "r", "a")
	acquire(t, other, "r", "c", X, none)
	release(t, other, "r", "c")

	done, cancelDone := context.WithCancel(ctx(t))
	cancelDone()
	_, err := l.Acquire(done, "r", "a", X, none)
	require.ErrorIs(t, err, context.Canceled, "a context done already fails at once")
	require.Empty(t, holders(t, l, "r"))
}

func retriesExhausted(t *testing.T, b Backend) {
	l, other := b.New(t)
	acquire(t, l, "r", "a", X, none)
	var waits []time.Duration
	opts := lockmgr.AcquireOptions{Retries: 2, Backoff: lockmgr.Backoff{Initial: 5 * time.Millisecond, Max: 5 * time.Millisecond, Jitter: -1},
		OnWait: func(info lockmgr.LockInfo, d time.Duration) {
			if info.State == lockmgr.Waiting {
				waits = append(waits, d)
			}
		}}
	info, err := other.Acquire(ctx(t), "r", "b", X, opts)
	require.ErrorIs(t, err, lockmgr.ErrAcquisitionFailed)
	require.Equal(t, 3, info.Attempts)
	require.Len(t, waits, 2)
	release(t, l, "r", "a")
	acquire(t, other, "r", "c", X, none)
	release(t, other, "r", "c")
}

func ttlExpiry(t *testing.T, b Backend) {
	l, other := b.New(t)
	a := acquire(t, l, "r", "a", X, lockmgr.AcquireOptions{TTL: b.MinTTL})
	require.Equal(t, b.MinTTL, a.Timeout)
	require.False(t, a.ExpiresAt.IsZero())
	got := acquire(t, other, "r", "b", X, waitLong)
	require.Greater(t, got.Version, a.Version)
	require.True(t, got.Inconsistent, "a hold that expired marks the resource inconsistent")
	require.ErrorIs(t, l.Release("r", "a"), lockmgr.ErrLockTimeout, "the late release is told")
	require.ErrorIs(t, l.Release("r", "a"), lockmgr.ErrLockNotHeld, "told once; b holds it now")
	require.ErrorIs(t, other.MarkConsistent("r", "a"), lockmgr.ErrLockNotHeld)
	require.NoError(t, other.MarkConsistent("r", "b"))
	release(t, other, "r", "b")
	c := acquire(t, l, "r", "c", X, none)
	require.False(t, c.Inconsistent)
	release(t, l, "r", "c")
}

// expiredOwnerAgain: an owner whose hold expired unreleased, and who
// then acquires the resource again, is not told of the old hold at the
// new hold's releases: its release is a release, and a second one finds
// nobody holding (a warning, no error), as for any owner.
func expiredOwnerAgain(t *testing.T, b Backend) {
	l, other := b.New(t)
	acquire(t, l, "r", "a", X, lockmgr.AcquireOptions{TTL: b.MinTTL})
	eventually(t, "the hold to expire", func() bool {
		ri, err := other.Inspect("r")
		require.NoError(t, err)
		return ri.State == lockmgr.Expired
	})
	again := acquire(t, l, "r", "a", X, waitLong)
	require.True(t, again.Inconsistent, "the expiry marked the resource inconsistent")
	require.NoError(t, l.Release("r", "a"), "the new hold's release")
	require.NoError(t, l.Release("r", "a"), "a second release finds nobody holding")

	// The same when another owner's acquisition ended the hold first.
	acquire(t, l, "r", "a", X, lockmgr.AcquireOptions{TTL: b.MinTTL})
	acquire(t, other, "r", "b", X, waitLong)
	release(t, other, "r", "b")
	acquire(t, l, "r", "a", X, none)
	require.NoError(t, l.Release("r", "a"), "the new hold's release, after another's")
	require.NoError(t, l.Release("r", "a"), "a second release finds nobody holding, after another's")
}

func refresh(t *testing.T, b Backend) {
	l, other := b.New(t)
	acquire(t, l, "r", "a", X, lockmgr.AcquireOptions{TTL: b.MinTTL})
	info, err := l.Refresh("r", "a", 100*b.MinTTL)
	require.NoError(t, err)
	require.Equal(t, lockmgr.Acquired, info.State)
	require.Equal(t, 100*b.MinTTL, info.Timeout)
	require.Equal(t, X, info.Mode)
	require.NotZero(t, info.Version)
	_, err = other.Refresh("r", "b", b.MinTTL)
	require.ErrorIs(t, err, lockmgr.ErrLockNotHeld)
	// Past the first TTL, the hold lives on.
	time.Sleep(b.MinTTL + b.MinTTL/2)
	require.Equal(t, []string{"a"}, holders(t, other, "r"))
	info, err = l.Refresh("r", "a", 0)
	require.NoError(t, err)
	require.Zero(t, info.Timeout)
	require.True(t, info.ExpiresAt.IsZero())
	release(t, l, "r", "a")
	_, err = l.Refresh("r", "a", b.MinTTL)
	require.ErrorIs(t, err, lockmgr.ErrLockNotHeld)

	acquire(t, l, "r", "a", X, lockmgr.AcquireOptions{TTL: b.MinTTL})
	eventually(t, "expired", func() bool {
		ri, err := other.Inspect("r")
		require.NoError(t, err)
		return ri.State == lockmgr.Expired
	})
	_, err = l.Refresh("r", "a", b.MinTTL)
	require.ErrorIs(t, err, lockmgr.ErrLockTimeout)
}

func declaredOnly(t *testing.T, b Backend) {
	l, other := b.New(t)
	require.NoError(t, l.Declare("known", "also-known"))
	require.NoError(t, l.SetDeclaredOnly(true))
	o, err := other.Overview()
	require.NoError(t, err)
	require.True(t, o.DeclaredOnly)
	_, err = other.Acquire(ctx(t), "unknown", "a", X, none)
	require.ErrorIs(t, err, lockmgr.ErrResourceNotFound)
	require.Equal(t, "RESOURCE_NOT_FOUND", lockmgr.Code(err))
	acquire(t, other, "known", "a", X, none)
	ri, err := l.Inspect("known")
	require.NoError(t, err)
	require.True(t, ri.Declared)
	release(t, other, "known", "a")
	require.NoError(t, l.Undeclare("also-known"))
	_, err = other.Acquire(ctx(t), "also-known", "a", X, none)
	require.ErrorIs(t, err, lockmgr.ErrResourceNotFound)
	require.NoError(t, l.SetDeclaredOnly(false))
	o, err = other.Overview()
	require.NoError(t, err)
	require.False(t, o.DeclaredOnly)
	acquire(t, other, "also-known", "a", X, none)
	release(t, other, "also-known", "a")
	ri, err = l.Inspect("known")
	require.NoError(t, err)
	require.True(t, ri.Declared, "a declared resource stays after its last release")
	require.Equal(t, lockmgr.Unlocked, ri.State)
}

// declaredOnlyEndsWait: a waiter for a resource that was not declared,
// queued before the table turned to declared resources only, is refused
// (ErrResourceNotFound) when the resource comes free, not granted it:
// while the mode is on, declared resources are the only ones that can be
// acquired.
func declaredOnlyEndsWait(t *testing.T, b Backend) {
	l, other := b.New(t)
	acquire(t, l, "r", "a", X, none)
	opts, waits := waiting()
	ch := background(t, other, ctx(t), "r", "b", X, opts)
	awaitSignal(t, waits, "wait")
	require.NoError(t, l.SetDeclaredOnly(true))
	release(t, l, "r", "a")
	r := await(t, ch)
	require.ErrorIs(t, r.err, lockmgr.ErrResourceNotFound, "a waiter for an undeclared resource in declared-only mode")
	require.Equal(t, lockmgr.Failed, r.info.State)
	require.Empty(t, holders(t, l, "r"))
	require.NoError(t, l.SetDeclaredOnly(false))
	acquire(t, other, "r", "b", X, none)
	release(t, other, "r", "b")
}

func inspectAndOverview(t *testing.T, b Backend) {
	l, other := b.New(t)
	ri, err := l.Inspect("r1")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Unlocked, ri.State)
	require.Empty(t, ri.Holders)

	x := acquire(t, l, "r1", "a", X, lockmgr.AcquireOptions{TTL: 100 * b.MinTTL})
	acquire(t, other, "r2", "b", C, none)
	acquire(t, l, "r2", "c", C, none)
	_, err = other.Acquire(ctx(t), "r1", "d", X, none)
	require.ErrorIs(t, err, lockmgr.ErrResourceLocked)

	ri, err = other.Inspect("r1")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Acquired, ri.State)
	require.Equal(t, X, ri.Mode)
	require.Equal(t, x.Version, ri.Version)
	require.Len(t, ri.Holders, 1)
	h := ri.Holders[0]
	require.Equal(t, "a", h.Owner)
	require.Equal(t, lockmgr.Acquired, h.State)
	require.True(t, h.Alive)
	require.NotZero(t, h.PID)
	require.False(t, h.ExpiresAt.IsZero())
	require.WithinDuration(t, x.AcquiredAt, h.AcquiredAt, time.Second)

	o, err := l.Overview()
	require.NoError(t, err)
	byName := map[string]lockmgr.ResourceInfo{}
	for _, r := range o.Resources {
		byName[r.Resource] = r
	}
	require.Len(t, byName, 2)
	require.Equal(t, C, byName["r2"].Mode)
	require.Len(t, byName["r2"].Holders, 2)
	require.Equal(t, 3, o.Stats.ActiveLocks)
	require.EqualValues(t, 3, o.Stats.TotalLocks)
	require.EqualValues(t, 1, o.Stats.ConflictsDetected)
	require.EqualValues(t, 0, o.Stats.Released)

	release(t, l, "r1", "a")
	release(t, other, "r2", "b")
	release(t, l, "r2", "c")
	o, err = other.Overview()
	require.NoError(t, err)
	require.Zero(t, o.Stats.ActiveLocks)
	require.EqualValues(t, 3, o.Stats.Released)
	require.EqualValues(t, 3, o.Stats.TotalLocks)
	require.Positive(t, o.Stats.AverageHoldTime)
	for _, r := range o.Resources {
		require.Equal(t, lockmgr.Unlocked, r.State, r.Resource)
	}
}

func badInput(t *testing.T, b Backend) {
	l, _ := b.New(t)
	tooLong := strings.Repeat("r", lockmgr.MaxResourceLen+1)
	c := ctx(t)
	cases := []struct {
		name string
		err  error
		call func() error
	}{
		{"empty resource", lockmgr.ErrBadResource, func() error { _, err := l.Acquire(c, "", "a", X, none); return err }},
		{"long resource", lockmgr.ErrBadResource, func() error { _, err := l.Acquire(c, tooLong, "a", X, none); return err }},
		{"control char", lockmgr.ErrBadResource, func() error { _, err := l.Acquire(c, "a\nb", "a", X, none); return err }},
		{"bad utf-8", lockmgr.ErrBadResource, func() error { _, err := l.Acquire(c, "\xff", "a", X, none); return err }},
		{"empty owner", lockmgr.ErrBadOwner, func() error { _, err := l.Acquire(c, "r", "", X, none); return err }},
		{"bad mode", lockmgr.ErrBadMode, func() error { _, err := l.Acquire(c, "r", "a", lockmgr.Mode(9), none); return err }},
		{"negative TTL", lockmgr.ErrBadOptions, func() error {
			_, err := l.Acquire(c, "r", "a", X, lockmgr.AcquireOptions{TTL: -1})
			return err
		}},
		{"negative wait", lockmgr.ErrBadOptions, func() error {
			_, err := l.Acquire(c, "r", "a", X, lockmgr.AcquireOptions{Wait: -1})
			return err
		}},
		{"bad retries", lockmgr.ErrBadOptions, func() error {
			_, err := l.Acquire(c, "r", "a", X, lockmgr.AcquireOptions{Retries: -2})
			return err
		}},
		{"shrinking backoff", lockmgr.ErrBadOptions, func() error {
			_, err := l.Acquire(c, "r", "a", X, lockmgr.AcquireOptions{Backoff: lockmgr.Backoff{Factor: 0.5}})
			return err
		}},
		{"release bad owner", lockmgr.ErrBadOwner, func() error { return l.Release("r", "") }},
		{"refresh negative", lockmgr.ErrBadOptions, func() error { _, err := l.Refresh("r", "a", -time.Second); return err }},
		{"inspect bad", lockmgr.ErrBadResource, func() error { _, err := l.Inspect(""); return err }},
		{"check bad", lockmgr.ErrBadResource, func() error { return l.CheckVersion("", 1) }},
		{"declare bad", lockmgr.ErrBadResource, func() error { return l.Declare("ok", "") }},
		{"mark bad", lockmgr.ErrBadOwner, func() error { return l.MarkConsistent("r", "") }},
	}
	for _, tc := range cases {
		err := tc.call()
		require.ErrorIs(t, err, tc.err, tc.name)
		var coded *lockmgr.Error
		require.True(t, errors.As(err, &coded), "%s: %v has a code", tc.name, err)
	}
	ri, err := l.Inspect("ok")
	require.NoError(t, err)
	require.False(t, ri.Declared, "a bad name declares none")
	require.Empty(t, holders(t, l, "r"))
}

// exclusiveCounter has goroutines on both handles add to a plain counter
// under the exclusive lock: a lost increment means two holders at once.
func exclusiveCounter(t *testing.T, b Backend) {
	l, other := b.New(t)
	const workers, iters = 4, 25
	counter := 0
	inside := 0
	// mu only keeps the race detector quiet (it cannot see the
	// happens-before of a lock held through etcd); the lock is under test.
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		h := []lockmgr.Locker{l, other}[w%2]
		owner := string(rune('a' + w))
		wg.Go(func() {
			var last uint64
			for range iters {
				info, err := h.Acquire(ctx(t), "counter", owner, X, waitLong)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				inside++
				n := inside
				mu.Unlock()
				if n != 1 {
					errs <- errors.New("two exclusive holders at once")
				}
				if info.Version <= last {
					errs <- errors.New("version went back")
				}
				last = info.Version
				// A read and a write apart, so that a second holder
				// inside would lose an increment.
				mu.Lock()
				c := counter
				mu.Unlock()
				time.Sleep(time.Microsecond)
				mu.Lock()
				counter = c + 1
				inside--
				mu.Unlock()
				if err := h.Release("counter", owner); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, workers*iters, counter)
}
