package egress

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseCredential(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"api.example.com=Authorization:API_KEY", "api.example.com=Authorization:API_KEY"},
		{"API.example.com.=x-api-key:_k1", "api.example.com=X-Api-Key:_k1"},
		{"api.example.com:8443=Authorization:@/run/secrets/k", "api.example.com:8443=Authorization:@/run/secrets/k"},
	} {
		c, err := ParseCredential(tc.in)
		if err != nil || c.String() != tc.want {
			t.Errorf("ParseCredential(%q) = %v, %v; want %q", tc.in, c, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, says string }{
		{"api.example.com", "HOST=HEADER:ENV"},
		{"api.example.com=Authorization", "HOST=HEADER:ENV"},
		{"*.example.com=Authorization:K", "not a wildcard"},
		{"127.0.0.1=Authorization:K", "not a wildcard"},
		{"=Authorization:K", "one name"},
		{"api.example.com=Bad Header:K", "the header is a name"},
		{"api.example.com=:K", "the header is a name"},
		{"api.example.com=Host:K", "sets Host itself"},
		{"api.example.com=transfer-encoding:K", "sets Transfer-Encoding itself"},
		{"api.example.com=Authorization:1K", "environment variable"},
		{"api.example.com=Authorization:", "environment variable"},
		{"api.example.com=Authorization:@", "file's path"},
	} {
		_, err := ParseCredential(tc.in)
		if err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseCredential(%q) = %v, want invalid input saying %q", tc.in, err, tc.says)
		}
	}
}

const testSecret = "sk-test-0123456789abcdefghijkl"

func TestCredentialLoad(t *testing.T) {
	env := map[string]string{"KEY": testSecret, "EMPTY": "", "CRLF": "a\r\nX-Evil: 1"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("a", MaxCredentialBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, in := range []string{"api.example.com=Authorization:KEY", "api.example.com=Authorization:@" + file} {
		c, _ := ParseCredential(in)
		r, err := c.Load(lookup)
		if err != nil || r.value != testSecret || r.Port != 443 || r.Header != "Authorization" {
			t.Fatalf("Load(%s) = %v, %v", in, r, err)
		}
		for _, s := range []string{fmt.Sprint(r), fmt.Sprintf("%+v %#v %s %v", r, r, &r, []Route{r})} {
			if strings.Contains(s, testSecret) {
				t.Errorf("a printed Route shows its value: %s", s)
			}
		}
	}
	for _, tc := range []struct{ in, says string }{
		{"h.example=A:MISSING", "has no MISSING"},
		{"h.example=A:EMPTY", "empty"},
		{"h.example=A:CRLF", "line break"},
		{"h.example=A:@" + big, "longer than"},
		{"h.example=A:@" + dir, "not a regular file"},
		{"h.example=A:@" + filepath.Join(dir, "none"), "no such file"},
	} {
		c, err := ParseCredential(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Load(lookup)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Load(%s) = %v, want it to say %q", tc.in, err, tc.says)
		}
		if err != nil && strings.Contains(err.Error(), "X-Evil") {
			t.Errorf("an error shows the value: %v", err)
		}
	}
}

func TestNarrowCredentials(t *testing.T) {
	parse := func(ss ...string) []Credential {
		var out []Credential
		for _, s := range ss {
			c, err := ParseCredential(s)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		return out
	}
	tmpl := parse("a.example=Authorization:A", "b.example=X-Key:@/k")
	for _, run := range [][]Credential{nil, parse("a.example=Authorization:A"), tmpl} {
		if got, err := NarrowCredentials(tmpl, run); err != nil || len(got) != len(run) {
			t.Errorf("NarrowCredentials(%v) = %v, %v", run, got, err)
		}
	}
	for _, run := range [][]Credential{
		parse("c.example=Authorization:A"),
		parse("a.example=Authorization:OTHER"),
		parse("a.example:8443=Authorization:A"),
		parse("b.example=X-Key:@/other"),
	} {
		if _, err := NarrowCredentials(tmpl, run); err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "never add") {
			t.Errorf("NarrowCredentials(%v) = %v", run, err)
		}
	}
}

// TestCredentialFileAbsolute: a relative @FILE is the file in the
// directory the credential was given in, and stays that file for the
// processes that read it later from elsewhere (a sandbox's supervisor
// runs in /).
func TestCredentialFileAbsolute(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tok"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	c, err := ParseCredential("api.example.com=Authorization:@tok")
	if err != nil {
		t.Fatal(err)
	}
	if c.File != filepath.Join(dir, "tok") {
		t.Errorf("@tok kept as %q, want %q", c.File, filepath.Join(dir, "tok"))
	}
	back, err := ParseCredential(c.String()) // a state file's or a template's round trip
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir("/")
	if _, err := back.Load(os.LookupEnv); err != nil {
		t.Errorf("read back from /: %v", err)
	}
}
