package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

func signUpUser(t *testing.T, db *postgres.DB, email, slug string) *tenants.User {
	t.Helper()
	u := &tenants.User{Email: email, PasswordHash: "$2a$04$placeholderplaceholderplaceholderplaceholderplaceho"}
	if err := db.SignUp(context.Background(), u, &tenants.Tenant{Slug: slug}); err != nil {
		t.Fatal(err)
	}
	return u
}

func token(t *testing.T, db *postgres.DB, u *tenants.User, purpose string, ttl time.Duration) string {
	t.Helper()
	raw := tenants.HashSecret(purpose + u.ID + ttl.String()) // any unguessable-enough string for a test
	if err := db.CreateUserToken(context.Background(), &tenants.UserToken{Hash: tenants.HashSecret(raw), UserID: u.ID,
		Purpose: purpose, ExpiresAt: time.Now().Add(ttl)}); err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestVerifyEmailOnceEvenRaced(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	u := signUpUser(t, db, "ann@example.com", "ann")
	if u.EmailVerified {
		t.Fatal("a new account is verified")
	}
	raw := token(t, db, u, tenants.TokenVerify, time.Hour)
	// A reset token does not verify, and a verify token does not reset.
	if _, err := db.ResetPassword(ctx, tenants.HashSecret(raw), "$2a$04$x"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("a verify token reset a password: %v", err)
	}
	var ok atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := db.VerifyEmail(ctx, tenants.HashSecret(raw))
			switch {
			case err == nil && v.EmailVerified && v.ID == u.ID:
				ok.Add(1)
			case tenants.ErrorCode(err) != tenants.ENotFound:
				t.Errorf("verify: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := ok.Load(); n != 1 {
		t.Fatalf("one link verified %d times", n)
	}
	got, err := db.FindUser(ctx, u.ID)
	if err != nil || !got.EmailVerified {
		t.Fatalf("after verification: %+v %v", got, err)
	}
	// Expired links and garbage are refused alike.
	v := signUpUser(t, db, "bob@example.com", "bob")
	old := token(t, db, v, tenants.TokenVerify, -time.Second)
	for _, h := range []string{tenants.HashSecret(old), tenants.HashSecret("nope"), "", "'; DROP TABLE users; --"} {
		if _, err := db.VerifyEmail(ctx, h); tenants.ErrorCode(err) != tenants.ENotFound {
			t.Errorf("verify %q: %v", h, err)
		}
	}
	if got, _ := db.FindUser(ctx, v.ID); got.EmailVerified {
		t.Fatal("an expired link verified")
	}
}

func TestPlatformRoleWaitsForAVerifiedAddress(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	u := signUpUser(t, db, "cy@example.com", "cy")
	// The same answer for an unverified account and for an address with no account.
	for _, email := range []string{"cy@example.com", "nobody@example.com"} {
		g, err := db.SetPlatformRole(ctx, email, tenants.PlatformFinance)
		if err != nil || g.Email != email || g.Role != tenants.PlatformFinance {
			t.Fatalf("grant to %s: %+v %v", email, g, err)
		}
	}
	if got, _ := db.FindUser(ctx, u.ID); got.PlatformRole != "" {
		t.Fatalf("an unverified address took the platform role %q", got.PlatformRole)
	}
	if _, err := db.VerifyEmail(ctx, tenants.HashSecret(token(t, db, u, tenants.TokenVerify, time.Hour))); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.FindUser(ctx, u.ID); got.PlatformRole != tenants.PlatformFinance {
		t.Fatalf("verified, the grant did not apply: %q", got.PlatformRole)
	}
	// Withdrawn, it goes at once; granted again to a verified address, it applies at once.
	if _, err := db.SetPlatformRole(ctx, "CY@example.com", ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.FindUser(ctx, u.ID); got.PlatformRole != "" {
		t.Fatalf("withdrawn role kept: %q", got.PlatformRole)
	}
	if _, err := db.SetPlatformRole(ctx, "cy@example.com", tenants.PlatformOperator); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.FindUser(ctx, u.ID); got.PlatformRole != tenants.PlatformOperator {
		t.Fatalf("a verified address did not take the role: %q", got.PlatformRole)
	}
	// A grant to an address that signs up later applies when that address is verified.
	w := signUpUser(t, db, "nobody@example.com", "nobody")
	if w.PlatformRole != "" {
		t.Fatal("signing up took a grant before verification")
	}
	if _, err := db.ResetPassword(ctx, tenants.HashSecret(token(t, db, w, tenants.TokenReset, time.Hour)), "$2a$04$y"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.FindUser(ctx, w.ID); !got.EmailVerified || got.PlatformRole != tenants.PlatformFinance {
		t.Fatalf("a reset link proves the address too: %+v", got)
	}
	for _, bad := range []struct{ email, role string }{{"cy@example.com", "root"}, {"not an address", "finance"}} {
		if _, err := db.SetPlatformRole(ctx, bad.email, bad.role); tenants.ErrorCode(err) != tenants.EValidation {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestResetAndChangeEndSessions(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	u := signUpUser(t, db, "di@example.com", "di")
	session := func(name string) string {
		h := tenants.HashSecret(name)
		if err := db.CreateSession(ctx, &tenants.Session{Hash: h, UserID: u.ID, CSRF: "x", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		return h
	}
	alive := func(h string) bool { _, err := db.FindSession(ctx, h); return err == nil }
	a, b, c := session("a"), session("b"), session("c")
	if err := db.ChangePassword(ctx, u.ID, "$2a$04$new", b); err != nil {
		t.Fatal(err)
	}
	if alive(a) || !alive(b) || alive(c) {
		t.Fatalf("after a change in b: a %v b %v c %v", alive(a), alive(b), alive(c))
	}
	if got, _ := db.FindUser(ctx, u.ID); got.PasswordHash != "$2a$04$new" {
		t.Fatal("password not changed")
	}
	first, second := token(t, db, u, tenants.TokenReset, time.Hour), token(t, db, u, tenants.TokenReset, 2*time.Hour)
	if _, err := db.ResetPassword(ctx, tenants.HashSecret(first), "$2a$04$reset"); err != nil {
		t.Fatal(err)
	}
	if alive(b) {
		t.Fatal("a reset left a session alive")
	}
	// Once one reset link worked, the others in the mailbox are void.
	if _, err := db.ResetPassword(ctx, tenants.HashSecret(second), "$2a$04$again"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("a second reset link still worked: %v", err)
	}
	if _, err := db.ResetPassword(ctx, tenants.HashSecret(first), "$2a$04$again"); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("a spent reset link worked again: %v", err)
	}
	if err := db.ChangePassword(ctx, "00000000-0000-0000-0000-000000000000", "$2a$04$x", ""); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("change for no user: %v", err)
	}
}

func TestThrottleConcurrentAttemptsNeverExceedTheLimit(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	rule := tenants.ThrottleRule{Limit: 5, Window: time.Hour, Backoff: time.Second, MaxBackoff: time.Minute}
	var passed atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait, err := db.Hit(ctx, "account:ann@example.com|10.0.0.1", rule)
			if err != nil {
				t.Error(err)
			}
			if wait == 0 {
				passed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := passed.Load(); n != int32(rule.Limit) {
		t.Fatalf("%d of 50 concurrent attempts passed a limit of %d", n, rule.Limit)
	}
	// Another address, and another account, are untouched.
	for _, k := range []string{"account:ann@example.com|10.0.0.2", "account:bob@example.com|10.0.0.1"} {
		if wait, err := db.Hit(ctx, k, rule); err != nil || wait != 0 {
			t.Fatalf("%s: wait %v %v", k, wait, err)
		}
	}
}

func TestThrottleBackoffGrowsAndClears(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	rule := tenants.ThrottleRule{Limit: 2, Window: time.Hour, Backoff: 10 * time.Second, MaxBackoff: 35 * time.Second}
	key := "account:eve@example.com|10.0.0.9"
	// pass ends the pause, as waiting it out would.
	pass := func() {
		if _, err := conn.Exec(ctx, `UPDATE throttle SET blocked_until = now() - interval '1 ms' WHERE key = $1`, key); err != nil {
			t.Fatal(err)
		}
	}
	hit := func() time.Duration {
		t.Helper()
		w, err := db.Hit(ctx, key, rule)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for i := range 2 {
		if w := hit(); w != 0 {
			t.Fatalf("free attempt %d refused: %v", i+1, w)
		}
	}
	// The second attempt paused the key for 10 s; refused knocks do not lengthen it.
	for range 3 {
		if w := hit(); w < 9*time.Second || w > 10*time.Second {
			t.Fatalf("wait %v, want ~10s", w)
		}
	}
	var want []time.Duration
	for _, d := range []time.Duration{20, 35, 35} { // doubling, capped
		pass()
		if w := hit(); w != 0 {
			t.Fatalf("refused after the pause: %v", w)
		}
		want = append(want, d*time.Second)
		if w := hit(); w < want[len(want)-1]-time.Second || w > want[len(want)-1] {
			t.Fatalf("after %d attempts: wait %v, want ~%v", len(want)+2, w, want[len(want)-1])
		}
	}
	if err := db.ClearHits(ctx, key); err != nil {
		t.Fatal(err)
	}
	if hit() != 0 {
		t.Fatal("cleared key still paused")
	}
}

func TestThrottleFixedWindowAndSweep(t *testing.T) {
	db, url := openDB(t)
	ctx := context.Background()
	conn := rawConn(t, url)
	rule := tenants.ThrottleRule{Limit: 3, Window: time.Minute}
	for i := range 3 {
		if w, err := db.Hit(ctx, "signup:10.1.1.1", rule); err != nil || w != 0 {
			t.Fatalf("attempt %d: %v %v", i+1, w, err)
		}
	}
	w, err := db.Hit(ctx, "signup:10.1.1.1", rule)
	if err != nil || w < 50*time.Second || w > time.Minute {
		t.Fatalf("fourth attempt: wait %v %v, want the rest of the window", w, err)
	}
	// The window passes: the count starts again, and a sweep takes what is over.
	if _, err := conn.Exec(ctx, `UPDATE throttle SET window_end = now() - interval '1 s', blocked_until = now() - interval '1 s'`); err != nil {
		t.Fatal(err)
	}
	if n, err := db.SweepThrottle(ctx); err != nil || n != 1 {
		t.Fatalf("swept %d %v", n, err)
	}
	if w, err := db.Hit(ctx, "signup:10.1.1.1", rule); err != nil || w != 0 {
		t.Fatalf("after the window: %v %v", w, err)
	}
	for _, bad := range []tenants.ThrottleRule{{}, {Limit: 1}, {Window: time.Second}} {
		if _, err := db.Hit(ctx, "k", bad); tenants.ErrorCode(err) != tenants.EValidation {
			t.Errorf("rule %+v: %v", bad, err)
		}
	}
}
