package fsys

// SetByteLockedHook sets the hook TryLockByte runs with the descriptor
// that holds its lock, and returns the restore.
func SetByteLockedHook(hook func(fd int)) (restore func()) {
	old := testHookByteLocked
	testHookByteLocked = hook
	return func() { testHookByteLocked = old }
}
