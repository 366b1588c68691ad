package testproc

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// stepsHelper (STOPS) runs hooks a, b, a again and c, printing "after b"
// between b and the second a, then waits for a last line and prints "end".
func stepsHelper(args []string) int {
	s := NewSteps(args[0])
	a := s.Hook("a")
	a()
	s.Hook("b")()
	fmt.Println("after b")
	a()
	s.Hook("c")()
	s.Wait()
	fmt.Println("end")
	return 0
}

func TestSteps(t *testing.T) {
	t.Parallel()
	t.Run("no stops", func(t *testing.T) {
		t.Parallel()
		// stdin is empty: the last Wait ends at its end.
		out := Start(t, "steps", "-").WaitOK(t)
		require.Equal(t, "a\nb\nafter b\nc\nend\n", out, "each step once, in order")
	})
	t.Run("stops", func(t *testing.T) {
		t.Parallel()
		c := StartWithStdin(t, "steps", "b,c")
		c.WaitLine(t, "b")
		c.Send(t, "")
		c.WaitLine(t, "c")
		c.Send(t, "")
		c.Send(t, "")
		require.Equal(t, "a\nb\nafter b\nc\nend\n", c.WaitOK(t))
	})
	t.Run("stop without input", func(t *testing.T) {
		t.Parallel()
		// A stop reads stdin: at its end the helper fails there, and
		// nothing after the stop runs.
		c := Start(t, "steps", "b")
		err := c.Wait(t)
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "exit status: %v", err)
		require.Equal(t, 1, exit.ExitCode())
		require.Equal(t, "a\nb\nerror: stdin: EOF\n", c.Out.String())
	})
}

// fakeTB is a testing.TB whose Fatal ends the calling goroutine (as
// testing's does) after noting the message.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatal(args ...any) {
	f.failed = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

type stepError struct{ step string }

func (e *stepError) Error() string { return "step " + e.step }

func TestRecoverAs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		f      func()
		failed string // "" if RecoverAs returns the value
	}{
		{"the type", func() { panic(&stepError{"x"}) }, ""},
		{"wrapped", func() { panic(fmt.Errorf("outer: %w", &stepError{"x"})) }, ""},
		{"no panic", func() {}, "no panic"},
		{"no error", func() { panic("text") }, `the panic value "text" is no error`},
		{"another error", func() { panic(errors.New("other")) }, "is no *testproc.stepError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeTB{TB: t}
			var got *stepError
			done := make(chan struct{})
			go func() {
				defer close(done)
				got = RecoverAs[*stepError](fake, tc.f)
			}()
			<-done
			if tc.failed == "" {
				require.Empty(t, fake.failed)
				require.Equal(t, "x", got.step)
				return
			}
			require.Contains(t, fake.failed, tc.failed)
			require.Nil(t, got)
		})
	}
}
