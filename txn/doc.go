// Package txn gives processes that share a segment transactions with arenas
// in the segment: a transaction owns a region of the segment's txn arena,
// its owner allocates objects (byte blobs) in it, other goroutines and
// processes read them under pins, and the owner closes the transaction only
// when no pin is left. It offers per-transaction pins and a global close
// barrier, the close protocol, and promotions: a transaction keeps a copy
// of another's object alive past that one's close through a cell, one
// level of indirection that the reader follows ("double dipping"). All of
// it works across processes.
//
// Objects are named by Ref values (transaction index, generation, offset),
// never by pointers, so a Ref can be passed to another process as text
// (Ref.String, ParseRef). A Ref to a closed transaction fails cleanly with
// ErrClosed, one to a record that was closed and reused with ErrStale.
//
// Reading takes a pin. TryPin increments the pin count, then re-checks the
// state and backs out if the transaction began closing meanwhile (the
// try-pin); Borrow pins and resolves a Ref in one step and returns an
// SRef, a scoped read borrow, valid until its Release. The owner
// reads through Txn.TryPin and Txn.Borrow, so that its close can refuse
// (ErrCloserPinned) rather than wait for its own pins.
//
// Closing: RequestCloseAndWait flips the transaction to Closing (new pins
// fail) and sleeps on a futex until every pin is released; a cancelled
// context reopens it then. Once drained it turns Finishing, which cannot be
// cancelled any more, finalizes promotions, destroys the unpromoted
// objects, poisons and frees the arena and marks the record Closed. Pins are counted per process (per Space
// handle), so the pins of a process that died no longer count and a close
// never waits forever on a dead reader; a transaction whose owner died is
// closed by Space.Reclaim (or shmctl reclaim; shmctl txns lists them).
//
// Promotions: Txn.Link stores a reference to an object of another
// transaction in the destination transaction, as a cell (the double-dipping
// indirection) that reserves room for a copy. When the source closes, it
// copies the object into the cell before its arena is freed and rebinds the
// cell, so a reader of the cell's Ref reads the copy from then on. It does
// so while the destination is open or closing (whose close may still be
// cancelled), and skips only a destination already finishing, whose cells
// end with it; a promotion is never lost.
//
// After the segment's Close (shm.Segment.Close) every operation of a
// Space, Txn or Barrier opened on it, and Inspect, returns shm.ErrClosed
// and changes nothing in the file, including one asleep at the time (at
// its next liveness check, within 50 ms), which first undoes what it did
// there: a close it began is called off, a barrier it raised comes down.
// An operation that the Close comes in the middle of either completes, its
// effect real in the file, or fails with shm.ErrClosed having left nothing.
// The releases still reach the file: Pin.Release, SRef.Release,
// Txn.RequestCloseAndWait (a close begun after the segment's Close runs to
// its end) and Space.Close, which gives the pin row back. A barrier-mode
// transaction cannot be closed after the segment's Close (the barrier's
// leader lock is an acquisition): it stays open, owned by this process,
// until it exits (Space.Reclaim or shmctl reclaim closes it then).
//
//	seg, _ := shm.OpenOrCreate("jobs", shm.Options{})
//	sp, _ := txn.Open(seg)
//	defer sp.Close()
//	tx, _ := sp.Begin(txn.BeginOptions{})
//	ref, _ := tx.Alloc([]byte("hello"))
//	// any process: sp.Borrow(ctx, ref) ... b.Bytes() ... b.Release()
//	err := tx.RequestCloseAndWait(ctx)
package txn
