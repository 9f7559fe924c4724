// Package natsconn is how every Tollgate process reaches NATS: the connection options they
// share (reconnect forever, notice a dead server quickly), sign-in and TLS from the
// TOLLGATE_NATS_* settings, the server-list check, and the replica rule of the streams and
// buckets they create. It knows no subject, stream or bucket of its own: the config KV
// (tenants/nats) and the usage stream (billing/nats, infra/usage) build on it.
package natsconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Auth is how a process signs in to NATS and checks its servers: a credentials file or
// an NKey seed file (one of them), and TLS with a CA and an optional client certificate.
// Every Tollgate process builds its connection from the same Auth, so the api, edges and
// billing reach a secured cluster the same way.
type Auth struct {
	Creds   string // TOLLGATE_NATS_CREDS: a user JWT and its seed, as `nsc` writes them
	NKey    string // TOLLGATE_NATS_NKEY: a file holding a user NKey seed
	TLSCA   string // TOLLGATE_NATS_TLS_CA: PEM roots the servers' certificates chain to
	TLSCert string // TOLLGATE_NATS_TLS_CERT: PEM client certificate, with TLSKey
	TLSKey  string // TOLLGATE_NATS_TLS_KEY
}

// Options returns the nats.go options of a, having read every file now: a missing or
// malformed file is an error naming its setting, at start, rather than a refused
// connection retried forever in the background.
func (a Auth) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.Creds != "" && a.NKey != "" {
		return nil, errors.New("TOLLGATE_NATS_CREDS and TOLLGATE_NATS_NKEY are two ways to sign in: set one")
	}
	if a.Creds != "" {
		o := nats.UserCredentials(a.Creds)
		// nats.go reads the file only when it connects; read it once here so a bad file
		// stops the process instead of failing every reconnect.
		var probe nats.Options
		if err := o(&probe); err != nil {
			return nil, fmt.Errorf("TOLLGATE_NATS_CREDS %s: %w", a.Creds, err)
		}
		if _, err := probe.UserJWT(); err != nil {
			return nil, fmt.Errorf("TOLLGATE_NATS_CREDS %s: %w", a.Creds, err)
		}
		if _, err := probe.SignatureCB([]byte("probe")); err != nil {
			return nil, fmt.Errorf("TOLLGATE_NATS_CREDS %s: %w", a.Creds, err)
		}
		opts = append(opts, o)
	}
	if a.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_NATS_NKEY %s: %w", a.NKey, err)
		}
		opts = append(opts, o)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return nil, errors.New("TOLLGATE_NATS_TLS_CERT and TOLLGATE_NATS_TLS_KEY go together: set both or neither")
	}
	if a.TLSCA != "" {
		o := nats.RootCAs(a.TLSCA)
		if err := o(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("TOLLGATE_NATS_TLS_CA %s: %w", a.TLSCA, err)
		}
		opts = append(opts, o)
	}
	if a.TLSCert != "" {
		o := nats.ClientCert(a.TLSCert, a.TLSKey)
		if err := o(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("TOLLGATE_NATS_TLS_CERT / TOLLGATE_NATS_TLS_KEY: %w", err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// CheckServers checks a TOLLGATE_NATS_URL value: one server or a comma-separated list,
// each nats://, tls://, ws:// or wss:// with a host (a port defaults to 4222).
func CheckServers(list string) error {
	if strings.TrimSpace(list) == "" {
		return errors.New("TOLLGATE_NATS_URL: no server")
	}
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.Hostname() == "" {
			return fmt.Errorf("TOLLGATE_NATS_URL: %q is not a server URL (nats://host:4222, several separated by commas)", redact(s))
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("TOLLGATE_NATS_URL: %q: scheme %q is not nats, tls, ws or wss", redact(s), u.Scheme)
		}
	}
	return nil
}

// ConnectAuth is Connect for a server list signed in and secured by a; a bad list or file
// is an error before any dial.
func ConnectAuth(servers, name string, a Auth, opts ...nats.Option) (*nats.Conn, error) {
	if err := CheckServers(servers); err != nil {
		return nil, err
	}
	ao, err := a.Options()
	if err != nil {
		return nil, err
	}
	return Connect(servers, name, append(ao, opts...)...)
}

// Connect dials url (one server or a comma-separated list of a cluster's) with the options
// every Tollgate process wants: reconnect forever, one second apart (jittered), buffer up
// to 8 MB while reconnecting, and notice a dead server within about 15 s. The list is
// shuffled (nats.go's default), so a fleet's connections spread over the cluster's nodes,
// and servers the cluster announces are added to it, so a list naming one node still
// fails over to the others. It returns at once when the server cannot be reached at
// start, with the connection retrying in the background, so an api started during a NATS
// outage comes up and its outbox catches up later, and an edge started during one becomes
// ready when NATS returns. name identifies the process in the server's connection list.
// opts are applied last and override these defaults.
func Connect(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	log := slog.Default().With("nats", redactList(url), "conn", name)
	o := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.ReconnectBufSize(8 << 20),
		nats.Timeout(2 * time.Second),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.ConnectHandler(func(nc *nats.Conn) { log.Info("nats connected", "server", nc.ConnectedUrlRedacted()) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("nats async error", "subject", sub.Subject, "err", err)
			} else {
				log.Warn("nats async error", "err", err)
			}
		}),
	}
	nc, err := nats.Connect(url, append(o, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", redactList(url), err)
	}
	return nc, nil
}

// redact hides a password in a server URL before it is logged or shown in an error.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// Unparseable, but it may still carry user:password@ before the host.
		if at := strings.LastIndex(s, "@"); at >= 0 {
			scheme := ""
			if i := strings.Index(s, "://"); i >= 0 && i < at {
				scheme = s[:i+3]
			}
			return scheme + "redacted" + s[at:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "redacted")
	} else {
		u.User = url.User("redacted")
	}
	return u.String()
}

// redactList is redact for a comma-separated server list.
func redactList(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = redact(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// Replicas returns the replica count to give stream when want is configured: want, or the
// stream's current count when that is higher. Lowering replicas drops copies of the data,
// which an operator should do on purpose (`nats stream edit`), not by restarting a process
// with a smaller setting; so a lower setting keeps the current count and logs a warning.
// A stream that does not exist yet gets want. want below 1 means 1.
func Replicas(ctx context.Context, js jetstream.JetStream, stream string, want int) (int, error) {
	want = max(want, 1)
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return want, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	return keepReplicas(stream, s.CachedInfo().Config.Replicas, want), nil
}

// keepReplicas is Replicas' choice for an existing stream that has have replicas.
func keepReplicas(stream string, have, want int) int {
	if have > want {
		slog.Default().Warn("nats: stream has more replicas than TOLLGATE_NATS_REPLICAS; keeping them (lower them with `nats stream edit` if that is meant)",
			"stream", stream, "replicas", have, "setting", want)
		return have
	}
	if have < want {
		slog.Default().Info("nats: raising a stream's replicas", "stream", stream, "from", have, "to", want)
	}
	return want
}

// EnsureStream creates the stream cfg names, or brings an existing one to cfg, with the
// replicas Replicas decides. An existing stream that already has cfg's settings gets no
// update: every edge and billing process ensures the same streams when it starts, and
// nats-server (2.15) rewrites a stream's store config on every update, which races with
// a consumer being created on that stream at the same moment (the race detector sees it
// in the embedded server of the tests).
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg.Replicas = max(cfg.Replicas, 1)
	s, err := js.Stream(ctx, cfg.Name)
	switch {
	case err == nil:
		cfg.Replicas = keepReplicas(cfg.Name, s.CachedInfo().Config.Replicas, cfg.Replicas)
		if sameSettings(&s.CachedInfo().Config, &cfg) {
			return s, nil
		}
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	default:
		if s, err = js.CreateStream(ctx, cfg); err == nil {
			return s, nil
		}
		// Created by another process meanwhile: the same settings need no update.
		if s, err := js.Stream(ctx, cfg.Name); err == nil && sameSettings(&s.CachedInfo().Config, &cfg) {
			return s, nil
		}
	}
	s, err = js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// sameSettings says whether have, a stream's config as the server reports it, already
// has the settings want sets; a zero field of want is the server's default, not compared.
func sameSettings(have, want *jetstream.StreamConfig) bool {
	limit := func(h, w int64) bool { return w == 0 || h == w }
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Storage == want.Storage && have.Retention == want.Retention && have.Discard == want.Discard &&
		have.Replicas == want.Replicas && limit(int64(have.MaxAge), int64(want.MaxAge)) &&
		limit(have.MaxBytes, want.MaxBytes) && limit(have.MaxMsgs, want.MaxMsgs) &&
		limit(have.MaxMsgsPerSubject, want.MaxMsgsPerSubject) &&
		limit(int64(have.Duplicates), int64(want.Duplicates))
}
