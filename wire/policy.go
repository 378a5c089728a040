// Package wire is the one policy a run or a sandbox asks for, as every
// face takes it: API bodies and batch lines decode into Policy, the CLI's
// flags and MCP's arguments fill one in, and template files are read with
// the same field parsers. Its JSON names are the CLI's flag names with '_'
// for '-', and its values the CLI's syntax ("512MiB", "30s").
//
// Parse is the one conversion from these strings to isolation.Policy and
// the output directory's settings. A field it refuses is an *Error: invalid
// input, naming the field, the value and what to give instead, in the same
// words whichever face it came through.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gabriel-vasile/mimetype"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/fielderr"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/units"
)

// Policy holds the policy fields of runs and sandboxes. An empty field is
// not given: it takes the default, or a template's value.
type Policy struct {
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
	CPUs Number `json:"cpus,omitempty"`
	// Pids caps the number of processes.
	Pids *int64 `json:"pids,omitempty"`
	// OutputLimit caps each of stdout and stderr, a size such as 1MiB.
	OutputLimit string `json:"output_limit,omitempty"`
	// TmpSize caps /tmp, a size.
	TmpSize string `json:"tmp_size,omitempty"`
	// FileSize caps any one file the program writes, a size.
	FileSize string `json:"file_size,omitempty"`
	// Env is the program's environment, NAME=VALUE each.
	Env Env `json:"env,omitempty"`
	// Engine runs the work: auto, oci or docker; kube only for a sandbox
	// create through airlock serve --kubeconfig, with a template alone (a
	// SandboxClaim on its warm pool on the cluster).
	Engine    string `json:"engine,omitempty" openapi:"enum=auto|oci|docker|kube"`
	Isolation string `json:"isolation,omitempty" openapi:"enum=gvisor|seccomp"`
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
	ArtifactTypes ArtifactTypes `json:"artifact_types,omitempty"`
	// ArtifactsAllowDotfiles accepts artifact paths with a component
	// starting with '.'.
	ArtifactsAllowDotfiles bool `json:"artifacts_allow_dotfiles,omitempty"`
	// AllowHost lists the hosts the sandbox may reach through its egress
	// proxy, HOST[:PORT] each ("pypi.org", "*.pythonhosted.org",
	// "192.0.2.10:8080"; docs/egress.md). Left out, the sandbox has the
	// template's hosts, or no network at all; an empty list is refused.
	AllowHost AllowHosts `json:"allow_host,omitempty"`
	// Credential lists the proxy's credential routes,
	// HOST=HEADER:ENV or HOST=HEADER:@FILE each: the header's value is
	// read from airlock's own environment or a host file and never enters
	// the sandbox. Only the host's command line names its own; a client
	// (the API, MCP, a batch line) may only narrow a template's. An empty
	// list is refused.
	Credential Credentials `json:"credential,omitempty"`
	// EgressLimit caps the bytes the egress proxy moves for the sandbox,
	// both ways, over its whole life, a size such as 4GiB (default 1GiB).
	// It needs an egress: allow_host, a credential, or a template's.
	EgressLimit string `json:"egress_limit,omitempty"`
}

// Number is cpus: a JSON string or number, kept as its text ("cpus": 2
// or "0.5").
type Number string

// UnmarshalJSON takes a string or a number; anything else is an *Error
// naming cpus, as encoding/json names no field for an Unmarshaler's error.
func (v *Number) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*v = Number(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		got := string(b)
		if len(b) > 0 && (b[0] == '[' || b[0] == '{') {
			got = string(b[0]) + "…" + map[byte]string{'[': "]", '{': "}"}[b[0]]
		}
		return &Error{Field: "cpus", Value: got, Want: `give a number or a string such as "0.5"`}
	}
	*v = Number(n.String())
	return nil
}

// Error refuses one field. It is errdefs.IsInvalidArgument.
type Error = fielderr.Error

// refuse refuses field's string value s.
func refuse(field, s, want string) *Error { return fielderr.Refuse(field, s, want) }

// zeroLimit is what every face says of a limit of zero.
const zeroLimit = `a limit of zero is neither "unlimited" nor "the default"; give a positive value, or leave it out for the default`

// Duration parses field's value s, a positive duration such as "30s".
func Duration(field, s string) (time.Duration, error) {
	d, err := units.ParseDuration(s)
	switch {
	case err == nil:
		return d, nil
	case isZero(s):
		return 0, refuse(field, s, zeroLimit)
	}
	return 0, refuse(field, s, `give a positive duration such as "30s" or "500ms"`)
}

// Seconds parses field's value v, a number of seconds, as MCP's arguments
// and /run_code give durations; nil is not given (zero).
func Seconds(field string, v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	text := strconv.FormatFloat(*v, 'g', -1, 64)
	// The bound is on the product: 2^63 is exact as a float64, where
	// MaxInt64/1e9 rounds up and lets 2^63 through to overflow.
	ns := *v * float64(time.Second)
	switch {
	case *v == 0:
		return 0, &Error{Field: field, Value: text, Want: zeroLimit}
	case !(*v > 0) || !(ns < 1<<63):
		return 0, &Error{Field: field, Value: text, Want: "give a positive number of seconds, such as 30, or leave it out for the default"}
	}
	// A value so small that it rounds to no time at all would read as
	// "not given": it is refused instead.
	d := time.Duration(ns)
	if d < time.Millisecond {
		return 0, &Error{Field: field, Value: text, Want: "give at least 0.001 seconds"}
	}
	return d, nil
}

// Size parses field's value s, a positive size such as "512MiB".
func Size(field, s string) (units.Bytes, error) {
	b, err := units.ParseBytes(s)
	switch {
	case err == nil && b > 0:
		return b, nil
	case err == nil || isZero(s):
		return 0, refuse(field, s, zeroLimit)
	case errors.Is(err, units.ErrNotWhole):
		return 0, refuse(field, s, `not a whole number of bytes; give a size such as "512MiB", "1.5GiB" or "1536KiB"`)
	case errors.Is(err, units.ErrTooLarge):
		return 0, refuse(field, s, "too large; give a size under 8388608TiB (2^63 bytes)")
	}
	return 0, refuse(field, s, `give a positive size such as "512MiB" or "1.5GiB"`)
}

// CPUs parses field's value s, a positive number of CPUs such as "0.5",
// at least isolation.MinCPUs.
func CPUs(field, s string) (units.MilliCPUs, error) {
	c, err := units.ParseCPUs(s)
	switch {
	case err == nil && c >= isolation.MinCPUs:
		return c, nil
	case err == nil && c > 0:
		return 0, refuse(field, s, fmt.Sprintf("give at least %v CPUs", isolation.MinCPUs))
	case isZero(s):
		return 0, refuse(field, s, zeroLimit)
	}
	return 0, refuse(field, s, fmt.Sprintf("give a positive number of CPUs such as 0.5 or 2, at most %d", units.MaxCPUs))
}

// Count parses field's value n, a positive count such as pids.
func Count[T int | int64](field string, n T) (T, error) {
	switch {
	case n == 0:
		return 0, &Error{Field: field, Value: "0", Want: zeroLimit}
	case n < 0:
		return 0, &Error{Field: field, Value: fmt.Sprint(n), Want: "give a positive number"}
	}
	return n, nil
}

// isZero reports whether s spells zero in any unit ("0", "0s", "0MiB",
// "0h0m"): zeros, then letters, spaces and more zeros only, so that a
// malformed "0x5" is told as malformed.
func isZero(s string) bool {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] == '0' || s[i] == '.') {
		i++
	}
	if i == 0 || strings.Trim(s[:i], ".") == "" {
		return false
	}
	if i < len(s) && s[i] >= '0' && s[i] <= '9' {
		return false
	}
	return !strings.ContainsFunc(s[i:], func(r rune) bool { return r >= '1' && r <= '9' })
}

// The caps on list fields. Every one is far past what a real policy
// lists, and each list is kept in the sandbox's record and receipts (the
// MIME and egress lists) or the program's environment: the caps bound
// what a request of --max-body could otherwise put there.
const (
	// MaxMIMETypes caps artifact_types and download_types.
	MaxMIMETypes = 64
	// MaxAllowHosts caps allow_host.
	MaxAllowHosts = 256
	// MaxCredentials caps credential.
	MaxCredentials = 64
	// MaxEnv caps env.
	MaxEnv = 1024
)

// MaxOutFiles caps out_files: the output tmpfs takes that many inodes,
// and the scan after the run records each name.
const MaxOutFiles = 1_000_000

// allowHostWant is what allow_host's cap asks for.
const allowHostWant = "HOST[:PORT] entries; a wildcard such as *.example.com covers a domain's hosts"

// tooMany refuses field's list of n entries, over max.
func tooMany(field string, n, max int, what string) *Error {
	return &Error{Field: field, Value: fmt.Sprintf("with %d entries", n), Want: fmt.Sprintf("give at most %d %s", max, what)}
}

// MIMEList checks field's MIME types; blanks and repeats are dropped,
// more than MaxMIMETypes are refused, and so is an empty list.
func MIMEList(field string, in []string) ([]string, error) {
	var out []string
	n := 0
	for _, t := range in {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if n++; n > MaxMIMETypes {
			return nil, tooMany(field, len(in), MaxMIMETypes, "MIME types")
		}
		if mimetype.Lookup(t) == nil {
			return nil, refuse(field, t, "unknown MIME type; known examples: "+strings.Join(artifacts.DefaultTypes, ", "))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, refuse(field, strings.Join(in, ","), "empty; list at least one MIME type, such as text/plain")
	}
	return out, nil
}

// Parse converts the isolation and limit fields given; absent fields are
// zero, for isolation.Policy.WithDefaults or a template to fill. The
// engine is checked, not converted.
func (p *Policy) Parse() (isolation.Policy, error) {
	var pol isolation.Policy
	var err error
	if p.Isolation != "" {
		if pol.Isolation, err = isolation.ParseMode(p.Isolation); err != nil {
			return pol, refuse("isolation", p.Isolation, "use gvisor or seccomp")
		}
	}
	switch p.Engine {
	case "", "auto", "oci", "docker":
	case "kube":
		return pol, refuse("engine", p.Engine, "only a sandbox create takes it (POST /v1/sandboxes with a template alone, on a server started with --kubeconfig); one-shot runs on a cluster are `airlock run --engine kube` and `airlock batch --engine kube`")
	default:
		return pol, refuse("engine", p.Engine, "use auto, oci or docker")
	}
	if len(p.Env) > MaxEnv {
		return pol, tooMany("env", len(p.Env), MaxEnv, "NAME=VALUE entries")
	}
	l := &pol.Limits
	for _, f := range []struct {
		name string
		s    string
		dst  *units.Bytes
	}{{"memory", p.Memory, &l.Memory}, {"output_limit", p.OutputLimit, &l.Output}, {"tmp_size", p.TmpSize, &l.Tmp}, {"file_size", p.FileSize, &l.FileSize}} {
		if f.s != "" {
			if *f.dst, err = Size(f.name, f.s); err != nil {
				return pol, err
			}
		}
	}
	if p.Timeout != "" {
		if l.Timeout, err = Duration("timeout", p.Timeout); err != nil {
			return pol, err
		}
	}
	if p.CPUs != "" {
		if l.CPUs, err = CPUs("cpus", string(p.CPUs)); err != nil {
			return pol, err
		}
	}
	if p.Pids != nil {
		if l.Pids, err = Count("pids", *p.Pids); err != nil {
			return pol, err
		}
	}
	// An empty list given is refused, as for artifact_types: on a
	// template it would read as not given, the template's whole egress.
	if p.AllowHost != nil && len(p.AllowHost) == 0 {
		return pol, &Error{Field: "allow_host", Value: "[]", Want: "an empty list is neither \"no network\" nor \"the template's\"; leave it out for the default (the template's hosts, or none), or list the hosts to keep"}
	}
	if p.Credential != nil && len(p.Credential) == 0 {
		return pol, &Error{Field: "credential", Value: "[]", Want: "an empty list is neither \"no credentials\" nor \"the template's\"; leave it out for the default (the template's credentials, or none), or list the routes to keep"}
	}
	if pol.Egress, err = ParseEgress(p.AllowHost, p.Credential); err != nil {
		return pol, err
	}
	if p.EgressLimit != "" {
		if pol.Egress.Bytes, err = Size("egress_limit", p.EgressLimit); err != nil {
			return pol, err
		}
	}
	return pol, nil
}

// ParseClient is Parse for a policy from a client of the host: the API,
// MCP or a batch line. A credential names airlock's own environment or a
// host file, which only the host's own command line may name, so a client
// may give credentials only to narrow the template it names (template),
// never credentials of its own.
func (p *Policy) ParseClient(template string) (isolation.Policy, error) {
	if len(p.Credential) > 0 && template == "" {
		return isolation.Policy{}, refuse("credential", p.Credential[0], "a credential names airlock's environment or a host file, which only airlock's own command line may name; a request may only narrow the credentials of the template it names")
	}
	return p.Parse()
}

// ParseEgress reads allow_host and credential entries, MaxAllowHosts and
// MaxCredentials at most. The first refused entry is an *Error.
func ParseEgress(allowHost, credential []string) (isolation.Egress, error) {
	var e isolation.Egress
	var err error
	if len(allowHost) > MaxAllowHosts {
		return e, tooMany("allow_host", len(allowHost), MaxAllowHosts, allowHostWant)
	}
	if len(credential) > MaxCredentials {
		return e, tooMany("credential", len(credential), MaxCredentials, "credential routes")
	}
	if e.Allow, err = egress.ParseAllowlist(allowHost); err != nil {
		return e, fromEgress(err)
	}
	for _, s := range credential {
		c, err := egress.ParseCredential(s)
		if err != nil {
			return isolation.Egress{}, fromEgress(err)
		}
		if !slices.Contains(e.Credentials, c) {
			e.Credentials = append(e.Credentials, c)
		}
	}
	return e, nil
}

// fromEgress is package egress's first refusal in err, an *Error (the
// same type, fielderr.Error).
func fromEgress(err error) error {
	if ee, ok := errors.AsType[*egress.Error](err); ok {
		return ee
	}
	return err
}

// ParseOutput converts the output directory's fields given; absent fields
// are zero, for the runner's defaults or a template to fill.
func (p *Policy) ParseOutput() (Output, error) {
	var o Output
	if p.OutDir == "none" {
		if p.OutLimit != "" || p.OutFiles != nil || p.ArtifactMaxSize != "" || p.ArtifactTypes != nil {
			return o, refuse("out_dir", "none", "there is no output directory: drop out_limit, out_files, artifact_max_size and artifact_types")
		}
		o.Disabled = true
		return o, nil
	}
	o.Dir, o.AllowDotfiles = p.OutDir, p.ArtifactsAllowDotfiles
	var err error
	if p.OutLimit != "" {
		if o.Size, err = Size("out_limit", p.OutLimit); err != nil {
			return o, err
		}
	}
	if p.ArtifactMaxSize != "" {
		if o.MaxFileSize, err = Size("artifact_max_size", p.ArtifactMaxSize); err != nil {
			return o, err
		}
	}
	if p.OutFiles != nil {
		if o.Files, err = Count("out_files", *p.OutFiles); err != nil {
			return o, err
		}
		if o.Files > MaxOutFiles {
			return o, &Error{Field: "out_files", Value: strconv.Itoa(o.Files), Want: fmt.Sprintf("give at most %d: each file is an inode of the output directory's tmpfs, and an entry of the scan after the run", MaxOutFiles)}
		}
	}
	if p.ArtifactTypes != nil {
		if o.Types, err = MIMEList("artifact_types", p.ArtifactTypes); err != nil {
			return o, err
		}
	}
	return o, nil
}

// Output is the sandbox's one writable directory besides /tmp, and what
// becomes of the files left in it.
type Output struct {
	// Disabled turns the output directory off.
	Disabled bool
	// Dir is the path inside the sandbox.
	Dir string
	// Size caps the directory's bytes (kernel-enforced) and the total of
	// accepted artifacts.
	Size units.Bytes
	// Files caps the number of files.
	Files int
	// MaxFileSize caps one artifact; default Size.
	MaxFileSize units.Bytes
	// Types is the MIME allowlist; nil means artifacts.DefaultTypes.
	Types []string
	// Artifacts receives accepted files; empty means report only. Only
	// the host's own CLI sets it.
	Artifacts string
	// Quarantine, when set, keeps readable rejected files for inspection.
	// Only the host's own CLI sets it.
	Quarantine string
	// AllowDotfiles delivers paths with a component starting with '.'.
	AllowDotfiles bool
}

// WithDefaults fills what o leaves zero with the runner's defaults.
func (o Output) WithDefaults() Output {
	if o.Dir == "" {
		o.Dir = "/out"
	}
	if o.Size == 0 {
		o.Size = 64 << 20
	}
	if o.Files == 0 {
		o.Files = 1000
	}
	if o.MaxFileSize == 0 {
		o.MaxFileSize = o.Size
	}
	return o
}
