package testproc

import (
	"errors"
	"testing"
)

// RequireTyped fails the test if err, what call returned, is neither nil
// nor one of want (errors.Is): the fuzz targets' check that damage and
// misuse are told with a package's own errors, never an untyped one.
func RequireTyped(t testing.TB, call string, err error, want ...error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	t.Fatalf("%s: an error that is none of the packages' own: %v", call, err)
}
