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
//   - Accepted files are written under the destination through os.Root,
//     to a temporary file renamed into place, mode 0644, with no xattrs.
//
// Every decision is recorded with a stable reason word (see Reason).
package artifacts
