package dashboard_test

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

var helpers = map[string]func(args []string) int{
	// spin PATH NAME: take the spinlock NAME of segment PATH, print
	// "held", and at the first line read from stdin release it and print
	// "released".
	"spin": spinHelper,
}

func spinHelper(args []string) int {
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		return fail(err)
	}
	defer seg.Close()
	l, err := spinlock.Named(seg, args[1], spinlock.PIDTID)
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	g, err := l.Lock(spinlock.NewHolder())
	if err != nil {
		return fail(err)
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	if err := g.Release(); err != nil {
		return fail(err)
	}
	fmt.Println("released")
	return 0
}

// sizes are the test segments' tables: small ones.
var sizes = layout.Options{Slots: 4, Upgrades: 2, UpgradeReaders: 2, TxnRecords: -1, LockMgrEntries: 4, DataBytes: 4096}

// newSegment creates a segment that is removed when the test ends.
func newSegment(t *testing.T) *shm.Segment {
	t.Helper()
	seg, err := shm.Create(testproc.SegmentPath(t), shm.Options{Options: sizes})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	return seg
}

// openRO opens path read-only, as a monitor does, until the test ends.
func openRO(t *testing.T, path string) *shm.Segment {
	t.Helper()
	seg, err := shm.Open(path, shm.Options{ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close() })
	return seg
}
