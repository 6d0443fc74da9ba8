package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"

	"atoll/server"
)

// TestServeEngineErrors: without an engine, serve says so; an engine that
// fails to start is reported as such. Neither serves anything.
func TestServeEngineErrors(t *testing.T) {
	saved := newEngine
	t.Cleanup(func() { newEngine = saved })
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb}

	newEngine = nil
	if err := runServe(context.Background(), e, []string{"--listen", "127.0.0.1:0"}); !errors.Is(err, errEngineNotBuilt) {
		t.Errorf("no engine: %v", err)
	}

	boom := errors.New("no device")
	var got server.Config
	newEngine = func(ctx context.Context, cfg server.Config, log *slog.Logger) (server.Engine, error) {
		got = cfg
		return nil, boom
	}
	err := runServe(context.Background(), e, []string{"--listen", "127.0.0.1:0", "--model", "resnet50:4:BE:9"})
	if !errors.Is(err, boom) {
		t.Errorf("engine start failure: %v", err)
	}
	if len(got.Models) != 1 || !reflect.DeepEqual(got.Models[0], server.ModelConfig{Name: "resnet50", Batch: 4, DefaultClass: server.BE, MaxQueue: 9}) {
		t.Errorf("the engine got models %+v", got.Models)
	}
}
