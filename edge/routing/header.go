package routing

import "bytes"

// Raw request header blocks, read by the edge's steps and its response cache alike.

// EdgeHeaderPrefix starts the names of the headers the edge itself sets (lower case).
const EdgeHeaderPrefix = "x-tollgate-"

// NextHeader takes the first "Key: value" line off a raw header block.
func NextHeader(raw []byte) (key, value, rest []byte) {
	line := raw
	if i := bytes.IndexByte(raw, '\n'); i >= 0 {
		line, rest = raw[:i], raw[i+1:]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return nil, nil, rest
	}
	key, value = line[:i], line[i+1:]
	for len(value) > 0 && (value[0] == ' ' || value[0] == '\t') {
		value = value[1:]
	}
	for len(value) > 0 && (value[len(value)-1] == ' ' || value[len(value)-1] == '\t') {
		value = value[:len(value)-1]
	}
	return key, value, rest
}
