package grpchealth

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ServeLean is Serve's health service without grpc-go: HTTP/2 framed by x/net's Framer, one
// goroutine per connection, every answer to a read batch sent in one write. It answers
// Check as grpc-go's health server does (SERVING for the overall status, NOT_FOUND for a
// named service, UNIMPLEMENTED for any other method), and costs the load side a fraction
// of grpc-go's CPU per call: with grpc-go the load CPU the bench shares between h2load and
// the upstream saturated before nginx's did, so no nginx round could be used.
func ServeLean(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			defer c.Close()
			// serveLean returns when the connection ends; io.EOF is a client's goodbye.
			if err := serveLean(c); err != io.EOF {
				fmt.Fprintln(os.Stderr, "grpc upstream:", err)
			}
		}()
	}
}

// leanConn is one client connection of ServeLean's.
type leanConn struct {
	br   *bufio.Reader
	bw   *bufio.Writer
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	// The calls whose request has not ended: their path's verdict and the message read.
	calls map[uint32]*leanCall
	// The client's windows for what this side sends, and the answers waiting for them.
	connWin, initWin int64
	waiting          []*leanCall
	unacked          uint32 // DATA bytes read and not yet given back to the connection's window
}

type leanCall struct {
	id     uint32
	check  bool   // the path is Health/Check
	msg    []byte // the request message as far as it came (capped)
	win    int64  // the stream's window, while it waits
	status string // the answer's grpc-status, once the request ended
}

const leanPreface = http2.ClientPreface

func serveLean(c net.Conn) error {
	sc := &leanConn{
		br:      bufio.NewReaderSize(c, 32<<10),
		bw:      bufio.NewWriterSize(c, 32<<10),
		calls:   map[uint32]*leanCall{},
		connWin: 65535, initWin: 65535,
	}
	preface := make([]byte, len(leanPreface))
	if _, err := io.ReadFull(sc.br, preface); err != nil {
		return err
	}
	if string(preface) != leanPreface {
		return fmt.Errorf("not an HTTP/2 client preface")
	}
	sc.fr = http2.NewFramer(sc.bw, sc.br)
	sc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	sc.enc = hpack.NewEncoder(&sc.hbuf)
	if err := sc.fr.WriteSettings(); err != nil {
		return err
	}
	for {
		f, err := sc.fr.ReadFrame()
		if err != nil {
			return err
		}
		if err := sc.frame(f); err != nil {
			return err
		}
		if sc.br.Buffered() == 0 {
			if err := sc.bw.Flush(); err != nil {
				return err
			}
		}
	}
}

func (sc *leanConn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		id := f.StreamID
		if _, ok := sc.calls[id]; ok {
			return nil // trailers of a request: nothing this service reads
		}
		call := &leanCall{id: id, check: f.PseudoValue("path") == CheckPath}
		sc.calls[id] = call
		if f.StreamEnded() {
			return sc.answer(call)
		}
	case *http2.DataFrame:
		if n := f.Length; n > 0 {
			sc.unacked += n
			if sc.unacked >= 16<<10 {
				if err := sc.fr.WriteWindowUpdate(0, sc.unacked); err != nil {
					return err
				}
				sc.unacked = 0
			}
		}
		call := sc.calls[f.StreamID]
		if call == nil {
			return nil
		}
		if len(call.msg) < 1024 {
			call.msg = append(call.msg, f.Data()...)
		}
		if f.StreamEnded() {
			return sc.answer(call)
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if v, ok := f.Value(http2.SettingHeaderTableSize); ok {
			sc.enc.SetMaxDynamicTableSizeLimit(v) // nginx's grpc_pass keeps no table: 0
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			d := int64(v) - sc.initWin
			sc.initWin = int64(v)
			for _, w := range sc.waiting {
				w.win += d
			}
		}
		if err := sc.fr.WriteSettingsAck(); err != nil {
			return err
		}
		return sc.drain()
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			sc.connWin += int64(f.Increment)
		} else {
			for _, w := range sc.waiting {
				if w.id == f.StreamID {
					w.win += int64(f.Increment)
				}
			}
		}
		return sc.drain()
	case *http2.PingFrame:
		if !f.IsAck() {
			return sc.fr.WritePing(true, f.Data)
		}
	case *http2.RSTStreamFrame:
		delete(sc.calls, f.StreamID)
		sc.waiting = deleteCall(sc.waiting, f.StreamID)
	case *http2.GoAwayFrame:
		return io.EOF
	}
	return nil
}

// answer decides the ended request's status and sends its answer, or queues it until
// the client's windows hold its message.
func (sc *leanConn) answer(call *leanCall) error {
	delete(sc.calls, call.id)
	switch {
	case !call.check:
		call.status = "12" // UNIMPLEMENTED
		return sc.send(call)
	case len(call.msg) < 5 || call.msg[0] != 0:
		call.status = "13" // INTERNAL: not one uncompressed message
		return sc.send(call)
	case call.msg[1]|call.msg[2]|call.msg[3]|call.msg[4] != 0:
		call.status = "5" // NOT_FOUND: only the overall status ("") is served
		return sc.send(call)
	}
	call.status = "0"
	call.win = sc.initWin
	sc.waiting = append(sc.waiting, call)
	return sc.drain()
}

// drain sends the queued SERVING answers the client's windows now hold, in order.
func (sc *leanConn) drain() error {
	n := int64(len(grpcServing))
	for len(sc.waiting) > 0 && sc.connWin >= n && sc.waiting[0].win >= n {
		call := sc.waiting[0]
		sc.waiting = sc.waiting[1:]
		sc.connWin -= n
		if err := sc.send(call); err != nil {
			return err
		}
	}
	return nil
}

// grpcServing is a HealthCheckResponse{status: SERVING} in gRPC's framing.
var grpcServing = []byte{0, 0, 0, 0, 2, 8, 1}

// send writes call's answer: head, SERVING and trailers, or a trailers-only error.
func (sc *leanConn) send(call *leanCall) error {
	sc.hbuf.Reset()
	sc.field(":status", "200")
	sc.field("content-type", "application/grpc")
	if call.status != "0" {
		sc.field("grpc-status", call.status)
		return sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: call.id, BlockFragment: sc.hbuf.Bytes(), EndHeaders: true, EndStream: true})
	}
	if err := sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: call.id, BlockFragment: sc.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	if err := sc.fr.WriteData(call.id, false, grpcServing); err != nil {
		return err
	}
	sc.hbuf.Reset()
	sc.field("grpc-status", "0")
	return sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: call.id, BlockFragment: sc.hbuf.Bytes(), EndHeaders: true, EndStream: true})
}

func (sc *leanConn) field(name, value string) {
	_ = sc.enc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

func deleteCall(calls []*leanCall, id uint32) []*leanCall {
	for i, c := range calls {
		if c.id == id {
			return append(calls[:i], calls[i+1:]...)
		}
	}
	return calls
}
