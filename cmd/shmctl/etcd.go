package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// envEtcd names the etcd endpoints when --etcd is not given: lock, locks
// and stats then use the lock table in etcd instead of a segment.
const envEtcd = "SHMLOCK_ETCD"

// etcdDialTimeout bounds the connection to etcd.
const etcdDialTimeout = 5 * time.Second

// etcdOptions are the flags of the commands that can use the lock table in
// etcd (lockmgr/etcdlock) instead of a segment's.
type etcdOptions struct {
	Endpoints string // --etcd, else $SHMLOCK_ETCD
	Prefix    string // --etcd-prefix
}

func addEtcdFlags(cmd *cobra.Command, o *etcdOptions) {
	cmd.Flags().StringVar(&o.Endpoints, "etcd", "",
		"use the lock table in etcd at these endpoints (host:port[,host:port...]; default $"+envEtcd+") instead of a segment")
	cmd.Flags().StringVar(&o.Prefix, "etcd-prefix", etcdlock.DefaultPrefix, "key prefix of the lock table in etcd")
}

// on reports whether the command uses etcd: --etcd, or SHMLOCK_ETCD set
// and not empty.
func (o *etcdOptions) on() bool { return o.endpoints() != nil }

// endpoints are the endpoints named by --etcd or SHMLOCK_ETCD, nil if none.
func (o *etcdOptions) endpoints() []string {
	s := o.Endpoints
	if s == "" {
		s = os.Getenv(envEtcd)
	}
	var eps []string
	for e := range strings.SplitSeq(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// where names the table for messages and the JSON's path field:
// etcd://HOST:PORT[,...]/PREFIX.
func (o *etcdOptions) where() string {
	eps := make([]string, 0, len(o.endpoints()))
	for _, e := range o.endpoints() {
		eps = append(eps, strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://"))
	}
	return "etcd://" + strings.Join(eps, ",") + "/" + strings.TrimSuffix(o.Prefix, "/")
}

// open connects to etcd and starts a Manager on the lock table; close
// ends both (the Manager's session: its holds without a TTL end with it).
func (o *etcdOptions) open(ctx context.Context) (m *etcdlock.Manager, closeAll func(), err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: o.endpoints(), DialTimeout: etcdDialTimeout,
		Logger: zap.NewNop(), DialKeepAliveTime: etcdDialTimeout, DialKeepAliveTimeout: etcdDialTimeout})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", o.where(), err)
	}
	m, err = etcdlock.New(ctx, cli, etcdlock.Options{Prefix: o.Prefix})
	if err != nil {
		_ = cli.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: no answer within %v", lockmgr.ErrUnavailable, etcdDialTimeout)
		}
		return nil, nil, fmt.Errorf("%s: %w", o.where(), err)
	}
	return m, func() { _ = m.Close(); _ = cli.Close() }, nil
}
