// Package chartcheck renders the gantry Helm chart (deploy/helm/gantry) with helm's own engine for
// every values file under its ci/ folder and decodes each manifest strictly into the Kubernetes API
// types, so that a misspelt or misplaced field, an unknown kind or a wrong value type fails the
// build. It is a module of its own (make test-helm), so that helm's and Kubernetes' dependencies
// stay out of gantry's go.mod and make test.
package chartcheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../gantry"

// kinds maps apiVersion/kind to a new object of its API type: a manifest of any other kind fails.
var kinds = map[string]func() any{
	"v1/Service":                               func() any { return &corev1.Service{} },
	"v1/ConfigMap":                             func() any { return &corev1.ConfigMap{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                       func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                             func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1/Role":        func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() any { return &rbacv1.RoleBinding{} },
	"networking.k8s.io/v1/NetworkPolicy":       func() any { return &networkingv1.NetworkPolicy{} },
	"monitoring.coreos.com/v1/ServiceMonitor":  func() any { return &serviceMonitor{} },
}

// serviceMonitor is the part of prometheus-operator's ServiceMonitor (monitoring.coreos.com/v1) the
// chart renders, with the CRD's field names, so a misspelt field fails the strict decode as for the
// built-in kinds (the operator's Go module would bring its whole dependency tree for one type).
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// manifest is one decoded document of the rendered chart.
type manifest struct {
	source string // template file
	obj    any
}

// render renders ch with the values file (relative to the chart; "" for the defaults alone) as
// `helm install gantry --namespace gantry -f values` would.
func render(t *testing.T, ch *chart.Chart, valuesFile string) (map[string]string, error) {
	t.Helper()
	vals := chartutil.Values{}
	if valuesFile != "" {
		var err error
		if vals, err = chartutil.ReadValuesFile(filepath.Join(chartDir, valuesFile)); err != nil {
			t.Fatal(err)
		}
	}
	// ToRenderValues checks the values against values.schema.json, as helm install does: a misspelt
	// value (secrets.replica) fails instead of silently leaving the default.
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "gantry", Namespace: "gantry", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

// decode splits every rendered template into documents and decodes each strictly into its type.
func decode(rendered map[string]string) ([]manifest, error) {
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []manifest
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasSuffix(name, ".tpl") {
			continue
		}
		for i, doc := range strings.Split("\n"+rendered[name], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", name, i, err)
			}
			newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
			if !ok {
				return nil, fmt.Errorf("%s document %d: kind %q of apiVersion %q is not one the chart is checked for", name, i, tm.Kind, tm.APIVersion)
			}
			obj := newObj()
			// Strict: an unknown or duplicated field is an error, as `kubectl apply --validate=strict`.
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				return nil, fmt.Errorf("%s document %d (%s): %w", name, i, tm.Kind, err)
			}
			out = append(out, manifest{source: name, obj: obj})
		}
	}
	return out, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func valuesFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{""}
	for _, f := range files {
		out = append(out, filepath.Join("ci", filepath.Base(f)))
	}
	if len(out) < 4 {
		t.Fatalf("values files: %v, want the defaults and ci/*-values.yaml (bolt, etcd, workload identity)", out)
	}
	return out
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestChartRendersStrictly renders the chart for every values file and checks each manifest
// decodes strictly, then the properties the chart promises (docs/deploying.md, "Kubernetes").
func TestChartRendersStrictly(t *testing.T) {
	ch := loadChart(t)
	for _, vf := range valuesFiles(t) {
		name := vf
		if name == "" {
			name = "values.yaml"
		}
		t.Run(filepath.Base(name), func(t *testing.T) {
			rendered, err := render(t, ch, vf)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			ms, err := decode(rendered)
			if err != nil {
				t.Fatal(err)
			}
			checkManifests(t, vf, ms)
		})
	}
}

// podOf returns the pod template of a workload, or nil.
func podOf(obj any) (string, *corev1.PodSpec) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return "Deployment/" + o.Name, &o.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return "StatefulSet/" + o.Name, &o.Spec.Template.Spec
	case *batchv1.Job:
		return "Job/" + o.Name, &o.Spec.Template.Spec
	}
	return "", nil
}

func checkManifests(t *testing.T, valuesFile string, ms []manifest) {
	t.Helper()
	byKind := map[string][]any{}
	for _, m := range ms {
		k := fmt.Sprintf("%T", m.obj)
		byKind[k] = append(byKind[k], m.obj)
		if s, ok := m.obj.(*corev1.Secret); ok {
			t.Errorf("%s renders the Secret %s: the keyring and the CA come from the init job, never from the chart", m.source, s.Name)
		}
		name, pod := podOf(m.obj)
		if pod == nil {
			continue
		}
		isWorkload := strings.Contains(m.source, "workloads.yaml")
		if isWorkload {
			checkRestricted(t, name, pod)
		} else {
			sc := pod.SecurityContext
			if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("%s: pod securityContext must run as 65532, non-root: %+v", name, sc)
			}
			for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
				cs := c.SecurityContext
				if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
					t.Errorf("%s container %s: needs readOnlyRootFilesystem: true and allowPrivilegeEscalation: false", name, c.Name)
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s container %s: needs cpu and memory requests and a memory limit", name, c.Name)
				}
			}
		}
		// Keys: no pod mounts the CA's Secret, and only the secrets pods mount the keyring.
		for _, v := range pod.Volumes {
			if v.Secret == nil {
				continue
			}
			if strings.HasSuffix(v.Secret.SecretName, "-tls-ca") {
				t.Errorf("%s mounts the internal CA's Secret %s", name, v.Secret.SecretName)
			}
			if strings.HasSuffix(v.Secret.SecretName, "-keyring") && !strings.HasSuffix(name, "-secrets") {
				t.Errorf("%s mounts the keyring Secret", name)
			}
		}
		if _, isJob := m.obj.(*batchv1.Job); isJob || isWorkload {
			continue
		}
		for _, c := range pod.Containers {
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s container %s: needs a readiness and a liveness probe", name, c.Name)
			}
		}
	}
	if len(byKind["*v1.PodDisruptionBudget"]) == 0 {
		t.Error("no PodDisruptionBudget")
	}
	jobs := byKind["*v1.Job"]
	if len(jobs) != 1 {
		t.Fatalf("%d init jobs, want 1", len(jobs))
	}
	job := jobs[0].(*batchv1.Job)
	var args []string
	for _, c := range job.Spec.Template.Spec.InitContainers {
		args = append(args, strings.Join(c.Args, " "))
	}
	if joined := strings.Join(args, "\n"); (!strings.Contains(joined, "keyring create") && !strings.Contains(valuesFile, "production")) || !strings.Contains(joined, "tls init --ca-dir") {
		t.Errorf("the init job runs neither gantry keyring create nor gantry tls init:\n%s", joined)
	}

	for _, obj := range byKind["*v1.StatefulSet"] {
		ss := obj.(*appsv1.StatefulSet)
		c := ss.Spec.Template.Spec.Containers[0]
		store := envOf(c, "GANTRY_STORE")
		switch store {
		case "bolt":
			if *ss.Spec.Replicas != 1 || len(ss.Spec.VolumeClaimTemplates) != 1 {
				t.Errorf("bbolt: %s has %d replicas and %d volume claims, want 1 and 1", ss.Name, *ss.Spec.Replicas, len(ss.Spec.VolumeClaimTemplates))
			}
		case "etcd":
			if envOf(c, "GANTRY_ETCD_ENDPOINTS") == "" || len(ss.Spec.VolumeClaimTemplates) != 0 {
				t.Errorf("etcd: %s needs GANTRY_ETCD_ENDPOINTS and no volume", ss.Name)
			}
		default:
			t.Errorf("%s: GANTRY_STORE %q", ss.Name, store)
		}
	}
	// A gateway routes to chat exactly when the chart runs chat: without it (chat.enabled false) it
	// must have no chat upstream, or its cluster of a host that never answers would keep
	// GantryClusterNoHealthyHost firing.
	chatRuns := false
	for _, obj := range byKind["*v1.Deployment"] {
		if strings.HasSuffix(obj.(*appsv1.Deployment).Name, "-chat") {
			chatRuns = true
		}
	}
	for _, obj := range byKind["*v1.Deployment"] {
		d := obj.(*appsv1.Deployment)
		if !strings.HasSuffix(d.Name, "-gateway") {
			continue
		}
		if up := envOf(d.Spec.Template.Spec.Containers[0], "GANTRY_CHAT_UPSTREAM"); chatRuns != (up != "") {
			t.Errorf("gateway GANTRY_CHAT_UPSTREAM = %q while the chart runs chat: %v", up, chatRuns)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if p := c.ReadinessProbe.HTTPGet; p == nil || p.Path != "/healthcheck" || p.Port.String() != "http" {
			t.Errorf("gateway readiness: %+v, want /healthcheck on the REST port", c.ReadinessProbe)
		}
		if p := c.LivenessProbe.HTTPGet; p == nil || p.Path != "/live" || p.Port.String() != "stats" {
			t.Errorf("gateway liveness: %+v, want /live on the stats port", c.LivenessProbe)
		}
		if c.ReadinessProbe.FailureThreshold < 2 || c.ReadinessProbe.TimeoutSeconds < 2 {
			t.Errorf("gateway readiness: failureThreshold %d, timeoutSeconds %d: one slow answer must not take a gateway out",
				c.ReadinessProbe.FailureThreshold, c.ReadinessProbe.TimeoutSeconds)
		}
		// The admin port can drain and stop the gateway: loopback only, and never a container port.
		if admin := envOf(c, "GANTRY_ADMIN_LISTEN"); !strings.HasPrefix(admin, "127.0.0.1:") {
			t.Errorf("gateway GANTRY_ADMIN_LISTEN = %q, want loopback", admin)
		}
		for _, p := range c.Ports {
			if p.ContainerPort == 9901 || p.Name == "admin" {
				t.Errorf("gateway exposes the admin port: %+v", p)
			}
		}
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
			t.Error("gateway: no preStop sleep (a deleted pod must leave the Service's endpoints before SIGTERM)")
		}
		if up := envOf(c, "GANTRY_SECRETS_UPSTREAM"); !strings.Contains(up, "gantry-secrets-0.gantry-secrets:9090") {
			t.Errorf("gateway GANTRY_SECRETS_UPSTREAM = %q, want the StatefulSet's stable names", up)
		}
	}
	// Secrets and chat pods: ready by their services' own health on the stats listener, not a TCP
	// connect that a process without a store still accepts.
	for _, obj := range append(append([]any{}, byKind["*v1.StatefulSet"]...), byKind["*v1.Deployment"]...) {
		name, pod := podOf(obj)
		if !strings.HasSuffix(name, "-secrets") && !strings.HasSuffix(name, "-chat") {
			continue
		}
		c := pod.Containers[0]
		if p := c.ReadinessProbe.HTTPGet; p == nil || p.Path != "/ready" || p.Port.String() != "stats" {
			t.Errorf("%s readiness: %+v, want /ready on the stats port (the services' gRPC health)", name, c.ReadinessProbe)
		}
		if p := c.LivenessProbe.HTTPGet; p == nil || p.Path != "/live" {
			t.Errorf("%s liveness: %+v, want /live (a store that is down must not restart the process)", name, c.LivenessProbe)
		}
	}
	// Every gantry pod: the service account, and by default an anti-affinity of its component.
	for _, obj := range append(append([]any{}, byKind["*v1.StatefulSet"]...), byKind["*v1.Deployment"]...) {
		name, pod := podOf(obj)
		if !strings.HasPrefix(name, "Deployment/gantry-") && !strings.HasPrefix(name, "StatefulSet/gantry-") {
			continue // the workloads of workloads:
		}
		if pod.ServiceAccountName == "" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("%s: service account %q, automount %v: want the chart's account and no API token", name, pod.ServiceAccountName, pod.AutomountServiceAccountToken)
		}
		if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil {
			t.Errorf("%s: no pod anti-affinity: its replicas may all land on one node", name)
		}
	}
	checkNetworkPolicies(t, valuesFile, byKind)
	if strings.Contains(valuesFile, "workload-identity") {
		checkWorkloadIdentity(t, byKind)
	}
	if strings.Contains(valuesFile, "production") {
		checkProduction(t, byKind)
	}
}

// checkNetworkPolicies: by default a policy per component; the services admit gRPC from the
// gateways alone.
func checkNetworkPolicies(t *testing.T, valuesFile string, byKind map[string][]any) {
	t.Helper()
	policies := map[string]*networkingv1.NetworkPolicy{}
	for _, obj := range byKind["*v1.NetworkPolicy"] {
		np := obj.(*networkingv1.NetworkPolicy)
		policies[np.Name] = np
	}
	if len(policies) == 0 {
		t.Fatal("no NetworkPolicy")
	}
	for _, component := range []string{"gateway", "secrets"} {
		if policies["gantry-"+component] == nil {
			t.Errorf("no NetworkPolicy for %s", component)
		}
	}
	np := policies["gantry-secrets"]
	if np == nil {
		return
	}
	for _, rule := range np.Spec.Ingress {
		for _, port := range rule.Ports {
			if port.Port.String() != "grpc" {
				continue
			}
			if len(rule.From) != 1 || rule.From[0].PodSelector == nil || rule.From[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "gateway" {
				t.Errorf("secrets gRPC admitted from %+v, want the gateways alone", rule.From)
			}
		}
	}
	if strings.Contains(valuesFile, "production") && policies["gantry-etcd-clients"] == nil {
		t.Error("store: etcd with networkPolicy.etcd.podSelector: no policy for etcd's clients")
	}
}

// checkProduction: ci/production-values.yaml (kms: aws, placement, a ServiceMonitor) renders what
// it asks for.
func checkProduction(t *testing.T, byKind map[string][]any) {
	t.Helper()
	for _, obj := range byKind["*v1.ServiceAccount"] {
		sa := obj.(*corev1.ServiceAccount)
		if sa.Name == "gantry" && sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
			t.Error("kms: aws: the service account has no role annotation")
		}
	}
	for _, obj := range byKind["*v1.StatefulSet"] {
		ss := obj.(*appsv1.StatefulSet)
		c := ss.Spec.Template.Spec.Containers[0]
		if envOf(c, "GANTRY_KMS") != "aws" || envOf(c, "GANTRY_KMS_MASTER_KEY") == "" {
			t.Errorf("kms: aws: secrets GANTRY_KMS %q, master key %q", envOf(c, "GANTRY_KMS"), envOf(c, "GANTRY_KMS_MASTER_KEY"))
		}
		for _, v := range ss.Spec.Template.Spec.Volumes {
			if v.Secret != nil && strings.HasSuffix(v.Secret.SecretName, "-keyring") {
				t.Error("kms: aws: the secrets pods still mount the keyring Secret")
			}
		}
		pod := ss.Spec.Template.Spec
		if pod.PriorityClassName == "" || len(pod.Tolerations) == 0 || len(pod.NodeSelector) == 0 || len(pod.ImagePullSecrets) == 0 || len(pod.TopologySpreadConstraints) == 0 {
			t.Errorf("secrets pod placement not rendered: %+v", pod)
		}
		if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || len(pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
			t.Error("podAntiAffinity: hard: no required anti-affinity")
		}
		if ss.Spec.Template.Annotations["example.com/team"] == "" || ss.Spec.Template.Labels["example.com/tier"] == "" {
			t.Error("podAnnotations / podLabels not rendered")
		}
	}
	job := byKind["*v1.Job"][0].(*batchv1.Job)
	for _, c := range job.Spec.Template.Spec.InitContainers {
		if strings.Contains(strings.Join(c.Args, " "), "keyring create") {
			t.Error("kms: aws: the init job still creates a keyring")
		}
	}
	if len(byKind["*chartcheck.serviceMonitor"]) != 1 {
		t.Errorf("%d ServiceMonitors, want 1", len(byKind["*chartcheck.serviceMonitor"]))
	}
}

// checkRestricted: a pod of workloads: meets the restricted Pod Security Standard by default, so a
// namespace that enforces it admits it (a real API server refused it before: deploy/helm/kubecheck).
func checkRestricted(t *testing.T, name string, pod *corev1.PodSpec) {
	t.Helper()
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and seccomp RuntimeDefault (restricted)", name, sc)
	}
	for _, c := range pod.Containers {
		cs := c.SecurityContext
		if cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation || cs.Capabilities == nil ||
			len(cs.Capabilities.Drop) != 1 || cs.Capabilities.Drop[0] != "ALL" || (cs.Privileged != nil && *cs.Privileged) {
			t.Errorf("%s container %s: securityContext %+v, want allowPrivilegeEscalation false and capabilities drop ALL (restricted)", name, c.Name, cs)
		}
	}
}

// TestWorkloadSecurityContextOverride: a workload's podSecurityContext and securityContext replace
// the restricted defaults (an image that runs as another user, or as root where a namespace allows).
func TestWorkloadSecurityContextOverride(t *testing.T) {
	ch := loadChart(t)
	vals := chartutil.Values{"workloads": []any{map[string]any{
		"name": "orders", "service": "orders", "image": "x", "command": []any{"/x"},
		"podSecurityContext": map[string]any{"runAsUser": 0},
		"securityContext":    map[string]any{"readOnlyRootFilesystem": true},
	}}}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "gantry", Namespace: "gantry", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := engine.Render(ch, top)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := decode(rendered)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		d, ok := m.obj.(*appsv1.Deployment)
		if !ok || d.Name != "orders" {
			continue
		}
		pod := d.Spec.Template.Spec
		if sc := pod.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot != nil {
			t.Errorf("pod securityContext %+v, want the override alone", sc)
		}
		if cs := pod.Containers[0].SecurityContext; cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem || cs.Capabilities != nil {
			t.Errorf("container securityContext %+v, want the override alone", cs)
		}
		return
	}
	t.Fatal("no orders Deployment")
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// checkWorkloadIdentity: the pod of docs/authenticating-services.md, a projected token for the
// audience gantry, and the secrets service reading the identities file.
func checkWorkloadIdentity(t *testing.T, byKind map[string][]any) {
	t.Helper()
	var found bool
	for _, obj := range byKind["*v1.Deployment"] {
		d := obj.(*appsv1.Deployment)
		if d.Name != "orders" {
			continue
		}
		found = true
		pod := d.Spec.Template.Spec
		if pod.ServiceAccountName != "orders" || d.Namespace != "shop" {
			t.Errorf("orders: service account %q in %q, want orders in shop", pod.ServiceAccountName, d.Namespace)
		}
		var tok *corev1.ServiceAccountTokenProjection
		for _, v := range pod.Volumes {
			if v.Projected != nil {
				for _, s := range v.Projected.Sources {
					if s.ServiceAccountToken != nil {
						tok = s.ServiceAccountToken
					}
				}
			}
		}
		if tok == nil || tok.Audience != "gantry" || tok.Path != "token" || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != 3600 {
			t.Errorf("orders: projected token %+v, want audience gantry, path token, 3600 s", tok)
		}
		c := pod.Containers[0]
		if envOf(c, "GANTRY_ADDR") != "https://gantry.gantry.svc:8443" || envOf(c, "GANTRY_CA_FILE") != "/etc/gantry-ca/ca.pem" {
			t.Errorf("orders: GANTRY_ADDR %q, GANTRY_CA_FILE %q", envOf(c, "GANTRY_ADDR"), envOf(c, "GANTRY_CA_FILE"))
		}
		if cmd := strings.Join(pod.Containers[0].Command, " "); cmd != "gantry env --service orders --token-file /var/run/secrets/gantry/token -- /app/orders" {
			t.Errorf("orders: command %q", cmd)
		}
	}
	if !found {
		t.Error("no orders Deployment")
	}
	for _, obj := range byKind["*v1.StatefulSet"] {
		c := obj.(*appsv1.StatefulSet).Spec.Template.Spec.Containers[0]
		if envOf(c, "GANTRY_WORKLOAD_IDENTITY_FILE") != "/etc/gantry/identities.yaml" {
			t.Error("secrets: GANTRY_WORKLOAD_IDENTITY_FILE is not the mounted identities file")
		}
	}
}

// TestChartTypoFails proves the decode is strict: each broken copy of the chart must fail, naming
// the field.
func TestChartTypoFails(t *testing.T) {
	for _, tc := range []struct{ name, file, old, new, want string }{
		{"misspelt probe", "templates/gateway.yaml", "readinessProbe:", "readinesProbe:", "readinesProbe"},
		{"misspelt volume claims", "templates/secrets.yaml", "volumeClaimTemplates:", "volumeClaimTemplate:", "volumeClaimTemplate"},
		{"misspelt budget", "templates/pdb.yaml", "maxUnavailable:", "maxUnavailble:", "maxUnavailble"},
		// A field at the wrong level: containerPort under the container instead of its ports.
		{"field at the wrong level", "templates/chat.yaml", "          ports:\n            - {name: grpc, containerPort: 9091}\n            - {name: stats, containerPort: 9902}", "          containerPort: 9091", "containerPort"},
		// A wrong type: replicas as a word.
		{"wrong type", "templates/gateway.yaml", "replicas: {{ .Values.gateway.replicas }}", "replicas: two", "replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := loadChart(t)
			var hit bool
			for _, tpl := range ch.Templates {
				if tpl.Name == tc.file {
					if !bytes.Contains(tpl.Data, []byte(tc.old)) {
						t.Fatalf("%s no longer holds %q; update the test", tc.file, tc.old)
					}
					tpl.Data = bytes.Replace(tpl.Data, []byte(tc.old), []byte(tc.new), 1)
					hit = true
				}
			}
			if !hit {
				t.Fatalf("no template %s", tc.file)
			}
			rendered, err := render(t, ch, "")
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			_, err = decode(rendered)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decode of the broken chart: %v, want an error naming %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

// TestChartRefusesBadValues: values.schema.json refuses a misspelt or mistyped value, as helm
// install does, and the templates refuse store: etcd without the cluster.
func TestChartRefusesBadValues(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		name string
		vals chartutil.Values
		want string
	}{
		{"misspelt key", chartutil.Values{"secrets": map[string]any{"replica": 3}}, "replica"},
		{"unknown top-level key", chartutil.Values{"stroe": "etcd"}, "stroe"},
		{"unknown store", chartutil.Values{"store": "postgres"}, "store"},
		{"replicas as a word", chartutil.Values{"gateway": map[string]any{"replicas": "two"}}, "replicas"},
		{"workload without a service", chartutil.Values{"workloads": []any{map[string]any{"name": "orders", "image": "x", "command": []any{"/x"}}}}, "service"},
		{"etcd without endpoints", chartutil.Values{"store": "etcd"}, "etcd.endpoints"},
		{"unknown kms", chartutil.Values{"kms": "vault"}, "kms"},
		{"kms aws without a key", chartutil.Values{"kms": "aws", "aws": map[string]any{"region": "eu-west-1"}}, "masterKey"},
		{"anti-affinity neither soft nor hard", chartutil.Values{"podAntiAffinity": "always"}, "podAntiAffinity"},
		{"misspelt network policy key", chartutil.Values{"networkPolicy": map[string]any{"enable": true}}, "enable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, err := chartutil.ToRenderValues(ch, tc.vals, chartutil.ReleaseOptions{Name: "gantry", Namespace: "gantry", IsInstall: true}, chartutil.DefaultCapabilities)
			if err == nil {
				_, err = engine.Render(ch, top)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("values %v: %v, want an error naming %q", tc.vals, err, tc.want)
			}
		})
	}
}

func TestMain(m *testing.M) {
	if _, err := os.Stat(filepath.Join(chartDir, "Chart.yaml")); err != nil {
		fmt.Fprintln(os.Stderr, "run from deploy/helm/chartcheck:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
