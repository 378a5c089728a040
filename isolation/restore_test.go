package isolation

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

var bootIDForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\n$`)

func TestNewBootID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		b := string(NewBootID())
		if !bootIDForm.MatchString(b) {
			t.Fatalf("boot id %q is not a version 4 UUID and a newline", b)
		}
		if seen[b] {
			t.Fatalf("boot id %q twice", b)
		}
		seen[b] = true
	}
}

func TestRestoredHostname(t *testing.T) {
	long := strings.Repeat("h", 63)
	for _, tc := range []struct{ host, id, prefix string }{
		{"sandbox", "sb-4a42887d2ddb20d6fe06", "sandbox-"},
		{"box", "sb-00000000000000000000", "box-"},
		{long, "sb-4a42887d2ddb20d6fe06", strings.Repeat("h", 50) + "-"},
	} {
		got := RestoredHostname(tc.host, tc.id)
		if !validHostname(got) || !strings.HasPrefix(got, tc.prefix) || len(got) != len(tc.prefix)+12 {
			t.Errorf("RestoredHostname(%q, %q) = %q; want a valid host name, %q and 12 hex digits", tc.host, tc.id, got, tc.prefix)
		}
		if strings.Contains(got, strings.TrimPrefix(tc.id, "sb-")[:12]) {
			t.Errorf("RestoredHostname(%q, %q) = %q shows the id", tc.host, tc.id, got)
		}
		if again := RestoredHostname(tc.host, tc.id); again != got {
			t.Errorf("RestoredHostname is not a function of its input: %q then %q", got, again)
		}
	}
	seen := map[string]bool{}
	for i := range 1000 {
		h := RestoredHostname("sandbox", "sb-"+strings.Repeat("0", 17)+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)))
		if seen[h] {
			t.Fatalf("two ids named %q", h)
		}
		seen[h] = true
	}
}

// restoredJob is testOCIJob as a restored gVisor sandbox's: its own host
// name and boot id file.
func restoredJob() OCIJob {
	j := testOCIJob
	j.Binds = tightOCIBinds
	j.Hostname = RestoredHostname("sandbox", "sb-1")
	j.BootID = "/var/lib/airlock/oci/bundles/sb-1/boot_id"
	return j
}

func TestOCISpecRestored(t *testing.T) {
	j := restoredJob()
	s, err := OCISpec(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	if s.Hostname != j.Hostname {
		t.Errorf("hostname %q, want %q", s.Hostname, j.Hostname)
	}
	proc := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/proc" })
	at := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == BootIDPath })
	if at < 0 || at < proc {
		t.Fatalf("mounts %+v: no boot id bind after /proc", s.Mounts)
	}
	m := s.Mounts[at]
	if m.Source != j.BootID || m.Type != "bind" || !slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "rbind") {
		t.Errorf("boot id mount %+v", m)
	}
	// Without them, the policy's name and the sentry's own boot id.
	s, err = OCISpec(Default(), testOCIJob)
	if err != nil {
		t.Fatal(err)
	}
	if s.Hostname != "sandbox" || slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == BootIDPath }) {
		t.Errorf("a booted sandbox: hostname %q, mounts %+v", s.Hostname, s.Mounts)
	}
}

func TestOCISpecRestoredRefuses(t *testing.T) {
	for name, mutate := range map[string]func(*Policy, *OCIJob){
		"boot id under runc": func(p *Policy, _ *OCIJob) { p.Isolation, p.Seccomp = Seccomp, testSeccomp },
		"relative boot id":   func(_ *Policy, j *OCIJob) { j.BootID = "boot_id" },
		"unclean boot id":    func(_ *Policy, j *OCIJob) { j.BootID = "/var/lib/../boot_id" },
		"host root boot id":  func(_ *Policy, j *OCIJob) { j.BootID = "/" },
		"boot id is a bind":  func(_ *Policy, j *OCIJob) { j.BootID = j.Binds[0].Source },
		"boot id is /tmp":    func(_ *Policy, j *OCIJob) { j.TmpSource, j.BootID = "/srv/tmp", "/srv/tmp" },
		"bad hostname":       func(_ *Policy, j *OCIJob) { j.Hostname = "evil host" },
		"long hostname":      func(_ *Policy, j *OCIJob) { j.Hostname = strings.Repeat("h", 64) },
	} {
		p, j := Default(), restoredJob()
		mutate(&p, &j)
		if s, err := OCISpec(p, j); !errors.Is(err, ErrInvalid) || s != nil {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func TestCheckOCISpecBootID(t *testing.T) {
	j := restoredJob()
	at := func(s *specs.Spec) *specs.Mount {
		return &s.Mounts[slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == BootIDPath })]
	}
	for name, widen := range map[string]func(*specs.Spec){
		"made writable":  func(s *specs.Spec) { at(s).Options = []string{"bind", "rprivate", "nosuid", "nodev", "noexec"} },
		"made recursive": func(s *specs.Spec) { at(s).Options = append(at(s).Options, "rbind") },
		"another source": func(s *specs.Spec) { at(s).Source = "/etc/shadow" },
		"another type":   func(s *specs.Spec) { at(s).Type, at(s).Source = "tmpfs", "tmpfs" },
		"mounted twice":  func(s *specs.Spec) { s.Mounts = append(s.Mounts, *at(s)) },
		"not mounted": func(s *specs.Spec) {
			*at(s) = specs.Mount{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue"}
		},
		"bind under /proc": func(s *specs.Spec) { at(s).Destination = "/proc/sys/kernel/hostname" },
	} {
		s, err := OCISpec(Default(), j)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckOCISpec(s, Default(), j); err != nil {
			t.Fatalf("%s: valid spec refused: %v", name, err)
		}
		widen(s)
		if err := CheckOCISpec(s, Default(), j); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// Without the boot id file declared, its bind is foreign.
	s, err := OCISpec(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	j.BootID = ""
	if err := CheckOCISpec(s, Default(), j); !errors.Is(err, ErrInvalid) {
		t.Errorf("boot id not declared: err = %v, want ErrInvalid", err)
	}
}
