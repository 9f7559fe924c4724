package edge

import (
	"encoding/json"
	"fmt"
	"time"

	"tollgate/edge/configfile"
	"tollgate/tenants"
)

// UseConfigFile has /readyz say where the edge's config comes from: the bucket, or f's
// snapshot (with its age), or, while not ready, why no snapshot could be served.
func (e *Edge) UseConfigFile(f *configfile.File) { e.cfile.Store(f) }

// configSource is /readyz's "config" object.
type configSource struct {
	Source     string     `json:"source"` // "nats" or "snapshot"
	Message    string     `json:"message,omitempty"`
	AsOf       *time.Time `json:"as_of,omitempty"`
	AgeSeconds float64    `json:"age_seconds,omitempty"`
	// Stale: the snapshot is older than the writer's refresh interval, which an edge
	// following the bucket never leaves it: its writes failed (a full disk) or the edge was
	// down that long. Either way tenants created since are missing from it.
	Stale bool `json:"stale,omitempty"`
}

// readyzBody is readyBody with the config's source added, when a config file is in use.
func (e *Edge) readyzBody() []byte {
	b := e.readyBody()
	f := e.cfile.Load()
	if f == nil {
		return b
	}
	src := configSource{Source: "nats"}
	if ok, asOf := f.Serving(); ok {
		age := time.Since(asOf)
		src = configSource{
			Source: "snapshot", AsOf: &asOf, AgeSeconds: age.Seconds(),
			Message: fmt.Sprintf("config from snapshot, age %s; NATS unreachable, catching up when it returns; a tenant the snapshot lacks is answered 503 not_ready until then", age.Round(time.Second)),
			Stale:   age > f.Refresh(),
		}
		if src.Stale {
			src.Message += fmt.Sprintf("; STALE: older than the snapshot's refresh interval (%s), it was not kept current (failed writes, see tollgate_edge_config_snapshot_writes_total{result=\"error\"}) and may lack recent tenants and routes", f.Refresh())
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return b
	}
	obj["config"], _ = json.Marshal(src)
	out, err := json.Marshal(obj)
	if err != nil {
		return b
	}
	return out
}

// replySnapshotUnknownTenant answers a Host that names no tenant while the edge serves a
// snapshot, or its disk store before catching up with the bucket: the snapshot may predate the tenant (more so when its writes failed), so
// "not found" would be a wrong answer that clients and caches take as final; "not ready,
// retry" is true until the bucket's load is in.
var replyTenantNotFetched = newReply(tenants.ENotReady, "this edge is still loading its configuration and could not fetch this tenant's yet; retry shortly")

var replySnapshotUnknownTenant = newReply(tenants.ENotReady, "the edge is serving an older copy of its configuration that does not name this tenant; retry shortly")

// failUnknownTenant answers a request whose Host names no tenant of this edge.
func (e *Edge) failUnknownTenant(x *exchange) {
	serving := e.storeBehind.Load()
	if f := e.cfile.Load(); f != nil && !serving {
		serving, _ = f.Serving()
	}
	if serving {
		x.fail(replySnapshotUnknownTenant)
		x.ctx.Response.Header.Set("Retry-After", "1")
		return
	}
	x.fail(replyTenantNotFound)
}

// loadingMessage is /readyz's message while the initial load is not in.
func (e *Edge) loadingMessage() string {
	if f := e.cfile.Load(); f != nil {
		if why := f.Unusable(); why != "" {
			return "loading config: NATS unreachable and no usable snapshot (" + why + ")"
		}
	}
	return "loading config"
}
