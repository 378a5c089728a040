package mcpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/airlock-sandbox/airlock/wire"
)

// MaxFileBytes caps a file sandbox_write_file writes or sandbox_read_file
// returns: it travels inside one MCP message. Bigger files go through
// `airlock cp` or the HTTP API.
const MaxFileBytes = 8 << 20

// maxCode caps run_code's code, which is passed as one argument
// (Linux's MAX_ARG_STRLEN is 128KiB).
const maxCode = 128<<10 - 1

// languages maps run_code's languages to the argv that runs code.
var languages = map[string]func(code string) []string{
	"python": func(c string) []string { return []string{"python3", "-c", c} },
	"bash":   func(c string) []string { return []string{"bash", "-c", c} },
	"sh":     func(c string) []string { return []string{"sh", "-c", c} },
}

func languageNames() string {
	var names []string
	for n := range languages {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// The tools' arguments.
type (
	RunCodeArgs struct {
		Language string   `json:"language" jsonschema:"python, bash or sh"`
		Code     string   `json:"code" jsonschema:"the program's source, run as python3 -c CODE or bash -c CODE"`
		Stdin    string   `json:"stdin,omitempty" jsonschema:"text fed to the program's standard input (closed when absent)"`
		TimeoutS *float64 `json:"timeout_s,omitempty" jsonschema:"wall-clock limit in seconds (default 30)"`
		Template string   `json:"template,omitempty" jsonschema:"a sandbox template to run on (its image, limits and env; airlock template ls lists them); timeout_s may only shorten its timeout"`
	}
	SandboxCreateArgs struct {
		Template     string   `json:"template,omitempty" jsonschema:"a sandbox template to create the sandbox from (airlock template ls lists them); image must then be its image, and memory may only lower its memory"`
		Image        string   `json:"image,omitempty" jsonschema:"digest-pinned image NAME@sha256:<64 hex> (default: airlock's default image, Debian with python3 and numpy)"`
		Memory       string   `json:"memory,omitempty" jsonschema:"memory limit with a unit, such as 512MiB or 1GiB (default 512MiB)"`
		TimeoutS     *float64 `json:"timeout_s,omitempty" jsonschema:"the longest one sandbox_exec may run, in seconds (default 30); sandbox_exec's timeout_s may only shorten it"`
		TTLS         *float64 `json:"ttl_s,omitempty" jsonschema:"seconds after which the sandbox ends whatever it does (default 3600)"`
		IdleTimeoutS *float64 `json:"idle_timeout_s,omitempty" jsonschema:"seconds without an exec or a file transfer after which the sandbox ends (default 900)"`
		AllowHost    []string `json:"allow_host,omitempty" jsonschema:"hosts the sandbox may reach through its egress proxy, HOST[:PORT] each, such as pypi.org or *.pythonhosted.org (default: none, no network at all)"`
		Credential   []string `json:"credential,omitempty" jsonschema:"credential routes of the template named, HOST=HEADER:ENV or HOST=HEADER:@FILE each, to keep only these of them (a template is required)"`
		EgressLimit  string   `json:"egress_limit,omitempty" jsonschema:"cap on the bytes the egress proxy moves for the sandbox, both ways, over its whole life, with a unit such as 4GiB (default 1GiB; needs allow_host or a template's egress)"`
		Engine       string   `json:"engine,omitempty" jsonschema:"auto, oci or docker (default auto, or the template's), or kube: a sandbox on the Kubernetes cluster this server was started with (--kubeconfig), claimed from the warm pool of template, which is then the only other argument"`
	}
	SandboxExecArgs struct {
		SandboxID string   `json:"sandbox_id" jsonschema:"the id sandbox_create returned (sb- and 20 hex digits)"`
		Command   string   `json:"command" jsonschema:"a shell command, run as sh -c COMMAND in the workspace /home/user"`
		TimeoutS  *float64 `json:"timeout_s,omitempty" jsonschema:"wall-clock limit in seconds (default: the sandbox's, 30 unless sandbox_create set it); a longer one is cut to the sandbox's"`
	}
	SandboxWriteFileArgs struct {
		SandboxID     string  `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
		Path          string  `json:"path" jsonschema:"a path in the workspace /home/user or in /tmp (a relative path is under /home/user); missing directories are made"`
		Content       *string `json:"content,omitempty" jsonschema:"the file's content as text (give this or content_base64)"`
		ContentBase64 *string `json:"content_base64,omitempty" jsonschema:"the file's content as standard base64 (give this or content)"`
	}
	SandboxFileArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
		Path      string `json:"path" jsonschema:"a path in the workspace /home/user, /tmp or the output directory /out (a relative path is under /home/user)"`
	}
	SandboxIDArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
	}
	NoArgs struct{}
)

func (s *Server) addTools() {
	t := func(b bool) *bool { return &b }
	addTool(s.mcp, &mcp.Tool{
		Name:        "run_code",
		Description: "Run a snippet of Python, bash or sh once in a fresh, isolated sandbox (no network, read-only root, 30s and 512MiB by default) and return how it ended: reason, exit_code, stdout, stderr, truncated.",
		Annotations: &mcp.ToolAnnotations{Title: "Run code in a sandbox", DestructiveHint: t(false), OpenWorldHint: t(false)},
	}, s.runCode)
	addTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_create",
		Description: "Create a long-lived sandbox and return its sandbox_id. Its workspace /home/user persists between sandbox_exec calls. It ends by itself after its idle timeout (default 15 minutes) or TTL (default 1 hour); sandbox_destroy ends it sooner.",
		Annotations: &mcp.ToolAnnotations{Title: "Create a sandbox", DestructiveHint: t(false), OpenWorldHint: t(false)},
	}, s.sandboxCreate)
	addTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_exec",
		Description: "Run a shell command (sh -c) in a live sandbox, in /home/user, and return how it ended: reason, exit_code, stdout, stderr, truncated.",
		Annotations: &mcp.ToolAnnotations{Title: "Run a command in a sandbox", OpenWorldHint: t(false)},
	}, s.sandboxExec)
	addTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_write_file",
		Description: fmt.Sprintf("Write a file (at most %s) into a live sandbox's workspace /home/user or /tmp, from text (content) or bytes (content_base64). Returns its path, size and sha256.", units.Bytes(MaxFileBytes)),
		Annotations: &mcp.ToolAnnotations{Title: "Write a file into a sandbox", IdempotentHint: true, OpenWorldHint: t(false)},
	}, s.sandboxWriteFile)
	addTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_read_file",
		Description: fmt.Sprintf("Read a file (at most %s) from a live sandbox's workspace /home/user, /tmp or /out, through airlock's artifact scanner: links, devices and types off the sandbox's allowlist are refused. Returns path, size, sha256, mime, and content as text or content_base64.", units.Bytes(MaxFileBytes)),
		Annotations: &mcp.ToolAnnotations{Title: "Read a file from a sandbox", ReadOnlyHint: true, OpenWorldHint: t(false)},
	}, s.sandboxReadFile)
	addTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_list",
		Description: "List the live sandboxes: id, state, image, engine, isolation, and when each ends.",
		Annotations: &mcp.ToolAnnotations{Title: "List sandboxes", ReadOnlyHint: true, OpenWorldHint: t(false)},
	}, s.sandboxList)
	addTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_destroy",
		Description: "Destroy a sandbox: kill every process in it and remove its workspace. A sandbox that is already gone succeeds.",
		Annotations: &mcp.ToolAnnotations{Title: "Destroy a sandbox", DestructiveHint: t(true), IdempotentHint: true, OpenWorldHint: t(false)},
	}, s.sandboxDestroy)
	addTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_pause",
		Description: "Pause a sandbox: checkpoint its processes and memory and free them, keeping its files. Its TTL still counts; its idle timeout does not while paused. sandbox_resume, sandbox_exec or a file tool resumes it, with its processes going on where they stopped. Only sandboxes of the oci engine under gVisor can pause.",
		Annotations: &mcp.ToolAnnotations{Title: "Pause a sandbox", DestructiveHint: t(false), IdempotentHint: true, OpenWorldHint: t(false)},
	}, s.sandboxPause)
	addTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_resume",
		Description: "Resume a paused sandbox under the same sandbox_id, its processes going on where they stopped. A sandbox that is not paused is left as it is.",
		Annotations: &mcp.ToolAnnotations{Title: "Resume a sandbox", DestructiveHint: t(false), IdempotentHint: true, OpenWorldHint: t(false)},
	}, s.sandboxResume)
}

// seconds converts a tool's *_s argument; nil is zero (the default).
func seconds(name string, v *float64) (time.Duration, error) { return wire.Seconds(name, v) }

// runSpec converts run_code's arguments; zero fields are left for the
// runner's defaults, or for a template to fill in.
func runSpec(in RunCodeArgs) (runner.Spec, error) {
	argv, ok := languages[in.Language]
	if !ok {
		return runner.Spec{}, fmt.Errorf("language %q is not supported: use one of %s (for anything else, write the file with sandbox_write_file and run it with sandbox_exec)", in.Language, languageNames())
	}
	if in.Code == "" {
		return runner.Spec{}, errors.New("code is empty: give the program's source")
	}
	if len(in.Code) > maxCode {
		return runner.Spec{}, fmt.Errorf("code is %s, over run_code's %s: write it to a file with sandbox_write_file and run it with sandbox_exec", units.Bytes(len(in.Code)), units.Bytes(maxCode))
	}
	if strings.ContainsRune(in.Code, 0) {
		return runner.Spec{}, errors.New("code contains a NUL byte, which no program argument can carry")
	}
	timeout, err := seconds("timeout_s", in.TimeoutS)
	if err != nil {
		return runner.Spec{}, err
	}
	spec := runner.Spec{Argv: argv(in.Code)}
	spec.Policy.Limits.Timeout = timeout
	if in.Stdin != "" {
		spec.Stdin = strings.NewReader(in.Stdin)
	}
	return spec, nil
}

// sandboxSpec converts sandbox_create's arguments.
func sandboxSpec(in SandboxCreateArgs) (runner.SandboxSpec, error) {
	var s runner.SandboxSpec
	s.Image = in.Image
	w := wire.Policy{AllowHost: in.AllowHost, Credential: in.Credential, EgressLimit: in.EgressLimit, Engine: in.Engine}
	pol, err := w.ParseClient(in.Template)
	if err != nil {
		return s, err
	}
	s.Policy.Egress = pol.Egress
	if in.Memory != "" {
		if s.Policy.Limits.Memory, err = wire.Size("memory", in.Memory); err != nil {
			return s, err
		}
	}
	if s.Policy.Limits.Timeout, err = seconds("timeout_s", in.TimeoutS); err != nil {
		return s, err
	}
	if s.TTL, err = seconds("ttl_s", in.TTLS); err != nil {
		return s, err
	}
	if s.IdleTimeout, err = seconds("idle_timeout_s", in.IdleTimeoutS); err != nil {
		return s, err
	}
	return s, nil
}

// execSpec converts sandbox_exec's arguments.
func execSpec(in SandboxExecArgs) (runner.ExecSpec, error) {
	if err := checkID(in.SandboxID); err != nil {
		return runner.ExecSpec{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return runner.ExecSpec{}, errors.New("command is empty: give a shell command, such as `ls -la`")
	}
	if strings.ContainsRune(in.Command, 0) {
		return runner.ExecSpec{}, errors.New("command contains a NUL byte, which no program argument can carry")
	}
	timeout, err := seconds("timeout_s", in.TimeoutS)
	if err != nil {
		return runner.ExecSpec{}, err
	}
	return runner.ExecSpec{Argv: []string{"sh", "-c", in.Command}, Timeout: timeout}, nil
}

// fileContent decodes sandbox_write_file's content.
func fileContent(in SandboxWriteFileArgs) ([]byte, error) {
	if err := checkID(in.SandboxID); err != nil {
		return nil, err
	}
	var b []byte
	switch {
	case in.Content != nil && in.ContentBase64 != nil:
		return nil, errors.New("give content or content_base64, not both")
	case in.Content != nil:
		b = []byte(*in.Content)
	case in.ContentBase64 != nil:
		var err error
		if b, err = base64.StdEncoding.DecodeString(*in.ContentBase64); err != nil {
			return nil, fmt.Errorf("content_base64 is not standard base64 (%v): encode the bytes with padding, alphabet A-Z a-z 0-9 + /", err)
		}
	default:
		return nil, errors.New("give the file's content: content (text) or content_base64 (bytes)")
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("the file is %s, over the %s an MCP call carries: split it, or copy it with `airlock cp`", units.Bytes(len(b)), units.Bytes(MaxFileBytes))
	}
	return b, nil
}

// checkID refuses what is not a sandbox id, in the tools' words.
func checkID(id string) error {
	if runner.CheckSandboxID(id) != nil {
		return fmt.Errorf("sandbox_id %q is not a sandbox id (sb- and 20 hex digits): use the sandbox_id sandbox_create returned; sandbox_list lists the live ones", id)
	}
	return nil
}

// ExecResult is how a run_code or sandbox_exec ended. When the program's
// output is not UTF-8, stdout (or stderr) holds it with invalid bytes
// replaced and stdout_base64 (or stderr_base64) the exact bytes.
type ExecResult struct {
	ID        string `json:"id" jsonschema:"the run or exec id"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox the exec ran in"`
	Reason    string `json:"reason" jsonschema:"how it ended: exited, timeout, oom, output_limit, pids_limit, killed, destroyed or error"`
	ExitCode  int    `json:"exit_code" jsonschema:"the program's exit status; 128+N after signal N; -1 when it never ran"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	// Truncated is set when stdout or stderr passed the output cap: the
	// text is then the head, a marker, and the tail.
	Truncated    bool   `json:"truncated" jsonschema:"stdout or stderr passed the output cap; the middle was left out"`
	StdoutBase64 string `json:"stdout_base64,omitempty"`
	StderrBase64 string `json:"stderr_base64,omitempty"`
	DurationMS   int64  `json:"duration_ms"`
	Error        string `json:"error,omitempty"`
}

// execResult shapes a runner Result.
func execResult(r runner.Result) ExecResult {
	out := ExecResult{ID: r.ID, SandboxID: r.SandboxID, Reason: string(r.Reason), ExitCode: r.ExitCode,
		Truncated: r.Stdout.Truncated || r.Stderr.Truncated, DurationMS: r.DurationMS, Error: r.Error}
	out.Stdout, out.StdoutBase64 = streamText(r.Stdout)
	out.Stderr, out.StderrBase64 = streamText(r.Stderr)
	return out
}

// streamText is a stream as text: the head, and when it was cut, a marker
// and the tail; b64 is the same bytes exactly when they are not UTF-8.
func streamText(s runner.Stream) (text, b64 string) {
	b := s.Head
	if s.Truncated {
		omitted := s.Bytes - int64(len(s.Head)) - int64(len(s.Tail))
		b = append(append(append([]byte{}, s.Head...), fmt.Sprintf("\n[airlock: %d bytes left out]\n", omitted)...), s.Tail...)
	}
	if utf8.Valid(b) {
		return string(b), ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), base64.StdEncoding.EncodeToString(b)
}

// SandboxResult describes one sandbox.
type SandboxResult struct {
	SandboxID string                 `json:"sandbox_id"`
	State     string                 `json:"state" jsonschema:"requested, created, ready, running or failed"`
	Image     string                 `json:"image"`
	Engine    string                 `json:"engine"`
	Isolation string                 `json:"isolation"`
	Workspace string                 `json:"workspace" jsonschema:"the workspace directory, the working directory of every exec"`
	Limits    isolation.LimitsRecord `json:"limits"`
	CreatedAt time.Time              `json:"created_at"`
	ExpiresAt time.Time              `json:"expires_at" jsonschema:"when the TTL ends it"`
	EndsAt    time.Time              `json:"ends_at" jsonschema:"when it ends unless something runs: the earlier of the TTL and the idle timeout"`
	Labels    map[string]string      `json:"labels,omitempty"`
	Error     string                 `json:"error,omitempty"`
}

func sandboxResult(si runner.SandboxInfo, now time.Time) SandboxResult {
	return SandboxResult{SandboxID: si.ID, State: string(si.State), Image: si.Image, Engine: si.Engine, Isolation: si.Isolation,
		Workspace: si.Workspace, Limits: si.Limits, CreatedAt: si.CreatedAt, ExpiresAt: si.ExpiresAt, EndsAt: si.Deadline(now),
		Labels: si.Labels, Error: si.Error}
}

// SandboxList is sandbox_list's result.
type SandboxList struct {
	Sandboxes []SandboxResult `json:"sandboxes"`
}

// Destroyed is sandbox_destroy's result: the sandbox is gone now,
// whether this call or an earlier end (rm, TTL, idle timeout) freed it.
type Destroyed struct {
	SandboxID string `json:"sandbox_id"`
	Destroyed bool   `json:"destroyed"`
}

// FileResult is the record of a file written or read. Content holds a
// read file's bytes when they are UTF-8, ContentBase64 otherwise.
type FileResult struct {
	SandboxID     string `json:"sandbox_id"`
	Path          string `json:"path"`
	Size          int64  `json:"size"`
	SHA256        string `json:"sha256"`
	MIME          string `json:"mime,omitempty"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
}

func fileResult(id string, tr runner.Transfer, data []byte, read bool) FileResult {
	fr := FileResult{SandboxID: id, Path: tr.Path, Size: tr.Size, SHA256: tr.SHA256, MIME: tr.MIME}
	if fr.SHA256 == "" {
		sum := sha256.Sum256(data)
		fr.SHA256 = hex.EncodeToString(sum[:])
	}
	if read {
		if utf8.Valid(data) {
			fr.Content = string(data)
		} else {
			fr.ContentBase64 = base64.StdEncoding.EncodeToString(data)
		}
	}
	return fr
}

// capped holds at most max bytes; past that, writes fail.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

var errFileTooLarge = errors.New("file too large for one MCP message")

func (c *capped) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) > c.max {
		c.over = true
		return 0, errFileTooLarge
	}
	return c.buf.Write(p)
}

// runCode is run_code. Code in a language that airlock serve has a
// run-code template for (--run-code-template), with no template of its
// own, goes to service.RunCode as /run_code's does: from that template's
// pool of ready interpreters, one job per sandbox, or cold when it asks
// for more than the template gives. Any other is a one-shot run.
func (s *Server) runCode(ctx context.Context, _ *mcp.CallToolRequest, in RunCodeArgs) (*mcp.CallToolResult, ExecResult, error) {
	spec, err := runSpec(in)
	if err != nil {
		return nil, ExecResult{}, toolError("starting the run", invalidArgs{err})
	}
	if in.Template == "" && in.Language == forkserver.Language && s.svc.RunCodeTemplate(in.Language) != "" {
		// Without timeout_s, the template's timeout, as on a template.
		// Written to a file, as /run_code's: the fork server runs a file.
		src, _ := service.CodeLanguage(in.Language)
		c := service.Code{Language: in.Language, Policy: isolation.Default(), Files: map[string][]byte{src.File: []byte(in.Code)},
			Argv: []string{src.Interpreter, src.File}, Stdin: spec.Stdin}
		c.Policy.Limits.Timeout = spec.Policy.Limits.Timeout
		run, err := s.svc.RunCode(ctx, c)
		if err != nil {
			return nil, ExecResult{}, toolError("running the code", err)
		}
		s.log.Debug("run_code over MCP", "sandbox_id", run.SandboxID, "template", run.Template, "cold", run.Cold)
		// The sandbox is gone with its one job: run_code names none.
		res := execResult(run.Result)
		res.SandboxID = ""
		return nil, res, nil
	}
	spec, eng, err := s.svc.RunSpec(in.Template, "", spec)
	if err != nil {
		return nil, ExecResult{}, toolError("starting the run", err)
	}
	// On a template with a warm pool (airlock serve --pool), the run
	// takes a pooled sandbox.
	res, err := s.svc.Run(ctx, eng, in.Template, spec)
	if err != nil {
		return nil, ExecResult{}, toolError("running the code", err)
	}
	return nil, execResult(res), nil
}

// sandboxCreate is sandbox_create.
func (s *Server) sandboxCreate(ctx context.Context, _ *mcp.CallToolRequest, in SandboxCreateArgs) (*mcp.CallToolResult, SandboxResult, error) {
	if in.Engine == claim.Engine {
		return s.sandboxCreateKube(ctx, in)
	}
	spec, err := sandboxSpec(in)
	if err != nil {
		return nil, SandboxResult{}, toolError("creating the sandbox", invalidArgs{err})
	}
	spec, eng, err := s.svc.SandboxSpec(in.Template, in.Engine, spec)
	if err != nil {
		return nil, SandboxResult{}, toolError("creating the sandbox", err)
	}
	// The sandbox outlives this call: a client that hangs up mid-create
	// gets nothing back, so the create must not be cut half-way either;
	// its TTL frees it. On a template with a warm pool, it is a pooled one.
	sb, err := s.svc.Create(context.WithoutCancel(ctx), eng, in.Template, spec)
	if err != nil {
		return nil, SandboxResult{}, toolError("creating the sandbox", err)
	}
	s.log.Info("sandbox created over MCP", "sandbox_id", sb.ID())
	return nil, sandboxResult(sb.Info(), time.Now()), nil
}

// open opens a live sandbox on the engine it was made with.
func (s *Server) open(ctx context.Context, id string) (*runner.Sandbox, func(), error) {
	sb, done, err := s.svc.Open(ctx, id)
	if err != nil {
		return nil, nil, sandboxError(id, err)
	}
	return sb, done, nil
}

// openFiles opens sandbox id's one-file transfers, wherever it runs.
func (s *Server) openFiles(ctx context.Context, id string) (service.Files, func(), error) {
	f, _, done, err := s.svc.OpenFiles(ctx, id)
	if err != nil {
		return nil, nil, sandboxError(id, err)
	}
	return f, done, nil
}

// sandboxExec is sandbox_exec.
func (s *Server) sandboxExec(ctx context.Context, _ *mcp.CallToolRequest, in SandboxExecArgs) (*mcp.CallToolResult, ExecResult, error) {
	spec, err := execSpec(in)
	if err != nil {
		return nil, ExecResult{}, toolError("starting the exec", invalidArgs{err})
	}
	if _, kube, _ := s.svc.KubeSandbox(in.SandboxID); kube {
		res, err := s.svc.ExecKube(ctx, in.SandboxID, spec)
		if err != nil {
			return nil, ExecResult{}, sandboxError(in.SandboxID, err)
		}
		return nil, execResult(res), nil
	}
	sb, done, err := s.open(ctx, in.SandboxID)
	if err != nil {
		return nil, ExecResult{}, err
	}
	defer done()
	res, err := sb.Exec(ctx, spec)
	if err != nil {
		return nil, ExecResult{}, sandboxError(in.SandboxID, err)
	}
	return nil, execResult(res), nil
}

// sandboxWriteFile is sandbox_write_file.
func (s *Server) sandboxWriteFile(ctx context.Context, _ *mcp.CallToolRequest, in SandboxWriteFileArgs) (*mcp.CallToolResult, FileResult, error) {
	data, err := fileContent(in)
	if err != nil {
		return nil, FileResult{}, toolError("writing the file", invalidArgs{err})
	}
	sb, done, err := s.openFiles(ctx, in.SandboxID)
	if err != nil {
		return nil, FileResult{}, err
	}
	defer done()
	// One byte over the content's size: the runner refuses nothing it
	// was given whole.
	tr, err := sb.Upload(ctx, in.Path, bytes.NewReader(data), int64(len(data))+1)
	if err != nil {
		return nil, FileResult{}, transferError(in.SandboxID, err)
	}
	return nil, fileResult(in.SandboxID, tr, data, false), nil
}

// sandboxReadFile is sandbox_read_file.
func (s *Server) sandboxReadFile(ctx context.Context, _ *mcp.CallToolRequest, in SandboxFileArgs) (*mcp.CallToolResult, FileResult, error) {
	if err := checkID(in.SandboxID); err != nil {
		return nil, FileResult{}, toolError("reading the file", invalidArgs{err})
	}
	sb, done, err := s.openFiles(ctx, in.SandboxID)
	if err != nil {
		return nil, FileResult{}, err
	}
	defer done()
	w := &capped{max: MaxFileBytes}
	tr, err := sb.Download(ctx, in.Path, w)
	if w.over {
		return nil, FileResult{}, toolError("reading the file", invalidArgs{fmt.Errorf("%s is larger than the %s sandbox_read_file returns: read it in parts with sandbox_exec (head -c, split), or copy it out with `airlock cp`", in.Path, units.Bytes(MaxFileBytes))})
	}
	if err != nil {
		return nil, FileResult{}, transferError(in.SandboxID, err)
	}
	return nil, fileResult(in.SandboxID, tr, w.buf.Bytes(), true), nil
}

// sandboxList is sandbox_list.
func (s *Server) sandboxList(ctx context.Context, _ *mcp.CallToolRequest, _ NoArgs) (*mcp.CallToolResult, SandboxList, error) {
	list, err := s.svc.Sandboxes()
	if err != nil {
		return nil, SandboxList{}, toolError("listing the sandboxes", err)
	}
	now := time.Now()
	out := SandboxList{Sandboxes: []SandboxResult{}}
	for _, si := range list {
		out.Sandboxes = append(out.Sandboxes, sandboxResult(si, now))
	}
	return nil, out, nil
}

// sandboxDestroy is sandbox_destroy.
func (s *Server) sandboxDestroy(ctx context.Context, _ *mcp.CallToolRequest, in SandboxIDArgs) (*mcp.CallToolResult, Destroyed, error) {
	if err := checkID(in.SandboxID); err != nil {
		return nil, Destroyed{}, toolError("destroying the sandbox", invalidArgs{err})
	}
	// Like create, a destroy once begun is finished even if the client
	// hangs up. A sandbox already gone is destroyed too.
	if err := s.svc.Destroy(context.WithoutCancel(ctx), in.SandboxID); err != nil && !isNotFound(err) {
		return nil, Destroyed{}, sandboxError(in.SandboxID, err)
	}
	s.log.Info("sandbox destroyed over MCP", "sandbox_id", in.SandboxID)
	return nil, Destroyed{SandboxID: in.SandboxID, Destroyed: true}, nil
}

// sandboxPause is sandbox_pause.
func (s *Server) sandboxPause(ctx context.Context, _ *mcp.CallToolRequest, in SandboxIDArgs) (*mcp.CallToolResult, SandboxResult, error) {
	return s.pauseOrResume(ctx, in, s.svc.Pause)
}

// sandboxResume is sandbox_resume.
func (s *Server) sandboxResume(ctx context.Context, _ *mcp.CallToolRequest, in SandboxIDArgs) (*mcp.CallToolResult, SandboxResult, error) {
	return s.pauseOrResume(ctx, in, s.svc.Resume)
}

// pauseOrResume runs a pause or a resume to its end, even if the client
// hangs up: one cut short is left half-way.
func (s *Server) pauseOrResume(ctx context.Context, in SandboxIDArgs, do func(context.Context, string) (runner.SandboxInfo, error)) (*mcp.CallToolResult, SandboxResult, error) {
	if err := checkID(in.SandboxID); err != nil {
		return nil, SandboxResult{}, toolError("finding the sandbox", invalidArgs{err})
	}
	si, err := do(context.WithoutCancel(ctx), in.SandboxID)
	if err != nil {
		return nil, SandboxResult{}, sandboxError(in.SandboxID, err)
	}
	return nil, sandboxResult(si, time.Now()), nil
}

// addTool adds a tool whose arguments are read as the HTTP API reads a
// request body (wire.CheckKeys): a key given twice, which the SDK's
// decoding takes silently, the last winning, is refused, naming the key.
func addTool[In, Out any](srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(srv, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		if req != nil && req.Params != nil && len(req.Params.Arguments) > 0 {
			args := req.Params.Arguments
			if sent, ok := ctx.Value(sentArgs{}).(json.RawMessage); ok {
				args = sent // before nullArgs dropped its nulls
			}
			var fresh In
			if err := wire.CheckKeys(args, &fresh); err != nil {
				var zero Out
				return nil, zero, toolError("reading the tool's arguments", invalidArgs{err})
			}
		}
		return h(ctx, req, in)
	})
}

// sentArgs is the context key of a tool call's arguments as sent, for
// addTool's key check, when nullArgs changed them.
type sentArgs struct{}

// nullArgs reads a tool argument given as null as not given, as the HTTP
// API reads a body's null (encoding/json leaves the field alone): the
// SDK's schema check would refuse it in its own words. The keys are still
// checked as sent, so a key given twice, once as null, is refused.
func nullArgs(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
			if args, ok := withoutNulls(r.Params.Arguments); ok {
				ctx = context.WithValue(ctx, sentArgs{}, r.Params.Arguments)
				r.Params.Arguments = args
			}
		}
		return next(ctx, method, req)
	}
}

// withoutNulls is the JSON object b without its members whose value is
// null, keys given twice kept; false when b has none or is no object.
func withoutNulls(b json.RawMessage) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	out := []byte{'{'}
	dropped := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		if string(bytes.TrimSpace(v)) == "null" {
			dropped = true
			continue
		}
		k, err := json.Marshal(tok)
		if err != nil {
			return nil, false
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, k...), ':'), v...)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') || !dropped {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // something after the object: the SDK refuses it
	}
	return append(out, '}'), true
}
