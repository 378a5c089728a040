//go:build e2e

package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/runner"
)

// TestServeSession runs the sessions cases through the API, over the
// socket and over TCP.
func TestServeSession(t *testing.T) {
	s := startServer(t)
	for _, a := range s.apis() {
		t.Run(a.name, func(t *testing.T) { testSession(t, a) })
	}
}

func testSession(t *testing.T, a api) {
	si := a.create(t, map[string]any{"labels": map[string]string{"suite": "serve"}, "file_size": "2TiB"})
	id := si.ID
	if si.State != "ready" || si.Engine != engineName || si.Labels["suite"] != "serve" {
		t.Fatalf("create: %+v", si)
	}
	// A client learns nothing of the host's paths or processes.
	for _, path := range []string{"/v1/sandboxes/" + id, "/v1/sandboxes"} {
		if st, _, b := a.do(t, "GET", path, nil); st != http.StatusOK || strings.Contains(string(b), rootDir) || strings.Contains(string(b), `"areas"`) || strings.Contains(string(b), `"creator"`) {
			t.Fatalf("GET %s shows the host's side: %d %s", path, st, b)
		}
	}
	// A module written by one exec is imported by the next.
	if res := a.exec(t, id, map[string]any{"argv": []string{"python3", "-c", "open('mod42.py','w').write('ANSWER = 42\\n')"}}); res.ExitCode != 0 || res.SandboxID != id {
		t.Fatalf("writing the module: %+v", res)
	}
	if res := a.exec(t, id, map[string]any{"argv": []string{"python3", "-c", "import mod42; print(mod42.ANSWER)"}}); string(res.Stdout.Head) != "42\n" {
		t.Fatalf("importing the module: %+v", res)
	}
	// A detached server on loopback, reached from a second exec.
	if res := a.exec(t, id, map[string]any{"argv": []string{"python3", "-m", "http.server", "--bind", "127.0.0.1", "8123"}, "detach": true}); res.Reason != "exited" {
		t.Fatalf("detached server: %+v", res)
	}
	fetch := "import time, urllib.request\nfor i in range(150):\n    try:\n        print(urllib.request.urlopen('http://127.0.0.1:8123/mod42.py', timeout=2).read().decode(), end='')\n        break\n    except Exception:\n        time.sleep(0.1)\n"
	if res := a.exec(t, id, map[string]any{"argv": []string{"python3", "-c", fetch}}); string(res.Stdout.Head) != "ANSWER = 42\n" {
		t.Fatalf("reaching the detached server: %+v", res)
	}
	// A CSV made inside comes out with its sha256.
	gen := "rows = ['x,y'] + ['%s,%s' % ('7' * (i % 5 + 1), '3' * (i % 3 + 1)) for i in range(100)]\nopen('result.csv', 'w').write('\\n'.join(rows) + '\\n')"
	if res := a.exec(t, id, map[string]any{"argv": []string{"python3", "-c", gen}}); res.ExitCode != 0 {
		t.Fatalf("writing the CSV: %+v", res)
	}
	csv := "x,y\n"
	for i := range 100 {
		csv += strings.Repeat("7", i%5+1) + "," + strings.Repeat("3", i%3+1) + "\n"
	}
	want := sha256.Sum256([]byte(csv))
	st, hdr, body := a.do(t, "GET", "/v1/sandboxes/"+id+"/files?path=/home/user/result.csv", nil)
	if got := sha256.Sum256(body); st != 200 || got != want || hdr.Get("X-Airlock-Sha256") != hex.EncodeToString(want[:]) || hdr.Get("Content-Type") != "text/csv" {
		t.Fatalf("CSV download: %d %v sha256 %x, want %x", st, hdr, got, want)
	}
	// An upload is read back by an exec.
	var tr runner.Transfer
	st, _, body = a.do(t, "PUT", "/v1/sandboxes/"+id+"/files?path=/home/user/in/data.txt", strings.NewReader("uploaded\n"))
	if json.Unmarshal(body, &tr); st != 200 || tr.Decision != "accepted" || tr.Size != 9 {
		t.Fatalf("upload: %d %s", st, body)
	}
	if res := a.exec(t, id, map[string]any{"argv": []string{"cat", "in/data.txt"}}); string(res.Stdout.Head) != "uploaded\n" {
		t.Fatalf("reading the upload: %+v", res)
	}
	// NDJSON streaming.
	st, hdr, body = a.do(t, "POST", "/v1/sandboxes/"+id+"/exec", strings.NewReader(`{"argv":["sh","-c","echo out; echo err >&2"]}`), "Accept", "application/x-ndjson")
	if st != 200 || hdr.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("ndjson: %d %v %s", st, hdr, body)
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var last struct {
		Type   string
		Result runner.Result
	}
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if len(lines) < 3 || last.Type != "exit" || last.Result.ExitCode != 0 || !strings.Contains(string(body), `"data_b64":"b3V0Cg=="`) {
		t.Fatalf("ndjson events: %s", body)
	}

	t.Run("HostileTransfers", func(t *testing.T) { testHostile(t, a, id) })
	t.Run("TimeoutLeavesNothing", func(t *testing.T) {
		res := a.exec(t, id, map[string]any{"argv": []string{"sh", "-c", "sleep 100 & sleep 100"}, "timeout": "1s"})
		if res.Reason != "timeout" {
			t.Fatalf("exec with timeout 1s: %+v", res)
		}
		ps := "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep' || true"
		if res := a.exec(t, id, map[string]any{"argv": []string{"sh", "-c", ps}}); strings.TrimSpace(string(res.Stdout.Head)) != "0" {
			t.Fatalf("sleeps left after the timeout: %q", res.Stdout.Head)
		}
		if res := a.exec(t, id, map[string]any{"argv": []string{"python3", "-c", "import mod42; print(mod42.ANSWER)"}}); string(res.Stdout.Head) != "42\n" {
			t.Fatalf("the exec after the timeout: %+v", res)
		}
	})

	// Delete, then exec is not_found; delete again succeeds.
	a.call(t, "DELETE", "/v1/sandboxes/"+id, nil, http.StatusNoContent, nil)
	var e apiError
	a.call(t, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}}, http.StatusNotFound, &e)
	if e.Error.Kind != "not_found" {
		t.Fatalf("exec after delete: %+v", e)
	}
	a.call(t, "DELETE", "/v1/sandboxes/"+id, nil, http.StatusNoContent, nil)
	a.call(t, "GET", "/v1/sandboxes/"+id, nil, http.StatusNotFound, nil)
}

func testHostile(t *testing.T, a api, id string) {
	plant := "ln -s /etc evil; ln -s /etc/shadow shadow; mkfifo fifo; truncate -s 1T big; mkdir adir"
	if res := a.exec(t, id, map[string]any{"argv": []string{"sh", "-c", plant}}); res.ExitCode != 0 {
		t.Fatalf("planting: %+v", res)
	}
	etc, _ := os.ReadFile("/etc/passwd")
	// gVisor keeps a FIFO in its own memory: the host never sees one.
	fifo := "not_regular"
	if isolationName == "gvisor" {
		fifo = "not_found"
	}
	for _, c := range []struct{ name, method, path, reason string }{
		{"DownloadFIFO", "GET", "/home/user/fifo", fifo},
		{"UploadDotDot", "PUT", "../../etc/x", "invalid_path"},
		{"UploadEtcPasswd", "PUT", "/etc/passwd", "invalid_path"},
		{"UploadThroughSymlink", "PUT", "/home/user/evil/x", "symlink"},
		{"DownloadSymlinkToShadow", "GET", "/home/user/shadow", "symlink"},
		{"DownloadSparse1TiB", "GET", "/home/user/big", "too_large"},
		{"DownloadDirectory", "GET", "/home/user/adir", "is_directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _, body := a.do(t, c.method, "/v1/sandboxes/"+id+"/files?path="+c.path, strings.NewReader("owned\n"))
			var e apiError
			kind, status := "invalid_input", 400
			if c.reason == "not_found" {
				kind, status = "not_found", 404
			}
			if json.Unmarshal(body, &e); st != status || e.Error.Kind != kind || e.Error.Reason != c.reason {
				t.Fatalf("%d %s; want %d %s (%s)", st, body, status, kind, c.reason)
			}
		})
	}
	if now, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(now, etc) {
		t.Fatal("/etc/passwd changed")
	}
	// An upload past the workspace is cut off while streaming.
	st, _, body := a.do(t, "PUT", "/v1/sandboxes/"+id+"/files?path=/home/user/huge", &zeros{n: 2 << 30})
	var e apiError
	if json.Unmarshal(body, &e) != nil || st != 400 || (e.Error.Reason != "too_large" && e.Error.Reason != "no_space") {
		t.Fatalf("a 2GiB upload into a 1GiB workspace: %d %s", st, body)
	}
	a.exec(t, id, map[string]any{"argv": []string{"rm", "-f", "big", "huge"}})
}

// zeros reads n zero bytes.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n)
	clear(p[:k])
	z.n -= k
	return int(k), nil
}

func TestServeAuth(t *testing.T) {
	s := startServer(t)
	for _, c := range []struct{ name, hdr string }{{"none", ""}, {"wrong", "Bearer " + strings.Repeat("0", len(s.token))}} {
		req, _ := http.NewRequest("GET", "http://"+s.addr+"/v1/sandboxes", nil)
		if c.hdr != "" {
			req.Header.Set("Authorization", c.hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e apiError
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 401 || e.Error.Kind != "unauthorized" {
			t.Fatalf("%s token: %d %+v", c.name, resp.StatusCode, e)
		}
	}
	// The WebSocket needs the token too.
	if _, resp, err := websocket.Dial(context.Background(), "ws://"+s.addr+"/v1/sandboxes/sb-0123456789abcdef0123/exec/ws", nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("websocket without a token: %v %v", resp, err)
	}
	// A non-loopback address without TLS is refused.
	out, err := exec.Command(airlockBin, "--root", rootDir, "serve", "--socket", t.TempDir()+"/x.sock", "--listen", "0.0.0.0:0").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 64 || !strings.Contains(string(out), "--tls-cert") {
		t.Fatalf("--listen 0.0.0.0:0 without TLS: %v %s", err, out)
	}
}

// wsConn dials the exec WebSocket over TCP.
func wsConn(t *testing.T, s *srv, id string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), "ws://"+s.addr+"/v1/sandboxes/"+id+"/exec/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + s.token}}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 24)
	return c
}

type wsEvent struct {
	Type    string        `json:"type"`
	ExecID  string        `json:"exec_id"`
	Data    string        `json:"data"`
	DataB64 []byte        `json:"data_b64"`
	Offset  int64         `json:"offset"`
	Result  runner.Result `json:"result"`
	Error   struct{ Kind, Message string }
}

func wsSend(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

func wsRead(t *testing.T, c *websocket.Conn) wsEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("websocket read: %v", err)
	}
	var ev wsEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type == "error" {
		t.Fatalf("websocket error: %+v", ev.Error)
	}
	return ev
}

func TestServeWebSocket(t *testing.T) {
	s := startServer(t)
	a := s.apis()[0]
	id := a.create(t, map[string]any{"output_limit": "4MiB"}).ID // its execs may ask up to 4MiB

	// The first chunk arrives before the command ends: the program waits
	// for input that is only sent once the chunk is here.
	c := wsConn(t, s, id)
	wsSend(t, c, map[string]any{"type": "execute", "argv": []string{"python3", "-c", "print('first', flush=True); print('got', input())"}, "stdin": true})
	if ev := wsRead(t, c); ev.Type != "started" || !strings.HasPrefix(ev.ExecID, "ex-") {
		t.Fatalf("want started: %+v", ev)
	}
	if ev := wsRead(t, c); ev.Type != "stdout" || string(ev.DataB64) != "first\n" || ev.Data != "first\n" || ev.Offset != 0 {
		t.Fatalf("want the first chunk: %+v", ev)
	}
	wsSend(t, c, map[string]any{"type": "input", "data": "hello\n"})
	wsSend(t, c, map[string]any{"type": "close_stdin"})
	var out []byte
	for {
		ev := wsRead(t, c)
		if ev.Type == "exit" {
			if ev.Result.ExitCode != 0 || string(out) != "got hello\n" {
				t.Fatalf("exit %+v after %q", ev.Result, out)
			}
			break
		}
		out = append(out, ev.DataB64...)
	}
	c.CloseNow()

	// A reconnect mid-stream resumes with no byte lost or repeated: the
	// program writes 1MiB of distinct lines, waits for input, then
	// writes 1MiB more; the client drops after part of the first half.
	prog := `import sys
for i in range(16384): sys.stdout.write("%063d\n" % i)
sys.stdout.flush()
sys.stderr.write("half\n"); sys.stderr.flush()
input()
for i in range(16384, 32768): sys.stdout.write("%063d\n" % i)
`
	var want bytes.Buffer
	for i := range 32768 {
		fmt.Fprintf(&want, "%063d\n", i)
	}
	c = wsConn(t, s, id)
	wsSend(t, c, map[string]any{"type": "execute", "argv": []string{"python3", "-c", prog}, "stdin": true, "output_limit": "4MiB"})
	execID := wsRead(t, c).ExecID
	var stdout, stderr []byte
	for len(stdout) < 200<<10 {
		ev := wsRead(t, c)
		switch ev.Type {
		case "stdout":
			if ev.Offset != int64(len(stdout)) {
				t.Fatalf("offset %d, have %d", ev.Offset, len(stdout))
			}
			stdout = append(stdout, ev.DataB64...)
		case "stderr":
			stderr = append(stderr, ev.DataB64...)
		}
	}
	c.CloseNow() // dropped mid-stream
	c = wsConn(t, s, id)
	wsSend(t, c, map[string]any{"type": "reconnect", "exec_id": execID, "stdout_offset": len(stdout), "stderr_offset": len(stderr)})
	if ev := wsRead(t, c); ev.Type != "started" || ev.ExecID != execID {
		t.Fatalf("reconnect: %+v", ev)
	}
	sent := false
	var res runner.Result
	for res.Reason == "" {
		ev := wsRead(t, c)
		switch ev.Type {
		case "stdout":
			if ev.Offset != int64(len(stdout)) {
				t.Fatalf("after reconnect: offset %d, have %d", ev.Offset, len(stdout))
			}
			stdout = append(stdout, ev.DataB64...)
		case "stderr":
			if ev.Offset != int64(len(stderr)) {
				t.Fatalf("stderr offset %d, have %d", ev.Offset, len(stderr))
			}
			stderr = append(stderr, ev.DataB64...)
		case "exit":
			res = ev.Result
		}
		if !sent && string(stderr) == "half\n" {
			wsSend(t, c, map[string]any{"type": "input", "data": "go\n"})
			wsSend(t, c, map[string]any{"type": "close_stdin"})
			sent = true
		}
	}
	c.CloseNow()
	got, exp := sha256.Sum256(stdout), sha256.Sum256(want.Bytes())
	if got != exp || res.Stdout.SHA256 != hex.EncodeToString(exp[:]) || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("stream sha256 %x (%d bytes), want %x (%d); result %s %d, its sha256 %s", got, len(stdout), exp, want.Len(), res.Reason, res.ExitCode, res.Stdout.SHA256)
	}

	// kill ends the program; its Result says killed.
	c = wsConn(t, s, id)
	wsSend(t, c, map[string]any{"type": "execute", "argv": []string{"sleep", "600"}})
	wsRead(t, c)
	wsSend(t, c, map[string]any{"type": "kill"})
	if ev := wsRead(t, c); ev.Type != "exit" || ev.Result.Reason != "killed" {
		t.Fatalf("after kill: %+v", ev)
	}
	c.CloseNow()
}

func TestServeConcurrentExecs(t *testing.T) {
	s := startServer(t)
	a := s.apis()[0]
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = a.create(t, nil).ID
	}
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for n := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ids[n%10]
			b, _ := json.Marshal(map[string]any{"argv": []string{"sh", "-c", fmt.Sprintf("echo %d-$(cat /proc/sys/kernel/hostname)", n)}, "timeout": "120s"})
			req, _ := http.NewRequest("POST", a.base+"/v1/sandboxes/"+id+"/exec", bytes.NewReader(b))
			resp, err := a.client.Do(req)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			var res runner.Result
			json.NewDecoder(resp.Body).Decode(&res)
			if resp.StatusCode != 200 || res.ExitCode != 0 || res.SandboxID != id || string(res.Stdout.Head) != fmt.Sprintf("%d-sandbox\n", n) {
				errs <- fmt.Sprintf("exec %d in %s: %d %+v", n, id, resp.StatusCode, res)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestServeKill9(t *testing.T) {
	s := startServer(t)
	a := s.apis()[0]
	var ids []string
	for range 2 {
		// Deleted below through the restarted server.
		var si runner.SandboxInfo
		a.call(t, "POST", "/v1/sandboxes", map[string]any{"engine": engineName, "isolation": isolationName}, http.StatusCreated, &si)
		ids = append(ids, si.ID)
	}
	// One more that goes idle: its supervisor ends it without the server.
	var idle runner.SandboxInfo
	a.call(t, "POST", "/v1/sandboxes", map[string]any{"engine": engineName, "isolation": isolationName, "idle_timeout": "3s"}, http.StatusCreated, &idle)
	// An exec in progress when the server is SIGKILLed.
	started := make(chan struct{})
	go func() {
		close(started)
		b, _ := json.Marshal(map[string]any{"argv": []string{"sleep", "30"}, "timeout": "40s"})
		req, _ := http.NewRequest("POST", a.base+"/v1/sandboxes/"+ids[0]+"/exec", bytes.NewReader(b))
		if resp, err := a.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	deadline := time.Now().Add(30 * time.Second)
	for {
		var si runner.SandboxInfo
		a.call(t, "GET", "/v1/sandboxes/"+ids[0], nil, 200, &si)
		if si.State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the exec never started: %+v", si)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()

	s2 := startServer(t)
	for _, b := range s2.apis() {
		var list []runner.SandboxInfo
		b.call(t, "GET", "/v1/sandboxes", nil, 200, &list)
		found := 0
		for _, si := range list {
			for _, id := range ids {
				if si.ID == id {
					found++
				}
			}
		}
		if found != 2 {
			t.Fatalf("after a restart over %s: %d of 2 sandboxes listed: %+v", b.name, found, list)
		}
	}
	b := s2.apis()[0]
	deadline = time.Now().Add(20 * time.Second)
	for {
		if st, _, _ := b.do(t, "GET", "/v1/sandboxes/"+idle.ID, nil); st == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle sandbox %s outlived its 3s idle timeout by 20s after the server was killed", idle.ID)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range ids {
		if res := b.exec(t, id, map[string]any{"argv": []string{"echo", "alive"}}); string(res.Stdout.Head) != "alive\n" {
			t.Fatalf("exec after the restart: %+v", res)
		}
		b.call(t, "DELETE", "/v1/sandboxes/"+id, nil, http.StatusNoContent, nil)
	}
}

func TestServeIdempotentCreate(t *testing.T) {
	s := startServer(t)
	a := s.apis()[1]
	req := map[string]any{"engine": engineName, "isolation": isolationName, "ttl": "10m"}
	var first, second runner.SandboxInfo
	a.call(t, "POST", "/v1/sandboxes", req, 201, &first, "Idempotency-Key", "create-once-1")
	t.Cleanup(func() { a.call(t, "DELETE", "/v1/sandboxes/"+first.ID, nil, 204, nil) })
	a.call(t, "POST", "/v1/sandboxes", req, 201, &second, "Idempotency-Key", "create-once-1")
	if first.ID != second.ID {
		t.Fatalf("a retried create made %s then %s", first.ID, second.ID)
	}
	var list []runner.SandboxInfo
	a.call(t, "GET", "/v1/sandboxes", nil, 200, &list)
	if len(list) != 1 {
		t.Fatalf("%d sandboxes after a retried create", len(list))
	}
}

// verlRequest is exactly what verl's sandbox_fusion reward code posts.
func verlRequest(code, stdin string) map[string]any {
	return map[string]any{"compile_timeout": 10, "run_timeout": 3, "code": code, "stdin": stdin, "memory_limit_MB": 1024, "language": "python", "files": map[string]string{}, "fetch_files": []string{}}
}

type fusionResponse struct {
	Status    string `json:"status"`
	Message   string `json:"message"`
	RunResult struct {
		Status     string  `json:"status"`
		ReturnCode int     `json:"return_code"`
		Stdout     string  `json:"stdout"`
		Stderr     string  `json:"stderr"`
		Time       float64 `json:"execution_time"`
	} `json:"run_result"`
	Files map[string]string `json:"files"`
}

func TestServeRunCode(t *testing.T) {
	s := startServer(t)
	a := s.apis()[1]
	var pong string
	a.call(t, "GET", "/v1/ping", nil, 200, &pong)
	if pong != "pong" {
		t.Fatalf("ping: %q", pong)
	}
	for _, c := range []struct {
		name, code, stdin, status, runStatus, stdout string
		rc                                           int
	}{
		{"Pass", "print(sum(range(10)))", "", "Success", "Finished", "45\n", 0},
		{"Exception", "raise ValueError('boom')", "", "Failed", "Finished", "", 1},
		{"Timeout", "while True: pass", "", "Failed", "TimeLimitExceeded", "", -1},
		{"Stdin", "a, b = map(int, input().split()); print(a * b)", "6 7\n", "Success", "Finished", "42\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			// As verl posts it: a URL (the token in it) and a JSON body, no headers.
			resp, err := http.Post("http://"+s.addr+"/t/"+s.token+"/run_code", "application/json", bytes.NewReader(mustJSON(verlRequest(c.code, c.stdin))))
			if err != nil {
				t.Fatal(err)
			}
			var r fusionResponse
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%d %v", resp.StatusCode, err)
			}
			if r.Status != c.status || r.RunResult.Status != c.runStatus || r.RunResult.Stdout != c.stdout || (c.rc >= 0 && r.RunResult.ReturnCode != c.rc) {
				t.Fatalf("%+v", r)
			}
			if c.name == "Exception" && !strings.Contains(r.RunResult.Stderr, "ValueError: boom") {
				t.Fatalf("stderr %q", r.RunResult.Stderr)
			}
		})
	}
	t.Run("BashFilesFetch", func(t *testing.T) {
		req := map[string]any{"code": "cat in.txt | tr a-z A-Z > out.txt; ln -s /etc/shadow leak", "language": "bash", "run_timeout": 5,
			"files": map[string]string{"in.txt": base64.StdEncoding.EncodeToString([]byte("hello\n"))}, "fetch_files": []string{"out.txt", "leak"}}
		var r fusionResponse
		a.call(t, "POST", "/run_code", req, 200, &r)
		if r.Status != "Success" || r.Files["out.txt"] != base64.StdEncoding.EncodeToString([]byte("HELLO\n")) || r.Files["leak"] != "" || !strings.Contains(r.Message, "symlink") {
			t.Fatalf("%+v", r)
		}
	})
	var r fusionResponse
	a.call(t, "POST", "/run_code", map[string]any{"code": "x", "language": "cobol"}, 200, &r)
	if r.Status != "SandboxError" {
		t.Fatalf("cobol: %+v", r)
	}
}

func TestServeRunsAndMetrics(t *testing.T) {
	s := startServer(t)
	a := s.apis()[1]
	var res runner.Result
	a.call(t, "POST", "/v1/runs", map[string]any{"argv": []string{"python3", "-c", "import sys; print(sys.stdin.read()[::-1])"}, "stdin_b64": base64.StdEncoding.EncodeToString([]byte("abc")),
		"engine": engineName, "isolation": isolationName, "memory": "256MiB", "timeout": "20s"}, 200, &res)
	if res.Reason != "exited" || string(res.Stdout.Head) != "cba\n" || res.Receipt == nil || res.Limits.MemoryBytes != 256<<20 {
		t.Fatalf("run: %+v", res)
	}
	a.call(t, "POST", "/v1/runs", map[string]any{"argv": []string{"sleep", "10"}, "timeout": "500ms", "engine": engineName, "isolation": isolationName}, 200, &res)
	if res.Reason != "timeout" {
		t.Fatalf("a timed-out run: %+v", res)
	}
	id := a.create(t, nil).ID
	a.do(t, "GET", "/v1/sandboxes/"+id+"/files?path=/home/user/nope", nil)
	a.exec(t, id, map[string]any{"argv": []string{"true"}})
	_, _, body := a.do(t, "GET", "/metrics", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"airlock_sandboxes_active", "airlock_sandbox_age_seconds", "airlock_orphans_reaped_total", "airlock_sandbox_create_duration_seconds",
		"airlock_exec_duration_seconds", "airlock_run_duration_seconds", "airlock_termination_failures_total", "airlock_rejected_files_total", "airlock_runs_total"} {
		if fams[n] == nil {
			t.Errorf("series %s missing", n)
		}
	}
	value := func(name, label, v string) float64 {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == v {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	if value("airlock_runs_total", "reason", "timeout") != 1 || value("airlock_runs_total", "reason", "exited") != 2 ||
		value("airlock_sandboxes_active", "state", "ready") != 1 || value("airlock_rejected_files_total", "reason", "not_found") != 1 {
		t.Fatalf("metrics:\n%s", body)
	}
	if fams["airlock_sandbox_create_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Fatalf("create latency not observed")
	}
}

func TestServeIdempotentRun(t *testing.T) {
	s := startServer(t)
	a := s.apis()[0]
	req := map[string]any{"argv": []string{"python3", "-c", "import uuid; print(uuid.uuid4())"}, "engine": engineName, "isolation": isolationName}
	var first, second runner.Result
	a.call(t, "POST", "/v1/runs", req, 200, &first, "Idempotency-Key", "run-once-1")
	st, hdr, body := a.do(t, "POST", "/v1/runs", bytes.NewReader(mustJSON(req)), "Idempotency-Key", "run-once-1")
	if json.Unmarshal(body, &second); st != 200 || hdr.Get("Idempotent-Replayed") != "true" || second.ID != first.ID || string(second.Stdout.Head) != string(first.Stdout.Head) {
		t.Fatalf("a retried run: %d %v\nfirst %s %q\nsecond %s %q", st, hdr, first.ID, first.Stdout.Head, second.ID, second.Stdout.Head)
	}
	var e apiError
	req["argv"] = []string{"true"}
	a.call(t, "POST", "/v1/runs", req, 400, &e, "Idempotency-Key", "run-once-1")
	if e.Error.Kind != "invalid_input" || !strings.Contains(e.Error.Message, "different request body") {
		t.Fatalf("a key reused for another run: %+v", e)
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestServeOverLimit(t *testing.T) {
	s := startServer(t, "--max-sandboxes", "1")
	a := s.apis()[0]
	a.create(t, nil)
	var e apiError
	a.call(t, "POST", "/v1/sandboxes", map[string]any{"engine": engineName, "isolation": isolationName}, http.StatusTooManyRequests, &e)
	if e.Error.Kind != "over_limit" || !strings.Contains(e.Error.Message, "--max-sandboxes 1") {
		t.Fatalf("past --max-sandboxes: %+v", e)
	}
	a.call(t, "POST", "/v1/runs", map[string]any{"argv": []string{"true"}, "engine": engineName, "isolation": isolationName}, http.StatusTooManyRequests, &e)
}

// TestServeDrain: SIGTERM lets an exec in progress finish and answer.
func TestServeDrain(t *testing.T) {
	s := startServer(t)
	a := s.apis()[0]
	var si runner.SandboxInfo
	a.call(t, "POST", "/v1/sandboxes", map[string]any{"engine": engineName, "isolation": isolationName}, http.StatusCreated, &si)
	type answer struct {
		res runner.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := a.client.Post(a.base+"/v1/sandboxes/"+si.ID+"/exec", "application/json", strings.NewReader(`{"argv":["sh","-c","sleep 2; echo drained"]}`))
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var res runner.Result
		err = json.NewDecoder(resp.Body).Decode(&res)
		done <- answer{res, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var cur runner.SandboxInfo
		a.call(t, "GET", "/v1/sandboxes/"+si.ID, nil, 200, &cur)
		if cur.State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the exec never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	got := <-done
	if got.err != nil || got.res.Reason != "exited" || string(got.res.Stdout.Head) != "drained\n" {
		t.Fatalf("the exec in progress at SIGTERM: %+v %v", got.res, got.err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("airlock serve after draining: %v\n%s", err, s.stderr)
	}
	// The sandbox outlived the server.
	s2 := startServer(t)
	b := s2.apis()[0]
	if res := b.exec(t, si.ID, map[string]any{"argv": []string{"echo", "still here"}}); string(res.Stdout.Head) != "still here\n" {
		t.Fatalf("after the drain: %+v", res)
	}
	b.call(t, "DELETE", "/v1/sandboxes/"+si.ID, nil, http.StatusNoContent, nil)
}

// TestServeNDJSONPython: Python's http.client reads the NDJSON stream
// line by line, each event as it comes.
func TestServeNDJSONPython(t *testing.T) {
	s := startServer(t)
	a := s.apis()[0]
	id := a.create(t, nil).ID
	host, port, _ := strings.Cut(s.addr, ":")
	script := `import base64, http.client, json, sys
c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]))
body = json.dumps({"argv": ["sh", "-c", "for i in 1 2 3; do echo line$i; done; echo oops >&2; exit 3"]})
c.request("POST", "/v1/sandboxes/%s/exec" % sys.argv[3], body, {"Authorization": "Bearer " + sys.argv[4], "Accept": "application/x-ndjson"})
r = c.getresponse()
assert r.status == 200, r.status
out = {"stdout": b"", "stderr": b""}
while True:
    line = r.readline()
    if not line:
        break
    ev = json.loads(line)
    if ev["type"] == "exit":
        print(out["stdout"].decode() + out["stderr"].decode() + "exit=%d" % ev["result"]["exit_code"])
        break
    assert ev["offset"] == len(out[ev["type"]])
    out[ev["type"]] += base64.b64decode(ev["data_b64"])
`
	out, err := exec.Command("python3", "-c", script, host, port, id, s.token).CombinedOutput()
	if err != nil || string(out) != "line1\nline2\nline3\noops\nexit=3\n" {
		t.Fatalf("python http.client: %v: %q", err, out)
	}
}

// TestServeIdleTimeout: a sandbox made through the API ends at its idle
// timeout with no request to the server, and the API says it is gone.
func TestServeIdleTimeout(t *testing.T) {
	s := startServer(t)
	a := s.apis()[1]
	var si runner.SandboxInfo
	a.call(t, "POST", "/v1/sandboxes", map[string]any{"engine": engineName, "isolation": isolationName, "idle_timeout": "2s"}, http.StatusCreated, &si)
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, _, _ := a.do(t, "GET", "/v1/sandboxes/"+si.ID, nil)
		if st == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still there 15s after a 2s idle timeout", si.ID)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var e apiError
	a.call(t, "POST", "/v1/sandboxes/"+si.ID+"/exec", map[string]any{"argv": []string{"true"}}, http.StatusNotFound, &e)
	a.call(t, "DELETE", "/v1/sandboxes/"+si.ID, nil, http.StatusNoContent, nil)
}
