package upgrade_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/upgrade"
)

// A process killed while it waits in LockUpgrade holds the upgrade
// holder's word (it waits there for the writer to leave). Writers then
// keep the mutex busy: every Unlock wakes the shared gate, where the next
// upgrade seeker sleeps, so its sleeps never time out. It must take the
// dead seeker's word over all the same, at its first liveness check (every
// 50 ms of waiting, whatever ends the sleeps), and be told of the reclaim.
func TestDeadUpgradeSeekerUnderWriterTraffic(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	w := open(t, seg)
	require.NoError(t, w.Lock())
	seeker := testproc.Start(t, "hold", path, "queued-upgrade")
	seeker.WaitLine(t, "held")
	dead := seeker.Identity(t)
	waitStatus(t, seg, func(st upgrade.Status) bool { return st.Upgrader == dead }, "the seeker to take the upgrade holder's word")
	seeker.Kill(t)
	require.NoError(t, w.Unlock())

	// Writer traffic from another process and from this one.
	writers := testproc.Start(t, "storm", path, "writer")
	writers.WaitLine(t, "ops")
	var writes atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if w.Lock() == nil {
				writes.Add(1)
				_ = w.Unlock()
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	u := open(t, seg)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	before, start := writes.Load(), time.Now()
	require.NoError(t, u.LockUpgradeContext(ctx), "the dead seeker's word is taken over under writer traffic")
	took, during := time.Since(start), writes.Load()-before
	t.Logf("taken over after %v, while this process's writer made %d writes", took, during)
	require.True(t, u.Reclaimed(), "the new upgrade holder is told")
	require.NotZero(t, during, "the writers were busy all along")
	require.NoError(t, u.UnlockUpgrade())
	noTraceOf(t, seg, dead)
}

// The mixed storm: writers, upgraders (half of whose upgrades go on to the
// unique lock) and readers, two processes of each, while the test kills a
// random one with SIGKILL at a random moment and starts another in its
// place. After every kill, every role makes progress again: no dead
// holder of any part of the mutex (writer, upgrade holder, upgrade seeker,
// pending upgrade, reader) keeps one role out while the others go on.
func TestMixedStormEveryRoleProgresses(t *testing.T) {
	t.Parallel()
	seg, path := newSegment(t)
	roles := []string{"writer", "upgrader", "reader"}
	kills := 30
	if long() {
		kills = 300
	}
	type worker struct {
		role string
		c    *testproc.Child
	}
	var workers []*worker
	start := func(role string) *worker {
		c := testproc.Start(t, "storm", path, role)
		c.WaitLine(t, "ops")
		return &worker{role, c}
	}
	for _, r := range roles {
		workers = append(workers, start(r), start(r))
	}
	// ops is the sum of the last counts the live workers of role printed.
	ops := func(role string) int {
		n := 0
		for _, w := range workers {
			if w.role == role {
				n += lastOps(w.c.Out.String())
			}
		}
		return n
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 21))
	for k := range kills {
		time.Sleep(time.Duration(rng.Int64N(int64(30 * time.Millisecond))))
		i := rng.IntN(len(workers))
		victim := workers[i]
		victim.c.Kill(t)
		workers[i] = start(victim.role)
		base := map[string]int{}
		for _, r := range roles {
			base[r] = ops(r)
		}
		for _, r := range roles {
			testproc.WaitFor(t, func() bool { return ops(r) > base[r] }, "the %ss to make progress after kill %d (of a %s)", r, k+1, victim.role)
		}
	}
	for _, w := range workers {
		w.c.RequireRunning(t)
		w.c.Kill(t)
	}
	found, err := upgrade.Check(seg, 0)
	require.NoError(t, err)
	require.Empty(t, found, "the storm left damage (dead holders are none)")
}

// lastOps is the count of the last complete "ops N" line of a storm
// worker's output.
func lastOps(out string) int {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 2; i >= 0; i-- { // the last element follows the last newline
		if rest, ok := strings.CutPrefix(lines[i], "ops "); ok {
			n, _ := strconv.Atoi(rest)
			return n
		}
	}
	return 0
}

// stormHelper runs one role of the mixed storm on mutex 0 until killed:
// PATH ROLE (writer, upgrader or reader). It prints "ops N", the
// operations done so far, at start and then every few milliseconds. A
// writer (or upgrader) told that a dead holder's unique hold was reclaimed
// repairs the shared record; readers may meet a record torn by a writer
// that died (that is what Reclaimed is for), so torn reads are not errors.
func stormHelper(args []string) int {
	seg, m, rec, err := openHelper(args[0])
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer seg.Close()
	var ops atomic.Uint64
	go func() {
		for {
			fmt.Println("ops", ops.Load())
			time.Sleep(2 * time.Millisecond)
		}
	}()
	seed := rand.Uint64()
	for {
		var err error
		switch args[1] {
		case "writer":
			if err = m.Lock(); err == nil {
				rec.write(rec[0].Load()+1, len(rec))
				err = m.Unlock()
			}
		case "upgrader":
			if err = m.LockUpgrade(); err == nil {
				if seed++; seed%2 == 0 {
					if err = m.UpgradeToUnique(); err == nil {
						rec.write(rec[0].Load()+1, len(rec))
						err = m.UniqueToUpgrade()
					}
				}
				if err == nil {
					err = m.UnlockUpgrade()
				}
			}
		case "reader":
			if err = m.LockShared(); err == nil {
				rec.read()
				err = m.UnlockShared()
			}
		default:
			err = fmt.Errorf("unknown role %q", args[1])
		}
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		ops.Add(1)
	}
}

// Short-lived processes each name an upgrade mutex of their own on a
// segment of two, take a shared and a unique hold, and exit without Close,
// one in five killed with SIGKILL: the names of the dead come back, and
// none finds the table full.
func TestDeadProcessesNamesComeBack(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: layout.Options{Slots: 1, Upgrades: 2, UpgradeReaders: 4, LockMgrEntries: 1}})
	require.NoError(t, err)
	defer seg.Close()
	procs := 1000
	if testproc.Race {
		procs = 200
	}
	testproc.Churn(t, procs, 2, "claim-exit", path, "table")
	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	require.Empty(t, found)
}

// claimExitHelper names an upgrade mutex, takes a shared and then a unique
// hold and releases them, and exits or waits to be killed, never closing
// the handle: PATH NAME exit|wait.
func claimExitHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	m, err := upgrade.Named(seg, args[1])
	if err == nil {
		err = m.LockShared()
	}
	if err == nil {
		err = m.UnlockShared()
	}
	if err == nil {
		err = m.Lock()
	}
	if err == nil {
		err = m.Unlock()
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if args[2] == "exit" {
		fmt.Println("ready exiting")
		return 0
	}
	fmt.Println("ready")
	time.Sleep(3 * testTimeout)
	return 1
}
