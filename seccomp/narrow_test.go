//go:build linux && cgo

package seccomp

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// profileDoc is the built-in default as generic JSON, for tests to edit.
type profileDoc = map[string]any

func defaultDoc(t *testing.T) profileDoc {
	t.Helper()
	var doc profileDoc
	if err := json.Unmarshal(readEmbedded(t, "default"), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func groups(doc profileDoc) []any { return doc["syscalls"].([]any) }

// drop removes name from every group, and groups left empty.
func drop(doc profileDoc, name string) {
	var kept []any
	for _, g := range groups(doc) {
		r := g.(map[string]any)
		names := slices.DeleteFunc(r["names"].([]any), func(n any) bool { return n == name })
		if len(names) == 0 {
			continue
		}
		r["names"] = names
		kept = append(kept, r)
	}
	doc["syscalls"] = kept
}

// only leaves the profile the one architecture a, and only names a has.
func only(doc profileDoc, a specs.Arch) {
	delete(doc, "archMap")
	doc["architectures"] = []specs.Arch{a}
	var missing []string
	for _, g := range groups(doc) {
		for _, n := range g.(map[string]any)["names"].([]any) {
			if !onArch(n.(string), a) {
				missing = append(missing, n.(string))
			}
		}
	}
	for _, n := range missing {
		drop(doc, n)
	}
}

// add appends a rule given as JSON. Numbers are kept as written: a float64
// would round values over 1<<53.
func add(t *testing.T, doc profileDoc, ruleJSON string) {
	t.Helper()
	var r any
	dec := json.NewDecoder(strings.NewReader(ruleJSON))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	doc["syscalls"] = append(groups(doc), r)
}

// replace drops name everywhere and gives it the rules ruleJSON.
func replace(t *testing.T, doc profileDoc, name string, rulesJSON ...string) {
	t.Helper()
	drop(doc, name)
	for _, r := range rulesJSON {
		add(t, doc, r)
	}
}

func TestNarrows(t *testing.T) {
	def, err := Load("default")
	if err != nil {
		t.Fatal(err)
	}
	hostArches := def.Spec().Architectures
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, doc profileDoc)
		// widened lists what the error must name; nil: the profile narrows.
		widened []string
		// refused, if set, is what Parse's refusal must name: a condition
		// libseccomp would not compile as written never reaches Narrows.
		refused []string
	}{
		{name: "the default itself", edit: func(*testing.T, profileDoc) {}},
		{name: "default minus mkdir", edit: func(_ *testing.T, d profileDoc) { drop(d, "mkdir"); drop(d, "mkdirat") }},
		{name: "kill by default", edit: func(_ *testing.T, d profileDoc) {
			d["defaultAction"] = "SCMP_ACT_KILL_PROCESS"
			delete(d, "defaultErrnoRet")
		}},
		{name: "kill where the default answers EPERM", edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "mount", `{"names": ["mount"], "action": "SCMP_ACT_KILL"}`)
		}},
		{name: "trap mkdir", edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "mkdir", `{"names": ["mkdir"], "action": "SCMP_ACT_TRAP"}`)
		}},
		{name: "another errno for clone3", edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "clone3", `{"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}`)
		}},
		{name: "fewer architectures", edit: func(_ *testing.T, d profileDoc) {
			delete(d, "archMap")
			d["architectures"] = hostArches[:2]
		}},
		{name: "one socket family of the default's", edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "socket", `{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}]}`)
		}},
		{name: "socket family and type", edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "socket", `{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}, {"index": 1, "value": 1, "op": "SCMP_CMP_EQ"}]}`)
		}},
		{name: "clone with a wider mask", edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2114060289, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}`)
		}},
		{name: "personality 0 only", edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "personality", `{"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]}`)
		}},
		{name: "socketcall's rule dropped, 64-bit architecture only", edit: func(_ *testing.T, d profileDoc) {
			only(d, hostArches[0])
			drop(d, "socketcall")
		}},
		{name: "clone with a 64-bit mask, 64-bit architecture only", edit: func(t *testing.T, d profileDoc) {
			only(d, hostArches[0])
			replace(t, d, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 18446744071528644608, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}`)
		}},

		{name: "allow by default", widened: []string{"unshare", "mount", "defaultAction SCMP_ACT_ALLOW"}, edit: func(_ *testing.T, d profileDoc) {
			d["defaultAction"] = "SCMP_ACT_ALLOW"
			delete(d, "defaultErrnoRet")
			d["syscalls"] = []any{}
		}},
		{name: "log by default", widened: []string{"defaultAction SCMP_ACT_LOG"}, edit: func(_ *testing.T, d profileDoc) {
			d["defaultAction"] = "SCMP_ACT_LOG"
			delete(d, "defaultErrnoRet")
		}},
		{name: "trace by default", widened: []string{"defaultAction SCMP_ACT_TRACE"}, edit: func(_ *testing.T, d profileDoc) {
			d["defaultAction"] = "SCMP_ACT_TRACE"
		}},
		{name: "allow by default, denying only mount", widened: []string{"unshare", "setns"}, edit: func(_ *testing.T, d profileDoc) {
			d["defaultAction"] = "SCMP_ACT_ALLOW"
			delete(d, "defaultErrnoRet")
			d["syscalls"] = []any{map[string]any{"names": []string{"mount"}, "action": "SCMP_ACT_ERRNO"}}
		}},
		{name: "mount and unshare allowed", widened: []string{"mount", "unshare"}, edit: func(t *testing.T, d profileDoc) {
			drop(d, "mount")
			drop(d, "unshare")
			add(t, d, `{"names": ["mount", "unshare"], "action": "SCMP_ACT_ALLOW"}`)
		}},
		{name: "mount logged", widened: []string{"mount"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "mount", `{"names": ["mount"], "action": "SCMP_ACT_LOG"}`)
		}},
		{name: "ptrace traced", widened: []string{"ptrace"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "ptrace", `{"names": ["ptrace"], "action": "SCMP_ACT_TRACE"}`)
		}},
		{name: "a call the default never names", widened: []string{"acct"}, edit: func(t *testing.T, d profileDoc) {
			drop(d, "acct")
			add(t, d, `{"names": ["acct"], "action": "SCMP_ACT_ALLOW"}`)
		}},
		{name: "socketcall", widened: []string{"socketcall"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "socketcall", `{"names": ["socketcall"], "action": "SCMP_ACT_ALLOW"}`)
		}},
		{name: "socketcall's rule dropped", widened: []string{"rules with argument checks on socket and SCMP_ARCH_X86 without a rule denying socketcall"}, edit: func(_ *testing.T, d profileDoc) {
			drop(d, "socketcall")
		}},
		{name: "socketcall allowed for accept only", widened: []string{"without a rule denying socketcall"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "socketcall", `{"names": ["socketcall"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 5, "op": "SCMP_CMP_NE"}]}`)
		}},
		{name: "clone3", widened: []string{"clone3"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "clone3", `{"names": ["clone3"], "action": "SCMP_ACT_ALLOW"}`)
		}},
		{name: "another architecture", widened: []string{"architecture SCMP_ARCH_ARM"}, edit: func(_ *testing.T, d profileDoc) {
			delete(d, "archMap")
			d["architectures"] = append(slices.Clone(hostArches), specs.ArchARM)
		}},
		{name: "clone with any flags", widened: []string{"clone (with arguments the default denies)"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW"}`)
		}},
		{name: "clone with CLONE_NEWUSER", widened: []string{"clone (with"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1845624832, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}`)
		}},
		{name: "netlink sockets", widened: []string{"socket (with"}, edit: func(t *testing.T, d profileDoc) {
			add(t, d, `{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 16, "op": "SCMP_CMP_EQ"}]}`)
		}},
		{name: "socket families by range", widened: []string{"socket (with"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "socket", `{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 10, "op": "SCMP_CMP_LE"}]}`)
		}},
		{name: "socket, condition on another argument", widened: []string{"socket (with"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "socket", `{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 1, "op": "SCMP_CMP_EQ"}]}`)
		}},
		{name: "any personality", widened: []string{"personality (with"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "personality", `{"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_NE"}]}`)
		}},
		{name: "any ioctl", widened: []string{"ioctl (with"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "ioctl", `{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW"}`)
		}},

		// libseccomp compiles these as "always" or truncates them; read as
		// written they matched nothing, so Narrows took them.
		{name: "review: clone, mask 0", refused: []string{"[clone]: argument 0", "mask (value) 0"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 0, "valueTwo": 1, "op": "SCMP_CMP_MASKED_EQ"}]}`)
		}},
		{name: "review: netlink and vsock behind a high bit", refused: []string{"[socket]: argument 0", "valueTwo 0x100000010", "valueTwo 0x100000028", "outside the mask"}, edit: editReviewSockets},
		{name: "mask 0, valueTwo 0", refused: []string{"[clone]: argument 0", "mask (value) 0"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 0, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}`)
		}},
		{name: "clone, low half of the mask 0", refused: []string{"[clone]: argument 0", "outside the mask"}, edit: func(t *testing.T, d profileDoc) {
			only(d, hostArches[0])
			replace(t, d, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 18446744069414584320, "valueTwo": 1, "op": "SCMP_CMP_MASKED_EQ"}]}`)
		}},
		{name: "socket family over 32 bits with 32-bit architectures", refused: []string{"[socket]: argument 0", "over 32 bits", "SCMP_ARCH_"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "socket", `{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 4294967297, "op": "SCMP_CMP_EQ"}]}`)
		}},
		{name: "clone with a 64-bit mask and 32-bit architectures", refused: []string{"[clone]: argument 0", "over 32 bits"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "clone", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 18446744071528644608, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}`)
		}},
		{name: "personality, range over 32 bits", refused: []string{"[personality]: argument 0", "over 32 bits"}, edit: func(t *testing.T, d profileDoc) {
			replace(t, d, "personality", `{"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 18446744073709551615, "op": "SCMP_CMP_GT"}]}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := defaultDoc(t)
			tc.edit(t, doc)
			b, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(b)
			if tc.refused != nil {
				wantNamed(t, err, tc.refused, ErrInvalid)
				if _, err := ParseCustom(b); !errors.Is(err, ErrInvalid) {
					t.Errorf("ParseCustom: %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			err = Narrows(p, def)
			if tc.widened == nil {
				if err != nil {
					t.Fatalf("refused a narrowing profile: %v", err)
				}
				if _, err := ParseCustom(b); err != nil {
					t.Fatalf("ParseCustom: %v", err)
				}
				return
			}
			wantNamed(t, err, tc.widened, ErrWidens, ErrInvalid)
			if _, err := ParseCustom(b); !errors.Is(err, ErrWidens) {
				t.Errorf("ParseCustom: %v, want ErrWidens", err)
			}
		})
	}
}

// wantNamed checks that err wraps each of targets and names each of words.
func wantNamed(t *testing.T, err error, words []string, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("got %v, want %v", err, target)
		}
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not name %q: %v", w, err)
		}
	}
	t.Log(err)
}

// editReviewSockets adds socket rules for AF_NETLINK and AF_VSOCK whose
// masks leave out a high bit of the value: read as written they match
// nothing, but libseccomp drops the high half and compares family alone.
func editReviewSockets(t *testing.T, d profileDoc) {
	add(t, d, `{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 4294967295, "valueTwo": 4294967312, "op": "SCMP_CMP_MASKED_EQ"}]}`)
	add(t, d, `{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 4294967295, "valueTwo": 4294967336, "op": "SCMP_CMP_MASKED_EQ"}]}`)
}

// TestNarrowsRefusesOtherSections: moby's includes and excludes, and a
// notify default, never get as far as the comparison.
func TestNarrowsRefusesOtherSections(t *testing.T) {
	for name, edit := range map[string]func(d profileDoc){
		"includes": func(d profileDoc) {
			groups(d)[0].(map[string]any)["includes"] = map[string]any{"caps": []string{"CAP_SYS_ADMIN"}}
		},
		"excludes": func(d profileDoc) {
			groups(d)[0].(map[string]any)["excludes"] = map[string]any{"caps": []string{"CAP_SYS_ADMIN"}}
		},
		"notify default": func(d profileDoc) { d["defaultAction"] = "SCMP_ACT_NOTIFY"; delete(d, "defaultErrnoRet") },
	} {
		t.Run(name, func(t *testing.T) {
			doc := defaultDoc(t)
			edit(doc)
			b, _ := json.Marshal(doc)
			if _, err := ParseCustom(b); !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}

// TestDefaultHasNoConditionalDenials: Narrows counts a call as allowed by
// the reference wherever one of its allow rules matches, which holds only if
// no deny rule of the reference names that call too.
func TestDefaultHasNoConditionalDenials(t *testing.T) {
	def, err := Load("default")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	for _, r := range def.Spec().Syscalls {
		if !denies[r.Action] {
			for _, n := range r.Names {
				allowed[n] = true
			}
		}
	}
	for _, r := range def.Spec().Syscalls {
		for _, n := range r.Names {
			if denies[r.Action] && allowed[n] {
				t.Errorf("%q has both allow and deny rules", n)
			}
		}
	}
}

func TestCondImplies(t *testing.T) {
	arg := func(op specs.LinuxSeccompOperator, v, v2 uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Op: op, Value: v, ValueTwo: v2}
	}
	for _, tc := range []struct {
		h, w specs.LinuxSeccompArg
		want bool
	}{
		{arg(specs.OpEqualTo, 2, 0), arg(specs.OpEqualTo, 2, 0), true},
		{arg(specs.OpEqualTo, 3, 0), arg(specs.OpEqualTo, 2, 0), false},
		{arg(specs.OpEqualTo, 3, 0), arg(specs.OpLessThan, 4, 0), true},
		{arg(specs.OpEqualTo, 0x10, 0), arg(specs.OpMaskedEqual, 0xf0, 0x10), true},
		{arg(specs.OpEqualTo, 0x20, 0), arg(specs.OpMaskedEqual, 0xf0, 0x10), false},
		{arg(specs.OpMaskedEqual, 0xff, 0x10), arg(specs.OpMaskedEqual, 0xf0, 0x10), true},
		{arg(specs.OpMaskedEqual, 0xf0, 0x10), arg(specs.OpMaskedEqual, 0xff, 0x10), false},
		// Refused by convert, as libseccomp compiles them to match: never
		// read as "matches nothing".
		{arg(specs.OpMaskedEqual, 0x0f, 0x10), arg(specs.OpEqualTo, 7, 0), false},
		{arg(specs.OpMaskedEqual, 0, 1), arg(specs.OpMaskedEqual, 0x7E020000, 0), false},
		{arg(specs.OpMaskedEqual, 0xFFFFFFFF, 0x1_00000010), arg(specs.OpEqualTo, 1, 0), false},
		{arg(specs.OpMaskedEqual, 0xFFFFFFFF, 0x1_00000028), arg(specs.OpEqualTo, 10, 0), false},
		{arg(specs.OpMaskedEqual, 0, 0), arg(specs.OpEqualTo, 1, 0), false},
		{arg(specs.OpMaskedEqual, 0xFFFFFFFF_7E020000, 0), arg(specs.OpMaskedEqual, 0x7E020000, 0), true},
		{arg(specs.OpLessThan, 3, 0), arg(specs.OpLessEqual, 2, 0), true},
		{arg(specs.OpLessEqual, 3, 0), arg(specs.OpLessEqual, 2, 0), false},
		{arg(specs.OpGreaterThan, 3, 0), arg(specs.OpGreaterEqual, 4, 0), true},
		{arg(specs.OpGreaterEqual, 3, 0), arg(specs.OpGreaterThan, 3, 0), false},
		{arg(specs.OpNotEqual, 3, 0), arg(specs.OpEqualTo, 3, 0), false},
		{arg(specs.OpLessEqual, 3, 0), arg(specs.OpEqualTo, 3, 0), false},
	} {
		if got := condImplies(tc.h, tc.w); got != tc.want {
			t.Errorf("%v ⇒ %v: got %v, want %v", tc.h, tc.w, got, tc.want)
		}
	}
}
