//! TEMP STUB
#![allow(missing_docs, dead_code, unused)]
use crate::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum BundleKind {
    History,
    Snapshot,
    Rootfs,
}
impl std::fmt::Display for BundleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        todo!()
    }
}
impl std::str::FromStr for BundleKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        todo!()
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}
impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        todo!()
    }
}
#[derive(Default)]
pub struct ImportOpts {
    pub allow_devices: bool,
    pub same_owner: bool,
}
pub struct LayerSource {
    pub entries: Vec<crate::fsops::Entry>,
    pub whiteouts: Vec<PathBuf>,
    pub opaque_dirs: Vec<PathBuf>,
}
pub struct ManifestNode {
    pub id: String,
    pub parent: Option<String>,
    pub seq: u64,
    pub message: String,
    pub command: Option<String>,
    pub created: chrono::DateTime<chrono::Utc>,
    pub metadata: BTreeMap<String, serde_json::Value>,
    pub base: Option<String>,
}
pub struct Manifest {
    pub head: String,
    pub tags: BTreeMap<String, String>,
    pub nodes: Vec<ManifestNode>,
}
impl Manifest {
    pub fn new(
        k: BundleKind,
        env: &str,
        head: &str,
        tags: BTreeMap<String, String>,
        nodes: Vec<ManifestNode>,
    ) -> Self {
        todo!()
    }
}
pub struct Imported {
    pub kind: BundleKind,
    pub manifest: Option<Manifest>,
    pub layers: Vec<(String, PathBuf)>,
}
pub fn import(src: &Path, staging: &Path, o: &ImportOpts) -> Result<Imported> {
    todo!()
}
pub fn apply_layer(staged: &Path, target: &Path) -> Result<()> {
    todo!()
}
pub fn to_overlay_layer(staged: &Path) -> Result<()> {
    todo!()
}
pub struct BundleWriter<W: std::io::Write> {
    w: W,
}
impl<W: std::io::Write> BundleWriter<W> {
    pub fn new(w: W, k: BundleKind, c: Compression) -> Result<Self> {
        todo!()
    }
    pub fn write_manifest(&mut self, m: &Manifest) -> Result<()> {
        todo!()
    }
    pub fn write_layer(&mut self, id: &str, l: &LayerSource) -> Result<()> {
        todo!()
    }
    pub fn write_rootfs(&mut self, t: &crate::fsops::Tree) -> Result<()> {
        todo!()
    }
    pub fn finish(self) -> Result<W> {
        todo!()
    }
}
