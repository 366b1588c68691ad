//go:build !linux

package futex

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

func wait(*atomic.Uint32, uint32, time.Duration) error {
	return fmt.Errorf("futex: wait: %w", ErrUnsupported)
}

func wake(*atomic.Uint32, int) (int, error) {
	return 0, fmt.Errorf("futex: wake: %w", ErrUnsupported)
}

func yield() { runtime.Gosched() }

func nap(d time.Duration) { time.Sleep(d) }
