package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/testproc"
)

// Two forces of a live writer's hold, from two processes, both read the
// word and the holder id just before the writer's Unlock clears the id.
// The first takes the word, fails on the id and gives the word back, and
// the release, which waited for it, must then free the word. Overlapping,
// the second took the word from the first's give-back, and the release,
// which cannot tell it from a waiter that took a dead forcer's word over,
// ended before the second gave the word back: the word stayed with the
// releasing process, held by nobody, and no other process could lock
// until it exited. Forces serialize (ForceUnlock): the second makes its
// reads once the first is done, finds the id gone, and leaves the word.
// The helpers stop at the named points; the first forcer's give-back and
// the second's run happen inside the release's liveness check of the
// first, so the interleaving is exact.
func TestTwoForcesDuringRelease(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	h, _ := Open(seg, 0)
	if err := h.Lock(); err != nil {
		t.Fatal(err)
	}
	e := h.e
	a := testproc.StartWithStdin(t, "force-step", seg.Path(), "loaded,took")
	a.WaitLine(t, "loaded") // the first forcer has read the hold
	aID := a.Identity(t)
	b := testproc.StartWithStdin(t, "force-step", seg.Path(), "loaded,took")
	bID := b.Identity(t)
	// The second forcer has read the hold too, or waits for the first's
	// lock and has read nothing.
	testproc.WaitFor(t, func() bool {
		_, loaded := testproc.Line(b.Out.String(), "loaded")
		_, busy := testproc.Line(b.Out.String(), "busy")
		return loaded || busy
	}, "the second forcer to read the hold or wait")

	w := e.Writer.Load() // Unlock's ownership check
	if !h.holdsWriterWord(w) {
		t.Fatal("not held")
	}
	h.endUniqueHold(e, w) // the holder id goes
	a.Send(t, "go")
	a.WaitLine(t, "took") // the first forcer has the word
	checked := false
	h.alive = func(id uint64) bool {
		if id == aID && !checked { // the release waits for the first forcer
			checked = true
			a.Send(t, "go") // it fails on the id, gives the word back, ends
			a.WaitOK(t)
			b.Send(t, "go") // the second goes on: takes the word, or finds the id gone
			testproc.WaitFor(t, func() bool {
				select {
				case <-b.Done():
					return true
				default:
					return writerID(e.Writer.Load()) == bID
				}
			}, "the second forcer to take the word or end")
		}
		return seg.OwnerAlive(id)
	}
	h.freeWriterWord(e, w) // Unlock's last step
	if !checked {
		t.Fatal("the release did not wait for the first forcer")
	}
	select {
	case <-b.Done():
	default:
		b.Send(t, "go") // it fails on the id and gives the word back
	}
	if out := b.WaitOK(t); !strings.Contains(out, "forced 0 ") {
		t.Errorf("the second forcer freed a hold:\n%s", out)
	}
	if got := e.Writer.Load(); got != 0 {
		t.Fatalf("Writer word %#x after the release and both forces, held by nobody", got)
	}
	if out := testproc.Start(t, "lock-once", seg.Path()).WaitOK(t); !strings.Contains(out, "locked") {
		t.Fatalf("another process's Lock after the release:\n%s", out)
	}
}

// Two ForceUnlock calls of one mutex from two processes serialize: while
// the first is stopped inside its force, the second waits, reading
// nothing, and a third in this process with a deadline gives up, having
// changed nothing. The first frees the hold, the second then finds it
// free.
func TestForcesSerialize(t *testing.T) {
	t.Parallel()
	seg := newInternalSegment(t, 1)
	h, _ := Open(seg, 0)
	if err := h.Lock(); err != nil {
		t.Fatal(err)
	}
	a := testproc.StartWithStdin(t, "force-step", seg.Path(), "loaded")
	a.WaitLine(t, "loaded") // stopped inside its force
	b := testproc.StartWithStdin(t, "force-step", seg.Path(), "-")
	b.WaitLine(t, "busy")
	if _, loaded := testproc.Line(b.Out.String(), "loaded"); loaded {
		t.Fatalf("the second force read the hold while the first ran:\n%s", b.Out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := ForceUnlockContext(ctx, seg, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a force with a deadline while another runs: %v, want the deadline", err)
	}
	if !h.holdsWriter() {
		t.Fatal("the hold went while the first force was stopped")
	}
	a.Send(t, "go")
	if out := a.WaitOK(t); !strings.Contains(out, fmt.Sprintf("forced %x 0", h.pid)) {
		t.Errorf("the first force: want the hold freed:\n%s", out)
	}
	if out := b.WaitOK(t); !strings.Contains(out, "forced 0 0") {
		t.Errorf("the second force: want nothing freed:\n%s", out)
	}
	if err := h.Unlock(); !errors.Is(err, ErrNotHeld) {
		t.Errorf("the forced holder's own release: %v, want ErrNotHeld", err)
	}
}

// Two goroutines that force one mutex through the same Segment serialize
// as processes do: each force takes the lock on an open of the file of its
// own, not on the Segment's, which the goroutines share. Not parallel: it
// sets the package's hooks.
func TestForcesSerializeInProcess(t *testing.T) {
	seg := newInternalSegment(t, 1)
	h, _ := Open(seg, 0)
	if err := h.Lock(); err != nil {
		t.Fatal(err)
	}
	loaded, resume := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	defer SetForceHooks(func() {}, func() {
		if first.CompareAndSwap(false, true) { // the first force stops here
			close(loaded)
			<-resume
		}
	}, func() {})()
	goOn := sync.OnceFunc(func() { close(resume) })
	defer goOn()
	done := make(chan error, 1)
	go func() {
		_, err := ForceUnlock(seg, 0)
		done <- err
	}()
	<-loaded // stopped inside its force
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := ForceUnlockContext(ctx, seg, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a force of the same Segment while another runs: %v, want the deadline", err)
	}
	if !h.holdsWriter() {
		t.Fatal("the hold went while the first force was stopped")
	}
	goOn()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f, err := ForceUnlockContext(t.Context(), seg, 0)
	if err != nil || !f.Empty() {
		t.Fatalf("a force after the first: %+v, %v; want nothing to free", f, err)
	}
}
