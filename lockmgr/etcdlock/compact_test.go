package etcdlock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// countingManager is a Manager whose client counts its Range requests.
func countingManager(t *testing.T, prefix string, ranges *atomic.Int64) *etcdlock.Manager {
	t.Helper()
	return interceptedManager(t, prefix,
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/Range") {
				ranges.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})
}

// TestLostAfterCompaction: the Lost watch of a hold granted before a
// compaction starts below the compacted revision; it looks at the key
// and watches on from there, once, instead of watching again from
// revision 1 (the compacted answer's header says 0) in a loop of
// compacted watches and reads for as long as the hold lives; and it still
// sees the hold's end.
func TestLostAfterCompaction(t *testing.T) {
	// Not parallel: a compaction of the shared server would break other
	// tests' watches from past revisions (which is what they must survive
	// too, but not as a surprise).
	p := newPrefix(t)
	var ranges atomic.Int64
	m := countingManager(t, p, &ranges)
	raw := newClient(t)
	_, err := m.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	resp, err := raw.Put(testCtx(t), p+"filler", "")
	require.NoError(t, err)
	_, err = raw.Compact(testCtx(t), resp.Header.Revision)
	require.NoError(t, err)
	before := ranges.Load()
	lost, err := m.Lost("r", "a")
	require.NoError(t, err)
	time.Sleep(time.Second)
	require.LessOrEqual(t, ranges.Load()-before, int64(2), "reads of the hold's key by its Lost watch in 1 s")
	select {
	case <-lost:
		t.Fatal("lost while held")
	default:
	}
	_, err = raw.Delete(testCtx(t), p+"r/r/h/x/a")
	require.NoError(t, err)
	testproc.Receive(t, lost, "the lost signal of a deleted hold")
}
