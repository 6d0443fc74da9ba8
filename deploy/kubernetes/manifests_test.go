package kubernetes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// clusterServingRuntime is KServe's serving.kserve.io/v1alpha1
// ClusterServingRuntime as its API defines it (pkg/apis/serving/v1alpha1,
// servingruntime_types.go: the same field names, JSON keys and Kubernetes
// types). The KServe module is not served by the module proxy this project
// builds from, so its schema is written out here; strict decoding into it
// refuses any key KServe's type does not have.
type clusterServingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              servingRuntimeSpec `json:"spec,omitempty"`
}

type servingRuntimeSpec struct {
	SupportedModelFormats []struct {
		Name       string  `json:"name"`
		Version    *string `json:"version,omitempty"`
		AutoSelect *bool   `json:"autoSelect,omitempty"`
		Priority   *int32  `json:"priority,omitempty"`
	} `json:"supportedModelFormats,omitempty"`
	MultiModel       *bool    `json:"multiModel,omitempty"`
	Disabled         *bool    `json:"disabled,omitempty"`
	ProtocolVersions []string `json:"protocolVersions,omitempty"`
	// ServingRuntimePodSpec, inline:
	Containers       []corev1.Container            `json:"containers"`
	Volumes          []corev1.Volume               `json:"volumes,omitempty"`
	NodeSelector     map[string]string             `json:"nodeSelector,omitempty"`
	Affinity         *corev1.Affinity              `json:"affinity,omitempty"`
	Tolerations      []corev1.Toleration           `json:"tolerations,omitempty"`
	Labels           map[string]string             `json:"labels,omitempty"`
	Annotations      map[string]string             `json:"annotations,omitempty"`
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	HostIPC          bool                          `json:"hostIPC,omitempty"`
	// the ModelMesh fields:
	GrpcEndpoint     *string `json:"grpcEndpoint,omitempty"`
	GrpcDataEndpoint *string `json:"grpcDataEndpoint,omitempty"`
	HTTPDataEndpoint *string `json:"httpDataEndpoint,omitempty"`
	Replicas         *uint16 `json:"replicas,omitempty"`
}

// objects are the manifests decoded: each file's object by kind.
type objects struct {
	namespace *corev1.Namespace
	config    *corev1.ConfigMap
	daemonSet *appsv1.DaemonSet
	service   *corev1.Service
	monitor   *monitoringv1.ServiceMonitor
	runtime   *clusterServingRuntime
	jobs      []*batchv1.Job
}

// decode reads one manifest (one object per file) strictly — an unknown or
// repeated key is an error — into the type its apiVersion and kind name.
func decode(path string, into *objects) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		into.namespace = &corev1.Namespace{}
		obj = into.namespace
	case "v1 ConfigMap":
		into.config = &corev1.ConfigMap{}
		obj = into.config
	case "apps/v1 DaemonSet":
		into.daemonSet = &appsv1.DaemonSet{}
		obj = into.daemonSet
	case "v1 Service":
		into.service = &corev1.Service{}
		obj = into.service
	case "monitoring.coreos.com/v1 ServiceMonitor":
		into.monitor = &monitoringv1.ServiceMonitor{}
		obj = into.monitor
	case "serving.kserve.io/v1alpha1 ClusterServingRuntime":
		into.runtime = &clusterServingRuntime{}
		obj = into.runtime
	case "batch/v1 Job":
		j := &batchv1.Job{}
		into.jobs = append(into.jobs, j)
		obj = j
	default:
		return fmt.Errorf("apiVersion %q kind %q: no type for it here", tm.APIVersion, tm.Kind)
	}
	return yaml.UnmarshalStrict(raw, obj)
}

// TestManifestsDecodeStrictly: every object of the kustomize base and of
// examples/ decodes strictly into its API's Go type, and the objects fit
// together: the DaemonSet asks the device plugin for GPUs and probes the
// daemon's health endpoints, mounts the ConfigMap's atoll.yaml and the
// tokens the config names; the Service selects the DaemonSet's pods and
// names its ports; the ServiceMonitor selects the Service and scrapes
// /metrics on a port it has; KServe's runtime serves atoll over v2; the
// example Job posts to the Service's jobs API with the Secret's token.
func TestManifestsDecodeStrictly(t *testing.T) {
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Resources  []string `json:"resources"`
		Images     []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	raw, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, &kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if kust.Kind != "Kustomization" || len(kust.Resources) == 0 {
		t.Fatalf("kustomization.yaml: kind %q with %d resources", kust.Kind, len(kust.Resources))
	}
	var o objects
	examples, _ := filepath.Glob("examples/*.yaml")
	for _, f := range append(slices.Clone(kust.Resources), examples...) {
		if err := decode(f, &o); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if o.namespace == nil || o.config == nil || o.daemonSet == nil || o.service == nil || o.monitor == nil || o.runtime == nil || len(o.jobs) == 0 {
		t.Fatalf("missing objects: namespace %v, configmap %v, daemonset %v, service %v, servicemonitor %v, servingruntime %v, jobs %d",
			o.namespace != nil, o.config != nil, o.daemonSet != nil, o.service != nil, o.monitor != nil, o.runtime != nil, len(o.jobs))
	}
	if o.namespace.Name != kust.Namespace {
		t.Errorf("namespace %q, kustomization puts everything in %q", o.namespace.Name, kust.Namespace)
	}

	ds := o.daemonSet
	pod := ds.Spec.Template
	if !subset(ds.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("daemonset selector %v does not match its pods' labels %v", ds.Spec.Selector.MatchLabels, pod.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("daemonset: %d containers, want the daemon's one", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if gpus, ok := c.Resources.Limits["nvidia.com/gpu"]; !ok || gpus.Value() < 1 {
		t.Errorf("daemonset: the container asks the device plugin for no GPU (limits %v)", c.Resources.Limits)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/v2/health/ready", c.LivenessProbe: "/v2/health/live"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || ports[probe.HTTPGet.Port.String()] == 0 {
			t.Errorf("daemonset: a probe is not an HTTP GET of %s on a named container port: %+v", want, probe)
		}
	}
	if !strings.Contains(strings.Join(c.Args, " "), "/etc/atoll/atoll.yaml") {
		t.Errorf("daemonset: args %v do not read /etc/atoll/atoll.yaml", c.Args)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mounted := map[string]string{}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Errorf("daemonset: mount of volume %q, which the pod does not have", m.Name)
		}
		mounted[m.MountPath] = m.Name
		if v.ConfigMap != nil && v.ConfigMap.Name != o.config.Name {
			t.Errorf("daemonset: volume %q is ConfigMap %q, the base's is %q", v.Name, v.ConfigMap.Name, o.config.Name)
		}
	}
	if _, ok := o.config.Data["atoll.yaml"]; !ok || mounted["/etc/atoll/atoll.yaml"] == "" {
		t.Errorf("the ConfigMap's atoll.yaml is not mounted at /etc/atoll/atoll.yaml (mounts %v)", mounted)
	}
	secret := ""
	for _, v := range volumes {
		if v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	for _, line := range strings.Split(o.config.Data["atoll.yaml"], "\n") {
		if _, file, ok := strings.Cut(line, "token_file:"); ok {
			dir := filepath.Dir(strings.TrimSpace(file))
			if mounted[dir] == "" || volumes[mounted[dir]].Secret == nil {
				t.Errorf("atoll.yaml reads a token from %s, where no Secret is mounted (mounts %v)", file, mounted)
			}
		}
	}

	svc := o.service
	if !subset(svc.Spec.Selector, pod.Labels) {
		t.Errorf("service selector %v does not select the daemon's pods %v", svc.Spec.Selector, pod.Labels)
	}
	svcPorts := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p.Port
		if ports[p.TargetPort.String()] == 0 {
			t.Errorf("service port %q targets %q, which the container does not name", p.Name, p.TargetPort.String())
		}
	}

	mon := o.monitor
	if !subset(mon.Spec.Selector.MatchLabels, svc.Labels) {
		t.Errorf("servicemonitor selects %v, the service is labelled %v", mon.Spec.Selector.MatchLabels, svc.Labels)
	}
	for _, e := range mon.Spec.Endpoints {
		if e.Path != "/metrics" || svcPorts[e.Port] == 0 {
			t.Errorf("servicemonitor endpoint %q %s: want /metrics on a service port", e.Port, e.Path)
		}
	}

	rt := o.runtime.Spec
	if !slices.Contains(rt.ProtocolVersions, "v2") || len(rt.Containers) != 1 || rt.Containers[0].Args[0] != "serve" {
		t.Errorf("servingruntime: protocols %v, containers %d: want atoll serve speaking v2", rt.ProtocolVersions, len(rt.Containers))
	}
	if len(rt.SupportedModelFormats) == 0 || rt.SupportedModelFormats[0].Name != "atoll" {
		t.Errorf("servingruntime: model formats %+v, want atoll first", rt.SupportedModelFormats)
	}

	for _, j := range o.jobs {
		jc := j.Spec.Template.Spec.Containers
		if len(jc) != 1 {
			t.Errorf("job %s: %d containers", j.Name, len(jc))
			continue
		}
		args := strings.Join(jc[0].Args, " ")
		if !strings.Contains(args, fmt.Sprintf("http://%s:%d/v2/jobs", svc.Name, svcPorts["http"])) {
			t.Errorf("job %s: args %q do not post to the service's jobs API", j.Name, args)
		}
		token := false
		for _, e := range jc[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret &&
				strings.Contains(args, "Bearer $("+e.Name+")") {
				token = true
			}
		}
		if !token {
			t.Errorf("job %s: no bearer token from the Secret %q the daemon reads", j.Name, secret)
		}
	}
}

// TestStrictDecodingRefusesUnknownKeys: the check above can fail — a
// misspelt key in any of the kinds is refused.
func TestStrictDecodingRefusesUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  templat: {}\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  endpoints: [{port: http, pathh: /metrics}]\n",
		"apiVersion: serving.kserve.io/v1alpha1\nkind: ClusterServingRuntime\nmetadata: {name: x}\nspec:\n  protocolVersion: [v2]\n",
		"apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  template: {spec: {containers: [{name: c, imag: x}]}}\n",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
	} {
		f := filepath.Join(dir, "m.yaml")
		if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		var o objects
		if err := decode(f, &o); err == nil {
			t.Errorf("decoded without an error:\n%s", doc)
		}
	}
}

// subset: every key of sel has the same value in labels (and sel is not empty).
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}
