// Package upstreamerr puts a failed upstream exchange into words a tenant can act on:
// which target, as the tenant configured it, and what went wrong with it (refused,
// too slow, a certificate for another name…).
//
// It must not reveal what the tenant did not configure: the addresses a name resolved
// to, the operator's address policy, or the edge's internals. It runs only when an
// exchange has failed, so it may allocate.
package upstreamerr

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"tollgate/edge/upstreamclient"
)

// NoHealthy is the reason when no target of a route's upstream is in rotation.
const NoHealthy = "no target of the upstream is healthy"

// Target names a target as its URL did: scheme://host:port, the port filled in when
// the URL left it out, the host as written (a name stays a name).
func Target(tlsOn bool, hostport string) string {
	if tlsOn {
		return "https://" + hostport
	}
	return "http://" + hostport
}

// Reason says why the exchange with target failed with err: connectTimeout and timeout
// are the route's, named in milliseconds as the route configures them.
func Reason(err error, target string, connectTimeout, timeout time.Duration) string {
	up := "the upstream " + target
	var de *upstreamclient.DialError
	isDial := errors.As(err, &de)
	if isDial && de.AddressRule {
		return "the upstream address " + target + " is refused by the operator's policy"
	}
	if why := tlsReason(err); why != "" {
		return up + "'s TLS handshake failed: " + why
	}
	if isDial {
		var dns *net.DNSError
		switch {
		case de.TimedOut:
			return up + " did not accept a connection within " + ms(connectTimeout)
		case errors.Is(err, syscall.ECONNREFUSED):
			return up + " refused the connection"
		case errors.As(err, &dns):
			return up + "'s host name could not be resolved"
		case errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH):
			return up + " is unreachable from the edge"
		}
		return up + " could not be reached"
	}
	switch {
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "all connections to the upstream " + target + " are busy; retry shortly"
	case isTimeout(err):
		return up + " did not answer within " + ms(timeout)
	case closed(err):
		return up + " closed the connection before answering"
	}
	return up + " sent an answer that is not valid HTTP"
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrTLSHandshakeTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closed reports an upstream that hung up (or reset) before its answer was whole.
func closed(err error) bool {
	return errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// tlsReason is a short account of a TLS failure, "" when err is none. The certificate's
// own fields are named only where the tenant configured them (the host name).
func tlsReason(err error) string {
	var host x509.HostnameError
	var hostP *x509.HostnameError
	var unknown x509.UnknownAuthorityError
	var unknownP *x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var invalidP *x509.CertificateInvalidError
	var op *net.OpError
	var record tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &host):
		return "certificate is not valid for " + host.Host
	case errors.As(err, &hostP):
		return "certificate is not valid for " + hostP.Host
	case errors.As(err, &unknown), errors.As(err, &unknownP):
		return "certificate is signed by an unknown authority"
	case errors.As(err, &invalid):
		return invalidReason(invalid.Reason)
	case errors.As(err, &invalidP):
		return invalidReason(invalidP.Reason)
	case errors.As(err, &verify):
		return "certificate could not be verified"
	case errors.As(err, &record):
		return "the upstream does not speak TLS"
	case errors.As(err, &op) && op.Op == "remote error" && op.Err.Error() == "tls: no application protocol":
		// Only an HTTP/2 upstream names a protocol by ALPN, and only h2.
		return "the upstream does not speak HTTP/2: its TLS offers no h2 by ALPN"
	case errors.As(err, &op) && op.Op == "remote error":
		// The upstream's TLS alert, such as "tls: handshake failure": a fixed phrase of
		// the protocol, not a detail of the edge.
		return "the upstream refused it (" + op.Err.Error() + ")"
	}
	return ""
}

func invalidReason(r x509.InvalidReason) string {
	switch r {
	case x509.Expired:
		return "certificate has expired or is not yet valid"
	case x509.NotAuthorizedToSign:
		return "certificate is signed by a certificate that may not sign"
	case x509.IncompatibleUsage:
		return "certificate is not for server authentication"
	}
	return "certificate is not valid"
}
