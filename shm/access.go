package shm

import (
	"fmt"
	"io/fs"

	"github.com/shmlock/shmlock/internal/fsys"
)

// Permission bits of a segment's file besides its owner's. Whoever they
// let in can wedge or forge every lock in the segment.
const (
	permGroup   fs.FileMode = 0o070 // any access for the file's group
	permGroupRW fs.FileMode = 0o060 // the group reads and writes: a group segment (Create's 0660)
	permOthers  fs.FileMode = 0o007 // any access for everyone else
)

// checkAccess refuses a segment file that opts do not let this process
// use: one owned by another user (ErrForeignOwner) unless
// AllowForeignOwner, or GroupAccess and the file is a group segment of one
// of this process's groups; one whose mode lets others in
// (ErrPermissiveMode) unless AllowOthersAccess; and one whose mode lets its
// group in unless GroupAccess or AllowOthersAccess.
func checkAccess(path string, fi fs.FileInfo, opts Options) error {
	perm := fi.Mode().Perm()
	if uid, ok := fsys.Owner(fi); ok && uid != fsys.Euid() && !opts.AllowForeignOwner {
		if err := checkGroupMember(path, fi, uid, opts); err != nil {
			return err
		}
	}
	switch {
	case perm&permOthers != 0 && !opts.AllowOthersAccess:
		return fmt.Errorf("%w: %s has mode %04o: other users may use it (AllowOthersAccess, or chmod o-rwx)", ErrPermissiveMode, path, perm)
	case perm&permGroup != 0 && !opts.GroupAccess && !opts.AllowOthersAccess:
		return fmt.Errorf("%w: %s has mode %04o: its group may use it (GroupAccess, shmctl --group, or chmod g-rwx)", ErrPermissiveMode, path, perm)
	}
	return nil
}

// checkGroupMember lets through a file that user uid owns if the caller
// asked for group access, the file's group is one of this process's, and
// its mode lets that group read and write.
func checkGroupMember(path string, fi fs.FileInfo, uid uint32, opts Options) error {
	if !opts.GroupAccess {
		return fmt.Errorf("%w: %s belongs to uid %d (GroupAccess, or shmctl --group, opens a segment of one of your groups)", ErrForeignOwner, path, uid)
	}
	gid, ok := fsys.Group(fi)
	if !ok {
		return fmt.Errorf("%w: %s belongs to uid %d, and its group is unknown", ErrForeignOwner, path, uid)
	}
	member, err := fsys.InGroup(gid)
	if err != nil {
		return fmt.Errorf("shm: open %s: %w", path, err)
	}
	switch perm := fi.Mode().Perm(); {
	case !member:
		return fmt.Errorf("%w: %s belongs to uid %d and group %d, which is not one of this process's groups", ErrForeignOwner, path, uid, gid)
	case perm&permGroupRW != permGroupRW:
		return fmt.Errorf("%w: %s belongs to uid %d and has mode %04o: its group may not read and write it (a group segment is 0660)", ErrForeignOwner, path, uid, perm)
	}
	return nil
}
