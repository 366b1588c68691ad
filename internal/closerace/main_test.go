package closerace_test

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(args []string) int{
		// PATH KIND: take KIND's blocking hold, print "held"; then, for
		// each line read, "release" releases (printing "released N") and
		// "take" takes the hold again (printing "held N"); exit at EOF.
		"hold": holdHelper,
	})
}

// options size the test segments: a few of each lock, txn included.
var options = shm.Options{Options: layout.Options{
	Slots: 4, Upgrades: 2, UpgradeReaders: 64, TxnRecords: 8, TxnArenaBytes: 4096, LockMgrEntries: 8,
}}

func holdHelper(args []string) int {
	path, k := args[0], kindNamed(args[1])
	seg, err := shm.Open(path, shm.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	release, err := k.hold(seg)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("held 0")
	in := bufio.NewScanner(os.Stdin)
	for n := 1; in.Scan(); n++ {
		switch in.Text() {
		case "release":
			if err := release(); err != nil {
				fmt.Println("error", err)
				return 1
			}
			fmt.Println("released", n)
		case "take":
			if release, err = k.hold(seg); err != nil {
				fmt.Println("error", err)
				return 1
			}
			fmt.Println("held", n)
		}
	}
	return 0
}
