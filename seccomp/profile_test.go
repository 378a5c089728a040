//go:build linux && cgo

package seccomp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"

	seccompprofiles "github.com/airlock-sandbox/airlock/seccomp-profiles"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares got with testdata/name.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./seccomp -update` to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file; if the change is intended, run `go test ./seccomp -update` and review the diff.\ngot:\n%s", path, got)
	}
}

func readEmbedded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(seccompprofiles.FS, name+".json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEmbeddedProfilesCompile compiles every built-in profile for each
// host its archMap names, so a misspelt syscall fails here.
func TestEmbeddedProfilesCompile(t *testing.T) {
	names := Names()
	if !slices.Contains(names, "default") {
		t.Fatalf("no default profile among %v", names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			p, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Compile(p)
			if err != nil {
				t.Fatal(err)
			}
			f.Release()
			b := readEmbedded(t, name)
			var file fileProfile
			if err := json.Unmarshal(b, &file); err != nil {
				t.Fatal(err)
			}
			for _, m := range file.ArchMap {
				if _, err := parse(b, m.Arch); err != nil {
					t.Errorf("on %s: %v", m.Arch, err)
				}
			}
		})
	}
}

func TestDefaultGolden(t *testing.T) {
	p, err := parse(readEmbedded(t, "default"), specs.ArchX86_64)
	if err != nil {
		t.Fatal(err)
	}
	got := Syscalls(p, string(specs.ArchX86_64))
	golden(t, "default-x86_64.golden", strings.Join(got, "\n")+"\n")
}

// TestDefaultInvariants checks what the golden file shows directly, so a
// careless -update cannot lose it.
func TestDefaultInvariants(t *testing.T) {
	p, err := parse(readEmbedded(t, "default"), specs.ArchX86_64)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec()
	if s.DefaultAction != specs.ActErrno || s.DefaultErrnoRet == nil || *s.DefaultErrnoRet != 1 {
		t.Errorf("default %s %v, want SCMP_ACT_ERRNO with EPERM", s.DefaultAction, s.DefaultErrnoRet)
	}
	// No x32: its calls get the bad-architecture action.
	if want := []specs.Arch{specs.ArchX86_64, specs.ArchX86}; !slices.Equal(s.Architectures, want) {
		t.Errorf("architectures %v, want %v", s.Architectures, want)
	}
	allowed := Syscalls(p, string(specs.ArchX86_64))
	for _, name := range []string{
		"mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "ptrace", "bpf",
		"perf_event_open", "userfaultfd", "io_uring_setup", "keyctl", "add_key", "init_module",
		"kexec_load", "reboot", "open_by_handle_at", "clock_settime", "capset", "clone3",
		"socketcall", "modify_ldt", "iopl",
	} {
		if slices.Contains(allowed, name) {
			t.Errorf("%s is allowed", name)
		}
	}
	// These are allowed only with argument checks.
	for _, name := range []string{"clone", "socket", "personality", "ioctl"} {
		for _, r := range s.Syscalls {
			if slices.Contains(r.Names, name) && r.Action == specs.ActAllow && len(r.Args) == 0 {
				t.Errorf("%s is allowed without an argument check", name)
			}
		}
	}
}

func TestDefaultArchMapOnArm64(t *testing.T) {
	p, err := parse(readEmbedded(t, "default"), specs.ArchAARCH64)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Spec().Architectures; !slices.Equal(got, []specs.Arch{specs.ArchAARCH64}) {
		t.Errorf("architectures %v", got)
	}
	got := Syscalls(p, string(specs.ArchAARCH64))
	if slices.Contains(got, "open") || slices.Contains(got, "arch_prctl") || !slices.Contains(got, "openat") {
		t.Errorf("aarch64 syscalls: %v", got)
	}
	if Syscalls(p, string(specs.ArchX86_64)) != nil {
		t.Error("an aarch64 profile lists x86_64 syscalls")
	}
}

const minimal = `{
	"defaultAction": "SCMP_ACT_ERRNO",
	"defaultErrnoRet": 1,
	"archMap": [
		{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]},
		{"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": []}
	],
	"syscalls": [
		{"names": ["read", "write", "exit_group"], "action": "SCMP_ACT_ALLOW", "comment": "basics"},
		{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}]},
		{"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
		{"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "comment": "denied"}
	]
}`

func TestParse(t *testing.T) {
	p, err := parse([]byte(minimal), specs.ArchX86_64)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(minimal))
	if p.SHA256() != hex.EncodeToString(sum[:]) || !bytes.Equal(p.Bytes(), []byte(minimal)) {
		t.Errorf("sha256 %s or bytes differ from the input", p.SHA256())
	}
	s := p.Spec()
	if !slices.Equal(s.Architectures, []specs.Arch{specs.ArchX86_64, specs.ArchX86}) {
		t.Errorf("architectures %v", s.Architectures)
	}
	if len(s.Syscalls) != 4 || *s.Syscalls[2].ErrnoRet != 38 || s.Syscalls[1].Args[0].Value != 1 {
		t.Errorf("syscalls %+v", s.Syscalls)
	}
	if got := Syscalls(p, "SCMP_ARCH_X86_64"); !slices.Equal(got, []string{"exit_group", "read", "socket", "write"}) {
		t.Errorf("allowed %v", got)
	}

	// Spec is a copy.
	s.Syscalls[0].Names[0] = "mount"
	*s.DefaultErrnoRet = 0
	s.Architectures[0] = specs.ArchARM
	if again := p.Spec(); again.Syscalls[0].Names[0] != "read" || *again.DefaultErrnoRet != 1 || again.Architectures[0] != specs.ArchX86_64 {
		t.Error("changing Spec's result changed the profile")
	}
}

func TestParseRejects(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(minimal, old) {
			t.Fatalf("%q is not in the minimal profile", old)
		}
		return strings.Replace(minimal, old, new, 1)
	}
	readRule := `{"names": ["read", "write", "exit_group"], "action": "SCMP_ACT_ALLOW", "comment": "basics"}`
	for name, tc := range map[string]struct {
		profile string
		host    specs.Arch
	}{
		"malformed JSON":        {profile: `{"defaultAction": "SCMP_ACT_ERRNO",`},
		"data after the object": {profile: minimal + `{}`},
		"unknown field":         {profile: edit(`"comment": "basics"`, `"includes": {"caps": ["CAP_SYS_ADMIN"]}`)},
		"unknown action":        {profile: edit(`"SCMP_ACT_ALLOW", "comment"`, `"SCMP_ACT_MAYBE", "comment"`)},
		"unknown default":       {profile: edit(`"defaultAction": "SCMP_ACT_ERRNO"`, `"defaultAction": "SCMP_ACT_NOPE"`)},
		"notify":                {profile: edit(`"SCMP_ACT_ALLOW", "comment"`, `"SCMP_ACT_NOTIFY", "comment"`)},
		"unknown arch":          {profile: edit(`"SCMP_ARCH_X86"]`, `"SCMP_ARCH_VAX"]`)},
		"arch twice":            {profile: edit(`"SCMP_ARCH_X86"]`, `"SCMP_ARCH_AARCH64"]`)},
		"no entry for the host": {profile: minimal, host: specs.ArchRISCV64},
		"no architectures":      {profile: `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}`},
		"architectures and archMap": {
			profile: edit(`"defaultErrnoRet": 1,`, `"defaultErrnoRet": 1, "architectures": ["SCMP_ARCH_X86_64"],`),
		},
		"syscall unknown everywhere": {profile: edit(`"exit_group"`, `"exit_group", "no_such_syscall"`)},
		// arch_prctl is an x86 call.
		"syscall none of the arches has": {
			profile: `{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_AARCH64"], "syscalls": [{"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW"}]}`,
		},
		"empty names":           {profile: edit(`["read", "write", "exit_group"]`, `[]`)},
		"name twice in a group": {profile: edit(`"exit_group"]`, `"exit_group", "read"]`)},
		"errnoRet on allow":     {profile: edit(`"SCMP_ACT_ALLOW", "comment"`, `"SCMP_ACT_ALLOW", "errnoRet": 1, "comment"`)},
		"errnoRet too big":      {profile: edit(`"errnoRet": 38`, `"errnoRet": 4096`)},
		"argument index 6":      {profile: edit(`"index": 0`, `"index": 6`)},
		"argument twice": {
			profile: edit(`"args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}]`,
				`"args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}, {"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]`),
		},
		"unknown operator": {profile: edit(`"SCMP_CMP_EQ"`, `"SCMP_CMP_ABOUT"`)},
		"valueTwo on EQ":   {profile: edit(`"value": 1,`, `"value": 1, "valueTwo": 1,`)},
		// libseccomp compiles these unlike what they say.
		"MASKED_EQ mask 0": {profile: edit(`"value": 1, "op": "SCMP_CMP_EQ"`, `"value": 0, "valueTwo": 1, "op": "SCMP_CMP_MASKED_EQ"`)},
		"MASKED_EQ valueTwo outside the mask": {
			profile: edit(`"value": 1, "op": "SCMP_CMP_EQ"`, `"value": 4294967295, "valueTwo": 4294967312, "op": "SCMP_CMP_MASKED_EQ"`),
		},
		"over 32 bits with a 32-bit architecture": {profile: edit(`"value": 1, "op"`, `"value": 4294967297, "op"`)},
		"denied and allowed":                      {profile: edit(readRule, readRule+`, {"names": ["mount"], "action": "SCMP_ACT_ALLOW"}`)},
		"unconditional beside conditional": {
			profile: edit(readRule, readRule+`, {"names": ["socket"], "action": "SCMP_ACT_ALLOW"}`),
		},
	} {
		t.Run(name, func(t *testing.T) {
			host := tc.host
			if host == "" {
				host = specs.ArchX86_64
			}
			_, err := parse([]byte(tc.profile), host)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an error wrapping ErrInvalid", err)
			}
			t.Log(err)
		})
	}
}

func TestLoadRejectsNames(t *testing.T) {
	for _, name := range []string{"", "nosuch", "../default", "default.json", "."} {
		if _, err := Load(name); !errors.Is(err, ErrInvalid) {
			t.Errorf("Load(%q): %v, want ErrInvalid", name, err)
		}
	}
}

func TestExportBPF(t *testing.T) {
	p, err := Load("default")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	var buf bytes.Buffer
	if err := f.ExportBPF(&buf); err != nil {
		t.Fatal(err)
	}
	// A BPF program is a list of 8-byte instructions, at most 4096 of them.
	if n := buf.Len(); n == 0 || n%8 != 0 || n/8 > 4096 {
		t.Fatalf("%d bytes of BPF", n)
	}
	file, err := os.Create(filepath.Join(t.TempDir(), "filter.bpf"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file.Name()); err != nil || !bytes.Equal(b, buf.Bytes()) {
		t.Errorf("export to a file differs from export to a buffer (%v)", err)
	}
}

func TestForGVisorAllowsOnlyClone3(t *testing.T) {
	p, err := Load("default")
	if err != nil {
		t.Fatal(err)
	}
	g, err := ForGVisor(p)
	if err != nil {
		t.Fatal(err)
	}
	if g.SHA256() == p.SHA256() {
		t.Fatal("the variant has the same digest")
	}
	before, after := Syscalls(p, "SCMP_ARCH_X86_64"), Syscalls(g, "SCMP_ARCH_X86_64")
	var added []string
	for _, s := range after {
		if !slices.Contains(before, s) {
			added = append(added, s)
		}
	}
	if len(added) != 1 || added[0] != "clone3" || len(after) != len(before)+1 {
		t.Errorf("the variant adds %v; want only clone3", added)
	}
}

// TestArches32 checks arches32 against the libseccomp in use: on a 32-bit
// architecture it compares no high half, so a value over 32 bits is cut.
func TestArches32(t *testing.T) {
	for _, a := range arches {
		sa, err := scmpArch(a)
		if err != nil {
			t.Logf("%s: %v", a, err)
			continue
		}
		f, err := libseccomp.NewFilter(libseccomp.ActErrno)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Release()
		native, _ := libseccomp.GetNativeArch()
		if sa != native {
			if err := f.AddArch(sa); err != nil {
				t.Logf("%s: this libseccomp cannot add it: %v", a, err)
				continue
			}
			if err := f.RemoveArch(native); err != nil {
				t.Fatal(err)
			}
		}
		read, _ := libseccomp.GetSyscallFromName("read")
		c, _ := libseccomp.MakeCondition(0, libseccomp.CompareEqual, 1<<32|5)
		if err := f.AddRuleConditional(read, libseccomp.ActAllow, []libseccomp.ScmpCondition{c}); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		out, err := os.CreateTemp(t.TempDir(), "pfc")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.ExportPFC(out); err != nil {
			t.Fatal(err)
		}
		out.Close()
		pfc, _ := os.ReadFile(out.Name())
		if wide := bytes.Contains(pfc, []byte("hi32")); wide == arches32[a] {
			t.Errorf("%s: arches32 says 32-bit %v, but libseccomp compares the high half: %v\n%s", a, arches32[a], wide, pfc)
		}
	}
}
