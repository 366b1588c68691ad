package txn_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// A closer whose transaction stays pinned for a second by another process
// sleeps: it uses a small fraction of a core. Not a speed test: a closer
// that sleeps uses next to nothing however slow the machine, one that
// polls uses all the CPU it is given. Not parallel, so that it runs alone.
func TestWaitingCloserSleeps(t *testing.T) {
	forModes(t, layout.Options{}, func(t *testing.T, m mode, seg *shm.Segment, path string, sp *txn.Space) {
		c := testproc.StartWithStdin(t, "close-cpu", m.ownerArgs(path)...)
		r := childRef(t, c)
		p, err := sp.TryPin(r)
		require.NoError(t, err)
		c.Send(t, "close")
		waitFor(t, func() bool { return txnInfo(t, seg, int(r.Txn)).State == txn.StateClosing }, "the close to start")
		testproc.RequireSlept(t, c, "waiting closer", func() error { p.Release(); return nil })
	})
}

// closeCPUHelper begins a transaction (PATH [barrier]), prints a Ref,
// waits for a line on stdin, closes it and prints the CPU time the close
// took.
func closeCPUHelper(args []string) int {
	seg, sp, tx, m, err := beginFromArgs(args, []byte("x"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer seg.Close()
	defer sp.Close()
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	w, err := testproc.StartWaiting()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := m.closeTx(ctx, sp, tx); err != nil {
		fmt.Println("error", err)
		return 1
	}
	if err := w.Report(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	return 0
}
