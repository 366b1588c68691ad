package shm

import (
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/shmlock/shmlock/internal/fsys"
	"github.com/shmlock/shmlock/layout"
)

// Permission bits of a segment's file besides its owner's. Whoever they
// let in can wedge or forge every lock in the segment.
const (
	permGroup   fs.FileMode = 0o070 // any access for the file's group
	permGroupRW fs.FileMode = 0o060 // the group reads and writes: a group segment (Create's 0660)
	permOthers  fs.FileMode = 0o007 // any access for everyone else
)

// checkAccess refuses a segment file f that opts do not let this process
// use: one owned by another user (ErrForeignOwner) unless
// AllowForeignOwner, or GroupAccess and the file is a group segment of one
// of this process's groups; one whose mode lets others in
// (ErrPermissiveMode) unless AllowOthersAccess; and one whose mode lets its
// group in unless GroupAccess or AllowOthersAccess.
//
// The advice of a refusal for the mode is for a shell's user (shmctl's) as
// much as for Go code: the chmod to run, the flag or the option to set. A
// file that is no segment at all (a mistyped path) is said to be that
// instead, with no chmod: none would make it a segment.
func checkAccess(path string, f io.ReaderAt, fi fs.FileInfo, opts Options) error {
	perm := fi.Mode().Perm()
	if uid, ok := fsys.Owner(fi); ok && uid != fsys.Euid() && !opts.AllowForeignOwner {
		if err := checkGroupMember(path, fi, uid, opts); err != nil {
			return err
		}
	}
	others := perm&permOthers != 0 && !opts.AllowOthersAccess
	group := perm&permGroup != 0 && !opts.GroupAccess && !opts.AllowOthersAccess
	switch {
	case (others || group) && !hasMagic(f):
		return fmt.Errorf("%w: %s has mode %04o, but is no shmlock segment at all (it does not start with the magic): check the path", ErrPermissiveMode, path, perm)
	case others:
		return fmt.Errorf("%w: %s has mode %04o: other users may use it (chmod o-rwx %s makes it private; Go code that trusts them sets Options.AllowOthersAccess)",
			ErrPermissiveMode, path, perm, shellWord(path))
	case group:
		return fmt.Errorf("%w: %s has mode %04o: its group may use it (a group segment opens with shmctl --group, or Options.GroupAccess in Go; chmod g-rwx %s makes it private)",
			ErrPermissiveMode, path, perm, shellWord(path))
	}
	return nil
}

// hasMagic reports whether f starts with the segment magic.
func hasMagic(f io.ReaderAt) bool {
	b := make([]byte, len(layout.Magic))
	n, _ := f.ReadAt(b, 0)
	return n == len(b) && string(b) == layout.Magic
}

// shellWord is s as one word of sh(1), quoted only if it must be, so that
// advice that names a path can be pasted into a shell as it is. A relative
// path that starts with "-" gets "./" before it: quoted or not, chmod
// would read it as an option.
func shellWord(s string) string {
	if strings.HasPrefix(s, "-") {
		s = "./" + s
	}
	plain := func(r rune) bool {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("/._-+:@%,=", r)
	}
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !plain(r) }) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
