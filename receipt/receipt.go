package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
)

// Version is the receipt format this package writes. Version 2 binds the
// Result around the receipt: the captured stream bytes, the batch job id
// and verdict, the rejected files and the policy record. Version 1
// receipts still verify, alone (see receiptV1). Fields added since, such
// as PodUID, are omitted when empty, so a version 2 receipt without them
// signs the same bytes it always did.
const Version = 2

var (
	// ErrBadSignature is wrapped when a signature does not match the receipt.
	ErrBadSignature = errors.New("bad receipt signature")
	// ErrUntrustedKey is wrapped when a receipt is signed by a key other than
	// the trusted one.
	ErrUntrustedKey = errors.New("receipt signed by an untrusted key")
	// ErrInvalid is wrapped when a receipt or its envelope is malformed.
	ErrInvalid = errors.New("invalid receipt")
)

// Receipt says what ran, where, under which policy, on what, and what came
// out.
type Receipt struct {
	Version int    `json:"version"`
	RunID   string `json:"run_id"`
	// SandboxID is the long-lived sandbox an exec ran in; RunID is then
	// the exec's id. "" for a run.
	SandboxID string `json:"sandbox_id,omitempty"`
	// JobID is the batch job the run was for; "" outside a batch.
	JobID string `json:"job_id,omitempty"`
	// PodUID is the UID of the Kubernetes pod whose program an airlock
	// node ran (a one-shot pod's exec), so that the receipt holds for
	// that pod alone; "" for anything else.
	PodUID string `json:"pod_uid,omitempty"`
	// Pass is the expected-stdout verdict, when the job gave one: the
	// program exited 0 and printed exactly the expected bytes.
	Pass *bool `json:"pass,omitempty"`
	// Snapshot is the snapshot the exec's sandbox was restored from: the
	// sha256 of its manifest, which names the image, the policy, the
	// runtime and the hash of every file of the checkpoint. "" for a
	// sandbox that booted.
	Snapshot string `json:"snapshot,omitempty"`
	// Image is the image ID that ran ("sha256:…").
	Image string `json:"image"`
	// ImageManifest is the manifest digest ("sha256:…"), when known.
	ImageManifest string `json:"image_manifest,omitempty"`
	// Engine is "oci" or "docker".
	Engine string `json:"engine"`
	// Runtime is "runsc" or "runc"; Policy.Runtime has its flags.
	Runtime        string `json:"runtime"`
	RuntimeVersion string `json:"runtime_version"`
	Isolation      string `json:"isolation"`
	// SeccompSHA256 is the hex sha256 of the seccomp profile applied.
	SeccompSHA256 string `json:"seccomp_profile_sha256"`
	// Policy is the effective policy; PolicySHA256 is Hash(Policy).
	Policy       isolation.Record `json:"policy"`
	PolicySHA256 string           `json:"policy_sha256"`
	// ArgvSHA256 is Hash of the argv.
	ArgvSHA256 string      `json:"argv_sha256"`
	Inputs     []File      `json:"inputs"`
	Stdout     Stream      `json:"stdout"`
	Stderr     Stream      `json:"stderr"`
	Artifacts  []File      `json:"artifacts"`
	Rejected   []Rejection `json:"rejected"`
	// Reason is why the run ended (runner.Reason).
	Reason         string    `json:"reason"`
	ExitCode       int       `json:"exit_code"`
	AirlockVersion string    `json:"airlock_version"`
	StartedAt      time.Time `json:"started_at"`
	FinishedAt     time.Time `json:"finished_at"`
}

// File is one input or artifact.
type File struct {
	// Path is relative to its directory, with '/' separators.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// MIME is an artifact's detected type.
	MIME string `json:"mime,omitempty"`
}

// Rejection is a file of the output directory that was not accepted.
type Rejection struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// Stream is what the program wrote to stdout or stderr, and what of it the
// Result carries: the head (its "text" or "base64") and, once the stream
// passed its cap, the tail (its "tail" or "tail_base64").
type Stream struct {
	// SHA256 is the hex sha256 of every byte the program wrote, kept or
	// not; Bytes is how many.
	SHA256    string `json:"sha256"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated"`
	// CapturedSHA256 and CapturedBytes are the head's.
	CapturedSHA256 string `json:"captured_sha256"`
	CapturedBytes  int64  `json:"captured_bytes"`
	// TailSHA256 and TailBytes are the tail's: no bytes unless Truncated.
	TailSHA256 string `json:"tail_sha256"`
	TailBytes  int64  `json:"tail_bytes"`
}

// StreamOf describes a stream of total bytes hashing to sum, of which the
// Result carries head and tail.
func StreamOf(sum string, total int64, truncated bool, head, tail []byte) Stream {
	return Stream{
		SHA256: sum, Bytes: total, Truncated: truncated,
		CapturedSHA256: sha256Hex(head), CapturedBytes: int64(len(head)),
		TailSHA256: sha256Hex(tail), TailBytes: int64(len(tail)),
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Signed is a receipt with its signature.
type Signed struct {
	Receipt Receipt `json:"receipt"`
	// KeyID is KeyID(PublicKey).
	KeyID string `json:"key_id"`
	// PublicKey is the ed25519 key that signed.
	PublicKey []byte `json:"public_key"`
	// Signature is over Canonical(Receipt).
	Signature []byte `json:"signature"`

	// v1 is the receipt as read, when it is a version 1 receipt; Receipt
	// then holds what it says in the current shape, for Explain.
	v1 *receiptV1
}

// Legacy reports a version 1 receipt: it binds no Result around it.
func (s Signed) Legacy() bool { return s.v1 != nil }

// KeyID returns the hex of the first 16 bytes of the key's sha256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:16])
}

// Sign signs r. A zero Version becomes Version, and the times become UTC so
// that the receipt reads back equal.
func Sign(key ed25519.PrivateKey, r Receipt) (Signed, error) {
	if len(key) != ed25519.PrivateKeySize {
		return Signed{}, fmt.Errorf("signing receipt %q: private key is %d bytes, want %d", r.RunID, len(key), ed25519.PrivateKeySize)
	}
	if r.Version == 0 {
		r.Version = Version
	}
	r.StartedAt = r.StartedAt.UTC()
	r.FinishedAt = r.FinishedAt.UTC()
	if r.Rejected == nil {
		r.Rejected = []Rejection{}
	}
	if err := check(r); err != nil {
		return Signed{}, fmt.Errorf("signing receipt %q: %w", r.RunID, err)
	}
	msg, err := Canonical(r)
	if err != nil {
		return Signed{}, fmt.Errorf("signing receipt %q: %w", r.RunID, err)
	}
	pub := key.Public().(ed25519.PublicKey)
	return Signed{
		Receipt:   r,
		KeyID:     KeyID(pub),
		PublicKey: bytes.Clone(pub),
		Signature: ed25519.Sign(key, msg),
	}, nil
}

// Verify checks that s.Signature is s.PublicKey's signature over
// Canonical(s.Receipt), that KeyID matches the key and that the receipt is
// well formed. If trusted is non-nil the embedded key must be trusted;
// without it, Verify proves only that whoever holds the embedded key signed.
func Verify(s Signed, trusted ed25519.PublicKey) error {
	id := s.Receipt.RunID
	if len(s.PublicKey) != ed25519.PublicKeySize {
		return fmt.Errorf("verifying receipt %q: %w: public key is %d bytes, want %d", id, ErrInvalid, len(s.PublicKey), ed25519.PublicKeySize)
	}
	if trusted != nil && !bytes.Equal(s.PublicKey, trusted) {
		return fmt.Errorf("verifying receipt %q: %w: signed by key %s, trusted key is %s", id, ErrUntrustedKey, KeyID(s.PublicKey), KeyID(trusted))
	}
	if want := KeyID(s.PublicKey); s.KeyID != want {
		return fmt.Errorf("verifying receipt %q: %w: key_id %q does not match the public key (%s)", id, ErrInvalid, s.KeyID, want)
	}
	var signed any = s.Receipt
	if s.v1 != nil {
		// What Explain shows must be what was signed.
		if !reflect.DeepEqual(s.Receipt, s.v1.upgrade()) {
			return fmt.Errorf("verifying receipt %q: %w: changed since it was read", id, ErrBadSignature)
		}
		signed = *s.v1
	}
	msg, err := Canonical(signed)
	if err != nil {
		return fmt.Errorf("verifying receipt %q: %w", id, err)
	}
	if !ed25519.Verify(s.PublicKey, msg, s.Signature) {
		return fmt.Errorf("verifying receipt %q: %w", id, ErrBadSignature)
	}
	if s.v1 != nil {
		err = s.v1.check()
	} else {
		err = check(s.Receipt)
	}
	if err != nil {
		return fmt.Errorf("verifying receipt %q: %w", id, err)
	}
	return nil
}

// check is the sanity check both Sign and Verify apply.
func check(r Receipt) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if r.Version != Version {
		bad("version %d, want %d", r.Version, Version)
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
	hashes := []struct{ name, v string }{
		{"seccomp_profile_sha256", r.SeccompSHA256},
		{"policy_sha256", r.PolicySHA256},
		{"argv_sha256", r.ArgvSHA256},
		{"stdout.sha256", r.Stdout.SHA256},
		{"stderr.sha256", r.Stderr.SHA256},
	}
	for _, h := range hashes {
		if h.v != "" && !isHex64(h.v) {
			bad("%s %q is not 64 lowercase hex", h.name, h.v)
		}
	}
	for name, st := range map[string]Stream{"stdout": r.Stdout, "stderr": r.Stderr} {
		if !isHex64(st.CapturedSHA256) || !isHex64(st.TailSHA256) {
			bad("%s: captured_sha256 and tail_sha256 must be 64 lowercase hex", name)
		}
		if st.CapturedBytes < 0 || st.TailBytes < 0 || st.CapturedBytes+st.TailBytes > st.Bytes {
			bad("%s: %d captured and %d tail bytes of %d written", name, st.CapturedBytes, st.TailBytes, st.Bytes)
		}
		if !st.Truncated && (st.TailBytes != 0 || st.CapturedBytes != st.Bytes) {
			bad("%s: not truncated, yet %d of %d bytes captured and %d in the tail", name, st.CapturedBytes, st.Bytes, st.TailBytes)
		}
	}
	if p := r.Policy; p.Isolation != isolation.Mode(r.Isolation) || p.SeccompSHA256 != r.SeccompSHA256 || p.Runtime.Name != r.Runtime {
		bad("policy says isolation %q, seccomp %q and runtime %q; the receipt %q, %q and %q",
			p.Isolation, p.SeccompSHA256, p.Runtime.Name, r.Isolation, r.SeccompSHA256, r.Runtime)
	}
	if err := r.Policy.Limits.Check(); err != nil {
		errs = append(errs, fmt.Errorf("%w: policy: %w", ErrInvalid, err))
	}
	if h, err := Hash(r.Policy); err != nil || h != r.PolicySHA256 {
		bad("policy_sha256 %q is not the hash of the policy (%s)", r.PolicySHA256, h)
	}
	for _, set := range []struct {
		name  string
		files []File
	}{{"inputs", r.Inputs}, {"artifacts", r.Artifacts}} {
		for i, f := range set.files {
			if f.SHA256 != "" && !isHex64(f.SHA256) {
				bad("%s[%d] %q: sha256 %q is not 64 lowercase hex", set.name, i, f.Path, f.SHA256)
			}
			if f.Size < 0 {
				bad("%s[%d] %q: negative size", set.name, i, f.Path)
			}
		}
	}
	return errors.Join(errs...)
}

func isDigest(s string) bool {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	return ok && isHex64(hexPart)
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// maxRead caps what Read accepts.
const maxRead = 64 << 20

// Read decodes one signed receipt. Unknown fields and trailing data are
// errors. Read does not verify; call Verify.
func Read(r io.Reader) (Signed, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxRead+1))
	if err != nil {
		return Signed{}, fmt.Errorf("reading receipt: %w", err)
	}
	if len(data) > maxRead {
		return Signed{}, fmt.Errorf("reading receipt: %w: larger than %d bytes", ErrInvalid, maxRead)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Signed
	if err := dec.Decode(&s); err != nil {
		return Signed{}, fmt.Errorf("reading receipt: %w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Signed{}, fmt.Errorf("reading receipt: %w: trailing data", ErrInvalid)
	}
	return s, nil
}

// Write encodes s as indented JSON with a final newline.
func (s Signed) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("writing receipt %q: %w", s.Receipt.RunID, err)
	}
	return nil
}
