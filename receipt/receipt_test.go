package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
)

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func sample() Receipt {
	zone := time.FixedZone("CEST", 2*60*60)
	start := time.Date(2025, 6, 1, 12, 0, 0, 123456789, zone)
	pol := isolation.Record{
		Isolation:     isolation.GVisor,
		Limits:        isolation.LimitsRecord{TimeoutMS: 30000, MemoryBytes: 512 << 20, MilliCPUs: 1000, CPUs: 1, Pids: 256, OutputBytes: 1 << 20, TmpBytes: 64 << 20, FileSizeBytes: 64 << 20, OpenFiles: 1024},
		UID:           65534,
		GID:           65534,
		Hostname:      "sandbox",
		SeccompSHA256: hash("seccomp"),
		Mounts:        []isolation.MountRecord{{Target: "/in", Mode: "ro"}, {Target: "/out", Mode: "rw"}},
		Runtime:       isolation.RuntimeRecord{Name: "runsc", Flags: []string{"--network=none", "--oci-seccomp"}},
	}
	r := Receipt{
		RunID:          "run-1",
		Image:          "sha256:" + hash("image"),
		ImageManifest:  "sha256:" + hash("manifest"),
		Engine:         "oci",
		Runtime:        "runsc",
		RuntimeVersion: "release-20250512.0",
		Isolation:      "gvisor",
		SeccompSHA256:  hash("seccomp"),
		Policy:         pol,
		ArgvSHA256:     hash("argv"),
		Inputs:         []File{{Path: "in/data.csv", Size: 10, SHA256: hash("data")}},
		Stdout:         StreamOf(hash("out"), 3, false, []byte("out"), nil),
		Stderr:         StreamOf(hash(""), 0, false, nil, nil),
		Artifacts: []File{
			{Path: "report.pdf", Size: 100, SHA256: hash("report"), MIME: "application/pdf"},
			{Path: "plot.png", Size: 200, SHA256: hash("plot"), MIME: "image/png"},
		},
		Rejected:       []Rejection{},
		Reason:         "exited",
		ExitCode:       0,
		AirlockVersion: "v0.1.0",
		StartedAt:      start,
		FinishedAt:     start.Add(1500 * time.Millisecond),
	}
	r.PolicySHA256 = mustHash(pol)
	return r
}

func mustHash(v any) string {
	h, err := Hash(v)
	if err != nil {
		panic(err)
	}
	return h
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func TestCanonical(t *testing.T) {
	type inner struct {
		Z int    `json:"z"`
		A string `json:"a"`
	}
	type outer struct {
		Beta  []inner        `json:"beta"`
		Alpha map[string]any `json:"alpha"`
	}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"struct fields sorted", inner{Z: 1, A: "x"}, `{"a":"x","z":1}`},
		{"nested", outer{
			Beta:  []inner{{Z: 2, A: "y"}},
			Alpha: map[string]any{"k": map[string]any{"b": true, "a": nil}},
		}, `{"alpha":{"k":{"a":null,"b":true}},"beta":[{"a":"y","z":2}]}`},
		{"raw JSON reordered", json.RawMessage(`{ "b": 1, "a": { "d": [3, 2], "c": "" } }`), `{"a":{"c":"","d":[3,2]},"b":1}`},
		{"no HTML escaping", map[string]string{"s": "<a&b>"}, `{"s":"<a&b>"}`},
		{"numbers as written", []any{int64(9007199254740993), 1e21, 0.1, -1.5}, `[9007199254740993,1e+21,0.1,-1.5]`},
		{"control characters escaped", "a\nb\x01", `"a\nb\u0001"`},
		{"keys bytewise", map[string]int{"b": 1, "B": 2, "é": 3, "a": 4}, `{"B":2,"a":4,"b":1,"é":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonical(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonical = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestCanonicalStableAcrossMapOrder(t *testing.T) {
	m := map[string]any{}
	for i := range 64 {
		m[string(rune('A'+i))] = map[string]int{"y": i, "x": -i}
	}
	first, err := Canonical(m)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		again, err := Canonical(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("Canonical changed between calls:\n%s\n%s", first, again)
		}
	}
	// A receipt and its JSON round trip have the same canonical form.
	r := sample()
	a, err := Canonical(r)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.MarshalIndent(r, "", "    ")
	b, err := Canonical(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("Canonical(receipt) = %s\nCanonical(its JSON) = %s", a, b)
	}
}

func TestHash(t *testing.T) {
	got, err := Hash([]string{"echo", "<hi>"})
	if err != nil {
		t.Fatal(err)
	}
	if want := hash(`["echo","<hi>"]`); got != want {
		t.Errorf("Hash = %s, want %s", got, want)
	}
	if _, err := Hash(func() {}); err == nil {
		t.Error("Hash(func) succeeded")
	}
}

func TestSignVerify(t *testing.T) {
	key := newKey(t)
	pub := key.Public().(ed25519.PublicKey)
	s, err := Sign(key, sample())
	if err != nil {
		t.Fatal(err)
	}
	if s.Receipt.Version != Version {
		t.Errorf("Version = %d, want %d", s.Receipt.Version, Version)
	}
	if s.KeyID != KeyID(pub) || len(s.KeyID) != 32 {
		t.Errorf("KeyID = %q, want %q (32 hex)", s.KeyID, KeyID(pub))
	}
	if err := Verify(s, nil); err != nil {
		t.Errorf("Verify(nil): %v", err)
	}
	if err := Verify(s, pub); err != nil {
		t.Errorf("Verify(pub): %v", err)
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	key, other := newKey(t), newKey(t)
	pub := key.Public().(ed25519.PublicKey)
	tests := []struct {
		name    string
		tamper  func(s *Signed)
		trusted ed25519.PublicKey
		want    error
	}{
		{"run id", func(s *Signed) { s.Receipt.RunID = "run-2" }, nil, ErrBadSignature},
		{"artifact sha256", func(s *Signed) { s.Receipt.Artifacts[1].SHA256 = hash("forged") }, nil, ErrBadSignature},
		{"artifact dropped", func(s *Signed) { s.Receipt.Artifacts = s.Receipt.Artifacts[:1] }, nil, ErrBadSignature},
		{"exit code", func(s *Signed) { s.Receipt.ExitCode = 1 }, nil, ErrBadSignature},
		{"stdout bytes", func(s *Signed) { s.Receipt.Stdout.Bytes++ }, nil, ErrBadSignature},
		{"stdout truncated", func(s *Signed) { s.Receipt.Stdout.Truncated = true }, nil, ErrBadSignature},
		{"runtime flag", func(s *Signed) { s.Receipt.Policy.Runtime.Flags = s.Receipt.Policy.Runtime.Flags[:1] }, nil, ErrBadSignature},
		{"limit", func(s *Signed) { s.Receipt.Policy.Limits.MemoryBytes *= 2 }, nil, ErrBadSignature},
		{"open files", func(s *Signed) { s.Receipt.Policy.Limits.OpenFiles++ }, nil, ErrBadSignature},
		{"job id", func(s *Signed) { s.Receipt.JobID = "other" }, nil, ErrBadSignature},
		{"pass", func(s *Signed) { s.Receipt.Pass = new(true) }, nil, ErrBadSignature},
		{"captured stdout", func(s *Signed) { s.Receipt.Stdout.CapturedSHA256 = hash("forged") }, nil, ErrBadSignature},
		{"finish time", func(s *Signed) { s.Receipt.FinishedAt = s.Receipt.FinishedAt.Add(time.Nanosecond) }, nil, ErrBadSignature},
		{"signature byte", func(s *Signed) { s.Signature[7] ^= 1 }, nil, ErrBadSignature},
		{"signature cut", func(s *Signed) { s.Signature = s.Signature[:10] }, nil, ErrBadSignature},
		{"key id", func(s *Signed) { s.KeyID = KeyID(other.Public().(ed25519.PublicKey)) }, nil, ErrInvalid},
		{"public key swapped, key id kept", func(s *Signed) { s.PublicKey = other.Public().(ed25519.PublicKey) }, nil, ErrInvalid},
		{"public key and key id swapped", func(s *Signed) {
			s.PublicKey = other.Public().(ed25519.PublicKey)
			s.KeyID = KeyID(s.PublicKey)
		}, nil, ErrBadSignature},
		{"public key cut", func(s *Signed) { s.PublicKey = s.PublicKey[:31] }, nil, ErrInvalid},
		{"re-signed by another key", func(s *Signed) {
			forged, err := Sign(other, s.Receipt)
			if err != nil {
				t.Fatal(err)
			}
			*s = forged
		}, pub, ErrUntrustedKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Sign(key, sample())
			if err != nil {
				t.Fatal(err)
			}
			tt.tamper(&s)
			if err := Verify(s, tt.trusted); !errors.Is(err, tt.want) {
				t.Errorf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestVerifyWithoutTrustedKeyOnlyChecksConsistency(t *testing.T) {
	// Anyone can sign a receipt with their own key; only pinning the key
	// tells the two apart.
	forged, err := Sign(newKey(t), sample())
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(forged, nil); err != nil {
		t.Errorf("Verify(nil) = %v, want nil", err)
	}
	if err := Verify(forged, ed25519.PublicKey{}); !errors.Is(err, ErrUntrustedKey) {
		t.Errorf("Verify(empty trusted key) = %v, want ErrUntrustedKey", err)
	}
}

func TestSanityChecks(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *Receipt)
	}{
		{"version", func(r *Receipt) { r.Version = 3 }},
		{"policy hash", func(r *Receipt) { r.PolicySHA256 = hash("other") }},
		{"policy changed under its hash", func(r *Receipt) { r.Policy.Limits.Pids++ }},
		{"policy isolation", func(r *Receipt) { r.Isolation = "seccomp" }},
		{"policy runtime", func(r *Receipt) { r.Runtime = "runc" }},
		{"cpus disagree", func(r *Receipt) { r.Policy.Limits.CPUs = 2; r.PolicySHA256 = mustHash(r.Policy) }},
		{"captured more than written", func(r *Receipt) { r.Stdout.CapturedBytes = 4 }},
		{"tail without truncation", func(r *Receipt) { r.Stdout.TailBytes = 1; r.Stdout.CapturedBytes = 2 }},
		{"captured hash", func(r *Receipt) { r.Stderr.CapturedSHA256 = "" }},
		{"empty run id", func(r *Receipt) { r.RunID = "" }},
		{"image by tag", func(r *Receipt) { r.Image = "alpine:3.20" }},
		{"image short", func(r *Receipt) { r.Image = "sha256:abc" }},
		{"manifest not a digest", func(r *Receipt) { r.ImageManifest = hash("m") }},
		{"uppercase hex", func(r *Receipt) { r.PolicySHA256 = strings.ToUpper(hash("p")) }},
		{"argv short", func(r *Receipt) { r.ArgvSHA256 = "00" }},
		{"seccomp prefixed", func(r *Receipt) { r.SeccompSHA256 = "sha256:" + hash("s") }},
		{"stdout hash", func(r *Receipt) { r.Stdout.SHA256 = "x" }},
		{"input hash", func(r *Receipt) { r.Inputs[0].SHA256 = hash("i")[:63] + "g" }},
		{"artifact size", func(r *Receipt) { r.Artifacts[0].Size = -1 }},
	}
	key := newKey(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sample()
			r.Version = Version
			tt.mutate(&r)
			if _, err := Sign(key, r); !errors.Is(err, ErrInvalid) {
				t.Errorf("Sign = %v, want ErrInvalid", err)
			}
			// Signed anyway, bypassing Sign: Verify still refuses it.
			msg, err := Canonical(r)
			if err != nil {
				t.Fatal(err)
			}
			pub := key.Public().(ed25519.PublicKey)
			s := Signed{Receipt: r, KeyID: KeyID(pub), PublicKey: pub, Signature: ed25519.Sign(key, msg)}
			if err := Verify(s, pub); !errors.Is(err, ErrInvalid) {
				t.Errorf("Verify = %v, want ErrInvalid", err)
			}
		})
	}
	// Optional hashes may be absent.
	r := sample()
	r.ImageManifest, r.SeccompSHA256, r.Policy.SeccompSHA256, r.Stderr.SHA256 = "", "", "", ""
	r.PolicySHA256 = mustHash(r.Policy)
	if _, err := Sign(key, r); err != nil {
		t.Errorf("Sign without optional hashes: %v", err)
	}
}

func TestReadWrite(t *testing.T) {
	key := newKey(t)
	r := sample()
	r.StartedAt = time.Now() // carries a monotonic reading and a zone
	r.FinishedAt = r.StartedAt.Add(time.Second)
	r.Artifacts[0].Path = "a<b>&c.txt"
	s, err := Sign(key, r)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "a<b>&c.txt") {
		t.Errorf("Write escaped HTML:\n%s", buf.String())
	}
	got, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("Read(Write(s)) differs:\n got %+v\nwant %+v", got, s)
	}
	if err := Verify(got, key.Public().(ed25519.PublicKey)); err != nil {
		t.Errorf("Verify after round trip: %v", err)
	}

	for name, in := range map[string]string{
		"unknown field": strings.Replace(buf.String(), `"key_id"`, `"note":"unsigned","key_id"`, 1),
		"trailing data": buf.String() + "{}",
		"not JSON":      "receipt",
	} {
		if _, err := Read(strings.NewReader(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Read(%s) = %v, want ErrInvalid", name, err)
		}
	}
}

func TestExplain(t *testing.T) {
	r := sample()
	r.Artifacts[0].Path = "evil\x1b[2J.txt"
	r.Snapshot = hash("manifest")
	s, err := Sign(newKey(t), r)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Explain()
	for _, want := range []string{
		"run run-1 ran image " + r.Image,
		"gvisor (runsc release-20250512.0, flags --network=none --oci-seccomp)",
		"policy sha256:" + r.PolicySHA256,
		"in a sandbox restored from snapshot sha256:" + r.Snapshot,
		"seccomp profile sha256:" + r.SeccompSHA256,
		"argv sha256:" + r.ArgvSHA256,
		"1 input\n",
		"in/data.csv sha256:" + hash("data"),
		"stdout sha256:" + hash("out") + " (3 bytes)",
		"2 artifacts",
		`"evil\x1b[2J.txt"`,
		"ended exited (exit code 0) at 2025-06-01T10:00:01.623456789Z",
		"signed by key " + s.KeyID,
		"It does not prove: that the host",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Explain lacks %q:\n%s", want, got)
		}
	}
	if strings.ContainsRune(got, 0x1b) {
		t.Errorf("Explain passed a raw escape through:\n%s", got)
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equal(k2) {
		t.Error("second call returned a different key")
	}
	path := filepath.Join(dir, KeyFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("key mode = %04o, want 0600", perm)
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("key directory: %v, mode %04o, want 0700", err, di.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("-----BEGIN PRIVATE KEY-----\n")) {
		t.Errorf("key file is not a PEM PRIVATE KEY:\n%s", data)
	}
	// The key signs what it loads as.
	s, err := Sign(k2, sample())
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(s, k1.Public().(ed25519.PublicKey)); err != nil {
		t.Error(err)
	}
}

func TestLoadOrCreateKeyConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	const n = 20
	keys := make([]ed25519.PrivateKey, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			keys[i], errs[i] = LoadOrCreateKey(dir)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("creator %d: %v", i, errs[i])
		}
		if !keys[i].Equal(keys[0]) {
			t.Errorf("creator %d got a different key", i)
		}
	}
	// No temporary files are left behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != KeyFile {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("key directory holds %q, want only %q", names, KeyFile)
	}
}

func TestLoadOrCreateKeyRefuses(t *testing.T) {
	t.Run("readable by others", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := LoadOrCreateKey(dir); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, KeyFile)
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOrCreateKey(dir)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("LoadOrCreateKey = %v, want an error saying chmod 600", err)
		}
	})
	t.Run("directory writable by others", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOrCreateKey(dir)
		if err == nil || !strings.Contains(err.Error(), "chmod 700") {
			t.Errorf("LoadOrCreateKey = %v, want an error saying chmod 700", err)
		}
	})
	t.Run("truncated key is not replaced", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := LoadOrCreateKey(dir); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, KeyFile)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		half := data[:len(data)/2]
		if err := os.WriteFile(path, half, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateKey(dir); err == nil {
			t.Error("LoadOrCreateKey accepted a truncated key")
		}
		if now, _ := os.ReadFile(path); !bytes.Equal(now, half) {
			t.Error("LoadOrCreateKey replaced the truncated key")
		}
	})
}

// A receipt names the pod an airlock node ran it for, signed; one that
// names none signs the bytes it did before pod_uid existed.
func TestPodUID(t *testing.T) {
	key := newKey(t)
	r := sample()
	plain, err := Canonical(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "pod_uid") {
		t.Errorf("a receipt of no pod signs a pod_uid: %s", plain)
	}
	r.PodUID = "0b5e6a7c-uid"
	s, err := Sign(key, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(s, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.Explain(); !strings.Contains(got, "for Kubernetes pod UID 0b5e6a7c-uid") {
		t.Errorf("Explain does not name the pod:\n%s", got)
	}
	var buf bytes.Buffer
	if err := s.Write(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := Read(&buf)
	if err != nil || back.Receipt.PodUID != r.PodUID || Verify(back, nil) != nil {
		t.Errorf("read back: %+v, %v", back.Receipt.PodUID, err)
	}
	for _, uid := range []string{"", "another-pod"} {
		s2 := s
		s2.Receipt.PodUID = uid
		if err := Verify(s2, nil); !errors.Is(err, ErrBadSignature) {
			t.Errorf("pod_uid changed to %q: Verify = %v", uid, err)
		}
	}
}
