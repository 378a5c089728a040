package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/runner"
)

// A reader that drops out at any point and resumes from its offsets gets
// every byte once, in order, while the writers keep writing.
func TestPumpResumesWithoutLossOrRepeat(t *testing.T) {
	e := &execSession{id: "ex-1", wake: make(chan struct{})}
	var want [2]bytes.Buffer
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := streamWriter{e, i}
			for n := range 2000 {
				chunk := fmt.Appendf(nil, "%s-%05d\n", streamNames[i], n)
				want[i].Write(chunk)
				w.Write(chunk)
			}
		}()
	}
	go func() { wg.Wait(); e.finish(runner.Result{Reason: runner.ReasonExited}, nil) }()

	var got [2][]byte
	var exit *exitEvent
	for drops := 0; exit == nil; drops++ {
		ctx, cancel := context.WithCancel(context.Background())
		seen := 0
		off := [2]int64{int64(len(got[0])), int64(len(got[1]))}
		err := pump(ctx, e, off, true, func(v any) error {
			switch ev := v.(type) {
			case outEvent:
				i := 0
				if ev.Type == "stderr" {
					i = 1
				}
				if ev.Offset != int64(len(got[i])) {
					t.Fatalf("%s offset %d, have %d", ev.Type, ev.Offset, len(got[i]))
				}
				b, _ := base64.StdEncoding.DecodeString(ev.DataB64)
				if ev.Data != string(b) {
					t.Fatalf("data and data_b64 differ")
				}
				got[i] = append(got[i], b...)
			case exitEvent:
				exit = &ev
				return nil
			}
			if seen++; seen == 3 && drops < 50 {
				cancel() // the connection drops
				return context.Canceled
			}
			return nil
		})
		cancel()
		if err != nil && exit != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if !bytes.Equal(got[i], want[i].Bytes()) {
			t.Fatalf("%s: got %d bytes, want %d", streamNames[i], len(got[i]), want[i].Len())
		}
	}
	if exit.Result.Reason != runner.ReasonExited {
		t.Fatalf("exit %+v", exit)
	}
}
