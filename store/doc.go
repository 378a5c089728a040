// Package store is airlock's own image content store: an OCI image layout
// of verified blobs, and the flattened root filesystems unpacked from it.
// It needs no daemon.
//
// On disk, under the store's directory (usually <root>/store):
//
//	oci/                 an OCI image layout: oci-layout, index.json, blobs/sha256/<hex>
//	unpacked/<id-hex>/   the unpacked root filesystem of image <id>, shared by every run
//	unpacked/.tmp-*      an unpack in progress, or left by one that died
//
// Rules:
//   - An image is named by its ID, the sha256 of its config blob. index.json
//     lists each image's manifest with the annotation
//     org.opencontainers.image.ref.name (the name, a label for people) and
//     dev.airlock.image.id (the ID).
//   - A blob is written to a temporary file beside its final name, checked
//     against the digest and size the manifest gives it while it is written,
//     synced, and renamed into place. The writer holds an flock on its
//     temporary file; Put first removes any .tmp-* blob file that no writer
//     holds (an import killed midway). An image is listed in index.json only
//     after all its blobs are in place, and index.json is replaced by rename
//     under an flock, so an interrupted import never leaves a half image.
//   - Remove drops an image's index entries, renames its tree aside and
//     deletes it, and collects every blob no remaining manifest refers to.
//     A run holds unpacked/.use-<hex> shared (Use) for its life, and Remove
//     refuses while one does; Put holds .put.lock shared while it writes, and
//     blobs are collected only when no Put is writing.
//   - A root filesystem is unpacked once per image ID, under an flock on that
//     ID, into unpacked/.tmp-* and renamed to unpacked/<hex> only when complete.
//     Every layer's uncompressed bytes are checked against the config's
//     diff_id. A .tmp-* directory is never used: stale ones are removed by
//     the next Rootfs call. unpacked/ is mode 0700, so no other host user
//     reaches a tree; inside it the image's own modes are kept (a runtime
//     copies a mount point's mode onto the tmpfs it mounts there).
//   - Layers are hostile. UnpackLayer writes only through an os.Root, refuses
//     (ErrUnsafeLayer) absolute names, names that climb out with "..",
//     hardlinks to such names, symlinks whose relative target climbs above
//     the root, and any entry whose parent path holds a symlink, so nothing
//     is ever written through a link. Devices and FIFOs are skipped; setuid
//     and setgid bits are dropped; xattrs are never written; GNU sparse
//     files are refused (their holes expand without bound). A layer of more
//     than MaxEntries entries, or whose paths take more than MaxPathBytes
//     to keep track of, is refused (ErrLayerCap), at import and at unpack.
//   - An entry replaces an existing one of the same name (remove, then
//     create; an existing file is never opened for writing), except that a
//     directory merges into an existing directory. Whiteouts (.wh.<name>)
//     and opaque markers (.wh..wh..opq) hide entries from lower layers only,
//     never what the same layer wrote, and are never created themselves;
//     entries under a .wh.* directory (AUFS bookkeeping) are skipped.
package store
