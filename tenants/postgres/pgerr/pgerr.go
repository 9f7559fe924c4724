// Package pgerr sorts the errors of the Postgres driver, for the stores that share it
// (tenants/postgres, billing/postgres) and their callers.
package pgerr

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err says the database could not be reached or did not
// answer in time, rather than that a statement or the code is wrong: the connection was
// refused, reset or closed, connecting failed, a deadline or the statement timeout
// expired, or the server is shutting down, starting up or out of connection slots.
// Callers answer such failures with "not ready, retry" (the api's 503 not_ready); anything
// else is a bug to report. It recognizes the errors of tenants' and billing's stores,
// which share the driver.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server answered: only these codes say it cannot serve right now.
		return unavailableCode(pgErr.Code)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case pgconn.Timeout(err), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &connectErr):
		return true
	case errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true // the server went away mid-conversation
	case errors.As(err, &netErr):
		return true // refused, reset, broken pipe, unreachable, timed out
	}
	return false
}

// unavailableCode reports whether a server error code means "cannot serve now".
func unavailableCode(code string) bool {
	switch code {
	case "57014", // query_canceled: the statement timeout, or a cancel at the caller's deadline
		"57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now: starting up, shutting down, in recovery
		"53300": // too_many_connections
		return true
	}
	return strings.HasPrefix(code, "08") // connection_exception and its subclasses
}
