package web

import (
	"strconv"
	"sync"
	"time"
)

// LoginLimits bound sign-in attempts. The limiter is in memory, per api process: with
// several replicas behind a balancer an attacker gets each replica's allowance, which is
// still a few dozen guesses per account per window against a bcrypt hash.
type LoginLimits struct {
	// PerIP is how many attempts one client address may make per Window. Default: 30.
	PerIP int
	// PerAccount is how many failed attempts one email may have per Window before
	// sign-in to it pauses (successful sign-in resets it). Default: 5.
	PerAccount int
	// Window is the period both counts cover. Default: 15 minutes.
	Window time.Duration
}

// LoginLimiter is a fixed-window counter per IP and per account.
type LoginLimiter struct {
	lim LoginLimits
	now func() time.Time
	mu  sync.Mutex
	ip  map[string]*window
	acc map[string]*window
}

type window struct {
	start time.Time
	n     int
}

// NewLoginLimiter returns a limiter with lim's defaults filled in.
func NewLoginLimiter(lim LoginLimits) *LoginLimiter {
	if lim.PerIP <= 0 {
		lim.PerIP = 30
	}
	if lim.PerAccount <= 0 {
		lim.PerAccount = 5
	}
	if lim.Window <= 0 {
		lim.Window = 15 * time.Minute
	}
	return &LoginLimiter{lim: lim, now: time.Now, ip: map[string]*window{}, acc: map[string]*window{}}
}

// get returns the live window of key, starting a new one when the old has passed, and
// sweeping stale windows when the map grows.
func (l *LoginLimiter) get(m map[string]*window, key string, now time.Time) *window {
	w := m[key]
	if w == nil || now.Sub(w.start) >= l.lim.Window {
		if len(m) > 10000 {
			for k, v := range m {
				if now.Sub(v.start) >= l.lim.Window {
					delete(m, k)
				}
			}
		}
		w = &window{start: now}
		m[key] = w
	}
	return w
}

// Allow counts an attempt from ip on account; it returns 0 when the attempt may proceed,
// else how long until it may.
func (l *LoginLimiter) Allow(ip, account string) time.Duration {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	wi := l.get(l.ip, ip, now)
	if wi.n >= l.lim.PerIP {
		return wi.start.Add(l.lim.Window).Sub(now)
	}
	if account != "" {
		if wa := l.get(l.acc, account, now); wa.n >= l.lim.PerAccount {
			return wa.start.Add(l.lim.Window).Sub(now)
		}
	}
	wi.n++
	return 0
}

// Failed counts a failed attempt on account.
func (l *LoginLimiter) Failed(account string) {
	if account == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.get(l.acc, account, l.now()).n++
}

// Succeeded clears account's failures.
func (l *LoginLimiter) Succeeded(account string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.acc, account)
}

func itoa(n int) string { return strconv.Itoa(n) }
