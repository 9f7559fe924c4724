package outboxrelay

import "time"

// Observer hears what the active relay does, for metrics: every change it published
// with the time since the change was written (its transaction's start, the outbox row's
// created_at), and every batch whose publish failed.
type Observer interface {
	Published(lag time.Duration)
	PublishFailed()
}

// SetObserver makes o hear the relay's publishes and failures; call it before Run.
func (r *Relay) SetObserver(o Observer) {
	r.mu.Lock()
	r.obs = o
	r.mu.Unlock()
}

func (r *Relay) observer() Observer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.obs
}
