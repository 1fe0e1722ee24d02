//! The façade's handle: [`Boxes`], one agentbox home run by one provider. Every operation a
//! front end calls is a method of it, defined beside its concern (`lifecycle::ops`,
//! `history`, `checkpoints`, `agents`, …); here are only what they all share: the home, the
//! provider, and the store opened once per command.

use std::sync::Arc;

use agentbox_core::home::Home;
use agentbox_store::Store;

use crate::provider::Provider;
use crate::records::record::{self, BoxDirs};
use crate::{BoxError, Result};

/// The boxes (and versioned directories) of one agentbox home, run by its providers: the
/// default one (the local provider) and any others the front end registered (Docker). Each
/// box is run by the provider its record names ([`Boxes::provider_of`]).
///
/// The store is opened on first use and kept for the façade's life (one command), so every
/// operation of a command sees the same reconciled store.
pub struct Boxes {
    pub(crate) home: Home,
    pub(crate) provider: Arc<dyn Provider>,
    others: Vec<Arc<dyn Provider>>,
    store: std::sync::OnceLock<Store>,
}

impl Boxes {
    pub fn new(home: Home, provider: Arc<dyn Provider>) -> Boxes {
        Boxes {
            home,
            provider,
            others: Vec::new(),
            store: std::sync::OnceLock::new(),
        }
    }

    /// Register `provider` beside the default one (a kind already registered is replaced).
    pub fn with_provider(mut self, provider: Arc<dyn Provider>) -> Boxes {
        self.others.retain(|p| p.kind() != provider.kind());
        self.others.push(provider);
        self
    }

    /// The provider of kind `kind` (`local`, `docker`), when registered.
    pub fn provider_named(&self, kind: &str) -> Option<&dyn Provider> {
        std::iter::once(&self.provider)
            .chain(&self.others)
            .find(|p| p.kind() == kind)
            .map(|p| &**p)
    }

    /// The registered providers, the default first.
    pub fn providers(&self) -> impl Iterator<Item = &dyn Provider> {
        std::iter::once(&self.provider)
            .chain(&self.others)
            .map(|p| &**p)
    }

    /// The provider that runs box `name`, as its record says; the default one for a name
    /// that is no box (a versioned directory, whose tree is the store's). A box of a
    /// provider this build lacks is [`BoxError::OtherProvider`].
    pub fn provider_of(&self, name: &str) -> Result<&dyn Provider> {
        if !self.is_box(name) {
            return Ok(&*self.provider);
        }
        let rec = record::read(&self.home, name)?;
        self.provider_named(&rec.provider)
            .ok_or_else(|| BoxError::OtherProvider {
                name: name.to_owned(),
                provider: rec.provider,
            })
    }

    /// Whether box `name`'s tree is held by its provider outside the store (see
    /// [`crate::provider::Trees`]).
    pub(crate) fn held(&self, name: &str) -> Result<bool> {
        Ok(self.is_box(name) && self.provider_of(name)?.trees() == crate::provider::Trees::Held)
    }

    /// The home's store, opened (and reconciled) on first use; [`BoxError::NoStore`] when
    /// nothing was made in this home yet.
    pub fn store(&self) -> Result<&Store> {
        if let Some(s) = self.store.get() {
            return Ok(s);
        }
        let dir = self.existing_store_dir()?;
        let opened = Store::open(&dir)?;
        Ok(self.store.get_or_init(|| opened))
    }

    /// The home's store, made (with `backend`, else the filesystem's best) when there is none.
    pub fn store_or_init(&self, backend: Option<agentbox_store::BackendKind>) -> Result<&Store> {
        if let Some(s) = self.store.get() {
            return Ok(s);
        }
        let opened = Store::open_or_init(&self.home.store_dir(), backend)?;
        Ok(self.store.get_or_init(|| opened))
    }

    /// The store as a crash left it, not reconciled (for `fsck` and `prune`, which report
    /// and remove half-made data themselves). Not kept: reconciling is what it must not do.
    pub fn store_unreconciled(&self) -> Result<Store> {
        Ok(Store::open_unreconciled(&self.existing_store_dir()?)?)
    }

    fn existing_store_dir(&self) -> Result<std::path::PathBuf> {
        let dir = self.home.store_dir();
        if dir.join("store.json").exists() {
            Ok(dir)
        } else {
            Err(BoxError::NoStore { dir })
        }
    }

    pub fn home(&self) -> &Home {
        &self.home
    }

    /// The default provider (the one new boxes get unless told otherwise).
    pub fn provider(&self) -> &dyn Provider {
        &*self.provider
    }

    /// Whether `name` is a box (else it may be a plain versioned directory).
    pub fn is_box(&self, name: &str) -> bool {
        BoxDirs::new(&self.home, name).record().exists()
    }

    /// Refuse box `name` when no registered provider runs it (its record says which).
    pub(crate) fn ours(&self, name: &str) -> Result<()> {
        record::read(&self.home, name)?;
        self.provider_of(name).map(|_| ())
    }
}
