package shm

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

// SetTestHookLastRef replaces the hook that runs in a Release between
// taking the reference off Refs and freeing the entry.
func SetTestHookLastRef(f func()) (restore func()) { return setHook(&testHookLastRef, f) }

// SetTestHookFreeing replaces the hook that runs while an entry is freed,
// between marking it free and forgetting the records that name it.
func SetTestHookFreeing(f func()) (restore func()) { return setHook(&testHookFreeing, f) }

// SetTestHookBeforeUnlink replaces the hook that runs in Remove between
// checking the file and removing its name.
func SetTestHookBeforeUnlink(f func()) (restore func()) { return setHook(&testHookBeforeUnlink, f) }
