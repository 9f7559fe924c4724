package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// DocsText is the README and every page of docs/ at the module's root, joined: the
// documentation a statement a test pins may live in.
func DocsText(tb testing.TB) string {
	tb.Helper()
	root, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			tb.Fatal("testenv: no go.mod above the test's directory")
		}
		root = parent
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for _, p := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}

// DocNumbers returns the numbers pattern captures in the README and docs/ (whitespace
// collapsed, so a statement may wrap; thousands separators dropped), failing unless the
// documentation states it exactly once.
func DocNumbers(tb testing.TB, pattern string) []int {
	tb.Helper()
	text := strings.Join(strings.Fields(DocsText(tb)), " ")
	m := regexp.MustCompile(pattern).FindAllStringSubmatch(text, -1)
	if len(m) != 1 {
		tb.Fatalf("the documentation states %q %d times, want once", pattern, len(m))
	}
	var out []int
	for _, s := range m[0][1:] {
		n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
		if err != nil {
			tb.Fatalf("%q: %v", pattern, err)
		}
		out = append(out, n)
	}
	return out
}
