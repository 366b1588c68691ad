package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(runnerEnv) != "" { // run's runners are this test binary
		main()
		return
	}
	os.Exit(m.Run())
}

func TestJobs(t *testing.T) {
	var out bytes.Buffer
	if err := run(3, 10, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	if strings.Count(got, "last holder died") != 1 || !strings.HasSuffix(got, "PASS\n") {
		t.Fatalf("want one takeover and PASS, got:\n%s", got)
	}
}
