package web

import (
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Post/redirect/get: a POST never answers with a page. A form that must be shown again
// with its values and messages, or a page that shows a secret once (a key just created),
// is kept here by render, tied to the browser's session (or, signed out, to its
// pre-session CSRF cookie), and the POST answers 303 to the form's page; the next GET of
// that page by the same browser draws it, once. A reload then draws the page afresh and
// posts nothing. Nothing of the form goes into the URL, so a key or a password never
// lands in a log or the history.
//
// The kept pages live in this process's memory: behind a load balancer, the browser must
// come back to the same api replica (sticky sessions) to see them; elsewhere it sees the
// form's page as a fresh GET draws it.

const (
	flashTTL    = 10 * time.Minute
	flashPerKey = 64    // one browser's concurrent submissions of a form
	flashMax    = 20000 // every browser's: past it, the oldest are dropped
	localBack   = "web.back"
)

type replay struct {
	path    string // the GET that draws it
	name    string // the template
	p       page
	status  int
	retry   string // Retry-After of a throttled form
	expires time.Time
}

// flashes holds the pages kept for their GET, first in first out per browser, so that
// concurrent submissions from one browser each find one answer.
type flashes struct {
	mu    sync.Mutex
	byKey map[string][]replay
	n     int
}

func (f *flashes) put(key string, r replay, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byKey == nil {
		f.byKey = map[string][]replay{}
	}
	if f.n >= flashMax {
		f.prune(now, true)
	}
	q := f.byKey[key]
	if len(q) >= flashPerKey {
		q = q[1:]
		f.n--
	}
	f.byKey[key] = append(q, r)
	f.n++
}

// prune drops what has expired; all drops every queue when that is not enough.
func (f *flashes) prune(now time.Time, all bool) {
	for k, q := range f.byKey {
		kept := q[:0]
		for _, r := range q {
			if now.Before(r.expires) {
				kept = append(kept, r)
			}
		}
		f.n -= len(q) - len(kept)
		if len(kept) == 0 {
			delete(f.byKey, k)
		} else {
			f.byKey[k] = kept
		}
	}
	if all && f.n >= flashMax {
		f.byKey, f.n = map[string][]replay{}, 0
	}
}

// take removes and returns the oldest live page kept under key for path.
func (f *flashes) take(key, path string, now time.Time) (replay, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.byKey[key]
	for i, r := range q {
		if r.path != path || !now.Before(r.expires) {
			continue
		}
		f.byKey[key] = append(q[:i:i], q[i+1:]...)
		f.n--
		if len(f.byKey[key]) == 0 {
			delete(f.byKey, key)
		}
		return r, true
	}
	return replay{}, false
}

// flashKey names the browser: its session, or signed out its pre-session CSRF cookie
// (every signed-out POST carries one, or csrf refused it). "": none.
func flashKey(ctx *fiber.Ctx) string {
	if s := session(ctx); s != nil {
		return "s:" + s.Hash
	}
	if v := ctx.Cookies(preCookie); v != "" {
		return "p:" + v
	}
	return ""
}

// backTo names the page a POST handler's form lives on, when it is not the POST's own
// path or one backOf knows.
func backTo(ctx *fiber.Ctx, path string) { ctx.Locals(localBack, path) }

// backs maps a POST path to its form's page: an action under an object goes back to the
// object; the members page's actions to the members page.
var backs = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^(/console/t/[^/]+)/(members/[^/]+/(role|delete)|invites(/delete)?)$`), "$1/members"},
	{regexp.MustCompile(`^(/console/t/[^/]+/consumers/[^/]+)/(keys|plan)$`), "$1"},
	{regexp.MustCompile(`^(/console/t/[^/]+/[^/]+/[^/]+)/delete$`), "$1"},
	{regexp.MustCompile(`^/console/account/password$`), "/console/account"},
	{regexp.MustCompile(`^/console/verify/resend$`), "/console/account"},
}

func backOf(ctx *fiber.Ctx) string {
	if b, ok := ctx.Locals(localBack).(string); ok && b != "" {
		return b
	}
	path := ctx.Path()
	for _, b := range backs {
		if b.re.MatchString(path) {
			return b.re.ReplaceAllString(path, b.repl)
		}
	}
	return path
}

// keep is render's answer to a POST: the page is kept for its GET and the browser sent
// there. false: there is no browser to keep it for, so the caller draws it.
func (c *Console) keep(ctx *fiber.Ctx, status int, name string, p page) (bool, error) {
	key := flashKey(ctx)
	if key == "" {
		return false, nil
	}
	back := backOf(ctx)
	c.flash.put(key, replay{path: pathOnly(back), name: name, p: p, status: status,
		retry: ctx.GetRespHeader(fiber.HeaderRetryAfter), expires: c.cfg.Now().Add(flashTTL)}, c.cfg.Now())
	return true, ctx.Redirect(back, http.StatusSeeOther)
}

// replayed swaps in the page kept for this GET, if any. A page that was a success (a key
// shown once) answers 200; a refused form keeps its status (422, 401, 429…).
func (c *Console) replayed(ctx *fiber.Ctx, status int, name string, p page) (int, string, page) {
	key := flashKey(ctx)
	if key == "" {
		return status, name, p
	}
	r, ok := c.flash.take(key, ctx.Path(), c.cfg.Now())
	if !ok {
		return status, name, p
	}
	if r.retry != "" {
		ctx.Set(fiber.HeaderRetryAfter, r.retry)
	}
	if r.status < 300 {
		r.status = http.StatusOK
	}
	return r.status, r.name, r.p
}

func pathOnly(u string) string {
	for i := 0; i < len(u); i++ {
		if u[i] == '?' || u[i] == '#' {
			return u[:i]
		}
	}
	return u
}
