package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" { // run's processes are this test binary
		main()
		return
	}
	os.Exit(m.Run())
}

func TestQueue(t *testing.T) {
	var out bytes.Buffer
	if err := run(2, 3, 500, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	if strings.Count(got, "consumer ") != 3 || !strings.HasSuffix(got, "PASS\n") {
		t.Fatalf("want three consumers' reports and PASS, got:\n%s", got)
	}
}
