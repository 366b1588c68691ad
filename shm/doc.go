// Package shm creates, opens and closes shmlock segments and gives typed
// access to their tables.
//
// A segment is a file (a bare name such as "jobs" means /dev/shm/jobs) that
// every process maps MAP_SHARED; its format is package layout's. Creation is
// race-free across processes: the creator writes the whole segment into an
// unnamed file and then links it under its name, so another process either
// finds no file or finds a complete one, and exactly one of several racing
// creators succeeds (the others get ErrExists, or the winner's segment from
// OpenOrCreate). The file's memory is reserved before it has a name, so a
// full /dev/shm fails Create with ErrNoSpace rather than a later access to
// the segment with SIGBUS.
//
// Opening is defensive: a symlink, a non-regular file, a file owned by another
// user (ErrForeignOwner), a file whose mode lets other users in
// (ErrPermissiveMode), a malformed header, a size that disagrees with the
// header and a segment made in another PID namespace are each refused with a
// typed error unless an option allows it.
//
// A segment is private to its owner (mode 0600) unless it is shared with a
// group by Options.GroupAccess, which every process that uses it sets: Create
// then makes the file 0660, and Open takes a file whose group may use it,
// owned by this user or by another one whose file's group is one of this
// process's groups. Without GroupAccess, group bits in the file's mode are
// refused, the owner's own segment included; bits for others are refused
// unless Options.AllowOthersAccess.
//
// Entries of the owner-slot and upgrade-mutex tables are claimed and released
// through a directory, optionally by name, so unrelated processes find the
// same lock: claiming a claimed name returns its entry and counts one more
// reference. Each process's references are recorded, so that a dead
// process's are dropped (DropDeadClaims, and any claim that finds no room)
// and a process releases only its own. The directory is guarded by a
// registry lock that records its holder's identity, so a process that dies
// mid-claim delays the others only until they notice its death.
//
// The data the locks protect goes in named data regions (Data): pieces of
// the segment's data area, claimed by name and size like the locks and
// kept as long as the segment exists, so every process that names one maps
// the same bytes.
//
//	seg, err := shm.OpenOrCreate("jobs", shm.Options{})
//	if err != nil { ... }
//	defer seg.Close()
//	i, err := seg.Claim(layout.KindOwnerSlots, "queue")
//	slot, err := seg.Slot(i)
//	queue, err := seg.Data("queue", 4096) // the memory the lock guards
package shm
