package etcdtest

import "strconv"

// FreePorts is freePorts.
var FreePorts = freePorts

// SetPickPorts makes Start pick its ports with pick until restore.
func SetPickPorts(pick func(n int) ([]int, error)) (restore func()) {
	pickPorts = pick
	return func() { pickPorts = freePorts }
}

// Ports are the ports c's members listen on, as a pick lists them: each
// member's client port, then its peer port.
func Ports(c *Cluster) []int {
	var ports []int
	for _, m := range c.Members {
		for _, u := range []string{m.cfg.ListenClientUrls[0].Port(), m.cfg.ListenPeerUrls[0].Port()} {
			p, err := strconv.Atoi(u)
			if err != nil {
				panic(err)
			}
			ports = append(ports, p)
		}
	}
	return ports
}
