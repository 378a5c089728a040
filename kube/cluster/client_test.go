package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// serve is an API server answering with h, and a client of it.
func serve(t *testing.T, h http.Handler) *Client {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return New(&Config{Server: srv.URL, TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig, Token: "tok"})
}

// An API server's redirect is refused, naming its status: neither a
// request nor a pod exec's WebSocket follows it, so no credentials and no
// request reach where it points, on another port of the same host
// included.
func TestNoRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		t.Errorf("the redirect was followed: %s %s, Authorization %q", r.Method, r.URL, r.Header.Get("Authorization"))
		http.Error(w, "INTERNAL-SECRET-BODY", http.StatusInternalServerError)
	}))
	defer other.Close()
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/latest/meta-data/", http.StatusFound)
	}))
	_, err := c.Pod(context.Background(), "default", "p")
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "302") || !strings.Contains(err.Error(), "redirect") || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("a request: %v; want unavailable, naming the 302 redirect", err)
	}
	if _, err := c.Exec(context.Background(), Exec{Namespace: "default", Pod: "p", Argv: []string{"true"}}); !strings.Contains(fmt.Sprint(err), "302") {
		t.Errorf("a pod exec: %v; want an error naming the 302 redirect", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target was asked %d times", n)
	}
}

// An API server's message reaches an error cut to MaxPrintable bytes, and
// with its control sequences escaped: it is the server's word, and it
// ends on a person's terminal.
func TestStatusErrorPrintable(t *testing.T) {
	msg := "\x1b]0;pwned\x07\x1b[2J\x1b[1;1Hall 40 jobs passed \u202e" + strings.Repeat("é", 600)
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(Status{Status: "Failure", Message: msg, Code: http.StatusForbidden})
	}))
	_, err := c.Pod(context.Background(), "default", "p")
	if !errdefs.IsPermissionDenied(err) {
		t.Fatalf("err = %v; want permission denied", err)
	}
	s := err.Error()
	if strings.ContainsAny(s, "\x1b\x07\u202e") || !strings.Contains(s, `\x1b]0;pwned`) || !strings.HasSuffix(s, "é…") {
		t.Errorf("the message is not escaped and cut: %q", s)
	}
	if len(s) > 2*MaxPrintable {
		t.Errorf("the error is %d bytes; the server's message is kept to %d", len(s), MaxPrintable)
	}
}

// A pod's log is read up to PodLog's own limit, past the cap of other
// answers, and a longer one says that it was cut.
func TestPodLogLimit(t *testing.T) {
	const limit = 2*maxBody + 3
	var size atomic.Int64
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/default/pods/p/log" || r.URL.Query().Get("limitBytes") != fmt.Sprint(limit+1) {
			t.Errorf("asked %s", r.URL)
		}
		// The server ignores limitBytes: the client holds its own.
		w.Write(bytes.Repeat([]byte("x"), int(size.Load())))
	}))
	for _, tc := range []struct {
		size      int64
		truncated bool
	}{{maxBody + 1, false}, {limit, false}, {limit + 1, true}, {limit + 100, true}} {
		size.Store(tc.size)
		log, truncated, err := c.PodLog(context.Background(), "default", "p", "sandbox", limit)
		if err != nil || truncated != tc.truncated || int64(len(log)) != min(tc.size, limit) {
			t.Errorf("a log of %d bytes: %d bytes read, truncated %v, %v; want %d, %v", tc.size, len(log), truncated, err, min(tc.size, limit), tc.truncated)
		}
	}
}

// An API server that sends its answer's headers and then stalls inside
// its body holds a request no longer than the client's request timeout:
// the error is unavailable, saying so and naming the server.
func TestRequestTimeoutCoversTheBody(t *testing.T) {
	done := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `{"metadata":`)
		w.(http.Flusher).Flush()
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(done)
	c := New(&Config{Server: srv.URL, TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig, Token: "tok"}, WithRequestTimeout(100*time.Millisecond))
	for name, call := range map[string]func() error{
		"read":   func() error { _, err := c.Pod(context.Background(), "default", "p"); return err },
		"delete": func() error { return c.DeleteClaim(context.Background(), "default", "c") },
		"log": func() error {
			_, _, err := c.PodLog(context.Background(), "default", "p", "sandbox", 1<<20)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			errc := make(chan error, 1)
			go func() { errc <- call() }()
			select {
			case err := <-errc:
				if !errdefs.IsUnavailable(err) || !strings.Contains(fmt.Sprint(err), "no whole answer within 100ms") || !strings.Contains(err.Error(), srv.URL) {
					t.Errorf("err = %v; want unavailable, naming the server and the timeout", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("the request has not ended after 10s")
			}
		})
	}
}

// A pod's or node's name from the cluster is a DNS-1123 subdomain of at
// most 253 bytes, or it is refused, shown escaped.
func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"py-x7k2q":                  true,
		"lab-07.example.com":        true,
		"a":                         true,
		strings.Repeat("n", 253):    true,
		strings.Repeat("n", 254):    false,
		"":                          false,
		"-py":                       false,
		"py.":                       false,
		"Py":                        false,
		"py_x":                      false,
		"py/x":                      false,
		"py\x1b]0;pwned\x07\x1b[2J": false,
	} {
		err := CheckName("pod", name)
		if (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v", name, err)
		}
		if err != nil && (!errdefs.IsUnavailable(err) || strings.Contains(err.Error(), "\x1b") || len(err.Error()) > 2*MaxPrintable) {
			t.Errorf("CheckName(%.40q) = %.100q: want unavailable, escaped and cut", name, err)
		}
	}
}
