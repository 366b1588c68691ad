package txn_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// mode is one of the two close protocols; the tests that matter run under
// both.
type mode struct {
	name    string
	barrier bool
}

var modes = []mode{{"pins", false}, {"barrier", true}}

// forModes runs f as a subtest per mode, each on a fresh segment made with
// opts (at path) and a Space on it.
func forModes(t *testing.T, opts layout.Options, f func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			seg, path := newSegment(t, opts)
			f(t, m, seg, path, newSpace(t, seg))
		})
	}
}

// ownerArgs are the arguments of an owner helper process ("own",
// "die-finishing", "close-cpu") that begins a transaction in m's mode.
func (m mode) ownerArgs(path string) []string {
	if m.barrier {
		return []string{path, "barrier"}
	}
	return []string{path}
}

// beginFromArgs starts an owner helper process given PATH [barrier]: it
// opens a Space on PATH, begins a transaction in that mode with a 1 KiB
// arena, allocates data in it and prints "ref REF". On an error the
// helper exits, which closes everything.
func beginFromArgs(args []string, data []byte) (*shm.Segment, *txn.Space, *txn.Txn, mode, error) {
	seg, sp, err := openHelper(args[0])
	if err != nil {
		return nil, nil, nil, mode{}, err
	}
	m := modes[0]
	if len(args) > 1 && args[1] == "barrier" {
		m = modes[1]
	}
	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: m.barrier})
	if err != nil {
		return nil, nil, nil, mode{}, err
	}
	ref, err := tx.Alloc(data)
	if err != nil {
		return nil, nil, nil, mode{}, err
	}
	fmt.Println("ref", ref)
	return seg, sp, tx, m, nil
}

// closeTx closes tx the way its mode does.
func (m mode) closeTx(ctx context.Context, sp *txn.Space, tx *txn.Txn) error {
	if !m.barrier {
		return tx.RequestCloseAndWait(ctx)
	}
	b, err := txn.NewBarrier(sp)
	if err != nil {
		return err
	}
	return b.Close(ctx, tx)
}

func (m mode) closeAsync(sp *txn.Space, tx *txn.Txn) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- m.closeTx(context.Background(), sp, tx) }()
	return ch
}

func TestAllocBorrowClose(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096, Barrier: m.barrier})
		require.NoError(t, err)
		var refs []txn.Ref
		for i := range 5 {
			r, err := tx.Alloc(pattern(i, 10*i+1))
			require.NoError(t, err)
			refs = append(refs, r)
		}
		for i, r := range refs {
			b, err := sp.Borrow(context.Background(), r)
			require.NoError(t, err)
			require.NoError(t, checkBytes(b.Bytes(), i))
			require.Len(t, b.Bytes(), 10*i+1)
			b.Release()
			b.Release() // idempotent
		}
		require.NoError(t, m.closeTx(context.Background(), sp, tx))
		for _, r := range refs {
			_, err := sp.Borrow(context.Background(), r)
			require.ErrorIs(t, err, txn.ErrClosed)
			_, err = sp.TryPin(r)
			require.ErrorIs(t, err, txn.ErrClosed)
		}
		_, err = tx.Alloc([]byte("x"))
		require.ErrorIs(t, err, txn.ErrClosed)
		ti := txnInfo(t, seg, tx.Index())
		assert.Equal(t, txn.StateClosed, ti.State)
		assert.Equal(t, uint32(5), ti.Destroyed)
		// A closed transaction closes no more.
		require.ErrorIs(t, m.closeTx(context.Background(), sp, tx), txn.ErrClosed)
	})
}

func TestStaleRefs(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{TxnRecords: 1})
	sp := newSpace(t, seg)
	tx, err := sp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	old, err := tx.Alloc(pattern(0, 32))
	require.NoError(t, err)
	require.NoError(t, tx.RequestCloseAndWait(context.Background()))
	tx2, err := sp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	require.Equal(t, tx.Index(), tx2.Index(), "one record: reused")
	_, err = tx2.Alloc(pattern(1, 32))
	require.NoError(t, err)
	_, err = sp.Borrow(context.Background(), old)
	require.ErrorIs(t, err, txn.ErrStale)
	p, err := sp.TryPin(old)
	require.ErrorIs(t, err, txn.ErrStale)
	require.False(t, p.Held())
	_, err = tx2.Link(old)
	require.ErrorIs(t, err, txn.ErrStale)
	// The first transaction's handle reports it closed, whatever the
	// record's next use does, and changes nothing of it.
	used := tx2.Used()
	require.False(t, tx.Open())
	require.Zero(t, tx.Used(), "the next use's bytes are not the closed transaction's")
	_, err = tx.TryPin()
	require.ErrorIs(t, err, txn.ErrClosed, "TryPin")
	_, err = tx.Alloc([]byte("x"))
	require.ErrorIs(t, err, txn.ErrClosed, "Alloc")
	require.ErrorIs(t, tx.RequestCloseAndWait(context.Background()), txn.ErrClosed, "RequestCloseAndWait")
	require.Equal(t, used, tx2.Used())
	require.True(t, tx2.Open())

	cur := txn.Ref{Txn: old.Txn, Gen: tx2.Gen(), Off: old.Off}
	bad := []txn.Ref{
		{},                                      // zero
		{Txn: 1, Gen: 1},                        // no such record
		{Txn: cur.Txn, Gen: cur.Gen, Off: 8},    // misaligned
		{Txn: cur.Txn, Gen: cur.Gen, Off: 4096}, // past the allocated part
		{Txn: cur.Txn, Gen: cur.Gen, Off: 16},   // inside an object, not a header
	}
	for _, r := range bad {
		_, err := sp.Borrow(context.Background(), r)
		require.ErrorIs(t, err, txn.ErrBadRef, "ref %v", r)
	}
	require.Zero(t, sp.OwnPinCount(int(cur.Txn)), "failed borrows leave no pin")
	require.NoError(t, tx2.RequestCloseAndWait(context.Background()))
}

func TestIdempotentReleaseAndPinsHeld(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	tx, err := sp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	r, err := tx.Alloc([]byte("x"))
	require.NoError(t, err)
	p1, err := sp.TryPin(r)
	require.NoError(t, err)
	p2, err := sp.TryPin(r)
	require.NoError(t, err)
	require.Equal(t, uint32(2), sp.OwnPinCount(tx.Index()))
	require.ErrorIs(t, sp.Close(), txn.ErrPinsHeld)
	p1.Release()
	p1.Release()
	p1.Release()
	require.Equal(t, uint32(1), sp.OwnPinCount(tx.Index()))
	p2.Release()
	require.Zero(t, sp.OwnPinCount(tx.Index()))
	require.NoError(t, tx.RequestCloseAndWait(context.Background()))
	var zero txn.Pin
	zero.Release()
}

func TestTryPinLostRace(t *testing.T) {
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		tx, err := sp.Begin(txn.BeginOptions{Barrier: m.barrier})
		require.NoError(t, err)
		r, err := tx.Alloc([]byte("x"))
		require.NoError(t, err)
		var done <-chan error
		hooked := 0
		txn.SetPinnedHook(func() {
			// The pin is counted but not checked: a closer comes in
			// now and flips the state; it must wait for this pin.
			hooked++
			done = m.closeAsync(sp, tx)
			waitFor(t, func() bool { return txnInfo(t, seg, tx.Index()).State == txn.StateClosing }, "the close to start")
		})
		p, err := sp.TryPin(r)
		txn.SetPinnedHook(nil)
		require.Equal(t, 1, hooked)
		require.ErrorIs(t, err, txn.ErrClosing)
		require.False(t, p.Held())
		require.NoError(t, recv(t, done), "the close completes after the back-out")
		require.Zero(t, sp.OwnPinCount(tx.Index()))
	})
}

func TestCloserHoldsPin(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	for _, m := range modes {
		tx, err := sp.Begin(txn.BeginOptions{Barrier: m.barrier})
		require.NoError(t, err)
		r, err := tx.Alloc([]byte("x"))
		require.NoError(t, err)
		p, err := tx.TryPin()
		require.NoError(t, err)
		require.ErrorIs(t, m.closeTx(context.Background(), sp, tx), txn.ErrCloserPinned, m.name)
		require.True(t, tx.Open(), "nothing changed")
		p.Release()
		b, err := tx.Borrow(context.Background(), r)
		require.NoError(t, err)
		require.ErrorIs(t, m.closeTx(context.Background(), sp, tx), txn.ErrCloserPinned, m.name)
		require.True(t, tx.Open(), "nothing changed")
		b.Release()
		b.Release()
		// A pin through the handle on another (per-transaction mode)
		// transaction is not one on this.
		other, err := sp.Begin(txn.BeginOptions{})
		require.NoError(t, err)
		or, err := other.Alloc([]byte("y"))
		require.NoError(t, err)
		ob, err := tx.Borrow(context.Background(), or)
		require.NoError(t, err)
		require.NoError(t, m.closeTx(context.Background(), sp, tx), m.name)
		ob.Release()
		require.NoError(t, other.RequestCloseAndWait(context.Background()))
	}
}

func TestWrongMode(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	bt, err := sp.Begin(txn.BeginOptions{Barrier: true})
	require.NoError(t, err)
	pt, err := sp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	require.ErrorIs(t, bt.RequestCloseAndWait(context.Background()), txn.ErrWrongMode)
	b, err := txn.NewBarrier(sp)
	require.NoError(t, err)
	require.ErrorIs(t, b.Close(context.Background(), pt), txn.ErrWrongMode)
	// A batch with a nil transaction or one twice is refused as a whole.
	require.ErrorIs(t, b.Close(context.Background(), bt, bt), txn.ErrInvalid)
	require.ErrorIs(t, b.Close(context.Background(), bt, nil), txn.ErrInvalid)
	require.True(t, bt.Open())
	require.True(t, pt.Open())
	require.NoError(t, b.Close(context.Background(), bt))
	require.NoError(t, pt.RequestCloseAndWait(context.Background()))
}

func TestCloseCancelled(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		tx, err := sp.Begin(txn.BeginOptions{Barrier: m.barrier})
		require.NoError(t, err)
		r, err := tx.Alloc([]byte("x"))
		require.NoError(t, err)
		p, err := sp.TryPin(r)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan error, 1)
		go func() { ch <- m.closeTx(ctx, sp, tx) }()
		waitFor(t, func() bool { return txnInfo(t, seg, tx.Index()).State == txn.StateClosing }, "closing")
		cancel()
		require.ErrorIs(t, recv(t, ch), context.Canceled)
		require.True(t, tx.Open(), "a cancelled close reopens")
		p2, err := sp.TryPin(r)
		require.NoError(t, err)
		p2.Release()
		p.Release()
		require.NoError(t, m.closeTx(context.Background(), sp, tx))
	})
}

// TestReaderWhileClosing: a reader goroutine loops on pinned reads while
// another goroutine closes; the reader never sees poison, the close
// completes.
func TestReaderWhileClosing(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 8192, Barrier: m.barrier})
		require.NoError(t, err)
		var refs []txn.Ref
		for i := range 8 {
			r, err := tx.Alloc(pattern(i, 500))
			require.NoError(t, err)
			refs = append(refs, r)
		}
		const readers = 3
		var wg sync.WaitGroup
		started := make(chan struct{}, readers)
		errs := make(chan error, readers)
		for g := range readers {
			wg.Go(func() {
				for n := 0; ; n++ {
					i := (n + g) % len(refs)
					b, err := sp.Borrow(context.Background(), refs[i])
					if errors.Is(err, txn.ErrClosing) || errors.Is(err, txn.ErrClosed) {
						if n == 0 {
							started <- struct{}{}
						}
						return
					}
					if err != nil {
						errs <- err
						return
					}
					// Read it twice, a little apart: it must not change.
					if err := checkBytes(b.Bytes(), i); err != nil {
						errs <- err
					}
					time.Sleep(time.Microsecond)
					if err := checkBytes(b.Bytes(), i); err != nil {
						errs <- err
					}
					b.Release()
					if n == 0 {
						started <- struct{}{}
					}
				}
			})
		}
		for range readers {
			<-started
		}
		require.NoError(t, m.closeTx(context.Background(), sp, tx))
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		require.Zero(t, sp.OwnPinCount(tx.Index()))
	})
}

// TestReadersAcrossProcesses: the same with readers in other processes,
// which count themselves in a shared word while they hold a pin: when the
// close returns, the word is exactly 0.
func TestReadersAcrossProcesses(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		inside, err := insideWord(seg)
		require.NoError(t, err)
		for round := range rounds(2, 20) {
			tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 8192, Barrier: m.barrier})
			require.NoError(t, err)
			r, err := tx.Alloc(pattern(0, 3000))
			require.NoError(t, err)
			var kids []*testproc.Child
			for range 2 {
				kids = append(kids, testproc.Start(t, "reader", path, r.String()))
			}
			for _, c := range kids {
				c.WaitLine(t, "ready")
			}
			require.NoError(t, m.closeTx(context.Background(), sp, tx))
			// The close returned: every pin was released, so no reader is
			// inside, and none can enter any more.
			require.Zero(t, inside.Load(), "round %d: readers inside their pins after the close returned", round)
			for _, c := range kids {
				c.WaitOK(t)
				n, err := strconv.Atoi(c.WaitLine(t, "reads "))
				require.NoError(t, err)
				require.Positive(t, n)
			}
			snap, err := txn.Inspect(seg, false)
			require.NoError(t, err)
			require.Len(t, snap.Rows, 1, "the readers gave their rows back")
		}
	})
}

// TestKilledPinner: a process holding pins is killed while the owner waits
// to close; the close completes once its pins stop counting.
func TestKilledPinner(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		tx, err := sp.Begin(txn.BeginOptions{Barrier: m.barrier})
		require.NoError(t, err)
		r, err := tx.Alloc(pattern(0, 64))
		require.NoError(t, err)
		c := testproc.Start(t, "pin-hold", path, r.String())
		c.WaitLine(t, "pinned")
		done := m.closeAsync(sp, tx)
		waitFor(t, func() bool { return txnInfo(t, seg, tx.Index()).State == txn.StateClosing }, "closing")
		// A live pinner holds the close: nothing changes for a while.
		time.Sleep(120 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("close returned %v while a live process held pins", err)
		default:
		}
		snap, err := txn.Inspect(seg, false)
		require.NoError(t, err)
		var live bool
		for _, row := range snap.Rows {
			if int(row.Owner&proc.MaxPID) == c.PID() {
				live = row.Alive && (row.Pins == 3 || row.GlobalPins == 3)
			}
		}
		require.True(t, live, "the child's row shows its 3 pins: %+v", snap.Rows)
		c.Kill(t)
		require.NoError(t, recv(t, done))
		require.Equal(t, txn.StateClosed, txnInfo(t, seg, tx.Index()).State)
		// Its row is taken over by the next process and zeroed.
		sp2 := newSpace(t, seg)
		require.Zero(t, sp2.OwnPinCount(tx.Index()))
	})
}

// TestKilledPinnerOthersKept: of several pinners, one is killed; only its
// pins stop counting. The close keeps waiting for the pins of the live
// child and of this process (through another handle), and completes when
// the last of them goes.
func TestKilledPinnerOthersKept(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		reader := newSpace(t, seg)
		tx, err := sp.Begin(txn.BeginOptions{Barrier: m.barrier})
		require.NoError(t, err)
		r, err := tx.Alloc(pattern(0, 64))
		require.NoError(t, err)
		victim := testproc.Start(t, "pin-hold", path, r.String())
		survivor := testproc.Start(t, "pin-hold", path, r.String())
		victim.WaitLine(t, "pinned")
		survivor.WaitLine(t, "pinned")
		b, err := reader.Borrow(context.Background(), r)
		require.NoError(t, err)
		done := m.closeAsync(sp, tx)
		waitFor(t, func() bool { return txnInfo(t, seg, tx.Index()).State == txn.StateClosing }, "closing")

		stillWaiting := func(what string) {
			t.Helper()
			// Several liveness slices: the closer has looked at who
			// lives by then.
			time.Sleep(200 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("close returned %v %s", err, what)
			default:
			}
		}
		pinsOf := func(c *testproc.Child) (uint64, bool) {
			snap, err := txn.Inspect(seg, false)
			require.NoError(t, err)
			for _, row := range snap.Rows {
				if int(row.Owner&proc.MaxPID) == c.PID() {
					return row.Pins + uint64(row.GlobalPins), row.Alive
				}
			}
			return 0, false
		}
		victim.Kill(t)
		stillWaiting("after one pinner died, with another process and this one pinning")
		n, alive := pinsOf(survivor)
		require.True(t, alive)
		require.Equal(t, uint64(3), n, "the live child's pins are all still there")
		n, alive = pinsOf(victim)
		require.False(t, alive)
		require.Equal(t, uint64(3), n, "the dead child's row is left as it was (it just no longer counts)")
		require.NoError(t, checkBytes(b.Bytes(), 0), "this process's pinned object is intact")
		b.Release()
		stillWaiting("with the live child pinning")
		survivor.Kill(t)
		require.NoError(t, recv(t, done))
		require.Equal(t, txn.StateClosed, txnInfo(t, seg, tx.Index()).State)
	})
}

// TestKillReadersWhileClosing: readers in other processes loop on pinned
// reads; some are killed with SIGKILL at random moments, before and during
// the close. The close always completes, and the survivors never read
// poison or a change. SHMLOCK_LONG=1 runs many rounds.
func TestKillReadersWhileClosing(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
		for round := range rounds(2, 40) {
			tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 8192, Barrier: m.barrier})
			require.NoError(t, err)
			r, err := tx.Alloc(pattern(0, 3000))
			require.NoError(t, err)
			kids := make([]*testproc.Child, 4)
			for i := range kids {
				kids[i] = testproc.Start(t, "reader", path, r.String())
			}
			for _, c := range kids {
				c.WaitLine(t, "ready")
			}
			order := rng.Perm(len(kids))
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			kids[order[0]].Kill(t) // before the close
			done := m.closeAsync(sp, tx)
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
			kids[order[1]].KillIfRunning(t) // during the close, or after it (and its exit)
			require.NoError(t, recv(t, done), "round %d", round)
			for _, i := range order[2:] {
				kids[i].WaitOK(t)
			}
			require.Equal(t, txn.StateClosed, txnInfo(t, seg, tx.Index()).State)
		}
	})
}

// TestLivePinsNeverReleased: a close waits for a live process's pins as
// long as they are held (the context ends it here).
func TestLivePinsNeverReleased(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	tx, err := sp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	r, err := tx.Alloc(pattern(0, 64))
	require.NoError(t, err)
	c := testproc.Start(t, "pin-hold", path, r.String())
	c.WaitLine(t, "pinned")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond) // several liveness slices
	defer cancel()
	require.ErrorIs(t, tx.RequestCloseAndWait(ctx), context.DeadlineExceeded)
	require.True(t, tx.Open())
	c.Kill(t)
	require.NoError(t, tx.RequestCloseAndWait(context.Background()))
}

// TestReclaim: a transaction whose owner died is closed by another process.
func TestReclaim(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		c := testproc.Start(t, "own", m.ownerArgs(path)...)
		r := childRef(t, c)
		b, err := sp.Borrow(context.Background(), r)
		require.NoError(t, err)
		require.NoError(t, checkBytes(b.Bytes(), 0))
		require.ErrorIs(t, sp.Reclaim(context.Background(), int(r.Txn)), txn.ErrOwnerAlive)
		c.Kill(t)
		// The reclaim waits for this process's live pin like any close.
		done := make(chan error, 1)
		go func() { done <- sp.Reclaim(context.Background(), int(r.Txn)) }()
		waitFor(t, func() bool { return txnInfo(t, seg, int(r.Txn)).State == txn.StateClosing }, "closing")
		require.NoError(t, checkBytes(b.Bytes(), 0))
		b.Release()
		require.NoError(t, recv(t, done))
		_, err = sp.Borrow(context.Background(), r)
		require.ErrorIs(t, err, txn.ErrClosed)
		require.ErrorIs(t, sp.Reclaim(context.Background(), int(r.Txn)), txn.ErrClosed)
	})
}

func TestPromotion(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{TxnRecords: 4}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		ctx := context.Background()
		src, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096, Barrier: m.barrier})
		require.NoError(t, err)
		dst, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096})
		require.NoError(t, err)
		o1, err := src.Alloc(pattern(1, 100))
		require.NoError(t, err)
		o2, err := src.Alloc(pattern(2, 50)) // not linked: destroyed
		require.NoError(t, err)
		cell, err := dst.Link(o1)
		require.NoError(t, err)
		same, err := src.Link(o2)
		require.NoError(t, err)
		require.Equal(t, o2, same, "a link within the transaction is the ref itself")

		b, err := sp.Borrow(ctx, cell)
		require.NoError(t, err)
		require.NoError(t, checkBytes(b.Bytes(), 1))
		// The borrow through the cell pins the source: its close waits.
		done := m.closeAsync(sp, src)
		waitFor(t, func() bool { return txnInfo(t, seg, src.Index()).State == txn.StateClosing }, "closing")
		require.NoError(t, checkBytes(b.Bytes(), 1))
		b.Release()
		require.NoError(t, recv(t, done))
		ti := txnInfo(t, seg, src.Index())
		assert.Equal(t, uint32(1), ti.Promoted)
		assert.Equal(t, uint32(1), ti.Destroyed)

		// Reuse the source's arena, overwriting it.
		other, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096})
		require.NoError(t, err)
		for range 10 {
			_, err := other.Alloc(pattern(9, 200))
			require.NoError(t, err)
		}
		b, err = sp.Borrow(ctx, cell)
		require.NoError(t, err, "the cell was rebound to the promoted copy")
		require.NoError(t, checkBytes(b.Bytes(), 1))
		require.Len(t, b.Bytes(), 100)
		b.Release()
		_, err = sp.Borrow(ctx, o1)
		require.ErrorIs(t, err, txn.ErrStale, "the original is gone: its record was reused by other")

		assert.Equal(t, uint32(1), txnInfo(t, seg, dst.Index()).Promotions)
		require.NoError(t, dst.RequestCloseAndWait(ctx))
		_, err = sp.Borrow(ctx, cell)
		require.ErrorIs(t, err, txn.ErrClosed)
		require.NoError(t, other.RequestCloseAndWait(ctx))
	})
}

// TestPromotionDestinationClosedFirst: a destination that ends first
// takes its cells with it; the source destroys the object.
func TestPromotionDestinationClosedFirst(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	ctx := context.Background()
	src, dst, _, _ := linked(t, sp, txn.BeginOptions{}, txn.BeginOptions{}, 0, 10)
	require.NoError(t, dst.RequestCloseAndWait(ctx))
	require.NoError(t, src.RequestCloseAndWait(ctx))
	ti := txnInfo(t, seg, src.Index())
	assert.Zero(t, ti.Promoted)
	assert.Equal(t, uint32(1), ti.Destroyed)
}

// TestPromotionReaderAcrossClose: readers loop on a cell while the source
// closes; they see the original, then the copy, never poison, never an
// error.
func TestPromotionReaderAcrossClose(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	ctx := context.Background()
	src, dst, _, cell := linked(t, sp, txn.BeginOptions{}, txn.BeginOptions{}, 3, 700)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	started := make(chan struct{}, 2)
	for range 2 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				b, err := sp.Borrow(ctx, cell)
				if err != nil {
					errs <- err
					return
				}
				if err := checkBytes(b.Bytes(), 3); err != nil {
					errs <- err
				}
				b.Release()
				if n == 0 {
					started <- struct{}{}
				}
			}
		})
	}
	<-started
	<-started
	require.NoError(t, src.RequestCloseAndWait(ctx))
	// A few more reads of the copy.
	time.Sleep(10 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NoError(t, dst.RequestCloseAndWait(ctx))
}

// TestPromotionReadersAcrossProcesses: readers in other processes loop on
// a promotion cell while its source closes (they read the original, then
// the copy, never poison), then while the cell's own transaction closes
// (which waits for them, and ends their loop).
func TestPromotionReadersAcrossProcesses(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	ctx := context.Background()
	inside, err := insideWord(seg)
	require.NoError(t, err)
	src, dst, _, cell := linked(t, sp, txn.BeginOptions{ArenaBytes: 8192}, txn.BeginOptions{ArenaBytes: 8192}, 0, 3000)
	var kids []*testproc.Child
	for range 2 {
		kids = append(kids, testproc.Start(t, "reader", path, cell.String()))
	}
	for _, c := range kids {
		c.WaitLine(t, "ready")
	}
	require.NoError(t, src.RequestCloseAndWait(ctx))
	assert.Equal(t, uint32(1), txnInfo(t, seg, src.Index()).Promoted)
	// Overwrite the source's freed arena while the readers go on.
	other, err := sp.Begin(txn.BeginOptions{ArenaBytes: 8192})
	require.NoError(t, err)
	_, err = other.Alloc(pattern(5, 5000))
	require.NoError(t, err)
	// The readers go on reading through the cell: another 200 reads, and
	// neither of them ended (both loop until the cell is closed).
	reads, err := sharedWord(seg, readsSlot)
	require.NoError(t, err)
	from := reads.Load()
	waitFor(t, func() bool {
		for _, c := range kids {
			select {
			case <-c.Done():
				t.Fatalf("reader ended when the source closed: %s", c.Out.String())
			default:
			}
		}
		return reads.Load() >= from+200
	}, "reads of the promoted copy")
	require.NoError(t, dst.RequestCloseAndWait(ctx))
	require.Zero(t, inside.Load(), "readers inside their pins after the close returned")
	for _, c := range kids {
		c.WaitOK(t)
	}
	require.NoError(t, other.RequestCloseAndWait(ctx))
}

func TestArenaFull(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{TxnRecords: 4, TxnArenaBytes: 16 << 10})
	sp := newSpace(t, seg)
	ctx := context.Background()
	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
	require.NoError(t, err)
	require.Equal(t, 1024, tx.ArenaSize())
	var refs []txn.Ref
	for i := 0; ; i++ {
		r, err := tx.Alloc(pattern(i, 100))
		if errors.Is(err, txn.ErrArenaFull) {
			break
		}
		require.NoError(t, err)
		refs = append(refs, r)
	}
	require.Len(t, refs, 1024/(16+112))
	used := tx.Used()
	_, err = tx.Alloc(make([]byte, 1<<20))
	require.ErrorIs(t, err, txn.ErrArenaFull)
	require.Equal(t, used, tx.Used(), "nothing changed")
	for i, r := range refs {
		b, err := sp.Borrow(ctx, r)
		require.NoError(t, err)
		require.NoError(t, checkBytes(b.Bytes(), i), "object %d intact", i)
		b.Release()
	}
	// A link that does not fit fails the same way.
	other, err := sp.Begin(txn.BeginOptions{ArenaBytes: 64})
	require.NoError(t, err)
	_, err = other.Link(refs[0])
	require.ErrorIs(t, err, txn.ErrArenaFull)
	require.Zero(t, other.Used())

	// Begin: no stretch large enough, then no record.
	_, err = sp.Begin(txn.BeginOptions{ArenaBytes: 1 << 20})
	require.ErrorIs(t, err, txn.ErrArenaFull)
	_, err = sp.Begin(txn.BeginOptions{ArenaBytes: -1})
	require.ErrorIs(t, err, txn.ErrInvalid)
	var more []*txn.Txn
	for {
		x, err := sp.Begin(txn.BeginOptions{ArenaBytes: 64})
		if errors.Is(err, txn.ErrNoRecord) {
			break
		}
		require.NoError(t, err)
		more = append(more, x)
	}
	require.Len(t, more, 2)
	for _, x := range append(more, tx, other) {
		require.NoError(t, x.RequestCloseAndWait(ctx))
	}
	// Everything free again: first fit finds the whole data area.
	snap, err := txn.Inspect(seg, false)
	require.NoError(t, err)
	require.Equal(t, snap.DataUnits, snap.FreeUnits)
	big, err := sp.Begin(txn.BeginOptions{ArenaBytes: int64(snap.DataUnits) * layout.ArenaUnit})
	require.NoError(t, err)
	require.NoError(t, big.RequestCloseAndWait(ctx))
}

// TestArenasDisjoint: transactions begun concurrently from several
// processes' handles get disjoint arenas.
func TestArenasDisjoint(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{TxnRecords: 16})
	spaces := []*txn.Space{newSpace(t, seg), newSpace(t, seg)}
	var mu sync.Mutex
	var txs []*txn.Txn
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 4 {
				tx, err := spaces[g%2].Begin(txn.BeginOptions{ArenaBytes: 512})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				txs = append(txs, tx)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, txs, 16)
	snap, err := txn.Inspect(seg, false)
	require.NoError(t, err)
	require.Len(t, snap.Txns, 16)
	for i, a := range snap.Txns {
		for _, b := range snap.Txns[i+1:] {
			require.True(t, a.ArenaStart+a.ArenaSize <= b.ArenaStart || b.ArenaStart+b.ArenaSize <= a.ArenaStart, "arenas of %d and %d overlap", a.Index, b.Index)
		}
	}
	for _, tx := range txs {
		require.NoError(t, tx.RequestCloseAndWait(context.Background()))
	}
}

// TestBarrierBatch: one raising of the barrier closes several
// transactions, and pins of barrier transactions fail while it is up.
func TestBarrierBatch(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	b, err := txn.NewBarrier(sp)
	require.NoError(t, err)
	var txs []*txn.Txn
	var refs []txn.Ref
	for i := range 3 {
		tx, err := sp.Begin(txn.BeginOptions{Barrier: true})
		require.NoError(t, err)
		r, err := tx.Alloc(pattern(i, 10))
		require.NoError(t, err)
		txs, refs = append(txs, tx), append(refs, r)
	}
	bystander, err := sp.Begin(txn.BeginOptions{Barrier: true})
	require.NoError(t, err)
	br, err := bystander.Alloc(pattern(0, 10))
	require.NoError(t, err)
	p, err := sp.TryPin(refs[0])
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.Close(context.Background(), txs...) }()
	waitFor(t, func() bool {
		snap, err := txn.Inspect(seg, false)
		require.NoError(t, err)
		return snap.BarrierLeader != 0
	}, "the barrier")
	_, err = sp.TryPin(br)
	require.ErrorIs(t, err, txn.ErrClosing, "the barrier stops every global pin")
	p.Release()
	require.NoError(t, recv(t, done))
	for _, r := range refs {
		_, err := sp.TryPin(r)
		require.ErrorIs(t, err, txn.ErrClosed)
	}
	p, err = sp.TryPin(br)
	require.NoError(t, err, "the barrier is down")
	p.Release()
	err = b.Close(context.Background(), txs[0], bystander)
	require.ErrorIs(t, err, txn.ErrClosed)
	require.False(t, bystander.Open(), "the rest of the batch closes")
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{TxnRecords: -1})
	_, err := txn.Open(seg)
	require.ErrorIs(t, err, txn.ErrNoSpace)
	seg2, path := newSegment(t, layout.Options{})
	ro, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	_, err = txn.Open(ro)
	require.ErrorIs(t, err, shm.ErrReadOnly)
	sp, err := txn.Open(seg2)
	require.NoError(t, err)
	require.NoError(t, sp.Close())
	require.ErrorIs(t, sp.Close(), txn.ErrSpaceClosed)
	_, err = sp.Begin(txn.BeginOptions{})
	require.ErrorIs(t, err, txn.ErrSpaceClosed)
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"0:1:0", "3:4294967295:16", "", "::", "1:2", "1:2:3:4", "-1:2:3", "1:2:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := txn.ParseRef(s)
		if err != nil {
			require.ErrorIs(t, err, txn.ErrSyntax)
			return
		}
		r2, err := txn.ParseRef(r.String())
		require.NoError(t, err)
		require.Equal(t, r, r2)
	})
}

// TestUseAfterSpaceClose: every use of a closed handle is ErrSpaceClosed
// and changes nothing; the transactions it began stay open in the segment
// for another handle of the process to see.
func TestUseAfterSpaceClose(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{})
	sp, err := txn.Open(seg)
	require.NoError(t, err)
	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
	require.NoError(t, err)
	bt, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: true})
	require.NoError(t, err)
	r, err := tx.Alloc([]byte("x"))
	require.NoError(t, err)
	br, err := bt.Alloc([]byte("y"))
	require.NoError(t, err)
	bar, err := txn.NewBarrier(sp)
	require.NoError(t, err)
	require.NoError(t, sp.Close())
	used := tx.Used()

	ctx := context.Background()
	for _, ref := range []txn.Ref{r, br} {
		_, err = sp.TryPin(ref)
		require.ErrorIs(t, err, txn.ErrSpaceClosed)
		_, err = sp.Borrow(ctx, ref)
		require.ErrorIs(t, err, txn.ErrSpaceClosed)
	}
	_, err = tx.TryPin()
	require.ErrorIs(t, err, txn.ErrSpaceClosed)
	_, err = tx.Alloc([]byte("z"))
	require.ErrorIs(t, err, txn.ErrSpaceClosed)
	_, err = bt.Link(r)
	require.ErrorIs(t, err, txn.ErrSpaceClosed)
	require.ErrorIs(t, tx.RequestCloseAndWait(ctx), txn.ErrSpaceClosed)
	require.ErrorIs(t, bar.Close(ctx, bt), txn.ErrSpaceClosed)
	_, err = txn.NewBarrier(sp)
	require.ErrorIs(t, err, txn.ErrSpaceClosed)
	require.ErrorIs(t, sp.Reclaim(ctx, tx.Index()), txn.ErrSpaceClosed)
	_, err = sp.Begin(txn.BeginOptions{})
	require.ErrorIs(t, err, txn.ErrSpaceClosed)
	require.ErrorIs(t, sp.Close(), txn.ErrSpaceClosed)

	require.Equal(t, used, tx.Used(), "nothing changed")
	require.True(t, tx.Open())
	require.True(t, bt.Open())
	snap, err := txn.Inspect(seg, false)
	require.NoError(t, err)
	require.Empty(t, snap.Rows, "the row was given up")
	require.Len(t, snap.Txns, 2)

	// Another handle of this process reads them; their owner lives, so
	// they are not reclaimed.
	sp2 := newSpace(t, seg)
	b, err := sp2.Borrow(ctx, r)
	require.NoError(t, err)
	require.Equal(t, "x", string(b.Bytes()))
	b.Release()
	require.ErrorIs(t, sp2.Reclaim(ctx, tx.Index()), txn.ErrOwnerAlive)
}

// TestAllocatorHolderKilled: a process killed while it holds the allocator
// lock (in Begin) does not wedge Begin: the lock is taken over, and a
// transaction begins.
func TestAllocatorHolderKilled(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	c := testproc.Start(t, "alloc-hold", path)
	c.WaitLine(t, "locked")
	begun := make(chan error, 1)
	var tx *txn.Txn
	go func() {
		var err error
		tx, err = sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
		begun <- err
	}()
	select {
	case err := <-begun:
		t.Fatalf("Begin returned (%v) while the allocator lock was held", err)
	default:
	}
	c.Kill(t)
	require.NoError(t, recv(t, begun))
	_, err := tx.Alloc([]byte("after the reclaim"))
	require.NoError(t, err)
	require.NoError(t, tx.RequestCloseAndWait(context.Background()))
}

// TestNoPinRow: every pin row taken by a live handle is ErrNoPinRow; a
// handle that closes gives its row to the next.
func TestNoPinRow(t *testing.T) {
	t.Parallel()
	// 320 bytes of arena with 8 records: room for 2 pin rows of 64 bytes (after the 128-byte control area, with 64 bytes of data).
	seg, _ := newSegment(t, layout.Options{TxnArenaBytes: 320})
	a := newSpace(t, seg)
	b := newSpace(t, seg)
	require.NotEqual(t, a.Row(), b.Row())
	_, err := txn.Open(seg)
	require.ErrorIs(t, err, txn.ErrNoPinRow)
	row := a.Row()
	require.NoError(t, a.Close())
	c := newSpace(t, seg)
	require.Equal(t, row, c.Row())
}

// TestBarrierLeaderKilled: the process whose close holds the barrier up is
// killed while it waits for a global pin. Pins of other barrier-mode
// transactions work again (the dead leader's barrier is lowered), its
// transaction is reclaimed once the pin goes, and the next barrier close
// takes the leader lock over.
func TestBarrierLeaderKilled(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t, layout.Options{})
	sp := newSpace(t, seg)
	ctx := context.Background()
	bystander, err := sp.Begin(txn.BeginOptions{Barrier: true})
	require.NoError(t, err)
	br, err := bystander.Alloc(pattern(1, 10))
	require.NoError(t, err)

	c := testproc.StartWithStdin(t, "close-cpu", path, "barrier")
	r := childRef(t, c)
	p, err := sp.TryPin(r)
	require.NoError(t, err)
	c.Send(t, "close")
	waitFor(t, func() bool { return txnInfo(t, seg, int(r.Txn)).State == txn.StateClosing }, "the barrier close to start")
	snap, err := txn.Inspect(seg, false)
	require.NoError(t, err)
	require.Equal(t, c.PID(), int(snap.BarrierLeader&proc.MaxPID), "the child leads")
	_, err = sp.TryPin(br)
	require.ErrorIs(t, err, txn.ErrClosing, "the barrier is up")
	c.Kill(t)

	// The first pin after the leader's death may still see its barrier
	// (and lowers it); the next gets through.
	bp, err := sp.TryPin(br)
	if errors.Is(err, txn.ErrClosing) {
		bp, err = sp.TryPin(br)
	}
	require.NoError(t, err)
	bp.Release()
	_, err = sp.TryPin(r)
	require.ErrorIs(t, err, txn.ErrClosing, "the dead leader's batch stays closing")

	done := make(chan error, 1)
	go func() { done <- sp.Reclaim(ctx, int(r.Txn)) }()
	p.Release()
	require.NoError(t, recv(t, done))
	require.Equal(t, txn.StateClosed, txnInfo(t, seg, int(r.Txn)).State)

	b, err := txn.NewBarrier(sp)
	require.NoError(t, err)
	require.NoError(t, b.Close(ctx, bystander))
	snap, err = txn.Inspect(seg, false)
	require.NoError(t, err)
	require.Zero(t, snap.BarrierLeader)
	require.Empty(t, snap.Txns)
}

// TestAllocWhileClosing: the owner allocates from one goroutine while it
// closes from another. Each Alloc either completes before the arena is
// freed or fails with ErrClosing/ErrClosed; after the close the arena is
// poison from end to end (nothing was written into it after the free).
func TestAllocWhileClosing(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		other, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
		require.NoError(t, err)
		target, err := other.Alloc(pattern(2, 8))
		require.NoError(t, err)
		for round := range rounds(50, 2000) {
			tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 16 << 10, Barrier: m.barrier})
			require.NoError(t, err)
			started := make(chan struct{})
			errc := make(chan error, 1)
			go func() {
				for i := 0; ; i++ {
					var err error
					if i%4 == 3 {
						_, err = tx.Link(target)
					} else {
						_, err = tx.Alloc(pattern(i, 24))
					}
					if i == 0 {
						close(started)
					}
					if errors.Is(err, txn.ErrArenaFull) {
						continue // changes nothing; go on until the close
					}
					if err != nil {
						if errors.Is(err, txn.ErrClosing) || errors.Is(err, txn.ErrClosed) {
							err = nil
						}
						errc <- err
						return
					}
				}
			}()
			<-started
			require.NoError(t, m.closeTx(context.Background(), sp, tx), "round %d", round)
			require.NoError(t, recv(t, errc), "round %d", round)
			for i, c := range tx.ArenaBytes() {
				if c != txn.PoisonByte {
					t.Fatalf("round %d: byte %d of the freed arena is %#x, not poison", round, i, c)
				}
			}
		}
		require.NoError(t, other.RequestCloseAndWait(context.Background()))
	})
}

// TestConcurrentCloses: two goroutines of the owner close one transaction
// at once. One runs the end sequence and returns nil, the other waits for
// it and returns ErrClosed; neither touches the record's next use, whose
// arena (the same stretch, first fit) stays intact.
func TestConcurrentCloses(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{TxnRecords: 2}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		ctx := context.Background()
		for round := range rounds(20, 500) {
			tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: m.barrier})
			require.NoError(t, err)
			r, err := tx.Alloc(pattern(0, 100))
			require.NoError(t, err)
			p, err := sp.TryPin(r)
			require.NoError(t, err)
			a, b := m.closeAsync(sp, tx), m.closeAsync(sp, tx)
			waitFor(t, func() bool { return txnInfo(t, seg, tx.Index()).State == txn.StateClosing }, "closing")
			p.Release()
			// The record's next use begins as soon as one close is done.
			var next *txn.Txn
			var nref txn.Ref
			var errs []error
			for range 2 {
				var err error
				select {
				case err = <-a:
					a = nil
				case err = <-b:
					b = nil
				case <-time.After(testTimeout):
					t.Fatal("no close returned")
				}
				errs = append(errs, err)
				if next == nil && err == nil {
					next, err = sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
					require.NoError(t, err)
					nref, err = next.Alloc(pattern(1, 500))
					require.NoError(t, err)
				}
			}
			var nils, closed int
			for _, err := range errs {
				switch {
				case err == nil:
					nils++
				case errors.Is(err, txn.ErrClosed):
					closed++
				default:
					t.Fatalf("round %d: close: %v", round, err)
				}
			}
			require.Equal(t, 1, nils, "round %d: one close ran the end sequence: %v", round, errs)
			require.Equal(t, 1, closed, "round %d: %v", round, errs)
			require.NotNil(t, next)
			sb, err := sp.Borrow(ctx, nref)
			require.NoError(t, err, "round %d", round)
			require.NoError(t, checkBytes(sb.Bytes(), 1), "round %d: the next use's object", round)
			sb.Release()
			require.NoError(t, next.RequestCloseAndWait(ctx))
		}
	})
}

// TestReadsAllocateNothing: pinning and borrowing, through the Space and
// through the owner's handle, directly and through a promotion cell, keep
// the garbage collector out of the read path.
func TestReadsAllocateNothing(t *testing.T) {
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		ctx := context.Background()
		tx, err := sp.Begin(txn.BeginOptions{Barrier: m.barrier})
		require.NoError(t, err)
		obj, err := tx.Alloc([]byte("object"))
		require.NoError(t, err)
		cell, err := tx.Link(obj)
		require.NoError(t, err)
		reads := []struct {
			name string
			read func() error
		}{
			{"Space.TryPin", func() error { p, err := sp.TryPin(obj); p.Release(); return err }},
			{"Txn.TryPin", func() error { p, err := tx.TryPin(); p.Release(); return err }},
			{"Space.Borrow", func() error { b, err := sp.Borrow(ctx, obj); b.Release(); return err }},
			{"Space.Borrow cell", func() error { b, err := sp.Borrow(ctx, cell); b.Release(); return err }},
			{"Txn.Borrow", func() error { b, err := tx.Borrow(ctx, obj); b.Release(); return err }},
		}
		for _, r := range reads {
			var err error
			allocs := testing.AllocsPerRun(100, func() { err = r.read() })
			require.NoError(t, err, r.name)
			assert.Zero(t, allocs, "%s allocates", r.name)
		}
		require.NoError(t, m.closeTx(ctx, sp, tx))
	})
}

// Package txn's own locks live in its control area: a segment whose only
// owner slot the user claimed still runs transactions, barrier closes
// included, and the owner-slot table keeps the user's claim alone.
func TestTxnTakesNoUserSlot(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{Slots: 1})
	_, err := seg.Claim(layout.KindOwnerSlots, "users")
	require.NoError(t, err)
	sp := newSpace(t, seg)
	tx, err := sp.Begin(txn.BeginOptions{})
	require.NoError(t, err)
	require.NoError(t, tx.RequestCloseAndWait(context.Background()))
	btx, err := sp.Begin(txn.BeginOptions{Barrier: true})
	require.NoError(t, err)
	b, err := txn.NewBarrier(sp)
	require.NoError(t, err)
	require.NoError(t, b.Close(context.Background(), btx))
	claims, err := seg.Claims(layout.KindOwnerSlots)
	require.NoError(t, err)
	require.Len(t, claims, 1)
	require.Equal(t, "users", claims[0].Name)
}

// TestDefaultArenaIsAShareOfTheTxnArena: BeginOptions' zero ArenaBytes is
// the txn arena's object space shared out per record, whatever the size of
// the segment's data area (the regions' memory, another table).
func TestDefaultArenaIsAShareOfTheTxnArena(t *testing.T) {
	t.Parallel()
	const records, arena = 4, 64 << 10
	for _, data := range []int64{4 << 10, 1 << 20} {
		seg, _ := newSegment(t, layout.Options{TxnRecords: records, TxnArenaBytes: arena, DataBytes: data})
		sp := newSpace(t, seg)
		tx, err := sp.Begin(txn.BeginOptions{})
		require.NoError(t, err)
		// The control words and pin rows take the arena's first bytes.
		require.LessOrEqual(t, tx.ArenaSize(), arena/records, "data area %d", data)
		require.Greater(t, tx.ArenaSize(), arena/records/2, "data area %d", data)
		require.NoError(t, tx.RequestCloseAndWait(context.Background()))
	}
}
