package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"tollgate/infra/config"
)

// The files prod mounts from the operator's Secrets: each setting that names a file, the
// Secret and the key the file must come from. The README's deploy steps create them.
var (
	natsClientFiles = map[string]secretFile{
		"TOLLGATE_NATS_CREDS":  {"tollgate-nats", "user.creds"},
		"TOLLGATE_NATS_TLS_CA": {"tollgate-nats", "ca.crt"},
	}
	edgeTLSFiles = map[string]secretFile{
		"TOLLGATE_EDGE_TLS_CERT": {"tollgate-edge-tls", "tls.crt"},
		"TOLLGATE_EDGE_TLS_KEY":  {"tollgate-edge-tls", "tls.key"},
	}
)

type secretFile struct{ secret, key string }

// mountedSecretFile checks that the file a setting names is there when the process
// starts: a read-only mount of a Secret volume that projects the file from want's key,
// readable by the process (its mode, or the pod's fsGroup), and not optional (a missing
// Secret keeps the pod from starting instead of starting it without the file).
func mountedSecretFile(t *testing.T, where string, pod corev1.PodSpec, c corev1.Container, env map[string]string, setting string, want secretFile) {
	t.Helper()
	p := env[setting]
	if p == "" {
		t.Errorf("%s: %s is not set", where, setting)
		return
	}
	m := mountFor(c, p)
	if m == nil {
		t.Errorf("%s: %s = %s, which no volume mount holds", where, setting, p)
		return
	}
	if !m.ReadOnly || m.SubPath != "" {
		t.Errorf("%s: %s is on mount %s (readOnly %v, subPath %q), want a read-only mount of the whole volume (a subPath never sees a renewal)", where, setting, m.MountPath, m.ReadOnly, m.SubPath)
	}
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
	if i < 0 || pod.Volumes[i].Secret == nil {
		t.Errorf("%s: %s = %s is on volume %s, which is not a Secret volume", where, setting, p, m.Name)
		return
	}
	sv := pod.Volumes[i].Secret
	if sv.SecretName != want.secret {
		t.Errorf("%s: %s comes from Secret %s, want %s (the one the README has the operator create)", where, setting, sv.SecretName, want.secret)
	}
	if sv.Optional != nil && *sv.Optional {
		t.Errorf("%s: Secret volume %s is optional: without the Secret the process would start without %s", where, m.Name, setting)
	}
	rel := strings.TrimPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
	key, mode := rel, int32(0o644)
	if sv.DefaultMode != nil {
		mode = *sv.DefaultMode
	}
	if len(sv.Items) > 0 {
		j := slices.IndexFunc(sv.Items, func(it corev1.KeyToPath) bool { return path.Clean(it.Path) == rel })
		if j < 0 {
			t.Errorf("%s: %s = %s, but Secret volume %s projects no %s", where, setting, p, m.Name, rel)
			return
		}
		key = sv.Items[j].Key
		if sv.Items[j].Mode != nil {
			mode = *sv.Items[j].Mode
		}
	}
	if key != want.key {
		t.Errorf("%s: %s is key %s of Secret %s, want key %s", where, setting, key, sv.SecretName, want.key)
	}
	// Secret files belong to root, and to the pod's fsGroup when it has one (the
	// process is in that group).
	if mode&0o004 == 0 && (mode&0o040 == 0 || pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil) {
		t.Errorf("%s: %s (mode %#o) is unreadable by the process: it is not root, and the pod has no fsGroup to own the file", where, p, mode)
	}
}

// checkNATSSecured: every Tollgate process of prod reaches NATS over TLS only, with the
// credentials and the servers' CA from the Secret tollgate-nats mounted at the paths its
// settings name. It returns the NATS hosts the processes dial.
func checkNATSSecured(t *testing.T, o *objects) []string {
	t.Helper()
	var hosts []string
	for _, d := range o.deployments {
		pod := d.Spec.Template.Spec
		for _, c := range pod.Containers {
			if !isTollgateImage(c.Image) {
				continue
			}
			where := d.Name + " container " + c.Name
			env := o.containerEnv(d.Name, c)
			for _, s := range strings.Split(env["TOLLGATE_NATS_URL"], ",") {
				host, ok := strings.CutPrefix(strings.TrimSpace(s), "tls://")
				if !ok {
					t.Errorf("%s: TOLLGATE_NATS_URL server %q is not tls://", where, s)
					continue
				}
				if h, _, err := net.SplitHostPort(host); err == nil {
					host = h
				}
				if !slices.Contains(hosts, host) {
					hosts = append(hosts, host)
				}
			}
			for setting, want := range natsClientFiles {
				mountedSecretFile(t, where, pod, c, env, setting, want)
			}
			if env["TOLLGATE_NATS_NKEY"] != "" {
				t.Errorf("%s: TOLLGATE_NATS_NKEY is set beside the credentials", where)
			}
		}
	}
	if len(hosts) == 0 {
		t.Error("no Tollgate process of prod names a NATS server")
	}
	return hosts
}

// checkEdgeTLS: prod's edge listens for TLS on a port of its container that the edge
// Service publishes, with the wildcard certificate and key from the Secret
// tollgate-edge-tls mounted at the paths its settings name; and every process counts the
// TLS port among the gateway's own (the api refuses upstreams on it).
func checkEdgeTLS(t *testing.T, o *objects) {
	t.Helper()
	edge := o.deployment(t, "tollgate-edge")
	pod := edge.Spec.Template.Spec
	c := pod.Containers[0]
	env := o.containerEnv(edge.Name, c)
	addr := env["TOLLGATE_EDGE_TLS_ADDR"]
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("edge TOLLGATE_EDGE_TLS_ADDR = %q, want 0.0.0.0:port", addr)
	}
	tlsPort, _ := strconv.Atoi(port)
	var portName string
	for _, p := range c.Ports {
		if int(p.ContainerPort) == tlsPort {
			portName = p.Name
		}
	}
	if portName == "" {
		t.Errorf("edge container declares no port %d, where TOLLGATE_EDGE_TLS_ADDR listens", tlsPort)
	}
	published := false
	for _, s := range o.services {
		if s.Name != edge.Name {
			continue
		}
		for _, sp := range s.Spec.Ports {
			tp := sp.TargetPort
			if tp.Type == intstr.String && tp.StrVal == portName && portName != "" || tp.Type == intstr.Int && int(tp.IntVal) == tlsPort {
				published = true
				if sp.Port != 443 {
					t.Errorf("Service %s publishes the edge's TLS port as %d, want 443", s.Name, sp.Port)
				}
			}
		}
	}
	if !published {
		t.Errorf("Service %s does not publish the edge's TLS port %d (%q)", edge.Name, tlsPort, portName)
	}
	for setting, want := range edgeTLSFiles {
		mountedSecretFile(t, "tollgate-edge container "+c.Name, pod, c, env, setting, want)
	}
	for _, d := range o.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if !isTollgateImage(c.Image) {
				continue
			}
			env := o.containerEnv(d.Name, c)
			cfg, err := config.FromEnv(func(k string) string { return env[k] })
			if err != nil {
				continue // checkProgramConfig reports it
			}
			if !slices.Contains(cfg.GatewayPorts(), tlsPort) {
				t.Errorf("%s does not count the edge's TLS port %d among the gateway's own: it would accept an upstream on it", d.Name, tlsPort)
			}
		}
	}
}

// checkREADMEOperatorSecrets: the Secrets prod mounts, and their keys, are in docs/operating.md's
// deploy steps (the operator creates them; nothing else says what they hold).
func checkREADMEOperatorSecrets(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Deploy files\n")
	if !ok {
		t.Fatal("docs/operating.md has no Deploy files section")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	for _, files := range []map[string]secretFile{natsClientFiles, edgeTLSFiles} {
		for _, f := range files {
			for _, s := range []string{f.secret, f.key} {
				if !strings.Contains(section, s) {
					t.Errorf("the Deploy files of docs/operating.md do not name %s (Secret %s, key %s), which prod mounts", s, f.secret, f.key)
				}
			}
		}
	}
}

// natsValues is what the test reads of nats/values.yaml.
type natsValues struct {
	Config struct {
		Cluster struct {
			Enabled  bool `json:"enabled"`
			Replicas int  `json:"replicas"`
			TLS      struct {
				Enabled    bool   `json:"enabled"`
				SecretName string `json:"secretName"`
			} `json:"tls"`
		} `json:"cluster"`
		NATS struct {
			TLS struct {
				Enabled    bool   `json:"enabled"`
				SecretName string `json:"secretName"`
			} `json:"tls"`
		} `json:"nats"`
		JetStream struct {
			Enabled   bool `json:"enabled"`
			FileStore struct {
				Enabled bool   `json:"enabled"`
				Dir     string `json:"dir"`
				PVC     struct {
					Enabled bool   `json:"enabled"`
					Size    string `json:"size"`
				} `json:"pvc"`
			} `json:"fileStore"`
		} `json:"jetstream"`
		Merge map[string]any `json:"merge"`
	} `json:"config"`
	TLSCA struct {
		Enabled    bool   `json:"enabled"`
		SecretName string `json:"secretName"`
		Key        string `json:"key"`
	} `json:"tlsCA"`
	Container struct {
		Patch []jsonPatchOp `json:"patch"`
	} `json:"container"`
	PodTemplate struct {
		Patch []jsonPatchOp `json:"patch"`
	} `json:"podTemplate"`
}

type jsonPatchOp struct {
	Op    string         `json:"op"`
	Path  string         `json:"path"`
	Value map[string]any `json:"value"`
}

// certificate is the part of a cert-manager Certificate or Issuer the test reads; decoded
// strictly, so a misspelt field fails here.
type certManagerObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		// Certificate
		IsCA        bool     `json:"isCA"`
		CommonName  string   `json:"commonName"`
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		DNSNames    []string `json:"dnsNames"`
		Usages      []string `json:"usages"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		IssuerRef *struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"issuerRef"`
		// Issuer
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

func readCertManagerObjects(t *testing.T, file string) []certManagerObject {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []certManagerObject
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if string(bytes.TrimSpace(js)) == "null" {
			continue
		}
		var o certManagerObject
		if err := decodeStrict(js, &o); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if o.APIVersion != "cert-manager.io/v1" || (o.Kind != "Certificate" && o.Kind != "Issuer") {
			t.Fatalf("%s: %s %s %s, want cert-manager.io/v1 Certificates and Issuers", file, o.APIVersion, o.Kind, o.Metadata.Name)
		}
		objs = append(objs, o)
	}
	return objs
}

// dnsNameCovers reports whether a certificate name (possibly *.wildcard, one label)
// covers host, as Go's TLS client checks it.
func dnsNameCovers(name, host string) bool {
	if w, ok := strings.CutPrefix(name, "*."); ok {
		label, rest, found := strings.Cut(host, ".")
		return found && label != "" && rest == w
	}
	return name == host
}
