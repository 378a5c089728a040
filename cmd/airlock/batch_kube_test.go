package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/runner"
	"github.com/containerd/errdefs"
)

// A job on --engine kube carries its id, argv and expected stdout; any
// other field of its own is refused, named, never dropped.
func TestKubeJobFits(t *testing.T) {
	want := "42\n"
	if err := kubeJobFits(runner.Job{ID: "t", Argv: []string{"true"}, ExpectedStdout: &want}); err != nil {
		t.Fatalf("a bare job was refused: %v", err)
	}
	for field, j := range map[string]runner.Job{
		"image":        {Image: "x@sha256:" + strings.Repeat("a", 64)},
		"template":     {Template: "py"},
		"env":          {Env: []string{"K=V"}},
		"workdir":      {Workdir: "/work"},
		"stdin":        {Stdin: "hi"},
		"inputs":       {Inputs: []runner.JobInput{{Host: "data"}}},
		"limits":       {Limits: runner.JobLimits{Timeout: "5s"}},
		"allow_host":   {AllowHost: []string{"example.org"}},
		"credential":   {Credential: []string{"example.org=Authorization:KEY"}},
		"egress_limit": {EgressLimit: "1MiB"},
	} {
		j.ID, j.Argv = "t", []string{"true"}
		err := kubeJobFits(j)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"`+field+`"`) {
			t.Errorf("%s: %v, want invalid input naming it", field, err)
		}
	}
}
