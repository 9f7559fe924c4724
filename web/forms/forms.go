// Package forms is what the console (package web) and the developer portal (package
// portal) share about serving HTML forms to strangers: the pages a POST keeps for the
// browser's next GET (post/redirect/get), the client address their throttles count by,
// mail sent without telling a client how long it took, and numbers as people read them.
package forms

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Post/redirect/get: a POST never answers with a page. A page it would draw (a form with
// its values and messages, a secret shown once) is kept in a Store under the browser's
// key and the POST answers 303 to the form's page; the next GET of that page by the same
// browser draws it, once. A reload then draws the page afresh and posts nothing again;
// nothing of the form goes into the URL, so a key or a password never lands in a log.
//
// Kept pages live in this process's memory: behind a load balancer the browser must come
// back to the same replica (sticky sessions) to see them; elsewhere it sees the form's
// page as a fresh GET draws it.

// Kept is one page kept for its GET.
type Kept[P any] struct {
	Path    string // the GET that draws it
	Name    string // the template
	Page    P
	Status  int
	Retry   string // Retry-After of a throttled form
	Expires time.Time
}

// Store holds kept pages, first in first out per browser key, so that concurrent
// submissions from one browser each find one answer. The zero value takes the defaults.
type Store[P any] struct {
	// PerKey bounds one browser's kept pages (the oldest go first). Default 64.
	PerKey int
	// Max bounds every browser's together: past it the expired go, and then all. Default 20,000.
	Max int

	mu    sync.Mutex
	byKey map[string][]Kept[P]
	n     int
}

// TTL is how long a kept page waits for its GET.
const TTL = 10 * time.Minute

func (s *Store[P]) limits() (perKey, max int) {
	perKey, max = s.PerKey, s.Max
	if perKey <= 0 {
		perKey = 64
	}
	if max <= 0 {
		max = 20000
	}
	return perKey, max
}

// Put keeps k under key.
func (s *Store[P]) Put(key string, k Kept[P], now time.Time) {
	perKey, max := s.limits()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey = map[string][]Kept[P]{}
	}
	if s.n >= max {
		s.prune(now, max)
	}
	q := s.byKey[key]
	if len(q) >= perKey {
		q = q[1:]
		s.n--
	}
	s.byKey[key] = append(q, k)
	s.n++
}

// prune drops what has expired, and every queue when that is not enough.
func (s *Store[P]) prune(now time.Time, max int) {
	for key, q := range s.byKey {
		kept := q[:0]
		for _, k := range q {
			if now.Before(k.Expires) {
				kept = append(kept, k)
			}
		}
		s.n -= len(q) - len(kept)
		if len(kept) == 0 {
			delete(s.byKey, key)
		} else {
			s.byKey[key] = kept
		}
	}
	if s.n >= max {
		s.byKey, s.n = map[string][]Kept[P]{}, 0
	}
}

// Take removes and returns the oldest live page kept under key for path.
func (s *Store[P]) Take(key, path string, now time.Time) (Kept[P], bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.byKey[key]
	for i, k := range q {
		if k.Path != path || !now.Before(k.Expires) {
			continue
		}
		s.byKey[key] = append(q[:i:i], q[i+1:]...)
		s.n--
		if len(s.byKey[key]) == 0 {
			delete(s.byKey, key)
		}
		return k, true
	}
	var zero Kept[P]
	return zero, false
}

// Len is how many pages are kept (for tests).
func (s *Store[P]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// ClientIP is the address throttles count by: the peer, or, when the peer is one of the
// trusted proxies, the right-most X-Forwarded-For address that is not one (the left-most
// entries are whatever the client wrote). Without it every client behind a load balancer
// would share one allowance, and a stranger could spend it for all of them.
func ClientIP(ctx *fiber.Ctx, trustedProxies []netip.Prefix) string {
	peer, _ := netip.AddrFromSlice(ctx.Context().RemoteIP())
	peer = peer.Unmap()
	if !trusted(trustedProxies, peer) {
		return peer.String()
	}
	hops := strings.Split(string(ctx.Request().Header.Peek(fiber.HeaderXForwardedFor)), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if a = a.Unmap(); !trusted(trustedProxies, a) {
			return a.String()
		}
	}
	return peer.String()
}

func trusted(list []netip.Prefix, a netip.Addr) bool {
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// SendMail sends m in the background, so how long the mail server takes never tells a
// client which answer it got (a taken address is mailed, an unknown one asking for a
// reset is not). A failure is logged without the message, whose links are secrets.
func SendMail(mailer tenants.Mailer, m tenants.Mail, log *slog.Logger, who string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := mailer.Send(ctx, m); err != nil {
			log.Error(who+": mail not sent", "subject", m.Subject, "err", err)
		}
	}()
}

// GroupDigits writes n with thousands separators: 1234567 → "1,234,567".
func GroupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
