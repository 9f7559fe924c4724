package reqlog

import "time"

// Query selects a tenant's entries, newest first. Zero fields do not filter.
type Query struct {
	TenantID string
	// Status is one status (e.g. 502) or, with StatusClass, every status of a class
	// (5 for 5xx).
	Status      int
	StatusClass int
	RouteID     string
	ConsumerID  string
	RequestID   string
	Since       time.Time // inclusive
	Until       time.Time // exclusive
	// After continues a listing: entries older than this position (Cursor.Next).
	After *Cursor
	Limit int
}

// Cursor is a position in a listing, newest first: the time and the entry's id.
type Cursor struct {
	Time time.Time
	ID   int64
}

// Page is one page of a listing.
type Page struct {
	Items []Item
	// Next is where the next page starts; nil on the last page.
	Next *Cursor
	// NotLogged sums, over the query's window (whole hours) and the tenant's retention,
	// the requests the edges did not log.
	Sampled, Dropped int64
	// RetentionDays is how far back the tenant's log goes.
	RetentionDays int
}

// Item is a stored entry with its position.
type Item struct {
	Entry
	ID int64
}
