package etcdtest_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/etcdtest"
)

// TestStartRetriesATakenPort: a port that was free when picked may be
// taken before the member binds it (by another test binary's server, or a
// connection's local port, from the same range). Start then picks other
// ports and tries again, the data of the members that had started
// removed. Before, it failed at once with EADDRINUSE; a test package
// shares one server and keeps its start's error, so every etcd test of
// shmctl's binary failed in no time. The port is taken here by a listener
// of the test's, handed out as free by the first pick. Start must pick
// again and run the cluster on the ports of its last pick. How many picks
// that takes is not the test's to say: another process (a server of a test
// package running beside this one, a connection) may take a port of the
// second pick too before the member binds it, and Start rightly picks a
// third time.
func TestStartRetriesATakenPort(t *testing.T) {
	for _, tt := range []struct {
		members, taken int // the index of the taken port: 2i a member's client port, 2i+1 its peer port
	}{
		{1, 0},
		{1, 1},
		{3, 3}, // the second member's peer port: the first member has started
	} {
		t.Run(fmt.Sprintf("%d members, port %d", tt.members, tt.taken), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer func() { _ = l.Close() }()
			taken := l.Addr().(*net.TCPAddr).Port
			var picked [][]int
			defer etcdtest.SetPickPorts(func(n int) ([]int, error) {
				ports, err := etcdtest.FreePorts(n)
				if err == nil {
					if len(picked) == 0 {
						ports[tt.taken] = taken
					}
					picked = append(picked, ports)
				}
				return ports, err
			})()
			c, err := etcdtest.Start(t.TempDir(), tt.members)
			require.NoError(t, err)
			defer c.Close()
			require.GreaterOrEqual(t, len(picked), 2, "ports picked again")
			require.Equal(t, picked[len(picked)-1], etcdtest.Ports(c), "the cluster on the ports of the last pick")
			require.NotContains(t, etcdtest.Ports(c), taken)

			cli, err := etcdtest.Client(c.Endpoints()...)
			require.NoError(t, err)
			defer func() { _ = cli.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = cli.Put(ctx, "k", "v")
			require.NoError(t, err)
			resp, err := cli.MemberList(ctx)
			require.NoError(t, err)
			require.Len(t, resp.Members, tt.members)
		})
	}
}
