package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
)

// receiptV1 is the version 1 format, frozen: its canonical form is what
// version 1 signatures cover. It binds only itself; its stream hashes are
// of every byte written, not of what a Result carries.
type receiptV1 struct {
	Version        int       `json:"version"`
	RunID          string    `json:"run_id"`
	Image          string    `json:"image"`
	ImageManifest  string    `json:"image_manifest,omitempty"`
	Engine         string    `json:"engine"`
	Runtime        string    `json:"runtime"`
	RuntimeVersion string    `json:"runtime_version"`
	RuntimeFlags   []string  `json:"runtime_flags"`
	Isolation      string    `json:"isolation"`
	SeccompSHA256  string    `json:"seccomp_profile_sha256"`
	PolicySHA256   string    `json:"policy_sha256"`
	Limits         limitsV1  `json:"limits"`
	ArgvSHA256     string    `json:"argv_sha256"`
	Inputs         []fileV1  `json:"inputs"`
	Stdout         streamV1  `json:"stdout"`
	Stderr         streamV1  `json:"stderr"`
	Artifacts      []fileV1  `json:"artifacts"`
	Reason         string    `json:"reason"`
	ExitCode       int       `json:"exit_code"`
	AirlockVersion string    `json:"airlock_version"`
	StartedAt      time.Time `json:"started_at"`
	FinishedAt     time.Time `json:"finished_at"`
}

type fileV1 struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type streamV1 struct {
	SHA256    string `json:"sha256"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated"`
}

type limitsV1 struct {
	TimeoutMS   int64 `json:"timeout_ms"`
	MemoryBytes int64 `json:"memory_bytes"`
	MilliCPUs   int64 `json:"milli_cpus"`
	Pids        int64 `json:"pids"`
	OutputBytes int64 `json:"output_bytes"`
	TmpBytes    int64 `json:"tmp_bytes"`
}

// upgrade says what r says in the current shape. What version 1 did not
// record stays zero: the captured stream hashes, the job, the policy
// record beyond isolation, seccomp, runtime and limits.
func (r receiptV1) upgrade() Receipt {
	files := func(in []fileV1) []File {
		out := make([]File, 0, len(in))
		for _, f := range in {
			out = append(out, File{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
		}
		return out
	}
	stream := func(s streamV1) Stream { return Stream{SHA256: s.SHA256, Bytes: s.Bytes, Truncated: s.Truncated} }
	l := r.Limits
	return Receipt{
		Version: r.Version, RunID: r.RunID, Image: r.Image, ImageManifest: r.ImageManifest, Engine: r.Engine,
		Runtime: r.Runtime, RuntimeVersion: r.RuntimeVersion, Isolation: r.Isolation, SeccompSHA256: r.SeccompSHA256,
		Policy: isolation.Record{
			Isolation: isolation.Mode(r.Isolation), SeccompSHA256: r.SeccompSHA256,
			Runtime: isolation.RuntimeRecord{Name: r.Runtime, Flags: r.RuntimeFlags},
			Limits: isolation.LimitsRecord{
				TimeoutMS: l.TimeoutMS, MemoryBytes: l.MemoryBytes, MilliCPUs: l.MilliCPUs, CPUs: float64(l.MilliCPUs) / 1000,
				Pids: l.Pids, OutputBytes: l.OutputBytes, TmpBytes: l.TmpBytes,
			},
		},
		PolicySHA256: r.PolicySHA256, ArgvSHA256: r.ArgvSHA256, Inputs: files(r.Inputs),
		Stdout: stream(r.Stdout), Stderr: stream(r.Stderr), Artifacts: files(r.Artifacts),
		Reason: r.Reason, ExitCode: r.ExitCode, AirlockVersion: r.AirlockVersion,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
	}
}

// check is version 1's sanity check.
func (r receiptV1) check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if r.RunID == "" {
		bad("empty run_id")
	}
	if !isDigest(r.Image) {
		bad("image %q is not sha256:<64 hex>", r.Image)
	}
	if r.ImageManifest != "" && !isDigest(r.ImageManifest) {
		bad("image_manifest %q is not sha256:<64 hex>", r.ImageManifest)
	}
	for _, h := range []string{r.SeccompSHA256, r.PolicySHA256, r.ArgvSHA256, r.Stdout.SHA256, r.Stderr.SHA256} {
		if h != "" && !isHex64(h) {
			bad("hash %q is not 64 lowercase hex", h)
		}
	}
	if r.Stdout.Bytes < 0 || r.Stderr.Bytes < 0 {
		bad("negative stream size")
	}
	for _, f := range append(append([]fileV1{}, r.Inputs...), r.Artifacts...) {
		if f.SHA256 != "" && !isHex64(f.SHA256) || f.Size < 0 {
			bad("file %q: bad sha256 %q or size %d", f.Path, f.SHA256, f.Size)
		}
	}
	return errors.Join(errs...)
}

// MarshalJSON writes s; a version 1 receipt as it was read.
func (s Signed) MarshalJSON() ([]byte, error) {
	type plain struct {
		Receipt   any    `json:"receipt"`
		KeyID     string `json:"key_id"`
		PublicKey []byte `json:"public_key"`
		Signature []byte `json:"signature"`
	}
	p := plain{Receipt: s.Receipt, KeyID: s.KeyID, PublicKey: s.PublicKey, Signature: s.Signature}
	if s.v1 != nil {
		p.Receipt = s.v1
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON reads a signed receipt of either version. Unknown fields
// are errors, wherever the receipt sits, so nothing unsigned rides along.
func (s *Signed) UnmarshalJSON(b []byte) error {
	var env struct {
		Receipt   json.RawMessage `json:"receipt"`
		KeyID     string          `json:"key_id"`
		PublicKey []byte          `json:"public_key"`
		Signature []byte          `json:"signature"`
	}
	if err := strict(b, &env); err != nil {
		return err
	}
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(env.Receipt, &v); err != nil {
		return fmt.Errorf("%w: receipt: %w", ErrInvalid, err)
	}
	out := Signed{KeyID: env.KeyID, PublicKey: env.PublicKey, Signature: env.Signature}
	if v.Version == 1 {
		var r1 receiptV1
		if err := strict(env.Receipt, &r1); err != nil {
			return err
		}
		out.v1, out.Receipt = &r1, r1.upgrade()
	} else if err := strict(env.Receipt, &out.Receipt); err != nil {
		return err
	}
	*s = out
	return nil
}

func strict(b []byte, v any) error {
	if err := exactKeys(b, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data", ErrInvalid)
	}
	return nil
}
