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

// RecoverAs runs f and returns the error it panicked with, as E (errors.As):
// the check of a Locker's documented panics. It fails the test if f
// returned, or panicked with anything else.
func RecoverAs[E error](t testing.TB, f func()) (e E) {
	t.Helper()
	defer func() {
		t.Helper()
		v := recover()
		if v == nil {
			t.Fatal("no panic")
		}
		err, ok := v.(error)
		if !ok {
			t.Fatalf("the panic value %#v is no error", v)
		}
		if !errors.As(err, &e) {
			t.Fatalf("the panic value %#v is no %T", v, e)
		}
	}()
	f()
	return e
}
