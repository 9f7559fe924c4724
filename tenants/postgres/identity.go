package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// Proven addresses, password resets and throttling. A mailed link is spent in the same
// statement that checks it (used_at IS NULL AND expires_at > now()), under the row lock
// of that UPDATE, so two requests racing with one link cannot both get through.

// SetPlatformRole stores the grant by address and applies it to the user with that address
// only when the address is verified; withdrawing it takes the role from that user at once.
// The answer does not depend on whether the address has an account.
func (db *DB) SetPlatformRole(ctx context.Context, email, role string) (*tenants.PlatformGrant, error) {
	if err := tenants.ValidatePlatformRole(role); err != nil {
		return nil, err
	}
	email, err := tenants.NormalizeEmail(email)
	if err != nil {
		return nil, err
	}
	g := &tenants.PlatformGrant{Email: email, Role: role}
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if role == "" {
			if _, err := tx.Exec(ctx, `DELETE FROM platform_grants WHERE email = $1`, email); err != nil {
				return err
			}
			g.GrantedAt = time.Now()
			_, err := tx.Exec(ctx, `UPDATE users SET platform_role = '' WHERE email = $1`, email)
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO platform_grants (email, role) VALUES ($1, $2)
			ON CONFLICT (email) DO UPDATE SET role = EXCLUDED.role, granted_at = now() RETURNING granted_at`,
			email, role).Scan(&g.GrantedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE users SET platform_role = $2 WHERE email = $1 AND email_verified_at IS NOT NULL`, email, role)
		return err
	})
	g.GrantedAt = utc(g.GrantedAt)
	return g, constraintError(err, "set platform role", nil)
}

// CreateUserToken stores t; expired tokens of every user are swept on the way.
func (db *DB) CreateUserToken(ctx context.Context, t *tenants.UserToken) error {
	if !validHash(t.Hash) || !parseID(t.UserID) || (t.Purpose != tenants.TokenVerify && t.Purpose != tenants.TokenReset) {
		return tenants.Invalid("token", "must have a hash, a user and a purpose")
	}
	if _, err := db.pool.Exec(ctx, `DELETE FROM user_tokens WHERE expires_at < now()`); err != nil {
		return constraintError(err, "sweep user tokens", nil)
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO user_tokens (hash, user_id, purpose, expires_at) VALUES ($1, $2, $3, $4)`,
		t.Hash, t.UserID, t.Purpose, t.ExpiresAt)
	return constraintError(err, "create user token", map[string]*tenants.Error{
		"user_tokens_user_fkey": {Code: tenants.ENotFound, Message: "user not found"},
	})
}

// spend marks the live token of that hash and purpose used and returns its user; pgx.ErrNoRows
// when there is none. Every other unspent token of the user for the purpose is spent too:
// once one link worked, the older ones in the mailbox are void.
func spend(ctx context.Context, tx pgx.Tx, hash, purpose string) (string, error) {
	var uid string
	err := tx.QueryRow(ctx, `UPDATE user_tokens SET used_at = now()
		WHERE hash = $1 AND purpose = $2 AND used_at IS NULL AND expires_at > now() RETURNING user_id::text`,
		hash, purpose).Scan(&uid)
	if err != nil {
		return "", err
	}
	_, err = tx.Exec(ctx, `UPDATE user_tokens SET used_at = now() WHERE user_id = $1 AND purpose = $2 AND used_at IS NULL`, uid, purpose)
	return uid, err
}

// proveAddress marks the user's address verified and gives it the platform role granted
// to the address, if any.
func proveAddress(ctx context.Context, tx pgx.Tx, uid string) (*tenants.User, error) {
	return scanUser(tx.QueryRow(ctx, `UPDATE users SET email_verified_at = COALESCE(email_verified_at, now()),
		platform_role = COALESCE((SELECT g.role FROM platform_grants g WHERE g.email = users.email), platform_role)
		WHERE id = $1 RETURNING `+userColumns, uid))
}

var errTokenNotFound = tenants.Errorf(tenants.ENotFound, "this link is unknown, was already used or has expired")

// VerifyEmail: ENotFound.
func (db *DB) VerifyEmail(ctx context.Context, tokenHash string) (*tenants.User, error) {
	if !validHash(tokenHash) {
		return nil, errTokenNotFound
	}
	var u *tenants.User
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		uid, err := spend(ctx, tx, tokenHash, tenants.TokenVerify)
		if err != nil {
			return err
		}
		u, err = proveAddress(ctx, tx, uid)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errTokenNotFound
	}
	return u, constraintError(err, "verify email", nil)
}

// ResetPassword: ENotFound, EValidation.
func (db *DB) ResetPassword(ctx context.Context, tokenHash, passwordHash string) (*tenants.User, error) {
	if passwordHash == "" {
		return nil, tenants.Invalid("password", "is required")
	}
	if !validHash(tokenHash) {
		return nil, errTokenNotFound
	}
	var u *tenants.User
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		uid, err := spend(ctx, tx, tokenHash, tenants.TokenReset)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE users SET password_hash = $2 WHERE id = $1`, uid, passwordHash); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM sessions WHERE user_id = $1`, uid); err != nil {
			return err
		}
		u, err = proveAddress(ctx, tx, uid)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errTokenNotFound
	}
	return u, constraintError(err, "reset password", nil)
}

// ChangePassword: ENotFound, EValidation.
func (db *DB) ChangePassword(ctx context.Context, userID, passwordHash, keepSession string) error {
	if passwordHash == "" {
		return tenants.Invalid("password", "is required")
	}
	if !parseID(userID) {
		return notFound("user")
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE users SET password_hash = $2 WHERE id = $1`, userID, passwordHash)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound("user")
		}
		_, err = tx.Exec(ctx, `DELETE FROM sessions WHERE user_id = $1 AND hash <> $2`, userID, keepSession)
		return err
	})
	return constraintError(err, "change password", nil)
}

// throttleHits counts Hit calls of the process, to sweep finished counters now and then.
var throttleHits atomic.Uint64

// block(n, window_end) is the pause after the n-th counted attempt of a window.
const block = `CASE WHEN %[1]s < $3::int THEN 'epoch'::timestamptz
	WHEN $4::float8 <= 0 THEN %[2]s
	ELSE now() + make_interval(secs => LEAST($4::float8 * power(2, LEAST(%[1]s - $3::int, 40)), $5::float8)) END`

var hitSQL = `INSERT INTO throttle AS t (key, hits, window_end, blocked_until, refused)
	VALUES ($1, 1, now() + make_interval(secs => $2::float8), ` + fmt.Sprintf(block, "1", "now() + make_interval(secs => $2::float8)") + `, false)
	ON CONFLICT (key) DO UPDATE SET
		refused = t.blocked_until > now(),
		hits = CASE WHEN t.blocked_until > now() THEN t.hits
			WHEN t.window_end <= now() THEN 1 ELSE t.hits + 1 END,
		window_end = CASE WHEN t.blocked_until <= now() AND t.window_end <= now()
			THEN now() + make_interval(secs => $2::float8) ELSE t.window_end END,
		blocked_until = CASE WHEN t.blocked_until > now() THEN t.blocked_until
			WHEN t.window_end <= now() THEN ` + fmt.Sprintf(block, "1", "now() + make_interval(secs => $2::float8)") + `
			ELSE ` + fmt.Sprintf(block, "t.hits + 1", "t.window_end") + ` END
	RETURNING refused, EXTRACT(EPOCH FROM blocked_until - now())::float8`

// Hit is one INSERT … ON CONFLICT DO UPDATE: the row lock it takes orders concurrent
// attempts on a key, and each sees the count the previous one left. refused is computed
// from the row as it was before this attempt (SET expressions read the old row).
func (db *DB) Hit(ctx context.Context, key string, r tenants.ThrottleRule) (time.Duration, error) {
	if key == "" || len(key) > 600 || r.Limit < 1 || r.Window <= 0 {
		return 0, tenants.Invalid("throttle", "needs a key, a limit and a window")
	}
	if throttleHits.Add(1)%256 == 0 {
		if _, err := db.SweepThrottle(ctx); err != nil {
			return 0, err
		}
	}
	var refused bool
	var wait float64
	err := db.pool.QueryRow(ctx, hitSQL, key, r.Window.Seconds(), r.Limit, r.Backoff.Seconds(), r.MaxBackoff.Seconds()).Scan(&refused, &wait)
	if err != nil {
		return 0, constraintError(err, "throttle", nil)
	}
	if !refused {
		return 0, nil
	}
	return max(time.Duration(wait*float64(time.Second)), time.Second), nil
}

// ClearHits forgets key's attempts.
func (db *DB) ClearHits(ctx context.Context, key string) error {
	_, err := db.pool.Exec(ctx, `DELETE FROM throttle WHERE key = $1`, key)
	return constraintError(err, "clear throttle", nil)
}

// SweepThrottle deletes the counters whose window and pause are over (they would start
// from zero anyway) and returns how many.
func (db *DB) SweepThrottle(ctx context.Context) (int64, error) {
	tag, err := db.pool.Exec(ctx, `DELETE FROM throttle WHERE window_end <= now() AND blocked_until <= now()`)
	if err != nil {
		return 0, constraintError(err, "sweep throttle", nil)
	}
	return tag.RowsAffected(), nil
}

var _ tenants.ThrottleService = (*DB)(nil)
