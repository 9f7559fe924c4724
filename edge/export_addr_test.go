package edge

import "net"

// SetResolver makes the edge's upstream dialer resolve names through r (a test's own
// DNS server) instead of the system's.
func SetResolver(e *Edge, r *net.Resolver) { e.dialer.Resolver = r }
