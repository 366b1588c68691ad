package sleepers_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/futex"
	"github.com/shmlock/shmlock/internal/sleepers"
	"github.com/shmlock/shmlock/layout"
)

// The owner slot's Pad word is a sleepers word: the format and this
// package must agree on its bits.
func TestPadIsASleepersWord(t *testing.T) {
	require.Equal(t, sleepers.CountMask, layout.PadSleepers)
	require.Equal(t, sleepers.EpochMask, layout.PadEpoch)
	require.Equal(t, sleepers.EpochShift, layout.PadEpochShift)
	require.Equal(t, sleepers.FutileMask, layout.PadFutileWakes)
	require.Equal(t, sleepers.FutileShift, layout.PadFutileShift)
	require.Equal(t, sleepers.WakePending, layout.PadWakePending)
}

func futiles(v uint32) uint32 { return (v & sleepers.FutileMask) >> sleepers.FutileShift }

// Wakes with nobody in the kernel, from a given word: what each leaves.
func TestWakeWithNobodyAsleep(t *testing.T) {
	stale := uint32(2) // two registered sleepers that never reach the kernel
	near := stale | (sleepers.FutileMax-1)<<sleepers.FutileShift
	tests := []struct {
		name       string
		word       uint32
		wake       func(w, gate *atomic.Uint32) bool
		want       uint32
		wantReason string
	}{
		{"WakeOne, none registered", 0, sleepers.WakeOne, 0, "no call, nothing changes"},
		{"WakeOne, pending", stale | sleepers.WakePending, sleepers.WakeOne, stale | sleepers.WakePending, "a woken sleeper is on its way: no call"},
		{"WakeOne counts a futile wake", stale, sleepers.WakeOne, stale | 1<<sleepers.FutileShift, "pending cleared, one futile wake"},
		{"WakeOne drops a stale count", near, sleepers.WakeOne, 1 << sleepers.EpochShift, "the FutileMax-th futile wake drops the count, next epoch"},
		{"the epoch wraps", near | sleepers.EpochMask, sleepers.WakeOne, 0, "epoch 255 -> 0"},
		{"WakeAll counts a futile wake", stale, sleepers.WakeAll, stale | 1<<sleepers.FutileShift, "one futile wake"},
		{"WakeAll keeps pending", stale | sleepers.WakePending, sleepers.WakeAll, stale | sleepers.WakePending | 1<<sleepers.FutileShift, "pending is WakeOne's"},
		{"WakeAll drops a stale count", near | 7<<sleepers.EpochShift, sleepers.WakeAll, 8 << sleepers.EpochShift, "the FutileMax-th futile wake drops the count, next epoch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w, gate atomic.Uint32
			w.Store(tt.word)
			require.False(t, tt.wake(&w, &gate), "a wake that found nobody reports false")
			require.Equal(t, tt.want, w.Load(), tt.wantReason)
		})
	}
}

// Unregister takes one off, never below zero, and clears pending and the
// futile count.
func TestUnregister(t *testing.T) {
	var w atomic.Uint32
	sleepers.Unregister(&w, 0)
	require.Zero(t, w.Load(), "never below zero")
	t1 := sleepers.Register(&w)
	sleepers.Register(&w)
	w.Or(sleepers.WakePending | 5<<sleepers.FutileShift)
	sleepers.Unregister(&w, t1)
	require.Equal(t, uint32(1), w.Load())
	require.Equal(t, uint32(1), sleepers.Count(w.Load()))
}

// A real sleeper is woken, the woken one clears pending and the futile
// count, and a run of futile wakes shorter than FutileMax keeps the count.
func TestWakeOneWakesASleeper(t *testing.T) {
	var w, gate atomic.Uint32
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticket := sleepers.Register(&w)
		seq := gate.Load()
		for gate.Load() == seq {
			_ = futex.Wait(&gate, seq, time.Second)
		}
		sleepers.Unregister(&w, ticket)
	}()
	// Wait until the sleeper is in the kernel: a wake then finds it.
	for sleepers.Count(w.Load()) == 0 {
		time.Sleep(time.Millisecond)
	}
	w.Add(3 << sleepers.FutileShift) // futile wakes before it slept
	for {
		gate.Add(1)
		sleepers.WakeOne(&w, &gate)
		select {
		case <-done:
			require.Zero(t, w.Load(), "the woken sleeper cleared pending and the futile count")
			return
		case <-time.After(10 * time.Millisecond):
			// It had not reached the kernel: the wake was futile, and the
			// sleeper sees the gate moved when its futex call starts.
			require.Less(t, futiles(w.Load()), sleepers.FutileMax)
		}
	}
}

// A word that shares its low bits with flags of the caller's keeps them
// (upgrade's Waiters word: count bits 0-15, epoch 16-21, unique-gate flags
// 22-23), and its epoch works as the plain word's.
func TestCountInPartOfTheWord(t *testing.T) {
	const count, epoch, flags = uint32(1)<<16 - 1, uint32(0x3f) << 16, uint32(3) << 22
	const e1, e2 = uint32(1) << 16, uint32(2) << 16
	near := 2 | flags | e1 | (sleepers.FutileMax-1)<<sleepers.FutileShift
	unregister := func(t sleepers.Ticket) func(w *atomic.Uint32) {
		return func(w *atomic.Uint32) { sleepers.UnregisterIn(w, count, epoch, t) }
	}
	futile := func(w *atomic.Uint32) { sleepers.FutileIn(w, count, epoch) }
	tests := []struct {
		name       string
		word, want uint32
		op         func(w *atomic.Uint32)
	}{
		{"register counts one more and returns the epoch", 2 | flags | e1, 3 | flags | e1,
			func(w *atomic.Uint32) {
				if got := sleepers.RegisterIn(w, epoch); got != sleepers.Ticket(e1) {
					panic(fmt.Sprintf("ticket %#x, want %#x", got, e1))
				}
			}},
		{"unregister keeps the flags, resets futile wakes", 2 | flags | e1 | 5<<sleepers.FutileShift, 1 | flags | e1,
			unregister(sleepers.Ticket(e1))},
		{"unregister of an earlier epoch counts nobody off", 2 | flags | e2 | 5<<sleepers.FutileShift, 2 | flags | e2,
			unregister(sleepers.Ticket(e1))},
		{"unregister never goes below zero", flags | e1, flags | e1, unregister(sleepers.Ticket(e1))},
		{"a futile wake is counted", 2 | flags, 2 | flags | 1<<sleepers.FutileShift, futile},
		{"the FutileMax-th drops the count, not the flags, and moves the epoch", near, flags | e2, futile},
		{"the epoch wraps within its bits", 1 | flags | epoch | (sleepers.FutileMax-1)<<sleepers.FutileShift, flags, futile},
		{"with no count registered nothing is counted", flags | e1, flags | e1, futile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w atomic.Uint32
			w.Store(tt.word)
			tt.op(&w)
			require.Equal(t, tt.want, w.Load())
		})
	}
}

// A drop moves the epoch on: a sleeper registered before it leaves without
// taking itself off the count, which now counts later registrations only.
// Before epochs, such a sleeper (preempted between its registration and
// its futex call while 127 futile wakes passed, as happens with more
// processes than CPUs) took away a later sleeper's registration, and that
// sleeper, uncounted, slept its whole slice with the lock free.
func TestDropMovesTheEpoch(t *testing.T) {
	var w, gate atomic.Uint32
	early := sleepers.Register(&w) // preempted before its futex call
	for range sleepers.FutileMax {
		gate.Add(1)
		require.False(t, sleepers.WakeOne(&w, &gate), "nobody is in the kernel")
	}
	require.Zero(t, sleepers.Count(w.Load()), "127 futile wakes drop the count")
	late := sleepers.Register(&w) // registers after the drop, goes to sleep
	require.NotEqual(t, early, late)
	sleepers.Unregister(&w, early) // the early one runs at last
	require.Equal(t, uint32(1), sleepers.Count(w.Load()), "the early sleeper took the late one's registration")
	sleepers.Unregister(&w, late)
	require.Zero(t, sleepers.Count(w.Load()))
}

// A full count takes no more registrations: one more would carry into the
// epoch, moving it on as a drop does (so that live sleepers of the old
// epoch would leave without taking themselves off) while the count reads
// zero (so that wakes would skip the new sleeper), and in upgrade's word
// from the last epoch into its unique-gate flags. Sleepers killed while
// registered fill the count where live ones keep unregistering between
// them (each resets the futile count, so no drop comes): a long run of
// contention with 65535 killed sleepers.
func TestFullCountSaturates(t *testing.T) {
	const upgradeEpoch, flags = uint32(0x3f) << 16, uint32(3) << 22
	e5 := uint32(5) << sleepers.EpochShift
	tests := []struct {
		name  string
		word  uint32
		epoch uint32 // the word's epoch bits
	}{
		{"plain word", sleepers.CountMask | e5, sleepers.EpochMask},
		{"plain word, last epoch", sleepers.CountMask | sleepers.EpochMask, sleepers.EpochMask},
		{"upgrade's word, last epoch", sleepers.CountMask | upgradeEpoch, upgradeEpoch},
		{"upgrade's word keeps its flags", sleepers.CountMask | flags | upgradeEpoch, upgradeEpoch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w atomic.Uint32
			w.Store(tt.word)
			ticket := sleepers.RegisterIn(&w, tt.epoch)
			require.Equal(t, tt.word, w.Load(), "the count, epoch and flags are kept")
			require.Equal(t, sleepers.Ticket(tt.word&tt.epoch), ticket, "the ticket is the epoch in force")
			sleepers.UnregisterIn(&w, sleepers.CountMask, tt.epoch, ticket)
			require.Equal(t, tt.word-1, w.Load(), "the sleeper leaves the count as full as it can be taken for")
		})
	}
	var w atomic.Uint32
	w.Store(sleepers.CountMask | e5)
	require.Equal(t, sleepers.Ticket(e5), sleepers.Register(&w), "Register is RegisterIn of the plain word")
	require.Equal(t, sleepers.CountMask|e5, w.Load())
}
