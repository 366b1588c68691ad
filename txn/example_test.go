package txn_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// exampleSegment creates a segment for an example; the returned function
// closes and removes it.
func exampleSegment(name string) (*shm.Segment, func()) {
	path := fmt.Sprintf("/dev/shm/shmlock-example-txn-%s-%d", name, os.Getpid())
	seg, err := shm.Create(path, shm.Options{})
	if err != nil {
		panic(err)
	}
	return seg, func() { _ = seg.Close(); _ = shm.Remove(path) }
}

// The owner of a transaction allocates an object in its arena, a reader
// borrows it under a pin, and the close waits for the pin. The README's
// "Transactions" section is quickStart.
func Example() {
	seg, done := exampleSegment("basic")
	defer done()
	if err := quickStart(context.Background(), seg); err != nil {
		fmt.Println(err)
	}
	// Output:
	// hello
	// after the close: true
}

func quickStart(ctx context.Context, seg *shm.Segment) error {
	sp, err := txn.Open(seg) // one per process: its pins are counted in its own row
	if err != nil {
		return err
	}
	defer sp.Close()

	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 4096})
	if err != nil {
		return err
	}
	ref, err := tx.Alloc([]byte("hello")) // a Ref is (record, generation, offset), never a pointer
	if err != nil {
		return err
	}

	// Any process, given ref (ref.String() and txn.ParseRef carry it as text):
	b, err := sp.Borrow(ctx, ref) // pins the transaction; ErrClosing, ErrClosed, ErrStale once it ends
	if err != nil {
		return err
	}
	fmt.Printf("%s\n", b.Bytes()) // valid and unchanging until Release
	b.Release()

	// The owner: new pins fail from here; sleeps on a futex until the last pin is released,
	// then finalizes promotions, destroys the rest, poisons and frees the arena.
	if err := tx.RequestCloseAndWait(ctx); err != nil {
		return err
	}
	_, err = sp.Borrow(ctx, ref)
	fmt.Println("after the close:", errors.Is(err, txn.ErrClosed))
	return nil
}

// A reference stored across transactions (Link) is promoted when its
// source closes first: the reader of the cell reads the copy.
func ExampleTxn_Link() {
	seg, done := exampleSegment("link")
	defer done()
	ctx := context.Background()
	sp, err := txn.Open(seg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sp.Close()

	src, _ := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
	dst, _ := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
	obj, _ := src.Alloc([]byte("survives its transaction"))
	cell, err := dst.Link(obj)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := src.RequestCloseAndWait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_, err = sp.Borrow(ctx, obj)
	fmt.Println("original:", err)
	b, err := sp.Borrow(ctx, cell)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("through the cell: %s\n", b.Bytes())
	b.Release()
	_ = dst.RequestCloseAndWait(ctx)
	// Output:
	// original: txn: transaction is closed
	// through the cell: survives its transaction
}

// A transaction begun in barrier mode is closed through the global
// barrier, in a batch with others.
func ExampleBarrier_Close() {
	seg, done := exampleSegment("barrier")
	defer done()
	sp, err := txn.Open(seg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sp.Close()
	bar, err := txn.NewBarrier(sp)
	if err != nil {
		fmt.Println(err)
		return
	}
	a, _ := sp.Begin(txn.BeginOptions{Barrier: true})
	b, _ := sp.Begin(txn.BeginOptions{Barrier: true})
	r, _ := a.Alloc([]byte("x"))
	p, err := sp.TryPin(r) // a global pin: the caller need not know
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Release()
	fmt.Println(bar.Close(context.Background(), a, b))
	fmt.Println(a.Open(), b.Open())
	// Output:
	// <nil>
	// false false
}

// The closer must not hold a pin on the transaction it closes: it would
// wait for itself. The error changes nothing.
func ExampleTxn_RequestCloseAndWait_closerPinned() {
	seg, done := exampleSegment("pinned")
	defer done()
	sp, err := txn.Open(seg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sp.Close()
	tx, _ := sp.Begin(txn.BeginOptions{})
	p, _ := tx.TryPin()
	fmt.Println(tx.RequestCloseAndWait(context.Background()))
	p.Release()
	fmt.Println(tx.Open(), tx.RequestCloseAndWait(context.Background()))
	// Output:
	// txn: the closer holds a pin on the transaction it closes
	// true <nil>
}
