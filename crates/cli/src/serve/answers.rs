//! The API's answers as the OpenAPI document describes them. The handlers answer with the
//! façade's own types (the JSON `--json` prints); these types only describe that JSON, and
//! name the fields a client can count on — an object may carry more (the schemas do not
//! forbid additional properties), as the command line's JSON may grow.

// Never built: these types exist for their schemas.
#![allow(dead_code)]

use utoipa::ToSchema;

/// A failed request: the command line's one-line message, its hint, and its exit code.
#[derive(ToSchema)]
pub struct ErrorAnswer {
    pub error: String,
    pub hint: Option<String>,
    /// The exit code `agentbox` would exit with (3: not found, 4: refused, …).
    pub code: i32,
}

/// A node of a box's history.
#[derive(ToSchema)]
pub struct NodeAnswer {
    pub id: String,
    pub parent: Option<String>,
    /// The environment it was committed in.
    pub env: String,
    pub seq: u64,
    pub message: String,
    pub command: Option<String>,
    #[schema(format = DateTime)]
    pub created: String,
}

/// One row of the list: an environment (a box or a versioned directory).
#[derive(ToSchema)]
pub struct ListedAnswer {
    pub name: String,
    pub head: String,
    /// `box` or `directory`.
    pub kind: String,
    /// `running`, `stopped`, `mounted` or `unmounted`.
    pub state: String,
}

/// A box made by create or fork: its record, HEAD, and the notes the operation printed.
#[derive(ToSchema)]
pub struct MadeAnswer {
    pub name: String,
    pub id: String,
    pub head: String,
    pub forked_from: Option<String>,
    pub notes: Option<Vec<String>>,
}

/// A command run in a box: its exit status, its output (bounded), and the node it made.
#[derive(ToSchema)]
pub struct ExecAnswer {
    pub status: i32,
    /// Stdout and stderr together; cut in the middle past `max_output` (see `note`).
    pub output: String,
    pub output_bytes: usize,
    pub truncated: bool,
    pub note: Option<String>,
    /// The node its changes made (null: it changed nothing, or capture is off).
    pub node: Option<String>,
}

/// A checkout (or undo): the node now HEAD and how many processes were killed.
#[derive(ToSchema)]
pub struct CheckedOutAnswer {
    pub id: String,
    pub killed: usize,
}

/// A node and what it changed from its parent.
#[derive(ToSchema)]
pub struct ShownAnswer {
    pub node: NodeAnswer,
    pub changes: Vec<ChangeAnswer>,
}

/// A path that changed.
#[derive(ToSchema)]
pub struct ChangeAnswer {
    pub path: String,
}

/// A tag set or deleted: its name and node.
#[derive(ToSchema)]
pub struct TagAnswer {
    pub node: String,
}

/// A part of a file of a box.
#[derive(ToSchema)]
pub struct FileAnswer {
    pub path: String,
    pub size: u64,
    pub offset: u64,
    pub length: u64,
    /// `utf-8` or `base64`.
    pub encoding: String,
    pub content: String,
    pub more: bool,
}

/// A directory of a box.
#[derive(ToSchema)]
pub struct ListingAnswer {
    pub path: String,
    pub entries: Vec<EntryAnswer>,
    pub truncated: bool,
}

/// An entry of a directory of a box.
#[derive(ToSchema)]
pub struct EntryAnswer {
    pub name: String,
    pub kind: String,
}

/// A destroyed box.
#[derive(ToSchema)]
pub struct DestroyedAnswer {
    pub destroyed: String,
    pub id: String,
    pub deleted_branches: Vec<String>,
    pub notes: Vec<String>,
}

/// Anything the command line's `--json` prints for the operation (an object).
#[derive(ToSchema)]
pub struct ObjectAnswer {}
