package templates

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
)

// Narrow returns the run spec of t with explicit applied on top. explicit
// holds only what the caller gave: its zero fields are unset and come from
// the template. A limit or output size may be lowered, the artifact types
// reduced to a subset, hosts and credential routes removed from the
// egress, and the output directory turned off; raising any of them,
// adding a host or a credential route, or giving another image,
// isolation mode, output directory or seccomp profile, is refused with an
// error wrapping
// errdefs.ErrInvalidArgument that names every such field. Env entries are
// added to the template's (a later one for the same name wins). The
// command, stdin, inputs, input limit, working directory, artifact
// delivery, job id and expected stdout are explicit's own.
func (t *Template) Narrow(explicit runner.Spec) (runner.Spec, error) {
	s := t.Spec()
	var errs []error
	refuse := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", errdefs.ErrInvalidArgument, t.widens(field, fmt.Sprintf(format, args...))))
	}

	if explicit.Image != "" {
		if ref, err := images.ParseRef(explicit.Image); err != nil {
			errs = append(errs, fmt.Errorf("%w: image: %w", errdefs.ErrInvalidArgument, err))
		} else if want, _ := images.ParseRef(t.Image); ref.ID != want.ID {
			refuse("image", "image %s is not template %q's image %s", explicit.Image, t.Name, t.Image)
		}
	}
	if m := explicit.Policy.Isolation; m != "" && m != t.Isolation {
		refuse("isolation", "isolation %s is not template %q's %s", m, t.Name, t.Isolation)
	}
	if explicit.Policy.Seccomp != nil {
		refuse("seccomp profile", "a compiled seccomp profile cannot replace template %q's", t.Name)
	}
	if p := explicit.SeccompProfile; p != "" {
		raw, err := os.ReadFile(p)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: seccomp profile: %v", errdefs.ErrNotFound, err))
		case sha256Hex(raw) != t.SeccompSHA256:
			refuse("seccomp profile", "seccomp profile %s (sha256 %s) is not template %q's (%s)", p, sha256Hex(raw), t.Name, cmp.Or(t.SeccompSHA256, "airlock's default"))
		}
	}
	// Identity fields the template leaves to airlock's defaults stay the
	// caller's (they never widen: uid 0 is refused by the policy itself).
	s.Policy.UID, s.Policy.GID, s.Policy.Hostname = explicit.Policy.UID, explicit.Policy.GID, explicit.Policy.Hostname

	l, el := &s.Policy.Limits, explicit.Policy.Limits
	narrowDuration(refuse, t.Name, "timeout", el.Timeout, &l.Timeout)
	narrowBytes(refuse, t.Name, "memory", el.Memory, &l.Memory)
	narrowNumber(refuse, t.Name, "cpus", el.CPUs, &l.CPUs, func(v units.MilliCPUs) string { return v.String() })
	narrowNumber(refuse, t.Name, "pids", el.Pids, &l.Pids, func(v int64) string { return fmt.Sprint(v) })
	narrowBytes(refuse, t.Name, "output_limit", el.Output, &l.Output)
	narrowBytes(refuse, t.Name, "tmp_size", el.Tmp, &l.Tmp)
	narrowBytes(refuse, t.Name, "file_size", el.FileSize, &l.FileSize)
	narrowNumber(refuse, t.Name, "open_files", el.OpenFiles, &l.OpenFiles, func(v int64) string { return fmt.Sprint(v) })

	// Egress narrows by its own rules: hosts and credentials may be
	// removed, never added (package egress words each refusal). An empty
	// list is not given: wire.Parse refuses an empty list given, which
	// would otherwise keep the template's whole egress here.
	if ee := explicit.Policy.Egress; !ee.Allow.Empty() {
		if a, err := t.Egress.Allow.Narrow(ee.Allow); err != nil {
			errs = append(errs, fmt.Errorf("template %q: %w", t.Name, err))
		} else {
			s.Policy.Egress.Allow = a
		}
	}
	if ec := explicit.Policy.Egress.Credentials; len(ec) > 0 {
		if c, err := egress.NarrowCredentials(t.Egress.Credentials, ec); err != nil {
			errs = append(errs, fmt.Errorf("template %q: %w", t.Name, err))
		} else {
			s.Policy.Egress.Credentials = slices.Clone(c)
		}
	}
	if eb := explicit.Policy.Egress.Bytes; eb != 0 {
		if !t.Egress.On() {
			refuse("egress_limit", "template %q has no egress, so egress_limit cannot be given", t.Name)
		} else {
			have := cmp.Or(t.Egress.Bytes, isolation.DefaultEgressBytes)
			narrowBytes(refuse, t.Name, "egress_limit", eb, &have)
			s.Policy.Egress.Bytes = have
		}
	}

	eo, o := explicit.Output, &s.Output
	switch {
	case eo.Disabled:
		// No output directory at all is the narrowest there is.
		*o = runner.Output{Disabled: true}
	case t.Output.Disabled:
		if eo.Dir != "" || eo.Size != 0 || eo.Files != 0 || eo.MaxFileSize != 0 || eo.Types != nil {
			refuse("out_dir", "template %q has no output directory, so out_dir, out_limit, out_files, artifact_max_size and artifact_types cannot be given", t.Name)
		}
	default:
		if eo.Dir != "" && eo.Dir != o.Dir {
			refuse("out_dir", "out_dir %s is not template %q's %s", eo.Dir, t.Name, o.Dir)
		}
		narrowBytes(refuse, t.Name, "out_limit", eo.Size, &o.Size)
		narrowNumber(refuse, t.Name, "out_files", eo.Files, &o.Files, func(v int) string { return fmt.Sprint(v) })
		narrowBytes(refuse, t.Name, "artifact_max_size", eo.MaxFileSize, &o.MaxFileSize)
		o.MaxFileSize = min(o.MaxFileSize, o.Size)
		if eo.Types != nil {
			var extra []string
			for _, ty := range eo.Types {
				if !slices.Contains(o.Types, ty) {
					extra = append(extra, ty)
				}
			}
			if len(extra) > 0 {
				refuse("artifact_types", "artifact_types %s are not among template %q's (%s)", strings.Join(extra, ","), t.Name, strings.Join(o.Types, ","))
			} else {
				o.Types = slices.Clone(eo.Types)
			}
		}
	}
	// Where accepted and rejected files go on the host is the job's; with
	// no output directory there is nothing to deliver, which is said, not
	// ignored.
	if !o.Disabled {
		o.Artifacts, o.Quarantine, o.AllowDotfiles = eo.Artifacts, eo.Quarantine, eo.AllowDotfiles
	} else if eo.Artifacts != "" || eo.Quarantine != "" {
		errs = append(errs, fmt.Errorf("%w: artifacts and quarantine need an output directory, and this run on template %q has none", errdefs.ErrInvalidArgument, t.Name))
	}

	s.Env = mergeEnv(s.Env, explicit.Env)
	if explicit.Workdir != "" {
		s.Workdir = explicit.Workdir
	}
	s.Argv, s.Stdin, s.Stdout, s.Stderr = explicit.Argv, explicit.Stdin, explicit.Stdout, explicit.Stderr
	s.Inputs, s.InputLimit = explicit.Inputs, explicit.InputLimit
	s.JobID, s.ExpectedStdout = explicit.JobID, explicit.ExpectedStdout
	if err := errors.Join(errs...); err != nil {
		return runner.Spec{}, err
	}
	return s, nil
}

// NarrowSandbox is Narrow for a long-lived sandbox: the idle timeout, TTL,
// workspace size, labels and download types are explicit's own. A
// sandbox's working directory is its workspace, so the template's workdir
// does not apply.
func (t *Template) NarrowSandbox(explicit runner.SandboxSpec) (runner.SandboxSpec, error) {
	s, err := t.Narrow(runner.Spec{
		Image: explicit.Image, Env: explicit.Env, Policy: explicit.Policy,
		SeccompProfile: explicit.SeccompProfile, Output: explicit.Output,
	})
	if err != nil {
		return runner.SandboxSpec{}, err
	}
	out := explicit
	out.Image, out.Env, out.Policy, out.SeccompProfile, out.Output = s.Image, s.Env, s.Policy, s.SeccompProfile, s.Output
	// Restored from the template's snapshot, which the engine uses only
	// under the template's exact policy.
	out.Snapshot = t.Snapshot
	return out, nil
}

// EngineFor returns the engine a run on t uses when the caller asked for
// explicit ("" or "auto": the template's). A template on "auto" takes any
// engine; one on "oci" or "docker" refuses the other.
func (t *Template) EngineFor(explicit string) (string, error) {
	switch explicit {
	case "", EngineAuto:
		return t.Engine, nil
	case EngineOCI, EngineDocker:
	default:
		return "", fmt.Errorf("%w: engine %q: use auto, oci or docker", errdefs.ErrInvalidArgument, explicit)
	}
	if t.Engine == EngineAuto || t.Engine == explicit {
		return explicit, nil
	}
	return "", fmt.Errorf("%w: %s", errdefs.ErrInvalidArgument, t.widens("engine", fmt.Sprintf("engine %s is not template %q's %s", explicit, t.Name, t.Engine)))
}

// widens words a refusal: what was asked, and what to do instead.
func (t *Template) widens(field, what string) string {
	return fmt.Sprintf("%s: a template's settings may narrow it, never widen or change it; leave %s out to take the template's, or create another template (`airlock template create`) for more", what, field)
}

type refuser func(field, format string, args ...any)

func narrowBytes(refuse refuser, name, field string, want units.Bytes, have *units.Bytes) {
	narrowNumber(refuse, name, field, want, have, func(v units.Bytes) string { return v.String() })
}

func narrowDuration(refuse refuser, name, field string, want time.Duration, have *time.Duration) {
	narrowNumber(refuse, name, field, want, have, func(v time.Duration) string { return v.String() })
}

// narrowNumber lowers *have to want, or refuses a want above it; a zero
// want is unset.
func narrowNumber[T cmp.Ordered](refuse refuser, name, field string, want T, have *T, show func(T) string) {
	var zero T
	switch {
	case want == zero:
	case want > *have:
		refuse(field, "%s %s is above template %q's %s", field, show(want), name, show(*have))
	default:
		*have = want
	}
}

// mergeEnv returns base with extra on top: an entry of extra replaces
// base's entry of the same name.
func mergeEnv(base, extra []string) []string {
	out := slices.Clone(base)
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { n, _, _ := strings.Cut(e, "="); return n == k })
		out = append(out, kv)
	}
	return out
}
