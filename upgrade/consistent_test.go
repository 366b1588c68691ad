package upgrade_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
)

// The recovery protocol, across processes: a writer is killed half-way
// through a write; the next writer (another process) takes the lock over
// and is told; it releases without marking the data consistent, so the
// next writer (a third process) is told too; an upgrader that upgrades is
// told as well, and marks; from then on nobody is told.
func TestInconsistentUntilMarked(t *testing.T) {
	t.Parallel()
	_, path := newSegment(t)
	c, _ := holding(t, path, "unique-half")
	c.Kill(t)

	tell := func(how, mark string) string { return testproc.RunLine(t, "told ", "tell", path, how, mark) }
	require.Equal(t, "reclaimed=true inconsistent=true", tell("lock", "no"), "the writer that reclaimed")
	require.Equal(t, "reclaimed=true inconsistent=true", tell("lock", "no"), "the next writer: nobody repaired")
	require.Equal(t, "reclaimed=true inconsistent=true", tell("upgrade", "mark"), "an upgrade to unique, which repairs")
	require.Equal(t, "reclaimed=false inconsistent=false", tell("lock", "no"), "marked consistent")
	require.Equal(t, "reclaimed=false inconsistent=false", tell("upgrade", "no"))
}

// tellHelper takes the unique lock of mutex 0 (PATH HOW MARK: HOW "lock"
// for Lock, "upgrade" for LockUpgrade and UpgradeToUnique), prints what
// it was told, repairs the shared record and marks the data consistent if
// MARK is "mark", and releases.
func tellHelper(args []string) int {
	seg, m, rec, err := openHelper(args[0])
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer seg.Close()
	upgrading := args[1] == "upgrade"
	if upgrading {
		if err = m.LockUpgrade(); err == nil {
			err = m.UpgradeToUnique()
		}
	} else {
		err = m.Lock()
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Printf("told reclaimed=%t inconsistent=%t\n", m.Reclaimed(), m.Inconsistent())
	if args[2] == "mark" {
		rec.write(rec[0].Load()+1, len(rec))
		err = m.MarkConsistent()
	}
	if err == nil && upgrading {
		if err = m.UniqueToUpgrade(); err == nil {
			err = m.UnlockUpgrade()
		}
	} else if err == nil {
		err = m.Unlock()
	}
	if err == nil {
		err = m.Close()
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	return 0
}
