//! A box's credential broker, as the domain sees it (the broker itself is
//! `agentbox_broker`; its provider runs it): the spec a broker of a box is started with —
//! the caller's credentials and the configured upstreams — and the façade operation an
//! agent launcher calls.
//!
//! Invariant: the real credential goes from the caller's environment (or the owner's 0600
//! file) to the provider's broker and nowhere else; what comes back ([`Endpoint`]) holds
//! only the box's placeholder and base URLs, which are for the box's environment.

pub use agentbox_broker::{Credentials, Endpoint, Spec, Upstreams};

use agentbox_core::home::Home;

use crate::config::Config;
use crate::facade::Boxes;
use crate::records::record::{self, BoxRecord};
use crate::{BoxError, Result};

/// The configured upstreams of box `rec` (`broker.anthropicUpstream`,
/// `broker.openaiUpstream` of its project's layers), checked.
pub fn upstreams(home: &Home, rec: &BoxRecord) -> Result<Upstreams> {
    let config =
        Config::load(home, rec.project.as_deref()).map_err(|e| BoxError::Config(Box::new(e)))?;
    let e = config.effective();
    Ok(Upstreams::new(&e.anthropic_upstream, &e.openai_upstream)?)
}

/// What box `rec`'s broker is started with when the box starts (`box.broker`): the
/// credentials of this process (its environment, else the home's saved file) and the
/// configured upstreams.
pub fn spec_from_caller(home: &Home, rec: &BoxRecord) -> Result<Spec> {
    Ok(Spec {
        credentials: Credentials::from_caller(home.root())?,
        upstreams: upstreams(home, rec)?,
    })
}

/// Variables a box with a broker must not be given from the caller: the real credentials
/// and the base URLs its broker sets.
pub fn without_credentials(env: Vec<String>) -> Vec<String> {
    env.into_iter()
        .filter(|kv| {
            let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
            !agentbox_broker::CREDENTIAL_ENV.contains(&key)
                && key != "ANTHROPIC_BASE_URL"
                && key != "OPENAI_BASE_URL"
        })
        .collect()
}

impl Boxes {
    /// Start box `name`'s credential broker with `credentials` (starting the box when it is
    /// stopped), or give its running broker these credentials; where an agent in the box
    /// reaches it. Pass [`Endpoint::env`] to the agent's command (every later command of
    /// the box gets it too, while the broker runs).
    ///
    /// The broker lives as long as the box's run: a stopped box's broker is gone, and the
    /// next start has none unless asked again (or the record's `broker` flag is set).
    pub fn broker(&self, name: &str, credentials: Credentials) -> Result<Endpoint> {
        let rec = record::read(self.home(), name)?;
        let spec = Spec {
            credentials,
            upstreams: upstreams(self.home(), &rec)?,
        };
        self.provider_of(name)?.broker(name, &spec)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_broker_reads_the_token_claude_login_saves() {
        let home = agentbox_core::home::Home::at("/h");
        assert_eq!(
            crate::agents::token_file(&home, "claude"),
            agentbox_broker::credentials::saved_dir(home.root())
                .join(agentbox_broker::credentials::CLAUDE_TOKEN_FILE)
        );
    }

    #[test]
    fn the_real_keys_are_not_forwarded_to_a_box_with_a_broker() {
        let env = vec![
            "ANTHROPIC_API_KEY=sk-real".to_owned(),
            "CLAUDE_EFFORT=high".to_owned(),
            "ANTHROPIC_BASE_URL=https://elsewhere".to_owned(),
            "OPENAI_API_KEY=sk-o".to_owned(),
        ];
        assert_eq!(super::without_credentials(env), vec!["CLAUDE_EFFORT=high"]);
    }
}
