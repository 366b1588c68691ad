// Package etcdtest runs etcd servers inside a test binary: a single member
// or a cluster, on free loopback ports, with their data in a directory the
// test owns. Only tests import it: it links the etcd server, which the
// library and shmctl must not (TestServerStaysOutOfTheLibrary in
// lockmgr/etcdlock checks).
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Timing of the test servers. A short election timeout keeps the
// cluster's failover within the default test budget, and makes the
// server's minimum lease 1 s (1.5 election timeouts, rounded up), so
// tests can let a 1 s TTL expire.
const (
	tickMs     = 50
	electionMs = 500
	startLimit = 30 * time.Second
)

// startTries bounds the starts of a cluster whose ports were taken. A
// port is free when picked, and taken by the member a moment later: in
// between, any process may take it (another test binary's server, or a
// connection, whose local port comes from the same range), and the
// member fails at once (EADDRINUSE). A test package shares one server
// and keeps its start's error: one such clash failed every etcd test of
// the binary, each in no time.
const startTries = 5

// pickPorts picks n ports that are free; a test replaces it to take one.
var pickPorts = freePorts

// Member is one running etcd server.
type Member struct {
	Name     string
	Endpoint string // the client URL, http://127.0.0.1:PORT
	e        *embed.Etcd
	cfg      *embed.Config
	bridge   *bridge // between the clients and the member, in a cluster
}

// Cluster is a set of members that form one etcd cluster.
type Cluster struct {
	Members []*Member
}

// Start starts a cluster of n members with their data under dir and waits
// until it serves. The caller must Close it. A port taken between its
// choice and its use is no failure: Start tries again on other ports.
func Start(dir string, n int) (*Cluster, error) {
	for try := 1; ; try++ {
		c, err := start(dir, n)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || try == startTries {
			return c, err
		}
		// The members that started are stopped; their data, made for
		// the ports of this try, goes with them.
		for i := range n {
			if err := os.RemoveAll(filepath.Join(dir, memberName(i))); err != nil {
				return nil, fmt.Errorf("etcdtest: %w", err)
			}
		}
	}
}

func memberName(i int) string { return fmt.Sprintf("m%d", i) }

// start makes one try of Start.
func start(dir string, n int) (*Cluster, error) {
	cfgs := make([]*embed.Config, n)
	var initial []string
	var bridges []*bridge
	closeBridges := func() {
		for _, b := range bridges {
			b.close()
		}
	}
	for range n {
		if n == 1 {
			break // no bridge: the client talks to the member itself
		}
		b, err := newBridge()
		if err != nil {
			closeBridges()
			return nil, err
		}
		bridges = append(bridges, b)
	}
	// Every port at once, once the bridges listen: ports picked one
	// member at a time could be picked twice (free again once the first
	// pick let go of them), or by a bridge.
	ports, err := pickPorts(2 * n)
	if err != nil {
		closeBridges()
		return nil, err
	}
	for i := range cfgs {
		ports := ports[2*i:]
		cfg := embed.NewConfig()
		cfg.Name = memberName(i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		client := mustURL(fmt.Sprintf("http://127.0.0.1:%d", ports[0]))
		peer := mustURL(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		if bridges != nil {
			bridges[i].forward(client.Host)
			cfg.AdvertiseClientUrls = []url.URL{mustURL("http://" + bridges[i].addr())}
		}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.TickMs, cfg.ElectionMs = tickMs, electionMs
		// Quiet: a test that fails says why; the server's own errors at a
		// member's stop (closed listeners) are expected.
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.UnsafeNoFsync = true // test data: durability across a crash of the machine is not needed
		cfg.InitialClusterToken = filepath.Base(dir)
		initial = append(initial, cfg.Name+"="+peer.String())
		cfgs[i] = cfg
	}
	c := &Cluster{}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
	}
	// Members of a new cluster wait for each other: start them all, then
	// wait for each.
	for i, cfg := range cfgs {
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.Close()
			for _, b := range bridges[len(c.Members):] {
				b.close()
			}
			return nil, fmt.Errorf("etcdtest: starting %s: %w", cfg.Name, err)
		}
		m := &Member{Name: cfg.Name, Endpoint: cfg.AdvertiseClientUrls[0].String(), e: e, cfg: cfg}
		if bridges != nil {
			m.bridge = bridges[i]
		}
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		select {
		case <-m.e.Server.ReadyNotify():
		case <-time.After(startLimit):
			c.Close()
			return nil, fmt.Errorf("etcdtest: %s not ready after %v", m.Name, startLimit)
		}
	}
	return c, nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Endpoint)
	}
	return eps
}

// Leader is the member that leads, or nil if none does.
func (c *Cluster) Leader() *Member {
	for _, m := range c.Members {
		if m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID() && m.e.Server.Leader() != 0 {
			return m
		}
	}
	return nil
}

// Stop stops member m as a crash would (its data stays): the connections
// of its clients break, its raft node stops at once, so the others elect a
// leader among themselves if m led, and then its servers close. (A
// graceful stop would keep the clients' requests to m waiting for up to
// its request timeout, 6 s.)
func (c *Cluster) Stop(m *Member) {
	if m.e != nil {
		if m.bridge != nil {
			m.bridge.close()
		}
		m.e.Server.HardStop()
		m.e.Close()
		m.e = nil
	}
}

// Close stops every member.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		c.Stop(m)
	}
}

// Client returns a client of the cluster that logs nothing.
func Client(endpoints ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// freePorts returns n ports that were free on the loopback address a
// moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("etcdtest: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(errors.Join(errors.New("etcdtest: bad URL"), err))
	}
	return *u
}
