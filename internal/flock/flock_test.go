package flock

import (
	"path/filepath"
	"sync"
	"testing"
)

func TestWithSerialises(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	var inside, most int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			With(path, func() error {
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				return nil
			})
		}()
	}
	wg.Wait()
	if most != 1 {
		t.Errorf("%d holders at once", most)
	}
}
