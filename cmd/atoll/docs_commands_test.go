package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocumentedCommandsExist: every atoll command line in a code block of
// README.md or docs/*.md names a command this atoll has and only flags
// that command (or its subcommand) defines, so a renamed or removed flag
// cannot linger in the docs.
func TestDocumentedCommandsExist(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	lineRE := regexp.MustCompile(`^\s*(?:\$ )?(?:\./)?(?:bin/|/tmp/)?atoll ([a-z][a-z-]*)(.*)$`)
	flagRE := regexp.MustCompile(`(?:^|\s)--?([a-z][a-z0-9-]*)`)
	helps := map[string]string{}
	help := func(args ...string) (string, bool) {
		key := strings.Join(args, " ")
		if h, ok := helps[key]; ok {
			return h, h != ""
		}
		var out, errb bytes.Buffer
		rc := run(context.Background(), &env{stdout: &out, stderr: &errb}, append(args, "--help"))
		h := out.String() + errb.String()
		if rc != 0 {
			h = ""
		}
		helps[key] = h
		return h, h != ""
	}
	checked := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		inCode, n := false, 0
		for sc.Scan() {
			n++
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
				continue
			}
			if !inCode {
				continue
			}
			m := lineRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			cmd, rest := m[1], m[2]
			if i := strings.Index(rest, "#"); i >= 0 {
				rest = rest[:i]
			}
			text, ok := help(cmd)
			if !ok {
				t.Errorf("%s:%d: %q: atoll has no command %q", filepath.Base(f), n, strings.TrimSpace(line), cmd)
				continue
			}
			if fields := strings.Fields(rest); len(fields) > 0 && !strings.HasPrefix(fields[0], "-") {
				if sub, ok := help(cmd, fields[0]); ok {
					text += sub
				}
			}
			for _, fm := range flagRE.FindAllStringSubmatch(rest, -1) {
				if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(fm[1]) + `(\s|$)`).MatchString(text) {
					t.Errorf("%s:%d: %q: atoll %s has no flag -%s", filepath.Base(f), n, strings.TrimSpace(line), cmd, fm[1])
				}
			}
			checked++
		}
		fh.Close()
	}
	if checked < 20 {
		t.Errorf("only %d documented command lines found: the extraction is broken", checked)
	}
	t.Logf("%d documented command lines checked", checked)
}
