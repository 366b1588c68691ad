package shm

// SetTestHookBeforePublish replaces the hook that runs between writing a
// claim and publishing it, and returns a function that restores it.
func SetTestHookBeforePublish(f func()) (restore func()) {
	old := testHookBeforePublish
	testHookBeforePublish = f
	return func() { testHookBeforePublish = old }
}
