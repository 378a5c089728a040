package e2etest

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Upstream serves body to every request on the host's loopback until the
// test ends, and returns its address ("127.0.0.1:PORT"): a stand-in for a
// host a sandbox may reach, which it can reach only through its egress
// proxy, since the proxy dials from the host's namespace.
func Upstream(t testing.TB, body string) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}
