package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/testproc"
)

// BenchmarkLockCommand compares shmctl lock with flock(1), both as a shell
// script calls them, in one run:
//
//   - uncontended: one call after another, each running true(1): what a
//     call costs (process starts included);
//   - contended: 20 shells each make calls that run a read-modify-write
//     of a counter file, the flock(1) use case; ns/op is per call, and the
//     counter must come out exact.
//
// shmctl is built once, static (CGO_ENABLED=0, as a release would be: a
// dynamically linked Go program pays the dynamic loader at every start).
// Compare the cells of one run only: both are dominated by process starts,
// which depend on the machine's load.
func BenchmarkLockCommand(b *testing.B) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		b.Skip("flock(1) is not installed (util-linux)")
	}
	dir := b.TempDir()
	shmctlBin := filepath.Join(dir, "shmctl")
	build := exec.Command("go", "build", "-o", shmctlBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building shmctl: %v\n%s", err, out)
	}
	seg := testproc.SegmentPath(b)
	b.Cleanup(func() { _ = os.Remove(seg) })
	lockers := []struct{ name, lock string }{
		{"shmctl", shmctlBin + " lock " + seg + " r"},
		{"flock", flock + " " + filepath.Join(dir, "flock.lock")},
	}
	for _, l := range lockers {
		b.Run("uncontended/"+l.name, func(b *testing.B) {
			script := `i=0; while [ $i -lt "$N" ]; do ` + l.lock + ` true || exit 1; i=$((i+1)); done`
			runScript(b, script, b.N, b.N, "")
		})
	}
	const shells = 20
	for _, l := range lockers {
		b.Run("contended/"+l.name, func(b *testing.B) {
			counter := filepath.Join(b.TempDir(), "counter")
			if err := os.WriteFile(counter, []byte("0\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			per := (b.N + shells - 1) / shells
			script := `pids=
for w in $(seq ` + strconv.Itoa(shells) + `); do
	(i=0; while [ $i -lt "$N" ]; do
		` + l.lock + ` sh -c 'n=$(cat "$COUNTER"); echo $((n+1)) > "$COUNTER"' || exit 1
		i=$((i+1))
	done) &
	pids="$pids $!"
done
for p in $pids; do wait $p || exit 1; done`
			runScript(b, script, per, per*shells, counter)
			got, err := os.ReadFile(counter)
			if err != nil {
				b.Fatal(err)
			}
			if want := strconv.Itoa(per * shells); strings.TrimSpace(string(got)) != want {
				b.Fatalf("counter %s, want %s: two calls overlapped", strings.TrimSpace(string(got)), want)
			}
		})
	}
}

// runScript runs script with N=n, which makes calls calls in all.
func runScript(b *testing.B, script string, n, calls int, counter string) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "N="+strconv.Itoa(n), "COUNTER="+counter)
	b.ResetTimer()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	b.ReportMetric(float64(calls)/time.Since(start).Seconds(), "calls/s")
}
