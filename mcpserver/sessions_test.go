package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/service"
)

// withSessionTimeout shortens the SDK's idle timeout of HTTP sessions.
func withSessionTimeout(d time.Duration) Option { return func(s *Server) { s.sessionTimeout = d } }

// serveHTTP serves a Server's HTTPHandler on a real HTTP server.
func serveHTTP(t *testing.T, opts ...Option) (*Server, string) {
	t.Helper()
	s := New(service.New(t.TempDir(), &fuzztest.NoEngines{}), opts...)
	srv := httptest.NewServer(s.HTTPHandler())
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// dial opens a session with the SDK's own streamable HTTP client.
func dial(t *testing.T, url string) (*mcp.ClientSession, error) {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// initialize posts a bare initialize, which opens a session, and returns
// the answer's status, session ID and body.
func initialize(t *testing.T, url string) (int, string, []byte) {
	t.Helper()
	status, id, body, err := postInitialize(url)
	if err != nil {
		t.Fatal(err)
	}
	return status, id, body
}

func postInitialize(url string) (int, string, []byte, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), body, err
}

// httpSessions counts the server's initialized sessions over streamable
// HTTP, by the SDK's own list.
func httpSessions(s *Server) int {
	n := 0
	for ss := range s.MCP().Sessions() {
		if ss.ID() != "" && ss.InitializeParams() != nil {
			n++
		}
	}
	return n
}

// Past the cap a new session is refused with 429 over_limit and a message
// naming the cap and the fix, open sessions keep working, and closing one
// lets exactly one new one in.
func TestMaxSessions(t *testing.T) {
	const max = 3
	s, url := serveHTTP(t, WithMaxSessions(max))
	ctx := context.Background()

	// A session over another transport takes no slot.
	st, _ := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()

	var open []*mcp.ClientSession
	for i := range max {
		cs, err := dial(t, url)
		if err != nil {
			t.Fatalf("session %d of %d: %v", i+1, max, err)
		}
		open = append(open, cs)
	}

	// The SDK's client is refused; it reports 429 by its status text.
	if _, err := dial(t, url); err == nil || !strings.Contains(err.Error(), http.StatusText(http.StatusTooManyRequests)) {
		t.Fatalf("session %d of %d: %v; want it refused with 429", max+1, max, err)
	}
	// The answer itself is airlock's error shape, saying what to do.
	status, id, body := initialize(t, url)
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || status != http.StatusTooManyRequests || id != "" || e.Error.Kind != "over_limit" {
		t.Fatalf("initialize past the cap: %d, session %q, %s; want 429 over_limit and no session", status, id, body)
	}
	for _, want := range []string{"3 MCP sessions are open", "--max-mcp-sessions 3", "close sessions no longer used", "idle session closes by itself after 30m0s", "raise airlock serve's --max-mcp-sessions"} {
		if !strings.Contains(e.Error.Message, want) {
			t.Errorf("refusal %q does not say %q", e.Error.Message, want)
		}
	}

	// Open sessions keep working at the cap.
	for i, cs := range open {
		if lt, err := cs.ListTools(ctx, nil); err != nil || len(lt.Tools) != len(toolNames) {
			t.Fatalf("session %d at the cap: %v", i+1, err)
		}
	}

	// Closing one (the client sends DELETE) frees its slot, for one.
	if err := open[0].Close(); err != nil {
		t.Fatal(err)
	}
	cs, err := dial(t, url)
	if err != nil {
		t.Fatalf("a session after one closed: %v", err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, url); err == nil {
		t.Fatal("a second session was let into one freed slot")
	}
	if n := httpSessions(s); n != max {
		t.Errorf("%d HTTP sessions open, want %d", n, max)
	}
}

// A session the SDK closes for idleness frees its slot too: the count is
// the SDK's, not a shadow that only DELETE would lower.
func TestMaxSessionsIdleTimeout(t *testing.T) {
	s, url := serveHTTP(t, WithMaxSessions(1), withSessionTimeout(time.Millisecond))
	status, id, body := initialize(t, url)
	if status != http.StatusOK || id == "" {
		t.Fatalf("the first session: %d, session %q, %s", status, id, body)
	}
	// Poll until the SDK has closed it (no DELETE is ever sent).
	for deadline := time.Now().Add(time.Minute); httpSessions(s) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle session was never closed by the SDK")
		}
	}
	if status, id, body := initialize(t, url); status != http.StatusOK || id == "" {
		t.Fatalf("a session after the first timed out: %d, session %q, %s", status, id, body)
	}
}

// Sessions opened all at once never pass the cap.
func TestMaxSessionsConcurrent(t *testing.T) {
	const max, tries = 4, 16
	s, url := serveHTTP(t, WithMaxSessions(max))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ok, over int
	)
	for range tries {
		wg.Go(func() {
			status, _, body, err := postInitialize(url)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case status == http.StatusOK:
				ok++
			case status == http.StatusTooManyRequests:
				over++
			default:
				t.Errorf("initialize: %d %s", status, body)
			}
		})
	}
	wg.Wait()
	if ok < 1 || ok > max || ok+over != tries {
		t.Errorf("%d sessions opened and %d refused of %d; want 1 to %d opened, the rest refused", ok, over, tries, max)
	}
	if n := httpSessions(s); n != ok {
		t.Errorf("%d HTTP sessions open, want %d", n, ok)
	}
}

// A message of many JSON values is refused before the SDK decodes it, at
// little cost, naming the cap; one within it goes on to the SDK.
func TestMessageValuesBounded(t *testing.T) {
	_, url := serveHTTP(t)
	_, id, _ := initialize(t, url)
	post := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	call := func(hosts int) string {
		return `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_create","arguments":{"allow_host":[` +
			strings.TrimSuffix(strings.Repeat(`"",`, hosts), ",") + `]}}}`
	}
	big := call(2 << 20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	status, body := post(big)
	runtime.ReadMemStats(&after)
	if status != http.StatusBadRequest || !strings.Contains(body, "invalid_input") || !strings.Contains(body, "JSON values") {
		t.Fatalf("%d MiB of empty hosts: %d %.300s; want 400 invalid_input naming the cap", len(big)>>20, status, body)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(5*len(big)) {
		t.Errorf("refusing a %d-byte message allocated %d bytes", len(big), got)
	}
	if status, body := post(call(300)); status == http.StatusBadRequest && strings.Contains(body, "JSON values") {
		t.Errorf("300 hosts: refused by the value cap: %.300s", body)
	}
}
