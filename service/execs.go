package service

import (
	"fmt"
	"sync"
)

// DefaultMaxExecs is airlock serve's --max-execs by default.
const DefaultMaxExecs = 256

// DefaultMaxExecsPerSandbox caps the execs in progress in one sandbox at
// once when WithExecLimits is given none.
const DefaultMaxExecsPerSandbox = 64

// execGate counts the execs in progress, server-wide and per sandbox.
type execGate struct {
	max, perSandbox int

	mu    sync.Mutex
	total int
	by    map[string]int
}

// WithExecLimits caps the execs in progress at once on every face (the
// HTTP API's POST, NDJSON and WebSocket execs, MCP's sandbox_exec): max
// in all (airlock serve's --max-execs), perSandbox in any one sandbox
// (DefaultMaxExecsPerSandbox if below 1). Without it every exec is
// admitted.
func WithExecLimits(max, perSandbox int) Option {
	if perSandbox < 1 {
		perSandbox = DefaultMaxExecsPerSandbox
	}
	return func(s *Service) { s.execs = &execGate{max: max, perSandbox: perSandbox, by: map[string]int{}} }
}

// ExecsOverLimitError refuses an exec past a cap on the execs in
// progress. It is errdefs.IsResourceExhausted.
type ExecsOverLimitError struct {
	SandboxID  string
	Live, Max  int
	PerSandbox bool
}

func (e *ExecsOverLimitError) Error() string {
	if e.PerSandbox {
		return fmt.Sprintf("%d execs are in progress in sandbox %q, the most one sandbox may run at once (%d); wait for one to end or kill one, then retry", e.Live, e.SandboxID, e.Max)
	}
	return fmt.Sprintf("%d execs are in progress, the most this server allows (--max-execs %d); wait for one to end or kill one, then retry", e.Live, e.Max)
}

// ResourceExhausted classifies the error for errdefs.
func (e *ExecsOverLimitError) ResourceExhausted() {}

// AdmitExec reserves room for one more exec in sandbox id until release,
// which may be called more than once. Past a cap of WithExecLimits it
// returns an *ExecsOverLimitError.
func (s *Service) AdmitExec(id string) (release func(), err error) {
	g := s.execs
	if g == nil {
		return func() {}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.total >= g.max {
		return nil, &ExecsOverLimitError{SandboxID: id, Live: g.total, Max: g.max}
	}
	if n := g.by[id]; n >= g.perSandbox {
		return nil, &ExecsOverLimitError{SandboxID: id, Live: n, Max: g.perSandbox, PerSandbox: true}
	}
	g.total++
	g.by[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.total--
			if g.by[id]--; g.by[id] == 0 {
				delete(g.by, id)
			}
			g.mu.Unlock()
		})
	}, nil
}
