package etcdlock_test

func counterHelper(args []string) int { return 1 }
func holdHelper(args []string) int    { return 1 }
