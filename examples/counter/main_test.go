package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" { // run's workers are this test binary
		main()
		return
	}
	os.Exit(m.Run())
}

func TestCounter(t *testing.T) {
	var out bytes.Buffer
	if err := run(3, 2000, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	if strings.Count(got, "repaired") != 1 || !strings.HasSuffix(got, "PASS\n") {
		t.Fatalf("want one repair and PASS, got:\n%s", got)
	}
}
