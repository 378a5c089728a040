package flock

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// mostAtOnce runs hold from 20 goroutines and returns the most that were
// inside their critical section at once.
func mostAtOnce(hold func(inside func())) int {
	var n, most int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hold(func() {
				mu.Lock()
				n++
				most = max(most, n)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				n--
				mu.Unlock()
			})
		}()
	}
	wg.Wait()
	return most
}

func TestWithSerialises(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	most := mostAtOnce(func(inside func()) {
		With(path, func() error { inside(); return nil })
	})
	if most != 1 {
		t.Errorf("%d holders at once", most)
	}
}

// TestAcquireSurvivesRemoval: holders remove the file as they let go, and
// still no two hold it at once.
func TestAcquireSurvivesRemoval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	most := mostAtOnce(func(inside func()) {
		l, err := Acquire(context.Background(), path)
		if err != nil {
			t.Error(err)
			return
		}
		inside()
		l.Release(true)
	})
	if most != 1 {
		t.Errorf("%d holders at once", most)
	}
}

func TestAcquireGivesUpWithCtx(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	l, err := Acquire(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(false)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the deadline", err)
	}
}
