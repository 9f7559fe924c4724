package routing

// Request path normalization.
//
// The edge normalizes the request path once, matches routes against the normal form and
// sends exactly that form upstream (minus the prefix when a route strips it), so what was
// matched is what the upstream sees: an encoded or dotted path can never reach an upstream
// path no route allowed. The rules, in order of the bytes:
//
//   - the path must start with "/" (origin form; absolute form is reduced to it first);
//   - runs of "/" collapse to one ("//a///b" → "/a/b");
//   - a percent-encoded unreserved character (ALPHA, DIGIT, "-", ".", "_", "~") is decoded
//     ("%7Euser" → "~user", "%2e%2E" → ".."); any other escape stays encoded with upper-case
//     hex ("%3a" → "%3A"), so "/a%3Fb" never turns into a query;
//   - "%2F" (encoded "/"), "%5C" (encoded "\"), "%00" and a malformed escape are refused
//     with 400: an upstream could decode them into segment boundaries the router never saw;
//   - control bytes, space, DEL, "\" and "#" are refused with 400; other bytes (including
//     raw UTF-8) pass through unchanged;
//   - "." segments are removed and ".." segments remove the segment before them (RFC 3986
//     remove_dot_segments, after decoding); a ".." that would climb above "/" is refused
//     with 400 rather than clamped, as nginx does;
//   - a trailing "/" is kept ("/a/" and "/a" are different paths to most upstreams).
//
// The query string is not part of matching and is passed through byte for byte.

// PathError says why a request path was refused; the message is what the client reads.
type PathError string

func (e PathError) Error() string { return string(e) }

// The refusals of NormalizePath.
const (
	ErrPathNotOrigin    = PathError("the request target must be a path starting with /")
	ErrPathEncodedSlash = PathError("the path contains an encoded / or \\ (%2F, %5C), which the edge refuses")
	ErrPathBadEscape    = PathError("the path contains a malformed or NUL percent-escape")
	ErrPathBadByte      = PathError("the path contains a control character, space, \\ or #")
	ErrPathAboveRoot    = PathError("the path climbs above / with ..")
)

// unreserved marks the bytes RFC 3986 calls unreserved; their escapes are decoded.
var unreserved = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['-'], t['.'], t['_'], t['~'] = true, true, true, true
	return t
}()

// careful marks the bytes the segment loop must look at: "/", "%" and refused ones.
var careful = func() (t [256]bool) {
	t = badPathByte
	t['/'], t['%'] = true, true
	return t
}()

// badPathByte marks the raw bytes refused anywhere in a path.
var badPathByte = func() (t [256]bool) {
	for c := 0; c <= ' '; c++ {
		t[c] = true
	}
	t[0x7f], t['\\'], t['#'] = true, true, true
	return t
}()

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

const upperHex = "0123456789ABCDEF"

// NormalizePath appends the normal form of raw (a path without query) to dst[:0] and
// returns it. It does not allocate when dst has room for raw.
func NormalizePath(dst, raw []byte) ([]byte, error) {
	if len(raw) == 0 || raw[0] != '/' {
		return dst[:0], ErrPathNotOrigin
	}
	dst = append(dst[:0], '/')
	i := 1
	for i < len(raw) && raw[i] == '/' {
		i++
	}
	for i < len(raw) {
		segStart := len(dst)
		// Fast path: a segment of plain bytes is copied in one go.
		j := i
		for j < len(raw) && !careful[raw[j]] {
			j++
		}
		dst = append(dst, raw[i:j]...)
		i = j
		for i < len(raw) && raw[i] != '/' {
			c := raw[i]
			if c == '%' {
				if i+2 >= len(raw) {
					return dst, ErrPathBadEscape
				}
				hi, ok1 := unhex(raw[i+1])
				lo, ok2 := unhex(raw[i+2])
				if !ok1 || !ok2 {
					return dst, ErrPathBadEscape
				}
				d := hi<<4 | lo
				switch {
				case d == '/' || d == '\\':
					return dst, ErrPathEncodedSlash
				case d == 0:
					return dst, ErrPathBadEscape
				case unreserved[d]:
					dst = append(dst, d)
				default:
					dst = append(dst, '%', upperHex[hi], upperHex[lo])
				}
				i += 3
				continue
			}
			if badPathByte[c] {
				return dst, ErrPathBadByte
			}
			dst = append(dst, c)
			i++
		}
		seg := dst[segStart:]
		atEnd := i >= len(raw)
		switch {
		case len(seg) == 1 && seg[0] == '.':
			dst = dst[:segStart]
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			if segStart == 1 {
				return dst, ErrPathAboveRoot
			}
			// dst[:segStart] ends with the "/" after the previous segment; drop that
			// segment, keeping the "/" before it.
			j := segStart - 2
			for dst[j] != '/' {
				j--
			}
			dst = dst[:j+1]
		default:
			if !atEnd {
				dst = append(dst, '/')
			}
		}
		for i < len(raw) && raw[i] == '/' {
			i++
		}
	}
	return dst, nil
}

// SplitTarget takes a request target apart: the path (origin form), the query (without
// "?", nil when absent) and, for an absolute-form target ("http://host/p"), its authority,
// which then names the host instead of the Host header (RFC 9112 3.2.2).
func SplitTarget(target []byte) (path, query, authority []byte) {
	if len(target) > 0 && target[0] != '/' {
		if n := schemeLen(target); n > 0 {
			rest := target[n:]
			end := len(rest)
			for k, c := range rest {
				if c == '/' || c == '?' {
					end = k
					break
				}
			}
			authority, target = rest[:end], rest[end:]
			if len(target) == 0 || target[0] == '?' {
				// "http://host" and "http://host?q" mean the path "/".
				path = slashPath
				if len(target) > 0 {
					query = target[1:]
				}
				return path, query, authority
			}
		}
	}
	for k, c := range target {
		if c == '?' {
			return target[:k], target[k+1:], authority
		}
	}
	return target, nil, authority
}

var slashPath = []byte("/")

// schemeLen is the length of a leading "http://" or "https://" (any case), or 0.
func schemeLen(b []byte) int {
	if len(b) >= 7 && ASCIIEqualFold(b[:7], "http://") {
		return 7
	}
	if len(b) >= 8 && ASCIIEqualFold(b[:8], "https://") {
		return 8
	}
	return 0
}

// ASCIIEqualFold reports whether b equals s, ignoring ASCII case. s must be lower case.
// The edge matches header names with it too: unlike bytes.EqualFold it skips Unicode.
func ASCIIEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
