package testproc

import (
	"fmt"
	"strings"
	"testing"
)

// Churn runs procs processes of helper, atOnce at a time, each with the
// arguments path, prefix-N and "exit" or, for every fifth, "wait". The
// helper claims what it is told, prints "ready" (and "exiting" when it
// will exit on its own); Churn then waits for an exiting one to succeed
// and kills (SIGKILL) a waiting one. What the helpers leave behind is the
// caller's to check: claims of the dead that must come back for reuse.
func Churn(tb testing.TB, procs, atOnce int, helper, path, prefix string) {
	tb.Helper()
	for i := 0; i < procs; i += atOnce {
		var batch []*Child
		for j := i; j < min(i+atOnce, procs); j++ {
			how := "exit"
			if j%5 == 0 {
				how = "wait" // killed below
			}
			batch = append(batch, Start(tb, helper, path, fmt.Sprintf("%s-%d", prefix, j), how))
		}
		for _, c := range batch {
			if c.WaitLine(tb, "ready"); strings.Contains(c.Out.String(), "exiting") {
				c.WaitOK(tb)
			} else {
				c.Kill(tb)
			}
		}
	}
}
