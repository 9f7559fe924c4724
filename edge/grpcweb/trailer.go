package grpcweb

import (
	"bytes"
	"strconv"
	"strings"
)

// ParseTrailer reads a trailer frame's block ("name: value\r\n" lines) into its status,
// message (percent-decoded) and other fields, names lower-cased. A block without a
// valid grpc-status is UNKNOWN (2), as the protocol has a client treat it. Lines
// without a colon are skipped.
func ParseTrailer(block []byte) Trailer {
	t := Trailer{Status: 2}
	for len(block) > 0 {
		line := block
		if i := bytes.IndexByte(block, '\n'); i >= 0 {
			line, block = block[:i], block[i+1:]
		} else {
			block = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			continue
		}
		name := string(bytes.ToLower(bytes.TrimSpace(line[:i])))
		value := string(bytes.TrimSpace(line[i+1:]))
		switch name {
		case "grpc-status":
			if n, err := strconv.Atoi(value); err == nil && n >= 0 {
				t.Status = n
			}
		case "grpc-message":
			t.Message = percentDecode(value)
		default:
			t.Metadata = append(t.Metadata, Field{Name: name, Value: value})
		}
	}
	return t
}

// percentDecode undoes AppendPercentEncoded; a '%' not followed by two hex digits is
// kept as it is, as gRPC's decoders do.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			h, l := unhex(s[i+1]), unhex(s[i+2])
			if h >= 0 && l >= 0 {
				b = append(b, byte(h<<4|l))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
