// Package nats is the JetStream side of config fan-out: the KV bucket of config entries
// (see tenants.Entry for its key layout), the Publisher the api's outbox relay hands
// changes to, Resync to rebuild the bucket from Postgres, and the Watcher an edge boots
// from and follows.
//
// It speaks only the KV's wire format (subjects $KV.<bucket>.<key>, a KV-Operation header
// for deletes), so entries it writes are ordinary KV entries that `nats kv` and
// jetstream.KeyValue read as usual. It never decodes entries beyond their Rev: validating
// and applying them is the edge's job (tenants.DecodeEntry).
//
// Everything here works against NATS 2.9 (the machine's server) as well as 2.10+.
package nats

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
)

// MaxValueSize is the largest config entry the bucket accepts.
const MaxValueSize = 1 << 20

// EnsureBucket creates the config bucket or brings an existing one to the settings below:
// history 1 (an edge needs the latest value only, and JetStream then indexes one message
// per key), file storage, values up to MaxValueSize, and replicas copies (raised on an
// existing bucket, never lowered: see natsconn.Replicas). Nothing it sets needs NATS 2.10.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	r, err := natsconn.Replicas(ctx, js, streamName(name), replicas)
	if err != nil {
		return nil, fmt.Errorf("ensure kv bucket %s: %w", name, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       name,
		Description:  "Tollgate config entries, one per tenant object (<tenant_id>.<kind>[.<id>]); written by the api's outbox relay, watched by edges",
		History:      1,
		Storage:      jetstream.FileStorage,
		MaxValueSize: MaxValueSize,
		Replicas:     r,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure kv bucket %s: %w", name, err)
	}
	return kv, nil
}

// The KV's own wire format, as jetstream.KeyValue writes and reads it.
const (
	kvOperation   = "KV-Operation"
	kvDelete      = "DEL"
	kvPurge       = "PURGE"
	markerReason  = "Nats-Marker-Reason" // 2.11+: server-made markers (TTL expiry, removal)
	kvStreamPre   = "KV_"
	kvSubjectsPre = "$KV."
)

// KVStream is the name of the stream behind KV bucket bucket.
func KVStream(bucket string) string { return streamName(bucket) }

func streamName(bucket string) string    { return kvStreamPre + bucket }
func subjectPrefix(bucket string) string { return kvSubjectsPre + bucket + "." }
func subject(bucket, key string) string  { return kvSubjectsPre + bucket + "." + key }

// isDelete says whether a message's KV-Operation and Nats-Marker-Reason headers make it
// a delete rather than a value.
func isDelete(op, marker string) bool { return op == kvDelete || op == kvPurge || marker != "" }

// validKey follows jetstream.KeyValue's key rules, so the bucket never holds a key the
// KV API would refuse, and also refuses an empty token ("a..b"), which is no subject.
func validKey(key string) bool {
	return validKeyRe.MatchString(key) && key[0] != '.' && key[len(key)-1] != '.' && !strings.Contains(key, "..")
}

func validFilter(filter string) bool { return validFilterRe.MatchString(filter) }

var (
	validKeyRe    = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)
	validFilterRe = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9*]*[>]?$`)
)

// errNotConnected is what Publish returns at once while the connection is down.
var errNotConnected = errors.New("nats: not connected")
