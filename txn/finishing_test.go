package txn_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// waitState waits until Inspect reports record idx in state st.
func waitState(tb testing.TB, sp *txn.Space, idx int, st txn.State) {
	tb.Helper()
	waitFor(tb, func() bool { return txnInfo(tb, sp.Segment(), idx).State == st }, st.String())
}

// TestPromotionIntoCancelledClose is the case a promotion used to be lost
// in: the destination is closing (a reader's pin holds it back) when the
// source closes, and the destination's close is then cancelled. The source
// must have copied its object into the cell, which Borrow reads from then
// on; before, the cell stayed bound to the closed source (ErrClosed).
func TestPromotionIntoCancelledClose(t *testing.T) {
	t.Parallel()
	pins, barrier := modes[0], modes[1]
	cases := []struct {
		name             string
		srcMode, dstMode mode
	}{
		{"pins", pins, pins},
		{"barrier-destination", pins, barrier},
		{"barrier-source", barrier, pins},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seg, _ := newSegment(t, layout.Options{TxnRecords: 4})
			sp := newSpace(t, seg)
			srcMode, dstMode := tc.srcMode, tc.dstMode
			src, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096, Barrier: srcMode.barrier})
			require.NoError(t, err)
			dst, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096, Barrier: dstMode.barrier})
			require.NoError(t, err)
			o, err := src.Alloc(pattern(1, 100))
			require.NoError(t, err)
			keep, err := dst.Alloc(pattern(2, 10))
			require.NoError(t, err)
			cell, err := dst.Link(o)
			require.NoError(t, err)

			reader, err := sp.TryPin(keep)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dch := make(chan error, 1)
			go func() { dch <- dstMode.closeTx(ctx, sp, dst) }()
			waitState(t, sp, dst.Index(), txn.StateClosing)

			require.NoError(t, srcMode.closeTx(context.Background(), sp, src), "the source closes; the destination's close still waits")
			assert.Equal(t, uint32(1), txnInfo(t, seg, src.Index()).Promoted, "copied into the closing destination")
			assert.Equal(t, txn.StateClosing, txnInfo(t, seg, dst.Index()).State)

			cancel()
			require.ErrorIs(t, recv(t, dch), context.Canceled)
			require.True(t, dst.Open(), "the cancelled close reopened the destination")
			reader.Release()

			// Overwrite the source's old arena through a new transaction:
			// the cell must not read it.
			other, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096})
			require.NoError(t, err)
			for range 10 {
				_, err := other.Alloc(pattern(9, 300))
				require.NoError(t, err)
			}
			b, err := sp.Borrow(context.Background(), cell)
			require.NoError(t, err, "the promoted copy")
			require.Len(t, b.Bytes(), 100)
			require.NoError(t, checkBytes(b.Bytes(), 1))
			b.Release()

			require.NoError(t, dstMode.closeTx(context.Background(), sp, dst))
			_, err = sp.Borrow(context.Background(), cell)
			require.ErrorIs(t, err, txn.ErrClosed)
			require.NoError(t, other.RequestCloseAndWait(context.Background()))
			for i := range 4 {
				require.Zero(t, sp.OwnPinCount(i))
			}
		})
	}
}

// TestMutualPromotionCancelled: A and B link each other's objects and both
// close, each held back by a reader. B ends first and promotes into A,
// still closing; A's close is then cancelled and A's cell holds B's
// object. A's later close skips B (closed).
func TestMutualPromotionCancelled(t *testing.T) {
	t.Parallel()
	seg, _ := newSegment(t, layout.Options{TxnRecords: 4})
	sp := newSpace(t, seg)
	bg := context.Background()
	a, err := sp.Begin(txn.BeginOptions{ArenaBytes: 2048})
	require.NoError(t, err)
	b, err := sp.Begin(txn.BeginOptions{ArenaBytes: 2048})
	require.NoError(t, err)
	ao, err := a.Alloc(pattern(1, 40))
	require.NoError(t, err)
	bo, err := b.Alloc(pattern(2, 60))
	require.NoError(t, err)
	ca, err := a.Link(bo)
	require.NoError(t, err)
	_, err = b.Link(ao)
	require.NoError(t, err)

	ra, err := sp.TryPin(ao)
	require.NoError(t, err)
	rb, err := sp.TryPin(bo)
	require.NoError(t, err)
	actx, cancelA := context.WithCancel(bg)
	defer cancelA()
	ach := make(chan error, 1)
	go func() { ach <- a.RequestCloseAndWait(actx) }()
	bch := closeAsync(b)
	waitState(t, sp, a.Index(), txn.StateClosing)
	waitState(t, sp, b.Index(), txn.StateClosing)

	rb.Release()
	require.NoError(t, recv(t, bch))
	ti := txnInfo(t, seg, b.Index())
	assert.Equal(t, uint32(1), ti.Promoted, "B promoted into A, closing")
	assert.Zero(t, ti.Destroyed)

	cancelA()
	require.ErrorIs(t, recv(t, ach), context.Canceled)
	ra.Release()
	br, err := sp.Borrow(bg, ca)
	require.NoError(t, err)
	require.NoError(t, checkBytes(br.Bytes(), 2))
	br.Release()
	require.NoError(t, a.RequestCloseAndWait(bg))
	ti = txnInfo(t, seg, a.Index())
	assert.Zero(t, ti.Promoted, "B's cell ended with B")
	assert.Equal(t, uint32(1), ti.Destroyed)
}

// TestMutualPromotionRace: A and B link each other's objects and close at
// the same moment, over and over. Both closes complete (no deadlock), and
// at most one of them promotes into the other: the first to finish may
// find the other still closing, the second finds the first finishing or
// closed. Each object is promoted or destroyed, exactly once.
func TestMutualPromotionRace(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{TxnRecords: 4}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		bg := context.Background()
		promoted := 0
		for round := range rounds(100, 2000) {
			a, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: m.barrier})
			require.NoError(t, err)
			b, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: m.barrier})
			require.NoError(t, err)
			ao, err := a.Alloc(pattern(1, 30))
			require.NoError(t, err)
			bo, err := b.Alloc(pattern(2, 30))
			require.NoError(t, err)
			_, err = a.Link(bo)
			require.NoError(t, err)
			_, err = b.Link(ao)
			require.NoError(t, err)

			var ach, bch <-chan error
			if m.barrier {
				// One leader closes the batch: A then B.
				br, err := txn.NewBarrier(sp)
				require.NoError(t, err)
				ch := make(chan error, 1)
				go func() { ch <- br.Close(bg, a, b) }()
				ach = ch
			} else {
				// Readers hold both back so that both closers are
				// waiting, then let go at once.
				pa, err := sp.TryPin(ao)
				require.NoError(t, err)
				pb, err := sp.TryPin(bo)
				require.NoError(t, err)
				ach, bch = closeAsync(a), closeAsync(b)
				waitState(t, sp, a.Index(), txn.StateClosing)
				waitState(t, sp, b.Index(), txn.StateClosing)
				if round%2 == 0 {
					pa.Release()
					pb.Release()
				} else {
					pb.Release()
					pa.Release()
				}
			}
			require.NoError(t, recv(t, ach), "round %d", round)
			if bch != nil {
				require.NoError(t, recv(t, bch), "round %d", round)
			}
			ta, tb := txnInfo(t, seg, a.Index()), txnInfo(t, seg, b.Index())
			require.Equal(t, txn.StateClosed, ta.State)
			require.Equal(t, txn.StateClosed, tb.State)
			require.LessOrEqual(t, ta.Promoted+tb.Promoted, uint32(1), "round %d", round)
			require.Equal(t, uint32(1), ta.Promoted+ta.Destroyed)
			require.Equal(t, uint32(1), tb.Promoted+tb.Destroyed)
			promoted += int(ta.Promoted + tb.Promoted)
			for i := range 4 {
				require.Zero(t, sp.OwnPinCount(i))
			}
		}
		t.Logf("%d promotions", promoted)
	})
}

// TestPromotionPinAcrossFlip: a promoter pins the destination while it is
// still Closing, right after the destination's closer counted no pin and
// before it flips to Finishing. The closer must wait, in Finishing, for
// that pin before it poisons its arena: the arena ends all poison, with
// no byte of the copy landing after the poisoning.
func TestPromotionPinAcrossFlip(t *testing.T) {
	seg, _ := newSegment(t, layout.Options{TxnRecords: 4})
	sp := newSpace(t, seg)
	src, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096})
	require.NoError(t, err)
	dst, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096})
	require.NoError(t, err)
	o, err := src.Alloc(pattern(4, 2000))
	require.NoError(t, err)
	keep, err := dst.Alloc(pattern(5, 10))
	require.NoError(t, err)
	_, err = dst.Link(o)
	require.NoError(t, err)

	drained, goFlip := make(chan struct{}), make(chan struct{})
	pinned, goCopy := make(chan struct{}), make(chan struct{})
	txn.SetCloseHooks(func(idx int) {
		if idx == dst.Index() {
			close(drained)
			<-goFlip
		}
	}, nil, func(idx int) {
		if idx == dst.Index() {
			close(pinned)
			<-goCopy
		}
	})
	defer txn.SetCloseHooks(nil, nil, nil)

	reader, err := sp.TryPin(keep)
	require.NoError(t, err)
	dch := closeAsync(dst)
	waitState(t, sp, dst.Index(), txn.StateClosing)
	reader.Release()
	<-drained // dst's closer counted no pin; it has not flipped yet
	sch := closeAsync(src)
	<-pinned // src pinned dst, still Closing
	close(goFlip)
	waitFor(t, func() bool {
		return txnInfo(t, seg, dst.Index()).State == txn.StateFinishing && sp.ClosersAsleep(dst.Index()) > 0
	}, "the destination's closer to wait, finishing, for the promoter's pin")
	close(goCopy)
	require.NoError(t, recv(t, sch))
	require.NoError(t, recv(t, dch))
	assert.Equal(t, uint32(1), txnInfo(t, seg, src.Index()).Promoted)
	for i, c := range dst.ArenaBytes() {
		require.Equal(t, byte(txn.PoisonByte), c, "byte %d of the destination's arena after its close", i)
	}
	for i := range 4 {
		require.Zero(t, sp.OwnPinCount(i))
	}
}

// TestFinishingStates: what every call does while a transaction is
// Finishing (its closer held at the start of the end sequence), in both
// close modes.
func TestFinishingStates(t *testing.T) {
	forModes(t, layout.Options{TxnRecords: 4}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		bg := context.Background()
		tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 2048, Barrier: m.barrier})
		require.NoError(t, err)
		other, err := sp.Begin(txn.BeginOptions{ArenaBytes: 2048})
		require.NoError(t, err)
		obj, err := tx.Alloc(pattern(6, 50))
		require.NoError(t, err)
		oo, err := other.Alloc(pattern(7, 20))
		require.NoError(t, err)
		cell, err := other.Link(obj) // a cell of an open transaction on tx's object
		require.NoError(t, err)
		own, err := tx.Link(oo) // tx's cell on other's object
		require.NoError(t, err)

		finishing, goOn := make(chan struct{}), make(chan struct{})
		txn.SetCloseHooks(nil, func(idx int) {
			if idx == tx.Index() {
				close(finishing)
				<-goOn
			}
		}, nil)
		defer txn.SetCloseHooks(nil, nil, nil)
		closed := m.closeAsync(sp, tx)
		<-finishing

		ti := txnInfo(t, seg, tx.Index())
		require.Equal(t, txn.StateFinishing, ti.State)
		require.Equal(t, "finishing", ti.State.String())
		require.NotZero(t, ti.ArenaSize, "the arena is still taken")
		snap, err := txn.Inspect(seg, false)
		require.NoError(t, err)
		require.Len(t, snap.Txns, 2, "a finishing transaction is listed as in use")
		require.False(t, tx.Open())

		cases := []struct {
			name string
			call func() error
			want error
		}{
			{"Space.TryPin", func() error { p, err := sp.TryPin(obj); p.Release(); return err }, txn.ErrClosing},
			{"Txn.TryPin", func() error { p, err := tx.TryPin(); p.Release(); return err }, txn.ErrClosing},
			{"Borrow object", func() error { _, err := sp.Borrow(bg, obj); return err }, txn.ErrClosing},
			{"Borrow own cell", func() error { _, err := sp.Borrow(bg, own); return err }, txn.ErrClosing},
			{"Alloc", func() error { _, err := tx.Alloc([]byte("x")); return err }, txn.ErrClosing},
			{"Link into it", func() error { _, err := tx.Link(oo); return err }, txn.ErrClosing},
			{"Link to it", func() error { _, err := other.Link(obj); return err }, txn.ErrClosing},
			{"Reclaim", func() error { return sp.Reclaim(bg, tx.Index()) }, txn.ErrOwnerAlive},
		}
		if !m.barrier {
			// The barrier's leader lock is held by the close: a second
			// Barrier.Close would wait for the lock itself.
			cases = append(cases, struct {
				name string
				call func() error
				want error
			}{"Barrier.Close of a pins-mode txn", func() error {
				b, err := txn.NewBarrier(sp)
				if err != nil {
					return err
				}
				return b.Close(bg, tx)
			}, txn.ErrWrongMode})
		}
		for _, c := range cases {
			require.ErrorIs(t, c.call(), c.want, c.name)
		}

		// Calls that wait for the end: a second close, and a Borrow
		// through other's cell (its copy is made by the end sequence).
		second := make(chan error, 1)
		if !m.barrier {
			go func() { second <- tx.RequestCloseAndWait(bg) }()
		} else {
			second <- txn.ErrClosed
		}
		borrowed := make(chan []byte, 1)
		go func() {
			b, err := sp.Borrow(bg, cell)
			if err != nil {
				borrowed <- []byte(err.Error())
				return
			}
			borrowed <- append([]byte(nil), b.Bytes()...)
			b.Release()
		}()
		waiters := uint32(2) // the second close and the Borrow
		if m.barrier {
			waiters = 1
		}
		waitFor(t, func() bool { return sp.ClosersAsleep(tx.Index()) >= waiters }, "the waiters for the end")
		require.Equal(t, txn.StateFinishing, txnInfo(t, seg, tx.Index()).State)
		close(goOn)
		require.NoError(t, recv(t, closed))
		require.ErrorIs(t, recv(t, second), txn.ErrClosed)
		got := <-borrowed
		require.NoError(t, checkBytes(got, 6), "Borrow through the cell reads the copy: %q", got)
		require.Equal(t, txn.StateClosed, txnInfo(t, seg, tx.Index()).State)
		require.NoError(t, other.RequestCloseAndWait(bg))
		for i := range 4 {
			require.Zero(t, sp.OwnPinCount(i))
		}
	})
}

// TestPromotionIntoFinishingSkipped: a source that closes while its
// destination is Finishing skips it (the cell ends with the destination)
// and destroys the object; neither close waits for the other.
func TestPromotionIntoFinishingSkipped(t *testing.T) {
	seg, _ := newSegment(t, layout.Options{TxnRecords: 4})
	sp := newSpace(t, seg)
	src, dst, _, _ := linked(t, sp, txn.BeginOptions{ArenaBytes: 1024}, txn.BeginOptions{ArenaBytes: 1024}, 3, 20)
	finishing, goOn := make(chan struct{}), make(chan struct{})
	txn.SetCloseHooks(nil, func(idx int) {
		if idx == dst.Index() {
			close(finishing)
			<-goOn
		}
	}, nil)
	defer txn.SetCloseHooks(nil, nil, nil)
	dch := closeAsync(dst)
	<-finishing
	require.NoError(t, src.RequestCloseAndWait(context.Background()))
	ti := txnInfo(t, seg, src.Index())
	assert.Zero(t, ti.Promoted)
	assert.Equal(t, uint32(1), ti.Destroyed)
	close(goOn)
	require.NoError(t, recv(t, dch))
}

// TestReclaimFinishing: a closer killed while Finishing (in the middle of
// its end sequence) leaves the record Finishing; Reclaim resumes it from
// the end sequence, promotions included, whatever the reclaimer's context
// does (it cannot be reopened any more).
func TestReclaimFinishing(t *testing.T) {
	t.Parallel()
	forModes(t, layout.Options{TxnRecords: 4}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		c := testproc.StartWithStdin(t, "die-finishing", m.ownerArgs(path)...)
		r, dst, cell := linkToChild(t, sp, c)
		ti := txnInfo(t, seg, int(r.Txn))
		region, err := seg.Region(layout.KindTxnArena)
		require.NoError(t, err)
		arena := region[ti.ArenaStart : ti.ArenaStart+ti.ArenaSize]

		c.Send(t, "close")
		c.WaitLine(t, "finishing")
		require.Equal(t, txn.StateFinishing, txnInfo(t, seg, int(r.Txn)).State)
		c.Kill(t)

		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a done context does not stop a resumed end sequence
		err = sp.Reclaim(ctx, int(r.Txn))
		if err != nil {
			// The barrier's leader lock is taken under ctx: the record
			// stays Finishing and its dead owner's, for the next try.
			require.True(t, m.barrier, "a pins-mode resume ignores ctx: %v", err)
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, txn.StateFinishing, txnInfo(t, seg, int(r.Txn)).State)
			require.NoError(t, sp.Reclaim(context.Background(), int(r.Txn)))
		}
		ti = txnInfo(t, seg, int(r.Txn))
		require.Equal(t, txn.StateClosed, ti.State)
		assert.Equal(t, uint32(1), ti.Promoted)
		for i, b := range arena {
			require.Equal(t, byte(txn.PoisonByte), b, "byte %d of the reclaimed arena", i)
		}
		b, err := sp.Borrow(context.Background(), cell)
		require.NoError(t, err)
		require.NoError(t, checkBytes(b.Bytes(), 0))
		b.Release()
		require.NoError(t, dst.RequestCloseAndWait(context.Background()))
		snap, err := txn.Inspect(seg, false)
		require.NoError(t, err)
		require.Empty(t, snap.Txns)
		require.Zero(t, snap.BarrierLeader)
	})
}

// dieFinishingHelper: PATH [barrier]: begin, alloc, print the ref; on a
// stdin line, close, and stop at the start of the end sequence (the record
// Finishing), printing "finishing", until killed.
func dieFinishingHelper(args []string) int {
	_, sp, tx, m, err := beginFromArgs(args, pattern(0, 100))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	var once sync.Once
	txn.SetCloseHooks(nil, func(int) {
		once.Do(func() { fmt.Println("finishing") })
		select {}
	}, nil)
	fmt.Println("error", m.closeTx(context.Background(), sp, tx))
	return 1
}

// TestReclaimOfReusedRecord: a Reclaim that read the record's state, then
// found it closed (by another reclaimer) and begun anew by a process that
// died too, closes the new use, whose owner it took over. It used to run
// the close for the generation it read first, fail with ErrStale, and
// keep the ownership it had taken (its give-back compared generations):
// the transaction then looked owned by a live process, and no Reclaim
// could close it while the reclaimer lived.
func TestReclaimOfReusedRecord(t *testing.T) {
	seg, path := newSegment(t, layout.Options{TxnRecords: 4})
	sp := newSpace(t, seg)
	other := newSpace(t, seg)
	bg := context.Background()

	c1 := testproc.Start(t, "own", path)
	r1, err := txn.ParseRef(c1.WaitLine(t, "ref "))
	require.NoError(t, err)
	c1.Kill(t)

	var r2 txn.Ref
	txn.SetReclaimHook(func(idx int) {
		txn.SetReclaimHook(nil)
		// Between the state and the owner: another reclaimer closes the
		// record, a new owner begins on it and dies.
		require.NoError(t, other.Reclaim(bg, idx))
		c2 := testproc.Start(t, "own", path)
		r, err := txn.ParseRef(c2.WaitLine(t, "ref "))
		require.NoError(t, err)
		c2.Kill(t)
		r2 = r
	})
	defer txn.SetReclaimHook(nil)
	err = sp.Reclaim(bg, int(r1.Txn))
	require.Equal(t, r1.Txn, r2.Txn, "the new owner took the same record")
	require.NotEqual(t, r1.Gen, r2.Gen)
	require.NoError(t, err)
	ti := txnInfo(t, seg, int(r2.Txn))
	require.Equal(t, r2.Gen, ti.Gen)
	require.Equal(t, txn.StateClosed, ti.State, "the new use, whose owner is dead, is closed")
}

// TestSpaceCloseDuringCloseKeepsPromotion: a Space closed by another
// goroutine while a close through it runs must not cost the promotion.
// Space.Close found no pin counted (a closer holds none while it waits,
// nor at the start of its end sequence) and gave the row up; the end
// sequence's promotion pin then saw the Space closed and backed out, and
// the destination's cell was skipped: its reader got ErrClosed although
// the destination was open. Close now refuses (ErrPinsHeld) while a close
// through the Space is in progress.
func TestSpaceCloseDuringCloseKeepsPromotion(t *testing.T) {
	seg, _ := newSegment(t, layout.Options{TxnRecords: 4})
	sp, err := txn.Open(seg)
	require.NoError(t, err)
	reader := newSpace(t, seg)
	bg := context.Background()
	src, _, _, cell := linked(t, sp, txn.BeginOptions{ArenaBytes: 4096}, txn.BeginOptions{ArenaBytes: 4096}, 3, 100)

	var closeErr error
	txn.SetCloseHooks(nil, func(idx int) {
		if idx == src.Index() {
			closeErr = sp.Close()
		}
	}, nil)
	defer txn.SetCloseHooks(nil, nil, nil)
	require.NoError(t, src.RequestCloseAndWait(bg))
	require.ErrorIs(t, closeErr, txn.ErrPinsHeld, "Space.Close while a close through it runs")
	assert.Equal(t, uint32(1), txnInfo(t, seg, src.Index()).Promoted)

	b, err := reader.Borrow(bg, cell)
	require.NoError(t, err, "the cell of an open destination after its source's close")
	require.NoError(t, checkBytes(b.Bytes(), 3))
	b.Release()
	require.NoError(t, sp.Close())
}

// TestPinBackOutAfterRowGivenUp: a pin that incremented its counter after
// Space.Close had checked the row, and backs out on seeing the Space
// closed, decrements a row that Close has given up. If another Space
// claimed the row in between, its claim zeroed the counters (taking the
// in-flight increment for a dead process's pin) and the back-out wrapped
// the counter to 2^32-1: pins of the new, live owner, so the
// transaction's close waited for ever and the new Space could never be
// closed (ErrPinsHeld). A row given up by Close is now claimed with its
// counters as they are, and only when no other row is left: the back-outs
// in flight take them back to zero.
func TestPinBackOutAfterRowGivenUp(t *testing.T) {
	for _, lastRow := range []bool{false, true} {
		t.Run(fmt.Sprintf("lastRow=%v", lastRow), func(t *testing.T) {
			seg, _ := newSegment(t, layout.Options{TxnRecords: 4})
			sp, err := txn.Open(seg) // the first row
			require.NoError(t, err)
			owner := newSpace(t, seg)
			tx, err := owner.Begin(txn.BeginOptions{ArenaBytes: 1024})
			require.NoError(t, err)
			ref, err := tx.Alloc(pattern(1, 10))
			require.NoError(t, err)
			if lastRow { // every other row taken: the claim must take the one given up
				for {
					other, err := txn.Open(seg)
					if errors.Is(err, txn.ErrNoPinRow) {
						break
					}
					require.NoError(t, err)
					t.Cleanup(func() { _ = other.Close() })
				}
			}

			checked, goOn := make(chan struct{}), make(chan struct{})
			txn.SetRowCheckedHook(func() {
				txn.SetRowCheckedHook(nil)
				close(checked)
				<-goOn
			})
			defer txn.SetRowCheckedHook(nil)
			closed := make(chan error, 1)
			go func() { closed <- sp.Close() }()
			<-checked // Close found the row empty; it has not given it up yet

			var claimer *txn.Space
			txn.SetPinnedHook(func() {
				txn.SetPinnedHook(nil)
				close(goOn) // the pin's increment is in; Close gives the row up
				require.NoError(t, recv(t, closed))
				c, err := txn.Open(seg)
				require.NoError(t, err)
				claimer = c
			})
			defer txn.SetPinnedHook(nil)
			_, err = sp.TryPin(ref)
			require.ErrorIs(t, err, txn.ErrSpaceClosed)
			if lastRow {
				require.Equal(t, sp.Row(), claimer.Row(), "the new Space took the row given up, the only one left")
			} else {
				require.NotEqual(t, sp.Row(), claimer.Row(), "the new Space took the row with a pin in flight")
			}
			require.Zero(t, claimer.OwnPinCount(tx.Index()), "the back-out left the row's counter")

			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			require.NoError(t, tx.RequestCloseAndWait(ctx))
			require.NoError(t, claimer.Close())
		})
	}
}

// TestBorrowSourceCloseEndsMeanwhile: a Borrow through a cell whose source
// refused its pin as closing, and whose close then ended (the cell is
// promoted) or was called off (the source is open again) before Borrow
// looked at the source's state again, returned ErrClosing, as if a barrier
// kept the reader out. It now looks again and reads the object. Not
// parallel: it sets the package's hook, which the Borrows of parallel
// tests (TestPromotionReaderAcrossClose) read and would run.
func TestBorrowSourceCloseEndsMeanwhile(t *testing.T) {
	for _, finish := range []bool{false, true} {
		t.Run(fmt.Sprintf("finish=%v", finish), func(t *testing.T) {
			seg, _ := newSegment(t, layout.Options{})
			sp, reader := newSpace(t, seg), newSpace(t, seg)
			src, dst, obj, cell := linked(t, sp, txn.BeginOptions{}, txn.BeginOptions{}, 4, 100)
			p, err := sp.TryPin(obj) // holds the source's close in Closing
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			closed := make(chan error, 1)
			go func() { closed <- src.RequestCloseAndWait(ctx) }()
			waitState(t, sp, src.Index(), txn.StateClosing)

			txn.SetSourceRefusedHook(func(int) {
				txn.SetSourceRefusedHook(nil)
				if finish {
					p.Release() // the close drains, promotes the cell, ends
					require.NoError(t, recv(t, closed))
				} else {
					cancel() // the close is called off: the source reopens
					require.ErrorIs(t, recv(t, closed), context.Canceled)
					p.Release()
				}
			})
			defer txn.SetSourceRefusedHook(nil)
			b, err := reader.Borrow(context.Background(), cell)
			require.NoError(t, err)
			require.NoError(t, checkBytes(b.Bytes(), 4))
			b.Release()
			if !finish {
				require.NoError(t, src.RequestCloseAndWait(context.Background()))
			}
			require.NoError(t, dst.RequestCloseAndWait(context.Background()))
		})
	}
}
