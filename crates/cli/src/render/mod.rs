//! Human output, in one place for every command: escaping box-controlled text (`text`,
//! `output`, `path`), short ids, counted nouns, times and sizes (`basic`); the history and change lists
//! (`history`), tables several commands print (`tables`), the progress of long work on
//! stderr (`progress`). It knows neither the arguments nor the commands: it turns domain
//! values into text. (`--json` output is `serde` of the domain values, printed by the
//! commands' context.)

mod basic;
mod history;
pub mod progress;
mod tables;

pub use self::basic::{
    box_name, bytes, count, cut, in_git_dir, output, path, place, short, text, text_block, time,
};
pub use self::history::{changes, node_line, tags_by_node, tree};
pub use self::tables::{columns, procs, remote_table, short_tip};
