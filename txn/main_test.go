package txn_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/txn"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

// testTimeout bounds every wait of these tests; it only turns a hang into
// a failure.
const testTimeout = testproc.Timeout

// helpers run in child processes (testproc re-executes this binary).
// Each prints facts on stdout, one per line.
var helpers = map[string]func(args []string) int{
	"reader":    readerHelper,   // PATH REF: borrow REF in a loop until it fails closed
	"pin-hold":  pinHoldHelper,  // PATH REF: pin and sleep until killed
	"own":       ownHelper,      // PATH: begin a txn, alloc, print it, sleep until killed
	"close-cpu": closeCPUHelper, // PATH [barrier]: begin, print a ref, close on a stdin line, print its CPU time
	"bench-pin": benchPinHelper, // PATH REF|atomic N: N TryPin+Release (or atomic add+sub), print the time
	// PATH [barrier]: begin, print a ref, close on a stdin line and stop Finishing, until killed
	"die-finishing": dieFinishingHelper,
	"alloc-hold":    allocHoldHelper, // PATH: hold the allocator lock until killed
}

func newSegment(tb testing.TB, opts layout.Options) (*shm.Segment, string) {
	tb.Helper()
	if opts.Slots == 0 {
		opts.Slots = 8
	}
	if opts.TxnRecords == 0 {
		opts.TxnRecords = 8
	}
	if opts.TxnArenaBytes == 0 {
		opts.TxnArenaBytes = 64 << 10
	}
	path := testproc.SegmentPath(tb)
	seg, err := shm.Create(path, shm.Options{Options: opts})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = seg.Close() })
	return seg, path
}

func newSpace(tb testing.TB, seg *shm.Segment) *txn.Space {
	tb.Helper()
	sp, err := txn.Open(seg)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = sp.Close() })
	return sp
}

// pattern is the content of test object i: never the poison byte.
func pattern(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte('a' + (i+j)%26)
	}
	return b
}

// linked begins a source and a destination transaction in sp, allocates
// pattern(i, n) in the source and links it from the destination: the
// object and its promotion cell.
func linked(t *testing.T, sp *txn.Space, srcOpts, dstOpts txn.BeginOptions, i, n int) (src, dst *txn.Txn, obj, cell txn.Ref) {
	t.Helper()
	src, err := sp.Begin(srcOpts)
	require.NoError(t, err)
	dst, err = sp.Begin(dstOpts)
	require.NoError(t, err)
	obj, err = src.Alloc(pattern(i, n))
	require.NoError(t, err)
	cell, err = dst.Link(obj)
	require.NoError(t, err)
	return src, dst, obj, cell
}

// closingLink is a linked source and destination whose source's close is
// asleep, held up by a pin of its object.
type closingLink struct {
	src, dst *txn.Txn
	cell     txn.Ref
	pin      txn.Pin
	closed   <-chan error // the source's close
}

// pinnedClosingLink sets up a closingLink in sp, the object pattern(i, 30):
// the source's closer sleeps until pin is released.
func pinnedClosingLink(t *testing.T, sp *txn.Space, i int) closingLink {
	t.Helper()
	src, dst, obj, cell := linked(t, sp, txn.BeginOptions{}, txn.BeginOptions{}, i, 30)
	p, err := sp.TryPin(obj)
	require.NoError(t, err)
	closed := closeAsync(src)
	waitFor(t, func() bool { return sp.ClosersAsleep(src.Index()) == 1 }, "the source's closer to sleep")
	return closingLink{src: src, dst: dst, cell: cell, pin: p, closed: closed}
}

// childRef is the ref of the object child c prints as its "ref " line.
func childRef(t *testing.T, c *testproc.Child) txn.Ref {
	t.Helper()
	r, err := txn.ParseRef(c.WaitLine(t, "ref "))
	require.NoError(t, err)
	return r
}

// linkToChild reads the ref a child prints of its transaction's object and
// links it from a new transaction of sp: the child's object, its cell.
func linkToChild(t *testing.T, sp *txn.Space, c *testproc.Child) (r txn.Ref, dst *txn.Txn, cell txn.Ref) {
	t.Helper()
	r = childRef(t, c)
	dst, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024})
	require.NoError(t, err)
	cell, err = dst.Link(r)
	require.NoError(t, err)
	return r, dst, cell
}

// checkBytes reports whether b is pattern(i, len(b)).
func checkBytes(b []byte, i int) error {
	for j, c := range b {
		if c == txn.PoisonByte {
			return fmt.Errorf("byte %d is poison", j)
		}
		if c != byte('a'+(i+j)%26) {
			return fmt.Errorf("byte %d: got %#x, want %#x", j, c, byte('a'+(i+j)%26))
		}
	}
	return nil
}

// fail reports a helper's error in the form the tests show ("error ..."
// on stdout) and returns its exit status.
func fail(err error) int {
	fmt.Println("error", err)
	return 1
}

func openHelper(path string) (*shm.Segment, *txn.Space, error) {
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		return nil, nil, err
	}
	sp, err := txn.Open(seg)
	if err != nil {
		_ = seg.Close()
		return nil, nil, err
	}
	return seg, sp, nil
}

func readerHelper(args []string) int {
	seg, sp, err := openHelper(args[0])
	if err != nil {
		return fail(err)
	}
	defer seg.Close()
	ref, err := txn.ParseRef(args[1])
	if err != nil {
		return fail(err)
	}
	inside, err := insideWord(seg)
	if err != nil {
		return fail(err)
	}
	readsWord, err := sharedWord(seg, readsSlot)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	reads := 0
	for {
		b, err := sp.Borrow(ctx, ref)
		if err != nil {
			if errors.Is(err, txn.ErrClosed) || errors.Is(err, txn.ErrClosing) {
				break
			}
			return fail(err)
		}
		inside.Add(1) // counted only while the pin is held
		// Read it twice, a scheduling point apart: a close that freed the
		// arena under the pin would show as poison or a change.
		for range 2 {
			if err := checkBytes(b.Bytes(), 0); err != nil {
				return fail(err)
			}
			runtime.Gosched()
		}
		inside.Add(^uint64(0))
		b.Release()
		readsWord.Add(1)
		reads++
		if reads == 1 {
			fmt.Println("ready")
		}
	}
	if reads == 0 {
		fmt.Println("ready")
	}
	fmt.Println("reads", reads)
	if err := sp.Close(); err != nil {
		return fail(err)
	}
	return 0
}

func pinHoldHelper(args []string) int {
	_, sp, err := openHelper(args[0])
	if err != nil {
		return fail(err)
	}
	ref, err := txn.ParseRef(args[1])
	if err != nil {
		return fail(err)
	}
	for range 3 { // several pins: all must stop counting
		if _, err := sp.TryPin(ref); err != nil {
			return fail(err)
		}
	}
	fmt.Println("pinned")
	select {}
}

func allocHoldHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return fail(err)
	}
	sp, err := txn.Open(seg)
	if err != nil {
		return fail(err)
	}
	l := txn.AllocLock(sp)
	var g spinlock.Guard
	if err := g.Lock(l, spinlock.NewHolder()); err != nil {
		return fail(err)
	}
	fmt.Println("locked")
	select {}
}

func ownHelper(args []string) int {
	_, sp, err := openHelper(args[0])
	if err != nil {
		return fail(err)
	}
	tx, err := sp.Begin(txn.BeginOptions{ArenaBytes: 1024, Barrier: len(args) > 1 && args[1] == "barrier"})
	if err != nil {
		return fail(err)
	}
	ref, err := tx.Alloc(pattern(0, 100))
	if err != nil {
		return fail(err)
	}
	fmt.Println("ref", ref)
	select {}
}

func benchPinHelper(args []string) int {
	seg, sp, err := openHelper(args[0])
	if err != nil {
		return fail(err)
	}
	defer seg.Close()
	defer sp.Close()
	n, err := strconv.Atoi(args[2])
	if err != nil {
		return fail(err)
	}
	if args[1] == "atomic" {
		return benchAtomic(seg, n)
	}
	ref, err := txn.ParseRef(args[1])
	if err != nil {
		return fail(err)
	}
	readyGo()
	start := time.Now()
	for range n {
		p, err := sp.TryPin(ref)
		if err != nil {
			return fail(err)
		}
		p.Release()
	}
	fmt.Println("ns", time.Since(start).Nanoseconds())
	return 0
}

// waitFor polls cond until it holds, failing after testTimeout.
var waitFor = testproc.WaitFor

// txnInfo returns what Inspect says of record idx.
func txnInfo(tb testing.TB, seg *shm.Segment, idx int) txn.TxnInfo {
	tb.Helper()
	snap, err := txn.Inspect(seg, true)
	require.NoError(tb, err)
	for _, ti := range snap.Txns {
		if ti.Index == idx {
			return ti
		}
	}
	tb.Fatalf("no record %d", idx)
	return txn.TxnInfo{}
}

// closeAsync closes tx in a goroutine; the channel gets its result.
func closeAsync(tx *txn.Txn) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- tx.RequestCloseAndWait(context.Background()) }()
	return ch
}

func recv(tb testing.TB, ch <-chan error) error {
	tb.Helper()
	return testproc.Receive(tb, ch, "a result")
}

// insideWord is a word every process of a test shares, outside anything
// package txn uses: owner slot insideSlot's Token. Readers count
// themselves in it while they hold a pin.
func insideWord(seg *shm.Segment) (*atomic.Uint64, error) { return sharedWord(seg, insideSlot) }

// sharedWord is the Token word of owner slot i.
func sharedWord(seg *shm.Segment, i int) (*atomic.Uint64, error) {
	slot, err := seg.Slot(i)
	if err != nil {
		return nil, err
	}
	return &slot.Token, nil
}

// The owner slots whose Token words the tests share between processes;
// package txn claims the first free slots for its locks, and newSegment
// makes 8.
const (
	readsSlot  = 5 // reads done by all readers
	insideSlot = 6 // readers holding a pin
)

// benchAtomic is the peer of bench-pin: an atomic add and sub of a word
// every process shares (owner slot 7's Token, unused by these tests).
func benchAtomic(seg *shm.Segment, n int) int {
	slot, err := seg.Slot(7)
	if err != nil {
		return fail(err)
	}
	readyGo()
	start := time.Now()
	for range n {
		slot.Token.Add(1)
		slot.Token.Add(^uint64(0))
	}
	fmt.Println("ns", time.Since(start).Nanoseconds())
	return 0
}

// readyGo is the start of a bench-pin helper: it prints "ready" and waits
// for the parent's line on stdin, so that all the helpers start together.
func readyGo() {
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// rounds is n, or long with SHMLOCK_LONG=1.
func rounds(n, long int) int {
	if testproc.Long() {
		return long
	}
	return n
}
