package web

import (
	"os/exec"
	"testing"
)

// shellQuote's words read back exactly in the shells a reader pastes into: each case is
// printed through sh (dash) and bash and must come out as it went in.
func TestShellQuote(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "''"},
		{"plain", "plain"},
		{"http://acme.edge.test:8000/hello", "http://acme.edge.test:8000/hello"},
		{"tg_AbC-123.x@y%z+w,v", "tg_AbC-123.x@y%z+w,v"},
		{"X-API-Key: tg_abc", "'X-API-Key: tg_abc'"},
		{"it's", `'it'\''s'`},
		{"'", `''\'''`},
		{"''", `''\'''\'''`},
		{`back\slash`, `'back'\\'slash'`},
		{`\'`, `''\\''\'''`},
		{"$HOME", "'$HOME'"},
		{"${IFS}", "'${IFS}'"},
		{"$(id)", "'$(id)'"},
		{"`id`", "'`id`'"},
		{"a\nb", "'a\nb'"},
		{"tab\there", "'tab\there'"},
		{"a;b&c|d", "'a;b&c|d'"},
		{"!bang", "'!bang'"},
		{"*?[x]", "'*?[x]'"},
		{"~root", "'~root'"},
		{"=ls", "'=ls'"},
		{`"dq"`, `'"dq"'`},
		{"ünïcode", "'ünïcode'"},
		{"/a;mkdir$IFS'pwnd';$(mkdir$IFS'pwnd')", `'/a;mkdir$IFS'\''pwnd'\'';$(mkdir$IFS'\''pwnd'\'')'`},
	}
	for _, tc := range cases {
		got := shellQuote(tc.in)
		if got != tc.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tc.in, got, tc.want)
		}
		for _, sh := range []string{"sh", "bash"} {
			out, err := exec.Command(sh, "-c", "printf '%s' "+got).Output()
			if err != nil {
				t.Fatalf("%s: %v", sh, err)
			}
			if string(out) != tc.in {
				t.Errorf("%s reads %s back as %q, want %q", sh, got, out, tc.in)
			}
		}
	}
	if got := shellQuote("X-API-Key: ", "tg_x"); got != "'X-API-Key: tg_x'" {
		t.Errorf("the parts are one word: %s", got)
	}
}
