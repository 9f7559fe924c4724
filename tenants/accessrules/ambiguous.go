package accessrules

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Paths no rule can decide on.
//
// The edge's normal form leaves two kinds of spelling that upstreams read differently
// from one another, so a rule written for one reading misses the other:
//
//   - a segment ending in "." or whitespace ("/admin.", "/admin%20", "/admin%09",
//     "/admin%E3%80%80"): Windows and IIS, ASP.NET and any router that trims segments
//     read it as "/admin", most others as a different path;
//   - compatibility characters, those NFKC folds to others ("/ａｄｍｉｎ" in full-width
//     letters, "ﬁle", the Kelvin sign, a decomposed "é"): an upstream that applies NFKC,
//     or a best-fit code-page mapping, reads "/admin".
//
// Under access rules such a path is refused (CheckPath), not folded: folding would make
// the rules decide on a path the upstream may never see, and the upstream does receive
// exactly the normalized path. Routes without access rules pass these paths through:
// "/wiki/U.S." is a fine path to an upstream that takes it as written.

// PathError says why a path is refused under access rules; the message is what the
// client reads.
type PathError string

func (e PathError) Error() string { return string(e) }

// The refusals of CheckPath.
const (
	ErrPathSegmentEnd = PathError("a path segment ends in '.' or whitespace (such as %20 or %09), which some servers strip; this API's access rules refuse such paths")
	ErrPathCompat     = PathError("the path contains compatibility characters (such as full-width letters) that some servers fold to others; this API's access rules refuse such paths")
)

// CheckPath reports whether a normalized path is one access rules can decide on: nil,
// or the PathError saying why not. An ASCII path costs one pass over its bytes and
// never allocates.
func CheckPath(path []byte) error {
	high := false
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '/' {
			continue
		}
		next := i + 1
		if c == '%' && i+2 < len(path) && unhex(path[i+1]) >= 0 && unhex(path[i+2]) >= 0 {
			c = byte(unhex(path[i+1])<<4 | unhex(path[i+2]))
			next = i + 3
		}
		if c >= utf8.RuneSelf {
			high = true
		} else if (next == len(path) || path[next] == '/') && (c == '.' || asciiSpace(c)) {
			return ErrPathSegmentEnd
		}
		i = next - 1
	}
	if !high {
		return nil
	}
	return checkUnicode(path)
}

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// checkUnicode is CheckPath's part for a path with bytes above ASCII, raw or escaped:
// it decodes the escapes, then looks at each segment's last character and at the whole
// path's NFKC form.
func checkUnicode(path []byte) error {
	var buf [512]byte
	dec := buf[:0]
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' && i+2 < len(path) && unhex(path[i+1]) >= 0 && unhex(path[i+2]) >= 0 {
			c = byte(unhex(path[i+1])<<4 | unhex(path[i+2]))
			i += 2
		}
		dec = append(dec, c)
	}
	for seg := dec; len(seg) > 0; {
		end := len(seg)
		for j, c := range seg {
			if c == '/' {
				end = j
				break
			}
		}
		if end > 0 && spaceAtEnd(seg[:end]) {
			return ErrPathSegmentEnd
		}
		if end == len(seg) {
			break
		}
		seg = seg[end+1:]
	}
	if !norm.NFKC.IsNormal(dec) {
		return ErrPathCompat
	}
	return nil
}

// spaceAtEnd reports a segment ending in a Unicode space, a zero-width one, or a lone
// 0x85 or 0xA0 byte (NEL and no-break space to an upstream that reads Latin-1).
func spaceAtEnd(seg []byte) bool {
	r, size := utf8.DecodeLastRune(seg)
	if r == utf8.RuneError && size <= 1 {
		b := seg[len(seg)-1]
		return b == 0x85 || b == 0xA0
	}
	return unicode.IsSpace(r) || r == '\u200b' || r == '\ufeff' || r == '\u180e'
}
