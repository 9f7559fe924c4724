package reqlog

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Filter parameters of a listing, as the api and the console take them.
var FilterParams = []string{"status", "route", "consumer", "since", "until", "request_id"}

// FilterError is a filter that cannot be read: Field names the parameter.
type FilterError struct {
	Field, Message string
}

func (e *FilterError) Error() string { return e.Field + ": " + e.Message }

// ParseFilters reads the filters from get (a query parameter's value, "" when absent)
// into q. status is a status (502) or a class (5xx); since and until are RFC 3339 times
// or YYYY-MM-DD (UTC midnight); route matches a route's id or name.
func ParseFilters(get func(string) string, q *Query) error {
	if s := get("status"); s != "" {
		if len(s) == 3 && s[1:] == "xx" && s[0] >= '1' && s[0] <= '5' {
			q.StatusClass = int(s[0] - '0')
		} else if n, err := strconv.Atoi(s); err == nil && n >= 100 && n <= 599 {
			q.Status = n
		} else {
			return &FilterError{"status", fmt.Sprintf("must be a status (100–599) or a class such as 5xx, got %q", clip(s))}
		}
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{"route", &q.RouteID}, {"consumer", &q.ConsumerID}, {"request_id", &q.RequestID}} {
		v := get(f.name)
		if len(v) > MaxIDLen || !text(v) {
			return &FilterError{f.name, fmt.Sprintf("must be at most %d characters of text", MaxIDLen)}
		}
		*f.to = v
	}
	var err error
	if q.Since, err = parseTime("since", get("since")); err != nil {
		return err
	}
	if q.Until, err = parseTime("until", get("until")); err != nil {
		return err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return &FilterError{"until", "must be after since"}
	}
	return nil
}

func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil && t.Year() >= 2000 && t.Year() <= 9999 {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil && t.Year() >= 2000 {
		return t, nil
	}
	return time.Time{}, &FilterError{field, fmt.Sprintf("must be an RFC 3339 time or YYYY-MM-DD, got %q", clip(s))}
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Encode is the cursor as the opaque string clients pass back.
func (c *Cursor) Encode() string {
	if c == nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.Time.UnixNano(), 10) + "." + strconv.FormatInt(c.ID, 10)))
}

// DecodeCursor reads what Encode made; "" is no cursor.
func DecodeCursor(s string) (*Cursor, error) {
	if s == "" {
		return nil, nil
	}
	bad := &FilterError{"cursor", "is not one this API returned: pass next back unchanged"}
	if len(s) > 64 {
		return nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	ts, id, ok := strings.Cut(string(b), ".")
	if !ok {
		return nil, bad
	}
	ns, err1 := strconv.ParseInt(ts, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if err1 != nil || err2 != nil || n < 0 {
		return nil, bad
	}
	return &Cursor{Time: time.Unix(0, ns).UTC(), ID: n}, nil
}
