package postgres

import "time"

// SetRelayTimings shortens a relay's waits so tests run quickly.
func SetRelayTimings(r *Relay, contend, poll time.Duration, batch int) {
	r.SetTimings(contend, poll, batch)
}

// RevLockID is the advisory lock a write transaction takes before its outbox rows: a test
// that holds it stops every write in the middle of its transaction.
const RevLockID = revLockID
