// Package artifacts carries the files a sandboxed program produced out
// through the airlock: every file is hostile until it has been checked.
//
// Rules:
//   - Collection runs on the host, in Go, after every process of the
//     sandbox has gone; nothing runs inside the sandbox to help it.
//   - Path resolution never follows a symlink: directories and files are
//     opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
//     RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV) relative to a directory fd.
//   - Only regular files with one link are read. Symlinks, hardlinks,
//     FIFOs, sockets and devices are rejected from lstat alone, without
//     being opened, so a FIFO can never block a run.
//   - Size caps are checked on st_size before any read and enforced again
//     while reading.
//   - The type is detected from content (gabriel-vasile/mimetype) and must
//     be on the allowlist, with an extension that agrees with it. Archives
//     are never extracted.
//   - A path with a component that starts with '.' (.git/config, .ssh,
//     .bashrc) is rejected as hidden_name unless Options.AllowDotfiles:
//     tools such as git act on those files by themselves.
//   - The destination and quarantine directories are opened with
//     internal/safeopen: never through a symlink at the last component or
//     one another user owns, and never when another user owns them.
//   - Accepted files are written beneath the destination fd, one component
//     at a time (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), to a
//     temporary file renamed into place with RENAME_NOREPLACE, mode 0644,
//     with no xattrs. Nothing in the destination is ever replaced: a taken
//     name, a symlink or another user's directory on the way is a
//     rejection, exists. Quarantine follows the same rules, under escaped
//     names whose leading '.' is escaped too.
//
// Every decision is recorded with a stable reason word (see Reason).
package artifacts
