//go:build e2e

package serve

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/server"
)

// Floods from an untrusted program or client must not grow the server:
// its peak resident memory (VmHWM) stays under peakCap, and the client is
// told what was left out or refused.
const peakCap = 256 << 20

// peakRSS is the server process's peak resident memory so far.
func (s *srv) peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", s.cmd.Process.Pid)
	return 0
}

func (s *srv) checkPeak(t *testing.T, after string) {
	t.Helper()
	peak := s.peakRSS(t)
	t.Logf("airlock serve's peak RSS after %s: %.1f MiB", after, float64(peak)/(1<<20))
	if peak >= peakCap {
		t.Fatalf("airlock serve's peak RSS after %s is %.1f MiB, want under %d MiB", after, float64(peak)/(1<<20), peakCap>>20)
	}
}

type fusionFlood struct {
	Status    string `json:"status"`
	Message   string `json:"message"`
	RunResult struct {
		Status, Stderr string
		ReturnCode     int `json:"return_code"`
	} `json:"run_result"`
	Files        map[string]string `json:"files"`
	FilesOmitted []struct {
		Name, Reason, Message string
	} `json:"files_omitted"`
}

// TestServeFetchFilesFlood: a program writes four 63MB files and
// fetch_files names each twice (f0.txt and /home/user/f0.txt), once, then
// three requests at once. /run_code has no engine field: it takes auto,
// so on the docker pair the server gets a root without runsc, where auto
// is docker.
func TestServeFetchFilesFlood(t *testing.T) {
	var s *srv
	if engineName == "docker" {
		s = startServer(t, dockerRoot(t)...)
	} else {
		s = startServer(t)
	}
	a := s.apis()[0] // the unix socket: no token, whatever the root
	s.checkPeak(t, "start")
	const size = 63_000_000 // 63MB: four fill most of the 256MiB workspace
	code := fmt.Sprintf(`chunk = b"x" * 1000000
for i in range(4):
    with open("f%%d.txt" %% i, "wb") as f:
        for _ in range(%d):
            f.write(chunk)
`, size/1000000)
	var fetch []string
	for i := range 4 {
		fetch = append(fetch, fmt.Sprintf("f%d.txt", i), fmt.Sprintf("/home/user/f%d.txt", i))
	}
	body := mustJSON(map[string]any{"code": code, "language": "python", "run_timeout": 120, "fetch_files": fetch})
	flood := func() (fusionFlood, error) {
		req, _ := http.NewRequest("POST", a.base+"/run_code", bytes.NewReader(body))
		resp, err := a.client.Do(req)
		if err != nil {
			return fusionFlood{}, err
		}
		defer resp.Body.Close()
		// Past the cap, the response is not read whole here either.
		b, err := io.ReadAll(io.LimitReader(resp.Body, peakCap))
		if err != nil {
			return fusionFlood{}, err
		}
		var r fusionFlood
		if err := json.Unmarshal(b, &r); err != nil {
			return r, fmt.Errorf("status %d, %d bytes read: %v", resp.StatusCode, len(b), err)
		}
		return r, nil
	}
	check := func(r fusionFlood) error {
		if r.Status != "Success" {
			return fmt.Errorf("status %s (%+v): %s", r.Status, r.RunResult, r.Message)
		}
		// The default cap (64MiB in all) takes f0.txt only.
		if len(r.Files) != 1 {
			return fmt.Errorf("%d files, want f0.txt only; omitted %+v", len(r.Files), r.FilesOmitted)
		}
		got, err := base64.StdEncoding.DecodeString(r.Files["f0.txt"])
		if err != nil || len(got) != size || bytes.Count(got, []byte("x")) != size {
			return fmt.Errorf("f0.txt: %d bytes, %v", len(got), err)
		}
		want := map[string]string{"/home/user/f0.txt": "duplicate", "f1.txt": "too_large", "/home/user/f1.txt": "duplicate",
			"f2.txt": "too_large", "/home/user/f2.txt": "duplicate", "f3.txt": "too_large", "/home/user/f3.txt": "duplicate"}
		for _, o := range r.FilesOmitted {
			if want[o.Name] != o.Reason || o.Message == "" {
				return fmt.Errorf("omitted %q as %q (%s), want %q", o.Name, o.Reason, o.Message, want[o.Name])
			}
			delete(want, o.Name)
		}
		if len(want) > 0 || !strings.Contains(r.Message, "files_omitted") {
			return fmt.Errorf("not named as left out: %v; message %q", want, r.Message)
		}
		return nil
	}

	r, err := flood()
	s.checkPeak(t, "one fetch_files flood")
	if err != nil {
		t.Fatal(err)
	}
	if err := check(r); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			r, err := flood()
			if err == nil {
				err = check(r)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	s.checkPeak(t, "three fetch_files floods at once")
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// dockerRoot returns airlock serve's flags for a root of the test's own
// without runsc, where the engine auto (/run_code's) is docker, with the
// token of the tests' root (startServer reads it there).
func dockerRoot(t *testing.T) []string {
	root, err := e2etest.Root(t.TempDir(), e2etest.SysRoot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "tools")); err != nil {
		t.Fatal(err)
	}
	if _, err := server.LoadToken(rootDir, ""); err != nil {
		t.Fatal(err)
	}
	return []string{"--root", root, "--token-file", filepath.Join(rootDir, "server", "token")}
}

// TestServeWebSocketInputFlood: input messages to an exec whose program
// never reads stdin. 15MiB messages are refused with an error frame; many
// messages within the limit stop being read once the stdin queue is full,
// so the client's writes wait (TCP's flow control) instead of the server
// growing.
func TestServeWebSocketInputFlood(t *testing.T) {
	never := map[string]any{"type": "execute", "argv": []string{"python3", "-c", "import time; time.sleep(600)"}, "stdin": true, "timeout": "20s"}

	// events reads c's messages until exit, error or the connection's end.
	events := func(c *websocket.Conn, got chan<- wsEvent) {
		defer close(got)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			var ev wsEvent
			if json.Unmarshal(b, &ev) == nil {
				got <- ev
			}
		}
	}
	// start starts a server of its own (its peak is the flood's), and an
	// exec in a sandbox of it.
	start := func(t *testing.T) (*srv, *websocket.Conn, chan wsEvent, int) {
		s := startServer(t)
		id := s.apis()[0].create(t, nil).ID
		s.checkPeak(t, "start")
		c := wsConn(t, s, id)
		t.Cleanup(func() { c.CloseNow() })
		wsSend(t, c, never)
		_, b, err := c.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var started struct {
			Type            string `json:"type"`
			MaxMessageBytes int    `json:"max_message_bytes"`
		}
		json.Unmarshal(b, &started)
		if started.Type != "started" {
			t.Fatalf("want started: %s", b)
		}
		got := make(chan wsEvent, 16)
		go events(c, got)
		return s, c, got, started.MaxMessageBytes
	}

	t.Run("Big", func(t *testing.T) {
		// 60 messages of 15MiB.
		s, c, got, _ := start(t)
		msg := mustJSON(map[string]any{"type": "input", "data": strings.Repeat("x", 15<<20)})
		go func() {
			for range 60 {
				if c.Write(context.Background(), websocket.MessageText, msg) != nil {
					return
				}
			}
		}()
		var refused *wsEvent
		for ev := range got {
			if ev.Type == "error" {
				refused = &ev
				break
			}
			if ev.Type == "exit" {
				break
			}
		}
		c.CloseNow()
		s.checkPeak(t, "60 input messages of 15MiB")
		if refused == nil || refused.Error.Kind != "invalid_input" || !strings.Contains(refused.Error.Message, "max_message_bytes") {
			t.Fatalf("a 15MiB input message was not refused with an error naming the limit: %+v", refused)
		}
	})

	t.Run("Backpressure", func(t *testing.T) {
		s, c, got, limit := start(t)
		if limit <= 0 {
			limit = 1 << 20 // a server that does not say
		}
		msg := mustJSON(map[string]any{"type": "input", "data": strings.Repeat("x", limit-64)})
		if len(msg) > limit {
			t.Fatalf("a message of %d bytes for a limit of %d", len(msg), limit)
		}
		// 400 messages, as fast as the server takes them.
		var sent atomic.Int64
		go func() {
			for range 400 {
				if c.Write(context.Background(), websocket.MessageText, msg) != nil {
					return
				}
				sent.Add(1)
			}
		}()
		for ev := range got {
			if ev.Type == "error" {
				t.Fatalf("error: %+v", ev.Error)
			}
			if ev.Type == "exit" {
				break
			}
		}
		// The exec ran 20s without reading a byte: what the server took
		// is its queue, one waiting message and the sockets' buffers.
		n := sent.Load()
		c.CloseNow()
		t.Logf("%d messages of %d bytes were sent before the exec ended", n, len(msg))
		if n*int64(len(msg)) > 64<<20 {
			t.Errorf("%d messages (%d MiB) were taken from the client by an exec that reads none", n, n*int64(len(msg))>>20)
		}
		s.checkPeak(t, fmt.Sprintf("input messages of %d bytes to a program that does not read them", len(msg)))
	})
}

// TestServeFetchFilesCount: past 32 files, fetch_files entries are left
// out as too_many, and named.
func TestServeFetchFilesCount(t *testing.T) {
	s := startServer(t)
	a := s.apis()[0]
	var fetch []string
	for i := range 40 {
		fetch = append(fetch, fmt.Sprintf("n%02d.txt", i))
	}
	code := `for i in range(40): open("n%02d.txt" % i, "w").write("file %d\n" % i)`
	var r fusionFlood
	a.call(t, "POST", "/run_code", map[string]any{"code": code, "language": "python", "run_timeout": 30, "fetch_files": fetch}, 200, &r)
	if r.Status != "Success" || len(r.Files) != 32 || len(r.FilesOmitted) != 8 {
		t.Fatalf("status %s, %d files, omitted %+v", r.Status, len(r.Files), r.FilesOmitted)
	}
	for i, o := range r.FilesOmitted {
		if o.Name != fetch[32+i] || o.Reason != "too_many" {
			t.Fatalf("omitted %+v, want %s as too_many", o, fetch[32+i])
		}
	}
	if b, _ := base64.StdEncoding.DecodeString(r.Files["n31.txt"]); string(b) != "file 31\n" {
		t.Fatalf("n31.txt: %q", b)
	}
}
