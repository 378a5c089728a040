package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// treeGuard is what a host tree read as root may not give a sandbox, for
// the input stager and for TarHostTree (airlock cp) alike: airlock's own
// directories and files, a batch's private files, and a file hard-linked
// into the tree by anyone but its owner.
type treeGuard struct {
	// protected holds airlock's root and the directories right below it
	// (keys, store, state, runs). protectedFiles holds the files in the
	// root and in keys (the audit log, the receipt key), which a hard link
	// could otherwise put in a tree.
	protected, protectedFiles map[devIno]string

	// The tree being read: the files it may not hold (a batch's jobs and
	// results files), its root as messages name it ("the input root
	// \"/in\""), and who may have made the links in that root.
	private  []privateFile
	rootWhat string
	root     linkOwner
}

// linkOwner is who may have made the links in a directory: its owner,
// unless every user may write in it too (sticky or not), or a group other
// than the owner's own, and then anyone. A group whose id is the owner's
// uid is taken for the owner's own (user private groups, where umask 002
// makes a user's directories 0775).
type linkOwner struct {
	uid, gid uint32
	mode     uint32 // permission bits
}

func dirOwner(st *unix.Stat_t) linkOwner {
	return linkOwner{uid: st.Uid, gid: st.Gid, mode: st.Mode & 0o7777}
}

// only reports whether uid alone may have made the links in the directory.
func (o linkOwner) only(uid uint32) bool { return o.uid == uid && !o.shared() }

func (o linkOwner) shared() bool {
	return o.mode&0o002 != 0 || o.mode&0o020 != 0 && o.gid != o.uid
}

func (o linkOwner) String() string {
	switch {
	case o.mode&0o002 != 0:
		return fmt.Sprintf("is writable by every user (mode %#o)", o.mode)
	case o.shared():
		return fmt.Sprintf("is writable by its group %d (mode %#o)", o.gid, o.mode)
	}
	return fmt.Sprintf("is owned by uid %d", o.uid)
}

// linked says why a file, as opened (fstat), in a directory dir may have
// made links in, is not its tree's own however it got there, or "": a
// batch's jobs or results file, a file of airlock's root, or a file with
// more than one link not owned by whoever alone may link in the tree's
// root and in dir. airlock reads as root, and on a host with
// fs.protected_hardlinks=0 anyone who can write in a directory can
// hard-link into it a file they cannot read (/etc/shadow, another user's
// key). The answer follows the file's name in a message.
func (g *treeGuard) linked(fst *unix.Stat_t, dir linkOwner) string {
	id := devInoOf(fst)
	for _, p := range g.private {
		if p.id == id {
			return fmt.Sprintf("is %s; no job may take it as an input, by any name or link. Keep the jobs and results files out of the inputs' directory (or set --input-root to a directory of inputs alone)", p.what)
		}
	}
	if p, ok := g.protectedFiles[id]; ok {
		return fmt.Sprintf("is airlock's own file %q (a hard link to it), which never goes into a sandbox; remove the link from the tree", p)
	}
	if fst.Nlink <= 1 || (g.root.only(fst.Uid) && dir.only(fst.Uid)) {
		return ""
	}
	who, by := g.rootWhat+" "+g.root.String(), g.root
	if g.root.only(fst.Uid) {
		who, by = "the directory holding it "+dir.String(), dir
	}
	fix := "Copy the file into the tree instead of linking it (cp, not ln)"
	if by.shared() {
		who += ", so anyone may have linked it there"
		fix = "Keep the tree in a directory only its owner may write in (chmod go-w, never /tmp), and copy the file into it instead of linking it (cp, not ln)"
	}
	return fmt.Sprintf("has %d hard links and is owned by uid %d, but %s: a hard link can put another user's file (or /etc/shadow) in a tree, and airlock reads as root. %s", fst.Nlink, fst.Uid, who, fix)
}

// protectedDirs identifies airlock's root and its subdirectories by device
// and inode, so no name, symlink or bind mount can make them part of a
// tree; and the regular files in the root and in its keys directory, so no
// hard link can.
//
// Only those files are listed, because only they need it and listing them
// is cheap (a handful). Every other file of airlock's is below a
// subdirectory of the root, and those are refused whole by the directory
// check. A hard link to one from inside a tree is what is left: making
// one takes resolving its path, which another user cannot do below the
// root's 0700 directories (keys, state, runs, store); and should one be
// made all the same (the root, or a searchable subdirectory, with
// fs.protected_hardlinks=0), the file is root's with two links, which
// linked refuses unless root alone may link in the tree's root and in the
// directory holding it: both root's, and writable by no other group nor
// by every user (a root-owned /tmp or drop directory is anyone's).
func protectedDirs(root string) (dirs, files map[devIno]string, err error) {
	dirs, files = map[devIno]string{}, map[devIno]string{}
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return nil, nil, fmt.Errorf("checking airlock's root %q: %w", root, err)
	}
	dirs[devInoOf(&st)] = root
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, fmt.Errorf("checking airlock's root %q: %w", root, err)
	}
	for _, e := range ents {
		// Followed: a symlink here is airlock's data kept elsewhere.
		p := filepath.Join(root, e.Name())
		if unix.Stat(p, &st) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			dirs[devInoOf(&st)] = p
		case unix.S_IFREG:
			files[devInoOf(&st)] = p
		}
	}
	keys, err := os.ReadDir(filepath.Join(root, "keys"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("checking airlock's keys in %q: %w", root, err)
	}
	for _, e := range keys {
		p := filepath.Join(root, "keys", e.Name())
		if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			files[devInoOf(&st)] = p
		}
	}
	return dirs, files, nil
}

// checkAncestors refuses a tree at or below airlock's root, walking up
// from name in parent by "..", so that no path spelling hides it.
func (g *treeGuard) checkAncestors(parent int, base string) error {
	var s unix.Stat_t
	if err := unix.Fstatat(parent, base, &s, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if p, ok := g.protected[devInoOf(&s)]; ok {
			return protectedError(p)
		}
	}
	fd, err := unix.Openat(parent, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	for {
		if err := unix.Fstat(fd, &s); err != nil {
			unix.Close(fd)
			return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
		}
		if p, ok := g.protected[devInoOf(&s)]; ok {
			unix.Close(fd)
			return protectedError(p)
		}
		up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
		}
		var us unix.Stat_t
		if err := unix.Fstat(up, &us); err != nil || devInoOf(&us) == devInoOf(&s) {
			unix.Close(up)
			return nil // the top
		}
		fd = up
	}
}

func protectedError(p string) error {
	return fmt.Errorf("%w: it is in airlock's own state directory %q (keys, store, run state), which never goes into a sandbox; name a path outside it", errdefs.ErrInvalidArgument, p)
}
