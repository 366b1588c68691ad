package shm_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func init() {
	// stop-mid-claim PATH NAME: claim NAME, stopping itself (SIGSTOP)
	// between the claim's two counts, the directory's lock held.
	helpers["stop-mid-claim"] = func(args []string) int {
		seg, err := shm.Open(args[0], shm.Options{})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		defer seg.Close()
		shm.SetTestHookBetweenSteps(func() {
			fmt.Println("stopping")
			if err := testproc.StopSelf(); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
		})
		_, err = seg.Claim(layout.KindOwnerSlots, args[1])
		fmt.Println("claimed", err)
		return 0
	}
}

// AdoptUse waits for the directory's lock, which a process stopped
// mid-claim keeps: ctx bounds the wait, and AdoptUse then fails naming the
// holder and records nothing. Without a bound (context.Background) it
// waits until the holder dies, then takes the lock over and records the
// use. Before AdoptUse took a ctx, every call waited so, and spinlock.Open
// of a claim without a mode, and shmctl unlock --force and reclaim through
// it, hung for as long as the holder stayed stopped. A bounded call that
// queues behind the unbounded one in the same process gives up as well:
// before, it waited for that one's turn without a bound.
func TestAdoptUseHolderStoppedMidClaim(t *testing.T) {
	t.Parallel()
	seg, path := create(t, shm.Options{Options: layout.Options{Slots: 4}})
	i, err := seg.Claim(layout.KindOwnerSlots, "unsaid")
	require.NoError(t, err)
	c := testproc.Start(t, "stop-mid-claim", path, "other")
	c.WaitLine(t, "stopping")
	c.WaitStopped(t)

	deadline, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for _, tc := range []struct {
		ctx  context.Context
		want error
	}{{deadline, context.DeadlineExceeded}, {cancelled, context.Canceled}} {
		err := seg.AdoptUse(tc.ctx, layout.KindOwnerSlots, i, 1)
		require.ErrorIs(t, err, tc.want)
		assert.Contains(t, err.Error(), fmt.Sprintf("held by live process %d", c.PID()))
		use, err := seg.ClaimUse(layout.KindOwnerSlots, i)
		require.NoError(t, err)
		require.Zero(t, use, "a failed AdoptUse recorded the use")
	}

	done := make(chan error, 1)
	go func() { done <- seg.AdoptUse(context.Background(), layout.KindOwnerSlots, i, 2) }()
	testproc.WaitFor(t, seg.RegistryQueued, "the unbounded AdoptUse to queue for the lock")
	select {
	case err := <-done:
		t.Fatalf("AdoptUse returned (%v) while a live process held the directory's lock", err)
	default:
	}
	// A bounded call behind it in this process gives up too.
	ctx, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel3()
	err = seg.AdoptUse(ctx, layout.KindOwnerSlots, i, 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), fmt.Sprintf("held by process %d", c.PID()))
	c.Kill(t)
	c.WaitKilled(t)
	require.NoError(t, testproc.Receive(t, done, "AdoptUse once the holder is dead"))
	use, err := seg.ClaimUse(layout.KindOwnerSlots, i)
	require.NoError(t, err)
	assert.Equal(t, uint32(2), use)
}
