package tenants

import (
	"context"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
)

// People of the management plane: console users, their memberships in tenants,
// their sessions. The audit log of what they and tokens changed is in audit.go.

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

// Invite is a pending invitation of an email address to a tenant. It grants nothing by
// itself: the address is mailed a single-use link, and only a signed-in user whose verified
// email is that address turns it into a membership (AcceptInvite). Whether the address has
// an account plays no part, so an invite never tells the inviter.
type Invite struct {
	TenantID  string    `json:"tenant_id"`
	Email     string    `json:"email"`
	Role      string    `json:"role"`
	InvitedBy string    `json:"invited_by"`
	ExpiresAt time.Time `json:"expires_at"`
	CreatedAt time.Time `json:"created_at"`
}

// InviteOffer is what an invitation link's token names: the invite and the tenant it is
// to, for the page that asks the invitee to accept or decline.
type InviteOffer struct {
	Invite
	TenantSlug string
	TenantName string
}

// Expired reports whether the invite's link has stopped working at now.
func (inv *Invite) Expired(now time.Time) bool { return !now.Before(inv.ExpiresAt) }

// InviteTTL is how long an invitation link works. InvitePrefix starts its token, so a
// leaked one is recognisable.
const (
	InviteTTL    = 7 * 24 * time.Hour
	InvitePrefix = "tgi_"
)

// InviteAcceptPath is the console page an invitation link opens; the token is its query.
const InviteAcceptPath = "/console/invites/accept"

// InvitationMail is the message that carries an invitation's link to inv.Email. It reads
// the same whether or not the address has an account, and names only the tenant's slug in
// the subject: the display name is the tenant's own text.
func InvitationMail(inv *Invite, tenantSlug, tenantName, publicURL, token string) Mail {
	link := strings.TrimSuffix(publicURL, "/") + InviteAcceptPath + "?token=" + token
	by := inv.InvitedBy
	if by == "" || by == "admin" || strings.HasPrefix(by, "token:") {
		by = "An administrator"
	}
	return Mail{
		To:      inv.Email,
		Subject: "Invitation to the tenant " + tenantSlug + " on Tollgate",
		Text: by + " invited " + inv.Email + " to the tenant " + tenantSlug + " (" + strconv.Quote(tenantName) + ") on Tollgate, as " + inv.Role + ".\n\n" +
			"To accept or decline, open this link and sign in with " + inv.Email + " (create an account with this address if you have none, and verify it):\n\n" +
			link + "\n\n" +
			"The link works once and expires on " + inv.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC") + ". " +
			"If you did not expect this invitation, ignore this mail: nothing changes unless you accept.\n",
	}
}

// PlatformRoleMail tells the address of grant g that it holds a platform role, and how to
// use it: sign in, or create an account of no tenant with that address and verify it. It
// reads the same whether or not the address has an account.
func PlatformRoleMail(g *PlatformGrant, publicURL string) Mail {
	base := strings.TrimSuffix(publicURL, "/") + "/console"
	signup := base + "/signup?no_tenant=1&email=" + url.QueryEscape(g.Email)
	return Mail{
		To:      g.Email,
		Subject: "You have the " + g.Role + " role on Tollgate",
		Text: "An administrator gave " + g.Email + " the " + g.Role + " role on this Tollgate platform" +
			" (finance: the billing export and prices; operator: every tenant).\n\n" +
			"If you have an account with this address, sign in:\n\n  " + base + "/login\n\n" +
			"If you have none, create one with this address; it needs no tenant of its own:\n\n  " + signup + "\n\n" +
			"The role applies once the address is verified, from the link mailed when you sign up.\n",
	}
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

// PeopleService stores users, memberships and sessions.
type PeopleService interface {
	// SignUp creates u (PasswordHash set by the caller), tenant t and u's owner membership
	// in one transaction; pending invites of u's email stay pending until accepted. A nil
	// t creates u alone, a member of no tenant (a finance user, or someone joining by
	// invitation). EValidation, EConflict (email or slug taken; Field says which).
	SignUp(ctx context.Context, u *User, t *Tenant) error
	// CreateOwnedTenant creates tenant t with the user userID as its owner, in one
	// transaction: a signed-in user's further tenant. EValidation, EConflict (slug taken;
	// Field "slug"), ENotFound (user).
	CreateOwnedTenant(ctx context.Context, userID string, t *Tenant) error
	// FindUserByEmail and FindUser: ENotFound.
	FindUserByEmail(ctx context.Context, email string) (*User, error)
	FindUser(ctx context.Context, id string) (*User, error)
	// SetPlatformRole grants role to an address ("" withdraws the grant and the role). The
	// user with that address holds it once the address is verified (at once when it is);
	// the answer is the same whether or not the address has an account: EValidation.
	SetPlatformRole(ctx context.Context, email, role string) (*PlatformGrant, error)

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

	// Invite keeps inv pending with a fresh link token, valid for InviteTTL, and returns
	// the token's plaintext (only its SHA-256 is stored) for the caller to mail. Inviting an
	// address again replaces its role and token, so the older link stops working. It does
	// the same whether or not the address has an account: EValidation, ENotFound (tenant),
	// EConflict (the address is already a member, as the member list shows anyway),
	// ERateLimited (too many invitation mails to the address, or from the tenant).
	Invite(ctx context.Context, inv *Invite) (token string, err error)
	// ListInvites lists a tenant's pending invites (expired ones too), by email.
	ListInvites(ctx context.Context, tenantID string) ([]*Invite, error)
	// DeleteInvite withdraws a pending invite; its link stops working: ENotFound.
	DeleteInvite(ctx context.Context, tenantID, email string) error
	// FindInvite is the pending invite an invitation link's token names, expired or not:
	// ENotFound (unknown, accepted, declined, withdrawn or replaced).
	FindInvite(ctx context.Context, token string) (*InviteOffer, error)
	// AcceptInvite turns the invite the token names into userID's membership and consumes
	// the token, in one transaction: of two concurrent accepts one wins and the other gets
	// ENotFound. The user's email must be verified and equal the invite's address
	// (EForbidden otherwise, and the invite stays); an expired or unknown token is
	// ENotFound. A user who is already a member keeps their role.
	AcceptInvite(ctx context.Context, token, userID string) (*Membership, error)
	// DeclineInvite consumes the token without a membership, under the same conditions as
	// AcceptInvite, and returns the invite it ended.
	DeclineInvite(ctx context.Context, token, userID string) (*InviteOffer, error)

	// CreateUserToken stores a link to mail (t.Hash is the SHA-256 of the token in it):
	// EValidation.
	CreateUserToken(ctx context.Context, t *UserToken) error
	// VerifyEmail spends a verify token and marks its user's address verified, applying a
	// platform role granted to it: ENotFound (unknown, spent or expired token).
	VerifyEmail(ctx context.Context, tokenHash string) (*User, error)
	// ResetPassword spends a reset token, sets its user's password hash, ends every session
	// of the user, and (the link proving the address) marks the address verified:
	// ENotFound (unknown, spent or expired token), EValidation.
	ResetPassword(ctx context.Context, tokenHash, passwordHash string) (*User, error)
	// ChangePassword sets a user's password hash and ends every session of the user but
	// the one whose hash is keepSession: ENotFound, EValidation.
	ChangePassword(ctx context.Context, userID, passwordHash, keepSession string) error

	CreateSession(ctx context.Context, s *Session) error
	// FindSession returns a session that has not expired: ENotFound otherwise.
	FindSession(ctx context.Context, hash string) (*Session, error)
	DeleteSession(ctx context.Context, hash string) error
}

// Purposes of the single-use links mailed to a user, and how long each is good for.
const (
	TokenVerify    = "verify"
	TokenReset     = "reset"
	VerifyTokenTTL = 24 * time.Hour
	ResetTokenTTL  = time.Hour
)

// UserToken is a single-use link mailed to a user. Only the SHA-256 of its token is kept
// (Hash), so a copy of the database opens nothing.
type UserToken struct {
	Hash      string
	UserID    string
	Purpose   string // TokenVerify or TokenReset
	ExpiresAt time.Time
}

// PlatformGrant is a platform role the operator granted to an address. It is held by the
// user with that address once the address is verified.
type PlatformGrant struct {
	Email     string    `json:"email"`
	Role      string    `json:"role"` // "" when the grant was withdrawn
	GrantedAt time.Time `json:"granted_at"`
}

// ThrottleRule says how many attempts a key gets. The first Limit−1 attempts within Window
// pass freely; the Limit-th passes and then pauses the key: until the window ends when
// Backoff is 0, else for Backoff, doubling after each further attempt up to MaxBackoff.
// An attempt refused while the key is paused is not counted, so waiting is never made
// longer by knocking. The count starts again once both the window and the pause are over.
type ThrottleRule struct {
	Limit      int
	Window     time.Duration
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// ThrottleService counts attempts (sign-in, sign-up, mail requests) where every api
// replica sees them, one atomic step per attempt, so concurrent attempts cannot slip past
// a limit.
type ThrottleService interface {
	// Hit counts an attempt on key and returns 0 when it may proceed, else how long until
	// one may.
	Hit(ctx context.Context, key string, rule ThrottleRule) (time.Duration, error)
	// ClearHits forgets the attempts on key (a successful sign-in clears its failures).
	ClearHits(ctx context.Context, key string) error
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
