package shm

import (
	"errors"
	"os"

	"github.com/shmlock/shmlock/internal/fsys"
)

// FileClosed reports whether s's file is closed.
func FileClosed(s *Segment) bool {
	_, err := s.file.Stat()
	return errors.Is(err, os.ErrClosed)
}

// setHook replaces *hook with f, and returns a function that restores it.
func setHook(hook *func(), f func()) (restore func()) {
	old := *hook
	*hook = f
	return func() { *hook = old }
}

// SetTestHookBeforePublish replaces the hook that runs between writing a
// claim and publishing it.
func SetTestHookBeforePublish(f func()) (restore func()) { return setHook(&testHookBeforePublish, f) }

// SetTestHookBetweenSteps replaces the hook that runs between a claim's
// (or release's) two counts.
func SetTestHookBetweenSteps(f func()) (restore func()) { return setHook(&testHookBetweenSteps, f) }

// SetTestHookDeadRef replaces the hook that runs in DropDeadClaims' listing
// of dead records between loading a record's owner and checking it lives.
func SetTestHookDeadRef(f func()) (restore func()) { return setHook(&testHookDeadRef, f) }

// SetTestHookLastRef replaces the hook that runs in a Release between
// taking the reference off Refs and freeing the entry.
func SetTestHookLastRef(f func()) (restore func()) { return setHook(&testHookLastRef, f) }

// SetTestHookFreeing replaces the hook that runs while an entry is freed,
// between marking it free and forgetting the records that name it.
func SetTestHookFreeing(f func()) (restore func()) { return setHook(&testHookFreeing, f) }

// SetTestHookBeforeUnlink replaces the hook that runs in Remove between
// checking the file and removing its name.
func SetTestHookBeforeUnlink(f func()) (restore func()) { return setHook(&testHookBeforeUnlink, f) }

// SetTestHookBeforeLink replaces the hook that runs in Create before the
// complete segment is linked under its name.
func SetTestHookBeforeLink(f func()) (restore func()) { return setHook(&testHookBeforeLink, f) }

// SetTestHookOperatorLock replaces the hook that runs in TryLockOperator
// between its checks and the lock's take.
func SetTestHookOperatorLock(f func()) (restore func()) { return setHook(&testHookOperatorLock, f) }

// SetTestHookReplaced replaces the hook that runs in Replaced between its
// check for Close and the stat of the file.
func SetTestHookReplaced(f func()) (restore func()) { return setHook(&testHookReplaced, f) }

// SetTestHookAside replaces the hook that runs in Remove once the name is
// moved aside, with the hidden path.
func SetTestHookAside(f func(aside string)) (restore func()) {
	old := testHookAside
	testHookAside = f
	return func() { testHookAside = old }
}

// AsideName is the hidden name Remove gives a segment of base name name,
// as the process remover would (nonce tells names apart), and ParseAside
// reads one back.
func AsideName(remover fsys.Maker, name string, nonce uint64) string {
	return asideName(remover, originOf(name), nonce, false)
}

// ParseAside reads a hidden name: its remover, the name it keeps ("" for a
// digest) and whether the name is one.
func ParseAside(base string) (fsys.Maker, string, bool) {
	id, o, ok := parseAside(base)
	return id, o.name, ok
}

// RegistryQueued reports whether a goroutine of this process has s's
// registryMu: one that changes the directory, or waits for its lock word.
func (s *Segment) RegistryQueued() bool {
	if s.registryMu.TryLock() {
		s.registryMu.Unlock()
		return false
	}
	return true
}

var ShellWord = shellWord
