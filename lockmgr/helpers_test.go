package lockmgr_test

var helpers = map[string]func(args []string) int{}
