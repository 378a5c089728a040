//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// `--stdin -` reads airlock's own standard input, as every Unix tool does.
func TestStdinDash(t *testing.T) {
	cmd := exec.Command(airlockBin, "--root", rootDir, "run", "--engine", engineName, "--isolation", isolationName,
		"--stdin", "-", "--", "python3", "-")
	cmd.Stdin = strings.NewReader("import sys\nprint('from stdin', 6*7)\n")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("cat prog.py | airlock run --stdin - -- python3 -: %v\nstderr: %s", err, se.String())
	}
	if got := so.String(); got != "from stdin 42\n" {
		t.Fatalf("stdout %q, want %q", got, "from stdin 42\n")
	}
}

// A refused run with --json: the JSON error on stdout carries only what is
// known, and the one-line message also reaches stderr.
func TestJSONErrorAlsoOnStderr(t *testing.T) {
	c := airlock(nil, "run", "--json", "--image", "busybox:latest", "--", "true")
	if c.code != 64 {
		t.Fatalf("exit %d, want 64\nstdout: %s\nstderr: %s", c.code, c.stdout, c.stderr)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.stdout), &obj); err != nil {
		t.Fatalf("stdout is not one JSON object: %v: %q", err, c.stdout)
	}
	var keys []string
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"error", "error_kind", "exit_code", "reason"}; !slices.Equal(keys, want) {
		t.Errorf("error result fields %v, want only %v: %s", keys, want, c.stdout)
	}
	var msg string
	json.Unmarshal(obj["error"], &msg)
	if msg == "" || !strings.Contains(c.stderr, msg) || !strings.HasPrefix(c.stderr, "airlock: ") {
		t.Errorf("stderr %q does not carry the error %q", c.stderr, msg)
	}
}

// A zero limit is refused, never read as "the default".
func TestZeroLimitsRefused(t *testing.T) {
	for _, flag := range []string{"--timeout", "--memory", "--cpus", "--pids", "--output-limit", "--tmp-size", "--file-size", "--out-limit", "--input-limit"} {
		c := airlock(nil, "run", flag, "0", "--", "true")
		if c.code != 64 || !strings.Contains(c.stderr, flag) {
			t.Errorf("%s 0: exit %d, stderr %q; want 64 naming the flag", flag, c.code, c.stderr)
		}
	}
	noSandboxLeft(t)
}
