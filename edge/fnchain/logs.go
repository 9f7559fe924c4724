package fnchain

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LogLine is one line of a tenant's function log as published on
// <prefix>.fnlog.<tenant_id>: a guest's proxy_log, or why a function failed.
type LogLine struct {
	Time      time.Time `json:"time"`
	TenantID  string    `json:"tenant_id"`
	RouteID   string    `json:"route_id"`
	Function  string    `json:"function"`
	SHA256    string    `json:"sha256"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	RequestID string    `json:"request_id"`
	// Dropped is how many of the tenant's lines the rate limit dropped since the last
	// one published.
	Dropped int64 `json:"dropped,omitempty"`
}

// maxLogMessage bounds a line's message: a guest can log megabytes per call.
const maxLogMessage = 4 << 10

// logPublisher publishes function log lines, at most rate a second per tenant (with a
// burst of as many), so a guest that logs in a loop costs the bus a bounded amount.
// Publishing is core NATS: it does not wait for the server.
type logPublisher struct {
	publish func(subject string, data []byte) error
	prefix  string // subject prefix: <natsPrefix>.fnlog
	rate    float64
	dropped prometheus.Counter

	mu      sync.Mutex
	buckets map[string]*logBucket
}

type logBucket struct {
	tokens  float64
	last    time.Time
	dropped int64
}

func (p *logPublisher) log(l *LogLine) {
	if p == nil || p.publish == nil {
		return
	}
	now := time.Now()
	p.mu.Lock()
	b := p.buckets[l.TenantID]
	if b == nil {
		if len(p.buckets) > 100_000 {
			clear(p.buckets) // tenants come and go; a full reset only refills their bursts
		}
		b = &logBucket{tokens: p.rate, last: now}
		p.buckets[l.TenantID] = b
	}
	b.tokens = min(p.rate, b.tokens+now.Sub(b.last).Seconds()*p.rate)
	b.last = now
	if b.tokens < 1 {
		b.dropped++
		p.mu.Unlock()
		p.dropped.Inc()
		return
	}
	b.tokens--
	l.Dropped, b.dropped = b.dropped, 0
	p.mu.Unlock()
	if len(l.Message) > maxLogMessage {
		l.Message = l.Message[:maxLogMessage] + "…"
	}
	l.Time = now.UTC()
	data, err := json.Marshal(l)
	if err != nil {
		return
	}
	if p.publish(p.prefix+"."+l.TenantID, data) != nil {
		p.dropped.Inc()
	}
}
