package wire

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
)

func ptr[T any](v T) *T { return &v }

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name string
		in   Policy
		want isolation.Limits
		mode isolation.Mode
		err  string // the whole message, when refused
	}{
		{name: "nothing given", in: Policy{}},
		{name: "every limit", in: Policy{Timeout: "1m30s", Memory: "1.5GiB", CPUs: "0.5", Pids: ptr[int64](32), OutputLimit: "1MiB", TmpSize: "16MiB", FileSize: "8MiB", Isolation: "seccomp", Engine: "oci"},
			want: isolation.Limits{Timeout: 90 * time.Second, Memory: 3 << 29, CPUs: 500, Pids: 32, Output: 1 << 20, Tmp: 16 << 20, FileSize: 8 << 20}, mode: isolation.Seccomp},
		{name: "malformed size", in: Policy{Memory: "lots"}, err: `memory "lots": give a positive size such as "512MiB" or "1.5GiB"`},
		{name: "negative size", in: Policy{TmpSize: "-1MiB"}, err: `tmp_size "-1MiB": give a positive size such as "512MiB" or "1.5GiB"`},
		{name: "zero size", in: Policy{Memory: "0MiB"}, err: `memory "0MiB": ` + zeroLimit},
		{name: "zero duration", in: Policy{Timeout: "0s"}, err: `timeout "0s": ` + zeroLimit},
		{name: "bare zero", in: Policy{Timeout: "0"}, err: `timeout "0": ` + zeroLimit},
		{name: "duration without unit", in: Policy{Timeout: "30"}, err: `timeout "30": give a positive duration such as "30s" or "500ms"`},
		{name: "zero cpus", in: Policy{CPUs: "0.0"}, err: `cpus "0.0": ` + zeroLimit},
		{name: "cpus below the kernel's minimum quota", in: Policy{CPUs: "0.005"}, err: `cpus "0.005": give at least 0.01 CPUs`},
		{name: "the fewest cpus", in: Policy{CPUs: "0.01"}, want: isolation.Limits{CPUs: 10}},
		{name: "too many cpus", in: Policy{CPUs: "100000"}, err: `cpus "100000": give a positive number of CPUs such as 0.5 or 2, at most 1024`},
		{name: "zero pids", in: Policy{Pids: ptr[int64](0)}, err: "pids 0: " + zeroLimit},
		{name: "negative pids", in: Policy{Pids: ptr[int64](-4)}, err: "pids -4: give a positive number"},
		{name: "unknown isolation", in: Policy{Isolation: "none"}, err: `isolation "none": use gvisor or seccomp`},
		{name: "unknown engine", in: Policy{Engine: "podman"}, err: `engine "podman": use auto, oci or docker`},
		{name: "cpus not a plain decimal", in: Policy{CPUs: "1e1"}, err: `cpus "1e1": give a positive number of CPUs such as 0.5 or 2, at most 1024`},
		// An empty list given would read, on a template, as not given: the
		// template's whole egress.
		{name: "empty allow_host", in: Policy{AllowHost: []string{}}, err: `allow_host []: an empty list is neither "no network" nor "the template's"; leave it out for the default (the template's hosts, or none), or list the hosts to keep`},
		{name: "empty credential", in: Policy{Credential: []string{}}, err: `credential []: an empty list is neither "no credentials" nor "the template's"; leave it out for the default (the template's credentials, or none), or list the routes to keep`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.in.Parse()
			if c.err != "" {
				var we *Error
				if err == nil || err.Error() != c.err || !errors.As(err, &we) || !errdefs.IsInvalidArgument(err) {
					t.Fatalf("error %v, want the invalid input %q", err, c.err)
				}
				return
			}
			if err != nil || p.Limits != c.want || p.Isolation != c.mode {
				t.Fatalf("%+v %q, %v; want %+v %q", p.Limits, p.Isolation, err, c.want, c.mode)
			}
		})
	}
}

func TestParseOutput(t *testing.T) {
	o, err := (&Policy{OutDir: "/results", OutLimit: "8MiB", OutFiles: ptr(10), ArtifactMaxSize: "1MiB", ArtifactTypes: []string{" text/plain ", ""}, ArtifactsAllowDotfiles: true}).ParseOutput()
	want := Output{Dir: "/results", Size: 8 << 20, Files: 10, MaxFileSize: 1 << 20, Types: []string{"text/plain"}, AllowDotfiles: true}
	if err != nil || o.Dir != want.Dir || o.Size != want.Size || o.Files != want.Files || o.MaxFileSize != want.MaxFileSize || strings.Join(o.Types, ",") != "text/plain" || !o.AllowDotfiles {
		t.Fatalf("%+v, %v; want %+v", o, err, want)
	}
	if o, err := (&Policy{OutFiles: ptr(MaxOutFiles)}).ParseOutput(); err != nil || o.Files != MaxOutFiles {
		t.Fatalf("out_files at its cap: %+v, %v", o, err)
	}
	if o, err := (&Policy{OutDir: "none"}).ParseOutput(); err != nil || !o.Disabled {
		t.Fatalf("out_dir none: %+v, %v", o, err)
	}
	for _, c := range []struct {
		in  Policy
		err string
	}{
		{Policy{OutDir: "none", OutLimit: "1MiB"}, `out_dir "none": there is no output directory`},
		{Policy{OutFiles: ptr(0)}, "out_files 0: " + zeroLimit},
		{Policy{OutFiles: ptr(MaxOutFiles + 1)}, "out_files 1000001: give at most 1000000"},
		{Policy{OutFiles: ptr(math.MaxInt)}, fmt.Sprintf("out_files %d: give at most 1000000", math.MaxInt)},
		{Policy{ArtifactTypes: []string{"text/klingon"}}, `artifact_types "text/klingon": unknown MIME type`},
		{Policy{ArtifactTypes: []string{" "}}, `artifact_types " ": empty`},
	} {
		if _, err := c.in.ParseOutput(); err == nil || !strings.HasPrefix(err.Error(), c.err) || !errdefs.IsInvalidArgument(err) {
			t.Errorf("%+v: %v, want invalid input starting %q", c.in, err, c.err)
		}
	}
}

func TestSeconds(t *testing.T) {
	if d, err := Seconds("timeout_s", nil); d != 0 || err != nil {
		t.Fatalf("nil: %v, %v", d, err)
	}
	if d, err := Seconds("timeout_s", ptr(2.5)); d != 2500*time.Millisecond || err != nil {
		t.Fatalf("2.5: %v, %v", d, err)
	}
	for v, want := range map[float64]string{
		0:      "timeout_s 0: " + zeroLimit,
		-3:     "timeout_s -3: give a positive number of seconds",
		1e300:  "timeout_s 1e+300: give a positive number of seconds",
		0.0001: "timeout_s 0.0001: give at least 0.001 seconds",
	} {
		if _, err := Seconds("timeout_s", ptr(v)); err == nil || !strings.HasPrefix(err.Error(), want) || !errdefs.IsInvalidArgument(err) {
			t.Errorf("%v: %v, want %q", v, err, want)
		}
	}
}

// Seconds at the largest duration are refused as too large: MaxInt64/1e9
// as a bound rounds up to 2^63ns, which passed it, overflowed to a
// negative duration, and was refused as "at least 0.001 seconds".
func TestSecondsAtTheLargestDuration(t *testing.T) {
	edge := math.MaxInt64 / float64(time.Second)
	if _, err := Seconds("timeout", &edge); err == nil || !strings.HasPrefix(err.Error(), "timeout 9.223372036854776e+09: give a positive number of seconds") {
		t.Errorf("Seconds(%v): %v; want the too-large refusal", edge, err)
	}
	below := math.Nextafter(edge, 0)
	if d, err := Seconds("timeout", &below); err != nil || d <= 0 {
		t.Errorf("Seconds(%v) = %v, %v; want a positive duration", below, d, err)
	}
}

// A size that reads as a number gives the parser's reason, not "give a
// positive size".
func TestSizeSaysWhy(t *testing.T) {
	for s, want := range map[string]string{
		"1.5":        `memory "1.5": not a whole number of bytes`,
		"9000000TiB": `memory "9000000TiB": too large`,
		"0x5":        `memory "0x5": give a positive size`,
	} {
		if _, err := Size("memory", s); err == nil || !strings.HasPrefix(err.Error(), want) || !errdefs.IsInvalidArgument(err) {
			t.Errorf("Size(%q): %v; want %q", s, err, want)
		}
	}
}

// A zero in any spelling is told as a zero limit, never as malformed.
func TestIsZero(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "00": true, "0.0": true, "0s": true, "0MiB": true, " 0 ": true, "0.": true, "0h0m": true,
		"": false, ".": false, "0.5": false, "10": false, "05s": false, "1": false, "-0": false, "0x5": false, "0 5": false,
	} {
		if isZero(s) != want {
			t.Errorf("isZero(%q) = %v", s, !want)
		}
	}
	if _, err := Size("memory", "0.0GiB"); err == nil || !strings.Contains(err.Error(), zeroLimit) {
		t.Errorf("0.0GiB: %v", err)
	}
}

func TestParseEgress(t *testing.T) {
	p, err := (&Policy{AllowHost: []string{"PyPI.org.", "pypi.org", "*.pythonhosted.org:443"}, Credential: []string{"api.example.com=authorization:API_KEY", "api.example.com=Authorization:API_KEY"}}).Parse()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Egress.Allow.Entries(), " "); got != "pypi.org *.pythonhosted.org:443" {
		t.Errorf("allowlist %q", got)
	}
	if len(p.Egress.Credentials) != 1 || p.Egress.Credentials[0].Header != "Authorization" || p.Egress.Credentials[0].Env != "API_KEY" {
		t.Errorf("credentials %+v", p.Egress.Credentials)
	}
	if p, err := (&Policy{}).Parse(); err != nil || p.Egress.On() || p.Egress.Bytes != 0 {
		t.Errorf("nothing given: egress %+v, %v", p.Egress, err)
	}
	// The limit parses on its own: a template may give the hosts.
	if p, err := (&Policy{EgressLimit: "4GiB"}).Parse(); err != nil || p.Egress.Bytes != 4<<30 {
		t.Errorf("egress_limit 4GiB: egress %+v, %v", p.Egress, err)
	}
	for _, c := range []struct {
		in  Policy
		err string
	}{
		{Policy{AllowHost: []string{"pypi.org", "*"}}, `allow_host "*": a wildcard is "*." before a name`},
		{Policy{AllowHost: []string{"127.1"}}, `allow_host "127.1": a host name's last part starts with a letter`},
		{Policy{Credential: []string{"*.example.com=Authorization:KEY"}}, `credential "*.example.com=Authorization:KEY": the host is one name`},
		{Policy{Credential: []string{"api.example.com"}}, `credential "api.example.com": give HOST=HEADER:ENV or HOST=HEADER:@FILE`},
		{Policy{AllowHost: []string{"pypi.org"}, EgressLimit: "0GiB"}, `egress_limit "0GiB": a limit of zero`},
		{Policy{AllowHost: []string{"pypi.org"}, EgressLimit: "lots"}, `egress_limit "lots": give a positive size`},
	} {
		_, err := c.in.Parse()
		var we *Error
		if !errors.As(err, &we) || !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), c.err) {
			t.Errorf("%+v: %v; want the invalid input %q", c.in, err, c.err)
		}
		if we != nil && !strings.HasPrefix(we.AsFlag(), "--") {
			t.Errorf("%+v: as a flag: %s", c.in, we.AsFlag())
		}
	}
}

// A client names credentials only to narrow its template's: its own would
// read airlock's environment or a host file.
func TestParseClientCredentials(t *testing.T) {
	w := Policy{Credential: []string{"api.example.com=Authorization:@/etc/shadow"}}
	_, err := w.ParseClient("")
	var we *Error
	if !errors.As(err, &we) || we.Field != "credential" || !errdefs.IsInvalidArgument(err) {
		t.Errorf("a client's own credential: %v", err)
	}
	if p, err := w.ParseClient("tmpl"); err != nil || len(p.Egress.Credentials) != 1 {
		t.Errorf("a client's credential on a template: %+v, %v", p.Egress, err)
	}
	if p, err := (&Policy{AllowHost: []string{"pypi.org"}}).ParseClient(""); err != nil || !p.Egress.On() {
		t.Errorf("a client's allowlist: %+v, %v", p.Egress, err)
	}
}

// Each list field is capped, in the same words on every face: the MIME
// and egress lists go into the sandbox's record and every receipt, and a
// request body of --max-body could otherwise fill them with a million
// entries.
func TestListCaps(t *testing.T) {
	n := func(k int, s string) []string {
		l := make([]string, k)
		for i := range l {
			l[i] = s
		}
		return l
	}
	hosts := func(k int) []string {
		l := make([]string, k)
		for i := range l {
			l[i] = fmt.Sprintf("h%d.example.com", i)
		}
		return l
	}
	for _, c := range []struct {
		name string
		in   Policy
		err  string // the whole message
	}{
		{"artifact_types", Policy{ArtifactTypes: n(MaxMIMETypes+1, "text/plain")}, "artifact_types with 65 entries: give at most 64 MIME types"},
		{"allow_host", Policy{AllowHost: hosts(MaxAllowHosts + 1)}, "allow_host with 257 entries: give at most 256 HOST[:PORT] entries; a wildcard such as *.example.com covers a domain's hosts"},
		{"credential", Policy{Credential: n(MaxCredentials+1, "api.example.com=Authorization:KEY")}, "credential with 65 entries: give at most 64 credential routes"},
		{"env", Policy{Env: n(MaxEnv+1, "A=1")}, "env with 1025 entries: give at most 1024 NAME=VALUE entries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.in.Parse()
			if err == nil {
				_, err = c.in.ParseOutput()
			}
			var we *Error
			if !errors.As(err, &we) || we.Field != c.name || !errdefs.IsInvalidArgument(err) || err.Error() != c.err {
				t.Fatalf("%v; want the invalid input %q", err, c.err)
			}
		})
	}
	if _, err := MIMEList("download_types", n(1_000_000, "text/plain")); err == nil || err.Error() != "download_types with 1000000 entries: give at most 64 MIME types" {
		t.Errorf("a million download_types: %v", err)
	}
	// At the caps, lists pass; repeats are dropped.
	if l, err := MIMEList("download_types", append(n(MaxMIMETypes-1, "text/plain"), "", "application/json")); err != nil || strings.Join(l, ",") != "text/plain,application/json" {
		t.Errorf("64 MIME types: %q, %v", l, err)
	}
	if p, err := (&Policy{AllowHost: hosts(MaxAllowHosts), Env: n(MaxEnv, "A=1")}).Parse(); err != nil || len(p.Egress.Allow.Entries()) != MaxAllowHosts {
		t.Errorf("256 hosts, 1024 env entries: %v", err)
	}
}
