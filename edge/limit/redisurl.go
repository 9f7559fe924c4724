package limit

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// RedisURLForms names the forms NewRedisClient accepts, for error messages.
const RedisURLForms = "redis[s]://[[user]:password@]host[:port][/db] (one node), " +
	"redis[s]://[[user]:password@]host:port?addr=host2:port&addr=host3:port (Redis Cluster seed nodes), " +
	"redis[s]+sentinel://[[user]:password@]host:port[,host:port…]/master-name[/db] (Sentinel)"

// RedisTopology is what a Redis URL names.
type RedisTopology int

const (
	RedisSingle   RedisTopology = iota // one node (redis://, rediss://, unix://)
	RedisCluster                       // Redis Cluster, from seed nodes
	RedisSentinel                      // a master found through Sentinel
)

func (t RedisTopology) String() string {
	switch t {
	case RedisCluster:
		return "cluster"
	case RedisSentinel:
		return "sentinel"
	}
	return "single"
}

// RedisTarget is a parsed Redis URL: exactly one of the options is set, by Topology.
type RedisTarget struct {
	Topology RedisTopology
	Single   *redis.Options
	Cluster  *redis.ClusterOptions
	Sentinel *redis.FailoverOptions
}

// Addrs are the addresses the client dials first: the node, the cluster's seed nodes
// or the sentinels.
func (t RedisTarget) Addrs() []string {
	switch t.Topology {
	case RedisCluster:
		return t.Cluster.Addrs
	case RedisSentinel:
		return t.Sentinel.SentinelAddrs
	}
	return []string{t.Single.Addr}
}

// ParseRedisURL reads a Redis URL in one of three forms:
//
//   - redis://, rediss:// or unix:// without addr parameters: one node (redis.ParseURL);
//   - redis:// or rediss:// with addr parameters: Redis Cluster, the host and every addr
//     being seed nodes (redis.ParseClusterURL). A cluster needs two seeds or more in the
//     URL, which is also what tells it from one node;
//   - redis+sentinel:// or rediss+sentinel://: a comma-separated list of sentinels
//     (port 26379 by default), the master's name as the first path element and
//     optionally the database as the second. The URL's user and password are the
//     master's; sentinel_username and sentinel_password parameters are the sentinels'.
//     go-redis's own form (redis://sentinel?master_name=…&addr=…, redis.ParseFailoverURL)
//     is accepted as well.
//
// Every address must be host:port with a non-empty host and a port in 1–65535: a
// comma-separated list outside the Sentinel form, an empty or malformed address, an
// unknown scheme or parameter is an error, so a typo fails at start, not at dial time.
func ParseRedisURL(raw string) (RedisTarget, error) {
	for _, scheme := range []string{"redis+sentinel://", "rediss+sentinel://"} {
		if strings.HasPrefix(raw, scheme) {
			return parseSentinelURL(raw, scheme)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return RedisTarget{}, errors.New("not a URL")
	}
	q := u.Query()
	switch u.Scheme {
	case "unix":
		o, err := redis.ParseURL(raw)
		if err != nil {
			return RedisTarget{}, err
		}
		return RedisTarget{Topology: RedisSingle, Single: o}, nil
	case "redis", "rediss":
	case "":
		return RedisTarget{}, errors.New("no scheme")
	default:
		return RedisTarget{}, fmt.Errorf("unknown scheme %q", u.Scheme)
	}
	if err := checkAddr(u.Host, "6379"); err != nil {
		return RedisTarget{}, err
	}
	for _, a := range q["addr"] {
		if err := checkAddr(a, ""); err != nil {
			return RedisTarget{}, fmt.Errorf("addr parameter: %w", err)
		}
	}
	switch {
	case q.Has("master_name"):
		if q.Get("master_name") == "" {
			return RedisTarget{}, errors.New("empty master_name")
		}
		o, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return RedisTarget{}, err
		}
		return RedisTarget{Topology: RedisSentinel, Sentinel: o}, nil
	case q.Has("addr"):
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return RedisTarget{}, errors.New("a Redis Cluster has only database 0")
		}
		u2 := *u
		u2.Path = ""
		o, err := redis.ParseClusterURL(u2.String())
		if err != nil {
			return RedisTarget{}, err
		}
		return RedisTarget{Topology: RedisCluster, Cluster: o}, nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return RedisTarget{}, err
	}
	return RedisTarget{Topology: RedisSingle, Single: o}, nil
}

// parseSentinelURL reads the sentinel list itself: url.Parse refuses a list whose last
// address has no port while an earlier one has.
func parseSentinelURL(raw, scheme string) (RedisTarget, error) {
	rest := raw[len(scheme):]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth, hosts := "", rest[:end]
	if at := strings.LastIndexByte(hosts, '@'); at >= 0 {
		auth, hosts = hosts[:at+1], hosts[at+1:]
	}
	u, err := url.Parse(scheme + auth + "sentinels" + rest[end:])
	if err != nil {
		return RedisTarget{}, errors.New("not a URL")
	}
	o := &redis.FailoverOptions{}
	if hosts == "" {
		return RedisTarget{}, errors.New("no sentinel address")
	}
	for _, a := range strings.Split(hosts, ",") {
		if err := checkAddr(a, "26379"); err != nil {
			return RedisTarget{}, fmt.Errorf("sentinel: %w", err)
		}
		h, p := splitDefault(a, "26379")
		o.SentinelAddrs = append(o.SentinelAddrs, net.JoinHostPort(h, p))
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(path) > 2 || path[0] == "" {
		return RedisTarget{}, errors.New("the path must be /master-name or /master-name/db")
	}
	o.MasterName = path[0]
	if len(path) == 2 {
		db, err := strconv.Atoi(path[1])
		if err != nil || db < 0 {
			return RedisTarget{}, fmt.Errorf("database %q is not a number", path[1])
		}
		o.DB = db
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	for k, v := range u.Query() {
		switch {
		case k == "sentinel_username" && len(v) == 1:
			o.SentinelUsername = v[0]
		case k == "sentinel_password" && len(v) == 1:
			o.SentinelPassword = v[0]
		default:
			return RedisTarget{}, fmt.Errorf("unexpected parameter %q (only sentinel_username and sentinel_password)", k)
		}
	}
	if scheme == "rediss+sentinel://" {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return RedisTarget{Topology: RedisSentinel, Sentinel: o}, nil
}

// checkAddr refuses what url.Parse and go-redis let through and a dial would fail on:
// lists, empty hosts, ports that are not 1–65535. def is the port an address may omit
// ("" when it must have one).
func checkAddr(a, def string) error {
	if a == "" {
		return errors.New("empty address")
	}
	if strings.ContainsAny(a, ", \t\r\n/?#@") {
		return fmt.Errorf("address %q is not host:port (a list of nodes is written with addr parameters, or as a Sentinel URL)", a)
	}
	h, p := splitDefault(a, def)
	if h == "" {
		return fmt.Errorf("address %q has no host", a)
	}
	if strings.Contains(h, ":") && net.ParseIP(h) == nil {
		return fmt.Errorf("address %q is not host:port", a)
	}
	if p == "" {
		return fmt.Errorf("address %q has no port", a)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || p[0] == '0' || p[0] == '+' {
		return fmt.Errorf("address %q: port %q is not 1–65535", a, p)
	}
	return nil
}

// splitDefault splits host:port, [v6]:port, host or [v6], giving def as the port when
// there is none.
func splitDefault(a, def string) (host, port string) {
	if h, p, err := net.SplitHostPort(a); err == nil {
		return h, p
	}
	if strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") {
		return a[1 : len(a)-1], def
	}
	if strings.Count(a, ":") == 1 && strings.HasSuffix(a, ":") {
		return a[:len(a)-1], ""
	}
	return a, def
}

// NewRedisClient opens a client for the limiter from a URL in one of ParseRedisURL's
// forms: one node, Redis Cluster or Sentinel. Whatever the form, the client honours
// context deadlines, never retries, dials once within timeout and skips the optional
// handshake commands, so a Redis that is down or slow costs a request at most timeout.
// timeout 0 is DefaultTimeout. The error names the accepted forms.
func NewRedisClient(rawURL string, timeout time.Duration) (redis.UniversalClient, error) {
	t, err := ParseRedisURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%v; accepted forms: %s", err, RedisURLForms)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	switch t.Topology {
	case RedisCluster:
		o := t.Cluster
		o.ContextTimeoutEnabled = true
		o.MaxRetries = -1
		o.DialTimeout = timeout
		o.DialerRetries = 1
		o.PoolTimeout = timeout
		o.ReadTimeout = time.Second
		o.WriteTimeout = time.Second
		o.DisableIdentity = true
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		return redis.NewClusterClient(o), nil
	case RedisSentinel:
		o := t.Sentinel
		o.ContextTimeoutEnabled = true
		o.MaxRetries = -1
		o.DialTimeout = timeout
		o.DialerRetries = 1
		o.PoolTimeout = timeout
		o.ReadTimeout = time.Second
		o.WriteTimeout = time.Second
		o.DisableIdentity = true
		return redis.NewFailoverClient(o), nil
	}
	o := t.Single
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.DialTimeout = timeout
	o.DialerRetries = 1
	o.PoolTimeout = timeout
	o.ReadTimeout = time.Second
	o.WriteTimeout = time.Second
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(o), nil
}
