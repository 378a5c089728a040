package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/wire"
)

// Job is one line of a batch file (JSON Lines).
type Job struct {
	ID    string   `json:"id"`
	Argv  []string `json:"argv"`
	Image string   `json:"image,omitempty"`
	// Template names a sandbox template the job runs on; its other fields
	// may narrow the template, never widen it (see BatchTemplate).
	Template string   `json:"template,omitempty"`
	Env      []string `json:"env,omitempty"`
	// Workdir is the program's working directory; given, it replaces
	// the batch's (an absolute, clean path).
	Workdir string `json:"workdir,omitempty"`
	// Stdin is text fed to the program; empty means stdin is closed.
	Stdin  string     `json:"stdin,omitempty"`
	Inputs []JobInput `json:"inputs,omitempty"`
	Limits JobLimits  `json:"limits,omitzero"`
	// AllowHost and Credential are the job's egress (wire.Policy's
	// fields of those names); given, they replace the batch's, within
	// BatchOptions.Ceilings. A job names credentials only to narrow its
	// template's.
	AllowHost  []string `json:"allow_host,omitempty"`
	Credential []string `json:"credential,omitempty"`
	// EgressLimit caps the job's egress bytes (wire.Policy's
	// egress_limit); given, it replaces the batch's, within
	// BatchOptions.Ceilings.
	EgressLimit string `json:"egress_limit,omitempty"`
	// ExpectedStdout, when set, decides Pass: the program must exit 0 and
	// print exactly this.
	ExpectedStdout *string `json:"expected_stdout,omitempty"`

	// inputRoot confines Inputs; set from BatchOptions.InputRoot.
	inputRoot string
	// private are the files no input may hold (BatchOptions.JobsFile).
	private []privateFile
}

// JobInput is an Input in a batch file. Host is a relative path beneath
// the batch's input root, reached through no symlink and no "..".
type JobInput struct {
	Host    string `json:"host"`
	Sandbox string `json:"sandbox,omitempty"`
}

// JobLimits are a job's limits in the CLI's units; empty fields take the
// batch's defaults, and given ones replace them within
// BatchOptions.Ceilings.
type JobLimits struct {
	Timeout string      `json:"timeout,omitempty"`
	Memory  string      `json:"memory,omitempty"`
	CPUs    wire.Number `json:"cpus,omitempty"`
	// Pids is a pointer so that an explicit 0 is refused, not defaulted.
	Pids   *int64 `json:"pids,omitempty"`
	Output string `json:"output,omitempty"`
}

// BatchResult is one line of a batch's output: the job's id and its Result,
// or why the job could not run.
type BatchResult struct {
	JobID string `json:"job_id"`
	// Pass is set when the job gave an expected stdout.
	Pass *bool `json:"pass,omitempty"`
	Result
	// ArtifactsDir and QuarantineDir are where the job delivered its
	// files: a directory of its own beneath the batch's Output.Artifacts
	// and Output.Quarantine, named by its run id (DIR/<id>). An artifact's
	// path, and a rejection's quarantined name, are relative to them.
	ArtifactsDir  string `json:"artifacts_dir,omitempty"`
	QuarantineDir string `json:"quarantine_dir,omitempty"`
}

// BatchOptions shape a batch.
type BatchOptions struct {
	// Parallel is how many jobs run at once (default 1).
	Parallel int
	// Base is the spec every job starts from: policy, output settings.
	Base Spec
	// Skip holds job ids that already have a result (a resumed batch).
	Skip map[string]bool
	// InputRoot is the directory job inputs are confined to (the CLI: the
	// batch file's directory, or --input-root). Empty refuses every job
	// input.
	InputRoot string
	// JobsFile and Results, when set, are the batch's jobs file and its
	// results file (as os.Stat or File.Stat returns them). No job may take
	// either as an input, by any name or hard link and at any depth of
	// an input tree (they are matched by device and inode): the jobs file
	// holds every job's expected stdout, the results file the other jobs'
	// output. The CLI's default input root is the directory they are in.
	JobsFile, Results os.FileInfo
	// Template, when set, resolves templates; without it a job that names
	// one fails as invalid input.
	Template *BatchTemplate
	// Pool, when set, is the batch's warm pool: jobs that fit it run on
	// its sandboxes, the others cold (see Pool.Run).
	Pool *Pool
	// Ceilings, when set, bound what each job may ask for (see
	// BatchCeilings); nil bounds nothing, and a job's fields then replace
	// Base's.
	Ceilings *BatchCeilings
}

// BatchTemplate is how a batch resolves sandbox templates. A job on a
// template (its own "template", else Default) builds its settings on
// Explicit rather than Base and hands them to Apply, which narrows the
// template by them.
type BatchTemplate struct {
	// Default is the template of jobs that name none; empty means such
	// jobs run on Base.
	Default string
	// Explicit holds the batch's settings that were given explicitly, zero
	// elsewhere; a job's own fields go on top of it.
	Explicit Spec
	// Apply returns template name's spec narrowed by explicit. It refuses
	// a widening (errdefs.ErrInvalidArgument) and an unknown name
	// (errdefs.ErrNotFound).
	Apply func(name string, explicit Spec) (Spec, error)
}

// MaxJobLine caps one line of a batch file.
const MaxJobLine = 16 << 20

// maxJobValues caps the JSON values of one line, counted before it is
// decoded: a line of empty strings at MaxJobLine would take some 300MiB
// decoded, and every job is held until the batch ends. The lists' own
// caps, with room for the rest of a job, fit.
const maxJobValues = wire.MaxArgv + wire.MaxEnv + wire.MaxAllowHosts + wire.MaxCredentials + 3*MaxInputs + 64

// ParseJobs reads a batch file. A line that is not a valid job (too long,
// not JSON, no id...) does not stop the others: it comes back as a
// BatchResult with Reason error and ErrorKind invalid_input, in file order
// among the jobs, whose JobID is "line-N" (N its line number) whatever id
// the line named; its Error names that id. An invalid line so never
// answers for a job: a later line of that id still runs, and a resumed
// batch still runs it. Ids of that form are kept for invalid lines: a job
// that takes one is refused. Memory stays bounded: the rest of an
// over-long line is skipped, not held.
func ParseJobs(r io.Reader) ([]Job, []BatchResult, error) {
	var jobs []Job
	var bad []BatchResult
	seen := map[string]bool{}
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		raw, long, err := readLine(br, MaxJobLine)
		last := errors.Is(err, io.EOF)
		if err != nil && !last {
			return jobs, bad, fmt.Errorf("reading line %d: %w", n, err)
		}
		if line := bytes.TrimSpace(raw); long || len(line) > 0 && line[0] != '#' {
			j, err := parseJob(line, long, seen)
			if err != nil {
				what := fmt.Sprintf("line %d", n)
				if j.ID != "" {
					what += fmt.Sprintf(" (id %q)", j.ID)
				}
				bad = append(bad, BatchResult{JobID: invalidLineID(n), Result: Result{Reason: ReasonError, ExitCode: -1, Error: what + " " + err.Error(), ErrorKind: "invalid_input"}})
			} else {
				seen[j.ID] = true
				jobs = append(jobs, j)
			}
		}
		if last {
			return jobs, bad, nil
		}
	}
}

// invalidLineID is the job id of line n's result when the line is not a
// valid job.
func invalidLineID(n int) string { return fmt.Sprintf("line-%d", n) }

// lineID matches the ids invalidLineID makes, which no job may take.
var lineID = regexp.MustCompile(`^line-[0-9]+$`)

// parseJob decodes a line of a batch file. Its errors follow "line N".
func parseJob(line []byte, long bool, seen map[string]bool) (Job, error) {
	var j Job
	if long {
		return j, fmt.Errorf("is longer than the %d-byte (16MiB) line limit; put big data in an input file", MaxJobLine)
	}
	if n := wire.Values(line); n > maxJobValues {
		return j, fmt.Errorf("holds %d JSON values, past the %d one job may hold (argv %d entries at most, env %d, inputs %d); pass large data as stdin or an input file", n, maxJobValues, wire.MaxArgv, wire.MaxEnv, MaxInputs)
	}
	// One JSON object, its keys read as written (wire.CheckKeys), as the
	// API reads a request: what a reader of the line sees is what runs.
	if !json.Valid(bytes.TrimSpace(line)) {
		dec := json.NewDecoder(bytes.NewReader(line))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return j, fmt.Errorf("is not a job: %v", err)
		}
		return j, fmt.Errorf("holds more than one JSON value, or data after its job; put one job on a line")
	}
	if err := json.Unmarshal(line, &j); err != nil {
		return j, fmt.Errorf("is not a job: %v", err)
	}
	if err := wire.CheckKeys(line, &j); err != nil {
		if uk, ok := errors.AsType[*wire.UnknownKeyError](err); ok {
			return j, fmt.Errorf("is not a job: unknown field %q", uk.Key)
		}
		return j, fmt.Errorf("is not a job: %v", err)
	}
	switch {
	case j.ID == "":
		return j, fmt.Errorf("has no id")
	case lineID.MatchString(j.ID):
		return j, fmt.Errorf("takes an id of the form line-N, which is kept for the results of invalid lines; rename the job")
	case seen[j.ID]:
		return j, fmt.Errorf("repeats the id of an earlier job")
	case len(j.Argv) == 0:
		return j, fmt.Errorf("has no argv")
	}
	return j, nil
}

// readLine reads one line, without its newline. A line of more than max
// bytes is read to its end without being kept: long is set, line is nil.
// err is io.EOF on the last line, which may be empty.
func readLine(br *bufio.Reader, max int) (line []byte, long bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		size := len(line) + len(chunk)
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			size--
		}
		if long || size > max {
			long, line = true, nil
		} else {
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), long, err
	}
}

// spec turns a job into a Spec on top of the batch's base; template is
// the template the job runs on, "" for none.
func (j Job) spec(base Spec, template string) (Spec, error) {
	s := base
	// A job's env goes on top of the batch's.
	s.Argv, s.Env = j.Argv, append(slices.Clone(base.Env), j.Env...)
	if j.Image != "" {
		s.Image = j.Image
	}
	if j.Workdir != "" {
		s.Workdir = j.Workdir
	}
	if j.Stdin != "" {
		s.Stdin = strings.NewReader(j.Stdin)
	}
	// Counted before any is resolved: each takes a walk from the root.
	if len(j.Inputs) > MaxInputs {
		return s, fmt.Errorf("%d inputs: a job takes at most %d; pass a directory holding them as one input", len(j.Inputs), MaxInputs)
	}
	// The base's inputs are shared by every job: never append in place.
	s.Inputs = slices.Clone(base.Inputs)
	for _, in := range j.Inputs {
		ji, err := jobInput(j.inputRoot, in)
		if err != nil {
			return s, err
		}
		ji.private = j.private
		s.Inputs = append(s.Inputs, ji)
	}
	// The limits given go through the one wire parser, and replace the
	// base's.
	jl := j.Limits
	w := wire.Policy{Timeout: jl.Timeout, Memory: jl.Memory, CPUs: jl.CPUs, Pids: jl.Pids, OutputLimit: jl.Output}
	given, err := w.Parse()
	if err != nil {
		return s, fmt.Errorf("limits: %w", err)
	}
	w = wire.Policy{AllowHost: j.AllowHost, Credential: j.Credential, EgressLimit: j.EgressLimit}
	eg, err := w.ParseClient(template)
	if err != nil {
		return s, err
	}
	if j.AllowHost != nil {
		s.Policy.Egress.Allow = eg.Egress.Allow
	}
	if j.Credential != nil {
		s.Policy.Egress.Credentials = eg.Egress.Credentials
	}
	if j.EgressLimit != "" {
		s.Policy.Egress.Bytes = eg.Egress.Bytes
	}
	l, g := &s.Policy.Limits, given.Limits
	if jl.Timeout != "" {
		l.Timeout = g.Timeout
	}
	if jl.Memory != "" {
		l.Memory = g.Memory
	}
	if jl.CPUs != "" {
		l.CPUs = g.CPUs
	}
	if jl.Output != "" {
		l.Output = g.Output
	}
	if jl.Pids != nil {
		l.Pids = g.Pids
	}
	return s, nil
}

// jobInput confines a job input to root: it must be a relative path that
// resolves beneath root through no symlink. Staging resolves it again the
// same way, from the root's fd, so a swap after this check gains nothing.
func jobInput(root string, in JobInput) (Input, error) {
	switch {
	case root == "":
		return Input{}, fmt.Errorf("input %q: this batch has no input root, so its jobs may not take inputs (set --input-root)", in.Host)
	case in.Host == "" || strings.ContainsRune(in.Host, 0):
		return Input{}, fmt.Errorf("input %q: give a path beneath the input root %q", in.Host, root)
	case filepath.IsAbs(in.Host):
		return Input{}, fmt.Errorf("input %q is absolute: batch inputs are paths relative to the input root %q (set another with --input-root)", in.Host, root)
	case slices.Contains(strings.Split(in.Host, "/"), ".."):
		return Input{}, fmt.Errorf("input %q has a \"..\": batch inputs stay beneath the input root %q (set another with --input-root)", in.Host, root)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return Input{}, fmt.Errorf("input root %q: %v", root, err)
	}
	ji := Input{Host: in.Host, Beneath: abs, Sandbox: in.Sandbox}
	if err := checkBeneath(ji); err != nil {
		return Input{}, fmt.Errorf("input %q: %w", in.Host, err)
	}
	return ji, nil
}

// RunBatch runs jobs, Parallel at a time, calling emit once per job as it
// finishes (never concurrently). A job's failure, even an engine error, is
// its own result; RunBatch stops early only when ctx is done, and then
// returns ctx's error (see EachJob).
func (r *Runner) RunBatch(ctx context.Context, jobs []Job, opt BatchOptions, emit func(BatchResult)) error {
	private, err := opt.privateFiles()
	if err != nil {
		return err
	}
	return EachJob(ctx, jobs, opt.Parallel, opt.Skip, func(j Job) BatchResult {
		j.inputRoot, j.private = opt.InputRoot, private
		return r.runJob(ctx, j, opt)
	}, emit)
}

// EachJob calls run for every job not in skip, parallel at a time, and
// emit with each result as it comes (never concurrently). It stops
// feeding jobs once ctx is done and waits for those started. A job that
// ends killed or failed once ctx is done was ended by that cancel, not by
// itself: it is not emitted, so that a resumed batch runs it again.
// EachJob returns ctx's error whenever ctx was done by the end, even with
// every job fed, and nil otherwise.
func EachJob(ctx context.Context, jobs []Job, parallel int, skip map[string]bool, run func(Job) BatchResult, emit func(BatchResult)) error {
	todo := make(chan Job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for j := range todo {
				br := run(j)
				if ctx.Err() != nil && (br.Reason == ReasonKilled || br.Reason == ReasonError) {
					continue
				}
				mu.Lock()
				emit(br)
				mu.Unlock()
			}
		})
	}
feed:
	for _, j := range jobs {
		if skip[j.ID] {
			continue
		}
		select {
		case todo <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(todo)
	wg.Wait()
	return ctx.Err()
}

// jobSpec turns a job into its Spec, on Base or on its template, and
// refuses it over the batch's ceilings.
func (opt BatchOptions) jobSpec(j Job) (Spec, error) {
	if err := opt.Ceilings.checkTemplate(j); err != nil {
		return Spec{}, err
	}
	s, err := opt.templatedSpec(j)
	if err != nil {
		return Spec{}, err
	}
	if err := opt.Ceilings.check(j, s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// templatedSpec turns a job into its Spec: on Base, or on its template.
func (opt BatchOptions) templatedSpec(j Job) (Spec, error) {
	name := j.Template
	if name == "" && opt.Template != nil {
		name = opt.Template.Default
	}
	if name == "" {
		return j.spec(opt.Base, "")
	}
	if opt.Template == nil || opt.Template.Apply == nil {
		return Spec{}, fmt.Errorf("template %q: this batch does not resolve templates", name)
	}
	explicit, err := j.spec(opt.Template.Explicit, name)
	if err != nil {
		return Spec{}, err
	}
	return opt.Template.Apply(name, explicit)
}

func (r *Runner) runJob(ctx context.Context, j Job, opt BatchOptions) BatchResult {
	br := BatchResult{JobID: j.ID}
	s, err := opt.jobSpec(j)
	if err != nil {
		err = fmt.Errorf("%w: job %q: %w", errdefs.ErrInvalidArgument, j.ID, err)
	} else {
		// Each job delivers into a directory of its own, named by its run
		// id (never its job id, which the job file chose).
		s.JobID, s.ExpectedStdout, s.DeliverByRun = j.ID, j.ExpectedStdout, true
		if opt.Pool != nil {
			br.Result, err = opt.Pool.Run(ctx, s)
		} else {
			br.Result, err = r.Run(ctx, s)
		}
	}
	br.ArtifactsDir, br.QuarantineDir = br.delivered.artifacts, br.delivered.quarantine
	if err != nil {
		if br.Result.ID == "" {
			br.Result = Result{Reason: ReasonError, ExitCode: -1}
		}
		br.Error, br.ErrorKind = err.Error(), ErrorKind(err)
		return br
	}
	// The receipt's verdict: the line must say what was signed. A run
	// destroyed by another process has no receipt, and so no verdict.
	if br.Receipt != nil {
		br.Pass = br.Receipt.Receipt.Pass
	}
	return br
}

// Summary counts a batch's results.
type Summary struct {
	Jobs     int            `json:"jobs"`
	ByReason map[Reason]int `json:"by_reason"`
	Passed   int            `json:"passed"`
	Failed   int            `json:"failed"`
	P50MS    int64          `json:"p50_ms"`
	P99MS    int64          `json:"p99_ms"`
	Wall     time.Duration  `json:"-"`
}

// Summarize counts results by reason, pass and fail, and duration
// percentiles over the jobs that ran.
func Summarize(results []BatchResult) Summary {
	s := Summary{Jobs: len(results), ByReason: map[Reason]int{}}
	var d []int64
	for _, r := range results {
		s.ByReason[r.Reason]++
		if r.Pass != nil {
			if *r.Pass {
				s.Passed++
			} else {
				s.Failed++
			}
		}
		if r.ID != "" && r.Reason != ReasonError {
			d = append(d, r.DurationMS)
		}
	}
	slices.Sort(d)
	if len(d) > 0 {
		s.P50MS = d[(len(d)*50+99)/100-1]
		s.P99MS = d[(len(d)*99+99)/100-1]
	}
	return s
}

// ErrorKind names an error's class for JSON consumers: its kind in
// errkind's table.
func ErrorKind(err error) string { return string(errkind.Of(err)) }
