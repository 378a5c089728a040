package runner

import (
	"bytes"
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// recordGone returns a channel that is closed once sandbox id's record is
// removed (the last step of its destroy), so that its supervisor exits,
// and lets go of the image it pins, at once rather than at its next tick.
// stop ends the watch. Where inotify is unavailable the channel never
// closes and the tick alone is left.
func recordGone(root, id string) (gone <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return ch, func() {}
	}
	if _, err := unix.InotifyAddWatch(fd, sandboxesDir(root), unix.IN_DELETE|unix.IN_MOVED_FROM); err != nil {
		unix.Close(fd)
		return ch, func() {}
	}
	f := os.NewFile(uintptr(fd), "inotify")
	name := []byte(id + ".json")
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return // stopped
			}
			for b := buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
				size := int(binary.NativeEndian.Uint32(b[12:16]))
				if unix.SizeofInotifyEvent+size > len(b) {
					break
				}
				ev := bytes.TrimRight(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+size], "\x00")
				if bytes.Equal(ev, name) {
					close(ch)
					return
				}
				b = b[unix.SizeofInotifyEvent+size:]
			}
		}
	}()
	return ch, func() { f.Close() }
}
