//go:build linux

package futex_test

import (
	"fmt"
	"sync/atomic"

	"github.com/shmlock/shmlock/internal/futex"
)

// A waiter sleeps until another goroutine (or process sharing the word)
// changes the word and wakes it. Store first, then wake: a waiter that has
// not gone to sleep yet sees the new value and does not sleep at all.
func Example() {
	var ready atomic.Uint32 // in real use: a word of a MAP_SHARED mapping
	done := make(chan struct{})
	go func() {
		for ready.Load() == 0 {
			if err := futex.Wait(&ready, 0, -1); err != nil {
				panic(err)
			}
		}
		close(done)
	}()

	ready.Store(1)
	if _, err := futex.WakeAll(&ready); err != nil {
		panic(err)
	}
	<-done
	fmt.Println("ready =", ready.Load())
	// Output: ready = 1
}
