package lockmgr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

var noJitter = lockmgr.Backoff{Jitter: -1}

// A step of a scripted test: one call and what it must return.
type step struct {
	op      string // acquire, release, refresh, advance
	res     string
	owner   string
	mode    lockmgr.Mode
	ttl     time.Duration // acquire's TTL, refresh's ttl, advance's step
	wantErr error
	// wantState is the state LockInfo reports after acquire (Acquired or
	// Failed), or the resource's state (Inspect) after any other step.
	wantState lockmgr.State
	wantHold  int // holders Inspect reports after the step
}

const (
	X = lockmgr.Exclusive
	C = lockmgr.Collaborative
)

// TestCalls runs scripts of calls against one resource table and checks
// each call's error and the resulting states: design 004's state machine
// and release flow, call by call.
func TestCalls(t *testing.T) {
	t.Parallel()
	acq := func(res, owner string, mode lockmgr.Mode, ttl time.Duration, err error) step {
		st := lockmgr.Acquired
		if err != nil {
			st = lockmgr.Failed
		}
		return step{op: "acquire", res: res, owner: owner, mode: mode, ttl: ttl, wantErr: err, wantState: st, wantHold: -1}
	}
	rel := func(res, owner string, err error, st lockmgr.State, holders int) step {
		return step{op: "release", res: res, owner: owner, wantErr: err, wantState: st, wantHold: holders}
	}
	ref := func(res, owner string, ttl time.Duration, err error, st lockmgr.State) step {
		return step{op: "refresh", res: res, owner: owner, ttl: ttl, wantErr: err, wantState: st, wantHold: -1}
	}
	adv := func(d time.Duration, res string, st lockmgr.State) step {
		return step{op: "advance", res: res, ttl: d, wantState: st, wantHold: -1}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"exclusive grant and release", []step{
			acq("r", "a", X, 0, nil), rel("r", "a", nil, lockmgr.Unlocked, 0)}},
		{"exclusive conflict fails at once", []step{
			acq("r", "a", X, 0, nil), acq("r", "b", X, 0, lockmgr.ErrResourceLocked),
			rel("r", "a", nil, lockmgr.Unlocked, 0), acq("r", "b", X, 0, nil)}},
		{"collaborative holders coexist", []step{
			acq("r", "a", C, 0, nil), acq("r", "b", C, 0, nil), acq("r", "c", C, 0, nil),
			rel("r", "b", nil, lockmgr.Acquired, 2), rel("r", "a", nil, lockmgr.Acquired, 1),
			rel("r", "c", nil, lockmgr.Unlocked, 0)}},
		{"exclusive blocks collaborative", []step{
			acq("r", "a", X, 0, nil), acq("r", "b", C, 0, lockmgr.ErrResourceLocked)}},
		{"collaborative blocks exclusive", []step{
			acq("r", "a", C, 0, nil), acq("r", "b", X, 0, lockmgr.ErrResourceLocked),
			rel("r", "a", nil, lockmgr.Unlocked, 0), acq("r", "b", X, 0, nil)}},
		{"holds do not nest", []step{
			acq("r", "a", X, 0, nil), acq("r", "a", X, 0, lockmgr.ErrAlreadyHeld),
			acq("r", "a", C, 0, lockmgr.ErrAlreadyHeld)}},
		{"release by a non-holder", []step{
			acq("r", "a", X, 0, nil), rel("r", "b", lockmgr.ErrLockNotHeld, lockmgr.Acquired, 1)}},
		{"release of an unknown lock succeeds", []step{
			rel("nothing", "a", nil, lockmgr.Unlocked, 0)}},
		{"second release succeeds (nobody holds it)", []step{
			acq("r", "a", X, 0, nil), rel("r", "a", nil, lockmgr.Unlocked, 0), rel("r", "a", nil, lockmgr.Unlocked, 0)}},
		{"expired hold is free for others", []step{
			acq("r", "a", X, time.Second, nil), adv(999*time.Millisecond, "r", lockmgr.Acquired),
			acq("r", "b", X, 0, lockmgr.ErrResourceLocked), adv(time.Millisecond, "r", lockmgr.Expired),
			acq("r", "b", X, 0, nil), rel("r", "a", lockmgr.ErrLockTimeout, lockmgr.Acquired, 1)}},
		{"release after expiry", []step{
			acq("r", "a", X, time.Second, nil), adv(2*time.Second, "r", lockmgr.Expired),
			rel("r", "a", lockmgr.ErrLockTimeout, lockmgr.Unlocked, 0),
			rel("r", "a", nil, lockmgr.Unlocked, 0)}},
		{"release after expiry noticed by a grant", []step{
			acq("r", "a", C, time.Second, nil), adv(time.Second, "r", lockmgr.Expired),
			acq("r", "b", C, 0, nil), rel("r", "a", lockmgr.ErrLockTimeout, lockmgr.Acquired, 1)}},
		{"refresh extends a live hold", []step{
			acq("r", "a", X, time.Second, nil), adv(900*time.Millisecond, "r", lockmgr.Acquired),
			ref("r", "a", time.Second, nil, lockmgr.Acquired), adv(900*time.Millisecond, "r", lockmgr.Acquired),
			acq("r", "b", X, 0, lockmgr.ErrResourceLocked), ref("r", "a", 0, nil, lockmgr.Acquired),
			adv(time.Hour, "r", lockmgr.Acquired), rel("r", "a", nil, lockmgr.Unlocked, 0)}},
		{"refresh after expiry, told once", []step{
			acq("r", "a", X, time.Second, nil), adv(time.Second, "r", lockmgr.Expired),
			ref("r", "a", time.Second, lockmgr.ErrLockTimeout, lockmgr.Unlocked),
			rel("r", "a", nil, lockmgr.Unlocked, 0), ref("r", "a", time.Second, lockmgr.ErrLockNotHeld, lockmgr.Unlocked)}},
		{"refresh after expiry, told once, with another holder", []step{
			acq("r", "a", C, time.Second, nil), acq("r", "b", C, 0, nil), adv(time.Second, "r", lockmgr.Acquired),
			ref("r", "a", time.Second, lockmgr.ErrLockTimeout, lockmgr.Acquired),
			rel("r", "a", lockmgr.ErrLockNotHeld, lockmgr.Acquired, 1)}},
		{"refresh by a non-holder", []step{
			acq("r", "a", X, 0, nil), ref("r", "b", time.Second, lockmgr.ErrLockNotHeld, lockmgr.Acquired),
			ref("other", "a", time.Second, lockmgr.ErrLockNotHeld, lockmgr.Unlocked)}},
		{"bad requests", []step{
			acq("", "a", X, 0, lockmgr.ErrBadResource), acq("r", "", X, 0, lockmgr.ErrBadOwner),
			acq(strings.Repeat("r", lockmgr.MaxResourceLen+1), "a", X, 0, lockmgr.ErrBadResource),
			acq("r", strings.Repeat("o", lockmgr.MaxOwnerLen+1), X, 0, lockmgr.ErrBadOwner),
			acq("r\x00", "a", X, 0, lockmgr.ErrBadResource), acq("r", "a\n", X, 0, lockmgr.ErrBadOwner),
			acq("\xff", "a", X, 0, lockmgr.ErrBadResource), acq("r\u0085", "a", X, 0, lockmgr.ErrBadResource),
			acq("r", "a", 0, 0, lockmgr.ErrBadMode), acq("r", "a", 3, 0, lockmgr.ErrBadMode),
			acq("r", "a", X, -1, lockmgr.ErrBadOptions), ref("r", "a", -1, lockmgr.ErrBadOptions, lockmgr.Unlocked),
			rel("", "a", lockmgr.ErrBadResource, lockmgr.Unlocked, 0)}},
		{"longest names", []step{
			acq(strings.Repeat("r", lockmgr.MaxResourceLen), strings.Repeat("o", lockmgr.MaxOwnerLen), X, 0, nil),
			acq(strings.Repeat("r", lockmgr.MaxResourceLen), "b", X, 0, lockmgr.ErrResourceLocked),
			acq("réservé:ü", "agent-ü", X, 0, nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := newFakeClock()
			m, _ := newManager(t, 8, lockmgr.Options{Clock: clk, Logger: discard()})
			for i, s := range tt.steps {
				var err error
				var info lockmgr.LockInfo
				switch s.op {
				case "acquire":
					info, err = m.Acquire(context.Background(), s.res, s.owner, s.mode, lockmgr.AcquireOptions{TTL: s.ttl})
					require.Equal(t, s.wantState, info.State, "step %d %+v: LockInfo.State", i, s)
				case "release":
					err = m.Release(s.res, s.owner)
				case "refresh":
					info, err = m.Refresh(s.res, s.owner, s.ttl)
				case "advance":
					clk.Advance(s.ttl)
				}
				if s.wantErr == nil {
					require.NoError(t, err, "step %d %+v", i, s)
				} else {
					require.ErrorIs(t, err, s.wantErr, "step %d %+v", i, s)
					require.NotEmpty(t, lockmgr.Code(err), "step %d: error %v has no code", i, err)
				}
				if s.op == "acquire" && err == nil {
					require.Equal(t, clk.Now(), info.AcquiredAt)
					if s.ttl > 0 {
						require.Equal(t, clk.Now().Add(s.ttl), info.ExpiresAt)
					}
				}
				if s.op != "acquire" && s.res != "" {
					ri, err := m.Inspect(s.res)
					require.NoError(t, err)
					require.Equal(t, s.wantState, ri.State, "step %d %+v: Inspect state", i, s)
					if s.wantHold >= 0 {
						require.Len(t, ri.Holders, s.wantHold, "step %d %+v: holders", i, s)
					}
				}
			}
		})
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestReleaseUnknownWarns(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	m, _ := newManager(t, 4, lockmgr.Options{Logger: log})
	require.NoError(t, m.Release("ghost", "agent-1"))
	require.Contains(t, buf.String(), "level=WARN")
	require.Contains(t, buf.String(), "resource=ghost")
	require.Equal(t, 0, m.Stats().Resources, "a release must not add the resource")
}

// heldOnFakeClock returns a Manager on a fake clock (its sleeps recorded,
// not slept) on whose resource res owner holds an exclusive hold, for the
// tests of what a second owner meets.
func heldOnFakeClock(t *testing.T, res, owner string) (*lockmgr.Manager, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	m, _ := newManager(t, 4, lockmgr.Options{Clock: clk})
	_, err := m.Acquire(context.Background(), res, owner, X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	return m, clk
}

// AcquireOptions.Check takes every field into account, on its inlined
// path (the default backoff) and off it: each bad value is ErrBadOptions,
// and the good ones, including the edges, pass.
func TestAcquireOptionsCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts lockmgr.AcquireOptions
		ok   bool
	}{
		{"zero", lockmgr.AcquireOptions{}, true},
		{"the edges", lockmgr.AcquireOptions{TTL: 0, Wait: 0, Retries: lockmgr.RetryForever}, true},
		{"positive", lockmgr.AcquireOptions{TTL: time.Second, Wait: time.Second, Retries: 3}, true},
		{"a good backoff", lockmgr.AcquireOptions{Backoff: lockmgr.Backoff{Initial: time.Millisecond, Max: time.Second, Factor: 2, Jitter: 0.5}}, true},
		{"negative TTL", lockmgr.AcquireOptions{TTL: -1}, false},
		{"negative Wait", lockmgr.AcquireOptions{Wait: -1}, false},
		{"negative Wait, positive TTL", lockmgr.AcquireOptions{TTL: time.Second, Wait: -time.Second}, false},
		{"Retries below RetryForever", lockmgr.AcquireOptions{Retries: lockmgr.RetryForever - 1}, false},
		{"a shrinking backoff", lockmgr.AcquireOptions{Backoff: lockmgr.Backoff{Factor: 0.5}}, false},
		{"jitter above 1", lockmgr.AcquireOptions{Backoff: lockmgr.Backoff{Jitter: 1.5}}, false},
		{"a first wait above the cap", lockmgr.AcquireOptions{Backoff: lockmgr.Backoff{Initial: time.Second, Max: time.Millisecond}}, false},
		{"a bad backoff with good fields", lockmgr.AcquireOptions{TTL: time.Second, Retries: 1, Backoff: lockmgr.Backoff{Factor: 0.5}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Check()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, lockmgr.ErrBadOptions)
			}
		})
	}
}

// The backoff schedule is design 004's, exactly, without jitter; running
// out of retries gives ErrAcquisitionFailed after 1+Retries attempts.
func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	m, clk := heldOnFakeClock(t, "task:123", "agent-1")
	ctx := context.Background()
	var waits []time.Duration
	onWait := func(info lockmgr.LockInfo, d time.Duration) {
		require.Equal(t, lockmgr.Waiting, info.State)
		require.Equal(t, len(waits)+1, info.Attempts)
		waits = append(waits, d)
	}
	info, err := m.Acquire(ctx, "task:123", "agent-2", X, lockmgr.AcquireOptions{Retries: 6, Backoff: noJitter, OnWait: onWait})
	require.ErrorIs(t, err, lockmgr.ErrAcquisitionFailed)
	require.Equal(t, clk.Sleeps(), waits)
	require.Equal(t, "LOCK_ACQUISITION_FAILED", lockmgr.Code(err))
	require.Equal(t, lockmgr.Failed, info.State)
	require.Equal(t, 7, info.Attempts)
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}, clk.Sleeps())
	require.EqualValues(t, 1, m.Stats().ConflictsDetected, "one acquisition met one conflict")

	custom := lockmgr.Backoff{Initial: 10 * ms, Max: 50 * ms, Factor: 3}
	for n, want := range []time.Duration{10 * ms, 30 * ms, 50 * ms, 50 * ms} {
		require.Equal(t, want, custom.Delay(n), "Delay(%d)", n)
	}
	// A negative Initial or Max is the default, as 0 is (and as the C
	// library's backoff_initial_ns and backoff_max_ns say).
	negative := lockmgr.Backoff{Initial: -ms, Max: -ms}
	for n, want := range []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms} {
		require.Equal(t, want, negative.Delay(n), "Delay(%d)", n)
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	t.Parallel()
	m, clk := heldOnFakeClock(t, "r", "a")
	ctx := context.Background()
	b := lockmgr.Backoff{Jitter: 0.5}
	_, err := m.Acquire(ctx, "r", "b", X, lockmgr.AcquireOptions{Retries: 20, Backoff: b})
	require.ErrorIs(t, err, lockmgr.ErrAcquisitionFailed)
	for n, d := range clk.Sleeps() {
		full := b.Delay(n)
		require.True(t, d <= full && d >= full/2, "sleep %d: got %v, want in [%v, %v]", n, d, full/2, full)
	}
}

// Wait bounds the whole acquisition: the last sleep is cut to what is left.
func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	m, clk := heldOnFakeClock(t, "r", "a")
	ctx := context.Background()
	info, err := m.Acquire(ctx, "r", "b", X, lockmgr.AcquireOptions{Wait: 1500 * time.Millisecond, Backoff: noJitter})
	require.ErrorIs(t, err, lockmgr.ErrTimeout)
	require.Equal(t, lockmgr.Failed, info.State)
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms}, clk.Sleeps())
}

// A retry that finds the resource free is granted; a wait never outlasts
// the blocking hold's expiry.
func TestRetryGranted(t *testing.T) {
	t.Parallel()
	m, clk := heldOnFakeClock(t, "r", "a")
	ctx := context.Background()
	clk.onSleep = func() {
		if len(clk.Sleeps()) == 3 {
			require.NoError(t, m.Release("r", "a"))
		}
	}
	info, err := m.Acquire(ctx, "r", "b", X, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever, Backoff: noJitter})
	require.NoError(t, err)
	require.Equal(t, 4, info.Attempts)
	clk.onSleep = nil

	_, err = m.Acquire(ctx, "e", "a", X, lockmgr.AcquireOptions{TTL: 150 * time.Millisecond})
	require.NoError(t, err)
	before := len(clk.Sleeps())
	_, err = m.Acquire(ctx, "e", "b", X, lockmgr.AcquireOptions{Retries: 5, Backoff: noJitter})
	require.NoError(t, err)
	require.Equal(t, []time.Duration{100 * time.Millisecond, 50 * time.Millisecond}, clk.Sleeps()[before:])
}

// A context that is done fails the acquisition with its error and changes
// nothing; a deadline is ErrTimeout as well as context.DeadlineExceeded.
func TestAcquireContext(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 4, lockmgr.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	info, err := m.Acquire(ctx, "r", "a", X, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, lockmgr.Failed, info.State)
	require.Equal(t, 0, m.Stats().Resources)

	_, err = m.Acquire(context.Background(), "r", "a", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	_, err = m.Acquire(dctx, "r", "b", X, lockmgr.AcquireOptions{Retries: lockmgr.RetryForever})
	require.ErrorIs(t, err, lockmgr.ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(cctx, "r", "c", X, untilWoken)
		done <- err
	}()
	waitFor(t, func() bool { return m.Stats().ConflictsDetected == 2 }, "the waiter to meet the conflict")
	ccancel() // wakes the futex sleeper: it must not sleep out its hour
	require.ErrorIs(t, <-done, context.Canceled)
	ri, err := m.Inspect("r")
	require.NoError(t, err)
	require.Len(t, ri.Holders, 1)
	require.Equal(t, "a", ri.Holders[0].Owner)
}

// A waiter sleeping on the resource's futex is woken by the release, not by
// its backoff (an hour here: the test would time out).
func TestReleaseWakesWaiter(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 4, lockmgr.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := m.Acquire(ctx, "r", "a", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	type result struct {
		info lockmgr.LockInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		info, err := m.Acquire(ctx, "r", "b", X, untilWoken)
		done <- result{info, err}
	}()
	waitFor(t, func() bool { return m.Stats().ConflictsDetected == 1 }, "the waiter to meet the conflict")
	require.NoError(t, m.Release("r", "a"))
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, lockmgr.Acquired, r.info.State)
	require.GreaterOrEqual(t, r.info.Attempts, 2)
}

// Versions only grow: across grants, releases, expiry, collaborative joins,
// and the recycling of the table entry.
func TestVersionFencing(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	m, _ := newManager(t, 2, lockmgr.Options{Clock: clk}) // room for one resource
	ctx := context.Background()
	var last uint64
	grant := func(res, owner string, mode lockmgr.Mode, ttl time.Duration) lockmgr.LockInfo {
		t.Helper()
		info, err := m.Acquire(ctx, res, owner, mode, lockmgr.AcquireOptions{TTL: ttl})
		require.NoError(t, err)
		require.Greater(t, info.Version, last, "version went back")
		last = info.Version
		require.NoError(t, m.CheckVersion(res, info.Version))
		return info
	}
	grant("a", "o1", X, 0)
	require.NoError(t, m.Release("a", "o1"))
	require.ErrorIs(t, m.CheckVersion("a", last), lockmgr.ErrVersionConflict)
	grant("a", "o1", X, time.Second)
	clk.Advance(time.Second)
	require.True(t, grant("a", "o2", X, 0).Inconsistent, "ends the expired hold, and is told")
	require.NoError(t, m.MarkConsistent("a", "o2")) // else a's entry is never recycled: its next holder must be told
	require.NoError(t, m.Release("a", "o2"))
	grant("b", "o1", X, 0) // recycles a's entry
	require.NoError(t, m.Release("b", "o1"))
	grant("a", "o1", X, 0) // a comes back in b's place, above both
	require.NoError(t, m.Release("a", "o1"))

	v := grant("a", "o1", C, 0).Version
	grant("a", "o2", C, 0)
	err := m.CheckVersion("a", v)
	require.ErrorIs(t, err, lockmgr.ErrVersionConflict)
	require.Equal(t, "VERSION_CONFLICT", lockmgr.Code(err))
	require.ErrorIs(t, m.CheckVersion("never", 1), lockmgr.ErrVersionConflict)
	require.ErrorIs(t, m.CheckVersion("", 1), lockmgr.ErrBadResource)
}

func TestTableFull(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 3, lockmgr.Options{}) // two resources
	require.Equal(t, 2, m.Capacity())
	ctx := context.Background()
	for _, r := range []string{"a", "b"} {
		_, err := m.Acquire(ctx, r, "o", X, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	before := m.List()
	info, err := m.Acquire(ctx, "c", "o", X, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrTableFull)
	require.Equal(t, "TABLE_FULL", lockmgr.Code(err))
	require.Equal(t, lockmgr.Failed, info.State)
	require.ErrorIs(t, m.Declare("c"), lockmgr.ErrTableFull)
	require.Equal(t, stripTimes(before), stripTimes(m.List()), "a failed insert changed the table")

	// Once a resource is free, its entry is recycled for a new name.
	require.NoError(t, m.Release("a", "o"))
	_, err = m.Acquire(ctx, "c", "o", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	ri, err := m.Inspect("a")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Unlocked, ri.State)
	require.Equal(t, 2, m.Stats().Resources)
	require.EqualValues(t, 3, m.Stats().TotalLocks, "statistics of a recycled entry are kept")
}

func stripTimes(l []lockmgr.ResourceInfo) []lockmgr.ResourceInfo {
	out := make([]lockmgr.ResourceInfo, len(l))
	for i, r := range l {
		r.Holders = append([]lockmgr.HolderInfo(nil), r.Holders...)
		for j := range r.Holders {
			r.Holders[j].AcquiredAt = time.Time{}
		}
		out[i] = r
	}
	return out
}

// A collaborative resource takes up to MaxHolders holders, the extra ones
// in overflow entries, and refuses one more.
func TestManyHolders(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 64, lockmgr.Options{})
	ctx := context.Background()
	owner := func(i int) string { return "agent-" + string(rune('A'+i)) }
	for i := range lockmgr.MaxHolders {
		_, err := m.Acquire(ctx, "shared", owner(i), C, lockmgr.AcquireOptions{})
		require.NoError(t, err, "holder %d", i)
	}
	_, err := m.Acquire(ctx, "shared", "one-more", C, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrTooManyHolders)
	// A waiting acquisition waits for one of them to leave.
	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "shared", "one-more", C, lockmgr.AcquireOptions{Wait: testTimeout})
		done <- err
	}()
	require.NoError(t, m.Release("shared", owner(0)))
	require.NoError(t, <-done)
	require.NoError(t, m.Release("shared", "one-more"))
	_, err = m.Acquire(ctx, "shared", owner(0), C, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "shared", "one-more", C, lockmgr.AcquireOptions{Retries: 2, Backoff: lockmgr.Backoff{Initial: time.Millisecond}})
	require.ErrorIs(t, err, lockmgr.ErrAcquisitionFailed)
	require.ErrorIs(t, err, lockmgr.ErrTooManyHolders)
	ri, err := m.Inspect("shared")
	require.NoError(t, err)
	require.Len(t, ri.Holders, lockmgr.MaxHolders)
	require.Equal(t, lockmgr.MaxHolders, m.Stats().ActiveLocks)
	for i := range lockmgr.MaxHolders {
		require.NoError(t, m.Release("shared", owner(i)))
	}
	ri, err = m.Inspect("shared")
	require.NoError(t, err)
	require.Equal(t, lockmgr.Unlocked, ri.State)

	// Overflow entries come from the same table: a full table refuses them.
	small, _ := newManager(t, 2, lockmgr.Options{})
	for i := range 2 {
		_, err := small.Acquire(ctx, "shared", owner(i), C, lockmgr.AcquireOptions{})
		require.NoError(t, err)
	}
	_, err = small.Acquire(ctx, "shared", "third", C, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrTableFull)
}

func TestDeclaredOnly(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 4, lockmgr.Options{Logger: discard()})
	ctx := context.Background()
	require.NoError(t, m.Declare("db", "queue"))
	require.NoError(t, m.SetDeclaredOnly(true))
	require.True(t, m.DeclaredOnly())
	info, err := m.Acquire(ctx, "cache", "o", X, lockmgr.AcquireOptions{Retries: 3})
	require.ErrorIs(t, err, lockmgr.ErrResourceNotFound)
	require.Equal(t, "RESOURCE_NOT_FOUND", lockmgr.Code(err))
	require.Equal(t, lockmgr.Failed, info.State)
	_, err = m.Acquire(ctx, "db", "o", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.NoError(t, m.Release("db", "o"))

	// Declared resources are never recycled: with both entries declared,
	// the table has no room for anything else even out of the mode.
	require.NoError(t, m.Declare("log"))
	require.NoError(t, m.SetDeclaredOnly(false))
	_, err = m.Acquire(ctx, "cache", "o", X, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrTableFull)
	require.NoError(t, m.Undeclare("queue"))
	_, err = m.Acquire(ctx, "cache", "o", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	for _, r := range m.List() {
		require.Equal(t, r.Resource != "cache", r.Declared, "%s", r.Resource)
	}
	require.ErrorIs(t, m.Declare("ok", ""), lockmgr.ErrBadResource)
	ri, err := m.Inspect("ok")
	require.NoError(t, err)
	require.False(t, ri.Declared, "a Declare with a bad name declared the good one")
}

func TestStats(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	m, _ := newManager(t, 8, lockmgr.Options{Clock: clk})
	ctx := context.Background()
	require.Equal(t, lockmgr.Stats{Capacity: 7}, m.Stats())
	_, err := m.Acquire(ctx, "a", "o", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	clk.Advance(3 * time.Second)
	require.NoError(t, m.Release("a", "o"))
	_, err = m.Acquire(ctx, "b", "o", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	clk.Advance(time.Second)
	require.NoError(t, m.Release("b", "o"))
	_, err = m.Acquire(ctx, "c", "o", X, lockmgr.AcquireOptions{TTL: time.Second})
	require.NoError(t, err)
	_, err = m.Acquire(ctx, "c", "p", X, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrResourceLocked)
	_, err = m.Acquire(ctx, "d", "o", C, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	clk.Advance(time.Second) // c's hold expires, nobody has ended it yet
	want := lockmgr.Stats{TotalLocks: 4, ActiveLocks: 1, ExpiredLocks: 1, ExpiredHolds: 1, ConflictsDetected: 1,
		AverageHoldTime: 2 * time.Second, HoldTime: 4 * time.Second, Released: 2, Resources: 4, Capacity: 7}
	require.Equal(t, want, m.Stats())
	_, err = m.Acquire(ctx, "c", "p", X, lockmgr.AcquireOptions{}) // ends it
	require.NoError(t, err)
	want.TotalLocks, want.ActiveLocks, want.ExpiredHolds = 5, 2, 0 // the hold ended still counts as expired
	require.Equal(t, want, m.Stats())
}

// Bad input is refused with a typed error and changes nothing.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 4, lockmgr.Options{Logger: discard()})
	ctx := context.Background()
	_, err := m.Acquire(ctx, "r", "a", C, lockmgr.AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)
	before, stats := stripTimes(m.List()), m.Stats()
	exited := exec.Command("true")
	require.NoError(t, exited.Run())
	gone := exited.Process.Pid // reaped: no process (until the pid is reused)
	for _, call := range []struct {
		err  error
		want error
	}{
		{func() error { _, err := m.Acquire(ctx, "r", "", C, lockmgr.AcquireOptions{}); return err }(), lockmgr.ErrBadOwner},
		{func() error { _, err := m.Acquire(ctx, "r", "b", 9, lockmgr.AcquireOptions{}); return err }(), lockmgr.ErrBadMode},
		{func() error {
			_, err := m.Acquire(ctx, "r", "b", C, lockmgr.AcquireOptions{Retries: -2})
			return err
		}(), lockmgr.ErrBadOptions},
		{func() error {
			_, err := m.Acquire(ctx, "r", "b", C, lockmgr.AcquireOptions{Wait: -1})
			return err
		}(), lockmgr.ErrBadOptions},
		{func() error {
			_, err := m.Acquire(ctx, "r", "b", C, lockmgr.AcquireOptions{Retries: 1, Backoff: lockmgr.Backoff{Factor: 0.5}})
			return err
		}(), lockmgr.ErrBadOptions},
		{func() error {
			_, err := m.Acquire(ctx, "r", "b", C, lockmgr.AcquireOptions{Backoff: lockmgr.Backoff{Jitter: 2}})
			return err
		}(), lockmgr.ErrBadOptions},
		{func() error { _, err := m.Refresh("r", "a", -time.Second); return err }(), lockmgr.ErrBadOptions},
		{m.Release("r\x01", "a"), lockmgr.ErrBadResource},
		{m.Release("r", strings.Repeat("x", 100)), lockmgr.ErrBadOwner},
		{m.SetCompanion("r", "a", -1), lockmgr.ErrBadOptions},
		{m.SetCompanion("r", "a", 1<<22), lockmgr.ErrBadOptions},
		{m.SetCompanion("r", "a", gone), lockmgr.ErrBadOptions},
		{m.Declare("x", "y\x00"), lockmgr.ErrBadResource},
		{m.Undeclare(""), lockmgr.ErrBadResource},
		{func() error { _, err := m.Inspect(""); return err }(), lockmgr.ErrBadResource},
	} {
		require.ErrorIs(t, call.err, call.want)
	}
	require.Equal(t, before, stripTimes(m.List()))
	require.Equal(t, stats, m.Stats())
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	m, _, path := newManagerAt(t, 4, lockmgr.Options{})
	_, err := m.Acquire(context.Background(), "r", "a", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	seg, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	defer seg.Close()
	ro, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = ro.Acquire(context.Background(), "r", "b", X, lockmgr.AcquireOptions{})
	require.ErrorIs(t, err, lockmgr.ErrReadOnly)
	require.ErrorIs(t, ro.Release("r", "a"), lockmgr.ErrReadOnly)
	require.ErrorIs(t, ro.SetDeclaredOnly(true), lockmgr.ErrReadOnly)
	l := ro.List()
	require.Len(t, l, 1)
	require.Equal(t, "a", l[0].Holders[0].Owner)
	require.True(t, l[0].Holders[0].Alive)
}

func TestNoTable(t *testing.T) {
	t.Parallel()
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{Options: layout.Options{LockMgrEntries: -1}})
	require.NoError(t, err)
	defer seg.Close()
	_, err = lockmgr.Open(seg, lockmgr.Options{})
	require.ErrorIs(t, err, lockmgr.ErrNoTable)
}

func TestStatesAndModes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		s     lockmgr.State
		name  string
		final bool
	}{
		{lockmgr.Unlocked, "unlocked", false}, {lockmgr.Waiting, "waiting", false},
		{lockmgr.Acquired, "acquired", false}, {lockmgr.Failed, "failed", true},
		{lockmgr.Released, "released", true}, {lockmgr.Expired, "expired", true},
		{lockmgr.State(9), "state(9)", false},
	} {
		require.Equal(t, tt.name, tt.s.String())
		require.Equal(t, tt.final, tt.s.Final(), "%v", tt.s)
	}
	for _, mode := range []lockmgr.Mode{X, C} {
		for _, s := range []string{mode.String(), strings.ToUpper(mode.String())} {
			got, err := lockmgr.ParseMode(s)
			require.NoError(t, err, "%q: names are case-insensitive", s)
			require.Equal(t, mode, got)
		}
	}
	_, err := lockmgr.ParseMode("shared")
	require.ErrorIs(t, err, lockmgr.ErrBadMode)
	require.Equal(t, "INVALID_MODE", lockmgr.Code(err))
	require.Empty(t, lockmgr.Code(errors.New("other")))
	require.Equal(t, "lockmgr: resource is locked (RESOURCE_LOCKED)", lockmgr.ErrResourceLocked.Error())
}

// Each end of a hold wakes one sleeper: a chain of waiters with hour-long
// backoffs all get the resource in turn, exclusive or collaborative (a
// collaborative grant after a sleep wakes the rest, who may join).
func TestWakeChain(t *testing.T) {
	t.Parallel()
	for _, mode := range []lockmgr.Mode{X, C} {
		m, seg := newManager(t, 4, lockmgr.Options{})
		sleepers := sleepersOf(t, seg)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_, err := m.Acquire(ctx, "r", "first", X, lockmgr.AcquireOptions{})
		require.NoError(t, err)
		const waiters = 6
		done := make(chan error, waiters)
		for i := range waiters {
			go func() {
				owner := "w" + strconv.Itoa(i)
				_, err := m.Acquire(ctx, "r", owner, mode, untilWoken)
				if err == nil {
					err = m.Release("r", owner)
				}
				done <- err
			}()
		}
		waitFor(t, func() bool { return sleepers() == waiters }, "every waiter to sleep")
		require.NoError(t, m.Release("r", "first"))
		for range waiters {
			require.NoError(t, <-done, "mode %v", mode)
		}
	}
}

// sleepersOf returns a function that counts the waiters asleep on the
// gates of seg's lock table.
func sleepersOf(t *testing.T, seg *shm.Segment) func() uint32 {
	t.Helper()
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(t, err)
	return func() uint32 {
		var n uint32
		for off := 0; off < len(mem); off += layout.LockMgrEntrySize {
			e, err := memview.At[layout.LockMgrEntry](mem, uint64(off))
			require.NoError(t, err)
			n += e.Sleepers.Load() & lockmgr.SleepCount // without wake-pending and futile wakes
		}
		return n
	}
}

// A wake-pending bit left set (by a woken process killed before it ran)
// holds up wakes for one sleep slice, not for the sleeper's backoff (an
// hour here: the test would time out).
func TestStaleWakePending(t *testing.T) {
	t.Parallel()
	m, seg := newManager(t, 4, lockmgr.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := m.Acquire(ctx, "r", "a", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	sleepers := sleepersOf(t, seg)
	done := acquireAsleep(t, ctx, m, "b", X, func() bool { return sleepers() == 1 })
	mem, err := seg.Region(layout.KindLockMgr)
	require.NoError(t, err)
	for off := 0; off < len(mem); off += layout.LockMgrEntrySize {
		e, err := memview.At[layout.LockMgrEntry](mem, uint64(off))
		require.NoError(t, err)
		if e.Sleepers.Load() != 0 {
			e.Sleepers.Or(lockmgr.SleepWakePending)
		}
	}
	require.NoError(t, m.Release("r", "a"))
	require.NoError(t, <-done)
}

// instantClock is a Clock whose Sleep advances it instead of waiting, and
// which, unlike fakeClock, records nothing: it allocates nothing, so the
// allocations of an acquisition on it are the acquisition's own.
type instantClock struct{ ns atomic.Int64 }

func (c *instantClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func (c *instantClock) Sleep(_ context.Context, d time.Duration) { c.ns.Add(int64(d)) }

// TestRetriesAllocateNothing: a failing acquisition builds its error once,
// when it returns it, and registers its context's cancellation once, at
// its first sleep, so an attempt that only leads to a retry allocates
// nothing, whatever the conflict: a run out of 40 retries allocates as much
// as a run out of one. Not parallel: AllocsPerRun counts the allocations
// of the whole process.
func TestRetriesAllocateNothing(t *testing.T) {
	if testproc.Race {
		t.Skip("the race detector's allocations make the counts vary")
	}
	for _, tc := range []struct {
		name    string
		mode    lockmgr.Mode
		holders int // collaborative holders taken first; 0: one exclusive holder
		wantErr error
		// system: on SystemClock, sleeping on the futex for a microsecond
		// with a context that can be cancelled; otherwise on a clock that
		// only counts the sleeps.
		system bool
	}{
		{"exclusive holder", X, 0, nil, false},
		{"collaborative against exclusive", C, 0, nil, false},
		{"too many holders", C, lockmgr.MaxHolders, lockmgr.ErrTooManyHolders, false},
		{"futex sleeps, cancellable context", X, 0, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts lockmgr.Options
			backoff := noJitter
			ctx := context.Background()
			if tc.system {
				backoff = lockmgr.Backoff{Initial: time.Microsecond, Max: time.Microsecond, Jitter: -1}
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			} else {
				clk := &instantClock{}
				clk.ns.Store(1_700_000_000 * int64(time.Second))
				opts.Clock = clk
			}
			m, _ := newManager(t, 64, opts)
			if tc.holders == 0 {
				_, err := m.Acquire(ctx, "r", "holder", X, lockmgr.AcquireOptions{})
				require.NoError(t, err)
			}
			for i := range tc.holders {
				_, err := m.Acquire(ctx, "r", "holder-"+strconv.Itoa(i), C, lockmgr.AcquireOptions{})
				require.NoError(t, err)
			}
			allocs := func(retries int) float64 {
				var err error
				var info lockmgr.LockInfo
				n := testing.AllocsPerRun(20, func() {
					info, err = m.Acquire(ctx, "r", "waiter", tc.mode, lockmgr.AcquireOptions{Retries: retries, Backoff: backoff})
				})
				require.ErrorIs(t, err, lockmgr.ErrAcquisitionFailed)
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr)
				} else {
					require.ErrorContains(t, err, `"r" is held by "holder"`)
				}
				require.Equal(t, retries+1, info.Attempts)
				return n
			}
			require.Equal(t, allocs(1), allocs(40), "allocations grow with the retries")
		})
	}
}

// TestUncontendedAllocatesNothing: an acquisition that nobody contends, a
// refresh and a release allocate nothing (the fast path of every hold).
// Not parallel: AllocsPerRun counts the allocations of the whole process.
func TestUncontendedAllocatesNothing(t *testing.T) {
	if testproc.Race {
		t.Skip("the race detector's allocations make the counts vary")
	}
	m, _ := newManager(t, 64, lockmgr.Options{})
	ctx := context.Background()
	for _, ttl := range []time.Duration{0, time.Hour} {
		var errs [3]error
		n := testing.AllocsPerRun(100, func() {
			_, errs[0] = m.Acquire(ctx, "r", "o", X, lockmgr.AcquireOptions{TTL: ttl})
			_, errs[1] = m.Refresh("r", "o", ttl)
			errs[2] = m.Release("r", "o")
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Zero(t, n, "TTL %v", ttl)
	}
	// Nor with names that change every time (the Manager keeps only a
	// pair asked for twice running).
	names := make([]string, 16)
	for i := range names {
		names[i] = fmt.Sprintf("resource-%d", i)
	}
	i := 0
	var errs [2]error
	n := testing.AllocsPerRun(100, func() {
		i++
		_, errs[0] = m.Acquire(ctx, names[i%len(names)], "o", X, lockmgr.AcquireOptions{})
		errs[1] = m.Release(names[i%len(names)], "o")
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, n, "names that change every time")
}

// A failed attempt on the system clock counts towards the keep-off of the
// Manager's waiters; on another clock (a fake one) nothing is measured.
func TestFailedAttemptsSetKeepOff(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, 4, lockmgr.Options{})
	ctx := context.Background()
	_, err := m.Acquire(ctx, "r", "a", X, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.Zero(t, m.AttemptCost(), "no attempt failed yet")
	_, err = m.Acquire(ctx, "r", "b", X, lockmgr.AcquireOptions{Retries: 2, Backoff: lockmgr.Backoff{Initial: time.Microsecond, Max: time.Microsecond}})
	require.ErrorIs(t, err, lockmgr.ErrAcquisitionFailed)
	require.Positive(t, m.AttemptCost(), "two failed attempts measured")

	fake, _ := heldOnFakeClock(t, "r", "a")
	_, err = fake.Acquire(ctx, "r", "b", X, lockmgr.AcquireOptions{Retries: 2})
	require.ErrorIs(t, err, lockmgr.ErrAcquisitionFailed)
	require.Zero(t, fake.AttemptCost(), "a fake clock's readings are not costs")
}

// Delay is a formula, not a loop of n steps: with a factor of 1 (or one so
// close to 1 that the delay never reaches Max) Delay(n) took n steps of
// CPU, and Delay(math.MaxInt) did not return.
func TestBackoffDelayLargeN(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tt := range []struct {
		b    lockmgr.Backoff
		n    int
		want time.Duration
	}{
		{lockmgr.Backoff{Initial: ms, Max: time.Second, Factor: 1}, 1 << 20, ms},
		{lockmgr.Backoff{Initial: ms, Max: time.Second, Factor: 1}, math.MaxInt, ms},
		{lockmgr.Backoff{Initial: ms, Max: time.Second, Factor: 1 + 1e-15}, 1 << 20, ms}, // (1+1e-15)^(2^20) is 1+1e-9
		{lockmgr.Backoff{Initial: ms, Max: time.Second, Factor: 1 + 1e-15}, math.MaxInt, time.Second},
		{lockmgr.Backoff{Initial: ms, Max: time.Second, Factor: 2}, math.MaxInt, time.Second},
		{lockmgr.Backoff{}, math.MaxInt, lockmgr.DefaultMaxDelay},
	} {
		require.Equal(t, tt.want, tt.b.Delay(tt.n), "%+v Delay(%d)", tt.b, tt.n)
	}
	// Within the steps multiplied out, the schedule is as before.
	b := lockmgr.Backoff{Initial: ms, Max: time.Hour, Factor: 1.5}
	d := float64(ms)
	for n := range 40 {
		require.Equal(t, min(time.Duration(d), time.Hour), b.Delay(n), "Delay(%d)", n)
		d *= 1.5
	}
}
