package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// unlock --force frees a live holder's lock of each kind: the holder's own
// release then fails with its not-owner error, and the generation
// (version) strictly grows past the holder's fencing token.
func TestUnlockForce(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	run := func(name, kind string) unlockJSON {
		t.Helper()
		r := shmctl(t, false, "unlock", seg.Path(), name, "--force", "--json")
		require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
		var doc unlockJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		assert.Equal(t, docHeader{Schema: 1, Command: "unlock"}, doc.docHeader)
		assert.Equal(t, kind, doc.Kind)
		assert.Equal(t, "freed", doc.Action)
		require.Len(t, doc.Holders, 1)
		checkStarted(t, doc.Holders[0].Process)
		return doc
	}
	gen := func(doc unlockJSON) uint64 {
		require.NotNil(t, doc.Generation)
		g, err := strconv.ParseUint(*doc.Generation, 10, 64)
		require.NoError(t, err)
		return g
	}
	self := process(proc.Self(), "alive")

	l, err := spinlock.Named(seg, "queue", spinlock.PIDTID)
	require.NoError(t, err)
	me := spinlock.NewHolder()
	_, err = l.Lock(me)
	require.NoError(t, err)
	before := l.Generation()
	doc := run("queue", unlockSlot)
	assert.Greater(t, gen(doc), before)
	assert.Equal(t, unlockHolderJSON{Role: "holder", Process: self, TID: ptr(fmt.Sprint(me.TID))}, doc.Holders[0])
	assert.ErrorIs(t, l.Unlock(me), spinlock.ErrNotOwner)
	assert.True(t, l.Inconsistent())

	m, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	require.NoError(t, m.Lock())
	before = m.Generation()
	doc = run("table", unlockUpgrade)
	assert.Greater(t, gen(doc), before)
	assert.Equal(t, unlockHolderJSON{Role: "writer", Process: self}, doc.Holders[0])
	other, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	require.NoError(t, other.Lock())
	assert.ErrorIs(t, m.Unlock(), upgrade.ErrNotOwner)
	require.NoError(t, other.Unlock())

	lm, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	info, err := lm.Acquire(t.Context(), "deploy", "stuck", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	doc = run("deploy", unlockResource)
	assert.Greater(t, gen(doc), info.Version)
	assert.Equal(t, unlockHolderJSON{Role: "holder", Owner: ptr("stuck"), Process: self}, doc.Holders[0])
	assert.ErrorIs(t, lm.Release("deploy", "stuck"), lockmgr.ErrLockNotHeld)

	r := shmctl(t, false, "unlock", seg.Path(), "queue", "--force", "--json")
	require.Equal(t, exitOK, r.code)
	doc = unlockJSON{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, "was free", doc.Action)
	assert.Empty(t, doc.Holders)
	assert.NotNil(t, doc.Holders, "an empty array, not null")

	// A token-mode slot: its holder is a token, and it has no generation.
	tl, err := spinlock.Named(seg, "tokened", spinlock.Token)
	require.NoError(t, err)
	tok := spinlock.NewToken()
	_, err = tl.Lock(tok)
	require.NoError(t, err)
	doc = unlockJSON{}
	r = shmctl(t, false, "unlock", seg.Path(), "tokened", "--force", "--json")
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, []unlockHolderJSON{{Role: "holder", Token: ptr(fmt.Sprint(tok.Token))}}, doc.Holders)
	assert.Nil(t, doc.Generation)
	r = shmctl(t, false, "--no-header", "unlock", seg.Path(), "tokened", "--force")
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, "slot\ttokened\t-\t-\twas free\n", r.stdout)
}

func TestUnlockUsage(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	_, err := spinlock.Named(seg, "both", spinlock.PIDTID)
	require.NoError(t, err)
	_, err = upgrade.Named(seg, "both")
	require.NoError(t, err)
	requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "both"), exitUsage)
	requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "both", "--force", "--kind", "mutex"), exitUsage)
	line := requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "both", "--force"), exitError)
	assert.Contains(t, line, "--kind")
	line = requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "nosuch", "--force"), exitError)
	assert.Contains(t, line, `"nosuch"`)
	requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "both", "--force", "--wait", "-1s"), exitUsage)
	requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "both", "--owner", "x", "--wait", "1s"), exitUsage)
	// A name no hold can have, as lock refuses it: not "say --force", nor
	// a hold not found.
	for _, args := range [][]string{
		{"both", "--owner", ""},
		{"both", "--owner", strings.Repeat("o", 33)},
		{"", "--hold-for", "1"},
		{strings.Repeat("r", 41), "--owner", "x"},
		{"both", "--owner", "", "--hold-for", "1"},
	} {
		line := requireOneLineError(t, shmctl(t, false, append([]string{"unlock", seg.Path()}, args...)...), exitUsage)
		assert.NotContains(t, line, "say --force", "args %q", args)
	}
	r := shmctl(t, false, "unlock", seg.Path(), "both", "--force", "--kind", "upgrade")
	assert.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
}

// unlock --force of a pid/tid slot or an upgrade mutex while another
// force of it is in progress (one stopped mid-way holds the forces' lock,
// an fcntl lock on the segment's file: here this test takes it) waits
// --wait for it, then fails saying so, having freed nothing; once that
// force ends, it frees.
func TestUnlockForceWaitsForAnotherForce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind layout.Kind
		hold func(t *testing.T, seg *shm.Segment) (index int, held func() bool, released func() error)
		want error // of the holder's release once forced
	}{{
		kind: layout.KindOwnerSlots,
		hold: func(t *testing.T, seg *shm.Segment) (int, func() bool, func() error) {
			l, err := spinlock.Named(seg, "table", spinlock.PIDTID)
			require.NoError(t, err)
			me := spinlock.NewHolder()
			_, err = l.Lock(me)
			require.NoError(t, err)
			held := func() bool { _, held := l.Owner(); return held }
			return l.Index(), held, func() error { return l.Unlock(me) }
		},
		want: spinlock.ErrNotOwner,
	}, {
		kind: layout.KindUpgrades,
		hold: func(t *testing.T, seg *shm.Segment) (int, func() bool, func() error) {
			m, err := upgrade.Named(seg, "table")
			require.NoError(t, err)
			require.NoError(t, m.Lock())
			held := func() bool {
				st, err := upgrade.Inspect(seg, m.Index())
				require.NoError(t, err)
				return st.WriteLocked
			}
			return m.Index(), held, m.Unlock
		},
		want: upgrade.ErrNotHeld,
	}} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			t.Parallel()
			seg := newSegment(t, layout.Options{})
			i, held, release := tc.hold(t, seg)
			unlock, ok, err := seg.TryLockOperator(tc.kind, i)
			require.NoError(t, err)
			require.True(t, ok)
			line := requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "table", "--force", "--wait", "50ms"), exitError)
			assert.Contains(t, line, "another force of it in progress")
			assert.Contains(t, line, "deadline exceeded")
			assert.True(t, held(), "the hold is still there")
			unlock()
			r := shmctl(t, false, "unlock", seg.Path(), "table", "--force", "--wait", "50ms")
			require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
			assert.ErrorIs(t, release(), tc.want)
		})
	}
}

// unlock --force of an upgrade mutex whose upgrade holder is stuck while a
// writer waits for it: the upgrade hold is freed, the waiting writer is
// reported as left, and it gets the lock.
func TestUnlockForceLeavesWaitingWriter(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	stuck, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	w, err := upgrade.Named(seg, "table")
	require.NoError(t, err)
	require.NoError(t, stuck.LockUpgrade())
	got := make(chan error, 1)
	go func() { got <- w.Lock() }()
	require.Eventually(t, func() bool {
		st, err := upgrade.Inspect(seg, w.Index())
		return err == nil && st.Writer != 0
	}, testproc.Timeout, time.Millisecond, "the writer waiting")
	r := shmctl(t, false, "unlock", seg.Path(), "table", "--force", "--json")
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var doc unlockJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	self := process(proc.Self(), "alive")
	require.Len(t, doc.Holders, 1)
	require.Len(t, doc.Waiting, 1)
	checkStarted(t, doc.Holders[0].Process)
	checkStarted(t, doc.Waiting[0].Process)
	assert.Equal(t, unlockHolderJSON{Role: "upgrader", Process: self}, doc.Holders[0])
	assert.Equal(t, unlockHolderJSON{Role: "writer", Process: self}, doc.Waiting[0])
	require.NoError(t, <-got, "the waiting writer gets the lock")
	require.NoError(t, w.Unlock())
	require.ErrorIs(t, stuck.UnlockUpgrade(), upgrade.ErrNotHeld)
}

// unlock --force of a slot whose claim says no mode and that no pid/tid
// holder holds leaves its claim's use unsaid: an Open would record pid/tid
// mode in it (spinlock.Open takes a claim's mode from its first Open), and
// the token-mode users of the slot would then be refused.
func TestUnlockForceLeavesAnUnsaidClaimsMode(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	i, err := seg.Claim(layout.KindOwnerSlots, "unsaid")
	require.NoError(t, err)
	slot, err := seg.Slot(i)
	require.NoError(t, err)
	slot.Token.Store(0x1234) // held in token mode, as far as anyone can tell
	r := shmctl(t, false, "unlock", seg.Path(), "unsaid", "--force", "--json")
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	var doc unlockJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, "was free", doc.Action)
	use, err := seg.ClaimUse(layout.KindOwnerSlots, i)
	require.NoError(t, err)
	assert.Zero(t, use, "the claim still says no mode")
	l, err := spinlock.Open(seg, i, spinlock.Token)
	require.NoError(t, err, "a token-mode user still opens it")
	require.NoError(t, l.Close())
}

// unlock --force of a slot whose claim says no mode, held by a pid/tid
// holder: the Open records pid/tid with the claim (spinlock.Open), under
// the claim directory's lock, so a live process holding that lock makes
// the force fail after --wait naming it, the slot as it was; once the
// lock is free the force frees the slot and the claim says pid/tid.
// Before, the Open waited for the lock without a bound: the force hung
// until go test's -timeout, past --wait.
func TestUnlockForceUnsaidSlotDirectoryLockHeld(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{Slots: 2})
	i, s, dead := unsaidSlotOfDeadHolder(t, seg)
	self := proc.Self()
	setDirectoryLock(t, seg, self.Pack())

	line := requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "unsaid", "--force", "--wait", "50ms"), exitError)
	assert.Contains(t, line, fmt.Sprintf("held by live process %d", self.PID))
	assert.Contains(t, line, "deadline exceeded")
	assert.Equal(t, dead, s.PID.Load(), "the failed force changed the slot")
	use, err := seg.ClaimUse(layout.KindOwnerSlots, i)
	require.NoError(t, err)
	assert.Zero(t, use, "the failed force recorded a mode")

	setDirectoryLock(t, seg, 0)
	r := shmctl(t, false, "unlock", seg.Path(), "unsaid", "--force", "--wait", "50ms")
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.Zero(t, s.PID.Load(), "the slot is free")
	use, err = seg.ClaimUse(layout.KindOwnerSlots, i)
	require.NoError(t, err)
	assert.Equal(t, spinlock.PIDTID.ClaimUse(), use)
	require.NoError(t, seg.Release(layout.KindOwnerSlots, i))
}

// entryLockHelper takes the lock word of lock-manager entry ENTRY of the
// segment at PATH for this process, as a call into the manager does for a
// few instructions, and stops itself there (SIGSTOP), as a debugger or a
// SIGSTOP may stop a process inside such a call, for the test to kill it.
// Args: PATH ENTRY.
func entryLockHelper(args []string) int {
	seg, err := shm.Open(args[0], shm.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	i, err := strconv.Atoi(args[1])
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	mem, err := seg.Region(layout.KindLockMgr)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	e, err := memview.At[layout.LockMgrEntry](mem, uint64(i)*layout.LockMgrEntrySize)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if !e.Lock.CompareAndSwap(0, proc.Self().Pack()) {
		fmt.Println("error: the entry lock is held")
		return 1
	}
	fmt.Println("held")
	if err := testproc.StopSelf(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("error: continued")
	return 1
}

// unlock --force of a resource whose entry lock a process stopped inside
// a lock-manager call keeps fails after --wait, in one line that names
// that process, and changes nothing; once the process is dead, its entry
// lock is taken over and the force frees the resource.
func TestUnlockForceResourceStoppedInACall(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{})
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = m.Acquire(context.Background(), "deploy", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	ri, err := m.Inspect("deploy")
	require.NoError(t, err)
	c := testproc.Start(t, "entry-lock", seg.Path(), strconv.Itoa(ri.Entry))
	c.WaitLine(t, "held")
	c.WaitStopped(t)

	line := requireOneLineError(t, shmctl(t, false, "unlock", seg.Path(), "deploy", "--force", "--wait", "50ms"), exitError)
	assert.Contains(t, line, "deadline exceeded")
	assert.Contains(t, line, fmt.Sprintf("pid %d", c.PID()))
	after, err := m.Inspect("deploy")
	require.NoError(t, err)
	require.Equal(t, ri, after, "the failed force changed the resource")

	c.Kill(t)
	r := shmctl(t, false, "unlock", seg.Path(), "deploy", "--force", "--wait", "50ms")
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.ErrorIs(t, m.Release("deploy", "holder"), lockmgr.ErrLockNotHeld)
}
