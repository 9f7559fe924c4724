package routing

// MaxHostLen bounds the Host header the edge looks at: a DNS name is at most 253 bytes,
// plus a port.
const MaxHostLen = 260

// TenantSlug finds the tenant slug in a Host header value of the form
// "{slug}.{domain}[:port]" (domain lower case, compared without case; a trailing dot of a
// fully qualified name is accepted). It writes the lower-cased slug into buf and returns
// it, or nil when host does not name a tenant: another domain, the bare domain, a nested
// name ("a.b.{domain}"), an IP literal, or bytes a slug may not contain.
func TenantSlug(buf *[MaxHostLen]byte, host []byte, domain string) []byte {
	if len(host) == 0 || len(host) > MaxHostLen || host[0] == '[' {
		return nil
	}
	// Drop a port: everything after the last ':' when it is all digits.
	for i := len(host) - 1; i >= 0; i-- {
		c := host[i]
		if c == ':' {
			for _, d := range host[i+1:] {
				if d < '0' || d > '9' {
					return nil
				}
			}
			host = host[:i]
			break
		}
		if c < '0' || c > '9' {
			break
		}
	}
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	// host must be slug + "." + domain.
	n := len(host) - len(domain) - 1
	if n < 1 || n > 63 || host[n] != '.' {
		return nil
	}
	for i := 0; i < len(domain); i++ {
		c := host[n+1+i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != domain[i] {
			return nil
		}
	}
	slug := buf[:n]
	for i := 0; i < n; i++ {
		c := host[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		default:
			return nil
		}
		slug[i] = c
	}
	return slug
}
