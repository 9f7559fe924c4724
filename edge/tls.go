package edge

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"strings"

	"tollgate/edge/conn"
	"tollgate/edge/h2door"
	"tollgate/edge/routing"
	"tollgate/tenants"
)

// TLS termination. The TLS listener serves the same handler as the public one;
// what differs is the handshake and one check per request:
//
//   - GetCertificate picks the certificate by SNI: a tenant's custom domain gets the
//     certificate uploaded with it, every other name the edge domain's wildcard
//     certificate (Config.TLSCertificate). The map it reads is rebuilt with the host map
//     whenever a tenant's domains change, and swapped with one atomic store, so a new
//     certificate is served from the next handshake on, without a restart.
//   - A request's Host must name the tenant its connection's SNI named (RFC 9110 15.5.20):
//     a connection set up for one tenant's certificate cannot carry another tenant's
//     requests (connection reuse across names that share a certificate, or a client
//     lying in Host). Otherwise 421 misdirected_request. A handshake without SNI (a
//     client dialing an IP) claims no name and is not checked.
//
// Custom domains route on the plain listener too: a Host that is not {slug}.{domain} is
// looked up in the custom host map.
//
// Only verified domains route and have their certificate presented. A domain whose DNS
// proof the api has not seen (status pending, or no status: an entry from before domains
// were verified) maps to pendingDomain, a slot with no snapshot: its Host gets 421
// misdirected_request instead of 404, and its SNI the wildcard certificate. The lookup is
// the one every request already makes; pending names only change what a miss answers.

// customHosts is what rebuildHosts publishes for custom domains: host name → tenant slot
// (for routing; pendingDomain for a name only claimed) and → certificate (for the
// handshake; verified domains only).
type customHosts struct {
	slots map[string]*tenantSlot
	certs map[string]*tls.Certificate
}

var emptyCustomHosts = &customHosts{slots: map[string]*tenantSlot{}, certs: map[string]*tls.Certificate{}}

// pendingDomain is the slot of every custom host name that is claimed and not verified.
// Its snapshot is always nil.
var pendingDomain = &tenantSlot{}

// buildCustomHostsLocked collects the custom domains of published tenants (e.mu held).
// A verified claim of a name wins over pending ones. Two tenants with verified claims of
// one name (only possible with inconsistent config) resolve to the smaller tenant id, as
// slugs do.
func (e *Edge) buildCustomHostsLocked(published map[string]*tenantSlot) *customHosts {
	ch := &customHosts{slots: map[string]*tenantSlot{}, certs: map[string]*tls.Certificate{}}
	owner := map[string]string{}
	for id, ts := range e.state {
		if len(ts.domains) == 0 || ts.published == "" || published[ts.published] != ts.slot {
			continue
		}
		for _, d := range ts.domains {
			if !d.Verified {
				if _, ok := ch.slots[d.Host]; !ok {
					ch.slots[d.Host] = pendingDomain
				}
				continue
			}
			if prev, ok := owner[d.Host]; ok {
				e.log.Warn("edge: two tenants have verified one custom domain", "host", d.Host, "tenants", []string{prev, id})
				if prev < id {
					continue
				}
			}
			owner[d.Host] = id
			ch.slots[d.Host] = ts.slot
			ch.certs[d.Host] = d.Cert
		}
	}
	return ch
}

// hostName lower-cases a Host header value or server name into buf, without a port or
// a trailing dot; nil when it cannot be a DNS name.
func hostName(buf *[routing.MaxHostLen]byte, host []byte) []byte {
	if len(host) == 0 || len(host) > routing.MaxHostLen || host[0] == '[' {
		return nil
	}
	n := 0
	for _, c := range host {
		if c == ':' {
			break
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[n] = c
		n++
	}
	if n > 0 && buf[n-1] == '.' {
		n--
	}
	if n == 0 {
		return nil
	}
	return buf[:n]
}

// customSlot is the slot of the tenant a custom domain Host belongs to, or nil.
func (e *Edge) customSlot(buf *[routing.MaxHostLen]byte, host []byte) *tenantSlot {
	ch := e.custom.Load()
	if len(ch.slots) == 0 {
		return nil
	}
	h := hostName(buf, host)
	if h == nil {
		return nil
	}
	return ch.slots[string(h)]
}

// hostSlot finds the tenant slot a host name (Host header or SNI) names.
func (e *Edge) hostSlot(buf *[routing.MaxHostLen]byte, host []byte) *tenantSlot {
	if slug := routing.TenantSlug(buf, host, e.domain); slug != nil {
		return (*e.hosts.Load())[string(slug)]
	}
	return e.customSlot(buf, host)
}

// sniAgrees reports whether the request's connection is not TLS, has no SNI, or has an
// SNI naming the same tenant (slot) as the Host header did. The connection is a *tls.Conn
// on HTTP/1.1 and h2door's stand-in for it on HTTP/2.
func (x *exchange) sniAgrees(slot *tenantSlot) bool {
	tc, ok := x.ctx.Conn().(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return true
	}
	sni := tc.ConnectionState().ServerName
	if sni == "" || isIPLiteral(sni) {
		return true
	}
	var buf [routing.MaxHostLen]byte
	return x.e.hostSlot(&buf, []byte(sni)) == slot
}

// isIPLiteral reports whether an SNI is an IP address. RFC 6066 forbids them, yet
// OpenSSL-based clients (curl -k https://127.0.0.1, wrk) send one when the URL names an
// address: it names no tenant, so it counts as no SNI rather than a mismatch.
func isIPLiteral(sni string) bool {
	_, err := netip.ParseAddr(strings.Trim(sni, "[]"))
	return err == nil
}

// getCertificate is the TLS listener's tls.Config.GetCertificate.
func (e *Edge) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello.ServerName != "" {
		var buf [routing.MaxHostLen]byte
		if h := hostName(&buf, []byte(hello.ServerName)); h != nil {
			if c := e.custom.Load().certs[string(h)]; c != nil {
				return c, nil
			}
		}
	}
	if e.cfg.TLSCertificate != nil {
		return e.cfg.TLSCertificate, nil
	}
	return nil, errors.New("edge: no certificate for this server name")
}

// tlsConfig is the TLS listener's configuration: TLS 1.2 and 1.3, HTTP/2 (unless
// turned off) and HTTP/1.1.
func (e *Edge) tlsConfig() *tls.Config {
	protos := []string{"h2", "http/1.1"}
	if e.public.h2 == nil {
		protos = protos[1:]
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: e.getCertificate,
		NextProtos:     protos,
	}
}

// ServeTLS serves tenant traffic over TLS on ln (see the comment at the top of tls.go)
// until Shutdown, which also closes ln. It returns nil after Shutdown, and the listener's
// error otherwise.
func (e *Edge) ServeTLS(ln net.Listener) error {
	var tln net.Listener = tls.NewListener(conn.LingerListener(ln), e.tlsConfig())
	if e.public.h2 != nil {
		tln = h2door.NewSplit(tln, h2door.SortTLS(e.sortWait()))
	}
	err := e.public.Serve(tln)
	if e.draining.Load() {
		return nil
	}
	return err
}

var replyMisdirected = newReply(tenants.EMisdirected, "the TLS server name (SNI) names another API than the Host header; open a new connection for this host")

var replyUnverified = newReply(tenants.EMisdirected, "this host name is a custom domain whose DNS proof (its _tollgate-challenge TXT record) is not verified; the edge serves it once it is")
