package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"atoll/profiles"
)

// TestMain lets testscript run the atoll command in-process as "atoll".
// Every test sees an empty profile store of its own (never the user's).
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Getenv(profiles.StoreEnv) == "" {
		dir, err := os.MkdirTemp("", "atoll-profiles-")
		if err != nil {
			panic(err)
		}
		os.Setenv(profiles.StoreEnv, dir)
		defer os.RemoveAll(dir)
	}
	defer removeBuiltAtoll()
	return testscript.RunMain(m, map[string]func() int{
		"atoll": func() int {
			return run(context.Background(), &env{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
		},
	})
}

// TestScripts runs the CLI's behaviour scripts in testdata/script: what a
// user types and what they must see, bad input included.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script", Setup: func(e *testscript.Env) error {
		e.Setenv(profiles.StoreEnv, e.WorkDir+"/store")
		onnxDir, err := filepath.Abs("testdata/onnx")
		if err != nil {
			return err
		}
		e.Setenv("ONNX", onnxDir)
		return nil
	}})
}
