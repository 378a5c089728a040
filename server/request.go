package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/airlock-sandbox/airlock/wire"
)

// The request bodies. Field names are the CLI's flag names with '_' for
// '-', and values take the CLI's syntax ("512MiB", "30s").

// PolicyRequest holds the policy fields of runs and sandboxes: the one
// wire policy, and the host-path fields the API refuses.
type PolicyRequest struct {
	wire.Policy

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
	Argv Argv `json:"argv"`
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
	Labels Labels `json:"labels,omitempty"`
	// DownloadTypes is the MIME allowlist of downloads from the sandbox.
	DownloadTypes DownloadTypes `json:"download_types,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec, and of the
// WebSocket's execute message (whose Type is "execute").
type ExecRequest struct {
	// Type is "execute" in a WebSocket message, absent otherwise.
	Type string `json:"type,omitempty"`
	// Argv is the program and its arguments, never a shell string.
	Argv Argv `json:"argv"`
	// StdinB64 is the program's standard input, base64.
	StdinB64 string `json:"stdin_b64,omitempty"`
	// Stdin, over the WebSocket, keeps standard input open for input
	// messages.
	Stdin bool `json:"stdin,omitempty"`
	// Env adds to the sandbox's environment, NAME=VALUE each.
	Env wire.Env `json:"env,omitempty"`
	// Workdir is the program's working directory.
	Workdir string `json:"workdir,omitempty"`
	// Timeout is the exec's wall-clock limit, a duration.
	Timeout string `json:"timeout,omitempty"`
	// OutputLimit caps each of the exec's stdout and stderr, a size.
	OutputLimit string `json:"output_limit,omitempty"`
	// Detach starts the program and answers at once.
	Detach bool `json:"detach,omitempty"`
}

// ReadFilesRequest is the body of POST /v1/sandboxes/{id}/files/read.
type ReadFilesRequest struct {
	// Paths are the files to read, absolute or relative to the
	// workspace: runner.MaxDownloadFiles at most.
	Paths ReadPaths `json:"paths"`
}

// The lists of the bodies beside the policy's, each capped while it is
// decoded (wire.DecodeList).

// Argv is argv: wire.MaxArgv entries at most.
type Argv []string

func (l *Argv) UnmarshalJSON(b []byte) error {
	return wire.DecodeList(b, (*[]string)(l), "argv", wire.MaxArgv, "arguments; pass large data as stdin or an input file")
}

// Labels is labels: wire.MaxLabels at most.
type Labels map[string]string

func (l *Labels) UnmarshalJSON(b []byte) error {
	return wire.DecodeList(b, (*map[string]string)(l), "labels", wire.MaxLabels, "labels")
}

// DownloadTypes is download_types: wire.MaxMIMETypes at most.
type DownloadTypes []string

func (l *DownloadTypes) UnmarshalJSON(b []byte) error {
	return wire.DecodeList(b, (*[]string)(l), "download_types", wire.MaxMIMETypes, "MIME types")
}

// ReadPaths is a files/read request's paths: runner.MaxDownloadFiles at
// most.
type ReadPaths []string

func (l *ReadPaths) UnmarshalJSON(b []byte) error {
	return wire.DecodeList(b, (*[]string)(l), "paths", runner.MaxDownloadFiles, "paths a request")
}

func invalid(format string, args ...any) error {
	return newError(KindInvalidInput, fmt.Sprintf(format, args...))
}

// decodeJSON reads one JSON object from r strictly: unknown fields, a
// field's name in another case, a repeated key and trailing data are
// refused (wire.CheckKeys, as encoding/json takes the last three
// silently). The body is read once and decoded in place: a decoder over it
// would copy it again.
func decodeJSON(r io.Reader, v any) error {
	var buf bytes.Buffer
	if l, ok := r.(interface{ Len() int }); ok {
		buf.Grow(l.Len() + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(r); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return err
		}
		return invalid("reading the request body: %v", err)
	}
	b := buf.Bytes()
	if !json.Valid(b) {
		return malformed(b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, new(*wire.Error)):
			return err
		case errors.As(err, &ute):
			return invalid("field %q: got a JSON %s, want %s (see docs/api.md)", ute.Field, ute.Value, ute.Type)
		}
		return invalid("decoding the request body: %v", err)
	}
	err := wire.CheckKeys(b, v)
	if uk, ok := errors.AsType[*wire.UnknownKeyError](err); ok {
		return invalid("unknown field %q; fields are the CLI's flag names with '_' for '-' (see docs/api.md)", uk.Key)
	}
	return err
}

// malformed words why b, which is not one JSON value, is refused.
func malformed(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	var skip json.RawMessage
	err := dec.Decode(&skip)
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return invalid("the request body is empty; send a JSON object (see docs/api.md)")
	case errors.As(err, &se):
		return invalid("the request body is not valid JSON at byte %d: %v", se.Offset, err)
	case err != nil:
		return invalid("decoding the request body: %v", err)
	case dec.More():
		return invalid("the request body holds more than one JSON value; send one object")
	}
	return invalid("the request body has trailing data after its JSON object")
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
func parseDuration(field, s string, dst *time.Duration) (err error) {
	if s != "" {
		*dst, err = wire.Duration(field, s)
	}
	return err
}

// parseBytes sets dst from s, unless s is empty (the default).
func parseBytes(field, s string, dst *units.Bytes) (err error) {
	if s != "" {
		*dst, err = wire.Size(field, s)
	}
	return err
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
	return p.ParseClient(p.Template)
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

// spec converts a run request into the runner's Spec and the engine it
// runs on: the fields given, on the template when one is named (which
// they narrow, never widen), else with the defaults.
func (q *RunRequest) spec(svc *service.Service) (runner.Spec, string, error) {
	explicit, err := q.explicitSpec(q.Template == "")
	if err != nil {
		return explicit, "", err
	}
	return svc.RunSpec(q.Template, q.Engine, explicit)
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
	out, err := q.ParseOutput()
	if err != nil {
		return s, err
	}
	stdin, err := decodeStdin(q.StdinB64)
	if err != nil {
		return s, err
	}
	return runner.Spec{Image: q.Image, Argv: q.Argv, Env: q.Env, Stdin: stdin, Policy: pol, Workdir: q.Workdir, Output: out}, nil
}

// spec converts a sandbox request as RunRequest.spec does.
func (q *SandboxRequest) spec(svc *service.Service) (runner.SandboxSpec, string, error) {
	explicit, err := q.explicitSpec(q.Template == "")
	if err != nil {
		return explicit, "", err
	}
	return svc.SandboxSpec(q.Template, q.Engine, explicit)
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
	out, err := q.ParseOutput()
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
		if s.DownloadTypes, err = wire.MIMEList("download_types", q.DownloadTypes); err != nil {
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
