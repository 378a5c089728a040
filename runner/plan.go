package runner

// Planning and validation: a Spec becomes a one-shot sandbox's spec, or
// is refused before anything is created.

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/safeopen"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/seccomp"
	"github.com/airlock-sandbox/airlock/wire"
)

// plan converts a Spec into a one-shot sandbox's spec, refusing anything
// invalid.
func (r *Runner) plan(s Spec) (*engine.SandboxSpec, error) {
	pol := s.Policy.WithDefaults()
	if err := r.ceil.check(asked{Timeout: pol.Limits.Timeout, Memory: pol.Limits.Memory, Tmp: pol.Limits.Tmp, Output: pol.Limits.Output, Egress: pol.Egress.Bytes}); err != nil {
		return nil, err
	}
	if pol.Seccomp == nil {
		prof, err := r.loadSeccomp(s.SeccompProfile, pol.Isolation)
		if err != nil {
			return nil, err
		}
		pol.Seccomp = prof
	}
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := checkCommand(s.Argv, s.Env); err != nil {
		return nil, err
	}
	if err := checkFiles(s); err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	var ref images.Ref
	if s.Image == "" {
		_, def, err := r.Images().Default()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
		}
		ref = def
	} else {
		var err error
		if ref, err = images.ParseRef(s.Image); err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
		}
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &engine.SandboxSpec{
		ID:       id,
		Image:    ref.ID,
		Init:     &engine.Process{Argv: s.Argv, Stdin: s.Stdin},
		Env:      s.Env,
		Policy:   pol,
		Workdir:  s.Workdir,
		Owner:    fmt.Sprintf("%s/%d", host, os.Getpid()),
		Deadline: deadline(time.Now(), pol.Limits.Timeout),
	}, nil
}

// deadline is when a run of timeout started at now is overdue: a minute
// after its timeout. Validate caps the timeout; the sum saturates all the
// same, so that no timeout puts the deadline in the past.
func deadline(now time.Time, timeout time.Duration) time.Time {
	return now.Add(min(timeout, math.MaxInt64-time.Minute) + time.Minute)
}

func checkArgv(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("%w: no command given: put it after `--`, for example `airlock run -- python3 -c 'print(1)'`", errdefs.ErrInvalidArgument)
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%w: argument %q contains a NUL byte", errdefs.ErrInvalidArgument, a)
		}
	}
	return nil
}

// The bounds of a command's argv and env, the kernel's own for execve(2)
// with the default 8 MiB stack: a string of at most 128 KiB, 2 MiB in
// all. A command past them could never start; it is refused up front,
// saying so, rather than failing in the sandbox with E2BIG.
const (
	maxArgString = 128 << 10
	maxArgBytes  = 2 << 20
)

// checkCommand validates a command's argv and env, each and together.
func checkCommand(argv, env []string) error {
	if err := checkArgv(argv); err != nil {
		return err
	}
	if err := checkEnv(env); err != nil {
		return err
	}
	if len(env) > wire.MaxEnv {
		return fmt.Errorf("%w: %d environment entries; give at most %d", errdefs.ErrInvalidArgument, len(env), wire.MaxEnv)
	}
	total := 0
	for _, s := range slices.Concat(argv, env) {
		if len(s) > maxArgString {
			return fmt.Errorf("%w: an argument or environment entry of %d bytes (starting %.40q); a program takes at most %d KiB in one (the kernel's MAX_ARG_STRLEN): pass large data as stdin or an input file", errdefs.ErrInvalidArgument, len(s), s, maxArgString>>10)
		}
		total += len(s) + 1 + 8 // the string, its NUL and its pointer
	}
	if total > maxArgBytes {
		return fmt.Errorf("%w: the command's arguments and environment take %d bytes; a program takes at most %d MiB of them (the kernel's ARG_MAX): pass large data as stdin or an input file", errdefs.ErrInvalidArgument, total, maxArgBytes>>20)
	}
	return nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkEnv(env []string) error {
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("%w: environment entry %q must be NAME=VALUE, with NAME made of letters, digits and '_'", errdefs.ErrInvalidArgument, kv)
		}
	}
	return nil
}

// newID returns a run ID: 20 random hex digits. IDs are never reused.
func newID() (string, error) {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("%w: generating a run id: %v", errdefs.ErrInternal, err)
	}
	return hex.EncodeToString(b[:]), nil
}

// NewSandboxID returns a new sandbox id: "sb-" and a run ID, the form of
// every sandbox airlock names, local or on a cluster (where it is also a
// valid Kubernetes name).
func NewSandboxID() (string, error) {
	id, err := newID()
	return "sb-" + id, err
}

// MaxInputs caps the inputs of one run (or batch job): each is a mount
// and a staging walk, and no real run needs more; a tree goes in as one
// directory input.
const MaxInputs = 1024

// checkFiles validates inputs, the working directory and the output
// directory: sandbox paths must be absolute, clean, off the system's
// directories, and distinct.
func checkFiles(s Spec) error {
	if len(s.Inputs) > MaxInputs {
		return fmt.Errorf("%d inputs: a run takes at most %d; pass a directory holding them as one input", len(s.Inputs), MaxInputs)
	}
	var claims []sandboxClaim
	if !s.Output.Disabled {
		if err := checkSandboxPath(s.Output.Dir); err != nil {
			return fmt.Errorf("the output directory: %w", err)
		}
		if s.Output.Size < 1<<20 || s.Output.Files < 1 || s.Output.MaxFileSize < 1 {
			return fmt.Errorf("the output directory needs at least 1MiB and 1 file")
		}
		if s.Output.Files > wire.MaxOutFiles {
			return fmt.Errorf("the output directory's file cap (out_files, --out-files) %d: give at most %d", s.Output.Files, wire.MaxOutFiles)
		}
		claims = append(claims, sandboxClaim{s.Output.Dir, "the output directory"})
	}
	for _, in := range s.Inputs {
		if in.Host == "" {
			return fmt.Errorf("an input needs a host path")
		}
		if err := checkSandboxPath(in.Sandbox); err != nil {
			return fmt.Errorf("input %s: %w", in.Host, err)
		}
		claims = append(claims, sandboxClaim{in.Sandbox, "input " + in.Host})
	}
	if err := checkOverlaps(claims); err != nil {
		return err
	}
	if s.Workdir != "" {
		if err := isolation.CheckWorkdir(s.Workdir); err != nil {
			return err
		}
	}
	if s.InputLimit < 0 {
		return fmt.Errorf("input limit must be positive")
	}
	return nil
}

// sandboxClaim is a sandbox path a run mounts something at, and what.
type sandboxClaim struct{ path, what string }

// checkOverlaps refuses two claims of one path, or of a path and one
// beneath it, in O(n log n): sorted with '/' below every other byte, a
// path's descendants follow it at once ("/a", "/a/b", "/a-b"), so only
// neighbours need comparing. Of an overlapping pair, the one claimed
// later is named first, as the claims were given.
func checkOverlaps(claims []sandboxClaim) error {
	order := make([]int, len(claims))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return comparePaths(claims[a].path, claims[b].path) })
	for k := 1; k < len(order); k++ {
		i, j := order[k-1], order[k]
		p, q := claims[i].path, claims[j].path
		if p == q || strings.HasPrefix(q, p+"/") {
			if i > j {
				i, j = j, i
			}
			return fmt.Errorf("%s at %s overlaps %s at %s", claims[j].what, claims[j].path, claims[i].what, claims[i].path)
		}
	}
	return nil
}

// comparePaths orders paths byte by byte, but with '/' before every other
// byte, so that a directory's descendants sort right after it.
func comparePaths(a, b string) int {
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		switch {
		case x == y:
			continue
		case x == '/':
			return -1
		case y == '/':
			return 1
		}
		return cmp.Compare(x, y)
	}
	return cmp.Compare(len(a), len(b))
}

// loadSeccomp reads and compiles the named profile file, or airlock's
// default. A profile that cannot be applied is an error, never skipped.
func (r *Runner) loadSeccomp(file string, mode isolation.Mode) (*isolation.SeccompProfile, error) {
	var raw []byte
	var err error
	if file != "" {
		if raw, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("%w: seccomp profile: %v", errdefs.ErrNotFound, err)
		}
	}
	cache := r.seccompCacheFile(raw, mode)
	if prof := readCachedProfile(cache); prof != nil {
		return prof, nil
	}
	p, err := Profile(raw, mode)
	switch {
	case errors.Is(err, seccomp.ErrNotSupported):
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	case err != nil:
		return nil, fmt.Errorf("%w: seccomp profile %s: %v", errdefs.ErrInvalidArgument, cmp.Or(file, "default"), err)
	}
	prof := &isolation.SeccompProfile{JSON: p.Bytes(), Spec: p.Spec(), SHA256: p.SHA256()}
	writeCachedProfile(cache, prof)
	return prof, nil
}

// Profile is the seccomp profile a run in mode applies: raw (a custom
// profile, which may only narrow the default), or airlock's default when
// raw is nil; for gVisor, its runsc variant; compiled, so that a profile
// that cannot be applied fails here (seccomp.ErrNotSupported without
// cgo).
func Profile(raw []byte, mode isolation.Mode) (*seccomp.Profile, error) {
	var p *seccomp.Profile
	var err error
	if raw == nil {
		p, err = seccomp.Load("default")
	} else {
		p, err = seccomp.ParseCustom(raw)
	}
	if err == nil && mode == isolation.GVisor {
		p, err = seccomp.ForGVisor(p)
	}
	if err == nil {
		err = seccomp.Validate(p)
	}
	return p, err
}

// checkDestinations opens the artifact and quarantine directories before
// anything runs, so an unsafe one (a planted symlink, another user's
// directory) is refused as input, not found after the program ran.
func checkDestinations(o Output) error {
	for _, d := range []struct{ flag, path string }{{"--artifacts", o.Artifacts}, {"--quarantine", o.Quarantine}} {
		if d.path == "" || o.Disabled {
			continue
		}
		f, err := safeopen.Dir(d.path)
		if err != nil {
			if errors.Is(err, safeopen.ErrUnsafe) {
				return fmt.Errorf("%w: %s: %w", errdefs.ErrInvalidArgument, d.flag, err)
			}
			return fmt.Errorf("%w: %s: %w", errdefs.ErrUnavailable, d.flag, err)
		}
		f.Close()
	}
	return nil
}
