package etcdtest

// FreePorts is freePorts.
var FreePorts = freePorts

// SetPickPorts makes Start pick its ports with pick until restore.
func SetPickPorts(pick func(n int) ([]int, error)) (restore func()) {
	pickPorts = pick
	return func() { pickPorts = freePorts }
}
