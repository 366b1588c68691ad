//go:build !linux

package futex_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/shmlock/shmlock/internal/futex"
)

func TestUnsupported(t *testing.T) {
	var word atomic.Uint32
	if err := futex.Wait(&word, 0, 0); !errors.Is(err, futex.ErrUnsupported) {
		t.Errorf("Wait: got %v, want ErrUnsupported", err)
	}
	if _, err := futex.Wake(&word, 1); !errors.Is(err, futex.ErrUnsupported) {
		t.Errorf("Wake: got %v, want ErrUnsupported", err)
	}
}
