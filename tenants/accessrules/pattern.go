package accessrules

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Path patterns.
//
// A pattern is a path in the edge's normal form (see edge/path.go) in which a whole
// segment may be a parameter or, as the last segment, a wildcard:
//
//	/orders           only /orders
//	/orders/          only /orders/ (the trailing slash is part of the path)
//	/orders/:id       /orders/1, /orders/abc — one non-empty segment; not /orders/,
//	                  /orders/1/, /orders/1/items
//	/orders/:id/items /orders/1/items
//	/orders/*         /orders/ followed by anything, including nothing and more
//	                  segments: /orders/, /orders/1, /orders/1/items/; not /orders
//	/*                every path
//	/v1/things:batch  a literal (":" starts a parameter only at a segment start)
//
// Unlike Casbin's keyMatch2 (which the tests pin for comparison) a pattern is not a
// regular expression: "." matches a dot, "*" is only a whole last segment, and ":"
// inside a segment is literal.
//
// How a path matches depends on the rule's effect:
//
//   - allow rules match strictly: byte for byte against the normalized path, so letter
//     case matters and /orders/1/ is not /orders/1. A request the tenant did not write
//     a rule for exactly is not allowed.
//   - deny rules match loosely: the path's percent-escapes are decoded, ASCII letters
//     compared without case, and a trailing slash ignored (and /admin/* also covers
//     /admin). An upstream that is case-insensitive, decodes %21, or routes /admin/ to
//     /admin cannot be reached around a deny rule that way.
//
// A path CheckPath refuses (a segment ending in "." or whitespace, compatibility
// characters such as full-width letters) is never allowed either; the edge answers it
// with 400 before asking (see ambiguous.go).
//
// A path with ";" (or "%3B") anywhere is never allowed: many servers cut a segment at
// ";" (matrix parameters: Tomcat, Jetty, Spring read /admin;x=1 as /admin), so no rule
// can know what such a path reaches. The access rules treat it as a denial, not the edge,
// so routes that do not check access still pass such paths through. Patterns may not contain it.

type segKind uint8

const (
	segLiteral segKind = iota
	segParam
	segRest
)

type segment struct {
	kind segKind
	lit  string
}

// pattern is a compiled path pattern: its segments as written (strict) and with
// literals decoded and lower-cased (loose).
type pattern struct {
	src    string
	strict []segment
	loose  []segment
	// inAllow and inDeny say whether allow or deny rules use the pattern: only the
	// match kinds some rule reads are computed.
	inAllow, inDeny bool
}

const maxPatternLen = 1024

// compilePattern parses a pattern; the error says what is wrong with it.
func compilePattern(src string) (*pattern, error) {
	switch {
	case src == "":
		return nil, fmt.Errorf("is required")
	case len(src) > maxPatternLen:
		return nil, fmt.Errorf("must be at most %d characters", maxPatternLen)
	case src[0] != '/':
		return nil, fmt.Errorf("must start with /")
	case !utf8.ValidString(src):
		return nil, fmt.Errorf("must be valid UTF-8")
	}
	parts := strings.Split(src[1:], "/")
	p := &pattern{src: src, strict: make([]segment, len(parts)), loose: make([]segment, len(parts))}
	for i, s := range parts {
		last := i == len(parts)-1
		switch {
		case s == "*":
			if !last {
				return nil, fmt.Errorf("* may only be the whole last segment (/orders/*)")
			}
			p.strict[i].kind, p.loose[i].kind = segRest, segRest
			continue
		case strings.HasPrefix(s, ":"):
			name := s[1:]
			if name == "" {
				return nil, fmt.Errorf("segment %d: a parameter needs a name (:id)", i+1)
			}
			for j := 0; j < len(name); j++ {
				if c := name[j]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
					return nil, fmt.Errorf("segment %d: parameter names are letters, digits and _ (the whole segment is the parameter): %q", i+1, s)
				}
			}
			p.strict[i].kind, p.loose[i].kind = segParam, segParam
			continue
		case s == "" && !last:
			return nil, fmt.Errorf("must not contain empty segments (//): the edge collapses them")
		case s == "." || s == "..":
			return nil, fmt.Errorf("must not contain . or .. segments: the edge resolves them")
		}
		if err := checkLiteral(s); err != nil {
			return nil, fmt.Errorf("segment %d: %v", i+1, err)
		}
		switch CheckPath([]byte("/" + s)) {
		case ErrPathSegmentEnd:
			return nil, fmt.Errorf("segment %d ends in '.' or whitespace: such paths are refused under access rules, so the pattern could never match", i+1)
		case ErrPathCompat:
			return nil, fmt.Errorf("segment %d has compatibility characters (such as full-width letters): such paths are refused under access rules, so the pattern could never match; write its NFKC form", i+1)
		}
		p.strict[i].lit = s
		p.loose[i].lit = string(looseBytes(nil, []byte(s)))
	}
	return p, nil
}

// checkLiteral accepts what the edge's normal form can contain in a segment: RFC 3986
// pchar other than ";", raw UTF-8, and percent-escapes of reserved bytes in upper case.
func checkLiteral(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c >= 0x80:
		case strings.IndexByte("-._~!$&'()+,=:@", c) >= 0:
		case c == ';':
			return fmt.Errorf("contains ';': paths with matrix parameters are never allowed, so a pattern with one could never match")
		case c == '*':
			return fmt.Errorf("* may only be the whole last segment (/orders/*)")
		case c == '%':
			if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
				return fmt.Errorf("has a malformed percent-escape")
			}
			if isLowerHex(s[i+1]) || isLowerHex(s[i+2]) {
				return fmt.Errorf("write percent-escapes in upper case (%s), as the edge normalizes them", strings.ToUpper(s[i:i+3]))
			}
			d := byte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			switch {
			case d == '/' || d == '\\' || d == 0:
				return fmt.Errorf("contains %s, which the edge refuses in paths", s[i:i+3])
			case d == ';':
				return fmt.Errorf("contains %%3B (;): paths with matrix parameters are never allowed")
			case isUnreserved(d):
				return fmt.Errorf("write %q instead of %s: the edge decodes it", rune(d), s[i:i+3])
			}
			i += 2
		default:
			return fmt.Errorf("contains %q, which a normalized path cannot contain", rune(c))
		}
	}
	return nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func isLowerHex(c byte) bool { return c >= 'a' && c <= 'f' }

func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// looseBytes appends b with percent-escapes decoded and ASCII letters lower-cased.
func looseBytes(dst, b []byte) []byte {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '%' && i+2 < len(b) && unhex(b[i+1]) >= 0 && unhex(b[i+2]) >= 0 {
			c = byte(unhex(b[i+1])<<4 | unhex(b[i+2]))
			i += 2
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// match reports whether path (starting with "/") matches segs.
func match(segs []segment, path []byte) bool {
	rest := path[1:]
	for i, s := range segs {
		if s.kind == segRest {
			return true
		}
		var seg []byte
		end := -1
		for j, c := range rest {
			if c == '/' {
				end = j
				break
			}
		}
		if end < 0 {
			seg = rest
		} else {
			seg = rest[:end]
		}
		switch s.kind {
		case segParam:
			if len(seg) == 0 {
				return false
			}
		default:
			if string(seg) != s.lit {
				return false
			}
		}
		if end < 0 {
			// The path ends here; the pattern must too, unless it continues with a
			// wildcard after this segment (/orders/* does not match /orders).
			return i == len(segs)-1
		}
		rest = rest[end+1:]
	}
	return false // the path has segments left over
}

// matchStrict is an allow rule's match.
func (p *pattern) matchStrict(path []byte) bool { return match(p.strict, path) }

// matchLoose is a deny rule's match, given the path in loose form (looseBytes) and the
// same with its trailing slash toggled ("/a/" ↔ "/a").
func (p *pattern) matchLoose(loose, toggled []byte) bool {
	return match(p.loose, loose) || match(p.loose, toggled)
}

// toggleSlash returns path without its trailing "/" or with one added ("/" stays "/").
func toggleSlash(dst, path []byte) []byte {
	dst = append(dst[:0], path...)
	switch {
	case len(path) == 1:
	case path[len(path)-1] == '/':
		dst = dst[:len(dst)-1]
	default:
		dst = append(dst, '/')
	}
	return dst
}

// normalPath reports whether path is in the edge's normal form, free of ";" and passes
// CheckPath: the only paths access rules decide on. Anything else is denied, so a caller
// that forgot to normalize or check fails closed.
func normalPath(path []byte) bool {
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	segStart := 1
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '/':
			if i > 0 {
				if i == segStart { // empty segment: "//"
					return false
				}
				if dotSegment(path[segStart:i]) {
					return false
				}
			}
			segStart = i + 1
		case c == ';':
			return false
		case c == '%':
			if i+2 >= len(path) || unhex(path[i+1]) < 0 || unhex(path[i+2]) < 0 ||
				isLowerHex(path[i+1]) || isLowerHex(path[i+2]) {
				return false
			}
			d := byte(unhex(path[i+1])<<4 | unhex(path[i+2]))
			if d == '/' || d == '\\' || d == 0 || d == ';' || isUnreserved(d) {
				return false
			}
			i += 2
		case c <= ' ' || c == 0x7f || c == '\\' || c == '#' || c == '?':
			return false
		}
	}
	return !dotSegment(path[segStart:]) && CheckPath(path) == nil
}

func dotSegment(s []byte) bool {
	return len(s) == 1 && s[0] == '.' || len(s) == 2 && s[0] == '.' && s[1] == '.'
}
