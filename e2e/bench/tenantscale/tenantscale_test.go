package tenantscale

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWindowRates(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		name        string
		done        []time.Duration
		k           int
		first, last float64
	}{
		{"steady", ms(100, 200, 300, 400, 500, 600), 2, 10, 10},
		// The last window runs from the answer before it: 2 calls in 1 s.
		{"slowing", ms(100, 200, 300, 400, 1000, 1400), 2, 10, 2},
		{"fewer than a window", ms(250, 500), 5, 4, 4},
		{"exactly a window", ms(250, 500), 2, 4, 4},
		{"none", nil, 2, 0, 0},
		{"all at the start", ms(0, 0, 5), 2, 0, 400},
	} {
		first, last := windowRates(c.done, c.k)
		if first != c.first || last != c.last {
			t.Errorf("%s: windowRates = %v, %v; want %v, %v", c.name, first, last, c.first, c.last)
		}
	}
}

func TestNum(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567", -4200: "-4,200"} {
		if got := num(n); got != want {
			t.Errorf("num(%d) = %q, want %q", n, got, want)
		}
	}
	if got := rate(4999.6); got != "5,000" {
		t.Errorf("rate(4999.6) = %q", got)
	}
}

func TestSpread(t *testing.T) {
	if got := spread(10, 20, 5); !slices.Equal(got, []int{10, 12, 14, 16, 18}) {
		t.Errorf("spread(10, 20, 5) = %v", got)
	}
	if got := spread(3, 6, 3); !slices.Equal(got, []int{3, 4, 5}) {
		t.Errorf("spread(3, 6, 3) = %v", got)
	}
}

func TestParseStatus(t *testing.T) {
	text := "Name:\ttollgate-edge\nVmPeak:\t 1300000 kB\nVmRSS:\t   52340 kB\nRssAnon:\t   30100 kB\nRssFile:\t   22200 kB\nRssShmem:\t      40 kB\nThreads:\t8\n"
	if got := parseStatus(text); got != (Mem{RSS: 52340, Anon: 30100, File: 22200}) {
		t.Errorf("parseStatus = %+v", got)
	}
	if got := parseStatus("Name:\tx\nVmRSS:\n"); got != (Mem{}) {
		t.Errorf("no figures: %+v", got)
	}
}

func TestSettings(t *testing.T) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var def Settings
	def.Register(fs)
	if err := def.Check(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if one, ten := def.shares(); one != 10 || ten != 100 {
		t.Errorf("shares of 1000 tenants: %d, %d", one, ten)
	}
	small := Settings{Tenants: 10}
	if one, ten := small.shares(); one != 1 || ten != 2 {
		t.Errorf("shares of 10 tenants: %d, %d; want 1 and 2", one, ten)
	}
	if err := fs.Parse([]string{"-scale-edge-env", ""}); err != nil || def.Check() != nil || def.edgeEnv() != nil {
		t.Errorf("an empty -scale-edge-env: %v, %v", err, def.edgeEnv())
	}
	for name, c := range map[string]struct {
		edit func(*Settings)
		want string
	}{
		"few tenants":        {func(s *Settings) { s.Tenants = 9 }, "-scale-tenants"},
		"too many routes":    {func(s *Settings) { s.Routes = 50001 }, "-scale-routes"},
		"no posts":           {func(s *Settings) { s.Posts = 0 }, "-scale-posts"},
		"no clients":         {func(s *Settings) { s.Clients = 0 }, "-scale-clients"},
		"an env without '='": {func(s *Settings) { s.EdgeEnv = "A=1, B" }, `"B"`},
	} {
		s := def
		c.edit(&s)
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
}
