package docker

import "sync"

// procWatches holds one pidWatch per container whose process the engine
// watches, shared by every handle of its sandbox: a server opens a handle
// per request, and a watch per handle would keep a pidfd and a goroutine
// each until the container died. A watch leaves the set once its process
// exits, whoever ended it, so the set never outgrows the live sandboxes.
type procWatches struct {
	mu sync.Mutex
	m  map[string]*pidWatch // by container id
}

// get returns the held watch on container cid's process pid, or nil. A
// live pidfd on pid is on the process that has pid now, which sandbox.watch
// checked was the container's when it made it.
func (ws *procWatches) get(cid string, pid int) *pidWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.m[cid]; w != nil && w.pid == pid && !w.exited() {
		return w
	}
	return nil
}

// open watches pid for container cid. The watch is shared only once keep
// is given it, after the caller checked it is the container's process.
func (ws *procWatches) open(cid string, pid int) (*pidWatch, error) {
	return watchPid(pid, func(w *pidWatch) { ws.drop(cid, w) })
}

// keep shares w as cid's watch and returns it; if another handle kept a
// live watch on the same process meanwhile, it closes w and returns that.
func (ws *procWatches) keep(cid string, w *pidWatch) *pidWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if old := ws.m[cid]; old != nil && old.pid == w.pid && !old.exited() {
		w.close()
		return old
	}
	select {
	case <-w.done:
		// Ended already: its drop has run, and keeping it would leak.
		return w
	default:
	}
	if ws.m == nil {
		ws.m = map[string]*pidWatch{}
	}
	ws.m[cid] = w
	return w
}

// drop forgets w, cid's watch until its process exited.
func (ws *procWatches) drop(cid string, w *pidWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m[cid] == w {
		delete(ws.m, cid)
	}
}

// release ends cid's watch at once if its process has exited, as it has
// once Destroy removed the container; a live one stays, for the sandbox's
// other handles.
func (ws *procWatches) release(cid string) {
	ws.mu.Lock()
	w := ws.m[cid]
	if w == nil || !w.exited() {
		ws.mu.Unlock()
		return
	}
	delete(ws.m, cid)
	ws.mu.Unlock()
	w.end()
}
