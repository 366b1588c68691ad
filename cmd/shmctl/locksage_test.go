package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/lockmgr"
)

// A hold stamped a little after the moment locks measures ages to (the
// lock manager's clock, the time-stamp counter, may run a little ahead of
// time.Now) is 0 seconds old, not a negative age.
func TestLocksAgeOfAHoldNewerThanNow(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tab := &lockTable{where: "test", process: func(lockmgr.HolderInfo, bool) *processJSON { return nil },
		ov: lockmgr.Overview{Resources: []lockmgr.ResourceInfo{{Resource: "job", State: lockmgr.Acquired, Mode: lockmgr.Exclusive,
			Holders: []lockmgr.HolderInfo{{Owner: "w", State: lockmgr.Acquired, AcquiredAt: now.Add(time.Microsecond)}}}}}}
	doc := readLocks(tab, false, now)
	require.Len(t, doc.Resources, 1)
	require.Len(t, doc.Resources[0].Holders, 1)
	assert.Zero(t, doc.Resources[0].Holders[0].AgeSeconds)
}
