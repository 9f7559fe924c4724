package shellword_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tollgate/web/shellword"
	"tollgate/web/shellword/shelltest"
)

// hostile are values a tenant could put in a route path or an OpenAPI document. Several
// try to create a file named pwned in the working directory.
var hostile = []string{
	"", "plain", "http://acme.edge.test:8000/hello", "tg_AbC-123.x@y%z+w,v",
	"X-API-Key: tg_abc", "it's", "'", "''", "'''", `\`, `\\`, `back\slash`, `\'`, `'\`, `\\'`,
	`'\''`, `'"'"'`, `a\'b`, `'\'';touch pwned;'`, `\';touch pwned;\'`, `\\';touch pwned;'`,
	"$HOME", "${IFS}", "$(touch pwned)", "(touch pwned)", "$(touch${IFS}pwned)", "`touch pwned`",
	"a\nb", "a\ntouch pwned\n", "'\ntouch pwned\n'", "tab\there", "cr\rhere", "a;touch pwned", "a&&touch pwned",
	"a|touch pwned", "a>pwned", "a<b", "!bang", "a!!b", "!!", "!-1", "!$", "^first^touch pwned^",
	"*?[x]", "~root", "=ls", "{a,b}", `"dq"`, `"$(touch pwned)"`, "ünïcode ✓", "%self", "%1",
	"#comment", "a #b", "--help", "-", "\x1b[31mred", "\x7f", "nul\x00byte", "a\x1b#touch pwned\n",
	"\x1b[201~\ntouch pwned\n",
	"/a;mkdir$IFS'pwnd';$(mkdir$IFS'pwnd')", "/orders/{id}/$(touch pwned)/'x'",
}

// TestQuoteShells pastes a command with each hostile value into each shell, run both as a
// script (-c) and, for bash and zsh, typed into an interactive shell after another line,
// where ! history expansion is on. The command must receive the value byte for byte
// (control characters but newline as U+FFFD) and nothing else may run.
func TestQuoteShells(t *testing.T) {
	shelltest.Ensure(t)
	for _, sh := range shelltest.Shells {
		t.Run(sh, func(t *testing.T) {
			for _, in := range hostile {
				want := readBack(in)
				line := "printf %s " + shellword.Quote(in) + ` >"$OUT"`
				if got, err := run(t, sh, line, false); err != nil || got != want {
					t.Errorf("%s -c %q: got %q (%v), want %q", sh, line, got, err, want)
				}
				if sh == "bash" || sh == "zsh" {
					if got, err := run(t, sh, line, true); err != nil || got != want {
						t.Errorf("interactive %s, typed %q: got %q (%v), want %q", sh, line, got, err, want)
					}
				}
			}
		})
	}
}

// readBack is what a command receives for in: in, with each control character but
// newline written as U+FFFD.
func readBack(in string) string {
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		if c := in[i]; c < 0x20 && c != '\n' || c == 0x7f {
			b.WriteString("\uFFFD")
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// run runs line in sh in an empty directory and returns what it wrote to $OUT. It fails t
// when anything appeared in the directory: the value ran as code.
func run(t *testing.T, sh, line string, interactive bool) (string, error) {
	t.Helper()
	dir, outDir := t.TempDir(), t.TempDir()
	out := filepath.Join(outDir, "out")
	var cmd *exec.Cmd
	switch {
	case !interactive && sh == "fish":
		cmd = exec.Command(sh, "--no-config", "-c", line)
	case !interactive:
		cmd = exec.Command(sh, "-c", line)
	case sh == "bash":
		cmd = exec.Command(sh, "--norc", "--noprofile", "-i")
	default:
		cmd = exec.Command(sh, "-f", "-i")
	}
	if interactive {
		// A line before it gives !! and !$ something to expand to.
		cmd.Stdin = strings.NewReader("echo earlier line\n" + line + "\nexit\n")
	}
	cmd.Dir = dir
	cmd.Env = []string{"OUT=" + out, "HOME=" + outDir, "PATH=" + os.Getenv("PATH"), "TERM=dumb"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %s", err, stderr.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("%s ran part of %q as code: %s appeared", sh, line, entries[0].Name())
	}
	got, err := os.ReadFile(out)
	return string(got), err
}

// The words themselves: safe words bare, everything else quoted without ' or \ inside
// single quotes and without two adjacent single quotes.
func TestQuoteWords(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "''"},
		{"plain", "plain"},
		{"http://acme.edge.test:8000/hello", "http://acme.edge.test:8000/hello"},
		{"X-API-Key: tg_abc", "'X-API-Key: tg_abc'"},
		{"it's", `'it'"'"'s'`},
		{"'", `"'"`},
		{`back\slash`, `'back'\\'slash'`},
		{`\'`, `\\"'"`},
		{"$(id)", "'$(id)'"},
		{"a!b", "'a!b'"},
		{"50%", "'50%'"},
		{"nul\x00", "'nul\uFFFD'"},
		{"esc\x1b#", "'esc\uFFFD#'"},
	} {
		if got := shellword.Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := shellword.Quote("X-API-Key: ", "tg_x"); got != "'X-API-Key: tg_x'" {
		t.Errorf("the parts are one word: %s", got)
	}
	for _, in := range hostile {
		if q := shellword.Quote(in); strings.Contains(q, "''") && q != "''" {
			t.Errorf("Quote(%q) = %s has two adjacent single quotes", in, q)
		}
	}
}

// FuzzQuote: whatever the bytes, sh (dash) and bash hand them back as readBack says and
// nothing else runs.
func FuzzQuote(f *testing.F) {
	shelltest.Ensure(f)
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		want := readBack(in)
		line := "printf %s " + shellword.Quote(in) + ` >"$OUT"`
		for _, sh := range []string{"sh", "bash"} {
			if got, err := run(t, sh, line, false); err != nil || got != want {
				t.Fatalf("%s -c %q: got %q (%v), want %q", sh, line, got, err, want)
			}
		}
	})
}
