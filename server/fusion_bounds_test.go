package server

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fetch_files names are echoed into files_omitted, and the response's
// head is made in memory, JSON-escaped ('<' is 6 bytes): a name is at
// most a path's 4096 bytes, and the messages quote 256 of them, so that
// a body of the most and longest duplicate names cannot make the answer
// many times its size. A longer name is refused as the body is decoded.
// (FetchMaxFiles 0 needs no sandbox: with the default 32 the first name
// is downloaded, and every duplicate after it takes this same path.)
func TestFetchNamesBounded(t *testing.T) {
	var over FusionRequest
	if err := decodeJSON(strings.NewReader(`{"code":"x","language":"python","fetch_files":["`+strings.Repeat("a", maxFusionPath+1)+`"]}`), &over); err == nil || !strings.Contains(err.Error(), "over the 4096") {
		t.Errorf("a name over a path's length: %v", err)
	}
	s, _ := newTestServer(t, nil)
	s.opt.FetchMaxFiles = 0
	long := strings.Repeat("<", maxFusionPath-2)
	names := []string{long}
	for range maxFetchNames - 1 {
		names = append(names, "./"+long)
	}
	var bb strings.Builder
	enc := json.NewEncoder(&bb)
	enc.SetEscapeHTML(false) // a client sends '<' as one byte
	enc.Encode(map[string]any{"code": "print(1)", "language": "python", "fetch_files": names})
	body := bb.String()
	if len(body) > DefaultMaxBody {
		t.Fatalf("body %d bytes, over --max-body", len(body))
	}
	var q FusionRequest
	if err := decodeJSON(strings.NewReader(body), &q); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stop, peakc := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				peakc <- peak
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}()
	got, err := s.fetchFiles(context.Background(), nil, q.FetchFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer got.close()
	resp := FusionResponse{Status: fusionSuccess, FilesOmitted: got.omitted}
	rec := &discardWriter{h: http.Header{}}
	if err := writeFusion(rec, resp, got); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	close(stop)
	peak := <-peakc - before.HeapInuse
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("peak heap in use above the start: %d MiB", peak>>20)
	t.Logf("body %d bytes; %d omitted; response %d bytes (%.1fx); allocated %d MiB (%.1fx the body)",
		len(body), len(got.omitted), rec.n, float64(rec.n)/float64(len(body)), alloc>>20, float64(alloc)/float64(len(body)))
	if alloc > 16*uint64(len(body)) {
		t.Errorf("a %d MiB request made the server allocate %d MiB for its answer", len(body)>>20, alloc>>20)
	}
}

// discardWriter counts a response's bytes, as a socket would take them.
type discardWriter struct {
	h http.Header
	n int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// SandboxFusion types a file's content as optional: a null is refused,
// naming the file, not written as an empty file.
func TestFusionNullFileRefused(t *testing.T) {
	var q FusionRequest
	err := decodeJSON(strings.NewReader(`{"code":"x","language":"python","files":{"a.txt":null}}`), &q)
	if err == nil || !strings.Contains(err.Error(), `files["a.txt"] is null`) {
		t.Errorf("files {\"a.txt\": null}: %v, %q", err, q.Files)
	}
}
