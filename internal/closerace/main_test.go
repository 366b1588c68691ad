package closerace_test

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(args []string) int{
		// PATH KIND: take KIND's blocking hold, print "held 0"; then, for
		// the N'th line read: "release" releases (printing "released N"),
		// "take" takes the hold again ("held N"), and for kind txn-close
		// "pin REF" and "unpin REF" pin and unpin an object ("pinned N",
		// "unpinned N"); exit at EOF.
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
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "pin", "unpin":
			if err := txnPins.do(cmd, arg); err != nil {
				fmt.Println("error", err)
				return 1
			}
			fmt.Printf("%sned %d\n", cmd, n)
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

// holder is the test's side of a "hold" helper: it numbers the lines it
// sends, as the helper numbers its replies.
type holder struct {
	c    *testproc.Child
	mu   sync.Mutex
	sent int
}

// send sends cmd and returns its number, for wait.
func (h *holder) send(t testing.TB, cmd string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent++
	h.c.Send(t, cmd)
	return h.sent
}

// wait waits for the reply "word n".
func (h *holder) wait(t testing.TB, word string, n int) {
	h.c.WaitLine(t, fmt.Sprintf("%s %d", word, n))
}

// do sends cmd and waits for its reply word.
func (h *holder) do(t testing.TB, cmd, word string) { h.wait(t, word, h.send(t, cmd)) }
