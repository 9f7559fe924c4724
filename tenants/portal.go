package tenants

import (
	"context"
	"encoding/base64"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// The developer portal: a tenant's own API consumers sign up on it, read the tenant's
// API documentation, manage their keys, choose a public plan and watch their usage.
// Each portal account is one Consumer of the tenant; its keys, plan and usage are that
// consumer's. Accounts, their sessions and mailed tokens belong to one tenant: the same
// address may have an account at two tenants' portals, and nothing of one is seen at
// the other.

// PortalSettings is how a tenant shows its portal. The zero value (Enabled false) is a
// tenant that has not turned its portal on.
type PortalSettings struct {
	TenantID string
	Enabled  bool
	// DisplayName heads every page. Default: the tenant's name.
	DisplayName string
	// Logo is an uploaded image as a data: URL of at most MaxPortalLogo bytes; the
	// portal serves it from its own origin (its pages load nothing from elsewhere).
	Logo string
	// PrimaryColor and AccentColor are "#rrggbb"; empty takes the portal's defaults.
	PrimaryColor string
	AccentColor  string
	// DomainID names one of the tenant's verified domains whose host also serves the
	// portal at "/". Hostname is that domain's host name, read by the store.
	DomainID  string
	Hostname  string
	UpdatedAt time.Time
}

// Portal bounds.
const (
	MaxPortalLogo        = 64 << 10
	MaxPortalDisplayName = 100
	MaxAPIDocBytes       = 4 << 20
)

var colorRE = regexp.MustCompile(`^#[0-9a-fA-F]{6}$`)

var logoTypes = []string{"data:image/png;base64,", "data:image/jpeg;base64,", "data:image/gif;base64,", "data:image/webp;base64,"}

// Validate checks the settings a tenant chose. An SVG logo is refused: an image the
// portal cannot vouch for should not carry script.
func (s *PortalSettings) Validate() error {
	if err := validatePortalName(s.DisplayName); err != nil {
		return err
	}
	if err := validateLogo(s.Logo); err != nil {
		return err
	}
	for field, c := range map[string]string{"primary_color": s.PrimaryColor, "accent_color": s.AccentColor} {
		if c != "" && !colorRE.MatchString(c) {
			return Invalid(field, "must be a colour as #rrggbb")
		}
	}
	return nil
}

func validatePortalName(n string) error {
	if n == "" {
		return nil
	}
	if err := ValidateName(n); err != nil {
		return Invalid("display_name", "%v", err)
	}
	if utf8.RuneCountInString(n) > MaxPortalDisplayName {
		return Invalid("display_name", "must be at most %d characters", MaxPortalDisplayName)
	}
	return nil
}

func validateLogo(l string) error {
	if l == "" {
		return nil
	}
	if _, img, ok := DecodeLogo(l); !ok {
		return Invalid("logo", "must be a PNG, JPEG, GIF or WebP image")
	} else if len(img) > MaxPortalLogo {
		return Invalid("logo", "must be at most %d KiB", MaxPortalLogo>>10)
	}
	return nil
}

// DecodeLogo reads a logo's data: URL into its media type and bytes; ok is false for
// anything but a base64 PNG, JPEG, GIF or WebP image.
func DecodeLogo(l string) (mime string, img []byte, ok bool) {
	if len(l) > MaxPortalLogo*2 {
		return "", nil, false
	}
	for _, p := range logoTypes {
		if strings.HasPrefix(l, p) {
			img, err := base64.StdEncoding.DecodeString(l[len(p):])
			if err != nil || len(img) == 0 {
				return "", nil, false
			}
			return strings.TrimSuffix(strings.TrimPrefix(p, "data:"), ";base64,"), img, true
		}
	}
	return "", nil, false
}

// PortalAccount is a person signed up on a tenant's portal. ConsumerID is the consumer
// it acts as, created when its address is verified ("" until then).
type PortalAccount struct {
	ID            string
	TenantID      string
	Email         string
	PasswordHash  string
	EmailVerified bool
	ConsumerID    string
	CreatedAt     time.Time
}

// PortalSession is a signed-in portal browser: Hash is the SHA-256 of the cookie's
// value, CSRF the synchronizer token of its forms. Its one-time flash (a new key's
// plaintext, for the next page) is stored sealed with the cookie's value, which the
// store never sees.
type PortalSession struct {
	Hash      string
	TenantID  string
	AccountID string
	CSRF      string
	ExpiresAt time.Time
}

// PortalToken is a mailed link's token (TokenVerify or TokenReset); the store keeps its
// SHA-256.
type PortalToken struct {
	Hash      string
	TenantID  string
	AccountID string
	Purpose   string
	ExpiresAt time.Time
}

// APIDocStore keeps the OpenAPI document a tenant last imported its routes from, which
// the portal renders as the tenant's API documentation.
type APIDocStore interface {
	// SaveAPIDoc replaces the tenant's document (up to MaxAPIDocBytes): EValidation.
	SaveAPIDoc(ctx context.Context, tenantID string, doc []byte) error
	// FindAPIDoc: ENotFound when the tenant imported none.
	FindAPIDoc(ctx context.Context, tenantID string) ([]byte, error)
}

// PortalService stores portals: settings, accounts, sessions and mailed tokens. Every
// method reads and writes only the named tenant's rows.
type PortalService interface {
	APIDocStore
	// FindPortal returns the tenant's settings; a tenant that never saved any gets the
	// zero settings (off).
	FindPortal(ctx context.Context, tenantID string) (*PortalSettings, error)
	// PutPortal validates and stores s: EValidation (also when DomainID names no
	// verified domain of the tenant), ENotFound (tenant).
	PutPortal(ctx context.Context, s *PortalSettings) error
	// PortalHosts maps the host names of enabled portals on verified domains to their
	// tenants' slugs.
	PortalHosts(ctx context.Context) (map[string]string, error)

	// CreatePortalAccount: EConflict (the address has an account at this tenant).
	CreatePortalAccount(ctx context.Context, a *PortalAccount) error
	// FindPortalAccount and FindPortalAccountByEmail: ENotFound.
	FindPortalAccount(ctx context.Context, tenantID, id string) (*PortalAccount, error)
	FindPortalAccountByEmail(ctx context.Context, tenantID, email string) (*PortalAccount, error)
	// SetPortalConsumer records the consumer an account acts as: ENotFound.
	SetPortalConsumer(ctx context.Context, tenantID, accountID, consumerID string) error

	// CreatePortalToken stores a mailed link's token.
	CreatePortalToken(ctx context.Context, t *PortalToken) error
	// VerifyPortalEmail spends a TokenVerify token and marks its account verified:
	// ENotFound (unknown, spent or expired).
	VerifyPortalEmail(ctx context.Context, tenantID, hash string) (*PortalAccount, error)
	// ResetPortalPassword spends a TokenReset token, sets the password and ends every
	// session of the account: ENotFound.
	ResetPortalPassword(ctx context.Context, tenantID, hash, passwordHash string) (*PortalAccount, error)

	CreatePortalSession(ctx context.Context, s *PortalSession) error
	// FindPortalSession: ENotFound (unknown or expired).
	FindPortalSession(ctx context.Context, tenantID, hash string) (*PortalSession, error)
	DeletePortalSession(ctx context.Context, tenantID, hash string) error
	// SetPortalFlash keeps a sealed one-time message for the session; TakePortalFlash
	// returns it and forgets it ("" when there is none).
	SetPortalFlash(ctx context.Context, tenantID, hash, sealed string) error
	TakePortalFlash(ctx context.Context, tenantID, hash string) (string, error)
}
