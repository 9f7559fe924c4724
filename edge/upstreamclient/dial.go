package upstreamclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"tollgate/edge/conn"
	"tollgate/tenants"
)

// DialError is a failed connect to an upstream: refused by the operator's address rule, timed
// out, or failed otherwise. The request path turns it into 502 or 504.
type DialError struct {
	Addr        string
	AddressRule bool // refused by the operator's address rule
	TimedOut    bool
	Err         error
}

func (e *DialError) Error() string { return fmt.Sprintf("dial %s: %v", e.Addr, e.Err) }
func (e *DialError) Unwrap() error { return e.Err }
func (e *DialError) Timeout() bool { return e.TimedOut }

// Dialer connects to upstreams. It resolves the target's name itself and checks every
// address with UpstreamAddressRule.CheckAddr before connecting, and then connects to the
// checked address, so a name that resolves somewhere refused (or is rebound between check
// and connect) never reaches it.
type Dialer struct {
	AddressRule *tenants.UpstreamAddressRule
	Resolver    *net.Resolver
}

// Dial returns a dial function bounded by connectTimeout (and by the request's
// remaining time, when one is passed).
func (d *Dialer) Dial(connectTimeout time.Duration) func(addr string, timeout time.Duration) (net.Conn, error) {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		if timeout <= 0 || timeout > connectTimeout {
			timeout = connectTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, &DialError{Addr: addr, Err: err}
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return nil, &DialError{Addr: addr, Err: err}
		}
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else {
			addrs, err = d.Resolver.LookupNetIP(ctx, "ip", host)
			if err != nil {
				return nil, &DialError{Addr: addr, TimedOut: ctx.Err() != nil, Err: err}
			}
		}
		for _, a := range addrs {
			if err := d.AddressRule.CheckAddr(a, port); err != nil {
				return nil, &DialError{Addr: addr, AddressRule: true, Err: err}
			}
		}
		var nd net.Dialer
		for _, a := range addrs {
			c, err := nd.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
			if err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetNoDelay(true)
					return conn.Dialed(tc), nil
				}
				return c, nil
			}
			if ctx.Err() != nil {
				return nil, &DialError{Addr: addr, TimedOut: true, Err: err}
			}
			if len(addrs) == 1 {
				return nil, &DialError{Addr: addr, Err: err}
			}
		}
		return nil, &DialError{Addr: addr, Err: errors.New("no address of the host accepted a connection")}
	}
}
