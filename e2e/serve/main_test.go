//go:build e2e

// Package serve runs `airlock serve` end to end: the real binary, over its
// unix socket and over TCP, against a real engine (AIRLOCK_E2E_ENGINE,
// default oci; AIRLOCK_E2E_ISOLATION, default gvisor). Nothing is mocked.
package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/runner"
)

var (
	engineName, isolationName string
	airlockBin, rootDir       string
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "serve e2e setup: %v\n(run `make setup` first)\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	tmp, err := os.MkdirTemp("", "airlock-serve-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	if airlockBin, err = e2etest.Build(tmp, "../../cmd/airlock"); err != nil {
		return 0, err
	}
	engineName, isolationName = e2etest.Pair("oci")
	fmt.Fprintf(os.Stderr, "serve e2e: engine %s, isolation %s\n", engineName, isolationName)
	// A root of the tests' own, sharing setup's store and runsc, with this
	// tree's exec agent (whose run-code client the run-code pools use).
	if rootDir, err = e2etest.AgentRoot(tmp, e2etest.SysRoot(), "../../cmd/airlock-agent"); err != nil {
		return 0, err
	}
	for _, c := range cgroups() {
		before[c] = true
	}
	code := m.Run()
	if left := leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "left behind: %v\n", left)
		code = 1
	}
	if e2etest.MountsLeft(rootDir) {
		fmt.Fprintf(os.Stderr, "mounts left behind under %s\n", rootDir)
		code = 1
	}
	return code, nil
}

// leftovers lists what the engines still hold under the tests' root, and
// the sandbox records and run directories left.
func leftovers() []string {
	var left []string
	if cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err == nil {
		list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelID))})
		if err != nil {
			left = append(left, "listing containers: "+err.Error())
		}
		for _, c := range list {
			left = append(left, "container "+c.Labels[docker.LabelID])
		}
		cli.Close()
	}
	for bin, state := range map[string]string{filepath.Join(rootDir, "tools", "runsc"): filepath.Join(rootDir, "oci", "runsc"), "runc": filepath.Join(rootDir, "oci", "runc")} {
		if _, err := os.Stat(state); err != nil {
			continue
		}
		out, err := exec.Command(bin, "--root", state, "list", "--quiet").Output()
		if err != nil {
			left = append(left, "runtime list: "+err.Error())
		}
		for _, id := range strings.Fields(string(out)) {
			left = append(left, "runtime sandbox "+id)
		}
	}
	for _, c := range cgroups() {
		// The machine is shared: runs of the system's root are not ours.
		if _, err := os.Stat(filepath.Join(runner.DefaultRoot, "runs", filepath.Base(c))); err == nil || before[c] {
			continue
		}
		left = append(left, "cgroup "+c)
	}
	// Checkpoints of paused sandboxes, and snapshots cut short.
	for _, glob := range []string{"oci/bundles/*", "oci/checkpoints/*", "oci/snapshots/.new-*", "sandboxes/sb-*", "runs/*"} {
		m, _ := filepath.Glob(filepath.Join(rootDir, glob))
		left = append(left, m...)
	}
	for _, m := range mountsUnder(rootDir) {
		left = append(left, "mount "+m)
	}
	return left
}

// before holds the cgroups that existed before the tests.
var before = map[string]bool{}

func cgroups() []string { return e2etest.Cgroups() }

// srv is a running `airlock serve`.
type srv struct {
	cmd    *exec.Cmd
	socket string
	addr   string
	token  string
	stderr *bytes.Buffer
	unix   *http.Client
}

// startServer starts airlock serve on a socket of its own and TCP port 0.
func startServer(t *testing.T, extra ...string) *srv {
	t.Helper()
	dir := t.TempDir()
	s := &srv{socket: filepath.Join(dir, "airlock.sock"), stderr: &bytes.Buffer{}}
	addrFile := filepath.Join(dir, "addr")
	s.cmd = exec.Command(airlockBin, append([]string{"--root", rootDir, "serve", "--socket", s.socket, "--listen", "127.0.0.1:0", "--addr-file", addrFile}, extra...)...)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			s.addr = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("airlock serve did not start: %s", s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(rootDir, "server", "token"))
	if err != nil {
		t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(tok))
	s.unix = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.socket)
		},
		MaxIdleConnsPerHost: 200,
	}}
	return s
}

// stop sends SIGTERM and waits for the drain.
func (s *srv) stop(t *testing.T) {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("airlock serve after SIGTERM: %v\n%s", err, s.stderr)
		}
	case <-time.After(45 * time.Second):
		s.cmd.Process.Kill()
		<-done
		t.Errorf("airlock serve did not drain within 45s\n%s", s.stderr)
	}
}

// api is one way to reach the server: the socket, or TCP with the token.
type api struct {
	name   string
	client *http.Client
	base   string
	token  string
}

func (s *srv) apis() []api {
	return []api{
		{"unix", s.unix, "http://airlock", ""},
		{"tcp", &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}, "http://" + s.addr, s.token},
	}
}

func (a api) do(t *testing.T, method, path string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	st, h, b, err := a.send(context.Background(), method, path, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return st, h, b
}

// send is do for goroutines other than the test's: it returns its error.
func (a api) send(ctx context.Context, method, path string, body io.Reader, hdr ...string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return 0, nil, nil, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: reading: %w", method, path, err)
	}
	return resp.StatusCode, resp.Header, b, nil
}

// call sends v as JSON and decodes the answer into out, checking status.
func (a api) call(t *testing.T, method, path string, v any, want int, out any, hdr ...string) []byte {
	t.Helper()
	b, err := a.sendJSON(context.Background(), method, path, v, want, out, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendJSON is call for goroutines other than the test's.
func (a api) sendJSON(ctx context.Context, method, path string, v any, want int, out any, hdr ...string) ([]byte, error) {
	var body io.Reader
	if v != nil {
		b, _ := json.Marshal(v)
		body = bytes.NewReader(b)
	}
	st, _, b, err := a.send(ctx, method, path, body, hdr...)
	if err != nil {
		return nil, err
	}
	if st != want {
		return b, fmt.Errorf("%s %s over %s: status %d, want %d: %s", method, path, a.name, st, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return b, fmt.Errorf("%s %s: %v: %q", method, path, err, b)
		}
	}
	return b, nil
}

type apiError struct {
	Error struct{ Kind, Message, Reason string } `json:"error"`
}

func (a api) create(t *testing.T, extra map[string]any) runner.SandboxInfo {
	t.Helper()
	req := map[string]any{"engine": engineName, "isolation": isolationName, "idle_timeout": "5m"}
	for k, v := range extra {
		req[k] = v
	}
	var si runner.SandboxInfo
	a.call(t, "POST", "/v1/sandboxes", req, http.StatusCreated, &si)
	t.Cleanup(func() { a.call(t, "DELETE", "/v1/sandboxes/"+si.ID, nil, http.StatusNoContent, nil) })
	return si
}

func (a api) exec(t *testing.T, id string, req map[string]any) runner.Result {
	t.Helper()
	var res runner.Result
	a.call(t, "POST", "/v1/sandboxes/"+id+"/exec", req, http.StatusOK, &res)
	return res
}
