package seccomp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"testing"
)

// FuzzParseCustom parses the bytes as a user's profile. A refusal is
// ErrInvalid; a profile taken denies by default, allows on each of its
// architectures only calls the default allows (an oracle apart from
// Narrows' own argument logic), is the hash of its bytes, reads back from
// them to the same spec, and its gVisor variant adds at most clone3.
func FuzzParseCustom(f *testing.F) {
	def, err := Load("default")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(def.Bytes())
	for _, s := range []string{
		`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["read","write","exit_group"],"action":"SCMP_ACT_ALLOW"}]}`,
		`{"defaultAction":"SCMP_ACT_KILL_PROCESS","archMap":[{"architecture":"SCMP_ARCH_X86_64","subArchitectures":["SCMP_ARCH_X86"]}],"syscalls":[{"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]}]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["clone3"],"action":"SCMP_ACT_ERRNO","errnoRet":38}]}`,
		`{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["mount"],"action":"SCMP_ACT_LOG"}]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["socket"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":16,"op":"SCMP_CMP_GE"}]}]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":7,"value":0,"op":"SCMP_CMP_EQ"}]}]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86"],"syscalls":[{"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"valueTwo":1,"op":"SCMP_CMP_MASKED_EQ"}]},{"names":["socket"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":4294967295,"valueTwo":4294967312,"op":"SCMP_CMP_MASKED_EQ"}]}]}`,
		`{"defaultAction":"SCMP_ACT_NOTIFY","architectures":["SCMP_ARCH_X86_64"]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86_64"]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["no_such_call"],"action":"SCMP_ACT_ALLOW"}]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","includes":{}}`,
		`{} {}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseCustom(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("a refused profile is not ErrInvalid: %v", err)
			}
			return
		}
		if !denies[p.spec.DefaultAction] {
			t.Fatalf("a profile with defaultAction %s narrows the default", p.spec.DefaultAction)
		}
		for _, a := range p.spec.Architectures {
			if !slices.Contains(def.spec.Architectures, a) {
				t.Fatalf("architecture %s, which the default does not name", a)
			}
			if extra := minus(Syscalls(p, string(a)), Syscalls(def, string(a))); len(extra) > 0 {
				t.Fatalf("on %s the profile allows %v, which the default never allows", a, extra)
			}
		}
		if sum := sha256.Sum256(b); p.SHA256() != hex.EncodeToString(sum[:]) || !bytes.Equal(p.Bytes(), b) {
			t.Fatalf("sha256 %s or bytes are not the input's", p.SHA256())
		}
		back, err := Parse(p.Bytes())
		if err != nil || !reflect.DeepEqual(back.Spec(), p.Spec()) {
			t.Fatalf("the profile does not read back from its bytes: %v", err)
		}
		g, err := ForGVisor(p)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("a refused gVisor variant is not ErrInvalid: %v", err)
			}
			return
		}
		for _, a := range g.spec.Architectures {
			if extra := minus(Syscalls(g, string(a)), Syscalls(p, string(a))); len(extra) > 0 && !slices.Equal(extra, []string{"clone3"}) {
				t.Fatalf("the gVisor variant allows %v on %s beyond the profile", extra, a)
			}
		}
	})
}

// minus is what a has and b lacks.
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}
