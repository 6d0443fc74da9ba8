package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"atoll/server"
)

// TestKubernetesManifests keeps deploy/kubernetes true to the daemon: the
// kustomization lists files that exist, every container runs a serve
// command line this atoll accepts, the ConfigMap's atoll.yaml is a valid
// config, and the probe paths answer 200.
func TestKubernetesManifests(t *testing.T) {
	dir := "../../deploy/kubernetes"
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	readYAML(t, filepath.Join(dir, "kustomization.yaml"), &kust)
	if len(kust.Resources) == 0 {
		t.Fatal("kustomization.yaml lists no resources")
	}
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
		} `yaml:"httpGet"`
	}
	type container struct {
		Args           []string `yaml:"args"`
		ReadinessProbe *probe   `yaml:"readinessProbe"`
		LivenessProbe  *probe   `yaml:"livenessProbe"`
	}
	var probes []string
	kinds := map[string]bool{}
	for _, f := range kust.Resources {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("kustomization.yaml lists %s: %v", f, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var obj struct {
				Kind string            `yaml:"kind"`
				Data map[string]string `yaml:"data"`
				Spec struct {
					Containers []container `yaml:"containers"`
					Template   struct {
						Spec struct {
							Containers []container `yaml:"containers"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			}
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			kinds[obj.Kind] = true
			if cfgText, ok := obj.Data["atoll.yaml"]; ok {
				if _, err := server.ParseConfig(strings.NewReader(cfgText), f+": atoll.yaml"); err != nil {
					t.Errorf("%v", err)
				}
			}
			for _, c := range append(obj.Spec.Containers, obj.Spec.Template.Spec.Containers...) {
				if len(c.Args) == 0 || c.Args[0] != "serve" {
					t.Errorf("%s: container args %q: want an atoll serve command", f, c.Args)
					continue
				}
				args := append([]string{}, c.Args[1:]...)
				if i := indexOf(args, "--config"); i >= 0 {
					args = append(args[:i], args[i+2:]...) // the file is the ConfigMap, checked above
				}
				var out, errb bytes.Buffer
				if err := runServe(context.Background(), &env{stdout: &out, stderr: &errb}, append(args, "--print-config")); err != nil {
					t.Errorf("%s: atoll serve %s: %v\n%s", f, strings.Join(c.Args[1:], " "), err, errb.String())
				}
				for _, p := range []*probe{c.ReadinessProbe, c.LivenessProbe} {
					if p != nil {
						probes = append(probes, p.HTTPGet.Path)
					}
				}
			}
		}
	}
	for _, k := range []string{"DaemonSet", "Service", "ServiceMonitor", "ClusterServingRuntime", "ConfigMap"} {
		if !kinds[k] {
			t.Errorf("no %s in deploy/kubernetes", k)
		}
	}
	if len(probes) < 2 {
		t.Fatalf("probes %v: want a readiness and a liveness probe", probes)
	}
	h := server.NewHandler(readyEngine{}, server.Options{})
	for _, p := range probes {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != 200 {
			t.Errorf("probe %s: %d, want 200", p, rec.Code)
		}
	}
}

func indexOf(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// readyEngine is a ready engine with no models (health endpoints only).
type readyEngine struct{ server.Engine }

func (readyEngine) Models() []server.ModelInfo { return nil }
func (readyEngine) Ready() bool                { return true }
