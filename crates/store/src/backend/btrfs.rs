//! btrfs backend (filled in by its owner)
