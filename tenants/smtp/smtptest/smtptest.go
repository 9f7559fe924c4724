// Package smtptest runs a real SMTP server (emersion/go-smtp) in a test, records every
// message it accepts, and lets the test read them and follow their links, the way a person
// would read the mail. Never use it outside tests.
package smtptest

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"

	"tollgate/infra/testcert"
	"tollgate/tenants/smtp"
)

// Options of a test server. The zero value offers STARTTLS, takes no AUTH and accepts
// every message.
type Options struct {
	// User and Password, when set, are required (AUTH PLAIN) before MAIL FROM.
	User, Password string
	// NoTLS stops the server offering STARTTLS.
	NoTLS bool
	// Implicit makes it an smtps server: TLS from the first byte.
	Implicit bool
	// Refuse, when set, is the answer to every RCPT TO (a 5xx error refuses the mail).
	Refuse *gosmtp.SMTPError
}

// Message is one accepted message as the server received it.
type Message struct {
	From    string   // the envelope sender
	To      []string // the envelope recipients
	Header  mail.Header
	Subject string // decoded
	Text    string // the body, decoded from its transfer encoding
	Raw     []byte
	TLS     bool   // the session was encrypted
	User    string // the AUTH user, "" without AUTH
}

// Server is a running test SMTP server.
type Server struct {
	// URL is the address a tollgate mailer is configured with (smtp:// or smtps://, with
	// the user and password when Options set them).
	URL string
	// Addr is host:port.
	Addr string
	// CA signed the server's certificate (for "localhost").
	CA *testcert.CA

	opts Options
	srv  *gosmtp.Server

	mu   sync.Mutex
	msgs []Message
	read map[string]int // recipient → how many of its messages WaitFor returned
}

// Start runs a server with the default Options on a free 127.0.0.1 port until the test ends.
func Start(tb testing.TB) *Server { return StartWith(tb, Options{}) }

// StartWith runs a server with opts until the test ends.
func StartWith(tb testing.TB, opts Options) *Server {
	tb.Helper()
	ca := testcert.NewCA(tb)
	leaf := ca.Issue(tb, []string{"localhost"}, time.Time{}, time.Time{})
	s := &Server{CA: ca, opts: opts, read: map[string]int{}}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(c *gosmtp.Conn) (gosmtp.Session, error) {
		_, secure := c.TLSConnectionState()
		return &session{s: s, tls: secure}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	srv.MaxMessageBytes = 1 << 20
	srv.MaxRecipients = 10
	srv.ErrorLog = log.New(io.Discard, "", 0)
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, MinVersion: tls.VersionTLS12}
	if !opts.NoTLS {
		srv.TLSConfig = tlsCfg
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	scheme := "smtp"
	if opts.Implicit {
		ln, scheme = tls.NewListener(ln, tlsCfg), "smtps"
	}
	s.srv, s.Addr = srv, ln.Addr().String()
	u := url.URL{Scheme: scheme, Host: s.Addr}
	if opts.User != "" {
		u.User = url.UserPassword(opts.User, opts.Password)
	}
	s.URL = u.String()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	tb.Cleanup(func() {
		srv.Close()
		// Close misses a listener that Serve has not registered yet.
		ln.Close()
		<-done
	})
	return s
}

// TLS is the client configuration that trusts the server's certificate.
func (s *Server) TLS() *tls.Config {
	return &tls.Config{RootCAs: s.CA.Pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// Mailer is a tollgate SMTP mailer that sends to this server.
func (s *Server) Mailer(tb testing.TB) *smtp.Mailer {
	tb.Helper()
	m, err := smtp.New(smtp.Config{URL: s.URL, From: "Tollgate <no-reply@tollgate.test>", TLS: s.TLS(), Timeout: 10 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// Messages returns every message accepted so far, oldest first.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// To returns the messages accepted so far for the address to, oldest first.
func (s *Server) To(to string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.to(to)
}

func (s *Server) to(to string) []Message {
	var list []Message
	for _, m := range s.msgs {
		for _, r := range m.To {
			if strings.EqualFold(r, to) {
				list = append(list, m)
				break
			}
		}
	}
	return list
}

// WaitFor returns the next message for the address to that an earlier WaitFor did not
// return, waiting up to 10 seconds for it to arrive.
func (s *Server) WaitFor(tb testing.TB, to string) Message {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		list, n := s.to(to), s.read[strings.ToLower(to)]
		if len(list) > n {
			s.read[strings.ToLower(to)] = n + 1
			s.mu.Unlock()
			return list[n]
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			tb.Fatalf("smtptest: no new mail for %s in 10s (%d read, %d messages in all)", to, n, len(s.Messages()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// NoMoreFor fails the test if a message for the address to arrives, beyond those WaitFor
// returned, within d.
func (s *Server) NoMoreFor(tb testing.TB, to string, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		list, n := s.to(to), s.read[strings.ToLower(to)]
		s.mu.Unlock()
		if len(list) > n {
			tb.Fatalf("smtptest: unexpected mail for %s: %q\n%s", to, list[n].Subject, list[n].Text)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var linkRE = regexp.MustCompile(`https?://[^\s<>"]+`)

// Links returns every http(s) link in the message's text, in order.
func Links(m Message) []string { return linkRE.FindAllString(m.Text, -1) }

// Link returns the first link in the message's text that starts with prefix, and fails the
// test when there is none.
func Link(tb testing.TB, m Message, prefix string) string {
	tb.Helper()
	for _, l := range Links(m) {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	tb.Fatalf("smtptest: no link starting with %q in the mail %q to %v:\n%s", prefix, m.Subject, m.To, m.Text)
	return ""
}

type session struct {
	s    *Server
	tls  bool
	user string
	from string
	to   []string
}

func (ss *session) AuthMechanisms() []string {
	if ss.s.opts.User == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain || ss.s.opts.User == "" {
		return nil, gosmtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, user, pass string) error {
		if user != ss.s.opts.User || pass != ss.s.opts.Password {
			return gosmtp.ErrAuthFailed
		}
		ss.user = user
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *gosmtp.MailOptions) error {
	if ss.s.opts.User != "" && ss.user == "" {
		return gosmtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	if ss.s.opts.Refuse != nil {
		return ss.s.opts.Refuse
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m := Message{From: ss.from, To: ss.to, Raw: raw, TLS: ss.tls, User: ss.user}
	parsed, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 6, 0}, Message: "not an RFC 5322 message: " + err.Error()}
	}
	m.Header = parsed.Header
	if m.Subject, err = new(mime.WordDecoder).DecodeHeader(parsed.Header.Get("Subject")); err != nil {
		return &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 6, 0}, Message: "bad Subject: " + err.Error()}
	}
	body, err := io.ReadAll(decode(parsed))
	if err != nil {
		return &gosmtp.SMTPError{Code: 554, EnhancedCode: gosmtp.EnhancedCode{5, 6, 0}, Message: "bad body: " + err.Error()}
	}
	m.Text = strings.ReplaceAll(string(body), "\r\n", "\n")
	ss.s.mu.Lock()
	ss.s.msgs = append(ss.s.msgs, m)
	ss.s.mu.Unlock()
	return nil
}

func (ss *session) Reset()        { ss.from, ss.to = "", nil }
func (ss *session) Logout() error { return nil }

var _ gosmtp.AuthSession = (*session)(nil)

// errUnknownEncoding keeps a test from reading a body it cannot decode as if it were text.
var errUnknownEncoding = errors.New("unknown Content-Transfer-Encoding")

func decode(m *mail.Message) io.Reader {
	switch strings.ToLower(m.Header.Get("Content-Transfer-Encoding")) {
	case "", "7bit", "8bit":
		return m.Body
	case "quoted-printable":
		return quotedprintable.NewReader(m.Body)
	default:
		return errReader{errUnknownEncoding}
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
