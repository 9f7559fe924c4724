package tenants

import (
	"context"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
)

// People of the management plane (issue 7): console users, their memberships in tenants,
// their sessions, and the audit log of what they and tokens changed.

// Roles within a tenant, from most to least powerful. A membership or a token carries one;
// what each may do is the access policy's business (tenants/rbac), not this package's.
// RoleAdmin is declared with the token rules.
const (
	RoleOwner     = "owner"
	RoleDeveloper = "developer"
	RoleViewer    = "viewer"
)

// Platform roles a user may hold across every tenant, set by the operator's admin token.
const (
	PlatformOperator = "operator" // support staff: acts as a tenant admin in every tenant
	PlatformFinance  = "finance"  // reads every tenant and exports the bill
)

// MemberRoles are the roles a membership may have; TokenRoles those a token may have (a
// token is automation, never an owner).
var (
	MemberRoles = []string{RoleOwner, RoleAdmin, RoleDeveloper, RoleViewer}
	TokenRoles  = []string{RoleAdmin, RoleDeveloper, RoleViewer}
)

// User is a person who signs in to the console. Only a bcrypt hash of the password is kept.
type User struct {
	ID           string `json:"id"`
	Email        string `json:"email"`
	PasswordHash string `json:"-"`
	PlatformRole string `json:"platform_role,omitempty"` // "", PlatformOperator or PlatformFinance
	// EmailVerified is set once the user followed the link mailed to Email. Until then the
	// account may sign in and run its own tenant, but the address grants nothing else: no
	// invitation, no platform role, and no other user can find it.
	EmailVerified bool      `json:"email_verified"`
	CreatedAt     time.Time `json:"created_at"`
}

// Membership is a user's role in one tenant.
type Membership struct {
	TenantID   string    `json:"tenant_id"`
	TenantSlug string    `json:"tenant_slug"`
	TenantName string    `json:"tenant_name"`
	UserID     string    `json:"user_id"`
	Email      string    `json:"email"`
	Role       string    `json:"role"`
	CreatedAt  time.Time `json:"created_at"`
}

// Invite is a pending invitation of an email that has no account yet to a tenant. SignUp
// turns every pending invite of the new user's email into a membership.
type Invite struct {
	TenantID  string    `json:"tenant_id"`
	Email     string    `json:"email"`
	Role      string    `json:"role"`
	InvitedBy string    `json:"invited_by"`
	CreatedAt time.Time `json:"created_at"`
}

// Session is a signed-in browser. Its id lives only in the user's cookie; the store keeps
// its SHA-256 (Hash). CSRF is the synchronizer token every form of the session carries.
type Session struct {
	Hash      string
	UserID    string
	CSRF      string
	ExpiresAt time.Time
	CreatedAt time.Time
}

// AuditEntry records one management write: who (a user's email, "token:<name>" or
// "admin"), in which tenant, what action on which object, and when.
type AuditEntry struct {
	ID       int64     `json:"id"`
	TenantID string    `json:"tenant_id"`
	Actor    string    `json:"actor"`
	Action   string    `json:"action"` // "<tag>.<verb>": routes.create, keys.delete…
	Object   string    `json:"object"` // the object's id, or "" for the tenant itself
	At       time.Time `json:"at"`
}

// PeopleService stores users, memberships and sessions.
type PeopleService interface {
	// SignUp creates u (PasswordHash set by the caller), tenant t and u's owner membership
	// in one transaction, and turns the pending invites of u's email into memberships:
	// EValidation, EConflict (email or slug taken; Field says which).
	SignUp(ctx context.Context, u *User, t *Tenant) error
	// FindUserByEmail and FindUser: ENotFound.
	FindUserByEmail(ctx context.Context, email string) (*User, error)
	FindUser(ctx context.Context, id string) (*User, error)
	// SetPlatformRole sets ("" clears) the platform role of the user with that email:
	// EValidation, ENotFound.
	SetPlatformRole(ctx context.Context, email, role string) (*User, error)

	// AddMember gives the user with m.Email role m.Role in m.TenantID (replacing a role
	// it had): EValidation, ENotFound (no such user).
	AddMember(ctx context.Context, m *Membership) error
	// FindMembership is userID's membership of tenantID: ENotFound.
	FindMembership(ctx context.Context, tenantID, userID string) (*Membership, error)
	// ListMemberships lists the tenants a user belongs to, by slug.
	ListMemberships(ctx context.Context, userID string) ([]*Membership, error)
	// ListMembers lists a tenant's members, by email.
	ListMembers(ctx context.Context, tenantID string) ([]*Membership, error)
	// SetMemberRole changes a member's role: EValidation, ENotFound, EConflict (it would
	// leave the tenant without an owner).
	SetMemberRole(ctx context.Context, tenantID, userID, role string) (*Membership, error)
	// RemoveMember ends a membership: ENotFound, EConflict (the tenant's last owner).
	RemoveMember(ctx context.Context, tenantID, userID string) error

	// Invite adds the user with inv.Email to the tenant with inv.Role when there is one
	// (then it returns that membership), and otherwise keeps inv pending until that email
	// signs up (then it returns nil): EValidation, ENotFound (tenant). Inviting an email
	// again replaces the pending role.
	Invite(ctx context.Context, inv *Invite) (*Membership, error)
	// ListInvites lists a tenant's pending invites, by email.
	ListInvites(ctx context.Context, tenantID string) ([]*Invite, error)
	// DeleteInvite withdraws a pending invite: ENotFound.
	DeleteInvite(ctx context.Context, tenantID, email string) error

	CreateSession(ctx context.Context, s *Session) error
	// FindSession returns a session that has not expired: ENotFound otherwise.
	FindSession(ctx context.Context, hash string) (*Session, error)
	DeleteSession(ctx context.Context, hash string) error
}

// AuditService keeps the audit log. Entries are never changed or deleted by the api.
type AuditService interface {
	RecordAudit(ctx context.Context, e *AuditEntry) error
	// ListAudit returns a page of a tenant's entries, newest first; the cursor is an id.
	ListAudit(ctx context.Context, tenantID string, p Page) ([]*AuditEntry, string, error)
}

// Password bounds. bcrypt reads at most 72 bytes; a longer password would be silently cut.
const (
	MinPasswordLen = 10
	MaxPasswordLen = 72
	passwordCost   = bcrypt.DefaultCost
)

// NormalizeEmail lower-cases and trims an address and checks it is a plain address.
func NormalizeEmail(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "", Invalid("email", "is required")
	}
	if len(s) > 254 {
		return "", Invalid("email", "must be at most 254 characters")
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || !strings.Contains(s[strings.LastIndexByte(s, '@')+1:], ".") {
		return "", Invalid("email", "must be an address like name@example.com")
	}
	return s, nil
}

// HashPassword validates a password and returns its bcrypt hash.
func HashPassword(pw string) (string, error) {
	if utf8.RuneCountInString(pw) < MinPasswordLen {
		return "", Invalid("password", "must be at least %d characters", MinPasswordLen)
	}
	if len(pw) > MaxPasswordLen {
		return "", Invalid("password", "must be at most %d bytes", MaxPasswordLen)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), passwordCost)
	if err != nil {
		return "", err
	}
	return string(h), nil
}

// CheckPassword reports whether pw matches hash.
func CheckPassword(hash, pw string) bool {
	return len(pw) <= MaxPasswordLen && bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) == nil
}

// dummyHash is compared against when a login names no user, so a miss costs as much as a
// wrong password and addresses cannot be probed by timing.
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("tollgate-no-such-user"), passwordCost)

// SpendPasswordCheck does the work of one CheckPassword for a login that names no user.
func SpendPasswordCheck(pw string) { _ = bcrypt.CompareHashAndPassword(dummyHash, []byte(pw)) }

// ValidateMemberRole checks a membership role.
func ValidateMemberRole(role string) error {
	for _, r := range MemberRoles {
		if role == r {
			return nil
		}
	}
	return Invalid("role", "must be one of owner, admin, developer, viewer")
}

// ValidatePlatformRole checks a platform role; "" clears it.
func ValidatePlatformRole(role string) error {
	if role == "" || role == PlatformOperator || role == PlatformFinance {
		return nil
	}
	return Invalid("role", "must be %q, %q or empty", PlatformOperator, PlatformFinance)
}

// SessionCookie is the name of the console's session cookie, which the management API
// also accepts in place of a token (writes then need the session's CSRF token in the
// X-CSRF-Token header).
const SessionCookie = "tollgate_session"
