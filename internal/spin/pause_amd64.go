package spin

// Pause executes n PAUSE instructions: a spin-wait hint that spaces a
// waiter's loads without giving the CPU away.
func Pause(n int)
