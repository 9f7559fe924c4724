package e2e

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The layout tests hold the repository to the shape a newcomer can find their way in:
// a README that is a front page, documentation in pages, measurements in prose rather
// than in table cells, a fixed set of top-level directories and packages small enough to
// read. They read files only: no process, no service.

const (
	readmeMaxLines     = 300
	docsMinPages       = 5
	tableCellMaxChars  = 400
	packageMaxGoLines  = 6000
	layoutDocsDir      = "docs"
	layoutReadme       = "README.md"
	layoutContributing = "CONTRIBUTING.md"
)

// topLevelDirs are the only directories allowed at the repository's root, dot-dirs aside.
var topLevelDirs = []string{"api", "edge", "tenants", "billing", "web", "infra", "e2e", "docs", "cmd"}

func layoutRoot(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestLayoutReadmeIsAFrontPage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(layoutRoot(t), layoutReadme))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the detail into docs/", n, readmeMaxLines)
	}
}

func TestLayoutDocsPages(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(layoutRoot(t), layoutDocsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < docsMinPages {
		t.Errorf("docs/ has %d pages, want at least %d", len(pages), docsMinPages)
	}
}

// A table cell holds a fact, not a story: measurements go in prose with their command
// and date.
func TestLayoutTableCells(t *testing.T) {
	root := layoutRoot(t)
	files := []string{filepath.Join(root, layoutReadme), filepath.Join(root, layoutContributing)}
	pages, err := filepath.Glob(filepath.Join(root, layoutDocsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(files, pages...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, c := range longTableCells(string(data), tableCellMaxChars) {
			t.Errorf("%s:%d: a table cell of %d characters (at most %d): %.80s…", rel, c.line, len(c.text), tableCellMaxChars, c.text)
		}
	}
}

type tableCell struct {
	line int
	text string
}

// cellSep is a column separator: a | not escaped with a backslash.
var cellSep = regexp.MustCompile(`(^|[^\\])\|`)

// longTableCells returns the cells of markdown's pipe tables, outside fenced code, longer
// than max characters.
func longTableCells(md string, max int) []tableCell {
	var out []tableCell
	fenced := false
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "|") {
			continue
		}
		// Mark each separator, keeping the character before it, then split on the marks.
		marked := cellSep.ReplaceAllString(line, "$1\x00")
		for _, cell := range strings.Split(marked, "\x00") {
			if cell = strings.TrimSpace(cell); len([]rune(cell)) > max {
				out = append(out, tableCell{n, cell})
			}
		}
	}
	return out
}

func TestLayoutLongTableCellsFound(t *testing.T) {
	long := strings.Repeat("x", 401)
	md := "| a | b |\n|---|---|\n| `x\\|y` | " + long + " |\n```\n| " + long + " |\n```\n"
	got := longTableCells(md, 400)
	if len(got) != 1 || got[0].line != 3 {
		t.Fatalf("longTableCells = %+v, want the one cell on line 3", got)
	}
}

func TestLayoutTopLevelDirectories(t *testing.T) {
	entries, err := os.ReadDir(layoutRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if !slices.Contains(topLevelDirs, e.Name()) {
			t.Errorf("top-level directory %s/ is not one of %v: put it under one of them", e.Name(), topLevelDirs)
		}
	}
}

// A package a person can read: its non-test Go code within packageMaxGoLines lines.
func TestLayoutPackageSize(t *testing.T) {
	root := layoutRoot(t)
	lines := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		lines[rel] += bytes.Count(data, []byte("\n"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pkgs := make([]string, 0, len(lines))
	for p := range lines {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		if lines[p] > packageMaxGoLines {
			t.Errorf("package %s has %d lines of non-test Go, want at most %d: split it", p, lines[p], packageMaxGoLines)
		}
	}
}
