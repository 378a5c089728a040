package egress

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/pkitest"
)

// tlsUpstream is a TLS server on 127.0.0.1 whose certificate names
// example.com, with a pool holding its CA, and the Authorization headers it
// was sent.
type tlsUpstream struct {
	*httptest.Server
	roots *x509.CertPool
	mu    sync.Mutex
	auths []string
}

func newTLSUpstream(t *testing.T, h http.HandlerFunc) *tlsUpstream {
	u := &tlsUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auths = append(u.auths, r.Header.Get("Authorization"))
		u.mu.Unlock()
		h(w, r)
	}))
	var cert tls.Certificate
	cert, u.roots = newCA(t, "example.com")
	u.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	u.StartTLS()
	t.Cleanup(u.Close)
	return u
}

// newCA makes a CA of the test's own and a certificate it signs for name
// and 127.0.0.1.
func newCA(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	pki := pkitest.New(t, name)
	return pki.Cert, pki.Pool
}

func (u *tlsUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auths...)
}

func route(t *testing.T, host string, port uint16) Route {
	t.Helper()
	c, err := ParseCredential(fmt.Sprintf("%s:%d=Authorization:KEY", host, port))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Load(func(string) (string, bool) { return "Bearer " + testSecret, true })
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// routeHarness is a proxy with a route to example.com (resolved to
// 127.0.0.1, listed with the upstream's port) whose TLS is verified
// against roots.
func routeHarness(t *testing.T, u *tlsUpstream, roots *x509.CertPool, allow ...string) *harness {
	port := portOf(t, u.URL)
	h := newHarness(t, append(allow, fmt.Sprintf("127.0.0.1:%d", port)), WithRoutes(route(t, "example.com", port)), WithRootCAs(roots))
	h.resolveTo("example.com", "127.0.0.1")
	return h
}

func TestRouteAddsHeader(t *testing.T) {
	u := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls=%v host=%s uri=%s", r.TLS != nil, r.Host, r.URL.RequestURI())
	})
	h := routeHarness(t, u, u.roots)
	req, _ := http.NewRequest("GET", "http://example.com/v1/models?x=1", nil)
	req.Header.Set("Authorization", "Bearer the-sandbox-own")
	resp, err := h.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	port := portOf(t, u.URL)
	if want := fmt.Sprintf("tls=true host=example.com:%d uri=/v1/models?x=1", port); resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("got %d %q, want %q", resp.StatusCode, body, want)
	}
	if got := u.seen(); len(got) != 1 || got[0] != "Bearer "+testSecret {
		t.Fatalf("the upstream saw Authorization %q", got)
	}
	r := h.last()
	checkRecord(t, r, KindCredential, "example.com", true, ReasonClosed)
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), testSecret) || strings.Contains(fmt.Sprintf("%+v", r), testSecret) {
		t.Errorf("the record holds the credential: %s", b)
	}
	if r.Port != 80 || r.Status != 200 || r.BytesUp == 0 {
		t.Errorf("record %+v", r)
	}
}

// TestRouteVerifiesCertificate: TLS to a host the roots do not vouch for,
// or whose certificate names another host, fails before any request is
// sent, so the header never leaves.
func TestRouteVerifiesCertificate(t *testing.T) {
	u := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	other := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	h := routeHarness(t, u, other.roots)
	code, body := get(t, h.client(nil), "http://example.com/")
	if code != 502 || !strings.Contains(body, ReasonTLS) {
		t.Errorf("untrusted CA: %d %q", code, body)
	}
	checkRecord(t, h.last(), KindCredential, "example.com", true, ReasonTLS)

	port := portOf(t, u.URL)
	h2 := newHarness(t, []string{fmt.Sprintf("127.0.0.1:%d", port)}, WithRoutes(route(t, "api.test", port)), WithRootCAs(u.roots))
	h2.resolveTo("api.test", "127.0.0.1")
	if code, _ := get(t, h2.client(nil), "http://api.test/"); code != 502 {
		t.Errorf("a certificate for another name: %d", code)
	}
	if got := u.seen(); len(got) != 0 {
		t.Errorf("the upstream was sent %q", got)
	}
}

// TestRouteRedirectNotFollowed: a redirect is passed back, not followed;
// a client that follows it through the proxy goes to the other host
// without the header.
func TestRouteRedirectNotFollowed(t *testing.T) {
	evil, evilSeen := upstream(t)
	evilPort := portOf(t, evil.URL)
	u := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("http://evil.test:%d/steal", evilPort), http.StatusFound)
	})
	h := routeHarness(t, u, u.roots, fmt.Sprintf("evil.test:%d", evilPort), fmt.Sprintf("127.0.0.1:%d", evilPort))
	h.resolveTo("evil.test", "127.0.0.1")

	resp, err := h.client(nil).Get("http://example.com/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 302 || evilSeen.count() != 0 {
		t.Fatalf("got %d; the other host saw %d requests", resp.StatusCode, evilSeen.count())
	}
	follow := h.client(nil)
	follow.CheckRedirect = nil
	if code, _ := get(t, follow, "http://example.com/"); code != 200 {
		t.Fatalf("following: %d", code)
	}
	if evilSeen.count() != 1 || evilSeen.reqs[0].Header.Get("Authorization") != "" {
		t.Fatalf("the other host saw %d requests, Authorization %q", evilSeen.count(), evilSeen.reqs[0].Header.Get("Authorization"))
	}
	// Records may be written in any order: a route's after its response
	// was passed back, which the client may already have followed.
	recs := h.records(3)
	routed := slices.DeleteFunc(slices.Clone(recs), func(r Record) bool { return r.Kind != KindCredential || r.Status != 302 })
	if len(routed) != 2 || !slices.ContainsFunc(recs, func(r Record) bool { return r.Kind == KindHTTP && r.Host == "evil.test" }) {
		t.Errorf("records %+v", recs)
	}
}

// TestRouteOnlyItsHost: the header is added for the route's name asked on
// port 80 only; its address, another port or CONNECT do not get it.
func TestRouteOnlyItsHost(t *testing.T) {
	u := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	port := portOf(t, u.URL)
	h := routeHarness(t, u, u.roots)
	cl := h.client(u.roots)
	// https:// goes by CONNECT, end to end: the proxy cannot add anything.
	if code, _ := get(t, cl, u.URL); code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	// http:// to the address: no route, plain HTTP to a TLS port.
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err == nil {
		resp.Body.Close()
	}
	if got := u.seen(); len(got) != 1 || got[0] != "" {
		t.Fatalf("the upstream saw Authorization %q", got)
	}
	// The route does not put its host on the allowlist for CONNECT.
	if st := h.connect(fmt.Sprintf("example.com:%d", port)); st != 403 {
		t.Errorf("CONNECT to the route's host: %d", st)
	}
}

// TestRouteEchoLimit documents the design's limit: a host trusted with a
// credential can echo it back to the sandbox. Only trust a route's host
// not to.
func TestRouteEchoLimit(t *testing.T) {
	u := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Authorization"))
	})
	h := routeHarness(t, u, u.roots)
	if _, body := get(t, h.client(nil), "http://example.com/echo"); body != "Bearer "+testSecret {
		t.Fatalf("got %q: if the proxy now hides echoed credentials, update docs/egress.md", body)
	}
	if r := h.last(); strings.Contains(fmt.Sprintf("%+v", r), testSecret) {
		t.Errorf("the record holds the credential: %+v", r)
	}
}

// TestRouteRebinding: a route's name resolving to an address not allowed
// is refused before TLS.
func TestRouteRebinding(t *testing.T) {
	u := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	port := portOf(t, u.URL)
	h := newHarness(t, nil, WithRoutes(route(t, "example.com", port)), WithRootCAs(u.roots))
	h.resolveTo("example.com", "127.0.0.1")
	if code, _ := get(t, h.client(nil), "http://example.com/"); code != 403 {
		t.Errorf("got %d", code)
	}
	checkRecord(t, h.last(), KindCredential, "example.com", false, ReasonAddress)
	if len(u.seen()) != 0 {
		t.Error("the upstream was reached")
	}
}

func TestNewRefusesRoutes(t *testing.T) {
	audit := func(Record) error { return nil }
	r := route(t, "example.com", 443)
	if _, err := New("x", Allowlist{}, audit, WithRoutes(r, r)); err == nil {
		t.Error("a route given twice")
	}
	if _, err := New("x", Allowlist{}, audit, WithRoutes(Route{Host: "example.com", Port: 443, Header: "A"})); err == nil {
		t.Error("a route not loaded")
	}
}
