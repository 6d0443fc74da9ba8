package main

import (
	"context"
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets testscript run the atoll command in-process as "atoll".
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"atoll": func() {
			os.Exit(run(context.Background(), &env{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
		},
	})
}

// TestScripts runs the CLI's behaviour scripts in testdata/script: what a
// user types and what they must see, bad input included.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script"})
}
