package seccomp

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// ErrWidens is wrapped, beside ErrInvalid, when a profile would allow what
// the profile it must narrow denies.
var ErrWidens = errors.New("it allows what airlock's default denies")

// ParseCustom parses a profile given by a user and refuses it unless it
// narrows the built-in default (see Narrows).
func ParseCustom(b []byte) (*Profile, error) {
	def, err := Load("default")
	if err != nil {
		return nil, err
	}
	p, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if err := Narrows(p, def); err != nil {
		return nil, err
	}
	return p, nil
}

// Narrows returns nil if p allows nothing that ref denies, on any
// architecture and for any arguments; otherwise an error wrapping ErrWidens
// and ErrInvalid that lists what p would add. A call counts as allowed under
// every action but ERRNO, KILL and TRAP (LOG and TRACE run it). Which denial
// p answers with (ERRNO, KILL, another errno) does not matter. ref must deny
// by default, and where it has conditional allow rules for a call it must
// have no deny rule for it (the built-in default is so; a test checks).
//
// Argument conditions are compared one by one: a rule of p is inside ref
// only if some allow rule of ref for the same call has each of its
// conditions implied by a condition of p's rule on the same argument. What
// cannot be proved inside (ranges, most masks) is refused: give the
// default's own conditions, or SCMP_CMP_EQ values they allow.
func Narrows(p, ref *Profile) error {
	if !denies[ref.spec.DefaultAction] {
		return fmt.Errorf("%w: the reference profile does not deny by default", ErrInvalid)
	}
	var problems []string
	widened := map[string]bool{}
	if !denies[p.spec.DefaultAction] {
		// Every call p does not name runs; name what ref denies by rule.
		for _, r := range ref.spec.Syscalls {
			if !denies[r.Action] {
				continue
			}
			for _, n := range r.Names {
				if !deniesAlways(p, n) {
					widened[n] = true
				}
			}
		}
		problems = append(problems, fmt.Sprintf("defaultAction %s runs every call the profile does not name, which the default's %s denies", p.spec.DefaultAction, ref.spec.DefaultAction))
	}
	for _, a := range p.spec.Architectures {
		if !slices.Contains(ref.spec.Architectures, a) {
			problems = append(problems, fmt.Sprintf("architecture %s, which the default does not allow (it allows %v)", a, ref.spec.Architectures))
		}
	}
	if slices.Contains(p.spec.Architectures, specs.ArchX86) {
		for _, mux := range multiplexed {
			if hasConditionalAllow(p, mux.calls) && !deniedByRule(p, mux.name) {
				problems = append(problems, fmt.Sprintf("rules with argument checks on %s and SCMP_ARCH_X86 without a rule denying %s: on 32-bit x86 libseccomp compiles them into %s rules without the checks, allowing every argument; keep the default's %s rule (SCMP_ACT_ERRNO, errnoRet 38), or leave SCMP_ARCH_X86 out",
					mux.calls[0], mux.name, mux.name, mux.name))
			}
		}
	}
	refRules := allowRules(ref)
	for key, rules := range allowRules(p) {
		if !slices.Contains(ref.spec.Architectures, key.arch) {
			continue // reported above
		}
		allowed := refRules[key]
		for _, r := range rules {
			if !slices.ContainsFunc(allowed, func(q rule) bool { return implies(r.args, q.args) }) {
				name := r.name
				if len(allowed) > 0 {
					name += " (with arguments the default denies)"
				}
				widened[name] = true
			}
		}
	}
	if len(widened) > 0 {
		names := slices.SortedFunc(maps.Keys(widened), func(a, b string) int {
			return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
		})
		list := names
		if len(list) > 16 {
			list = append(slices.Clone(list[:16]), "…")
		}
		problems = append(problems, fmt.Sprintf("%d call(s): %s", len(names), strings.Join(list, ", ")))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w: %s; remove them, or start from the default (`airlock seccomp export default > profile.json`) and only take calls away",
		ErrInvalid, ErrWidens, strings.Join(problems, "; "))
}

// headline are the calls a refusal names first, as the ones a reader is
// likeliest to recognise as escapes.
var headline = []string{
	"unshare", "setns", "mount", "ptrace", "bpf", "keyctl", "init_module",
	"kexec_load", "io_uring_setup", "userfaultfd", "perf_event_open",
	"open_by_handle_at",
}

func rank(name string) int {
	name, _, _ = strings.Cut(name, " ")
	if i := slices.Index(headline, name); i >= 0 {
		return i
	}
	return len(headline)
}

// multiplexed are 32-bit x86's multiplexers and the calls libseccomp
// reaches through them there: a rule on one of the calls becomes a rule
// on the multiplexer for that call's number, its argument checks dropped
// (they are behind a pointer), unless the multiplexer has a rule of its
// own.
var multiplexed = []struct {
	name  string
	calls []string
}{
	{"socketcall", []string{"socket", "socketpair", "bind", "connect", "listen", "accept", "accept4",
		"getsockname", "getpeername", "send", "recv", "sendto", "recvfrom", "shutdown",
		"setsockopt", "getsockopt", "sendmsg", "recvmsg", "recvmmsg", "sendmmsg"}},
	{"ipc", []string{"semop", "semget", "semctl", "semtimedop", "msgsnd", "msgrcv", "msgget", "msgctl",
		"shmat", "shmdt", "shmget", "shmctl"}},
}

// hasConditionalAllow reports whether p allows one of calls only for
// some arguments.
func hasConditionalAllow(p *Profile, calls []string) bool {
	return slices.ContainsFunc(p.spec.Syscalls, func(r specs.LinuxSyscall) bool {
		return !denies[r.Action] && len(r.Args) > 0 && slices.ContainsFunc(r.Names, func(n string) bool { return slices.Contains(calls, n) })
	})
}

// deniedByRule reports whether p has a rule denying name whatever its
// arguments.
func deniedByRule(p *Profile, name string) bool {
	return slices.ContainsFunc(p.spec.Syscalls, func(r specs.LinuxSyscall) bool {
		return denies[r.Action] && len(r.Args) == 0 && slices.Contains(r.Names, name)
	})
}

// deniesAlways reports whether p denies the call name whatever its
// arguments: by an unconditional deny rule, or by default if p never names it.
func deniesAlways(p *Profile, name string) bool {
	named := false
	for _, r := range p.spec.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		named = true
		if !denies[r.Action] {
			return false
		}
		if len(r.Args) == 0 {
			return true
		}
	}
	return !named && denies[p.spec.DefaultAction]
}

// callKey is one syscall on one architecture, by number: two names for the
// same number are the same call.
type callKey struct {
	arch specs.Arch
	nr   int32
}

type rule struct {
	name string
	args []specs.LinuxSeccompArg
}

// allowRules lists, per call, every rule of p under which it runs.
func allowRules(p *Profile) map[callKey][]rule {
	out := map[callKey][]rule{}
	for _, r := range p.spec.Syscalls {
		if denies[r.Action] {
			continue
		}
		for _, n := range r.Names {
			for _, a := range p.spec.Architectures {
				if nr, ok := syscallNumber(n, a); ok {
					k := callKey{a, nr}
					out[k] = append(out[k], rule{name: n, args: r.Args})
				}
			}
		}
	}
	return out
}

// implies reports whether every call that satisfies all of have also
// satisfies all of want.
func implies(have, want []specs.LinuxSeccompArg) bool {
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h specs.LinuxSeccompArg) bool { return h.Index == w.Index && condImplies(h, w) }) {
			return false
		}
	}
	return true
}

// condImplies reports whether every argument value that satisfies h also
// satisfies w. It answers false where it cannot tell.
func condImplies(h, w specs.LinuxSeccompArg) bool {
	if h.Op == w.Op && h.Value == w.Value && h.ValueTwo == w.ValueTwo {
		return true
	}
	switch h.Op {
	case specs.OpEqualTo:
		return holds(w, h.Value)
	case specs.OpMaskedEqual:
		mask, val := h.Value, h.ValueTwo
		switch {
		case mask == 0 || val&^mask != 0:
			// convert refuses these, as libseccomp does not compile them
			// as written: reading h as "matches nothing" let rules through.
			return false
		case mask == math.MaxUint64:
			return holds(w, val)
		case w.Op == specs.OpMaskedEqual:
			return w.Value&^mask == 0 && val&w.Value == w.ValueTwo
		}
	case specs.OpLessThan, specs.OpLessEqual:
		hi := h.Value
		if h.Op == specs.OpLessThan {
			if hi == 0 {
				return true // nothing satisfies h
			}
			hi--
		}
		switch w.Op {
		case specs.OpLessEqual:
			return hi <= w.Value
		case specs.OpLessThan:
			return hi < w.Value
		}
	case specs.OpGreaterThan, specs.OpGreaterEqual:
		lo := h.Value
		if h.Op == specs.OpGreaterThan {
			if lo == math.MaxUint64 {
				return true
			}
			lo++
		}
		switch w.Op {
		case specs.OpGreaterEqual:
			return lo >= w.Value
		case specs.OpGreaterThan:
			return lo > w.Value
		}
	}
	return false
}

// holds evaluates the condition c on the argument value v.
func holds(c specs.LinuxSeccompArg, v uint64) bool {
	switch c.Op {
	case specs.OpNotEqual:
		return v != c.Value
	case specs.OpLessThan:
		return v < c.Value
	case specs.OpLessEqual:
		return v <= c.Value
	case specs.OpEqualTo:
		return v == c.Value
	case specs.OpGreaterEqual:
		return v >= c.Value
	case specs.OpGreaterThan:
		return v > c.Value
	case specs.OpMaskedEqual:
		return v&c.Value == c.ValueTwo
	}
	return false
}
