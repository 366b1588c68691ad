package metrics

import (
	"sync"

	"github.com/shmlock/shmlock/shm"
)

// Follower is a segment known by its path rather than by its file: when
// the path comes to name another file (the segment removed and made again,
// as an application's restart does), it opens that one. A Segment opened
// once shows its file for ever, frozen once nobody else uses it, and a
// monitor of it would serve those frozen numbers without an error.
//
// It is safe for concurrent use. A read through Use keeps its segment open
// until it returns, though another goroutine meanwhile finds the segment
// replaced and moves to the new one: a scrape racing the replacement
// shows the old segment's last numbers or the new one's, never a failure.
// A read of a segment got from Segment has no such guard: it reports
// shm.ErrClosed then (its mapping stays valid: shm.Segment.Close).
type Follower struct {
	path string
	opts shm.Options

	mu     sync.Mutex
	cur    *followed // nil while the path names no segment that opens
	closed bool

	testHookRead func() // if set, called by Use between finding the segment and reading it
}

// followed is a segment the Follower opened, with the reads under way.
// Once it is replaced (or the Follower closed) it is retired: the last of
// its reads closes it, or the retiring itself if none is under way.
type followed struct {
	seg   *shm.Segment
	users int // reads under way (Use), guarded by Follower.mu
}

// Follow opens the segment at path with opts (read-only, for a monitor);
// an error if it cannot be opened now.
func Follow(path string, opts shm.Options) (*Follower, error) {
	seg, err := shm.Open(path, opts)
	if err != nil {
		return nil, err
	}
	return &Follower{path: seg.Path(), opts: opts, cur: &followed{seg: seg}}, nil
}

// Path is the segment's path (shm.ResolvePath's).
func (f *Follower) Path() string { return f.path }

// Segment returns the segment the path names now: the one open while the
// path still names its file, else the file there now, opened. An error if
// the path names no segment that opens (removed, or not made again yet);
// the next call tries again. shm.ErrClosed after Close. The segment is
// closed once another call finds it replaced; to read it whole, use Use.
func (f *Follower) Segment() (*shm.Segment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.current()
	if err != nil {
		return nil, err
	}
	return s.seg, nil
}

// Use calls read with the segment the path names now (as Segment finds
// it), which stays open until read returns: a call that finds it replaced
// meanwhile leaves its closing to this one. read's error is Use's; the
// error of Segment if there is no segment to read.
func (f *Follower) Use(read func(seg *shm.Segment) error) error {
	f.mu.Lock()
	s, err := f.current()
	if err == nil {
		s.users++
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	defer f.done(s)
	if f.testHookRead != nil {
		f.testHookRead()
	}
	return read(s.seg)
}

// done ends a read of s begun by Use, closing s if it was its last read of
// a retired segment.
func (f *Follower) done(s *followed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.users--
	if f.cur != s && s.users == 0 { // retired meanwhile, and this the last read
		_ = s.seg.Close()
	}
}

// current is Segment's finding, under f.mu.
func (f *Follower) current() (*followed, error) {
	if f.closed {
		return nil, shm.ErrClosed
	}
	if f.cur != nil {
		replaced, err := f.cur.seg.Replaced()
		if err == nil && !replaced {
			return f.cur, nil
		}
		// Replaced, or it cannot tell: the file open is not to be shown
		// as the path's. The open below says what the path names.
		_ = f.retire()
	}
	seg, err := shm.Open(f.path, f.opts)
	if err != nil {
		return nil, err
	}
	f.cur = &followed{seg: seg}
	return f.cur, nil
}

// retire lets go of the current segment, under f.mu: closed now, or by
// the last read under way (done). Close's error if closed now.
func (f *Follower) retire() error {
	s := f.cur
	f.cur = nil
	if s.users > 0 {
		return nil
	}
	return s.seg.Close()
}

// Close closes the segment open, if any (once the reads of it under way
// have returned); Segment and Use return shm.ErrClosed from then on.
func (f *Follower) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return shm.ErrClosed
	}
	f.closed = true
	if f.cur == nil {
		return nil
	}
	return f.retire()
}
