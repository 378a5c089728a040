package receipt

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Explain says, for people, what s claims and what a valid signature on it
// does and does not prove. It does not verify s; call Verify first. Every
// string from the receipt is quoted if it could disturb a terminal.
func (s Signed) Explain() string {
	r := s.Receipt
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	if r.SandboxID != "" {
		line("exec %s in sandbox %s ran image %s", show(r.RunID), show(r.SandboxID), show(r.Image))
	} else {
		line("run %s ran image %s", show(r.RunID), show(r.Image))
	}
	if r.JobID != "" {
		verdict := "gave no expected stdout"
		if r.Pass != nil && *r.Pass {
			verdict = "passed"
		} else if r.Pass != nil {
			verdict = "did not pass"
		}
		line("  for batch job %s, which %s", show(r.JobID), verdict)
	}
	if r.PodUID != "" {
		line("  for Kubernetes pod UID %s", show(r.PodUID))
	}
	if r.Snapshot != "" {
		line("  in a sandbox restored from snapshot %s", digest(r.Snapshot))
	}
	if r.ImageManifest != "" {
		line("  image manifest %s", show(r.ImageManifest))
	}
	flags := "no flags"
	if rf := r.Policy.Runtime.Flags; len(rf) > 0 {
		shown := make([]string, len(rf))
		for i, f := range rf {
			shown[i] = show(f)
		}
		flags = "flags " + strings.Join(shown, " ")
	}
	line("  under %s (%s %s, %s) on the %s engine", show(r.Isolation), show(r.Runtime), show(r.RuntimeVersion), flags, show(r.Engine))
	line("  with policy %s and seccomp profile %s", digest(r.PolicySHA256), digest(r.SeccompSHA256))
	l := r.Policy.Limits
	line("  limits: timeout %dms, memory %d bytes, %d millicpus, %d pids, output %d bytes, tmp %d bytes, files up to %d bytes, %d open files",
		l.TimeoutMS, l.MemoryBytes, l.MilliCPUs, l.Pids, l.OutputBytes, l.TmpBytes, l.FileSizeBytes, l.OpenFiles)
	line("  argv %s", digest(r.ArgvSHA256))
	files(&b, "input", r.Inputs)
	line("  stdout %s (%s)", digest(r.Stdout.SHA256), streamSize(r.Stdout))
	line("  stderr %s (%s)", digest(r.Stderr.SHA256), streamSize(r.Stderr))
	files(&b, "artifact", r.Artifacts)
	if len(r.Rejected) > 0 {
		line("  %d rejected", len(r.Rejected))
		for _, x := range r.Rejected {
			line("    %s (%s)", show(x.Path), show(x.Reason))
		}
	}
	line("  ended %s (exit code %d) at %s, started %s", show(r.Reason), r.ExitCode, stamp(r.FinishedAt), stamp(r.StartedAt))
	line("  issued by airlock %s, signed by key %s", show(r.AirlockVersion), show(s.KeyID))
	line("A valid signature proves: an airlock holding key %s issued this", show(s.KeyID))
	line("  account, and nothing in it has changed since.")
	if s.Legacy() {
		line("This is a version 1 receipt: it binds its own fields only. It does not")
		line("  bind the Result around it, nor the output bytes a Result carries (only")
		line("  the hash of all bytes written), nor a batch job id or verdict.")
	}
	line("It does not prove: that the host, the runtime or airlock itself was")
	line("  uncompromised, nor that the key is one you trust (compare the key ID")
	line("  with the one you expect).")
	return b.String()
}

func files(b *strings.Builder, noun string, list []File) {
	if len(list) != 1 {
		noun += "s"
	}
	fmt.Fprintf(b, "  %d %s\n", len(list), noun)
	for _, f := range list {
		fmt.Fprintf(b, "    %s %s (%d bytes)\n", show(f.Path), digest(f.SHA256), f.Size)
	}
}

func streamSize(s Stream) string {
	if s.Truncated {
		return fmt.Sprintf("%d bytes, truncated", s.Bytes)
	}
	return fmt.Sprintf("%d bytes", s.Bytes)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "an unrecorded time"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// digest shows a hex sha256 as "sha256:…".
func digest(h string) string {
	if h == "" {
		return "(not recorded)"
	}
	return "sha256:" + show(h)
}

// show returns s as is when it is plain printable ASCII, else quoted.
func show(s string) string {
	if s == "" {
		return `""`
	}
	for i := range len(s) {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
}
