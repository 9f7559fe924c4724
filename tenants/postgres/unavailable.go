package postgres

import "tollgate/tenants/postgres/pgerr"

// Unavailable reports whether err says the database could not be reached or did not
// answer in time, rather than that a statement or the code is wrong (pgerr.Unavailable):
// callers answer such failures with "not ready, retry" (the api's 503 not_ready).
func Unavailable(err error) bool { return pgerr.Unavailable(err) }
