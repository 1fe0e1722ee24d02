//! What a configuration key is: the type of its value ([`Kind`]), a value ([`Value`]), a
//! check beyond the type ([`Check`]) and which layers may set it ([`Trust`]). Data only: the
//! keys themselves are in [`super::keys`], the trust rule in [`super::trust`].

/// The type of a key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true` or `false` (also `yes`/`no`, `on`/`off`, `1`/`0` when given as text).
    Bool,
    /// A whole number ≥ 0.
    U64,
    /// A finite number.
    F64,
    /// One of a fixed set of words.
    Enum(&'static [&'static str]),
    /// A size in bytes: a number, or a number with K, M, G or T (binary units): `512M`.
    Size,
    /// Any text.
    String,
    /// A list of texts.
    List,
    /// Named texts (`docker.hosts`: name → engine URL). A member is set on its own as
    /// `KEY.NAME` (`config set docker.hosts.big ssh://me@big`); files write it nested.
    Map,
}

impl Kind {
    /// A short name of the type, as `config list` and error messages show it.
    pub fn describe(&self) -> String {
        match self {
            Kind::Bool => "bool".into(),
            Kind::U64 => "integer".into(),
            Kind::F64 => "number".into(),
            Kind::Enum(words) => words.join("|"),
            Kind::Size => "size".into(),
            Kind::String => "string".into(),
            Kind::List => "list".into(),
            Kind::Map => "map".into(),
        }
    }
}

/// A typed value of a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    U64(u64),
    F64(f64),
    /// The value of a [`Kind::Enum`] or [`Kind::String`] key.
    Str(String),
    /// A size as written (`"512M"`) and in bytes.
    Size {
        text: String,
        bytes: u64,
    },
    List(Vec<String>),
    Map(std::collections::BTreeMap<String, String>),
}

impl Value {
    /// The value as JSON (and so as YAML in a file): sizes keep their text.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Bool(b) => (*b).into(),
            Value::U64(n) => (*n).into(),
            Value::F64(f) => (*f).into(),
            Value::Str(s) => s.clone().into(),
            Value::Size { text, .. } => text.clone().into(),
            Value::List(items) => items.clone().into(),
            Value::Map(m) => serde_json::Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), v.clone().into()))
                    .collect(),
            ),
        }
    }

    /// The value on one line for people: lists as a flow list `[a, b]`.
    pub fn display(&self) -> String {
        match self {
            Value::Bool(b) => b.to_string(),
            Value::U64(n) => n.to_string(),
            Value::F64(f) => f.to_string(),
            Value::Str(s) => s.clone(),
            Value::Size { text, .. } => text.clone(),
            Value::List(items) => format!("[{}]", items.join(", ")),
            Value::Map(m) => format!(
                "{{{}}}",
                m.iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// A check of a value beyond its type: why it is refused.
pub type Check = fn(&Value) -> Result<(), String>;

/// One configuration key.
#[derive(Debug)]
pub struct Key {
    /// Dotted name: `section.name` (camelCase names, as in the files).
    pub name: &'static str,
    pub kind: Kind,
    /// The built-in default; `None` when the key is unset unless configured.
    pub default: fn() -> Option<Value>,
    /// One line for `config list` and the schema.
    pub description: &'static str,
    /// A check beyond the type (ranges, shapes); returns why the value is refused.
    pub check: Option<Check>,
    /// Which layers may set it (see the table in [`super::keys`] and [`super::trust`]).
    pub trust: Trust,
}

impl Key {
    pub fn default_value(&self) -> Option<Value> {
        (self.default)()
    }
}

/// Which layers may set a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Any layer, an untrusted project file too.
    Any,
    /// Any layer; an untrusted project file only to something at least as strict as the
    /// user's layers give.
    Stricter(Stricter),
    /// Only the user's own layers (the home's files, flags), or a project file the user
    /// trusted.
    User,
}

/// How a [`Trust::Stricter`] key's values compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stricter {
    /// A switch whose stricter position is the one given.
    Bool(bool),
    /// A limit (memory, processes, CPUs): setting one where there is none, or a lower one.
    Limit,
    /// `box.network`: `none` is stricter than `private`, which is stricter than `host`.
    Network,
    /// A list of paths shown (`PATH`) or hidden (`!PATH`): the file's hiding entries are
    /// added after the user's list; its showing entries are ignored.
    HideOnly,
}

impl Trust {
    /// The class's name, as `config list` and the schema show it.
    pub fn name(self) -> &'static str {
        match self {
            Trust::Any => "any",
            Trust::Stricter(_) => "stricter",
            Trust::User => "user",
        }
    }

    /// Who may set the key, in a few words.
    pub fn describe(self) -> String {
        match self {
            Trust::Any => "any layer".into(),
            Trust::Stricter(s) => format!(
                "any layer; an untrusted project file only {}",
                match s {
                    Stricter::Bool(b) => format!("to {b}"),
                    Stricter::Limit => "to a lower limit".into(),
                    Stricter::Network => "to less network (none < private < host)".into(),
                    Stricter::HideOnly => "to hide more (!PATH entries)".into(),
                }
            ),
            Trust::User => "the user's files and flags, or a trusted project file".into(),
        }
    }
}
