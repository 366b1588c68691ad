package lockmgr_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/lockmgr"
)

// A TTL so long that the expiry time overflows (math.MaxInt64, "for ever")
// is a hold that does not end: the sum wrapped to a time long past, so the
// hold was expired the moment it was granted and a second owner got the
// exclusive lock at once. Acquire and Refresh both.
func TestHugeTTLDoesNotExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, ttl := range []time.Duration{math.MaxInt64, math.MaxInt64 / 2, math.MaxInt64 - time.Second} {
		m, _ := newManager(t, 8, lockmgr.Options{})
		info, err := m.Acquire(ctx, "res", "alice", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: ttl})
		require.NoError(t, err, "ttl %v", ttl)
		require.True(t, info.ExpiresAt.After(info.AcquiredAt), "ExpiresAt %v, AcquiredAt %v", info.ExpiresAt, info.AcquiredAt)
		_, err = m.Acquire(ctx, "res", "bob", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.ErrorIs(t, err, lockmgr.ErrResourceLocked, "ttl %v: alice holds it", ttl)

		info, err = m.Refresh("res", "alice", ttl)
		require.NoError(t, err)
		require.True(t, info.ExpiresAt.After(info.AcquiredAt))
		_, err = m.Acquire(ctx, "res", "bob", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		require.ErrorIs(t, err, lockmgr.ErrResourceLocked, "ttl %v: alice still holds it after Refresh", ttl)
		require.NoError(t, m.Release("res", "alice"), "the hold did not time out")
	}
}
