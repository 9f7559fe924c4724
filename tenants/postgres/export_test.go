package postgres

import "time"

// SetRelayTimings shortens a relay's waits so tests run quickly.
func SetRelayTimings(r *Relay, contend, poll time.Duration, batch int) {
	r.contend, r.poll, r.batch = contend, poll, batch
}
