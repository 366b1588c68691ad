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
// It is safe for concurrent use. A read of the old segment under way while
// another goroutine finds it replaced reports shm.ErrClosed (its mapping
// stays valid: shm.Segment.Close).
type Follower struct {
	path string
	opts shm.Options

	mu     sync.Mutex
	seg    *shm.Segment // nil while the path names no segment that opens
	closed bool
}

// Follow opens the segment at path with opts (read-only, for a monitor);
// an error if it cannot be opened now.
func Follow(path string, opts shm.Options) (*Follower, error) {
	seg, err := shm.Open(path, opts)
	if err != nil {
		return nil, err
	}
	return &Follower{path: seg.Path(), opts: opts, seg: seg}, nil
}

// Path is the segment's path (shm.ResolvePath's).
func (f *Follower) Path() string { return f.path }

// Segment returns the segment the path names now: the one open while the
// path still names its file, else the file there now, opened. An error if
// the path names no segment that opens (removed, or not made again yet);
// the next call tries again. shm.ErrClosed after Close.
func (f *Follower) Segment() (*shm.Segment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, shm.ErrClosed
	}
	if f.seg != nil {
		replaced, err := f.seg.Replaced()
		if err == nil && !replaced {
			return f.seg, nil
		}
		// Replaced, or it cannot tell: the file open is not to be shown
		// as the path's. The open below says what the path names.
		_ = f.seg.Close()
		f.seg = nil
	}
	seg, err := shm.Open(f.path, f.opts)
	if err != nil {
		return nil, err
	}
	f.seg = seg
	return seg, nil
}

// Close closes the segment open, if any; Segment returns shm.ErrClosed
// from then on.
func (f *Follower) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return shm.ErrClosed
	}
	f.closed = true
	if f.seg == nil {
		return nil
	}
	err := f.seg.Close()
	f.seg = nil
	return err
}
