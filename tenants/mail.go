package tenants

import "context"

// Mail is one message the management plane sends a person: an address verification, a
// password reset or an invitation. Text is the whole plain-text body; the links in it are
// the only way to act on it, so a mailer that cannot deliver (tollgate dev without
// TOLLGATE_SMTP_URL) logs them instead.
type Mail struct {
	To      string
	Subject string
	Text    string
}

// Mailer delivers mail. Send returns once the message is handed to the mail server (or
// logged); an error means it was not, and the caller says so without revealing more than
// the answer would have anyway.
type Mailer interface {
	Send(ctx context.Context, m Mail) error
}
