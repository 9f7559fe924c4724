package limit_test

import (
	"slices"
	"strings"
	"testing"

	"tollgate/edge/limit"
)

func TestParseRedisURL(t *testing.T) {
	ok := []struct {
		url   string
		topo  limit.RedisTopology
		addrs []string
		check func(t *testing.T, r limit.RedisTarget)
	}{
		{"redis://127.0.0.1:6379/0", limit.RedisSingle, []string{"127.0.0.1:6379"}, nil},
		{"redis://h", limit.RedisSingle, []string{"h:6379"}, nil},
		{"redis://:pw@h:7000/3", limit.RedisSingle, []string{"h:7000"}, func(t *testing.T, r limit.RedisTarget) {
			if r.Single.Password != "pw" || r.Single.DB != 3 {
				t.Errorf("password %q db %d", r.Single.Password, r.Single.DB)
			}
		}},
		{"rediss://u:pw@[::1]:6380", limit.RedisSingle, []string{"[::1]:6380"}, func(t *testing.T, r limit.RedisTarget) {
			if r.Single.TLSConfig == nil || r.Single.Username != "u" {
				t.Errorf("tls %v user %q", r.Single.TLSConfig, r.Single.Username)
			}
		}},
		{"unix:///run/redis.sock?db=2", limit.RedisSingle, []string{"/run/redis.sock"}, nil},
		{"redis://a:7000?addr=b:7001&addr=c:7002", limit.RedisCluster, []string{"a:7000", "b:7001", "c:7002"}, nil},
		{"redis://:pw@a:7000/0?addr=b:7001", limit.RedisCluster, []string{"a:7000", "b:7001"}, func(t *testing.T, r limit.RedisTarget) {
			if r.Cluster.Password != "pw" {
				t.Errorf("password %q", r.Cluster.Password)
			}
		}},
		{"rediss://a:7000?addr=[::1]:7001", limit.RedisCluster, []string{"a:7000", "[::1]:7001"}, func(t *testing.T, r limit.RedisTarget) {
			if r.Cluster.TLSConfig == nil {
				t.Error("no TLS")
			}
		}},
		{"redis+sentinel://s1:26379,s2:26380,s3/mymaster", limit.RedisSentinel, []string{"s1:26379", "s2:26380", "s3:26379"}, func(t *testing.T, r limit.RedisTarget) {
			if r.Sentinel.MasterName != "mymaster" || r.Sentinel.DB != 0 || r.Sentinel.TLSConfig != nil {
				t.Errorf("%+v", r.Sentinel)
			}
		}},
		{"rediss+sentinel://u:p%40w@s1,[::1]:5000/m/4?sentinel_password=sp&sentinel_username=su", limit.RedisSentinel, []string{"s1:26379", "[::1]:5000"}, func(t *testing.T, r limit.RedisTarget) {
			o := r.Sentinel
			if o.MasterName != "m" || o.DB != 4 || o.Username != "u" || o.Password != "p@w" ||
				o.SentinelUsername != "su" || o.SentinelPassword != "sp" || o.TLSConfig == nil {
				t.Errorf("%+v", o)
			}
		}},
		{"redis://s1:26379?master_name=m&addr=s2:26379", limit.RedisSentinel, []string{"s1:26379", "s2:26379"}, func(t *testing.T, r limit.RedisTarget) {
			if r.Sentinel.MasterName != "m" {
				t.Errorf("master %q", r.Sentinel.MasterName)
			}
		}},
	}
	for _, c := range ok {
		r, err := limit.ParseRedisURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if r.Topology != c.topo || !slices.Equal(r.Addrs(), c.addrs) {
			t.Errorf("%s: %v %v, want %v %v", c.url, r.Topology, r.Addrs(), c.topo, c.addrs)
			continue
		}
		if c.check != nil {
			c.check(t, r)
		}
	}

	bad := []struct{ url, says string }{
		{"redis://a:1,b:2", "not host:port"},
		{"redis://a,b", "not host:port"},
		{"redis://a:1,b:2/0", "not host:port"},
		{"redis://a:0", "not 1–65535"},
		{"redis://a:65536", "not 1–65535"},
		{"redis://a:06379", "not 1–65535"},
		{"redis://a:", "no port"},
		{"redis://:6379", "no host"},
		{"redis://", "empty address"},
		{"redis://a:7000?addr=", "empty address"},
		{"redis://a:7000?addr=b", "no port"},
		{"redis://a:7000?addr=:7001", "no host"},
		{"redis://a:7000?addr=b:x", "not 1–65535"},
		{"redis://a:7000?addr=b:7001,c:7002", "not host:port"},
		{"redis://a:7000/2?addr=b:7001", "only database 0"},
		{"redis://a:7000?addr=b:7001&pool=3", "unexpected option"},
		{"redis+sentinel://s1,,s2/m", "empty address"},
		{"redis+sentinel:///m", "no sentinel address"},
		{"redis+sentinel://s1:99999/m", "not 1–65535"},
		{"redis+sentinel://s1", "master-name"},
		{"redis+sentinel://s1/m/x", "not a number"},
		{"redis+sentinel://s1/m/0/1", "master-name"},
		{"redis+sentinel://s1/m?db=1", "unexpected parameter"},
		{"redis://s1?master_name=", "empty master_name"},
		{"http://h:6379", "unknown scheme"},
		{"h1:6379,h2:6379", "unknown scheme"},
		{"127.0.0.1:6379", "not a URL"},
		{"", "no scheme"},
		{"redis://a:1?db=x", "invalid"},
		{"redis://h:6379/%zz", "not a URL"},
	}
	for _, c := range bad {
		_, err := limit.ParseRedisURL(c.url)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: %v, want an error saying %q", c.url, err, c.says)
		}
		if _, err := limit.NewRedisClient(c.url, 0); err == nil || !strings.Contains(err.Error(), "accepted forms: ") {
			t.Errorf("%q: NewRedisClient: %v, want the accepted forms named", c.url, err)
		}
	}
}

// FuzzParseRedisURL: any string is parsed or refused, never a panic; an accepted URL
// names at least one address, each host:port with a port in 1–65535 (unix sockets
// aside), and opens a client.
func FuzzParseRedisURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/0", "rediss://u:p@h:6380/1?dial_timeout=1s",
		"redis://a:7000?addr=b:7001&addr=c:7002", "redis://a:1,b:2",
		"redis+sentinel://s1:26379,s2/m/1?sentinel_password=x", "rediss+sentinel://u:p@[::1]/m",
		"redis://s1?master_name=m&addr=s2:1", "unix:///tmp/r.sock", "redis://[::1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := limit.ParseRedisURL(raw)
		if err != nil {
			return
		}
		addrs := r.Addrs()
		if len(addrs) == 0 {
			t.Fatalf("%q: accepted with no address", raw)
		}
		if r.Topology != limit.RedisSingle || r.Single.Network != "unix" {
			for _, a := range addrs {
				if !validAddr(a) {
					t.Fatalf("%q: accepted address %q", raw, a)
				}
			}
		}
		c, err := limit.NewRedisClient(raw, 0)
		if err != nil {
			t.Fatalf("%q: parsed but not opened: %v", raw, err)
		}
		c.Close()
	})
}

func validAddr(a string) bool {
	i := strings.LastIndexByte(a, ':')
	if i <= 0 || i == len(a)-1 {
		return false
	}
	for _, c := range a[i+1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(a[i+1:]) <= 5 && !strings.ContainsAny(a, ", /")
}
