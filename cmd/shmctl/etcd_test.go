package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/etcdtest"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// The etcd of these tests: one embedded member, started by the first test
// that needs it, on free loopback ports, with its data in a temporary
// directory; TestMain stops it.
var (
	etcdOnce    sync.Once
	etcdServer  *etcdtest.Cluster
	etcdDir     string
	etcdErr     error
	etcdPrefixN atomic.Uint64
)

func etcdEndpoint(tb testing.TB) string {
	tb.Helper()
	etcdOnce.Do(func() {
		if etcdDir, etcdErr = os.MkdirTemp("", "shmctl-etcd-"); etcdErr == nil {
			etcdServer, etcdErr = etcdtest.Start(etcdDir, 1)
		}
	})
	require.NoError(tb, etcdErr)
	return etcdServer.Members[0].Endpoint
}

func stopEtcd() {
	if etcdServer != nil {
		etcdServer.Close()
	}
	if etcdDir != "" {
		_ = os.RemoveAll(etcdDir)
	}
}

// etcdTable is a fresh prefix on the test etcd and a Manager on it.
func etcdTable(t *testing.T) (endpoint, prefix string, m *etcdlock.Manager) {
	t.Helper()
	endpoint = etcdEndpoint(t)
	prefix = fmt.Sprintf("shmctl-test-%d-%d/", os.Getpid(), etcdPrefixN.Add(1))
	c, err := etcdtest.Client(endpoint)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Timeout)
	defer cancel()
	m, err = etcdlock.New(ctx, c, etcdlock.Options{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return endpoint, prefix, m
}

// TestLockEtcdAcrossProcesses: shmctl lock --etcd processes, started
// together from shells, serialise a read-modify-write of a counter file;
// each command checks that the fencing version it was given is above the
// last one written. The count is exact.
func TestLockEtcdAcrossProcesses(t *testing.T) {
	t.Parallel()
	ep, prefix, m := etcdTable(t)
	dir := t.TempDir()
	exe := testproc.Script(t, "shmctl")
	body := `read n v < "$F" || { n=0; v=0; }; [ "$SHMLOCK_VERSION" -gt "$v" ] || exit 3; echo "$((n+1)) $SHMLOCK_VERSION" > "$F"`
	const shells, runs = 3, 5
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for range shells {
		loop := fmt.Sprintf(`for i in $(seq %d); do "$SHMCTL" lock --etcd-prefix %s counter -c '%s' || exit $?; done`, runs, prefix, body)
		c := exec.Command("/bin/sh", "-c", loop)
		c.Env = append(os.Environ(), "SHMCTL="+exe, "F="+dir+"/counter", envEtcd+"="+ep)
		out := new(strings.Builder)
		c.Stdout, c.Stderr = out, out
		require.NoError(t, c.Start())
		cmds, outs = append(cmds, c), append(outs, out)
	}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), "output: %s", outs[i])
	}
	b, err := os.ReadFile(dir + "/counter")
	require.NoError(t, err)
	fields := strings.Fields(string(b))
	require.Len(t, fields, 2)
	require.Equal(t, strconv.Itoa(shells*runs), fields[0])
	o, err := m.Overview()
	require.NoError(t, err)
	require.EqualValues(t, shells*runs, o.Stats.TotalLocks)
	require.EqualValues(t, shells*runs, o.Stats.Released)
}

// TestLockEtcd: the exit statuses and the environment of shmctl lock are
// those of a segment's lock; locks and stats list the etcd table, as
// JSON too.
func TestLockEtcd(t *testing.T) {
	t.Parallel()
	ep, prefix, m := etcdTable(t)
	at := []string{"--etcd", ep, "--etcd-prefix", prefix}
	r := shmctl(t, false, append(append([]string{"lock"}, at...), "job", "--", "sh", "-c",
		`[ "$SHMLOCK_ETCD" = "`+ep+`" ] && [ "$SHMLOCK_RESOURCE" = job ] && [ "$SHMLOCK_VERSION" -gt 0 ] && [ -z "$SHMLOCK_SEGMENT" ] && exit 7`)...)
	require.Equal(t, 7, r.code, "stderr %q", r.stderr)

	_, err := m.Acquire(context.Background(), "job", "holder", lockmgr.Exclusive, lockmgr.AcquireOptions{TTL: time.Minute})
	require.NoError(t, err)
	line := requireOneLineError(t, shmctl(t, false, append(append([]string{"lock", "-n"}, at...), "job", "true")...), exitConflict)
	require.Contains(t, line, "RESOURCE_LOCKED")
	line = requireOneLineError(t, shmctl(t, false, append(append([]string{"lock", "-w", "0.05", "-E", "9"}, at...), "job", "true")...), 9)
	require.Contains(t, line, "WAIT_TIMEOUT")

	r = shmctl(t, false, append([]string{"locks", "--json"}, at...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	var locks locksJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &locks))
	require.Equal(t, "etcd://"+strings.TrimPrefix(ep, "http://")+"/"+strings.TrimSuffix(prefix, "/"), locks.Path)
	require.Len(t, locks.Resources, 1)
	job := locks.Resources[0]
	require.Equal(t, "job", job.Resource)
	require.NotNil(t, job.Mode)
	require.Equal(t, "exclusive", *job.Mode)
	require.Len(t, job.Holders, 1)
	h := job.Holders[0]
	require.Equal(t, "holder", h.Owner)
	require.NotNil(t, h.Process)
	require.EqualValues(t, os.Getpid(), h.Process.PID)
	require.Equal(t, livenessAlive, h.Process.Liveness)
	require.NotNil(t, h.Host)
	require.NotEmpty(t, *h.Host)
	require.NotNil(t, h.LeftSeconds)
	require.Nil(t, locks.Capacity, "etcd has no fixed capacity")

	r = shmctl(t, false, append([]string{"locks"}, at...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "holder")

	r = shmctl(t, false, append([]string{"stats", "--json"}, at...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	var st statsJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.EqualValues(t, 2, st.TotalLocks)
	require.EqualValues(t, 1, st.Released)
	require.EqualValues(t, 2, st.ConflictsDetected)
	require.Equal(t, 1, st.ActiveLocks)
	require.Nil(t, st.Capacity)
	require.NoError(t, m.Release("job", "holder"))

	requireOneLineError(t, shmctl(t, false, append([]string{"locks", "some-segment"}, at...)...), exitUsage)
	line = requireOneLineError(t, shmctl(t, false, "stats", "--etcd", "127.0.0.1:1"), exitError)
	require.Contains(t, line, "etcd://127.0.0.1:1/shmlock")
}

// With SHMLOCK_ETCD set and no --etcd, a segment given to locks or stats
// is refused naming the variable, which is what chose etcd, and how to
// list a segment's table all the same: the refusal said "with --etcd",
// a flag the command line did not hold. Not parallel: it sets the
// environment.
func TestLocksSegmentWithEtcdFromTheEnvironment(t *testing.T) {
	t.Setenv(envEtcd, "127.0.0.1:1")
	for _, command := range []string{"locks", "stats"} {
		line := requireOneLineError(t, shmctl(t, false, command, "jobs"), exitUsage)
		assert.Contains(t, line, "no segment while "+envEtcd+" is set", command)
		assert.Contains(t, line, envEtcd+"= shmctl "+command+" SEGMENT", command)
		assert.NotContains(t, line, "--etcd", command)

		line = requireOneLineError(t, shmctl(t, false, command, "--etcd", "127.0.0.1:1", "jobs"), exitUsage)
		assert.Contains(t, line, "no segment with --etcd", command)
	}
}
