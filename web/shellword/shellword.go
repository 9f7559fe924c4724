// Package shellword writes values into the command lines the console and the developer
// portal show for copying. A tenant chooses route paths and OpenAPI documents, and someone
// else pastes the line into whatever shell they use, so every interpolated value must reach
// the command as one argument, byte for byte, and never run as shell code. Quote is the
// only way those pages quote: two quoting rules drift apart, and a probe finds the weaker.
//
// It must not import anything of Tollgate's, so that both the console and the portal can.
package shellword

import "strings"

// Quote joins parts into one word that sh (dash), bash, zsh and fish all read back as the
// joined bytes, running nothing.
//
// A word of only letters, digits and _ . / : @ + , - is written as it is: none of the four
// shells gives those a meaning (% is not among them: fish 3.6 still expands %self to its
// own process id). Anything else goes
// in single quotes, where POSIX shells take every byte literally but fish reads \' and \\
// as escapes. So neither ' nor \ is ever written inside them: a ' is written "'" (the same
// to all four, and nothing in those double quotes expands) and a \ is written \\ (an
// escaped backslash to all four), each between quoted runs. No other byte is ever in double
// quotes, so bash's and zsh's interactive history expansion (!) never applies, and two
// single quotes are never adjacent, which zsh's RC_QUOTES option would read as a quote.
//
// A control character other than newline (NUL, tab, CR, ESC, DEL...) is written as U+FFFD
// instead: no quoting carries one through a paste, where the shell's line editor reads it
// as a key (tab completes, CR ends the line, ESC # comments the line out and runs it, so
// whatever follows would run as a new command), and a NUL cannot be in an argument at all.
func Quote(parts ...string) string {
	s := strings.Join(parts, "")
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, unsafe) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\'' || c == '\\' {
			if quoted {
				b.WriteByte('\'')
				quoted = false
			}
			if c == '\'' {
				b.WriteString(`"'"`)
			} else {
				b.WriteString(`\\`)
			}
			continue
		}
		if !quoted {
			b.WriteByte('\'')
			quoted = true
		}
		if control(c) {
			b.WriteString("\uFFFD")
			continue
		}
		b.WriteByte(c)
	}
	if quoted {
		b.WriteByte('\'')
	}
	return b.String()
}

// unsafe reports whether r means something to one of the four shells.
func unsafe(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./:@+,-", r))
}

// control reports whether Quote writes c as U+FFFD.
func control(c byte) bool { return c < 0x20 && c != '\n' || c == 0x7f }
