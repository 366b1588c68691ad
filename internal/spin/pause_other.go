//go:build !amd64

package spin

// Pause spins n times; off amd64 it has no hint instruction.
func Pause(n int) {
	for range n {
	}
}
