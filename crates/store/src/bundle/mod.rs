//! Bundles: exporting and importing environments as tar streams.
//!
//! The format is specified in `docs/bundle-format.md`; in short:
//!
//! * A bundle is a tar stream, optionally zstd- or gzip-compressed. [`import`] detects the
//!   compression by magic bytes (zstd `28 B5 2F FD`, gzip `1F 8B`, else plain tar, recognised
//!   by `ustar` at offset 257).
//! * `history` and `snapshot` bundles start with `manifest.json` ([`Manifest`]) and end with
//!   `end.json` ([`EndRecord`]), so a truncation is detected even at an entry boundary. Each
//!   node's data is a layer under `nodes/<id>/`: the entries that differ from its `base`
//!   node's tree (a node without base is complete), deletions as `.wh.<name>`, opaque
//!   directories as `<dir>/.wh..wh..opq`, OCI image-layer style. A layer starts with its root
//!   directory and every entry's parent precedes it. `end.json` records each layer's entry
//!   count and a blake3 checksum over its entry records ([`layer_summary`]); version 1
//!   bundles, still read, record them in the manifest.
//! * A `rootfs` bundle is a plain tar of one complete tree (`./…` paths), as `docker import`
//!   accepts; sparse files are written in full and sockets are not stored.
//! * Fidelity: regular files, directories, symlinks (dangling too), in-tree hardlinks (tar
//!   hardlink entries to the first path of the inode), fifos, devices, the full mode, numeric
//!   owners, mtimes with nanoseconds (PAX `mtime`), every xattr (PAX `SCHILY.xattr.*`; values
//!   containing a newline hex-encoded as `AGENTBOX.xattr.hex.*`), sparse files (only data
//!   segments stored, map in PAX `AGENTBOX.sparse`) and a per-file `AGENTBOX.blake3` PAX
//!   record, verified on import. Sockets (history/snapshot) are fifo entries marked with PAX
//!   `AGENTBOX.type=socket` and recreated with `mknod(S_IFSOCK)`.
//!
//! Import is defensive: it never follows a symlink, refuses absolute paths, `..`, entries
//! whose path goes through a symlink, hardlinks to anything but an earlier non-directory
//! entry of the same layer, devices unless allowed, checksum mismatches, inconsistent
//! manifests, truncation and trailing garbage, and removes its staging directory on any
//! error. Symlinks themselves are data and accepted with any target: since nothing is ever
//! written or linked through one, no target can make the import write outside its staging
//! directory.
//!
//! Import is also wary of what it would make: setuid/setgid bits and `security.capability`
//! xattrs are stripped unless allowed ([`ImportOpts::allow_setuid`]), overlayfs-private
//! xattrs (`trusted.overlay.*`, `user.overlay.*`) are never applied (the markers above are
//! the only way a bundle expresses whiteouts and opaque directories), nor is any other
//! `trusted.*` or `security.*` xattr (only the host's privileged code sets those), tag names
//! are validated like `agentbox tag` does, `manifest.json` and `end.json` must carry their
//! checksum like every file, the decompressed stream is capped ([`ImportOpts::max_size`],
//! [`default_max_size`]) against decompression bombs (an entry whose declared size alone
//! passes the cap is refused before a byte of it is written), and a full disk is reported
//! as such ([`crate::Error::NoSpace`]), not as a damaged archive.

mod compress;
mod format;
pub(crate) mod fsutil;
mod layer;
mod read;
mod write;

pub use compress::{DEFAULT_ZSTD_LEVEL, GZIP_MAGIC, ZSTD_MAGIC};
pub use format::{
    BundleKind, Compression, EndRecord, LayerEnd, Manifest, ManifestNode, END_NAME, FORMAT_NAME,
    FORMAT_VERSION, MANIFEST_NAME, NODES_DIR, OLDEST_READ_VERSION, OPAQUE_MARKER,
    OVERLAY_OPAQUE_XATTR, OVERLAY_XATTR_PREFIX, PAX_BLAKE3, PAX_SPARSE, PAX_TYPE, PAX_TYPE_SOCKET,
    PAX_XATTR_HEX_PREFIX, PAX_XATTR_PREFIX, ROOTFS_LAYER, WHITEOUT_PREFIX,
};
pub use layer::{
    apply_layer, layer_from_trees, layer_source_from_overlay, layer_summary, to_overlay_layer,
    LayerSource, LayerSummary,
};
pub use read::{
    default_max_size, import, import_into, ImportOpts, Imported, MAX_EXPANSION, MIN_MAX_SIZE,
};
pub use write::BundleWriter;
