package edgecmd

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"tollgate/infra/config"
)

// A Redis address list the edge cannot use stops it at start, with the variable and
// the accepted forms named, instead of failing at the first dial.
func TestOpenLimiterRefusesMalformedRedisURL(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, u := range []string{"redis://a:1,b:2", "127.0.0.1:6379,127.0.0.1:6380", "redis://a:7000?addr=:7001",
		"redis+sentinel://s1,,s2/m", "sentinel://s1/m", "redis://:secret@a:99999"} {
		el, err := openLimiter(&config.Config{RedisURL: u, RedisPrefix: "tollgate", EdgeID: "e"}, log)
		if err == nil {
			el.close()
			t.Errorf("%q: accepted", u)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "TOLLGATE_REDIS_URL: ") || !strings.Contains(msg, "accepted forms: ") || strings.Contains(msg, "secret") {
			t.Errorf("%q: %s", u, msg)
		}
	}
}
