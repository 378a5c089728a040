package seccomp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"path"
	"runtime"
	"slices"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	seccompprofiles "github.com/airlock-sandbox/airlock/seccomp-profiles"
)

var (
	// ErrInvalid marks a profile that cannot be used as written.
	ErrInvalid = errors.New("invalid seccomp profile")
	// ErrNotSupported is returned where a profile would have to be compiled
	// by a binary built without cgo or libseccomp.
	ErrNotSupported = errors.New("seccomp isolation needs airlock built with cgo and libseccomp")
)

// maxErrno is the largest errno a filter can return (the kernel's MAX_ERRNO).
const maxErrno = 4095

// Profile is a parsed, converted and compiled-once seccomp profile. It is
// immutable; Spec returns a copy.
type Profile struct {
	name   string
	spec   specs.LinuxSeccomp
	arches []specs.Arch // every architecture the file names, host or not
	raw    []byte
	sum    string
}

// Name is the built-in profile's name, or "" for one given to Parse.
func (p *Profile) Name() string { return p.name }

// SHA256 is the hex digest of the profile's bytes as read.
func (p *Profile) SHA256() string { return p.sum }

// Bytes returns a copy of the profile as read.
func (p *Profile) Bytes() []byte { return bytes.Clone(p.raw) }

// Spec returns a copy of the profile as a runtime-spec seccomp section, with
// the architectures for the host the profile was parsed on.
func (p *Profile) Spec() *specs.LinuxSeccomp {
	s := p.spec
	s.DefaultErrnoRet = cloneUint(s.DefaultErrnoRet)
	s.Architectures = slices.Clone(s.Architectures)
	s.Syscalls = make([]specs.LinuxSyscall, len(p.spec.Syscalls))
	for i, r := range p.spec.Syscalls {
		s.Syscalls[i] = specs.LinuxSyscall{
			Names:    slices.Clone(r.Names),
			Action:   r.Action,
			ErrnoRet: cloneUint(r.ErrnoRet),
			Args:     slices.Clone(r.Args),
		}
	}
	return &s
}

func cloneUint(u *uint) *uint {
	if u == nil {
		return nil
	}
	return new(*u)
}

// Names lists the built-in profiles, sorted.
func Names() []string {
	var names []string
	files, _ := fs.Glob(seccompprofiles.FS, "*.json")
	for _, f := range files {
		names = append(names, strings.TrimSuffix(f, ".json"))
	}
	slices.Sort(names)
	return names
}

// Load parses the built-in profile name, such as "default".
func Load(name string) (*Profile, error) {
	file := name + ".json"
	if name == "" || path.Base(file) != file || !fs.ValidPath(file) {
		return nil, fmt.Errorf("%w: bad profile name %q", ErrInvalid, name)
	}
	b, err := fs.ReadFile(seccompprofiles.FS, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no built-in profile %q (there are: %s)", ErrInvalid, name, strings.Join(Names(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("reading built-in profile %q: %w", name, err)
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("loading built-in profile %q: %w", name, err)
	}
	p.name = name
	return p, nil
}

// Parse reads a profile in moby's JSON format, converts it and compiles it
// once for the host's architectures. An archMap entry is chosen by the
// host's architecture.
func Parse(b []byte) (*Profile, error) {
	host, ok := goArches[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("%w: no seccomp architecture for GOARCH %q", ErrNotSupported, runtime.GOARCH)
	}
	return parse(b, host)
}

// SpecOf converts b as Parse does, but without compiling it (nor the checks
// the compile makes, such as syscall names): for bytes that compiled before,
// such as a cached profile's, so that the spec a runtime gets is always
// derived from the bytes whose hash is recorded. Without libseccomp it
// returns ErrNotSupported.
func SpecOf(b []byte) (*specs.LinuxSeccomp, error) {
	host, ok := goArches[runtime.GOARCH]
	if !ok || LibVersion() == "" {
		return nil, fmt.Errorf("%w: no seccomp architecture for GOARCH %q, or no libseccomp", ErrNotSupported, runtime.GOARCH)
	}
	p, err := decode(b, host)
	if err != nil {
		return nil, err
	}
	return p.Spec(), nil
}

func parse(b []byte, host specs.Arch) (*Profile, error) {
	p, err := decode(b, host)
	if err != nil {
		return nil, err
	}
	if err := Validate(p); err != nil {
		return nil, err
	}
	return p, nil
}

// decode reads and converts b, without compiling it.
func decode(b []byte, host specs.Arch) (*Profile, error) {
	var f fileProfile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: decoding JSON: %v", ErrInvalid, err)
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the profile's JSON object", ErrInvalid)
	}
	spec, arches, err := convert(f, host)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return &Profile{spec: spec, arches: arches, raw: bytes.Clone(b), sum: hex.EncodeToString(sum[:])}, nil
}

// Validate compiles p and throws the filter away, so that a profile that
// libseccomp refuses is caught before anything is created.
func Validate(p *Profile) error {
	f, err := Compile(p)
	if err != nil {
		return err
	}
	f.Release()
	return nil
}

// Syscalls lists, sorted, the syscalls that p allows (with any action but
// ERRNO, KILL or TRAP, with or without argument checks) on arch, such as
// "SCMP_ARCH_X86_64": only names that arch has, and nil if p does not apply
// to arch. Without libseccomp it returns nil.
func Syscalls(p *Profile, arch string) []string {
	a := specs.Arch(arch)
	if p == nil || !slices.Contains(p.spec.Architectures, a) {
		return nil
	}
	set := map[string]bool{}
	for _, r := range p.spec.Syscalls {
		if denies[r.Action] {
			continue
		}
		for _, n := range r.Names {
			if onArch(n, a) {
				set[n] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// fileProfile is moby's profile format, less includes and excludes: a group
// that applied only to some capabilities or kernels would be silently
// dropped or kept, so such files are refused instead.
type fileProfile struct {
	DefaultAction   specs.LinuxSeccompAction `json:"defaultAction"`
	DefaultErrnoRet *uint                    `json:"defaultErrnoRet"`
	Architectures   []specs.Arch             `json:"architectures"`
	ArchMap         []fileArchMap            `json:"archMap"`
	Syscalls        []fileSyscall            `json:"syscalls"`
}

type fileArchMap struct {
	Arch      specs.Arch   `json:"architecture"`
	SubArches []specs.Arch `json:"subArchitectures"`
}

type fileSyscall struct {
	Names    []string                 `json:"names"`
	Action   specs.LinuxSeccompAction `json:"action"`
	ErrnoRet *uint                    `json:"errnoRet"`
	Args     []specs.LinuxSeccompArg  `json:"args"`
	Comment  string                   `json:"comment"`
}

var (
	actions = []specs.LinuxSeccompAction{
		specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap,
		specs.ActErrno, specs.ActTrace, specs.ActAllow, specs.ActLog,
	}
	// denies are the actions under which the call does not run.
	denies = map[specs.LinuxSeccompAction]bool{
		specs.ActKill: true, specs.ActKillProcess: true, specs.ActKillThread: true,
		specs.ActTrap: true, specs.ActErrno: true,
	}
	operators = []specs.LinuxSeccompOperator{
		specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
		specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual,
	}
	arches = []specs.Arch{
		specs.ArchX86, specs.ArchX86_64, specs.ArchX32, specs.ArchARM, specs.ArchAARCH64,
		specs.ArchMIPS, specs.ArchMIPS64, specs.ArchMIPS64N32, specs.ArchMIPSEL,
		specs.ArchMIPSEL64, specs.ArchMIPSEL64N32, specs.ArchPPC, specs.ArchPPC64,
		specs.ArchPPC64LE, specs.ArchS390, specs.ArchS390X, specs.ArchPARISC,
		specs.ArchPARISC64, specs.ArchRISCV64, specs.ArchLOONGARCH64, specs.ArchM68K,
		specs.ArchSH, specs.ArchSHEB,
	}
	// arches32 are those libseccomp compiles with 32-bit arguments: it
	// compares only an argument's low 32 bits there (x32 included).
	arches32 = map[specs.Arch]bool{
		specs.ArchX86: true, specs.ArchX32: true, specs.ArchARM: true,
		specs.ArchMIPS: true, specs.ArchMIPSEL: true, specs.ArchMIPS64N32: true,
		specs.ArchMIPSEL64N32: true, specs.ArchPPC: true, specs.ArchS390: true,
		specs.ArchPARISC: true, specs.ArchM68K: true, specs.ArchSH: true, specs.ArchSHEB: true,
	}
	// goArches maps GOARCH to the architecture an archMap entry names.
	goArches = map[string]specs.Arch{
		"386": specs.ArchX86, "amd64": specs.ArchX86_64, "arm": specs.ArchARM,
		"arm64": specs.ArchAARCH64, "loong64": specs.ArchLOONGARCH64,
		"mips": specs.ArchMIPS, "mipsle": specs.ArchMIPSEL, "mips64": specs.ArchMIPS64,
		"mips64le": specs.ArchMIPSEL64, "ppc64": specs.ArchPPC64, "ppc64le": specs.ArchPPC64LE,
		"riscv64": specs.ArchRISCV64, "s390x": specs.ArchS390X,
	}
)

// convert checks f and turns it into a runtime-spec section for host. It
// also returns every architecture f names, against which syscall names are
// checked.
func convert(f fileProfile, host specs.Arch) (specs.LinuxSeccomp, []specs.Arch, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	s := specs.LinuxSeccomp{DefaultAction: f.DefaultAction, DefaultErrnoRet: cloneUint(f.DefaultErrnoRet)}
	if msg := checkAction(f.DefaultAction, f.DefaultErrnoRet); msg != "" {
		bad("defaultAction: %s", msg)
	}

	var declared []specs.Arch
	declare := func(a specs.Arch) {
		if !slices.Contains(arches, a) {
			bad("unknown architecture %q", a)
		} else if slices.Contains(declared, a) {
			bad("architecture %q given twice", a)
		}
		declared = append(declared, a)
	}
	switch {
	case len(f.Architectures) > 0 && len(f.ArchMap) > 0:
		bad("both architectures and archMap are given")
	case len(f.Architectures) > 0:
		for _, a := range f.Architectures {
			declare(a)
		}
		s.Architectures = slices.Clone(f.Architectures)
	case len(f.ArchMap) > 0:
		for _, m := range f.ArchMap {
			declare(m.Arch)
			for _, sub := range m.SubArches {
				declare(sub)
			}
			if m.Arch == host {
				s.Architectures = append([]specs.Arch{m.Arch}, m.SubArches...)
			}
		}
		if s.Architectures == nil {
			bad("archMap has no entry for this host's architecture %s", host)
		}
	default:
		bad("no architectures or archMap")
	}

	var narrow []specs.Arch // 32-bit architectures declared
	for _, a := range declared {
		if arches32[a] {
			narrow = append(narrow, a)
		}
	}

	unconditional := map[string]int{} // name → group with a rule without args
	groups := map[string][]int{}      // name → every group naming it
	for i, g := range f.Syscalls {
		if len(g.Names) == 0 {
			bad("syscalls[%d]: no names", i)
		}
		for _, n := range g.Names {
			if n == "" {
				bad("syscalls[%d]: empty name", i)
				continue
			}
			if slices.Contains(groups[n], i) {
				bad("syscalls[%d]: %q given twice", i, n)
				continue
			}
			groups[n] = append(groups[n], i)
			if len(g.Args) == 0 {
				unconditional[n] = i
			}
		}
		if msg := checkAction(g.Action, g.ErrnoRet); msg != "" {
			bad("syscalls[%d]: %s", i, msg)
		}
		seen := map[uint]bool{}
		for _, a := range g.Args {
			switch {
			case a.Index > 5:
				bad("syscalls[%d]: argument index %d (a syscall has 6, from 0)", i, a.Index)
			case seen[a.Index]:
				// runc ORs such conditions, libseccomp ANDs them.
				bad("syscalls[%d]: argument %d compared twice in one rule; use one group per comparison", i, a.Index)
			case !slices.Contains(operators, a.Op):
				bad("syscalls[%d]: unknown operator %q", i, a.Op)
			case a.Op != specs.OpMaskedEqual && a.ValueTwo != 0:
				bad("syscalls[%d]: valueTwo is only for %s", i, specs.OpMaskedEqual)
			default:
				if msg := checkArg(a, narrow); msg != "" {
					bad("syscalls[%d] %v: argument %d: %s", i, g.Names, a.Index, msg)
				}
			}
			seen[a.Index] = true
		}
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{
			Names:    slices.Clone(g.Names),
			Action:   g.Action,
			ErrnoRet: cloneUint(g.ErrnoRet),
			Args:     slices.Clone(g.Args),
		})
	}
	// libseccomp lets a rule without args override every other rule for the
	// same syscall, whatever the order.
	for _, n := range slices.Sorted(maps.Keys(unconditional)) {
		if len(groups[n]) > 1 {
			bad("%q is in groups %v, one of them without args, which would override the others", n, groups[n])
		}
	}
	return s, declared, errors.Join(errs...)
}

// checkArg says what is wrong with an argument condition that libseccomp
// would not compile as written, or "". narrow are the profile's 32-bit
// architectures. Narrows reads a condition as written, so the two must agree.
func checkArg(a specs.LinuxSeccompArg, narrow []specs.Arch) string {
	if a.Op == specs.OpMaskedEqual {
		mask, val := a.Value, a.ValueTwo
		switch {
		case mask == 0:
			return fmt.Sprintf("%s with mask (value) 0 compares nothing, and libseccomp drops it; leave the condition out, or give the bits to compare in value", a.Op)
		case val&^mask != 0:
			// As written it matches nothing; libseccomp skips each 32-bit
			// half whose mask is 0, and the rule would match.
			return fmt.Sprintf("%s valueTwo %#x has bits outside the mask (value) %#x: as written it matches nothing, but libseccomp skips a 32-bit half whose mask is 0 and may let every call through; give a valueTwo within the mask", a.Op, val, mask)
		}
	}
	if len(narrow) > 0 && (a.Value > math.MaxUint32 || a.ValueTwo > math.MaxUint32) {
		return fmt.Sprintf("value %#x or valueTwo %#x is over 32 bits, and on %v libseccomp compares only the low 32 bits, so the rule would mean something else there; keep values under 1<<32, or drop the 32-bit architectures", a.Value, a.ValueTwo, narrow)
	}
	return ""
}

// checkAction says what is wrong with an action and its errno, or "".
func checkAction(a specs.LinuxSeccompAction, errno *uint) string {
	switch {
	case a == specs.ActNotify:
		return "SCMP_ACT_NOTIFY needs a listener, and airlock has none"
	case !slices.Contains(actions, a):
		return fmt.Sprintf("unknown action %q", a)
	case errno != nil && a != specs.ActErrno && a != specs.ActTrace:
		return fmt.Sprintf("errnoRet is only for SCMP_ACT_ERRNO and SCMP_ACT_TRACE, not %s", a)
	case errno != nil && *errno > maxErrno:
		return fmt.Sprintf("errnoRet %d is over %d", *errno, maxErrno)
	}
	return ""
}
