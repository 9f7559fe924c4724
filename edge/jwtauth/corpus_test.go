//go:build corpus

package jwtauth_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzVerify from fuzzSeeds (after the
// fuzz keys or the seed list change). It is a tool, not a test, so it is built only with
// the corpus tag:
//
//	go test -tags corpus -run TestWriteFuzzCorpus ./edge/jwtauth/
func TestWriteFuzzCorpus(t *testing.T) {
	_, k := fuzzVerifier(t)
	dir := filepath.Join("testdata", "fuzz", "FuzzVerify")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range fuzzSeeds(t, k) {
		body := "go test fuzz v1\nstring(" + strconv.Quote(s) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
