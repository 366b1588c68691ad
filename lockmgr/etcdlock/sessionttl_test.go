package etcdlock_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// TestSessionTTLLimit: a session TTL above etcd's longest lease is the
// caller's mistake (ErrBadOptions), as a hold's TTL is, not the server's
// refusal reported as ErrUnavailable.
func TestSessionTTLLimit(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{etcdlock.MaxTTL + time.Second, math.MaxInt64} {
		_, err := etcdlock.New(testCtx(t), newClient(t), etcdlock.Options{Prefix: newPrefix(t), SessionTTL: ttl})
		require.ErrorIs(t, err, lockmgr.ErrBadOptions, "session TTL %v", ttl)
	}
}
