package upstreamerr_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/upstreamclient"
	"tollgate/edge/upstreamerr"
)

func TestReason(t *testing.T) {
	const target = "https://api.example.com:443"
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"policy", &upstreamclient.DialError{Addr: "api.example.com:443", AddressRule: true, Err: errors.New("10.0.0.0/8 is denied")},
			"the upstream address https://api.example.com:443 is refused by the operator's policy"},
		{"refused", &upstreamclient.DialError{Err: refused}, "the upstream https://api.example.com:443 refused the connection"},
		{"connect timeout", &upstreamclient.DialError{TimedOut: true, Err: errors.New("i/o timeout")},
			"the upstream https://api.example.com:443 did not accept a connection within 2000 ms"},
		{"no such host", &upstreamclient.DialError{Err: &net.DNSError{Err: "no such host", Name: "api.example.com", IsNotFound: true}},
			"the upstream https://api.example.com:443's host name could not be resolved"},
		{"unreachable", &upstreamclient.DialError{Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}},
			"the upstream https://api.example.com:443 is unreachable from the edge"},
		{"other dial", &upstreamclient.DialError{Err: errors.New("no address of the host accepted a connection")},
			"the upstream https://api.example.com:443 could not be reached"},
		{"busy", fasthttp.ErrNoFreeConns, "all connections to the upstream https://api.example.com:443 are busy; retry shortly"},
		{"slow", fasthttp.ErrTimeout, "the upstream https://api.example.com:443 did not answer within 30000 ms"},
		{"slow read", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "the upstream https://api.example.com:443 did not answer within 30000 ms"},
		{"closed", fasthttp.ErrConnectionClosed, "the upstream https://api.example.com:443 closed the connection before answering"},
		{"eof", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), "the upstream https://api.example.com:443 closed the connection before answering"},
		{"reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
			"the upstream https://api.example.com:443 closed the connection before answering"},
		{"garbage", errors.New("cannot find whitespace in the first line of response"),
			"the upstream https://api.example.com:443 sent an answer that is not valid HTTP"},
		{"wrong name", &tls.CertificateVerificationError{Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "api.example.com"}},
			"the upstream https://api.example.com:443's TLS handshake failed: certificate is not valid for api.example.com"},
		{"h2 wrong name", &upstreamclient.DialError{Err: &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "api.example.com"}}},
			"the upstream https://api.example.com:443's TLS handshake failed: certificate is not valid for api.example.com"},
		{"unknown CA", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}},
			"the upstream https://api.example.com:443's TLS handshake failed: certificate is signed by an unknown authority"},
		{"expired", &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}},
			"the upstream https://api.example.com:443's TLS handshake failed: certificate has expired or is not yet valid"},
		{"not TLS", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"},
			"the upstream https://api.example.com:443's TLS handshake failed: the upstream does not speak TLS"},
		{"alert", &net.OpError{Op: "remote error", Err: errors.New("tls: handshake failure")},
			"the upstream https://api.example.com:443's TLS handshake failed: the upstream refused it (tls: handshake failure)"},
		{"no h2", &upstreamclient.DialError{Err: &net.OpError{Op: "remote error", Err: errors.New("tls: no application protocol")}},
			"the upstream https://api.example.com:443's TLS handshake failed: the upstream does not speak HTTP/2: its TLS offers no h2 by ALPN"},
	} {
		if got := upstreamerr.Reason(c.err, target, 2*time.Second, 30*time.Second); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestReasonTarget(t *testing.T) {
	for _, c := range []struct {
		tls      bool
		hostport string
		want     string
	}{
		{false, "127.0.0.1:9", "http://127.0.0.1:9"},
		{true, "api.example.com:443", "https://api.example.com:443"},
		{false, "[::1]:8080", "http://[::1]:8080"},
	} {
		if got := upstreamerr.Target(c.tls, c.hostport); got != c.want {
			t.Errorf("Target(%v, %q) = %q, want %q", c.tls, c.hostport, got, c.want)
		}
	}
}
