//go:build e2e

package serve

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/runner"
)

// TestServeTemplates runs and creates sandboxes on a template through the
// API: its limits and env arrive, a narrower field narrows, a wider one is
// 400 invalid_input naming the field, an unknown template 404 not_found.
func TestServeTemplates(t *testing.T) {
	out, err := exec.Command(airlockBin, "--root", rootDir, "template", "create", "tpl-api", "--engine", engineName, "--isolation", isolationName,
		"--memory", "256MiB", "--pids", "64", "--timeout", "20s", "--env", "FROM_TEMPLATE=yes").CombinedOutput()
	if err != nil {
		t.Fatalf("template create: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command(airlockBin, "--root", rootDir, "template", "rm", "tpl-api").Run() })
	s := startServer(t)
	a := s.apis()[1]

	var res runner.Result
	a.call(t, "POST", "/v1/runs", map[string]any{"template": "tpl-api", "argv": []string{"sh", "-c", "echo $FROM_TEMPLATE"}}, http.StatusOK, &res)
	if res.Reason != "exited" || string(res.Stdout.Head) != "yes\n" || res.Limits.MemoryBytes != 256<<20 || res.Limits.Pids != 64 || res.Limits.TimeoutMS != 20000 || res.Engine != engineName {
		t.Errorf("run on the template: %+v", res)
	}
	a.call(t, "POST", "/v1/runs", map[string]any{"template": "tpl-api", "memory": "128MiB", "argv": []string{"true"}}, http.StatusOK, &res)
	if res.Reason != "exited" || res.Limits.MemoryBytes != 128<<20 || res.Limits.Pids != 64 {
		t.Errorf("narrowed run: %+v", res)
	}
	var e apiError
	a.call(t, "POST", "/v1/runs", map[string]any{"template": "tpl-api", "memory": "1GiB", "argv": []string{"true"}}, http.StatusBadRequest, &e)
	if e.Error.Kind != "invalid_input" || !strings.Contains(e.Error.Message, `memory 1GiB is above template "tpl-api"'s 256MiB`) {
		t.Errorf("widened run: %+v", e)
	}
	a.call(t, "POST", "/v1/runs", map[string]any{"template": "no-such", "argv": []string{"true"}}, http.StatusNotFound, &e)
	if e.Error.Kind != "not_found" || !strings.Contains(e.Error.Message, `no template "no-such"`) {
		t.Errorf("unknown template: %+v", e)
	}

	si := a.create(t, map[string]any{"template": "tpl-api", "cpus": "0.5"})
	if si.Limits.MemoryBytes != 256<<20 || si.Limits.MilliCPUs != 500 || si.Limits.Pids != 64 {
		t.Errorf("sandbox on the template: %+v", si.Limits)
	}
	if r := a.exec(t, si.ID, map[string]any{"argv": []string{"sh", "-c", "echo $FROM_TEMPLATE"}}); string(r.Stdout.Head) != "yes\n" {
		t.Errorf("exec in the templated sandbox: %+v", r)
	}
	a.call(t, "POST", "/v1/sandboxes", map[string]any{"template": "tpl-api", "pids": 1000}, http.StatusBadRequest, &e)
	if e.Error.Kind != "invalid_input" || !strings.Contains(e.Error.Message, "pids 1000") {
		t.Errorf("widened sandbox: %+v", e)
	}
}
