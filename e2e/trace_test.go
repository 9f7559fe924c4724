package e2e

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSpan is a span an OTLP receiver got, with its service.
type otlpSpan struct {
	service, name           string
	traceID, spanID, parent string
}

func (s otlpSpan) String() string {
	return fmt.Sprintf("%s %q trace %s span %s parent %s", s.service, s.name, s.traceID, s.spanID, s.parent)
}

// otlpReceiver is an OTLP/HTTP collector in the test process: it decodes each export
// request's protobuf and keeps the spans.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusNotFound)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) add(msg *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, otlpSpan{
					service: service, name: s.Name, traceID: hex.EncodeToString(s.TraceId),
					spanID: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId),
				})
			}
		}
	}
}

// find returns the spans that match, in arrival order.
func (r *otlpReceiver) find(match func(otlpSpan) bool) []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []otlpSpan
	for _, s := range r.spans {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

func (r *otlpReceiver) dump() string {
	var b strings.Builder
	for _, s := range r.find(func(otlpSpan) bool { return true }) {
		b.WriteString("\n  " + s.String())
	}
	return b.String()
}

func TestTraces(t *testing.T) {
	rcv := newOTLPReceiver(t)
	s := newStack(t)
	// Sample everything; export every 100ms rather than the SDK's 5s (its own variable).
	traced := []string{"TOLLGATE_OTEL_ENDPOINT=" + rcv.URL, "TOLLGATE_OTEL_SAMPLE=1", "OTEL_BSP_SCHEDULE_DELAY=100"}
	_, api := s.startAPI(traced...)
	_, edge := s.startEdge(traced...)
	up := echoUpstream(t, "up")
	api.createTenant("traced")
	api.createRoute("traced", routeSpec("hello", "/hello", up.URL, "none"))
	eventually(t, 5*time.Second, "route served", served(edge, "traced", "/hello", "up"))

	// A caller's trace continues through the edge to the upstream.
	const (
		callerTrace = "0af7651916cd43dd8448eb211c80319c"
		callerSpan  = "b7ad6b7169203331"
	)
	r := edge.get(t, "traced", "/hello", "Traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	sent := decodeEcho(t, r).Headers["Traceparent"]
	parts := strings.Split(strings.Join(sent, ","), "-")
	if len(parts) != 4 || parts[1] != callerTrace || parts[2] == callerSpan || parts[3] != "01" {
		t.Fatalf("upstream got traceparent %q: want trace %s with the edge's span as parent", sent, callerTrace)
	}
	eventually(t, 10*time.Second, "the edge's span reaches the collector", func() error {
		got := rcv.find(func(sp otlpSpan) bool {
			return sp.service == "tollgate-edge" && sp.traceID == callerTrace && sp.spanID == parts[2] && sp.parent == callerSpan
		})
		if len(got) != 1 {
			return fmt.Errorf("no edge span %s/%s with parent %s among:%s", callerTrace, parts[2], callerSpan, rcv.dump())
		}
		return nil
	})

	// A route change through the api carries its trace to the edge's apply.
	const changeTrace = "5b8efff798038103d269b633813fc60c"
	api.must(201, "POST", "/v1/tenants/traced/routes", routeSpec("second", "/second", up.URL, "none"),
		"Traceparent", "00-"+changeTrace+"-eee19b7ec3c1b174-01")
	eventually(t, 5*time.Second, "second route served", served(edge, "traced", "/second", "up"))
	eventually(t, 10*time.Second, "the edge's apply span joins the api request's trace", func() error {
		apis := rcv.find(func(sp otlpSpan) bool {
			return sp.service == "tollgate-api" && sp.traceID == changeTrace && strings.HasPrefix(sp.name, "POST ")
		})
		applies := rcv.find(func(sp otlpSpan) bool {
			return sp.service == "tollgate-edge" && sp.traceID == changeTrace && sp.name == "apply"
		})
		if len(apis) != 1 || len(applies) == 0 {
			return fmt.Errorf("want the api's span and the edge's apply span in trace %s; spans:%s", changeTrace, rcv.dump())
		}
		for _, a := range applies {
			if a.parent != apis[0].spanID {
				return fmt.Errorf("apply span %s: want the api request's span %s as parent", a, apis[0].spanID)
			}
		}
		return nil
	})
}
