//! Removing a tournament's candidate box whole: by the race when a candidate loses or the
//! tournament ends, and by `prune` for an interrupted tournament's (see [`super::ledger`]).

use std::sync::Mutex;

use crate::facade::Boxes;
use crate::progress::Progress;
use crate::records::record::BoxDirs;
use crate::Result;

/// Remove candidate box `name` and everything of it (its branches too); what could not be
/// removed is added to `notes`. A box only half made (an environment without a record)
/// goes too.
pub(super) fn remove_candidate(boxes: &Boxes, name: &str, notes: &mut Vec<String>) {
    struct Collect<'a>(&'a Mutex<Vec<String>>);
    impl Progress for Collect<'_> {
        fn note(&self, line: &str) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(line.to_owned());
        }
        fn busy(&self, _what: &str, work: &mut dyn FnMut() -> Result<()>) -> Result<()> {
            work()
        }
    }
    let said = Mutex::new(Vec::new());
    let dirs = BoxDirs::new(boxes.home(), name);
    let outcome = if dirs.record().exists() {
        boxes.destroy(name, true, &Collect(&said)).map(|_| ())
    } else {
        // Without a record, only what the fork's own rollback could not remove is left.
        let env = boxes.store().and_then(|s| match s.env(name) {
            Ok(_) => Ok(s.remove_env(name)?),
            Err(_) => Ok(()),
        });
        env.and_then(|()| match fs_err::remove_dir_all(&dirs.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        })
    };
    notes.extend(said.into_inner().unwrap_or_else(|p| p.into_inner()));
    if let Err(e) = outcome {
        notes.push(format!(
            "agentbox: could not remove candidate box {name:?}: {e} (`agentbox prune` retries)"
        ));
    }
}
