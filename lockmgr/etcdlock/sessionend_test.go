package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/lockmgr/etcdlock"
)

// lostKeepAliveManager is a Manager whose keep-alives reach etcd (which
// renews the session) but whose answers are lost while *lose is set, as
// on a link that drops only what comes back.
func lostKeepAliveManager(t *testing.T, prefix string, lose *atomic.Bool) *etcdlock.Manager {
	t.Helper()
	return dialedManager(t, prefix, testSessionTTL, grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
				return s, err
			}
			return lossyStream{ClientStream: s, lose: lose}, nil
		}))
}

type lossyStream struct {
	grpc.ClientStream
	lose *atomic.Bool
}

func (s lossyStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil && s.lose.Load() {
		return errors.New("test: the keep-alive's answer was lost")
	}
	return err
}

// TestSessionGivenUpIsRevoked: a Manager whose keep-alive gives up (no
// answer in time) revokes its session's lease on its way out, so that a
// new Manager of the same owner (a restarted service) can take its lock
// back at once. Before, the lease, renewed by the keep-alives whose
// answers were lost, lived on for up to a TTL after Done, and the new
// Manager's Acquire got ErrAlreadyHeld for that long.
func TestSessionGivenUpIsRevoked(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var lose atomic.Bool
	old := lostKeepAliveManager(t, p, &lose)
	_, err := old.Acquire(testCtx(t), "r", "service", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	lose.Store(true)
	testproc.Receive(t, old.Done(), "the session given up")
	testproc.Receive(t, etcdlock.Stopped(old), "the keep-alive's end")
	restarted := newManager(t, p)
	info, err := restarted.Acquire(testCtx(t), "r", "service", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err, "the restarted owner takes its lock back")
	require.True(t, info.Reclaimed, "the given-up session's hold ended without its release")
	require.NoError(t, restarted.Release("r", "service"))
}

// TestSessionLostHoldStaysLost: a hold on the session is lost with it
// (Done, and the hold's Lost, close at the session's TTL less the margin
// after the last acknowledged renewal was sent), so its owner's late
// Release through the Manager is told that the hold expired
// (ErrLockTimeout), as it is for a TTL hold whose Lost closed, and the
// next grant is told that the resource is inconsistent. Here the
// keep-alives' answers are lost and so is the revocation on the way out
// (giveUp): the renewals that reached etcd keep the key there a while
// after Done. Before, the Release found the key and the ledger, ended
// the hold as released and returned nil, though its holder had been
// told to stop writing half-way.
func TestSessionLostHoldStaysLost(t *testing.T) {
	t.Parallel()
	p := newPrefix(t)
	var lose atomic.Bool
	failRevoke := grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if lose.Load() && strings.HasSuffix(method, "/LeaseRevoke") {
				return errors.New("test: etcd unreachable")
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})
	old := dialedManager(t, p, testSessionTTL, failRevoke, grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
				return s, err
			}
			return lossyStream{ClientStream: s, lose: &lose}, nil
		}))
	_, err := old.Acquire(testCtx(t), "r", "a", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	lost, err := old.Lost("r", "a")
	require.NoError(t, err)
	lose.Store(true)
	testproc.Receive(t, lost, "the hold's lost signal")
	testproc.Receive(t, etcdlock.Stopped(old), "the keep-alive's end")
	lose.Store(false)
	require.ErrorIs(t, old.Release("r", "a"), lockmgr.ErrLockTimeout, "a release of a hold told lost")

	other := newManager(t, p)
	info, err := other.Acquire(testCtx(t), "r", "b", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)
	require.True(t, info.Inconsistent, "the lost hold ended without its release")
	require.NoError(t, other.Release("r", "b"))
}
