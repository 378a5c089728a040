package isolation

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares v, as indented JSON, with testdata/name.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./isolation -update` to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file; if the change is intended, run `go test ./isolation -update` and review the diff.\ngot:\n%s", path, got)
	}
}

var testJob = DockerJob{
	Image:  "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	Argv:   []string{"python3", "-c", "print(1)"},
	Env:    []string{"SEED=1"},
	Labels: map[string]string{"airlock.id": "r1"},
}

func TestDockerConfigGolden(t *testing.T) {
	tight := Default()
	tight.Limits = Limits{Timeout: 5 * time.Second, Memory: 64 << 20, CPUs: 500, Pids: 32, Output: 4096, Tmp: 8 << 20, FileSize: 8 << 20, OpenFiles: 64}
	tight.UID, tight.GID, tight.Hostname = 1000, 1000, "box"
	seccompMode := tight
	seccompMode.Isolation, seccompMode.Seccomp = Seccomp, testSeccomp
	stdinJob := testJob
	stdinJob.Stdin = true
	stdinJob.CgroupParent = "/airlock/r1"
	stdinJob.Binds = []Bind{{Source: "/var/lib/airlock/runs/r1/out", Target: "/out"}, {Source: "/var/lib/airlock/runs/r1/in/0", Target: "/work", ReadOnly: true}}
	stdinJob.Workdir = "/work"
	for _, tc := range []struct {
		name string
		p    Policy
		j    DockerJob
	}{
		{"docker-default.json", Default(), testJob},
		{"docker-tight-stdin.json", tight, stdinJob},
		{"docker-seccomp.json", seccompMode, testJob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, host, net, err := DockerConfig(tc.p, tc.j)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, map[string]any{"config": cfg, "host_config": host, "networking_config": net})
		})
	}
}

// The invariants hold whatever the limits: these are the properties the
// golden files show, checked directly so a careless -update cannot lose them.
func TestDockerConfigInvariants(t *testing.T) {
	cfg, host, _, err := DockerConfig(Default(), testJob)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case host.NetworkMode != "none" || !cfg.NetworkDisabled:
		t.Error("network not disabled")
	case len(host.CapDrop) != 1 || host.CapDrop[0] != "ALL" || len(host.CapAdd) != 0:
		t.Error("capabilities not all dropped")
	case len(host.SecurityOpt) != 1 || host.SecurityOpt[0] != "no-new-privileges":
		t.Error("no-new-privileges missing")
	case !host.ReadonlyRootfs || host.Privileged:
		t.Error("root writable or privileged")
	case len(host.Binds) != 0 || len(host.Mounts) != 0 || len(host.Devices) != 0:
		t.Error("host mounts or devices present")
	case host.Memory != host.MemorySwap || host.Memory == 0:
		t.Error("memory limit missing or swap granted")
	case host.PidsLimit == nil || *host.PidsLimit <= 0 || host.NanoCPUs <= 0:
		t.Error("pids or cpu limit missing")
	case cfg.User == "" || cfg.User[0] == '0':
		t.Error("runs as root")
	case host.Runtime != "airlock-runsc":
		t.Errorf("runtime %q", host.Runtime)
	case len(cfg.Env) != 1 || cfg.Env[0] != "SEED=1":
		t.Errorf("env %v", cfg.Env)
	case cfg.Entrypoint[0] != "python3" || len(cfg.Cmd) != 2:
		t.Errorf("argv %v %v", cfg.Entrypoint, cfg.Cmd)
	}
}

func TestDockerConfigRefusesWeakPolicies(t *testing.T) {
	for name, mutate := range map[string]func(*Policy){
		"zero memory":               func(p *Policy) { p.Limits.Memory = 0 },
		"zero timeout":              func(p *Policy) { p.Limits.Timeout = 0 },
		"zero pids":                 func(p *Policy) { p.Limits.Pids = 0 },
		"root uid":                  func(p *Policy) { p.UID = 0 },
		"root gid":                  func(p *Policy) { p.GID = 0 },
		"seccomp without a profile": func(p *Policy) { p.Isolation = Seccomp },
		"unknown mode":              func(p *Policy) { p.Isolation = "none" },
		"bad hostname":              func(p *Policy) { p.Hostname = "evil host" },
	} {
		p := Default()
		mutate(&p)
		if _, _, _, err := DockerConfig(p, testJob); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, _, _, err := DockerConfig(Default(), DockerJob{Image: testJob.Image}); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty argv: err = %v", err)
	}
}

func TestWithDefaultsNeverRoot(t *testing.T) {
	p := Policy{}.WithDefaults()
	if p.UID == 0 || p.GID == 0 || p.Validate() != nil {
		t.Errorf("zero policy with defaults: %+v, %v", p, p.Validate())
	}
	if !reflect.DeepEqual(p, Default()) {
		t.Errorf("zero policy with defaults %+v != Default()", p)
	}
	q := Policy{Limits: Limits{Memory: 1 << 30}}.WithDefaults()
	if q.Limits.Memory != 1<<30 || q.Limits.Pids != Default().Limits.Pids {
		t.Errorf("partial policy: %+v", q.Limits)
	}
}
