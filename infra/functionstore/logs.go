package functionstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
)

// Function logs: the edges publish what tenants' functions log (and why an edge gave up
// on one) to "<prefix>.fnlog.<tenant_id>"; the stream keeps each tenant's last
// LogsPerTenant lines for LogMaxAge, and the api reads them back for the tenant.
const (
	LogsPerTenant = 1000
	LogMaxAge     = 24 * time.Hour
)

// LogLine is one line a function logged at an edge (proxy_log), or the reason the
// edge gave up on it (a trap, its time run out, a bad host call).
type LogLine struct {
	Time      time.Time `json:"time"`
	TenantID  string    `json:"tenant_id"`
	RouteID   string    `json:"route_id"`
	Function  string    `json:"function"`
	SHA256    string    `json:"sha256"`
	Level     string    `json:"level" doc:"trace, debug, info, warn, error or critical."`
	Message   string    `json:"message"`
	RequestID string    `json:"request_id"`
}

// LogStream is the stream of natsPrefix's function logs.
func LogStream(natsPrefix string) string { return natsPrefix + "_function_logs" }

// LogSubject is the subject of one tenant's function logs.
func LogSubject(natsPrefix, tenantID string) string { return natsPrefix + ".fnlog." + tenantID }

// EnsureLogStream creates the log stream or brings it to these settings: memory is not
// enough (the api reads after restarts), so file storage; LogsPerTenant per subject, the
// oldest dropped; LogMaxAge; replicas copies, raised and never lowered.
func EnsureLogStream(ctx context.Context, js jetstream.JetStream, natsPrefix string, replicas int) (jetstream.Stream, error) {
	name := LogStream(natsPrefix)
	return natsconn.EnsureStream(ctx, js, jetstream.StreamConfig{
		Name:              name,
		Description:       "Tollgate tenants' function logs, <prefix>.fnlog.<tenant_id>; read by the api",
		Subjects:          []string{natsPrefix + ".fnlog.*"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: LogsPerTenant,
		MaxAge:            LogMaxAge,
		Discard:           jetstream.DiscardOld,
		Replicas:          replicas,
	})
}

// LogReader reads tenants' function logs back (api.FunctionLogReader).
type LogReader struct {
	js       jetstream.JetStream
	prefix   string
	replicas int
}

// NewLogReader reads the logs of natsPrefix, creating the stream when it is missing.
func NewLogReader(js jetstream.JetStream, natsPrefix string, replicas int) *LogReader {
	return &LogReader{js: js, prefix: natsPrefix, replicas: replicas}
}

// FunctionLogs returns up to limit of the tenant's latest lines, oldest first, of
// function only when it is not "". Lines that do not decode are skipped.
func (l *LogReader) FunctionLogs(ctx context.Context, tenantID, function string, limit int) ([]LogLine, error) {
	if limit <= 0 {
		return []LogLine{}, nil
	}
	s, err := l.js.Stream(ctx, LogStream(l.prefix))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if s, err = EnsureLogStream(ctx, l.js, l.prefix, l.replicas); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	// An ordered consumer is ephemeral and cleaned up by the server; a single filter
	// subject works on servers before 2.10 too.
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{LogSubject(l.prefix, tenantID)},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	pending := int(info.NumPending)
	ring := make([]LogLine, 0, min(limit, LogsPerTenant))
	start := 0 // ring's oldest line once it is full
	for read := 0; read < pending; {
		wait := 2 * time.Second
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d))
		}
		if wait <= 0 {
			return nil, context.DeadlineExceeded
		}
		batch, err := c.Fetch(min(pending-read, 256), jetstream.FetchMaxWait(wait))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var line LogLine
			if json.Unmarshal(m.Data(), &line) != nil || function != "" && line.Function != function {
				continue
			}
			if len(ring) < limit {
				ring = append(ring, line)
				continue
			}
			ring[start] = line
			start = (start + 1) % limit
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, err
		}
		if n == 0 {
			break // the oldest lines aged out while we read
		}
		read += n
	}
	return append(ring[start:], ring[:start]...), nil
}
