package etcdtest

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// bridge forwards the connections it accepts to a member's client address
// and can break them all at once, as a crash of the member's host would.
type bridge struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// newBridge listens; forward starts the forwarding. The listener comes
// first so that the members' ports, picked next, are not the bridges'.
func newBridge() (*bridge, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: bridge: %w", err)
	}
	return &bridge{l: l, conns: map[net.Conn]bool{}}, nil
}

// forward forwards the connections accepted from now on to target.
func (b *bridge) forward(target string) {
	b.target = target
	b.wg.Go(b.serve)
}

func (b *bridge) addr() string { return b.l.Addr().String() }

func (b *bridge) serve() {
	for {
		in, err := b.l.Accept()
		if err != nil {
			return // closed
		}
		out, err := net.Dial("tcp", b.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !b.track(in, out) {
			return
		}
		b.wg.Go(func() { b.pipe(out, in) })
		b.wg.Go(func() { b.pipe(in, out) })
	}
}

// track records a pair of connections; false (both closed) once the
// bridge is closed.
func (b *bridge) track(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		b.conns[c] = true
	}
	return true
}

func (b *bridge) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// close stops accepting and breaks every connection.
func (b *bridge) close() {
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	_ = b.l.Close()
	b.wg.Wait()
}
