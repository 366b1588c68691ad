package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shmlock/shmlock/cmd/shmctl/internal/bench"
	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
)

// addCompletions makes the shells complete segment names (the segments in
// /dev/shm, by their magic), lock names inside a segment, and the values
// of the flags that take one of a few words.
func addCompletions(root *cobra.Command) {
	oneSegment := func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return segmentNames(prefix)
	}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "create", "demo", "bench", "version", "completion", "help", "demo-worker", "lock-guard":
		case "rm":
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
				return segmentNames(prefix)
			}
		case "unlock", "lock":
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
				switch len(args) {
				case 0:
					return segmentNames(prefix)
				case 1:
					return lockNames(args[0], prefix, groupFlag(cmd)), cobra.ShellCompDirectiveNoFileComp
				}
				if cmd.Name() == "unlock" { // a segment and a name, nothing more
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return nil, cobra.ShellCompDirectiveDefault // lock's command
			}
		default:
			c.ValidArgsFunction = oneSegment
		}
		words := map[string][]string{
			"workload": bench.Workloads(),
			"lock":     bench.LockNames(),
			"mode":     {lockmgr.Exclusive.String(), lockmgr.Collaborative.String(), "shared"},
			"kind":     {unlockSlot, unlockUpgrade, unlockResource},
		}
		for flag, values := range words {
			if c.Flags().Lookup(flag) != nil {
				_ = c.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
			}
		}
	}
}

// segmentNames are the segments in the default directory whose names
// start with prefix; a prefix with a slash is a path, which the shell
// completes as files. A hidden name is offered only for a prefix that
// starts with a dot, as the shells offer hidden files: the directory's
// hidden segments are killed removers' leftovers (.shmlock-rm-...), not
// segments anyone means by default.
func segmentNames(prefix string) ([]string, cobra.ShellCompDirective) {
	if strings.ContainsRune(prefix, '/') {
		return nil, cobra.ShellCompDirectiveDefault
	}
	entries, err := os.ReadDir(shm.DefaultDir)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, e := range entries {
		hidden := strings.HasPrefix(e.Name(), ".") && !strings.HasPrefix(prefix, ".")
		if e.Type().IsRegular() && !hidden && strings.HasPrefix(e.Name(), prefix) && hasMagic(filepath.Join(shm.DefaultDir, e.Name())) {
			names = append(names, e.Name())
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// hasMagic reports whether the file at path starts with a segment's magic.
// The entry's type was read before, and the name may be a FIFO or a device
// by now: OpenNoFollow opens only a regular file (nor follows a symlink).
func hasMagic(path string) bool {
	f, err := fsys.OpenNoFollow(path, true)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, len(layout.Magic))
	_, err = io.ReadFull(f, b)
	return err == nil && string(b) == layout.Magic
}

// lockNames are the names of the slots, upgrade mutexes and lock-manager
// resources of the segment that start with prefix (read-only: completion
// changes nothing). group is the command line's --group, without which a
// group segment's mode refuses the open, as it refuses the command's.
func lockNames(segment, prefix string, group bool) []string {
	seg, err := shm.Open(segment, shm.Options{ReadOnly: true, GroupAccess: group})
	if err != nil {
		return nil
	}
	defer seg.Close()
	seen := map[string]bool{}
	var names []string
	add := func(n string) {
		if n != "" && !seen[n] && strings.HasPrefix(n, prefix) {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
		if claims, err := seg.Claims(k); err == nil {
			for _, c := range claims {
				add(c.Name)
			}
		}
	}
	if seg.Len(layout.KindLockMgr) > 0 {
		if m, err := lockmgr.Open(seg, lockmgr.Options{}); err == nil {
			for _, r := range m.List() {
				add(r.Resource)
			}
		}
	}
	return names
}
