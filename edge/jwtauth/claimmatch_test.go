package jwtauth_test

import (
	"encoding/base64"
	"testing"

	"tollgate/edge/jwtauth"
)

// token is a compact JWS shape around payload; MatchToken reads a token that has
// already been verified, so the signature is not looked at.
func token(payload string) []byte {
	return []byte("eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig")
}

func TestClaimMatch(t *testing.T) {
	for _, c := range []struct {
		name    string
		values  []string
		payload string
		want    bool
	}{
		{"beta", nil, `{"beta":true}`, true},
		{"beta", nil, `{"beta":null}`, false},
		{"beta", nil, `{}`, false},
		{"tier", []string{"gold"}, `{"tier":"gold"}`, true},
		{"tier", []string{"gold"}, `{"tier":"silver"}`, false},
		{"tier", []string{"42"}, `{"tier":42}`, true},
		{"tier", []string{"true"}, `{"tier":true}`, true},
		{"groups", []string{"b"}, `{"groups":["a","b"]}`, true},
		{"groups", []string{"c"}, `{"groups":["a","b"]}`, false},
		{"org.plan", []string{"pro"}, `{"org":{"plan":"pro"}}`, true},
		{"org.plan", []string{"pro"}, `{"org.plan":"free","org":{"plan":"pro"}}`, false}, // the exact name first
		{"org.plan", []string{"pro"}, `{"org":"pro"}`, false},
		{"tier", []string{"gold"}, `{"tier":{"x":"gold"}}`, false},
	} {
		m := jwtauth.NewClaimMatch(c.name, c.values)
		got, _ := m.MatchToken(token(c.payload), nil)
		if got != c.want {
			t.Errorf("%s %v in %s: %v, want %v", c.name, c.values, c.payload, got, c.want)
		}
	}
	m := jwtauth.NewClaimMatch("beta", nil)
	for _, tok := range []string{"", "abc", "a.!!!.c", "a..c"} {
		if got, _ := m.MatchToken([]byte(tok), nil); got {
			t.Errorf("MatchToken(%q) matched", tok)
		}
	}
}

// TestClaimMatchAllocs: with its buffer kept, a match allocates nothing.
func TestClaimMatchAllocs(t *testing.T) {
	m := jwtauth.NewClaimMatch("tier", []string{"gold"})
	tok := token(`{"sub":"u1","tier":"gold","exp":4102444800}`)
	_, buf := m.MatchToken(tok, nil)
	if n := testing.AllocsPerRun(100, func() {
		var ok bool
		ok, buf = m.MatchToken(tok, buf)
		if !ok {
			t.Fatal("no match")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per match", n)
	}
}
