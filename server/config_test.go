package server

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const goodConfig = `
listen: 127.0.0.1:9000
backend: sim
gpu: H200
policy: orion
models:
  - name: resnet50
    batch: 8
    max_queue: 64
  - name: bert-base
    default_class: BE
priority:
  levels: 3
  hp_max: 2
body_limit: 1048576
request_timeout: 2s
shutdown_timeout: 500ms
log:
  level: debug
  format: json
`

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader(goodConfig), "atoll.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:9000" || cfg.GPU != "H200" || cfg.Policy != "orion" || cfg.BodyLimit != 1<<20 {
		t.Errorf("scalars: %+v", cfg)
	}
	if cfg.RequestTimeout != 2*time.Second || cfg.ShutdownTimeout != 500*time.Millisecond {
		t.Errorf("durations: %v %v", cfg.RequestTimeout, cfg.ShutdownTimeout)
	}
	if len(cfg.Models) != 2 {
		t.Fatalf("models: %+v", cfg.Models)
	}
	if m := cfg.Models[0]; m.Name != "resnet50" || m.Batch != 8 || m.MaxQueue != 64 || m.DefaultClass != HP {
		t.Errorf("models[0] (defaults filled): %+v", m)
	}
	if m := cfg.Models[1]; m.Batch != DefaultBatch || m.MaxQueue != DefaultMaxQueue || m.DefaultClass != BE {
		t.Errorf("models[1] (defaults filled): %+v", m)
	}
	if cfg.Priority != (PriorityConfig{Levels: 3, HPMax: 2}) || cfg.Log != (LogConfig{"debug", "json"}) {
		t.Errorf("priority/log: %+v %+v", cfg.Priority, cfg.Log)
	}

	// Round trip through Marshal (what --print-config prints).
	out, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseConfig(strings.NewReader(string(out)), "printed")
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, out)
	}
	if again.Listen != cfg.Listen || again.RequestTimeout != cfg.RequestTimeout || len(again.Models) != 2 || !reflect.DeepEqual(again.Models[1], cfg.Models[1]) {
		t.Errorf("round trip changed the config:\n%s", out)
	}

	// An empty file is the defaults.
	def, err := ParseConfig(strings.NewReader("\n"), "empty.yaml")
	if err != nil || def.Listen != DefaultConfig().Listen {
		t.Errorf("empty config: %v %+v", err, def)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key with line", "listen: :8000\nbackend: sim\nlisten_port: 9\n", []string{"atoll.yaml", "line 3", "listen_port"}},
		{"nested unknown key", "models:\n  - name: resnet50\n    batchsize: 4\n", []string{"line 3", "batchsize"}},
		{"bad duration", "shutdown_timeout: soon\n", []string{"line 1", "soon"}},
		{"wrong type", "body_limit: [1]\n", []string{"line 1"}},
		{"syntax", "listen: [\n", []string{"atoll.yaml"}},
		{"two documents", "listen: :1\n---\nlisten: :2\n", []string{"more than one YAML document"}},
		{"listen", "listen: localhost\n", []string{"listen:", "host:port"}},
		{"backend", "backend: rocm\n", []string{"backend:", "sim or cuda"}},
		{"gpu", "gpu: V100\n", []string{"gpu:", "V100"}},
		{"policy", "policy: fifo\n", []string{"policy:", `"fifo"`, "atoll"}},
		{"model name", "models:\n  - batch: 2\n", []string{"models[0].name"}},
		{"max inflight", "max_inflight: -1\n", []string{"max_inflight", ">= 0"}},
		{"model twice", "models:\n  - name: a\n  - name: a\n", []string{"models[1].name", "twice"}},
		{"model batch", "models:\n  - name: a\n    batch: -1\n", []string{"models[0].batch"}},
		{"model class", "models:\n  - name: a\n    default_class: RT\n", []string{"models[0].default_class", "HP or BE"}},
		{"model queue", "models:\n  - name: a\n    max_queue: -5\n", []string{"models[0].max_queue"}},
		{"model streams", "models:\n  - name: a\n    streams: 17\n", []string{"models[0].streams", "1..16"}},
		{"model max batch", "models:\n  - name: a\n    max_batch: -2\n", []string{"models[0].max_batch", "1..256"}},
		{"levels", "priority:\n  levels: 0\n", []string{"priority.levels"}},
		{"hp_max", "priority:\n  levels: 2\n  hp_max: 3\n", []string{"priority.hp_max"}},
		{"body_limit", "body_limit: 10\n", []string{"body_limit"}},
		{"request_timeout", "request_timeout: -1s\n", []string{"request_timeout"}},
		{"fault_drill kind", "fault_drill:\n  be_launch: 3\n  kind: segv\n", []string{"fault_drill.kind", "trap or address"}},
		{"fault_drill launch", "fault_drill:\n  be_launch: -1\n", []string{"fault_drill.be_launch"}},
		{"shutdown_timeout", "shutdown_timeout: 0s\n", []string{"shutdown_timeout"}},
		{"restarts", "restarts: -1\n", []string{"restarts", ">= 0"}},
		{"restart_backoff", "restarts: 2\nrestart_backoff: 0s\n", []string{"restart_backoff"}},
		{"log level", "log:\n  level: loud\n", []string{"log.level", "loud"}},
		{"log format", "log:\n  format: xml\n", []string{"log.format", "text or json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(tc.yaml), "atoll.yaml")
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error does not wrap ErrConfig: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestClassOf(t *testing.T) {
	p := PriorityConfig{Levels: 4, HPMax: 2}
	for prio, want := range map[int64]Class{0: BE, 1: HP, 2: HP, 3: BE, 4: BE} {
		got, err := p.ClassOf(prio, BE)
		if err != nil || got != want {
			t.Errorf("ClassOf(%d) = %v, %v; want %v", prio, got, err, want)
		}
	}
	for _, prio := range []int64{-1, 5, 1 << 40} {
		if _, err := p.ClassOf(prio, HP); !errors.Is(err, ErrBadInput) {
			t.Errorf("ClassOf(%d) = %v, want ErrBadInput", prio, err)
		}
	}
}

func TestNewLogger(t *testing.T) {
	var b strings.Builder
	l, err := LogConfig{Level: "warn", Format: "json"}.NewLogger(&b)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", 1)
	if strings.Contains(b.String(), "hidden") || !strings.Contains(b.String(), `"msg":"shown"`) {
		t.Errorf("log output %q", b.String())
	}
	if _, err := (LogConfig{Level: "info", Format: "yaml"}).NewLogger(&b); !errors.Is(err, ErrConfig) {
		t.Errorf("bad format: %v", err)
	}
}

func TestConfigEngine(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader(`
backend: sim
gpu: H200
policy: reef
shutdown_timeout: 3s
models:
  - name: fast
    zoo: resnet50
    batch: 2
  - name: bert-base
    default_class: BE
jobs:
  - model: resnet50-train
    batch: 32
  - model: bert-base-train
`), "e.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ec := cfg.Engine()
	if ec.Backend != "sim" || ec.GPU != "H200" || ec.Policy != "reef" || ec.Drain != 3*time.Second {
		t.Errorf("engine config: %+v", ec)
	}
	if len(ec.Models) != 2 || ec.Models[0] != (EngineModel{Name: "fast", Zoo: "resnet50", Batch: 2, DefaultClass: HP, MaxQueue: DefaultMaxQueue}) ||
		ec.Models[1].Zoo != "bert-base" || ec.Models[1].DefaultClass != BE {
		t.Errorf("engine models: %+v", ec.Models)
	}
	if len(ec.Jobs) != 2 || ec.Jobs[0] != (EngineJobModel{Zoo: "resnet50-train", Batch: 32}) || ec.Jobs[1] != (EngineJobModel{Zoo: "bert-base-train"}) {
		t.Errorf("engine jobs: %+v", ec.Jobs)
	}
	for yaml, want := range map[string]string{
		"jobs:\n  - batch: 3\n":                    "jobs[0].model",
		"jobs:\n  - model: x\n    batch: -3\n":     "jobs[0].batch",
		"jobs:\n  - model: x\n    iterations: 3\n": `line 3: unknown key "iterations"`,
	} {
		if _, err := ParseConfig(strings.NewReader(yaml), "j.yaml"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", yaml, err, want)
		}
	}
}
