package lifecycle

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
)

// Audit is an append-only JSON Lines file of events.
type Audit struct{ path string }

// OpenAudit returns the log at path; the file is created on first append.
func OpenAudit(path string) *Audit { return &Audit{path: path} }

// Path is where the log lives.
func (a *Audit) Path() string { return a.path }

// AuditError is an event that could not be written. The audit log is
// evidence: a run whose event is lost must fail, so it is an
// errdefs.ErrUnavailable.
type AuditError struct {
	Path string
	Err  error
}

func (e *AuditError) Error() string {
	return fmt.Sprintf("cannot write the audit log %s (%v); it must be a regular file airlock can append to: fix its permissions or move whatever is at that path aside", e.Path, e.Err)
}

func (e *AuditError) Unwrap() []error { return []error{errdefs.ErrUnavailable, e.Err} }

// Check opens the log for appending, creating it, without writing: a run
// checks it before anything starts.
func (a *Audit) Check() error {
	f, err := a.open()
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return &AuditError{Path: a.path, Err: err}
	}
	return nil
}

// open opens the log for appending; it refuses anything but a regular file
// (a FIFO would block, a device would swallow events).
func (a *Audit) open() (*os.File, error) {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, &AuditError{Path: a.path, Err: err}
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
		}
		return nil, &AuditError{Path: a.path, Err: err}
	}
	return f, nil
}

// Append writes each event as one line, with a time, after redacting
// every string in it. The lines are a single write to a file opened
// O_APPEND, so concurrent airlock processes never interleave within them.
// Any failure to write them, the final close included, is an *AuditError.
func (a *Audit) Append(evs ...map[string]any) error {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	var lines []byte
	for _, ev := range evs {
		out := map[string]any{"time": now}
		for k, v := range ev {
			out[k] = redactValue(v)
		}
		b, err := json.Marshal(out)
		if err != nil {
			return &AuditError{Path: a.path, Err: fmt.Errorf("encoding the event: %w", err)}
		}
		lines = append(append(lines, b...), '\n')
	}
	f, err := a.open()
	if err != nil {
		return err
	}
	if _, err := f.Write(lines); err != nil {
		f.Close()
		return &AuditError{Path: a.path, Err: err}
	}
	if err := f.Close(); err != nil {
		return &AuditError{Path: a.path, Err: err}
	}
	return nil
}

// secrets are common token and key shapes. A match is replaced whole.
var secrets = []*regexp.Regexp{
	regexp.MustCompile(`AKIA[0-9A-Z]{16}`),                                          // AWS access key id
	regexp.MustCompile(`(?i)aws.{0,20}?['"=:\s][0-9a-zA-Z/+]{40}`),                  // AWS secret key
	regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{20,}`),                                // GitHub tokens
	regexp.MustCompile(`github_pat_[A-Za-z0-9_]{20,}`),                              // GitHub fine-grained
	regexp.MustCompile(`xox[abposr]-[A-Za-z0-9-]{10,}`),                             // Slack
	regexp.MustCompile(`sk-[A-Za-z0-9_-]{20,}`),                                     // OpenAI-style API keys
	regexp.MustCompile(`AIza[0-9A-Za-z_-]{35}`),                                     // Google API keys
	regexp.MustCompile(`glpat-[A-Za-z0-9_-]{20,}`),                                  // GitLab
	regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+`), // JWT
	regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)`),
	regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*`),
	regexp.MustCompile(`(?i)\b(password|passwd|secret|token|api[_-]?key|access[_-]?key)\s*[=:]\s*[^\s"',;]+`),
	regexp.MustCompile(`(?i)://[^/\s:@]+:[^/\s@]+@`), // credentials in a URL
}

// Redact replaces anything in s that looks like a credential.
func Redact(s string) string {
	for _, re := range secrets {
		s = re.ReplaceAllString(s, "[REDACTED]")
	}
	return s
}

func redactValue(v any) any {
	switch x := v.(type) {
	case string:
		return Redact(x)
	case []string:
		out := make([]string, len(x))
		for i, s := range x {
			out[i] = Redact(s)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = redactValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redactValue(e)
		}
		return out
	}
	// Structs and other values go through JSON and back, so strings inside
	// them are redacted too.
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var generic any
	if json.Unmarshal(b, &generic) != nil {
		return v
	}
	switch g := generic.(type) {
	case string:
		return Redact(g)
	case map[string]any, []any:
		return redactValue(g)
	}
	return generic
}
