//go:build linux && cgo

package seccomp

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

// pseudoBase: libseccomp resolves a name an architecture lacks to a pseudo
// number at or below it. Numbers from -100 to -299 are calls that exist but
// are multiplexed through socketcall or ipc (32-bit x86).
const pseudoBase = -10000

// Filter is a compiled profile. Release frees it.
type Filter struct {
	f *libseccomp.ScmpFilter
}

// Compile builds a libseccomp filter for every architecture p applies to on
// this host, and only those: any other architecture's syscalls are killed.
// Rules whose action is the default one are left out, as runc does; they
// document denials. A name that an architecture lacks is skipped for it; a
// name that none of the profile's architectures has is an error.
func Compile(p *Profile) (*Filter, error) {
	if p == nil || len(p.spec.Architectures) == 0 {
		return nil, fmt.Errorf("%w: no profile or no architectures", ErrInvalid)
	}
	def, err := scmpAction(p.spec.DefaultAction, p.spec.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	sf, err := libseccomp.NewFilter(def)
	if err != nil {
		return nil, fmt.Errorf("creating seccomp filter: %w", err)
	}
	done := false
	defer func() {
		if !done {
			sf.Release()
		}
	}()
	if err := addArches(sf, p.spec.Architectures); err != nil {
		return nil, err
	}
	for i, r := range p.spec.Syscalls {
		act, err := scmpAction(r.Action, r.ErrnoRet)
		if err != nil {
			return nil, fmt.Errorf("syscalls[%d]: %w", i, err)
		}
		conds, err := scmpConds(r.Args)
		if err != nil {
			return nil, fmt.Errorf("syscalls[%d]: %w", i, err)
		}
		for _, name := range r.Names {
			if !slices.ContainsFunc(p.arches, func(a specs.Arch) bool { return onArch(name, a) }) {
				return nil, fmt.Errorf("%w: syscalls[%d]: %q is not a syscall on %v for libseccomp %s", ErrInvalid, i, name, p.arches, libVersion())
			}
			if act == def {
				continue // libseccomp refuses a rule that repeats the default
			}
			call, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				return nil, fmt.Errorf("%w: syscalls[%d]: resolving %q: %v", ErrInvalid, i, name, err)
			}
			if err := sf.AddRuleConditional(call, act, conds); err != nil {
				return nil, fmt.Errorf("%w: syscalls[%d]: adding %q: %v", ErrInvalid, i, name, err)
			}
		}
	}
	done = true
	return &Filter{f: sf}, nil
}

// addArches makes the filter cover exactly arches. A new filter covers the
// native architecture, which is removed if arches lacks it.
func addArches(sf *libseccomp.ScmpFilter, arches []specs.Arch) error {
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return fmt.Errorf("finding the native seccomp architecture: %w", err)
	}
	keepNative := false
	for _, a := range arches {
		sa, err := scmpArch(a)
		if err != nil {
			return err
		}
		if sa == native {
			keepNative = true
			continue
		}
		if err := sf.AddArch(sa); err != nil {
			return fmt.Errorf("%w: adding architecture %s: %v", ErrInvalid, a, err)
		}
	}
	if !keepNative {
		if err := sf.RemoveArch(native); err != nil {
			return fmt.Errorf("removing native architecture %s: %w", native, err)
		}
	}
	return nil
}

// ExportBPF writes the filter as the kernel loads it: one BPF program for
// all of its architectures.
func (f *Filter) ExportBPF(w io.Writer) error {
	if file, ok := w.(*os.File); ok {
		return f.f.ExportBPF(file)
	}
	// libseccomp writes to a descriptor only.
	r, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("exporting BPF: %w", err)
	}
	defer r.Close()
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, r)
		io.Copy(io.Discard, r) // keep draining if w failed, so the export ends
		copied <- err
	}()
	err = f.f.ExportBPF(pw)
	pw.Close()
	if cerr := <-copied; err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("exporting BPF: %w", err)
	}
	return nil
}

// Load installs the filter into the calling process: with TSYNC, on every
// thread. It is for tests; in a sandbox the runtime installs the profile.
// It refuses a libseccomp or kernel that cannot synchronise threads, as the
// filter would then cover one thread only.
func (f *Filter) Load() error {
	api, err := libseccomp.GetAPI()
	if err != nil {
		return fmt.Errorf("loading seccomp filter: %w", err)
	}
	if api < 2 {
		return fmt.Errorf("loading seccomp filter: libseccomp API level %d lacks TSYNC: %w", api, ErrNotSupported)
	}
	if err := f.f.Load(); err != nil {
		return fmt.Errorf("loading seccomp filter: %w", err)
	}
	return nil
}

// Release frees the filter. It is safe to call more than once.
func (f *Filter) Release() { f.f.Release() }

func scmpArch(a specs.Arch) (libseccomp.ScmpArch, error) {
	sa, err := libseccomp.GetArchFromString(strings.ToLower(strings.TrimPrefix(string(a), "SCMP_ARCH_")))
	if err != nil {
		return libseccomp.ArchInvalid, fmt.Errorf("%w: architecture %q: %v", ErrInvalid, a, err)
	}
	return sa, nil
}

func scmpAction(a specs.LinuxSeccompAction, errno *uint) (libseccomp.ScmpAction, error) {
	ret := int16(1) // EPERM, as runc
	if errno != nil {
		if *errno > maxErrno {
			return libseccomp.ActInvalid, fmt.Errorf("%w: errnoRet %d is over %d", ErrInvalid, *errno, maxErrno)
		}
		ret = int16(*errno)
	}
	switch a {
	case specs.ActKill, specs.ActKillThread:
		return libseccomp.ActKillThread, nil
	case specs.ActKillProcess:
		return libseccomp.ActKillProcess, nil
	case specs.ActTrap:
		return libseccomp.ActTrap, nil
	case specs.ActErrno:
		return libseccomp.ActErrno.SetReturnCode(ret), nil
	case specs.ActTrace:
		return libseccomp.ActTrace.SetReturnCode(ret), nil
	case specs.ActAllow:
		return libseccomp.ActAllow, nil
	case specs.ActLog:
		return libseccomp.ActLog, nil
	}
	return libseccomp.ActInvalid, fmt.Errorf("%w: unsupported action %q", ErrInvalid, a)
}

var compareOps = map[specs.LinuxSeccompOperator]libseccomp.ScmpCompareOp{
	specs.OpNotEqual:     libseccomp.CompareNotEqual,
	specs.OpLessThan:     libseccomp.CompareLess,
	specs.OpLessEqual:    libseccomp.CompareLessOrEqual,
	specs.OpEqualTo:      libseccomp.CompareEqual,
	specs.OpGreaterEqual: libseccomp.CompareGreaterEqual,
	specs.OpGreaterThan:  libseccomp.CompareGreater,
	specs.OpMaskedEqual:  libseccomp.CompareMaskedEqual,
}

// scmpConds converts argument checks. For SCMP_CMP_MASKED_EQ, value is the
// mask and valueTwo the value the masked argument must equal.
func scmpConds(args []specs.LinuxSeccompArg) ([]libseccomp.ScmpCondition, error) {
	var conds []libseccomp.ScmpCondition
	for _, a := range args {
		op, ok := compareOps[a.Op]
		if !ok {
			return nil, fmt.Errorf("%w: unknown operator %q", ErrInvalid, a.Op)
		}
		values := []uint64{a.Value}
		if a.Op == specs.OpMaskedEqual {
			values = append(values, a.ValueTwo)
		}
		c, err := libseccomp.MakeCondition(a.Index, op, values...)
		if err != nil {
			return nil, fmt.Errorf("%w: argument %d: %v", ErrInvalid, a.Index, err)
		}
		conds = append(conds, c)
	}
	return conds, nil
}

// onArch reports whether arch has the syscall name, directly or through a
// multiplexer.
func onArch(name string, arch specs.Arch) bool {
	_, ok := syscallNumber(name, arch)
	return ok
}

// syscallNumber is name's number on arch, if arch has it (directly or
// through a multiplexer, as onArch).
func syscallNumber(name string, arch specs.Arch) (int32, bool) {
	sa, err := scmpArch(arch)
	if err != nil {
		return 0, false
	}
	n, err := libseccomp.GetSyscallFromNameByArch(name, sa)
	if err != nil || int32(n) <= pseudoBase {
		return 0, false
	}
	return int32(n), true
}

// LibVersion is the version of the libseccomp this binary runs with.
func LibVersion() string { return libVersion() }

func libVersion() string {
	major, minor, micro := libseccomp.GetLibraryVersion()
	return fmt.Sprintf("%d.%d.%d", major, minor, micro)
}
