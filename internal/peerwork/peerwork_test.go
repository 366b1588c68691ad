package peerwork_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/peerwork"
)

// One worker's rw90: every operation is a read or a write, a tenth or so
// writes, each write bumps all eight words, and nothing is torn.
func TestRW90(t *testing.T) {
	var mu sync.RWMutex
	var rec [8]uint64
	reads, writes, torn := peerwork.RW90(&mu, &rec, 10000, 1)
	require.Equal(t, uint64(10000), reads+writes)
	require.Zero(t, torn)
	require.InDelta(t, 1000, float64(writes), 150)
	for k := range rec {
		require.Equal(t, writes, rec[k], "word %d", k)
	}
	// The same seed gives the same sequence.
	var again [8]uint64
	_, w2, _ := peerwork.RW90(&mu, &again, 10000, 1)
	require.Equal(t, writes, w2)
}
