package shm_test

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// Users of TestGroupSegmentAcrossUsers, by numbers that /etc/passwd need
// not know: the segment's owner and a member of its group, and a stranger
// to both.
const groupGID = 64700

var (
	groupOwner  = testproc.User{UID: 64701, GID: groupGID}
	groupMember = testproc.User{UID: 64702, GID: 64702, Groups: []uint32{groupGID}}
	stranger    = testproc.User{UID: 64703, GID: 64703}
)

func openAsHelper(args []string) int {
	var opts shm.Options
	opts.GroupAccess = slices.Contains(args[1:], "group")
	opts.AllowOthersAccess = slices.Contains(args[1:], "others")
	opts.ReadOnly = slices.Contains(args[1:], "readonly")
	seg, err := shm.Open(args[0], opts)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer seg.Close()
	if !opts.ReadOnly {
		i, err := seg.Claim(layout.KindOwnerSlots, "member")
		if err == nil {
			err = seg.Release(layout.KindOwnerSlots, i)
		}
		if err != nil {
			fmt.Println(err)
			return 1
		}
	}
	fmt.Println("ok")
	return 0
}

// runAs runs helper name as u and returns its output, trimmed.
func runAs(t *testing.T, u testproc.User, name string, args ...string) string {
	t.Helper()
	out, _ := testproc.CommandAs(t, u, name, args...).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// A segment created for a group (GroupAccess, 0660 whatever the umask) is
// opened by the members of that group who ask for group access, owner
// included, and by no one else; a private one (0600) by its owner alone.
// Each refusal leaves the file as it was.
func TestGroupSegmentAcrossUsers(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs helpers as other users")
	}
	group, private := testproc.SegmentPath(t), testproc.SegmentPath(t)
	for path, how := range map[string]string{group: "group", private: "private"} {
		require.Equal(t, "ok", runAs(t, groupOwner, "create-as", path, how))
	}
	for path, want := range map[string]os.FileMode{group: 0o660, private: 0o600} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		require.Equal(t, want, fi.Mode().Perm(), "mode of %s", path)
		require.Equal(t, [2]uint32{groupOwner.UID, groupGID}, [2]uint32{st.Uid, st.Gid}, "owner and group of %s", path)
	}

	// want is "ok" or an error that the helper's message must contain.
	check := func(t *testing.T, u testproc.User, path string, want error, opts ...string) {
		t.Helper()
		before, err := os.ReadFile(path)
		require.NoError(t, err)
		got := runAs(t, u, "open-as", append([]string{path}, opts...)...)
		if want == nil {
			require.Equal(t, "ok", got, "uid %d, options %q", u.UID, opts)
			return
		}
		require.Contains(t, got, want.Error(), "uid %d, options %q", u.UID, opts)
		after, err := os.ReadFile(path)
		require.NoError(t, err)
		require.True(t, string(before) == string(after), "uid %d, options %q: a refused open changed the file", u.UID, opts)
	}
	t.Run("0660", func(t *testing.T) {
		check(t, groupMember, group, nil, "group")
		check(t, groupMember, group, nil, "group", "readonly")
		check(t, groupMember, group, shm.ErrForeignOwner)
		check(t, groupOwner, group, nil, "group")
		check(t, groupOwner, group, shm.ErrPermissiveMode) // the creator asks too
		check(t, stranger, group, fs.ErrPermission, "group", "others")
		check(t, groupMember, private, fs.ErrPermission, "group")
		check(t, groupOwner, private, nil)

		// This process (root) is in no group of the file's.
		for _, tc := range []struct {
			opts shm.Options
			want error
		}{
			{shm.Options{GroupAccess: true}, shm.ErrForeignOwner},
			{shm.Options{AllowForeignOwner: true}, shm.ErrPermissiveMode},
			{shm.Options{AllowForeignOwner: true, GroupAccess: true}, nil},
		} {
			seg, err := shm.Open(group, tc.opts)
			require.ErrorIs(t, err, tc.want, "root, %+v", tc.opts)
			if err == nil {
				require.NoError(t, seg.Close())
			}
		}
	})
	t.Run("0666", func(t *testing.T) {
		require.NoError(t, os.Chmod(group, 0o666))
		check(t, groupMember, group, shm.ErrPermissiveMode, "group")
		check(t, groupMember, group, nil, "group", "others")
		check(t, stranger, group, shm.ErrForeignOwner, "group", "others")
	})
	t.Run("0640", func(t *testing.T) {
		require.NoError(t, os.Chmod(group, 0o640))
		check(t, groupMember, group, shm.ErrForeignOwner, "group", "readonly")
	})
}
