package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"tollgate/edge/limit"
	"tollgate/infra/config"
	"tollgate/infra/natsconn"
)

// objects is one kustomize build, decoded into the Kubernetes types.
type objects struct {
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	secrets      []*corev1.Secret
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	pdbs         []*policyv1.PodDisruptionBudget
}

// decodeStrict decodes one object's JSON into v, refusing fields v's type does not have:
// a misspelt or misplaced field in a manifest fails here, not at kubectl apply.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

// build runs kustomize on dir, as `kubectl apply -k dir` would, and decodes every object.
func build(t *testing.T, dir string) *objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var o objects
	for _, r := range rm.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %s: %v", dir, r.CurId(), err)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(data, &tm); err != nil {
			t.Fatalf("%s: %s: %v", dir, r.CurId(), err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			v := new(appsv1.Deployment)
			o.deployments, obj = append(o.deployments, v), v
		case "apps/v1 StatefulSet":
			v := new(appsv1.StatefulSet)
			o.statefulSets, obj = append(o.statefulSets, v), v
		case "v1 Service":
			v := new(corev1.Service)
			o.services, obj = append(o.services, v), v
		case "v1 ConfigMap":
			v := new(corev1.ConfigMap)
			o.configMaps, obj = append(o.configMaps, v), v
		case "v1 Secret":
			v := new(corev1.Secret)
			o.secrets, obj = append(o.secrets, v), v
		case "autoscaling/v2 HorizontalPodAutoscaler":
			v := new(autoscalingv2.HorizontalPodAutoscaler)
			o.hpas, obj = append(o.hpas, v), v
		case "policy/v1 PodDisruptionBudget":
			v := new(policyv1.PodDisruptionBudget)
			o.pdbs, obj = append(o.pdbs, v), v
		default:
			t.Fatalf("%s: %s has apiVersion %q kind %q, which this test does not decode: add its Go type here", dir, r.CurId(), tm.APIVersion, tm.Kind)
		}
		if err := decodeStrict(data, obj); err != nil {
			t.Fatalf("%s: %s %s does not decode strictly into its Kubernetes type: %v", dir, tm.Kind, r.GetName(), err)
		}
	}
	return &o
}

func (o *objects) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	for _, d := range o.deployments {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

func (o *objects) configMap(t *testing.T, prefix string) *corev1.ConfigMap {
	t.Helper()
	for _, c := range o.configMaps {
		if strings.HasPrefix(c.Name, prefix+"-") || c.Name == prefix {
			return c
		}
	}
	t.Fatalf("no ConfigMap %s", prefix)
	return nil
}

// podTemplates are every workload's pod template, by workload name.
func (o *objects) podTemplates() map[string]*corev1.PodTemplateSpec {
	m := map[string]*corev1.PodTemplateSpec{}
	for _, d := range o.deployments {
		m["Deployment/"+d.Name] = &d.Spec.Template
	}
	for _, s := range o.statefulSets {
		m["StatefulSet/"+s.Name] = &s.Spec.Template
	}
	return m
}

// readmeSettings are the TOLLGATE_* names of the table in docs/configuration.md.
func readmeSettings(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(data)
	names := map[string]bool{}
	name := regexp.MustCompile("`(TOLLGATE_[A-Z0-9_]+)`")
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `TOLLGATE_") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			names[m[1]] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d settings in the table of docs/configuration.md", len(names))
	}
	return names
}

// overlays are the directories built in CI: each overlay, and prod with each edge size.
func overlays(t *testing.T) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	entries, err := os.ReadDir("overlays")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			dirs[e.Name()] = filepath.Join("overlays", e.Name())
		}
	}
	if dirs["dev"] == "" || dirs["prod"] == "" {
		t.Fatalf("overlays are %v, want dev and prod among them", dirs)
	}
	// prod with each size component on top: what an operator gets by swapping the
	// component prod names.
	abs, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	for _, size := range []string{"1", "4", "8"} {
		dir := filepath.Join(tmp, "prod-edge-"+size+"cpu")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// kustomize takes other kustomizations by relative path only.
		rel := func(p string) string {
			r, err := filepath.Rel(dir, filepath.Join(abs, p))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n",
			rel("overlays/prod"), rel("components/edge-"+size+"cpu"))
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs["prod-edge-"+size+"cpu"] = dir
	}
	return dirs
}

// TestDeployManifests builds every overlay with kustomize, decodes every object strictly
// into its Kubernetes type and checks what a fleet relies on.
func TestDeployManifests(t *testing.T) {
	settings := readmeSettings(t)
	checkREADMEOperatorSecrets(t)
	dirs := overlays(t)
	names := make([]string, 0, len(dirs))
	for n := range dirs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			o := build(t, dirs[name])
			checkSettings(t, o, settings)
			checkProgramConfig(t, o)
			checkReferences(t, o, name == "dev")
			checkEdge(t, o)
			checkServices(t, o)
			checkAdminPorts(t, o)
			checkCommands(t, o)
			prod := strings.HasPrefix(name, "prod")
			if prod {
				checkNATSSecured(t, o)
				checkEdgeTLS(t, o)
				api := o.deployment(t, "tollgate-api")
				if api.Spec.Replicas == nil || *api.Spec.Replicas < 2 {
					t.Errorf("prod api replicas = %d, want at least 2", ptrValue(api.Spec.Replicas))
				}
				if got := o.configMap(t, "tollgate-config").Data["TOLLGATE_NATS_REPLICAS"]; got != "3" {
					t.Errorf("prod TOLLGATE_NATS_REPLICAS = %q, want 3", got)
				}
				if len(o.secrets) != 0 {
					t.Errorf("prod ships %d Secret(s): its Secret is the operator's, never in git", len(o.secrets))
				}
				for _, d := range o.deployments {
					for _, c := range d.Spec.Template.Spec.Containers {
						if !strings.Contains(c.Image, "/") || !strings.Contains(c.Image, ":") {
							t.Errorf("prod %s container %s image %q is not a registry image with a tag", d.Name, c.Name, c.Image)
						}
					}
				}
			}
			if name == "prod-cells" {
				checkCells(t, o)
			}
			if size, ok := strings.CutPrefix(name, "prod-edge-"); ok {
				want := strings.TrimSuffix(size, "cpu")
				edge := o.deployment(t, "tollgate-edge").Spec.Template.Spec.Containers[0]
				if got := edge.Resources.Requests.Cpu().String(); got != want {
					t.Errorf("edge CPU request = %s, want %s", got, want)
				}
				if got := edge.Resources.Limits.Cpu().String(); got != want {
					t.Errorf("edge CPU limit = %s, want %s (GOMAXPROCS follows the limit)", got, want)
				}
				// Go's own reading of the limit never goes below 2 Ps; the pod's
				// GOMAXPROCS is the limit itself.
				i := slices.IndexFunc(edge.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMAXPROCS" })
				if i < 0 || edge.Env[i].ValueFrom == nil || edge.Env[i].ValueFrom.ResourceFieldRef == nil ||
					edge.Env[i].ValueFrom.ResourceFieldRef.Resource != "limits.cpu" || edge.Env[i].ValueFrom.ResourceFieldRef.Divisor.String() != "1" {
					t.Errorf("edge GOMAXPROCS is not the container's limits.cpu (divisor 1): %+v", edge.Env)
				}
			}
		})
	}
}

// checkSettings: every TOLLGATE_* a pod is given, by env or through its ConfigMap or
// Secret, is a setting the README documents, and the listeners bind beyond loopback.
func checkSettings(t *testing.T, o *objects, settings map[string]bool) {
	t.Helper()
	check := func(where, name string) {
		if strings.HasPrefix(name, "TOLLGATE_") && !settings[name] {
			t.Errorf("%s sets %s, which the table of docs/configuration.md does not list", where, name)
		}
	}
	for w, pt := range o.podTemplates() {
		for _, c := range append(slices.Clone(pt.Spec.InitContainers), pt.Spec.Containers...) {
			for _, e := range c.Env {
				check(w+" container "+c.Name, e.Name)
			}
		}
	}
	for _, c := range o.configMaps {
		for k, v := range c.Data {
			check("ConfigMap "+c.Name, k)
			if strings.HasSuffix(k, "_ADDR") {
				host, _, err := net.SplitHostPort(v)
				if err != nil || host != "0.0.0.0" {
					t.Errorf("ConfigMap %s: %s = %q, want 0.0.0.0:port (a pod is reached on its own address)", c.Name, k, v)
				}
			}
		}
	}
	for _, s := range o.secrets {
		for k := range s.Data {
			check("Secret "+s.Name, k)
		}
	}
}

// operatorSecrets stand in for the Secret prod leaves to the operator, in the forms the
// README documents (a multi-host Postgres URL, a Redis Cluster URL).
var operatorSecrets = map[string]string{
	"TOLLGATE_DATABASE_URL": "postgres://tollgate:secret@pg-a:5432,pg-b:5432/tollgate?target_session_attrs=read-write",
	"TOLLGATE_REDIS_URL":    "redis://:secret@redis-0:6379?addr=redis-1:6379&addr=redis-2:6379",
	"TOLLGATE_ADMIN_TOKEN":  "tgadm_operator_0123456789abcdef",
	"TOLLGATE_SMTP_URL":     "smtps://mailer:secret@smtp.example.com:465",
	"TOLLGATE_STRIPE_KEY":   "sk_test_0123456789",
}

// checkProgramConfig gives each Tollgate container's environment, as the kubelet would
// build it, to the program's own settings parser: the deploy files hold no value the
// processes would refuse at start.
func checkProgramConfig(t *testing.T, o *objects) {
	t.Helper()
	for _, d := range o.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			env := o.containerEnv(d.Name, c)
			cfg, err := config.FromEnv(func(k string) string { return env[k] })
			if err != nil {
				t.Errorf("%s: the settings it is given are refused: %v", d.Name, err)
				continue
			}
			if err := natsconn.CheckServers(cfg.NATSURL); err != nil {
				t.Errorf("%s: %v", d.Name, err)
			}
			if cfg.RedisURL != "" {
				if _, err := limit.ParseRedisURL(cfg.RedisURL); err != nil {
					t.Errorf("%s: TOLLGATE_REDIS_URL: %v", d.Name, err)
				}
			}
		}
	}
}

// containerEnv is a container's environment as the kubelet builds it: its ConfigMaps,
// then its own variables, Secret keys from the build's Secrets (else operatorSecrets, for
// the Secret prod leaves to the operator), field references as the pod's name.
func (o *objects) containerEnv(workload string, c corev1.Container) map[string]string {
	configMaps := map[string]map[string]string{}
	for _, cm := range o.configMaps {
		configMaps[cm.Name] = cm.Data
	}
	secrets := map[string]map[string][]byte{}
	for _, s := range o.secrets {
		secrets[s.Name] = s.Data
	}
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			for k, v := range configMaps[ef.ConfigMapRef.Name] {
				env[k] = v
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if data, ok := secrets[ref.Name]; ok {
				if v, ok := data[ref.Key]; ok {
					env[e.Name] = string(v)
				}
			} else {
				env[e.Name] = operatorSecrets[ref.Key]
			}
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = workload + "-7d9f8c6b5-x2k4p"
		}
	}
	return env
}

// checkReferences: every ConfigMap a pod reads is in the build; so is every Secret when
// the overlay ships it (dev), and when it does not (prod) the keys read are the documented
// secret settings.
func checkReferences(t *testing.T, o *objects, shipsSecret bool) {
	t.Helper()
	has := map[string]bool{}
	for _, c := range o.configMaps {
		has["ConfigMap/"+c.Name] = true
	}
	secretKeys := map[string]map[string]bool{}
	for _, s := range o.secrets {
		secretKeys[s.Name] = map[string]bool{}
		for k := range s.Data {
			secretKeys[s.Name][k] = true
		}
	}
	secretSettings := map[string]bool{"TOLLGATE_DATABASE_URL": true, "TOLLGATE_REDIS_URL": true, "TOLLGATE_ADMIN_TOKEN": true,
		"TOLLGATE_SMTP_URL": true, "TOLLGATE_STRIPE_KEY": true}
	for w, pt := range o.podTemplates() {
		for _, c := range pt.Spec.Containers {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && !has["ConfigMap/"+ef.ConfigMapRef.Name] {
					t.Errorf("%s reads ConfigMap %s, which is not in the build", w, ef.ConfigMapRef.Name)
				}
				if ef.SecretRef != nil {
					t.Errorf("%s takes a whole Secret (%s): name each secret setting, so each process gets only its own", w, ef.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					if secretSettings[e.Name] {
						t.Errorf("%s sets %s in the clear: it belongs in the Secret", w, e.Name)
					}
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if !secretSettings[ref.Key] {
					t.Errorf("%s reads key %s of Secret %s, not a secret setting", w, ref.Key, ref.Name)
				}
				if shipsSecret {
					optional := ref.Optional != nil && *ref.Optional
					if keys, ok := secretKeys[ref.Name]; !ok || (!keys[ref.Key] && !optional) {
						t.Errorf("%s reads %s from Secret %s, which the build does not hold", w, ref.Key, ref.Name)
					}
				}
			}
		}
	}
	for _, c := range o.configMaps {
		for k := range c.Data {
			if secretSettings[k] {
				t.Errorf("ConfigMap %s holds %s: it belongs in the Secret", c.Name, k)
			}
		}
	}
}

// checkEdge: readiness on the admin port's /readyz, a preStop pause then a grace period
// covering the drain, the autoscaler owning the replicas, and the disruption budget and
// autoscaler pointing at the edge.
func checkEdge(t *testing.T, o *objects) {
	t.Helper()
	edge := o.deployment(t, "tollgate-edge")
	if edge.Spec.Replicas != nil {
		t.Errorf("edge Deployment sets replicas %d: the HorizontalPodAutoscaler owns them, and applying again would reset them", *edge.Spec.Replicas)
	}
	spec := edge.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("edge pod has %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	adminPort := containerPort(c, "admin")
	if want := settingPort(t, o, "TOLLGATE_EDGE_ADMIN_ADDR"); adminPort != want {
		t.Errorf("edge container port admin = %d, TOLLGATE_EDGE_ADMIN_ADDR listens on %d", adminPort, want)
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.String() != "admin" {
		t.Errorf("edge readiness probe = %+v, want GET /readyz on the admin port", rp)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 5 {
		t.Fatalf("edge has no preStop sleep of at least 5 s (load balancers must drop it before it drains): %+v", c.Lifecycle)
	}
	// The edge drains in-flight requests for up to config.ShutdownGrace after SIGTERM,
	// which comes after preStop.
	pause, drain := c.Lifecycle.PreStop.Sleep.Seconds, int64(config.ShutdownGrace/time.Second)
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < pause+drain+5 {
		t.Errorf("edge terminationGracePeriodSeconds = %d, want at least preStop %d + drain %d + 5", ptrValue(g), pause, drain)
	}
	if lim := c.Resources.Limits.Cpu(); lim.IsZero() || lim.Cmp(*c.Resources.Requests.Cpu()) != 0 {
		t.Errorf("edge CPU limit %s != request %s: GOMAXPROCS follows the limit, and the autoscaler the request", lim, c.Resources.Requests.Cpu())
	}
	podLabels := labels.Set(edge.Spec.Template.Labels)
	found := false
	for _, p := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			t.Fatalf("PodDisruptionBudget %s: %v", p.Name, err)
		}
		if !sel.Empty() && sel.Matches(podLabels) {
			found = true
			if p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
				t.Errorf("PodDisruptionBudget %s bounds nothing", p.Name)
			}
		}
	}
	if !found {
		t.Errorf("no PodDisruptionBudget selects the edge pods (labels %v)", podLabels)
	}
	found = false
	for _, h := range o.hpas {
		if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == edge.Name {
			found = true
			if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
				t.Errorf("HorizontalPodAutoscaler %s: min %d max %d", h.Name, ptrValue(h.Spec.MinReplicas), h.Spec.MaxReplicas)
			}
		}
	}
	if !found {
		t.Error("no HorizontalPodAutoscaler scales the edge Deployment")
	}
	for w, pt := range o.podTemplates() {
		for _, c := range pt.Spec.Containers {
			if c.ReadinessProbe == nil {
				t.Errorf("%s container %s has no readiness probe", w, c.Name)
			}
		}
	}
}

// checkServices: every Service selects some workload's pods, on ports they declare.
func checkServices(t *testing.T, o *objects) {
	t.Helper()
	for _, s := range o.services {
		var matched *corev1.PodTemplateSpec
		for _, pt := range o.podTemplates() {
			if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pt.Labels)) {
				matched = pt
			}
		}
		if matched == nil {
			t.Errorf("Service %s selects no workload's pods (selector %v)", s.Name, s.Spec.Selector)
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.StrVal == "" {
				continue
			}
			ok := false
			for _, c := range matched.Spec.Containers {
				ok = ok || containerPort(c, p.TargetPort.StrVal) != 0
			}
			if !ok {
				t.Errorf("Service %s targets port %q, which its pods do not name", s.Name, p.TargetPort.StrVal)
			}
		}
	}
}

// checkAdminPorts: each process's admin port is the one its setting listens on, and the
// one Prometheus scrapes (the port named admin of the pods prometheus.yml keeps).
func checkAdminPorts(t *testing.T, o *objects) {
	t.Helper()
	jobs := scrapeJobs(t)
	for _, x := range []struct{ deployment, setting string }{
		{"tollgate-edge", "TOLLGATE_EDGE_ADMIN_ADDR"},
		{"tollgate-api", "TOLLGATE_API_ADMIN_ADDR"},
		{"tollgate-billing", "TOLLGATE_BILLING_ADMIN_ADDR"},
	} {
		d := o.deployment(t, x.deployment)
		port := containerPort(d.Spec.Template.Spec.Containers[0], "admin")
		if want := settingPort(t, o, x.setting); port != want {
			t.Errorf("%s admin port = %d, %s listens on %d", d.Name, port, x.setting, want)
		}
		if keep, ok := jobs[x.deployment]; !ok || keep != d.Spec.Template.Labels["app.kubernetes.io/name"] {
			t.Errorf("prometheus.yml job %s keeps pods named %q, the Deployment's pods are %q", x.deployment, keep, d.Spec.Template.Labels["app.kubernetes.io/name"])
		}
	}
}

// checkCommands: the edge runs the image's edge-only binary, which maps less than
// tollgate and holds none of the api's and billing's code; the api and billing run the
// image's entrypoint, tollgate, with their subcommand. (TestImage checks the image holds
// that binary and tollgate those subcommands.)
func checkCommands(t *testing.T, o *objects) {
	t.Helper()
	for _, x := range []struct {
		deployment    string
		command, args []string
	}{
		{"tollgate-edge", []string{"/usr/local/bin/tollgate-edge"}, nil},
		{"tollgate-api", nil, []string{"api"}},
		{"tollgate-billing", nil, []string{"billing"}},
	} {
		c := o.deployment(t, x.deployment).Spec.Template.Spec.Containers[0]
		if !slices.Equal(c.Command, x.command) || !slices.Equal(c.Args, x.args) {
			t.Errorf("%s container %s: command %q args %q, want command %q args %q", x.deployment, c.Name, c.Command, c.Args, x.command, x.args)
		}
	}
}

// ptrValue is *p, or 0 for an unset field.
func ptrValue[T int32 | int64](p *T) T {
	if p == nil {
		return 0
	}
	return *p
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func settingPort(t *testing.T, o *objects, setting string) int32 {
	t.Helper()
	addr := o.configMap(t, "tollgate-config").Data[setting]
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s = %q: %v", setting, addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("%s = %q: %v", setting, addr, err)
	}
	return int32(n)
}

// scrapeJobs reads prometheus.yml: each job's name and the app.kubernetes.io/name it keeps.
// (Debian's promtool is built without Kubernetes discovery, so `promtool check config`
// cannot read this file; the test checks what it relies on instead.)
func scrapeJobs(t *testing.T) map[string]string {
	t.Helper()
	var cfg struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName        string `json:"job_name"`
			RelabelConfigs []struct {
				SourceLabels []string `json:"source_labels"`
				Regex        string   `json:"regex"`
				Action       string   `json:"action"`
			} `json:"relabel_configs"`
		} `json:"scrape_configs"`
	}
	data, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	if !slices.Equal(cfg.RuleFiles, []string{"rules.yml"}) {
		t.Errorf("prometheus.yml rule_files = %v, want [rules.yml]", cfg.RuleFiles)
	}
	jobs := map[string]string{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, rc := range sc.RelabelConfigs {
			if rc.Action == "keep" && slices.Equal(rc.SourceLabels, []string{"__meta_kubernetes_pod_label_app_kubernetes_io_name"}) {
				jobs[sc.JobName] = rc.Regex
			}
		}
	}
	return jobs
}

// TestDeployNATSValues: the chart values ask for 3 servers with JetStream on files, TLS on
// the client port and the routes with the certificate of nats/certificates.yaml, whose
// names cover every server prod's processes dial, and operator-mode accounts from the
// mounted auth.conf.
func TestDeployNATSValues(t *testing.T) {
	data, err := os.ReadFile("nats/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v natsValues
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	c := v.Config
	if !c.Cluster.Enabled || c.Cluster.Replicas != 3 || !c.JetStream.Enabled || !c.JetStream.FileStore.Enabled ||
		!c.JetStream.FileStore.PVC.Enabled || c.JetStream.FileStore.PVC.Size == "" {
		t.Errorf("nats/values.yaml: %+v, want a 3-node cluster with JetStream file storage on volume claims", c)
	}
	serverSecret := c.NATS.TLS.SecretName
	if !c.NATS.TLS.Enabled || serverSecret == "" || !c.Cluster.TLS.Enabled || c.Cluster.TLS.SecretName != serverSecret {
		t.Errorf("nats/values.yaml: client TLS %+v, cluster TLS %+v: want both on, with one certificate Secret", c.NATS.TLS, c.Cluster.TLS)
	}
	if !v.TLSCA.Enabled || v.TLSCA.SecretName != serverSecret || v.TLSCA.Key != "ca.crt" {
		t.Errorf("nats/values.yaml tlsCA = %+v, want the CA (ca.crt) of %s, which routes verify their peers with", v.TLSCA, serverSecret)
	}

	// Operator mode: auth.conf from a mounted Secret, included by the chart's nats.conf
	// (/etc/nats-config/nats.conf, so ../x is /etc/x).
	include, _ := c.Merge["$include"].(string)
	authFile := path.Join("/etc/nats-config", include)
	mounted := false
	for _, op := range v.Container.Patch {
		mp, _ := op.Value["mountPath"].(string)
		if op.Op != "add" || op.Path != "/volumeMounts/-" || include == "" || path.Dir(authFile) != path.Clean(mp) {
			continue
		}
		for _, pop := range v.PodTemplate.Patch {
			sec, _ := pop.Value["secret"].(map[string]any)
			if pop.Op == "add" && pop.Path == "/spec/volumes/-" && pop.Value["name"] == op.Value["name"] && sec != nil && sec["secretName"] != "" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("nats/values.yaml includes %q (%s), which no Secret volume mounted into the nats container holds", include, authFile)
	}

	// The certificate: made by cert-manager into the Secret the values name, for every
	// server name prod's processes dial and the routes use, for servers and clients
	// (a server dialing a route presents it), by an issuer of the same file.
	objs := readCertManagerObjects(t, "nats/certificates.yaml")
	issuers := map[string]certManagerObject{}
	for _, o := range objs {
		if o.Kind == "Issuer" {
			issuers[o.Metadata.Name] = o
		}
	}
	var cert *certManagerObject
	for i, o := range objs {
		if o.Kind == "Certificate" && o.Spec.SecretName == serverSecret {
			cert = &objs[i]
		}
	}
	if cert == nil {
		t.Fatalf("nats/certificates.yaml has no Certificate for Secret %s", serverSecret)
	}
	if cert.Spec.IssuerRef == nil || cert.Spec.IssuerRef.Kind != "Issuer" || issuers[cert.Spec.IssuerRef.Name].Spec.CA == nil {
		t.Errorf("Certificate %s is not issued by a CA Issuer of nats/certificates.yaml (so ca.crt would not be the CA clients trust)", cert.Metadata.Name)
	}
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(cert.Spec.Usages, u) {
			t.Errorf("Certificate %s usages %v lack %q", cert.Metadata.Name, cert.Spec.Usages, u)
		}
	}
	prod := build(t, "overlays/prod")
	hosts := checkNATSSecured(t, prod)
	// The chart's routes name the pods by their fully qualified names.
	ns := "tollgate"
	for i := range c.Cluster.Replicas {
		hosts = append(hosts, fmt.Sprintf("nats-%d.nats-headless.%s.svc.cluster.local", i, ns))
	}
	for _, h := range hosts {
		if !slices.ContainsFunc(cert.Spec.DNSNames, func(n string) bool { return dnsNameCovers(n, h) }) {
			t.Errorf("Certificate %s names %v, none of which covers %s: a TLS client checking the host name refuses the server", cert.Metadata.Name, cert.Spec.DNSNames, h)
		}
	}
}

var (
	promtoolOnce sync.Once
	promtoolPath string
	promtoolErr  error
)

// promtool finds Prometheus's promtool, or fetches Debian's prometheus package and unpacks
// it into the user's cache directory (nothing installed, no service started). The test
// fails, never skips, when it cannot.
func promtool(t *testing.T) string {
	t.Helper()
	promtoolOnce.Do(func() { promtoolPath, promtoolErr = findPromtool() })
	if promtoolErr != nil {
		t.Fatalf("promtool: %v (install Debian's prometheus package, or put promtool on PATH)", promtoolErr)
	}
	return promtoolPath
}

func findPromtool() (string, error) {
	if p, err := exec.LookPath("promtool"); err == nil {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "tollgate", "prometheus-deb")
	bin := filepath.Join(dir, "usr", "bin", "promtool")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp, err := os.MkdirTemp("", "tollgate-promtool-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	run := func(name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	fmt.Fprintln(os.Stderr, "infra/deploy: fetching promtool from Debian's prometheus package")
	if err := run("apt-get", "download", "prometheus"); err != nil {
		// The package lists may be missing on a fresh machine; refreshing them needs root.
		if uerr := run("apt-get", "update", "-qq"); uerr != nil {
			return "", fmt.Errorf("%v; %v", err, uerr)
		}
		if err := run("apt-get", "download", "prometheus"); err != nil {
			return "", err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "prometheus_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download left %v", debs)
	}
	unpacked := filepath.Join(tmp, "x")
	if err := run("dpkg-deb", "-x", debs[0], unpacked); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(unpacked, dir); err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("the prometheus package has no usr/bin/promtool: %v", err)
	}
	return bin, nil
}

// TestDeployRules runs `promtool check rules` on the rules and `promtool test rules` on
// their unit tests.
func TestDeployRules(t *testing.T) {
	pt := promtool(t)
	out, err := exec.Command(pt, "check", "rules", "prometheus/rules.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	rules := loadRules(t)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if r.Annotations["summary"] == "" || !strings.Contains(r.Annotations["description"], "What to do:") {
				t.Errorf("alert %s needs a summary and a description that says what to do", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s severity %q, want critical, warning or info", r.Alert, s)
			}
		}
	}

	// The unit tests name each alert's labels and summary; its description (the runbook)
	// is copied in from rules.yml here, so editing a runbook does not break them.
	descriptions := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				descriptions[r.Alert] = r.Annotations["description"]
			}
		}
	}
	data, err := os.ReadFile("prometheus/rules_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tests map[string]any
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	cases := 0
	for _, tc := range tests["tests"].([]any) {
		for _, at := range tc.(map[string]any)["alert_rule_test"].([]any) {
			at := at.(map[string]any)
			name := at["alertname"].(string)
			exp, _ := at["exp_alerts"].([]any)
			for _, e := range exp {
				ann, _ := e.(map[string]any)["exp_annotations"].(map[string]any)
				if ann == nil {
					t.Fatalf("rules_test.yml: an expected %s alert has no exp_annotations.summary", name)
				}
				ann["description"] = descriptions[name]
			}
			cases++
		}
	}
	filled, err := yaml.Marshal(tests)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rulesYML, err := os.ReadFile("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rulesYML, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yml"), filled, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pt, "test", "rules", "rules_test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if cases < 10 {
		t.Errorf("rules_test.yml has %d alert cases, want at least 10", cases)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record      string            `json:"record"`
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) *ruleFile {
	t.Helper()
	data, err := os.ReadFile("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatalf("rules.yml: %v", err)
	}
	return &rf
}

// runtimeMetrics are the series of client_golang's Go and process collectors, and
// Prometheus's own up, that the rules and dashboard read besides Tollgate's.
var runtimeMetrics = []string{"up", "process_cpu_seconds_total", "process_resident_memory_bytes",
	"go_memstats_heap_inuse_bytes", "go_goroutines"}

// exportedMetrics are the metric names the code registers: every quoted tollgate_* or
// http_* string of the module's non-test Go files (a superset: it also holds a few
// non-metric strings, which no expression names).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, n := range runtimeMetrics {
		names[n] = true
	}
	quoted := regexp.MustCompile(`"((?:tollgate|http)_[a-z0-9_]+)"`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "testdata" || n == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range quoted.FindAllSubmatch(data, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlTokens   = regexp.MustCompile(`[A-Za-z0-9_:.$]+(\s*\()?`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"inf": true, "nan": true, "by": true, "without": true, "on": true, "ignoring": true,
		"group_left": true, "group_right": true}
)

// metricNames are the metric (and recording rule) names a PromQL expression reads:
// strings, label matchers, ranges and grouping labels removed, what remains that is an
// identifier not followed by "(" (a function) nor a keyword.
func metricNames(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlRanges.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, m := range promqlTokens.FindAllStringSubmatch(e, -1) {
		tok := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[0]), "("))
		if m[1] != "" || tok == "" || promqlKeywords[tok] {
			continue
		}
		if c := tok[0]; c >= '0' && c <= '9' || c == '.' || c == '$' {
			continue
		}
		names = append(names, tok)
	}
	return names
}

// TestDeployMetricNames: every expression of the rules and the dashboard reads only
// metrics the code exports (or recording rules the rules define), so a renamed metric
// breaks CI rather than an alert that can never fire.
func TestDeployMetricNames(t *testing.T) {
	if got := metricNames(`sum by (le) (rate(tollgate_nope_total{job="x", a=~"b|c"}[5m])) / on(pod) group_left up > 1e3 and bool x:y:z offset 5m`); !slices.Equal(got, []string{"tollgate_nope_total", "up", "x:y:z"}) {
		t.Fatalf("metricNames extracts %v", got)
	}
	known := exportedMetrics(t)
	exists := func(name string) bool {
		if known[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && known[base] {
				return true
			}
		}
		return false
	}
	rules := loadRules(t)
	exprs := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
				exprs["rules.yml "+r.Record] = r.Expr
			} else {
				exprs["rules.yml "+r.Alert] = r.Expr
			}
		}
	}
	for where, expr := range dashboardExprs(t) {
		exprs[where] = expr
	}
	for where, expr := range exprs {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q reads no metric", where, expr)
		}
		for _, n := range names {
			if !exists(n) {
				t.Errorf("%s reads %s, which no code exports nor rule records", where, n)
			}
		}
	}
}

// dashboardExprs parses the Grafana dashboard, checks its panels' basics and returns
// every query by panel.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("grafana/tollgate.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		ID         int            `json:"id"`
		Type       string         `json:"type"`
		Title      string         `json:"title"`
		Datasource map[string]any `json:"datasource"`
		GridPos    struct{ H, W, X, Y int }
		Targets    []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/tollgate.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Error("the dashboard needs a title and a uid")
	}
	vars := map[string]bool{"__rate_interval": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	variable := regexp.MustCompile(`\$\{?(\w+)`)
	exprs := map[string]string{}
	ids := map[int]bool{}
	graphs := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		graphs++
		if p.Title == "" || p.GridPos.W == 0 || p.GridPos.H == 0 || p.Datasource["uid"] != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %d %q needs a title, a size, the ${datasource} data source and a query", p.ID, p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range variable.FindAllStringSubmatch(tg.Expr, -1) {
				if !vars[m[1]] {
					t.Errorf("panel %q query %s names the undefined variable $%s", p.Title, tg.RefID, m[1])
				}
			}
			exprs[fmt.Sprintf("dashboard panel %q query %s", p.Title, tg.RefID)] = tg.Expr
		}
	}
	if graphs < 20 {
		t.Errorf("the dashboard has %d panels, want the fleet's main ones (at least 20)", graphs)
	}
	return exprs
}

// checkCells: the second cell's edge pool follows its cell, its pods are its own (neither
// pool's Service, budget or spread selects the other's), it is built like the default
// pool, and the api and billing declare both cells.
func checkCells(t *testing.T, o *objects) {
	t.Helper()
	envOf := func(d *appsv1.Deployment, name string) string {
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	a, b := o.deployment(t, "tollgate-edge"), o.deployment(t, "tollgate-edge-b")
	if got := envOf(b, "TOLLGATE_EDGE_CELL"); got != "b" {
		t.Errorf("tollgate-edge-b TOLLGATE_EDGE_CELL = %q, want b", got)
	}
	if got := envOf(a, "TOLLGATE_EDGE_CELL"); got != "" {
		t.Errorf("tollgate-edge TOLLGATE_EDGE_CELL = %q, want unset (the default cell)", got)
	}
	for _, name := range []string{"tollgate-api", "tollgate-billing"} {
		if got := envOf(o.deployment(t, name), "TOLLGATE_CELLS"); got != "default;b" {
			t.Errorf("%s TOLLGATE_CELLS = %q, want default;b", name, got)
		}
	}
	pods := map[string]labels.Set{"tollgate-edge": a.Spec.Template.Labels, "tollgate-edge-b": b.Spec.Template.Labels}
	for _, s := range o.services {
		for pool, l := range pods {
			if strings.HasPrefix(s.Name, "tollgate-edge") && labels.SelectorFromSet(s.Spec.Selector).Matches(l) != (s.Name == pool) {
				t.Errorf("Service %s selects the pods of %s: %v", s.Name, pool, s.Spec.Selector)
			}
		}
	}
	for _, p := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		for pool, l := range pods {
			if strings.HasPrefix(p.Name, "tollgate-edge") && sel.Matches(l) != (p.Name == pool) {
				t.Errorf("PodDisruptionBudget %s selects the pods of %s", p.Name, pool)
			}
		}
	}
	for _, h := range o.hpas {
		if strings.HasPrefix(h.Name, "tollgate-edge") && h.Spec.ScaleTargetRef.Name != h.Name {
			t.Errorf("HorizontalPodAutoscaler %s scales %s", h.Name, h.Spec.ScaleTargetRef.Name)
		}
	}
	ca, cb := a.Spec.Template.Spec.Containers[0], b.Spec.Template.Spec.Containers[0]
	if !ca.Resources.Limits.Cpu().Equal(*cb.Resources.Limits.Cpu()) || len(ca.VolumeMounts) != len(cb.VolumeMounts) || len(ca.Ports) != len(cb.Ports) {
		t.Errorf("tollgate-edge-b is not built like tollgate-edge: cpu %s / %s, mounts %d / %d, ports %d / %d",
			cb.Resources.Limits.Cpu(), ca.Resources.Limits.Cpu(), len(cb.VolumeMounts), len(ca.VolumeMounts), len(cb.Ports), len(ca.Ports))
	}
}
