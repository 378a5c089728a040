package egress

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Credential is one --credential HOST=HEADER:ENV or HOST=HEADER:@FILE, as
// given: which header the proxy sets on requests to HOST, and where its
// value comes from. It holds no value; Load reads it.
type Credential struct {
	// Host is the name the sandbox asks for and the proxy opens TLS to.
	Host string
	// Port is the TLS port the proxy connects to; 0 is 443.
	Port uint16
	// Header is the header's canonical name, such as "Authorization".
	Header string
	// Env names the variable of airlock's own environment holding the
	// value; empty when File is set.
	Env string
	// File holds the value (its final line break dropped).
	File string
}

const credentialField = "credential"

// MaxCredentialBytes caps a credential's value.
const MaxCredentialBytes = 16 << 10

// ParseCredential reads HOST[:PORT]=HEADER:ENV or HOST[:PORT]=HEADER:@FILE.
func ParseCredential(s string) (Credential, error) {
	const form = "give HOST=HEADER:ENV or HOST=HEADER:@FILE, such as api.example.com=Authorization:API_KEY"
	hostport, rest, ok := strings.Cut(s, "=")
	header, source, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return Credential{}, refuse(credentialField, s, form)
	}
	r, err := ParseRule(hostport)
	if err != nil || r.Host == "" || r.Host[0] == '*' {
		return Credential{}, refuse(credentialField, s, "the host is one name, such as api.example.com (with :PORT for TLS on a port other than 443): not a wildcard and not an IP address, since the proxy verifies the host's certificate for that name")
	}
	c := Credential{Host: r.Host, Port: r.Port}
	if !validToken(header) {
		return Credential{}, refuse(credentialField, s, "the header is a name such as Authorization or X-Api-Key: letters, digits and !#$%&'*+-.^_`|~")
	}
	c.Header = http.CanonicalHeaderKey(header)
	if reserved[c.Header] {
		return Credential{}, refuse(credentialField, s, fmt.Sprintf("the proxy sets %s itself; name another header", c.Header))
	}
	if file, ok := strings.CutPrefix(source, "@"); ok {
		if file == "" {
			return Credential{}, refuse(credentialField, s, "give a file's path after @, such as @/run/secrets/api-key")
		}
		// Read again later by other processes (a sandbox's supervisor runs
		// in /; a template's runs anywhere): kept absolute, from here.
		abs, err := filepath.Abs(file)
		if err != nil {
			return Credential{}, refuse(credentialField, s, fmt.Sprintf("the file's path: %v; give an absolute path", err))
		}
		c.File = abs
		return c, nil
	}
	if !validEnvName(source) {
		return Credential{}, refuse(credentialField, s, "the value comes from an environment variable such as API_KEY (letters, digits and '_', not starting with a digit), or from @FILE")
	}
	c.Env = source
	return c, nil
}

// String is c as ParseCredential reads it back. It holds no value.
func (c Credential) String() string {
	host := c.Host
	if c.Port != 0 {
		host += ":" + strconv.Itoa(int(c.Port))
	}
	src := c.Env
	if c.File != "" {
		src = "@" + c.File
	}
	return host + "=" + c.Header + ":" + src
}

// Load reads c's value, from lookupEnv (os.LookupEnv, at create) or from
// its file, into a Route. The value must be 1 to MaxCredentialBytes of
// header-safe bytes (no line break, no control character but tab); an
// error never holds it.
func (c Credential) Load(lookupEnv func(string) (string, bool)) (Route, error) {
	var v string
	if c.File != "" {
		b, err := readCapped(c.File, MaxCredentialBytes+2)
		if err != nil {
			return Route{}, fmt.Errorf("reading credential %s: %w", c, err)
		}
		v = string(b)
		v = strings.TrimSuffix(strings.TrimSuffix(v, "\n"), "\r")
	} else {
		var ok bool
		if v, ok = lookupEnv(c.Env); !ok {
			return Route{}, refuse(credentialField, c.String(), fmt.Sprintf("airlock's environment has no %s: set it, or give the value in a file with @FILE", c.Env))
		}
	}
	switch {
	case v == "":
		return Route{}, refuse(credentialField, c.String(), "the value is empty")
	case len(v) > MaxCredentialBytes:
		return Route{}, refuse(credentialField, c.String(), fmt.Sprintf("the value is longer than %d bytes", MaxCredentialBytes))
	case !validHeaderValue(v):
		return Route{}, refuse(credentialField, c.String(), "the value holds a line break or another control character; a header value cannot")
	}
	port := c.Port
	if port == 0 {
		port = 443
	}
	return Route{Host: c.Host, Port: port, Header: c.Header, value: v}, nil
}

func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// Route is a loaded credential: requests to http://Host/ through the proxy
// go to https://Host:Port/ with Header set. Its printed forms (%v, %+v,
// %#v, %s) never show the value.
type Route struct {
	Host   string
	Port   uint16
	Header string
	value  string
}

func (r Route) String() string {
	return fmt.Sprintf("%s:%d %s: [REDACTED]", r.Host, r.Port, r.Header)
}

// GoString keeps the value out of %#v.
func (r Route) GoString() string { return "egress.Route{" + r.String() + "}" }

// reserved are headers the proxy manages: framing, hop-by-hop and the
// host.
var reserved = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Proxy-Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true, "Upgrade": true,
	"Proxy-Authorization": true, "Proxy-Authenticate": true, "Expect": true,
}

func validToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// NarrowCredentials returns run when each of its credentials is one of
// tmpl's: a run may drop a template's credentials, never add or change
// one. Otherwise it returns an *Error for each that is not, joined.
func NarrowCredentials(tmpl, run []Credential) ([]Credential, error) {
	var errs []error
	for _, c := range run {
		if !slices.Contains(tmpl, c) {
			errs = append(errs, refuse(credentialField, c.String(), "this credential is not one of the template's; a run may remove credentials, never add or change them"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return run, nil
}
