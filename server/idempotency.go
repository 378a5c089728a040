package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// idemTTL is how long an Idempotency-Key is remembered.
const idemTTL = 24 * time.Hour

// idemMaxBytes bounds the answers held in memory for replay (a run's
// Result carries its output): past it, the oldest keys are forgotten
// first, and a retry of one runs again.
var idemMaxBytes int64 = 256 << 20

// idemMaxDiskBytes bounds the creates' answers kept on disk under
// <root>/server/idempotency: past it, the oldest files are removed first,
// down to 7/8 of it, and a retry of one of their keys after a restart
// creates again.
var idemMaxDiskBytes int64 = 1 << 30

// idemSweepEvery is how often a save lists the directory to remove the
// answers past idemTTL; it is listed at once when it passes
// idemMaxDiskBytes.
const idemSweepEvery = time.Hour

// idempotency replays the first successful response to a request retried
// with the same Idempotency-Key, and makes a retry that arrives while the
// first is in progress wait for it. Creates are also kept on disk, so a
// restarted server still replays them.
type idempotency struct {
	dir   string
	mu    sync.Mutex
	m     map[string]*idemEntry
	bytes int64 // of the answers in m
	disk  int64 // of the files in dir, at the last sweep and written since
	swept time.Time
}

type idemEntry struct {
	done   chan struct{}
	Hash   string    `json:"body_sha256"`
	Status int       `json:"status"`
	Body   []byte    `json:"body"`
	At     time.Time `json:"at"`
}

func newIdempotency(root string) *idempotency {
	return &idempotency{dir: filepath.Join(root, "server", "idempotency"), m: map[string]*idemEntry{}}
}

// checkKey refuses a key that is empty, too long or not printable ASCII.
func checkKey(key string) error {
	if len(key) == 0 || len(key) > 200 {
		return invalid("Idempotency-Key must be 1 to 200 characters; a UUID is a good key")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return invalid("Idempotency-Key must be printable ASCII without spaces; a UUID is a good key")
		}
	}
	return nil
}

// do answers a request with key on route: the first response made by fn
// for the key (when it was a success), or fn's now. persist keeps the
// response on disk too.
func (i *idempotency) do(route, key string, body []byte, persist bool, fn func() (int, []byte)) (status int, out []byte, replayed bool, err error) {
	if err := checkKey(key); err != nil {
		return 0, nil, false, err
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	k := sha256.Sum256([]byte(route + "\n" + key))
	name := hex.EncodeToString(k[:])
	now := time.Now()

	i.mu.Lock()
	for n, e := range i.m {
		if !e.At.IsZero() && now.Sub(e.At) > idemTTL {
			i.forget(n)
		}
	}
	e, ok := i.m[name]
	if !ok && persist {
		if d, derr := i.load(name); derr == nil && now.Sub(d.At) <= idemTTL {
			e, ok = d, true
			i.m[name] = e
			i.held(int64(len(e.Body)))
		}
	}
	if ok {
		i.mu.Unlock()
		<-e.done
		if e.Status == 0 { // the first attempt failed: try again
			return i.do(route, key, body, persist, fn)
		}
		if e.Hash != hash {
			return 0, nil, false, invalid("Idempotency-Key %q was used with a different request body; use a new key for a new request", key)
		}
		return e.Status, e.Body, true, nil
	}
	e = &idemEntry{done: make(chan struct{})}
	i.m[name] = e
	i.mu.Unlock()

	status, out = fn()
	i.mu.Lock()
	if status >= 200 && status < 300 {
		e.Hash, e.Status, e.Body, e.At = hash, status, out, time.Now()
		if persist {
			i.save(name, e)
		}
		i.held(int64(len(out)))
	} else {
		delete(i.m, name)
	}
	i.mu.Unlock()
	close(e.done)
	return status, out, false, nil
}

// forget drops key n's answer; call with i.mu held.
func (i *idempotency) forget(n string) {
	if e, ok := i.m[n]; ok {
		i.bytes -= int64(len(e.Body))
		delete(i.m, n)
	}
}

// held counts n more bytes of answers, and forgets the oldest answered
// keys while they pass idemMaxBytes; call with i.mu held. A key whose
// request is in progress stays.
func (i *idempotency) held(n int64) {
	i.bytes += n
	for i.bytes > idemMaxBytes {
		oldest := ""
		for k, e := range i.m {
			if !e.At.IsZero() && (oldest == "" || e.At.Before(i.m[oldest].At)) {
				oldest = k
			}
		}
		if oldest == "" {
			return
		}
		i.forget(oldest)
	}
}

func (i *idempotency) load(name string) (*idemEntry, error) {
	b, err := os.ReadFile(filepath.Join(i.dir, name+".json"))
	if err != nil {
		return nil, err
	}
	e := &idemEntry{done: make(chan struct{})}
	if err := json.Unmarshal(b, e); err != nil || e.Status == 0 {
		return nil, errors.New("corrupt idempotency record")
	}
	close(e.done)
	return e, nil
}

// save keeps key n's answer on disk; call with i.mu held.
func (i *idempotency) save(name string, e *idemEntry) {
	if err := os.MkdirAll(i.dir, 0o700); err != nil {
		return
	}
	b, _ := json.Marshal(e)
	if err := atomicfile.WriteFile(filepath.Join(i.dir, name+".json"), b, 0o600); err != nil {
		return
	}
	i.disk += int64(len(b))
	if i.disk > idemMaxDiskBytes || time.Since(i.swept) > idemSweepEvery {
		i.sweep(name + ".json")
	}
}

// sweep lists the directory: it removes the answers past idemTTL, then,
// while the rest pass idemMaxDiskBytes, the oldest down to 7/8 of it, all
// but keep (the answer just saved); call with i.mu held.
func (i *idempotency) sweep(keep string) {
	i.swept = time.Now()
	ents, err := os.ReadDir(i.dir)
	if err != nil {
		return
	}
	type file struct {
		name string
		size int64
		mod  time.Time
	}
	var files []file
	var total int64
	for _, de := range ents {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if time.Since(fi.ModTime()) > idemTTL && de.Name() != keep {
			if err := os.Remove(filepath.Join(i.dir, de.Name())); err == nil || errors.Is(err, fs.ErrNotExist) {
				continue
			}
		}
		files = append(files, file{de.Name(), fi.Size(), fi.ModTime()})
		total += fi.Size()
	}
	if total > idemMaxDiskBytes {
		sort.Slice(files, func(a, b int) bool { return files[a].mod.Before(files[b].mod) })
		for _, f := range files {
			if total <= idemMaxDiskBytes/8*7 {
				break
			}
			if f.name == keep {
				continue
			}
			if err := os.Remove(filepath.Join(i.dir, f.name)); err == nil || errors.Is(err, fs.ErrNotExist) {
				total -= f.size
			}
		}
	}
	i.disk = total
}
