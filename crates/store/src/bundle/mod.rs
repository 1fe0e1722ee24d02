//! bundles (filled in by its owner)
