package coro_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/coro"
	"github.com/shmlock/shmlock/spinlock"
)

// The adapters of a nil lock, each a ProcessLock whose methods fail with
// ErrNoLock.
var nilAdapters = []struct {
	name string
	lock func() coro.ProcessLock
}{
	{"SpinLock(nil)", func() coro.ProcessLock { return coro.SpinLock(nil) }},
	{"UpgradeUnique(nil)", func() coro.ProcessLock { return coro.UpgradeUnique(nil) }},
	{"UpgradeUpgradable(nil)", func() coro.ProcessLock { return coro.UpgradeUpgradable(nil) }},
}

// A nilMutex is a way to get a ProcessMutex over no lock.
type nilMutex struct {
	name  string
	mutex func() *coro.ProcessMutex
}

// nilMutexes are every such way: the zero ProcessMutex, NewProcessMutex of
// nil and of each nil adapter.
func nilMutexes() []nilMutex {
	ms := []nilMutex{
		{"NewProcessMutex(nil)", func() *coro.ProcessMutex { return coro.NewProcessMutex(nil) }},
		{"zero ProcessMutex", func() *coro.ProcessMutex { return new(coro.ProcessMutex) }},
	}
	for _, a := range nilAdapters {
		ms = append(ms, nilMutex{"NewProcessMutex(" + a.name + ")", func() *coro.ProcessMutex { return coro.NewProcessMutex(a.lock()) }})
	}
	return ms
}

// Every locking method of a ProcessMutex over no lock fails with ErrNoLock,
// never panics, and changes nothing: the in-process mutex stays free, a
// LockOn gives its loop's reservation back and never runs its
// continuation, and the next call fails the same way.
func TestProcessMutexNilLock(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	noGuard := func(t *testing.T, g coro.ProcessGuard) {
		require.False(t, g.Held(), "a refused lock holds nothing")
		require.ErrorIs(t, g.Unlock(), coro.ErrNotOwner)
	}
	for _, method := range []struct {
		name string
		call func(t *testing.T, m *coro.ProcessMutex, l *coro.Loop, cont func(coro.ProcessGuard, error)) error
	}{
		{"Lock", func(t *testing.T, m *coro.ProcessMutex, _ *coro.Loop, _ func(coro.ProcessGuard, error)) error {
			g, err := m.Lock(context.Background())
			noGuard(t, g)
			return err
		}},
		{"Lock with a done context", func(t *testing.T, m *coro.ProcessMutex, _ *coro.Loop, _ func(coro.ProcessGuard, error)) error {
			g, err := m.Lock(done)
			noGuard(t, g)
			return err
		}},
		{"TryLock", func(t *testing.T, m *coro.ProcessMutex, _ *coro.Loop, _ func(coro.ProcessGuard, error)) error {
			g, err := m.TryLock()
			noGuard(t, g)
			return err
		}},
		{"LockOn", func(_ *testing.T, m *coro.ProcessMutex, l *coro.Loop, cont func(coro.ProcessGuard, error)) error {
			return m.LockOn(context.Background(), l, cont)
		}},
		{"LockOn with a done context", func(_ *testing.T, m *coro.ProcessMutex, l *coro.Loop, cont func(coro.ProcessGuard, error)) error {
			return m.LockOn(done, l, cont)
		}},
		{"LockOn with the loop in the context", func(_ *testing.T, m *coro.ProcessMutex, l *coro.Loop, cont func(coro.ProcessGuard, error)) error {
			return m.LockOn(coro.WithLoop(context.Background(), l), nil, cont)
		}},
	} {
		for _, mutex := range nilMutexes() {
			t.Run(mutex.name+"/"+method.name, func(t *testing.T) {
				t.Parallel()
				m := mutex.mutex()
				loop := coro.NewLoop()
				var ran atomic.Int32
				cont := func(g coro.ProcessGuard, _ error) {
					ran.Add(1)
					_ = g.Unlock()
				}
				for range 2 { // the second call finds m as the first left it
					require.ErrorIs(t, method.call(t, m, loop, cont), coro.ErrNoLock)
					mustFree(t, coro.ProcessLocal(m))
				}
				loop.Close()
				select {
				case <-loop.Done(): // no reservation left behind
				case <-time.After(procTimeout):
					t.Fatal("the loop did not drain: a refused LockOn kept a reservation")
				}
				require.Zero(t, ran.Load(), "the continuation of a refused LockOn ran")
			})
		}
	}
}

// The adapters of a nil lock fail with ErrNoLock in every method rather
// than panic, also when used directly as a ProcessLock.
func TestAdapterNilLock(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, method := range []struct {
		name string
		call func(*testing.T, coro.ProcessLock) error
	}{
		{"LockContext", func(t *testing.T, l coro.ProcessLock) error {
			reclaimed, err := l.LockContext(context.Background())
			require.False(t, reclaimed)
			return err
		}},
		{"LockContext with a done context", func(t *testing.T, l coro.ProcessLock) error {
			reclaimed, err := l.LockContext(done)
			require.False(t, reclaimed)
			return err
		}},
		{"TryLock", func(_ *testing.T, l coro.ProcessLock) error { _, err := l.TryLock(); return err }},
		{"Unlock", func(_ *testing.T, l coro.ProcessLock) error { return l.Unlock() }},
	} {
		for _, a := range nilAdapters {
			t.Run(a.name+"/"+method.name, func(t *testing.T) {
				t.Parallel()
				l := a.lock()
				require.NotNil(t, l, "an adapter is never nil itself")
				require.ErrorIs(t, method.call(t, l), coro.ErrNoLock)
				require.ErrorIs(t, method.call(t, l), coro.ErrNoLock, "and again")
			})
		}
	}
}

// A SpinLock adapter serves one ProcessMutex: a second one made over the
// same adapter would share its hold's state (and in PIDTID mode its holder,
// under which a lock again is a nested hold: two owners). Every method of
// the second fails with ErrAdapterInUse before it queues, and the first
// works on.
func TestProcessMutexAdapterServesOne(t *testing.T) {
	t.Parallel()
	l, _, _ := openSpin(t, newProcessSegment(t), spinlock.PIDTID)
	adapter := coro.SpinLock(l)
	first := coro.NewProcessMutex(adapter)
	second := coro.NewProcessMutex(adapter)
	g, err := first.Lock(context.Background())
	require.NoError(t, err)
	_, err = second.Lock(context.Background())
	require.ErrorIs(t, err, coro.ErrAdapterInUse)
	_, err = second.TryLock()
	require.ErrorIs(t, err, coro.ErrAdapterInUse)
	loop := coro.NewLoop()
	defer loop.Close()
	require.ErrorIs(t, second.LockOn(context.Background(), loop, func(coro.ProcessGuard, error) {
		t.Error("the continuation of a refused LockOn ran")
	}), coro.ErrAdapterInUse)
	require.ErrorIs(t, second.Close(), coro.ErrAdapterInUse)
	mustFree(t, coro.ProcessLocal(second))
	require.NoError(t, g.Unlock())
	g, err = first.TryLock()
	require.NoError(t, err, "the first ProcessMutex works on")
	require.NoError(t, g.Unlock())
	// Another adapter over the same lock has a holder of its own.
	other := coro.NewProcessMutex(coro.SpinLock(l))
	g, err = other.TryLock()
	require.NoError(t, err)
	require.NoError(t, g.Unlock())
}
