package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
)

// A member of a group segment's group, who does not own it, uses it from
// every command that opens a segment when it says --group, and is refused
// otherwise. The member is a uid and gids that /etc/passwd need not know.
func TestGroupMemberUsesGroupSegment(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs shmctl as another user")
	}
	const owner, member, gid = 64711, 64712, 64710
	path := testproc.SegmentPath(t)
	r := shmctl(t, false, "create", path, "--group")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	require.NoError(t, os.Chown(path, owner, gid))

	run := func(args ...string) (string, error) {
		cmd := testproc.CommandAs(t, testproc.User{UID: member, GID: member, Groups: []uint32{gid}}, "shmctl", args...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("slots", path)
	require.Error(t, err, "slots without --group; output:\n%s", out)
	require.True(t, strings.HasPrefix(out, "shmctl: shm: segment is owned by another user"), "output:\n%s", out)

	for _, args := range [][]string{
		{"info", path},
		{"slots", path},
		{"rwlocks", path},
		{"txns", path},
		{"locks", path},
		{"stats", path},
		{"lock", path, "res", "--", "true"},
		{"reclaim", path},
	} {
		out, err := run(append([]string{"--group"}, args...)...)
		require.NoError(t, err, "%q as a member of the group; output:\n%s", args, out)
	}
}
