package badname_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

func TestMain(m *testing.M) { testproc.Main(m, nil) }

// badNames are invalid for every kind of name; max is the longest valid
// length of the name at hand.
func badNames(max int) map[string]string {
	return map[string]string{
		"empty":         "",
		"one too long":  strings.Repeat("n", max+1),
		"invalid UTF-8": "bad\xffname",
		"NUL":           "a\x00b",
		"newline":       "a\nb",
		"DEL":           "a\x7fb",
		"C1 control":    "a\u0085b",
	}
}

// Every entry point that takes a name, with the longest valid name of its
// kind. Claim treats "" as an unnamed claim, on purpose (documented), so
// its table leaves the empty name out.
var entryPoints = []struct {
	name    string
	max     int
	noEmpty bool
	own     error // the package's own sentinel, which wraps layout.ErrBadName; nil if none
	call    func(seg *shm.Segment, m *lockmgr.Manager, name string) error
}{
	{"spinlock.Named", layout.MaxNameLen, false, nil, func(seg *shm.Segment, _ *lockmgr.Manager, n string) error {
		_, err := spinlock.Named(seg, n, spinlock.PIDTID)
		return err
	}},
	{"upgrade.Named", layout.MaxNameLen, false, nil, func(seg *shm.Segment, _ *lockmgr.Manager, n string) error {
		_, err := upgrade.Named(seg, n)
		return err
	}},
	{"shm.Segment.Claim", layout.MaxNameLen, true, nil, func(seg *shm.Segment, _ *lockmgr.Manager, n string) error {
		_, err := seg.Claim(layout.KindOwnerSlots, n)
		return err
	}},
	{"shm.Segment.ClaimAs", layout.MaxNameLen, true, nil, func(seg *shm.Segment, _ *lockmgr.Manager, n string) error {
		_, err := seg.ClaimAs(layout.KindUpgrades, n, 1)
		return err
	}},
	{"shm.Segment.Lookup", layout.MaxNameLen, false, nil, func(seg *shm.Segment, _ *lockmgr.Manager, n string) error {
		_, err := seg.Lookup(layout.KindOwnerSlots, n)
		return err
	}},
	{"lockmgr.Acquire resource", lockmgr.MaxResourceLen, false, lockmgr.ErrBadResource, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		_, err := m.Acquire(context.Background(), n, "owner", lockmgr.Exclusive, lockmgr.AcquireOptions{})
		return err
	}},
	{"lockmgr.Acquire owner", lockmgr.MaxOwnerLen, false, lockmgr.ErrBadOwner, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		_, err := m.Acquire(context.Background(), "res", n, lockmgr.Exclusive, lockmgr.AcquireOptions{})
		return err
	}},
	{"lockmgr.Release resource", lockmgr.MaxResourceLen, false, lockmgr.ErrBadResource, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		return m.Release(n, "owner")
	}},
	{"lockmgr.Release owner", lockmgr.MaxOwnerLen, false, lockmgr.ErrBadOwner, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		return m.Release("held", n)
	}},
	{"lockmgr.Refresh", lockmgr.MaxOwnerLen, false, lockmgr.ErrBadOwner, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		_, err := m.Refresh("held", n, time.Minute)
		return err
	}},
	{"lockmgr.MarkConsistent resource", lockmgr.MaxResourceLen, false, lockmgr.ErrBadResource, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		return m.MarkConsistent(n, "owner")
	}},
	{"lockmgr.MarkConsistent owner", lockmgr.MaxOwnerLen, false, lockmgr.ErrBadOwner, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		return m.MarkConsistent("held", n)
	}},
	{"lockmgr.SetCompanion", lockmgr.MaxOwnerLen, false, lockmgr.ErrBadOwner, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		return m.SetCompanion("held", n, os.Getpid())
	}},
	{"lockmgr.Inspect", lockmgr.MaxResourceLen, false, lockmgr.ErrBadResource, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		_, err := m.Inspect(n)
		return err
	}},
	{"lockmgr.CheckVersion", lockmgr.MaxResourceLen, false, lockmgr.ErrBadResource, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		return m.CheckVersion(n, 1)
	}},
	{"lockmgr.Declare", lockmgr.MaxResourceLen, false, lockmgr.ErrBadResource, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		return m.Declare("fine", n)
	}},
	{"lockmgr.Undeclare", lockmgr.MaxResourceLen, false, lockmgr.ErrBadResource, func(_ *shm.Segment, m *lockmgr.Manager, n string) error {
		return m.Undeclare(n)
	}},
}

// Each bad name is refused with an error that wraps layout.ErrBadName (the
// package's own sentinel too, where it has one), and the segment's file
// is byte for byte as it was. The longest valid name is accepted.
func TestBadNamesRefusedEverywhere(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{})
	require.NoError(t, err)
	defer seg.Close()
	m, err := lockmgr.Open(seg, lockmgr.Options{})
	require.NoError(t, err)
	_, err = m.Acquire(context.Background(), "held", "owner", lockmgr.Exclusive, lockmgr.AcquireOptions{})
	require.NoError(t, err)

	for _, ep := range entryPoints {
		for what, name := range badNames(ep.max) {
			if name == "" && ep.noEmpty {
				continue
			}
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			err = ep.call(seg, m, name)
			require.ErrorIs(t, err, layout.ErrBadName, "%s with a name %s", ep.name, what)
			if ep.own != nil {
				require.ErrorIs(t, err, ep.own, "%s with a name %s", ep.name, what)
			}
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, string(before) == string(after), "%s with a name %s changed the file", ep.name, what)
		}
		longest := strings.Repeat("é", ep.max/2) // two bytes each: the longest valid name
		if err := ep.call(seg, m, longest); errors.Is(err, layout.ErrBadName) {
			t.Errorf("%s refuses the longest valid name: %v", ep.name, err)
		}
	}
}
