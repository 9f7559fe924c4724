package conn

import "net"

// Tunnel returns the TCP connection under c (as TCP does) reading and writing with raw
// system calls when SetRawIO is on, for a relay that reads it from one goroutine and
// writes it from another (a WebSocket tunnel): rawIO lets one read and one write run at
// once, as net.Conn does. Deadlines and Close are the TCP connection's own. A
// connection that is not TCP, or raw I/O off, gives what TCP gives.
func Tunnel(c net.Conn) net.Conn {
	t := TCP(c)
	tc, ok := t.(*net.TCPConn)
	if !ok {
		return t
	}
	r := newRawIO(tc)
	if r == nil {
		return tc
	}
	return &tunnelConn{TCPConn: tc, raw: r}
}

type tunnelConn struct {
	*net.TCPConn
	raw *rawIO
}

func (c *tunnelConn) Read(b []byte) (int, error)  { return c.raw.read(b) }
func (c *tunnelConn) Write(b []byte) (int, error) { return c.raw.write(b) }
