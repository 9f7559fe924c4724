package limit

import "context"

// Heartbeat records the edge in the live-edge set now (the background loop does it
// every HeartbeatInterval).
func (l *Limiter) Heartbeat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return l.heartbeat(ctx)
}

// Probe does what the background loop does while the breaker is open: try Redis, and
// close the breaker when it answers.
func (l *Limiter) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.connect(ctx); err != nil {
		return err
	}
	l.recover()
	return nil
}
