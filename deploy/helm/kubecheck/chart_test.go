package kubecheck

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

const chartDir = "../gantry"

// release is the namespace the chart is rendered for, as `helm install gantry --namespace gantry`.
const release = "gantry"

// doc is one document of the rendered chart.
type doc struct {
	source string
	obj    *unstructured.Unstructured
}

func (d doc) String() string {
	return fmt.Sprintf("%s %s/%s (%s)", d.obj.GetKind(), d.obj.GetNamespace(), d.obj.GetName(), d.source)
}

// valuesFiles: the defaults ("") and every ci/*-values.yaml, as make test-helm.
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
		t.Fatalf("values files: %v, want the defaults and ci/*-values.yaml", out)
	}
	return out
}

// render renders the chart with a values file as `helm install gantry --namespace gantry -f values`
// would, and splits it into documents.
func render(t *testing.T, valuesFile string) []doc {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := chartutil.Values{}
	if valuesFile != "" {
		if vals, err = chartutil.ReadValuesFile(filepath.Join(chartDir, valuesFile)); err != nil {
			t.Fatal(err)
		}
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "gantry", Namespace: release, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := engine.Render(ch, top)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	var docs []doc
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasSuffix(name, ".tpl") {
			continue
		}
		for i, text := range strings.Split("\n"+rendered[name], "\n---") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(text), &m); err != nil {
				t.Fatalf("%s document %d: %v", name, i, err)
			}
			if len(m) == 0 {
				continue // comments alone
			}
			obj := &unstructured.Unstructured{Object: m}
			if obj.GetNamespace() == "" {
				obj.SetNamespace(release) // helm's --namespace; cluster-scoped kinds drop it below
			}
			docs = append(docs, doc{source: name, obj: obj})
		}
	}
	return docs
}

// serviceMonitorCRD is the part of prometheus-operator's ServiceMonitor CRD (monitoring.coreos.com/v1)
// the chart renders, with a structural schema and no x-kubernetes-preserve-unknown-fields, so strict
// field validation refuses a misspelt field of the chart's ServiceMonitor as it would a built-in
// kind's. The operator's own CRD is a 1 MB file from outside the module proxy's reach.
const serviceMonitorCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [selector, endpoints]
              properties:
                selector:
                  type: object
                  properties:
                    matchLabels: {type: object, additionalProperties: {type: string}}
                    matchExpressions:
                      type: array
                      items:
                        type: object
                        required: [key, operator]
                        properties:
                          key: {type: string}
                          operator: {type: string}
                          values: {type: array, items: {type: string}}
                namespaceSelector:
                  type: object
                  properties:
                    any: {type: boolean}
                    matchNames: {type: array, items: {type: string}}
                jobLabel: {type: string}
                endpoints:
                  type: array
                  items:
                    type: object
                    properties:
                      port: {type: string}
                      path: {type: string}
                      scheme: {type: string, enum: [http, https, HTTP, HTTPS]}
                      interval: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                      scrapeTimeout: {type: string}
                      honorLabels: {type: boolean}
`

// mapper maps the documents' kinds to the API server's resources, read from its discovery.
type mapper struct {
	m meta.ResettableRESTMapper
}

var (
	sharedMapper *mapper
	crdOnce      = make(chan struct{}, 1)
)

// setup installs the ServiceMonitor CRD once and returns the mapper, which knows it.
func setup(t *testing.T) *mapper {
	t.Helper()
	crdOnce <- struct{}{}
	defer func() { <-crdOnce }()
	if sharedMapper != nil {
		return sharedMapper
	}
	var crd map[string]any
	if err := yaml.Unmarshal([]byte(serviceMonitorCRD), &crd); err != nil {
		t.Fatal(err)
	}
	crdRes := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	_, err := cluster.Dynamic.Resource(crdRes).Create(ctx(t), &unstructured.Unstructured{Object: crd}, metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("ServiceMonitor CRD: %v", err)
	}
	m := &mapper{m: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cluster.Client.Discovery()))}
	// The CRD is served once it is Established and its group shows in discovery.
	gvk := schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}
	waitFor(t, "the ServiceMonitor CRD in discovery", func() (bool, string) {
		m.m.Reset()
		_, err := m.m.RESTMapping(gvk.GroupKind(), gvk.Version)
		return err == nil, fmt.Sprint(err)
	})
	sharedMapper = m
	return m
}

// ensureNamespace creates ns (for real, not a dry run: a namespaced dry run needs its namespace)
// enforcing, auditing and warning of the restricted Pod Security Standard.
func ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	labels := map[string]string{}
	for _, mode := range []string{"enforce", "audit", "warn"} {
		labels["pod-security.kubernetes.io/"+mode] = "restricted"
		labels["pod-security.kubernetes.io/"+mode+"-version"] = "latest"
	}
	_, err := cluster.Client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", ns, err)
	}
}

// dryRun creates d with a server-side dry run (DryRun: All, strict field validation): the server
// decodes, defaults, validates, runs admission (Pod Security, RBAC's escalation check) and answers
// as if it stored it. A refusal, and any warning (Pod Security reports a workload's pod template that
// would be refused as a warning: only a Pod itself is refused), is an error naming the document.
func (m *mapper) dryRun(t *testing.T, d doc) error {
	t.Helper()
	gvk := d.obj.GroupVersionKind()
	mapping, err := m.m.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %v", d, err)
	}
	obj := d.obj.DeepCopy()
	res := cluster.Dynamic.Resource(mapping.Resource)
	cluster.Warnings.take()
	opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		_, err = res.Namespace(obj.GetNamespace()).Create(ctx(t), obj, opts)
	} else {
		obj.SetNamespace("")
		_, err = res.Create(ctx(t), obj, opts)
	}
	if err != nil {
		return fmt.Errorf("%s: refused: %v", d, err)
	}
	if w := cluster.Warnings.take(); len(w) > 0 {
		return fmt.Errorf("%s: warned: %s", d, strings.Join(w, "; "))
	}
	return nil
}

// TestChartServerSideDryRun renders the chart for the defaults and each ci/*-values.yaml and
// creates every document with a server-side dry run in namespaces that enforce the restricted Pod
// Security Standard: anything the API server refuses or warns about fails, naming the document.
func TestChartServerSideDryRun(t *testing.T) {
	m := setup(t)
	for _, vf := range valuesFiles(t) {
		name := vf
		if name == "" {
			name = "values.yaml"
		}
		t.Run(filepath.Base(name), func(t *testing.T) {
			docs := render(t, vf)
			kinds := map[string]int{}
			for _, d := range docs {
				ensureNamespace(t, d.obj.GetNamespace())
			}
			for _, d := range docs {
				if err := m.dryRun(t, d); err != nil {
					t.Error(err)
					continue
				}
				kinds[d.obj.GetKind()]++
			}
			// A chart that rendered nothing would pass vacuously: the core of it must be there.
			for _, k := range []string{"StatefulSet", "Deployment", "Job", "Service", "ServiceAccount", "NetworkPolicy", "PodDisruptionBudget"} {
				if kinds[k] == 0 && !t.Failed() {
					t.Errorf("no %s was dry-run created (%v)", k, kinds)
				}
			}
			t.Logf("%d documents accepted: %v", len(docs), kinds)
		})
	}
}

// TestDryRunRefusesWhatStrictDecodingAccepts proves the dry run is no formality: each document here
// decodes strictly into its k8s.io/api type (what make test-helm checks) and the API server refuses
// it, or Pod Security warns about it.
func TestDryRunRefusesWhatStrictDecodingAccepts(t *testing.T) {
	m := setup(t)
	ns := "kubecheck-refuse"
	ensureNamespace(t, ns)
	// A pod's service account must exist (the ServiceAccount admission plugin), so that Pod Security
	// is what refuses it.
	if _, err := cluster.Client.CoreV1().ServiceAccounts(ns).Create(ctx(t), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const podSpec = `
    serviceAccountName: app
    containers:
      - name: app
        image: registry.example.com/app:1
`
	for _, tc := range []struct {
		name, manifest, want string
		into                 func() any
	}{
		{"pod without a restricted security context", `
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:` + strings.ReplaceAll(podSpec, "\n    ", "\n  "), `violates PodSecurity "restricted`, func() any { return &corev1.Pod{} }},
		{"deployment whose pod template is not restricted", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:` + strings.ReplaceAll(podSpec, "\n    ", "\n      "), `would violate PodSecurity "restricted`, func() any { return &appsv1.Deployment{} }},
		{"port out of range", `
apiVersion: v1
kind: Service
metadata: {name: app}
spec:
  selector: {app: app}
  ports: [{name: http, port: 70000}]
`, "spec.ports[0].port", func() any { return &corev1.Service{} }},
		{"selector that does not match the template", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: app2}
spec:
  selector: {matchLabels: {app: other}}
  template:
    metadata: {labels: {app: app}}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: app
          image: registry.example.com/app:1
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, "does not match template `labels`", func() any { return &appsv1.Deployment{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := yaml.UnmarshalStrict([]byte(tc.manifest), tc.into()); err != nil {
				t.Fatalf("strict decoding refuses it already: %v", err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.manifest), &obj); err != nil {
				t.Fatal(err)
			}
			d := doc{source: "test", obj: &unstructured.Unstructured{Object: obj}}
			d.obj.SetNamespace(ns)
			err := m.dryRun(t, d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("dry run: %v, want an error saying %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}
