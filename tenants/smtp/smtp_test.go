package smtp_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/mail"
	"strings"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"tollgate/tenants"
	"tollgate/tenants/smtp"
	"tollgate/tenants/smtp/smtptest"
)

const link = "https://console.example.com/console/verify?token=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func mailFor(to string) tenants.Mail {
	return tenants.Mail{To: to, Subject: "Vérifiez your address", Text: "Hello,\n\nfollow " + link + " within 24 hours.\n\n— Tollgate"}
}

func newMailer(t *testing.T, s *smtptest.Server) *smtp.Mailer {
	t.Helper()
	m, err := smtp.New(smtp.Config{URL: s.URL, From: "Tollgate <no-reply@tollgate.test>", TLS: s.TLS(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSendStartTLS(t *testing.T) {
	s := smtptest.Start(t)
	m := newMailer(t, s)
	for i := range 2 { // the second session goes straight to STARTTLS
		if err := m.Send(context.Background(), mailFor("ann@example.com")); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		got := s.WaitFor(t, "ann@example.com")
		if !got.TLS {
			t.Fatal("the mail went in clear although the server offers STARTTLS")
		}
		if got.From != "no-reply@tollgate.test" || len(got.To) != 1 || got.To[0] != "ann@example.com" {
			t.Fatalf("envelope %q → %v", got.From, got.To)
		}
		if got.Subject != "Vérifiez your address" {
			t.Fatalf("subject %q", got.Subject)
		}
		if l := smtptest.Link(t, got, "https://console.example.com/console/verify?"); l != link {
			t.Fatalf("link %q, want %q", l, link)
		}
		for _, h := range []string{"Date", "Message-ID", "From", "To", "MIME-Version"} {
			if got.Header.Get(h) == "" {
				t.Errorf("no %s header:\n%s", h, got.Raw)
			}
		}
		if ct := got.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
		if _, err := got.Header.Date(); err != nil {
			t.Errorf("Date: %v", err)
		}
		if !strings.Contains(got.Text, "— Tollgate") {
			t.Errorf("text lost its UTF-8: %q", got.Text)
		}
		for _, line := range bytes.Split(got.Raw, []byte("\r\n")) {
			if len(line) > 78 {
				t.Errorf("line longer than 78 bytes: %q", line)
			}
		}
	}
	msgs := s.Messages()
	if msgs[0].Header.Get("Message-ID") == msgs[1].Header.Get("Message-ID") {
		t.Fatal("two messages share a Message-ID")
	}
}

func TestSendPlainWhenNoTLSOffered(t *testing.T) {
	s := smtptest.StartWith(t, smtptest.Options{NoTLS: true})
	if err := newMailer(t, s).Send(context.Background(), mailFor("bob@example.com")); err != nil {
		t.Fatal(err)
	}
	if got := s.WaitFor(t, "bob@example.com"); got.TLS {
		t.Fatal("TLS without STARTTLS?")
	}
}

func TestSendAuth(t *testing.T) {
	s := smtptest.StartWith(t, smtptest.Options{User: "relay", Password: "s3cret pass"})
	if err := newMailer(t, s).Send(context.Background(), mailFor("cy@example.com")); err != nil {
		t.Fatal(err)
	}
	if got := s.WaitFor(t, "cy@example.com"); got.User != "relay" || !got.TLS {
		t.Fatalf("user %q tls %v", got.User, got.TLS)
	}

	wrong := strings.Replace(s.URL, "s3cret", "wrong", 1)
	m, err := smtp.New(smtp.Config{URL: wrong, From: "no-reply@tollgate.test", TLS: s.TLS()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), mailFor("cy@example.com")); err == nil || !strings.Contains(err.Error(), "AUTH") {
		t.Fatalf("a wrong password: %v", err)
	}
	s.NoMoreFor(t, "cy@example.com", 50*time.Millisecond)
}

func TestSendImplicitTLS(t *testing.T) {
	s := smtptest.StartWith(t, smtptest.Options{Implicit: true, User: "relay", Password: "pw"})
	if !strings.HasPrefix(s.URL, "smtps://") {
		t.Fatal(s.URL)
	}
	if err := newMailer(t, s).Send(context.Background(), mailFor("di@example.com")); err != nil {
		t.Fatal(err)
	}
	if got := s.WaitFor(t, "di@example.com"); !got.TLS || got.User != "relay" {
		t.Fatalf("tls %v user %q", got.TLS, got.User)
	}
}

func TestSendRefusesUntrustedCertificate(t *testing.T) {
	s := smtptest.Start(t)
	m, err := smtp.New(smtp.Config{URL: s.URL, From: "no-reply@tollgate.test"}) // system roots
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), mailFor("ed@example.com")); err == nil {
		t.Fatal("sent over TLS to a server whose certificate nobody vouches for")
	}
	s.NoMoreFor(t, "ed@example.com", 50*time.Millisecond)
}

func TestSendRefusedByServer(t *testing.T) {
	s := smtptest.StartWith(t, smtptest.Options{Refuse: &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"}})
	err := newMailer(t, s).Send(context.Background(), mailFor("fay@example.com"))
	if err == nil || !strings.Contains(err.Error(), "no such mailbox") {
		t.Fatalf("a refused recipient: %v", err)
	}
	if n := len(s.Messages()); n != 0 {
		t.Fatalf("%d messages stored", n)
	}
}

func TestSendTimesOut(t *testing.T) {
	// A server that accepts the connection and never greets.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	m, err := smtp.New(smtp.Config{URL: "smtp://" + ln.Addr().String(), From: "no-reply@tollgate.test", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := m.Send(context.Background(), mailFor("gus@example.com")); err == nil {
		t.Fatal("sent to a server that never spoke")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Send took %v with a 300ms timeout", d)
	}
}

func TestSendRefusesHeaderInjection(t *testing.T) {
	s := smtptest.Start(t)
	m := newMailer(t, s)
	for _, bad := range []tenants.Mail{
		{To: "ann@example.com\r\nBcc: eve@example.com", Subject: "x", Text: "x"},
		{To: "ann@example.com", Subject: "hi\nBcc: eve@example.com", Text: "x"},
		{To: "ann@example.com", Subject: "hi\rBcc: eve@example.com", Text: "x"},
		{To: "not an address", Subject: "x", Text: "x"},
	} {
		if err := m.Send(context.Background(), bad); err == nil {
			t.Errorf("sent %+v", bad)
		}
		if err := (smtp.Log{Logger: slog.New(slog.DiscardHandler)}).Send(context.Background(), bad); err == nil && strings.ContainsAny(bad.To+bad.Subject, "\r\n") {
			t.Errorf("logged %+v", bad)
		}
	}
	if n := len(s.Messages()); n != 0 {
		t.Fatalf("%d messages sent", n)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []smtp.Config{
		{URL: "http://mail.example.com:25", From: "a@example.com"},
		{URL: "smtp://mail.example.com", From: "a@example.com"},
		{URL: "smtp://mail.example.com:587", From: "not an address"},
		{URL: "::", From: "a@example.com"},
	} {
		if _, err := smtp.New(c); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

func TestLogMailerLogsLinks(t *testing.T) {
	var buf bytes.Buffer
	l := smtp.Log{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	if err := l.Send(context.Background(), mailFor("hal@example.com")); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, link) || !strings.Contains(out, "hal@example.com") {
		t.Fatalf("log: %s", out)
	}
}

func FuzzCompose(f *testing.F) {
	f.Add("ann@example.com", "Verify your address", "follow "+link)
	f.Add("Ann <ann@example.com>", "=?utf-8?q?x?=", "line\r\n.\r\nend")
	f.Add("ann@example.com", "hi\nBcc: x@example.com", "x")
	from := &mail.Address{Name: "Tollgate", Address: "no-reply@tollgate.test"}
	f.Fuzz(func(t *testing.T, to, subject, text string) {
		raw, rcpt, err := smtp.Compose(from, "tollgate.test", tenants.Mail{To: to, Subject: subject, Text: text}, time.Unix(0, 0))
		if err != nil {
			return
		}
		if strings.ContainsAny(rcpt, "\r\n") {
			t.Fatalf("recipient %q", rcpt)
		}
		m, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("composed an unreadable message: %v\n%q", err, raw)
		}
		if len(m.Header) != 9 || len(m.Header["To"]) != 1 || m.Header.Get("Bcc") != "" {
			t.Fatalf("header injected: %v", m.Header)
		}
		for _, line := range bytes.Split(raw, []byte("\r\n")) {
			if bytes.ContainsAny(line, "\r\n") {
				t.Fatalf("a bare CR or LF in %q", line)
			}
		}
	})
}
