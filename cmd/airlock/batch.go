package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/internal/safeopen"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

type batchFlags struct {
	run      runFlags
	parallel int
	warm     int
	out      string
	// inputRoot confines job inputs; default the jobs file's directory.
	inputRoot string
}

func newBatchCmd(g *globals) *cobra.Command {
	f := &batchFlags{}
	cmd := &cobra.Command{
		Use:   "batch JOBS.jsonl --out RESULTS.jsonl",
		Short: "Run many jobs, in parallel, with a JSON result per job",
		Long: `Run every job in JOBS.jsonl, --parallel at a time, and append one JSON
result per job to --out as each finishes. A job is one JSON object per line:

  {"id": "t1", "argv": ["python3", "-c", "print(6*7)"], "expected_stdout": "42\n",
   "image": "NAME@sha256:…", "template": "py", "env": ["K=V"], "stdin": "text",
   "inputs": [{"host": "data", "sandbox": "/work/data"}], "workdir": "/work",
   "limits": {"timeout": "5s", "memory": "256MiB", "cpus": "1", "pids": 64, "output": "1MiB"}}

Only id and argv are required; the run flags below are every job's defaults,
and a job's env is added to --env. The jobs file is read as hostile: a job
may narrow the command line, never widen it. A limit flag given explicitly
(--timeout, --memory, --cpus, --pids, --output-limit, --egress-limit) is
also a ceiling: a job's own limit may be lower, never higher (a flag left
out is only a default). A job's allow_host and credential must be within
--allow-host and --credential, else within --template's; with neither, no
job reaches the network, not even by naming a template with egress. With
--template, a job may name no other template. A job on a template (its
"template", else --template) takes the template's settings: the flags given
explicitly and the job's own image, env and limits may narrow them, never
widen them. A job that asks for more than any of these is refused as
invalid input, its result naming the field, the ceiling and the flag, and
the others run.
A job's input hosts are relative paths beneath the jobs file's directory (or
--input-root; a default one every user may write in is refused), never
through a symlink, and never airlock's own state, the jobs file or --out.
With --artifacts DIR each job delivers into DIR/<run id>/ ("artifacts_dir").
Each result is the Result of 'airlock run --json' plus "job_id" and, when the
job gave expected_stdout, "pass". A line that is not a valid job becomes a
result with reason "error" and job_id "line-N", and never stops the batch.

Re-running the same command resumes: jobs whose id already has a result in
--out are skipped (a torn last line is removed first). At the end a summary
goes to stderr: counts by reason, pass and fail, and p50/p99 duration.
airlock exits 0 once every job has a result, whatever the jobs did; 130 when
interrupted, with no result for the jobs it killed (run it again to resume).

--warm N keeps a warm pool of N sandboxes for the batch's settings (its
--template, narrowed by the flags given, or its image and flags), started
ahead of the jobs that take them (oci engine). Each pooled sandbox runs one
job and is destroyed after it. A job with settings of its own (image,
limits, inputs) starts cold; results are the same either way, and a pooled
job's result names the pool in "pool".

--engine kube --template NAME runs each job as a one-shot pod of the
SandboxTemplate NAME on a Kubernetes cluster's airlock nodes
(docs/kubernetes.md). A job there takes id, argv and expected_stdout; the
template is the policy, and a job with settings of its own is refused.
Each result is the Result the node signed, job id and verdict included,
so 'airlock receipt verify --trust NODES' verifies it. A job whose node is
lost under it (the node controller marks it not Ready once its lease
expires) is run again on another node, up to 3 pods in all; it may then
have run twice, so jobs should be safe to repeat.`,
		Example: `  airlock batch jobs.jsonl --out results.jsonl --parallel 4
  airlock batch jobs.jsonl --out results.jsonl --template py
  airlock batch jobs.jsonl --out results.jsonl --parallel 4 --warm 4 --engine oci
  airlock batch jobs.jsonl --out results.jsonl --parallel 4 --timeout 10s --memory 256MiB
  airlock batch jobs.jsonl --out results.jsonl --allow-host pypi.org --egress-limit 256MiB
  airlock batch jobs.jsonl --out results.jsonl --parallel 8 --engine kube --template py`,
		Args: exactArgs(1, "give the jobs file"),
		RunE: func(cmd *cobra.Command, args []string) error { return runBatch(cmd, g, f, args[0]) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.parallel, "parallel", 1, "jobs to run at once")
	fl.IntVar(&f.warm, "warm", 0, "keep a warm pool of this many sandboxes ahead of the jobs (oci engine; 0: none)")
	fl.StringVar(&f.out, "out", "", "results file (JSON Lines), appended to; required")
	fl.StringVar(&f.inputRoot, "input-root", "", "directory every job input must be beneath (default: the jobs file's directory)")
	cmd.MarkFlagRequired("out")
	addRunFlags(cmd, &f.run)
	f.run.kube.add(fl, "how long to wait for each job's pod to start")
	return cmd
}

func runBatch(cmd *cobra.Command, g *globals, f *batchFlags, path string) error {
	if f.parallel < 1 || f.parallel > 256 {
		return usageError{fmt.Errorf("--parallel %d: use 1 to 256", f.parallel)}
	}
	if f.warm < 0 || f.warm > 256 {
		return usageError{fmt.Errorf("--warm %d: use 0 (no pool) to 256", f.warm)}
	}
	if err := checkKubeFlags(cmd, f.run.engine == "kube", "out", "parallel"); err != nil {
		return err
	}
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	jobs, bad, err := runner.ParseJobs(in)
	jobsInfo, serr := in.Stat()
	in.Close()
	if err = cmp.Or(err, serr); err != nil {
		return fmt.Errorf("%w: reading %s: %v", errdefs.ErrInvalidArgument, path, err)
	}
	inputRoot := f.inputRoot
	if f.run.engine != "kube" { // jobs on kube take no inputs
		if inputRoot, err = batchInputRoot(f.inputRoot, path, jobs); err != nil {
			return err
		}
	}
	pol, err := f.run.policy()
	if err != nil {
		return err
	}
	base := runner.Spec{Image: f.run.image, Env: f.run.env, Policy: pol, Workdir: f.run.workdir, SeccompProfile: f.run.seccompProfile}
	if err := f.run.files(&base); err != nil {
		return err
	}
	out, err := safeopen.AppendFile(f.out)
	if err != nil {
		return fmt.Errorf("%w: opening --out: %v", errdefs.ErrInvalidArgument, err)
	}
	defer out.Close()
	outInfo, err := out.Stat()
	if err != nil {
		return fmt.Errorf("%w: checking --out: %v", errdefs.ErrUnavailable, err)
	}
	if os.SameFile(jobsInfo, outInfo) {
		return usageError{fmt.Errorf("--out %s is the jobs file: results would be appended to the jobs; give another file", f.out)}
	}
	// Resume reads the results through the file just checked, never by
	// its name again.
	outPath := fmt.Sprintf("/proc/self/fd/%d", out.Fd())
	if err := mendTail(out, outPath, f.out, cmd.ErrOrStderr()); err != nil {
		return err
	}
	done, err := doneIDs(outPath)
	if err != nil {
		return err
	}
	var (
		r    *runner.Runner
		tmpl *runner.BatchTemplate
		ceil *runner.BatchCeilings
	)
	if f.run.engine != "kube" {
		var engineName string
		if tmpl, engineName, err = g.batchTemplates(cmd, &f.run, base); err != nil {
			return err
		}
		if ceil, err = batchCeilings(cmd.Flags(), tmpl, base); err != nil {
			return err
		}
		rn, closeRunner, err := g.service(engineName).ForNew(cmd.Context(), "")
		if err != nil {
			return err
		}
		defer closeRunner()
		r = rn
	}

	w := bufio.NewWriter(out)
	total := len(jobs) + len(bad)
	var results []runner.BatchResult
	failures := 0
	skipped := countDone(jobs, bad, done)
	bar := newBar(cmd.ErrOrStderr(), total-skipped)
	emit := func(br runner.BatchResult) {
		b, _ := json.Marshal(br)
		w.Write(append(termsafe.JSON(b), '\n'))
		w.Flush() // one whole line per job, so a resumed batch sees it
		results = append(results, br)
		if br.Reason != runner.ReasonExited || br.ExitCode != 0 || br.Pass != nil && !*br.Pass {
			failures++
		}
		bar.Describe(fmt.Sprintf("%d not ok", failures))
		bar.Add(1)
	}
	for _, b := range bad {
		if !done[b.JobID] {
			emit(b)
		}
	}
	start := time.Now()
	var runErr error
	if f.run.engine == "kube" {
		runErr = batchKube(cmd, g, f, jobs, done, emit)
	} else {
		opt := runner.BatchOptions{Parallel: f.parallel, Base: base, Skip: done, InputRoot: inputRoot, Template: tmpl,
			JobsFile: jobsInfo, Results: outInfo, Ceilings: ceil}
		if f.warm > 0 && total > skipped {
			if opt.Pool, err = newBatchPool(cmd, r, opt, f.warm); err != nil {
				return err
			}
			defer opt.Pool.Close(context.WithoutCancel(cmd.Context()))
		}
		runErr = r.RunBatch(cmd.Context(), jobs, opt, emit)
	}
	bar.Finish()
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	printSummary(cmd.ErrOrStderr(), runner.Summarize(results), skipped, time.Since(start))
	switch {
	case runErr != nil && cmd.Context().Err() != nil:
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock: batch interrupted; run the same command again to resume\n")
		return &exitErr{code: exitKilled}
	case runErr != nil:
		return runErr
	}
	return nil
}

// batchCeilings are what the batch's command line lets a job line ask
// for at most: the limits and egress limit its flags give explicitly (a
// flag left out bounds nothing: its default is only a default), and its
// egress. A line's hosts and credentials must be within --allow-host and
// --credential when given, else within --template's, else there are
// none: a line never turns the network on by itself, not even by naming
// a template with egress. With --template, lines may name no other.
func batchCeilings(fl *pflag.FlagSet, tmpl *runner.BatchTemplate, base runner.Spec) (*runner.BatchCeilings, error) {
	ex := tmpl.Explicit.Policy
	c := &runner.BatchCeilings{Limits: ex.Limits, Template: tmpl.Default, Isolation: cmp.Or(base.Policy.Isolation, isolation.GVisor)}
	c.Egress.Bytes = ex.Egress.Bytes
	var own isolation.Egress // --template's
	if tmpl.Default != "" {
		s, err := tmpl.Apply(tmpl.Default, runner.Spec{})
		if err != nil {
			return nil, err
		}
		own = s.Policy.Egress
		// The batch's mode is --template's, as --isolation narrows it.
		if s, err = tmpl.Apply(tmpl.Default, tmpl.Explicit); err != nil {
			return nil, err
		}
		c.Isolation = s.Policy.Isolation
	}
	byTemplate := fmt.Sprintf("--template %q", tmpl.Default)
	switch {
	case fl.Changed("allow-host"):
		c.Egress.Allow, c.AllowFrom = ex.Egress.Allow, "--allow-host"
	case tmpl.Default != "":
		c.Egress.Allow, c.AllowFrom = own.Allow, byTemplate
	}
	switch {
	case fl.Changed("credential"):
		c.Egress.Credentials, c.CredentialFrom = ex.Egress.Credentials, "--credential"
	case tmpl.Default != "":
		c.Egress.Credentials, c.CredentialFrom = own.Credentials, byTemplate
	}
	return c, nil
}

// batchInputRoot is the directory job inputs are confined to: --input-root,
// or else the jobs file's directory. That default is refused, when a job
// takes inputs, if every user may write in it (/tmp): anyone could plant
// or hard-link files there for the jobs to read.
func batchInputRoot(flag, jobsPath string, jobs []runner.Job) (string, error) {
	if flag != "" {
		return flag, nil
	}
	dir := filepath.Dir(jobsPath)
	if !slices.ContainsFunc(jobs, func(j runner.Job) bool { return len(j.Inputs) > 0 }) {
		return dir, nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("%w: the jobs file's directory: %v", errdefs.ErrNotFound, err)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return "", usageError{fmt.Errorf("jobs take inputs, and their default input root, the jobs file's directory %s, is writable by every user: anyone could plant or link files there for the jobs to read. Keep the jobs file and its inputs in a directory of your own, or give --input-root DIR", dir)}
	}
	return dir, nil
}

// mendTail readies the results file out (readable at path, shown as name)
// for appending. A last line with no newline, from a batch that stopped
// mid-write, would take the next result onto it: a torn line, which is no
// result, is cut off (its job runs again); a whole result that lost only
// its newline gets one. Either is said on w.
func mendTail(out *os.File, path, name string, w io.Writer) error {
	r, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: reading --out: %v", errdefs.ErrInvalidArgument, err)
	}
	defer r.Close()
	fi, err := r.Stat()
	if err != nil {
		return fmt.Errorf("%w: reading --out: %v", errdefs.ErrInvalidArgument, err)
	}
	size := fi.Size()
	var last [1]byte
	if size == 0 {
		return nil
	}
	if _, err := r.ReadAt(last[:], size-1); err != nil {
		return fmt.Errorf("%w: reading --out: %v", errdefs.ErrInvalidArgument, err)
	}
	if last[0] == '\n' {
		return nil
	}
	start, err := lastLineStart(r, size)
	if err != nil {
		return fmt.Errorf("%w: reading --out: %v", errdefs.ErrInvalidArgument, err)
	}
	var line struct {
		JobID string `json:"job_id"`
	}
	dec := json.NewDecoder(io.NewSectionReader(r, start, size-start))
	if dec.Decode(&line) == nil && line.JobID != "" {
		if _, err := dec.Token(); errors.Is(err, io.EOF) {
			if _, err := out.Write([]byte("\n")); err != nil {
				return fmt.Errorf("writing results: %w", err)
			}
			sayf(w, "--out %s ended without a newline after job %q's result; added one", name, line.JobID)
			return nil
		}
	}
	if err := out.Truncate(start); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	sayf(w, "--out %s ended in a torn line (%d bytes, from a batch that stopped mid-write); removed it, and its job runs again", name, size-start)
	return nil
}

// lastLineStart is the offset just past the last newline in the first
// size bytes of r, 0 when there is none.
func lastLineStart(r io.ReaderAt, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		n := min(end, int64(len(buf)))
		if _, err := r.ReadAt(buf[:n], end-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return 0, nil
}

// doneIDs reads the ids that already have a result in the output file.
func doneIDs(path string) (map[string]bool, error) {
	done := map[string]bool{}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return done, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading --out: %v", errdefs.ErrInvalidArgument, err)
	}
	defer f.Close()
	// A result line embeds the job's output, so it has no size limit: each
	// is read whole, one at a time.
	br := bufio.NewReaderSize(f, 1<<20)
	for {
		b, err := br.ReadBytes('\n')
		var line struct {
			JobID string `json:"job_id"`
		}
		// A torn last line from an interrupted batch is not a result.
		if len(b) > 0 && json.Unmarshal(b, &line) == nil && line.JobID != "" {
			done[line.JobID] = true
		}
		if errors.Is(err, io.EOF) {
			return done, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: reading --out: %v", errdefs.ErrInvalidArgument, err)
		}
	}
}

func countDone(jobs []runner.Job, bad []runner.BatchResult, done map[string]bool) int {
	n := 0
	for _, j := range jobs {
		if done[j.ID] {
			n++
		}
	}
	for _, b := range bad {
		if done[b.JobID] {
			n++
		}
	}
	return n
}

// newBar shows done/total, rate, ETA and failures on a terminal, and
// nothing elsewhere.
func newBar(w io.Writer, total int) *progressbar.ProgressBar {
	visible := false
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		visible = true
	}
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetVisibility(visible),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("jobs"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

func printSummary(w io.Writer, s runner.Summary, skipped int, wall time.Duration) {
	fmt.Fprintf(w, "%d jobs run in %.1fs (%d skipped as already done)\n", s.Jobs, wall.Seconds(), skipped)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REASON\tJOBS")
	reasons := make([]string, 0, len(s.ByReason))
	for r := range s.ByReason {
		reasons = append(reasons, string(r))
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		fmt.Fprintf(tw, "%s\t%d\n", r, s.ByReason[runner.Reason(r)])
	}
	tw.Flush()
	fmt.Fprintf(w, "expected stdout: %d pass, %d fail; duration p50 %dms, p99 %dms\n", s.Passed, s.Failed, s.P50MS, s.P99MS)
}

// newBatchPool starts a batch's warm pool: for its default template,
// narrowed by the flags given, or else for its base settings.
func newBatchPool(cmd *cobra.Command, r *runner.Runner, opt runner.BatchOptions, size int) (*runner.Pool, error) {
	base := opt.Base
	if t := opt.Template; t != nil && t.Default != "" {
		var err error
		if base, err = t.Apply(t.Default, t.Explicit); err != nil {
			return nil, err
		}
	}
	return r.NewPool(cmd.Context(), base, runner.PoolOptions{Name: "batch", Size: size})
}
