package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gabriel-vasile/mimetype"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/templates"
	"github.com/airlock-sandbox/airlock/units"
)

// The request bodies. Field names are the CLI's flag names with '_' for
// '-', and values take the CLI's syntax ("512MiB", "30s").

// PolicyRequest holds the policy fields of runs and sandboxes.
type PolicyRequest struct {
	// Template names a sandbox template (airlock template ls); the other
	// fields may narrow it, never widen it. An unknown name is not_found,
	// a widening invalid_input.
	Template string `json:"template,omitempty"`
	// Image is a pinned reference, NAME@sha256:<id> or sha256:<id>.
	Image string `json:"image,omitempty"`
	// Timeout is the wall-clock limit, a duration such as 30s or 500ms.
	Timeout string `json:"timeout,omitempty"`
	// Memory is the memory limit, a size such as 512MiB.
	Memory string `json:"memory,omitempty"`
	// CPUs is the CPU allowance, a number or a string such as "0.5".
	CPUs flexValue `json:"cpus,omitempty"`
	// Pids caps the number of processes.
	Pids *int64 `json:"pids,omitempty"`
	// OutputLimit caps each of stdout and stderr, a size such as 1MiB.
	OutputLimit string `json:"output_limit,omitempty"`
	// TmpSize caps /tmp, a size.
	TmpSize string `json:"tmp_size,omitempty"`
	// FileSize caps any one file the program writes, a size.
	FileSize string `json:"file_size,omitempty"`
	// Env is the program's environment, NAME=VALUE each.
	Env       []string `json:"env,omitempty"`
	Engine    string   `json:"engine,omitempty" openapi:"enum=auto|oci|docker"`
	Isolation string   `json:"isolation,omitempty" openapi:"enum=gvisor|seccomp"`
	// OutDir is the output directory inside the sandbox; "none" turns it
	// off.
	OutDir string `json:"out_dir,omitempty"`
	// OutLimit caps the output directory's bytes, a size.
	OutLimit string `json:"out_limit,omitempty"`
	// OutFiles caps the output directory's files.
	OutFiles *int `json:"out_files,omitempty"`
	// ArtifactMaxSize caps one artifact, a size.
	ArtifactMaxSize string `json:"artifact_max_size,omitempty"`
	// ArtifactTypes is the MIME allowlist of artifacts.
	ArtifactTypes []string `json:"artifact_types,omitempty"`
	// ArtifactsAllowDotfiles accepts artifact paths with a component
	// starting with '.'.
	ArtifactsAllowDotfiles bool `json:"artifacts_allow_dotfiles,omitempty"`

	// Host paths are refused from a client; these catch them to say so.
	Input          json.RawMessage `json:"input,omitempty" openapi:"-"`
	Artifacts      json.RawMessage `json:"artifacts,omitempty" openapi:"-"`
	Quarantine     json.RawMessage `json:"quarantine,omitempty" openapi:"-"`
	SeccompProfile json.RawMessage `json:"seccomp_profile,omitempty" openapi:"-"`
}

// RunRequest is the body of POST /v1/runs.
type RunRequest struct {
	PolicyRequest
	// Argv is the program and its arguments, never a shell string.
	Argv []string `json:"argv"`
	// StdinB64 is the program's standard input, base64.
	StdinB64 string `json:"stdin_b64,omitempty"`
	// Workdir is the program's working directory.
	Workdir string `json:"workdir,omitempty"`
}

// SandboxRequest is the body of POST /v1/sandboxes.
type SandboxRequest struct {
	PolicyRequest
	// IdleTimeout ends the sandbox this long after its last exec or
	// transfer, a duration.
	IdleTimeout string `json:"idle_timeout,omitempty"`
	// TTL ends the sandbox this long after its create, a duration.
	TTL string `json:"ttl,omitempty"`
	// WorkspaceSize caps the workspace /home/user, a size.
	WorkspaceSize string `json:"workspace_size,omitempty"`
	// Labels are the caller's, shown by sandbox ls.
	Labels map[string]string `json:"labels,omitempty"`
	// DownloadTypes is the MIME allowlist of downloads from the sandbox.
	DownloadTypes []string `json:"download_types,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec, and of the
// WebSocket's execute message (whose Type is "execute").
type ExecRequest struct {
	// Type is "execute" in a WebSocket message, absent otherwise.
	Type string `json:"type,omitempty"`
	// Argv is the program and its arguments, never a shell string.
	Argv []string `json:"argv"`
	// StdinB64 is the program's standard input, base64.
	StdinB64 string `json:"stdin_b64,omitempty"`
	// Stdin, over the WebSocket, keeps standard input open for input
	// messages.
	Stdin bool `json:"stdin,omitempty"`
	// Env adds to the sandbox's environment, NAME=VALUE each.
	Env []string `json:"env,omitempty"`
	// Workdir is the program's working directory.
	Workdir string `json:"workdir,omitempty"`
	// Timeout is the exec's wall-clock limit, a duration.
	Timeout string `json:"timeout,omitempty"`
	// OutputLimit caps each of the exec's stdout and stderr, a size.
	OutputLimit string `json:"output_limit,omitempty"`
	// Detach starts the program and answers at once.
	Detach bool `json:"detach,omitempty"`
}

// flexValue is a JSON string or number, kept as its text ("cpus": 2 or "0.5").
type flexValue string

func (v *flexValue) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*v = flexValue(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("give a number or a string such as \"0.5\"")
	}
	*v = flexValue(n.String())
	return nil
}

func invalid(format string, args ...any) error {
	return newError(KindInvalidInput, fmt.Sprintf(format, args...))
}

// decodeJSON reads one JSON object from r strictly: unknown fields and
// trailing data are refused.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return err
		case errors.Is(err, io.EOF):
			return invalid("the request body is empty; send a JSON object (see docs/api.md)")
		case errors.As(err, &se):
			return invalid("the request body is not valid JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &ute):
			return invalid("field %q: got a JSON %s, want %s (see docs/api.md)", ute.Field, ute.Value, ute.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return invalid("unknown field %s; fields are the CLI's flag names with '_' for '-' (see docs/api.md)", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return invalid("decoding the request body: %v", err)
	}
	if dec.More() {
		return invalid("the request body holds more than one JSON value; send one object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("the request body has trailing data after its JSON object")
	}
	return nil
}

// firstErr is the first of errs that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// parseDuration sets dst from s, unless s is empty (the default).
func parseDuration(field, s string, dst *time.Duration) error {
	if s == "" {
		return nil
	}
	d, err := units.ParseDuration(s)
	if err != nil || d <= 0 {
		return invalid("%s %q: give a positive duration such as \"30s\" or \"500ms\"", field, s)
	}
	*dst = d
	return nil
}

// parseBytes sets dst from s, unless s is empty (the default).
func parseBytes(field, s string, dst *units.Bytes) error {
	if s == "" {
		return nil
	}
	b, err := units.ParseBytes(s)
	if err != nil || b <= 0 {
		return invalid("%s %q: give a positive size such as \"512MiB\" or \"1.5GiB\"", field, s)
	}
	*dst = b
	return nil
}

// explicitPolicy converts the policy fields given; absent fields are zero.
func (p *PolicyRequest) explicitPolicy() (isolation.Policy, error) {
	for _, f := range []struct {
		name string
		v    json.RawMessage
		use  string
	}{
		{"input", p.Input, "upload files into a sandbox with PUT /v1/sandboxes/{id}/files"},
		{"artifacts", p.Artifacts, "the Result lists the artifacts; download them from a sandbox with GET /v1/sandboxes/{id}/files"},
		{"quarantine", p.Quarantine, "the Result lists rejected files with their reasons"},
		{"seccomp_profile", p.SeccompProfile, "use airlock's default profile, or run airlock on the host with --seccomp-profile"},
	} {
		if f.v != nil {
			return isolation.Policy{}, invalid("%s names a host path, which the API never takes from a client; %s", f.name, f.use)
		}
	}
	var pol isolation.Policy
	var err error
	if p.Isolation != "" {
		if pol.Isolation, err = isolation.ParseMode(p.Isolation); err != nil {
			return pol, invalid("isolation: %v", err)
		}
	}
	l := &pol.Limits
	if err := firstErr(
		parseDuration("timeout", p.Timeout, &l.Timeout),
		parseBytes("memory", p.Memory, &l.Memory),
		parseBytes("output_limit", p.OutputLimit, &l.Output),
		parseBytes("tmp_size", p.TmpSize, &l.Tmp),
		parseBytes("file_size", p.FileSize, &l.FileSize),
	); err != nil {
		return pol, err
	}
	if p.CPUs != "" {
		if l.CPUs, err = units.ParseCPUs(string(p.CPUs)); err != nil || l.CPUs <= 0 {
			return pol, invalid("cpus %q: give a positive number of CPUs such as 0.5 or 2", string(p.CPUs))
		}
	}
	if p.Pids != nil {
		if *p.Pids <= 0 {
			return pol, invalid("pids %d: give a positive number of processes, or leave it out for the default %d", *p.Pids, isolation.Default().Limits.Pids)
		}
		l.Pids = *p.Pids
	}
	switch p.Engine {
	case "", "auto", "oci", "docker":
	default:
		return pol, invalid("engine %q: use auto, oci or docker", p.Engine)
	}
	return pol, nil
}

// output converts the output-directory fields.
func (p *PolicyRequest) output() (runner.Output, error) {
	var o runner.Output
	if p.OutDir == "none" {
		if p.OutLimit != "" || p.OutFiles != nil || p.ArtifactMaxSize != "" || p.ArtifactTypes != nil {
			return o, invalid("out_dir is none: drop out_limit, out_files, artifact_max_size and artifact_types")
		}
		o.Disabled = true
		return o, nil
	}
	o.Dir, o.AllowDotfiles = p.OutDir, p.ArtifactsAllowDotfiles
	if err := firstErr(
		parseBytes("out_limit", p.OutLimit, &o.Size),
		parseBytes("artifact_max_size", p.ArtifactMaxSize, &o.MaxFileSize),
	); err != nil {
		return o, err
	}
	if p.OutFiles != nil {
		if *p.OutFiles <= 0 {
			return o, invalid("out_files %d: give a positive number; for no output directory, set out_dir to none", *p.OutFiles)
		}
		o.Files = *p.OutFiles
	}
	if p.ArtifactTypes != nil {
		types, err := mimeList("artifact_types", p.ArtifactTypes)
		if err != nil {
			return o, err
		}
		o.Types = types
	}
	return o, nil
}

func mimeList(field string, in []string) ([]string, error) {
	var out []string
	for _, t := range in {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if mimetype.Lookup(t) == nil {
			return nil, invalid("%s: unknown MIME type %q; known examples: %s", field, t, strings.Join(artifacts.DefaultTypes, ", "))
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, invalid("%s is empty; list at least one MIME type, such as text/plain", field)
	}
	return out, nil
}

func decodeStdin(s string) (io.Reader, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, invalid("stdin_b64 is not base64 (standard alphabet, padded): %v", err)
	}
	return bytes.NewReader(b), nil
}

// onTemplate converts a run or sandbox request: with no template, by
// explicit with the defaults; else on the template read from ts, the
// fields given (explicit without the defaults) narrowing it through
// narrow, a widening being invalid input. The request's engine becomes
// the one the template runs on.
func onTemplate[S any](p *PolicyRequest, ts *templates.Store, explicit func(defaults bool) (S, error), narrow func(*templates.Template, S) (S, error)) (S, error) {
	var zero S
	if p.Template == "" {
		return explicit(true)
	}
	t, err := ts.Get(p.Template)
	if err != nil {
		return zero, err
	}
	s, err := explicit(false)
	if err != nil {
		return zero, err
	}
	if p.Engine, err = t.EngineFor(p.Engine); err != nil {
		return zero, err
	}
	return narrow(t, s)
}

// spec converts a run request into the runner's Spec (see onTemplate).
func (q *RunRequest) spec(ts *templates.Store) (runner.Spec, error) {
	return onTemplate(&q.PolicyRequest, ts, q.explicitSpec, (*templates.Template).Narrow)
}

// explicitSpec converts the request; absent policy fields take the
// defaults when defaults is set, and are zero otherwise.
func (q *RunRequest) explicitSpec(defaults bool) (runner.Spec, error) {
	var s runner.Spec
	if len(q.Argv) == 0 {
		return s, invalid("argv is missing: give the program as a list, such as [\"python3\", \"-c\", \"print(1)\"]")
	}
	pol, err := q.explicitPolicy()
	if err != nil {
		return s, err
	}
	if defaults {
		pol = pol.WithDefaults()
	}
	out, err := q.output()
	if err != nil {
		return s, err
	}
	stdin, err := decodeStdin(q.StdinB64)
	if err != nil {
		return s, err
	}
	return runner.Spec{Image: q.Image, Argv: q.Argv, Env: q.Env, Stdin: stdin, Policy: pol, Workdir: q.Workdir, Output: out}, nil
}

// spec converts a sandbox request into the runner's SandboxSpec (see
// onTemplate).
func (q *SandboxRequest) spec(ts *templates.Store) (runner.SandboxSpec, error) {
	return onTemplate(&q.PolicyRequest, ts, q.explicitSpec, (*templates.Template).NarrowSandbox)
}

// explicitSpec converts the request; absent policy fields take the
// defaults when defaults is set, and are zero otherwise.
func (q *SandboxRequest) explicitSpec(defaults bool) (runner.SandboxSpec, error) {
	var s runner.SandboxSpec
	pol, err := q.explicitPolicy()
	if err != nil {
		return s, err
	}
	if defaults {
		pol = pol.WithDefaults()
	}
	out, err := q.output()
	if err != nil {
		return s, err
	}
	s = runner.SandboxSpec{Image: q.Image, Env: q.Env, Policy: pol, Output: out, Labels: q.Labels}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if err := firstErr(
		parseDuration("idle_timeout", q.IdleTimeout, &s.IdleTimeout),
		parseDuration("ttl", q.TTL, &s.TTL),
		parseBytes("workspace_size", q.WorkspaceSize, &s.WorkspaceSize),
	); err != nil {
		return s, err
	}
	if q.DownloadTypes != nil {
		if s.DownloadTypes, err = mimeList("download_types", q.DownloadTypes); err != nil {
			return s, err
		}
	}
	return s, nil
}

// spec converts an exec request into the runner's ExecSpec, without its
// stdin and output writers.
func (q *ExecRequest) spec() (runner.ExecSpec, error) {
	var s runner.ExecSpec
	if len(q.Argv) == 0 {
		return s, invalid("argv is missing: give the program as a list, such as [\"ls\", \"-l\"]")
	}
	if q.Stdin && q.StdinB64 != "" {
		return s, invalid("give stdin_b64 (the whole stdin) or stdin true (input messages), not both")
	}
	s = runner.ExecSpec{Argv: q.Argv, Env: q.Env, Workdir: q.Workdir, Detach: q.Detach}
	err := firstErr(
		parseDuration("timeout", q.Timeout, &s.Timeout),
		parseBytes("output_limit", q.OutputLimit, &s.OutputLimit),
	)
	if err != nil {
		return s, err
	}
	s.Stdin, err = decodeStdin(q.StdinB64)
	return s, err
}
