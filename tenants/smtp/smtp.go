// Package smtp delivers the management plane's mail (address verification, password reset,
// invitations) through an SMTP server, and offers a Log mailer for `tollgate dev`, which
// writes each message's recipient and links to the log instead. It sends plain-text
// messages one at a time and keeps no queue: a failed Send is the caller's to report.
package smtp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"

	"tollgate/tenants"
)

// Config of a Mailer.
type Config struct {
	// URL is smtp://[user:pass@]host:port (STARTTLS when the server offers it) or
	// smtps://[user:pass@]host:port (TLS from the first byte).
	URL string
	// From is the sender, "Name <address>" or a bare address.
	From string
	// TLS verifies the server's certificate. Default: the system's roots, the URL's host.
	TLS *tls.Config
	// Timeout bounds one whole Send: dial, TLS, AUTH and the message. Default: 30s.
	Timeout time.Duration
}

// Mailer sends each message over its own SMTP connection.
type Mailer struct {
	addr     string
	host     string
	implicit bool
	auth     sasl.Client
	from     *mail.Address
	domain   string
	tls      *tls.Config
	timeout  time.Duration
	// sawTLS is set once the server offered STARTTLS: from then on a session without it
	// is refused, so a man in the middle who strips the offer gets nothing sent in clear.
	sawTLS atomic.Bool
}

// New checks cfg and returns its Mailer; nothing is dialed until the first Send.
func New(cfg Config) (*Mailer, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Hostname() == "" || u.Port() == "" {
		return nil, errors.New("smtp: the URL must be smtp://[user:pass@]host:port or smtps://…")
	}
	from, err := mail.ParseAddress(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("smtp: From %q is not a mail address: %v", cfg.From, err)
	}
	m := &Mailer{
		addr:     u.Host,
		host:     u.Hostname(),
		implicit: u.Scheme == "smtps",
		from:     from,
		domain:   from.Address[strings.LastIndexByte(from.Address, '@')+1:],
		timeout:  cfg.Timeout,
	}
	if u.User != nil {
		pass, _ := u.User.Password()
		m.auth = sasl.NewPlainClient("", u.User.Username(), pass)
	}
	if cfg.TLS != nil {
		m.tls = cfg.TLS.Clone()
	} else {
		m.tls = &tls.Config{}
	}
	if m.tls.ServerName == "" {
		m.tls.ServerName = m.host
	}
	m.tls.MinVersion = max(m.tls.MinVersion, tls.VersionTLS12)
	if m.timeout <= 0 {
		m.timeout = 30 * time.Second
	}
	return m, nil
}

// Send delivers msg to its one recipient. It returns once the server accepted the message
// (250 after DATA), or with the reason it did not.
func (m *Mailer) Send(ctx context.Context, msg tenants.Mail) error {
	body, to, err := Compose(m.from, m.domain, msg, time.Now())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	c, secure, err := m.session(ctx)
	if err != nil {
		return fmt.Errorf("smtp: %s: %w", m.addr, err)
	}
	defer c.Close()
	if m.auth != nil {
		// PLAIN sends the password as it is: only over TLS or to this very machine (the
		// rule of Go's net/smtp PlainAuth).
		if !secure && !isLoopback(m.host) {
			return fmt.Errorf("smtp: %s offers no TLS; refusing to send the password in clear", m.addr)
		}
		if err := c.Auth(m.auth); err != nil {
			return fmt.Errorf("smtp: %s: AUTH: %w", m.addr, err)
		}
	}
	if err := c.SendMail(m.from.Address, []string{to}, bytes.NewReader(body)); err != nil {
		return fmt.Errorf("smtp: %s: %w", m.addr, err)
	}
	_ = c.Quit()
	return nil
}

// session dials and returns a client past EHLO, on TLS when the server offers it; secure
// says whether it is.
func (m *Mailer) session(ctx context.Context) (c *gosmtp.Client, secure bool, err error) {
	if m.implicit {
		conn, err := m.dial(ctx)
		if err != nil {
			return nil, false, err
		}
		c, err = m.client(ctx, tls.Client(conn, m.tls), false)
		return c, true, err
	}
	if !m.sawTLS.Load() {
		// The first session asks the server whether it speaks STARTTLS; go-smtp starts it
		// only on a fresh connection, so a server that does is dialed again below.
		conn, err := m.dial(ctx)
		if err != nil {
			return nil, false, err
		}
		c, err := m.client(ctx, conn, false)
		if err != nil {
			return nil, false, err
		}
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return c, false, nil
		}
		_ = c.Quit()
		m.sawTLS.Store(true)
	}
	conn, err := m.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	c, err = m.client(ctx, conn, true)
	return c, true, err
}

func (m *Mailer) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", m.addr)
}

func (m *Mailer) client(ctx context.Context, conn net.Conn, startTLS bool) (*gosmtp.Client, error) {
	// go-smtp sets a deadline per command; the whole session's bound is the context's,
	// which closes the connection when it ends, failing whatever read or write waits.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	var c *gosmtp.Client
	var err error
	if startTLS {
		c, err = gosmtp.NewClientStartTLS(conn, m.tls)
	} else {
		c = gosmtp.NewClient(conn)
		err = c.Hello(m.domain)
	}
	if err != nil {
		stop()
		conn.Close()
		return nil, err
	}
	if startTLS {
		// NewClientStartTLS said EHLO as "localhost"; after TLS the client says it again,
		// with the name set here.
		if err := c.Hello(m.domain); err != nil {
			stop()
			c.Close()
			return nil, err
		}
	}
	c.CommandTimeout, c.SubmissionTimeout = m.timeout, m.timeout
	return c, nil
}

// Compose renders msg from "from" as an RFC 5322 plain-text message (quoted-printable
// UTF-8) and returns it with the recipient's bare address. Header values with CR or LF
// are refused: they would let a value start a header of its own.
func Compose(from *mail.Address, domain string, msg tenants.Mail, now time.Time) ([]byte, string, error) {
	for name, v := range map[string]string{"To": msg.To, "Subject": msg.Subject} {
		if strings.ContainsAny(v, "\r\n") {
			return nil, "", fmt.Errorf("smtp: the %s header holds a line break", name)
		}
	}
	to, err := mail.ParseAddress(msg.To)
	if err != nil {
		return nil, "", fmt.Errorf("smtp: To %q is not a mail address: %v", msg.To, err)
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	var b bytes.Buffer
	header := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	header("From", from.String())
	header("To", to.String())
	header("Subject", mime.QEncoding.Encode("utf-8", msg.Subject))
	header("Date", now.Format(time.RFC1123Z))
	header("Message-ID", "<"+hex.EncodeToString(id[:])+"@"+domain+">")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	header("Auto-Submitted", "auto-generated")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	text := strings.ReplaceAll(strings.ReplaceAll(msg.Text, "\r\n", "\n"), "\n", "\r\n")
	if _, err := qp.Write([]byte(text)); err != nil {
		return nil, "", err
	}
	if err := qp.Close(); err != nil {
		return nil, "", err
	}
	b.WriteString("\r\n")
	return b.Bytes(), to.Address, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Log is the mailer of a stack without an SMTP server: it writes each message's recipient,
// subject and links to the log, so a developer can follow them. Never use it where the
// log is read by others than the people the mail is for.
type Log struct{ Logger *slog.Logger }

var linkRE = regexp.MustCompile(`https?://[^\s<>"]+`)

// Send logs msg's recipient, subject and links.
func (l Log) Send(ctx context.Context, msg tenants.Mail) error {
	if strings.ContainsAny(msg.To+msg.Subject, "\r\n") {
		return errors.New("smtp: a header holds a line break")
	}
	l.Logger.InfoContext(ctx, "mail not sent (no TOLLGATE_SMTP_URL): its links are here",
		"to", msg.To, "subject", msg.Subject, "links", linkRE.FindAllString(msg.Text, -1))
	return nil
}

var (
	_ tenants.Mailer = (*Mailer)(nil)
	_ tenants.Mailer = Log{}
)
