package templates

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/gabriel-vasile/mimetype"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/receipt"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/seccomp"
	"github.com/airlock-sandbox/airlock/units"
)

// Engines a template may name; "auto" lets the caller's engine decide.
const (
	EngineAuto   = "auto"
	EngineOCI    = "oci"
	EngineDocker = "docker"
)

// Template is a named, pinned sandbox shape. Every field is concrete: no
// zero means "the default".
type Template struct {
	Name string
	// Image is a digest-pinned reference ("name@sha256:…").
	Image string
	// Engine is "auto", "oci" or "docker", as the creator gave it.
	Engine    string
	Isolation isolation.Mode
	Limits    isolation.Limits
	// Env holds "K=V" entries every run starts with.
	Env []string
	// Workdir is a run's working directory; "" is the image's.
	Workdir string
	Output  Output
	// Egress is the hosts its sandboxes may reach through their egress
	// proxy and the proxy's credential routes; zero, they have no
	// network.
	Egress isolation.Egress
	// SeccompSHA256 is the hex sha256 of the template's own seccomp
	// profile; "" means airlock's default profile.
	SeccompSHA256 string
	// Warm is the warm program a snapshot was taken of (template create
	// --warm), and Snapshot that snapshot's name (the oci engine's, under
	// gVisor): its sandboxes are restored from it instead of booted. Both
	// are empty for a template without one.
	Warm      []string
	Snapshot  string
	CreatedAt time.Time

	// dir is the store directory the template was read from or put in,
	// where its profile copy lives.
	dir string
	// profile holds the custom profile's bytes until the store keeps them.
	profile []byte
}

// Output is the output directory a template gives its sandboxes.
type Output struct {
	// Disabled means no output directory; the other fields are then zero.
	Disabled    bool
	Dir         string
	Size        units.Bytes
	Files       int
	MaxFileSize units.Bytes
	Types       []string
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckName refuses what cannot be a template's name.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: template name %q: use 1 to 63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit (such as py or numpy-1g)", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

// New makes a template named name from s, a run spec as the creator gave
// it: zero fields take airlock's defaults now, and are stored as values.
// The image is pinned through idx: an empty one is the default image, any
// other must be digest-pinned and in the index. s.SeccompProfile, when
// set, is read once and must narrow airlock's default. engine is "auto",
// "oci" or "docker" ("" is auto). Inputs, stdin and artifact delivery
// belong to a job, not a template, and are refused.
func New(name string, s runner.Spec, engine string, idx *images.Index) (*Template, error) {
	if len(s.Inputs) > 0 || s.Stdin != nil || len(s.Argv) > 0 || s.Output.Artifacts != "" || s.Output.Quarantine != "" || s.Output.AllowDotfiles {
		return nil, fmt.Errorf("%w: a template holds no command, inputs, stdin or artifact destination: give those to each run", errdefs.ErrInvalidArgument)
	}
	if s.Policy.Seccomp != nil {
		return nil, fmt.Errorf("%w: a template takes its seccomp profile as a file, not compiled", errdefs.ErrInvalidArgument)
	}
	pol := s.Policy.WithDefaults()
	t := &Template{
		Name:      name,
		Engine:    engine,
		Isolation: pol.Isolation,
		Limits:    pol.Limits,
		Env:       slices.Clone(s.Env),
		Workdir:   s.Workdir,
		Output:    outputOf(s.Output),
		Egress:    isolation.Egress{Allow: s.Policy.Egress.Allow, Credentials: slices.Clone(s.Policy.Egress.Credentials), Bytes: s.Policy.Egress.Bytes},
		CreatedAt: time.Now().UTC().Truncate(time.Second),
	}
	if t.Engine == "" {
		t.Engine = EngineAuto
	}
	if t.Env == nil {
		t.Env = []string{}
	}
	ref, err := pin(s.Image, idx)
	if err != nil {
		return nil, err
	}
	t.Image = ref.String()
	if s.SeccompProfile != "" {
		raw, err := os.ReadFile(s.SeccompProfile)
		if err != nil {
			return nil, fmt.Errorf("%w: reading the seccomp profile: %v", errdefs.ErrNotFound, err)
		}
		t.profile = raw
		t.SeccompSHA256 = sha256Hex(raw)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// outputOf stores o with runner's defaults filled in.
func outputOf(o runner.Output) Output {
	if o.Disabled {
		return Output{Disabled: true}
	}
	o = o.WithDefaults()
	out := Output{Dir: o.Dir, Size: o.Size, Files: o.Files, MaxFileSize: min(o.MaxFileSize, o.Size), Types: slices.Clone(o.Types)}
	if out.Types == nil {
		out.Types = slices.Clone(artifacts.DefaultTypes)
	}
	return out
}

// pin resolves image to a pinned reference that airlock holds: the
// default image's when image is empty, else an image of the index.
func pin(image string, idx *images.Index) (images.Ref, error) {
	_, def, defErr := idx.Default()
	if image == "" {
		if defErr != nil {
			return images.Ref{}, fmt.Errorf("%w: %w", errdefs.ErrNotFound, defErr)
		}
		return def, nil
	}
	ref, err := images.ParseRef(image)
	if err != nil {
		return images.Ref{}, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if defErr == nil && def.ID == ref.ID {
		return images.Ref{Name: cmp.Or(ref.Name, def.Name), ID: ref.ID}, nil
	}
	recs, err := idx.List()
	if err != nil {
		return images.Ref{}, fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	for _, r := range recs {
		if r.ID == ref.ID {
			return images.Ref{Name: cmp.Or(ref.Name, r.Name), ID: ref.ID}, nil
		}
	}
	return images.Ref{}, fmt.Errorf("%w: image %s is not one airlock holds: `airlock image ls` lists the images it can run, and `airlock image import` adds one", errdefs.ErrNotFound, image)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks every field, joining every error; each wraps
// errdefs.ErrInvalidArgument.
func (t *Template) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{errdefs.ErrInvalidArgument}, args...)...))
	}
	if err := CheckName(t.Name); err != nil {
		errs = append(errs, err)
	}
	if _, err := images.ParseRef(t.Image); err != nil {
		bad("image: %v", err)
	}
	switch t.Engine {
	case EngineAuto, EngineOCI, EngineDocker:
	default:
		bad("engine %q: use auto, oci or docker", t.Engine)
	}
	pol := isolation.Policy{Isolation: t.Isolation, Limits: t.Limits, Egress: t.Egress}.WithDefaults()
	if pol.Limits != t.Limits || t.Isolation == "" {
		bad("every limit must be set (a zero limit is neither \"unlimited\" nor \"the default\")")
	}
	// The profile itself: airlock's default, or the template's copy (named
	// by a hash checked first, as it becomes a path), which must narrow
	// the default. The policy is then checked as the runner would.
	if t.SeccompSHA256 != "" && !sha256RE.MatchString(t.SeccompSHA256) {
		bad("seccomp_profile_sha256 %q is not 64 lower-case hex digits", t.SeccompSHA256)
	} else if prof, err := t.loadProfile(); err != nil {
		errs = append(errs, err)
	} else {
		pol.Seccomp = &isolation.SeccompProfile{JSON: prof.Bytes(), Spec: prof.Spec(), SHA256: prof.SHA256()}
		if err := pol.Validate(); err != nil {
			bad("%v", err)
		}
	}
	for _, kv := range t.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) || strings.ContainsRune(kv, 0) {
			bad("env entry %q must be NAME=VALUE, with NAME made of letters, digits and '_'", kv)
		}
	}
	if t.Workdir != "" && (!path.IsAbs(t.Workdir) || path.Clean(t.Workdir) != t.Workdir) {
		bad("workdir %q must be an absolute, clean path", t.Workdir)
	}
	if err := t.Output.validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case t.Snapshot == "" && len(t.Warm) > 0, t.Snapshot != "" && len(t.Warm) == 0:
		bad("warm and snapshot go together: a snapshot is taken of a warm program")
	case t.Snapshot != "" && !sha256RE.MatchString(t.Snapshot):
		bad("snapshot %q is not 64 lower-case hex digits", t.Snapshot)
	case t.Snapshot != "" && (t.Engine != EngineOCI || t.Isolation != isolation.GVisor):
		bad("a template with a snapshot runs on engine oci under gvisor")
	}
	return errors.Join(errs...)
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (o Output) validate() error {
	if o.Disabled {
		if o.Dir != "" || o.Size != 0 || o.Files != 0 || o.MaxFileSize != 0 || o.Types != nil {
			return fmt.Errorf("%w: out_dir is none, so out_limit, out_files, artifact_max_size and artifact_types must be unset", errdefs.ErrInvalidArgument)
		}
		return nil
	}
	if err := isolation.CheckTarget(o.Dir); err != nil {
		return fmt.Errorf("%w: out_dir: %v", errdefs.ErrInvalidArgument, err)
	}
	if o.Size < 1<<20 || o.Files < 1 || o.MaxFileSize < 1 || o.MaxFileSize > o.Size {
		return fmt.Errorf("%w: the output directory needs out_limit of at least 1MiB, out_files of at least 1, and artifact_max_size between 1 byte and out_limit", errdefs.ErrInvalidArgument)
	}
	if len(o.Types) == 0 {
		return fmt.Errorf("%w: artifact_types is empty; list at least one MIME type, such as text/plain", errdefs.ErrInvalidArgument)
	}
	for _, ty := range o.Types {
		if mimetype.Lookup(ty) == nil {
			return fmt.Errorf("%w: artifact_types: unknown MIME type %q; known examples: %s", errdefs.ErrInvalidArgument, ty, strings.Join(artifacts.DefaultTypes, ", "))
		}
	}
	return nil
}

// loadProfile parses the template's profile: airlock's default, the bytes
// New read, or the store's copy, which must match SeccompSHA256.
// defaultProfile is airlock's default profile, parsed once: every template
// read validates against it.
var defaultProfile = sync.OnceValues(func() (*seccomp.Profile, error) { return seccomp.Load("default") })

func (t *Template) loadProfile() (*seccomp.Profile, error) {
	if t.SeccompSHA256 == "" {
		return defaultProfile()
	}
	raw := t.profile
	if raw == nil {
		if t.dir == "" {
			return nil, fmt.Errorf("%w: template %q names seccomp profile %s but holds no copy of it", errdefs.ErrInvalidArgument, t.Name, t.SeccompSHA256)
		}
		var err error
		if raw, err = os.ReadFile(t.ProfilePath()); err != nil {
			return nil, fmt.Errorf("%w: reading template %q's seccomp profile: %v; remove the template (`airlock template rm %s`) and create it again", errdefs.ErrDataLoss, t.Name, err, t.Name)
		}
	}
	if got := sha256Hex(raw); got != t.SeccompSHA256 {
		return nil, fmt.Errorf("%w: template %q's seccomp profile has sha256 %s, not the %s it was created with; remove the template (`airlock template rm %s`) and create it again", errdefs.ErrDataLoss, t.Name, got, t.SeccompSHA256, t.Name)
	}
	p, err := seccomp.ParseCustom(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: seccomp profile: %v", errdefs.ErrInvalidArgument, err)
	}
	return p, nil
}

// ProfilePath is where the store keeps the template's seccomp profile;
// "" when it uses airlock's default.
func (t *Template) ProfilePath() string {
	if t.SeccompSHA256 == "" || t.dir == "" {
		return ""
	}
	return profilePath(t.dir, t.SeccompSHA256)
}

// Spec returns the run spec the template describes: image, policy,
// environment, working directory, output settings and the path of the
// template's own profile copy. The caller adds the command.
func (t *Template) Spec() runner.Spec {
	s := runner.Spec{
		Image:          t.Image,
		Env:            slices.Clone(t.Env),
		Policy:         isolation.Policy{Isolation: t.Isolation, Limits: t.Limits, Egress: t.Egress},
		Workdir:        t.Workdir,
		SeccompProfile: t.ProfilePath(),
	}
	if t.Output.Disabled {
		s.Output.Disabled = true
	} else {
		o := t.Output
		s.Output = runner.Output{Dir: o.Dir, Size: o.Size, Files: o.Files, MaxFileSize: o.MaxFileSize, Types: slices.Clone(o.Types)}
	}
	return s
}

// Version is the hex sha256 of the canonical JSON of everything in the
// template that shapes a sandbox: image, engine, isolation, limits, env,
// workdir, output settings, seccomp profile, egress and snapshot. The name and creation time
// are left out.
func (t *Template) Version() string {
	w := t.wire()
	w.Name, w.CreatedAt, w.Version = "", time.Time{}, ""
	b, err := receipt.Canonical(w)
	if err != nil {
		// A wire of strings, numbers and lists always encodes.
		panic(fmt.Sprintf("templates: encoding a template: %v", err))
	}
	return sha256Hex(append([]byte("airlock-template-v1\n"), b...))
}
