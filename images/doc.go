// Package images reads, verifies and records the images airlock runs.
//
// Rules:
//   - An image is referred to by its ID, the sha256 of its config blob; the
//     config names every layer by its diff_id, so the ID pins the whole root
//     filesystem. Names are labels for people and are never resolved.
//   - Nothing is trusted on the way in: every blob is checked against its
//     digest and size, and every layer against its diff_id, before an image
//     is handed to an engine (Verify).
//   - What an image holds uncompressed is capped, per layer and in all
//     (Limits): a gzip or zstd layer can expand some 32,000 times over.
//     The bytes are counted as they are decompressed, and an image is
//     refused (ErrTooLarge) at the first read past a cap, before anything
//     is stored.
//   - Archives are read by go-containerregistry; the only names airlock
//     accepts from an OCI layout, a tar or a directory, are the layout's own
//     (oci-layout, index.json, blobs/<alg>/<hex>), so extraction cannot write
//     elsewhere. A layout directory is copied like a tar, regular files only,
//     no symlinks, sizes capped before a byte is read; the library reads
//     only the private copy.
//   - Fixed caps no flag raises: MaxLayers layers, a store.MaxConfig
//     config, indexes and manifests of 4 MiB, and what store.LayerCheck
//     keeps for the paths the layers name.
//   - Files under airlock's root are written atomically (temporary file, then
//     rename), so an interrupted command never leaves a half-written record.
package images
