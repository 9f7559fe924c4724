package function

// LiveInstances counts the instances a runtime holds (pooled or serving).
func LiveInstances(r *Runtime) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}
