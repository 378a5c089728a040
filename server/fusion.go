package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/airlock-sandbox/airlock/wire"
)

// A SandboxFusion-compatible endpoint: evaluation harnesses (verl's
// reward functions among them) post {code, language, …} to /run_code.

// FusionRequest is SandboxFusion's RunCodeRequest.
type FusionRequest struct {
	Code           string     `json:"code"`
	Language       string     `json:"language"`
	Stdin          *string    `json:"stdin"`
	CompileTimeout *float64   `json:"compile_timeout"`
	RunTimeout     *float64   `json:"run_timeout"`
	MemoryLimitMB  *float64   `json:"memory_limit_MB"`
	Files          CodeFiles  `json:"files"`
	FetchFiles     FetchFiles `json:"fetch_files"`
}

// FusionRunResult is SandboxFusion's CommandRunResult.
type FusionRunResult struct {
	Status        string   `json:"status"`
	ExecutionTime *float64 `json:"execution_time"`
	ReturnCode    *int     `json:"return_code"`
	Stdout        *string  `json:"stdout"`
	Stderr        *string  `json:"stderr"`
}

// FusionResponse is SandboxFusion's RunCodeResponse, plus FilesOmitted,
// less its files: writeFusion adds them, streamed from the spool, so that
// they are never whole in memory.
type FusionResponse struct {
	Status          string           `json:"status"`
	Message         string           `json:"message"`
	CompileResult   *FusionRunResult `json:"compile_result"`
	RunResult       *FusionRunResult `json:"run_result"`
	ExecutorPodName *string          `json:"executor_pod_name"`
	// FilesOmitted names every fetch_files entry left out of files, and
	// why (SandboxFusion itself leaves them out silently).
	FilesOmitted []FusionOmitted `json:"files_omitted"`
}

// FusionOmitted is a fetch_files entry left out: Reason is a scanner's
// reason word (symlink, not_found, type_not_allowed, …), too_many or
// too_large for the response's caps, or duplicate.
type FusionOmitted struct {
	Name    string `json:"name"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Defaults of Options' fetch_files caps.
const (
	DefaultFetchMaxFiles = 32
	DefaultFetchMaxBytes = 64 << 20
)

// maxFetchNames bounds fetch_files itself (FetchFiles): each name past
// what a response carries is answered with an omission of its own, held
// until the answer.
const maxFetchNames = 1000

// maxFusionPath bounds a path of files and fetch_files, as PATH_MAX does
// a path in the sandbox: the response echoes fetch_files names.
const maxFusionPath = 4096

// CodeFiles is files: wire.MaxCodeFiles at most, each path at most
// maxFusionPath bytes. SandboxFusion types a file's content as optional;
// a null is refused, naming the file, rather than written empty.
type CodeFiles map[string]string

func (l *CodeFiles) UnmarshalJSON(b []byte) error {
	var m map[string]*string
	if err := wire.DecodeList(b, &m, "files", wire.MaxCodeFiles, "files"); err != nil {
		return err
	}
	*l = make(CodeFiles, len(m))
	for p, v := range m {
		if err := checkFusionPath("files", p); err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("files[%q] is null: give the file's content in base64 (\"\" for an empty file), or leave it out", p)
		}
		(*l)[p] = *v
	}
	return nil
}

// FetchFiles is fetch_files: maxFetchNames at most, each at most
// maxFusionPath bytes.
type FetchFiles []string

func (l *FetchFiles) UnmarshalJSON(b []byte) error {
	if err := wire.DecodeList(b, (*[]string)(l), "fetch_files", maxFetchNames, "names"); err != nil {
		return err
	}
	for _, p := range *l {
		if err := checkFusionPath("fetch_files", p); err != nil {
			return err
		}
	}
	return nil
}

// clip cuts s to 256 bytes, for a message that repeats what files_omitted
// holds whole.
func clip(s string) string {
	if len(s) <= 256 {
		return s
	}
	return strings.ToValidUTF8(s[:256], "") + "…"
}

// checkFusionPath refuses a path of field over maxFusionPath bytes,
// quoting only its start.
func checkFusionPath(field, p string) error {
	if len(p) <= maxFusionPath {
		return nil
	}
	return fmt.Errorf("%s: the path %q… is %d bytes, over the %d a path may have", field, p[:64], len(p), maxFusionPath)
}

// omitted reasons of the response's own.
const (
	reasonDuplicate = "duplicate"
	reasonError     = "error"
)

// SandboxFusion's words.
const (
	fusionSuccess      = "Success"
	fusionFailed       = "Failed"
	fusionSandboxError = "SandboxError"
	fusionFinished     = "Finished"
	fusionError        = "Error"
	fusionTLE          = "TimeLimitExceeded"
)

const fusionWorkdir = "/home/user"

func (s *Server) ping(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, "pong")
}

func (s *Server) runCode(w http.ResponseWriter, r *http.Request) {
	var q FusionRequest
	if err := s.body(w, r, &q); err != nil {
		writeError(w, err)
		return
	}
	resp, got, err := s.fusion(r.Context(), &q)
	defer got.close()
	// Past --max-sandboxes the answer is /v1/runs's: 429 over_limit in the
	// API's error shape, which a harness retries.
	if err != nil {
		writeError(w, err)
		return
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(transferTimeout))
	if err := writeFusion(w, resp, got); err != nil {
		s.log.Warn("writing a run_code response", "err", err)
	}
}

// fusionSeconds converts a timeout in seconds: nil is the default, and at
// most a day is taken.
func fusionSeconds(field string, v *float64) (time.Duration, error) {
	if v == nil {
		return service.CodeTimeout, nil
	}
	d, err := wire.Seconds(field, v)
	if err == nil && d > 24*time.Hour {
		err = &wire.Error{Field: field, Value: strconv.FormatFloat(*v, 'g', -1, 64), Want: "give at most a day (86400 seconds)"}
	}
	return d, err
}

func sandboxError(format string, args ...any) (FusionResponse, *fetched, error) {
	return FusionResponse{Status: fusionSandboxError, Message: fmt.Sprintf(format, args...)}, nil, nil
}

// fusion runs one request in a fresh sandbox, destroyed afterwards; the
// fetched files are spooled, for writeFusion to send. A request refused
// at admission is the error.
func (s *Server) fusion(ctx context.Context, q *FusionRequest) (FusionResponse, *fetched, error) {
	lang, ok := service.CodeLanguage(strings.ToLower(q.Language))
	if !ok {
		return sandboxError("language %q is not supported by airlock: use python or bash", q.Language)
	}
	timeout, err := fusionSeconds("run_timeout", q.RunTimeout)
	if err != nil {
		return sandboxError("%v", err)
	}
	if _, err := fusionSeconds("compile_timeout", q.CompileTimeout); err != nil {
		return sandboxError("%v", err)
	}
	c := service.Code{Language: strings.ToLower(q.Language), Policy: isolation.Default(), Files: map[string][]byte{}}
	c.Policy.Limits.Timeout = timeout
	// -1 is SandboxFusion's default, which its clients send. Any other
	// value is a limit: zero, a negative, under a byte (which would read
	// as the default) or past an int64 (which would wrap) is refused.
	if m := q.MemoryLimitMB; m != nil && *m != -1 {
		b := *m * (1 << 20)
		if b < 1 || b >= math.MaxInt64 {
			return sandboxError("memory_limit_MB %v: give a number of megabytes from 1 to the host's memory, or -1 for airlock's default (%v)", *m, isolation.Default().Limits.Memory)
		}
		c.Policy.Limits.Memory, c.MemoryAsked = units.Bytes(b), true
	}
	for p, b64 := range q.Files {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return sandboxError("files[%q] is not base64: %v", p, err)
		}
		c.Files[fusionPath(p)] = b
	}
	c.Files[lang.File] = []byte(q.Code)
	c.Argv = []string{lang.Interpreter, lang.File}
	if q.Stdin != nil {
		c.Stdin = strings.NewReader(*q.Stdin)
	}
	var got *fetched
	c.Fetch = func(ctx context.Context, sb *runner.Sandbox) (err error) {
		got, err = s.fetchFiles(ctx, sb, q.FetchFiles)
		return err
	}
	s.inflight.Add(1)
	defer s.inflight.Done()
	run, err := s.svc.RunCode(ctx, c)
	if run.Create > 0 {
		s.metrics.createDur.Observe(run.Create.Seconds())
	}
	if run.Exec > 0 {
		s.metrics.execDur.Observe(run.Exec.Seconds())
	}
	if run.Destroy != nil {
		s.metrics.termFail.Add(1)
	}
	// Over a limit (admission, or an empty pool under --pool-exhausted
	// fail): 429, to retry, never a sample's failure.
	if errkind.Of(err) == errkind.OverLimit {
		return FusionResponse{}, nil, err
	}
	if err != nil {
		s.refused(err)
		got.close()
		return sandboxError("%v", err)
	}
	s.metrics.result(run.Result)
	out := FusionResponse{Status: fusionFailed, RunResult: fusionRun(run.Result), ExecutorPodName: &run.SandboxID}
	if run.Result.Reason == runner.ReasonExited && run.Result.ExitCode == 0 {
		out.Status = fusionSuccess
	}
	out.FilesOmitted = got.omitted
	if len(got.omitted) > 0 {
		var names []string
		for i, o := range got.omitted {
			if i == 8 {
				names = append(names, fmt.Sprintf("and %d more", len(got.omitted)-i))
				break
			}
			names = append(names, fmt.Sprintf("%q: %s", clip(o.Name), clip(o.Message)))
		}
		out.Message = "fetch_files left out (see files_omitted): " + strings.Join(names, "; ")
	}
	return out, got, nil
}

// fusionPath puts a relative path under the working directory.
func fusionPath(p string) string {
	if path.IsAbs(p) {
		return p
	}
	return path.Join(fusionWorkdir, p)
}

func fusionRun(res runner.Result) *FusionRunResult {
	rr := &FusionRunResult{Status: fusionError}
	switch res.Reason {
	case runner.ReasonExited:
		rr.Status = fusionFinished
	case runner.ReasonTimeout:
		rr.Status = fusionTLE
	}
	secs := float64(res.DurationMS) / 1000
	code := res.ExitCode
	stdout, stderr := string(res.Stdout.Head), string(res.Stderr.Head)
	rr.ExecutionTime, rr.ReturnCode, rr.Stdout, rr.Stderr = &secs, &code, &stdout, &stderr
	return rr
}
