//! A container's filesystem as an image (`docker commit`): how a Docker box's node and
//! checkpoint are made.

use bollard::models::ContainerConfig;
use bollard::query_parameters::CommitContainerOptions;

use crate::engine::Engine;
use crate::Result;

impl Engine {
    /// Commit container `container` as image `repo:tag` with `labels` (the container is
    /// paused meanwhile, so the image is its filesystem at one instant); returns the
    /// image's id.
    pub fn commit(
        &self,
        container: &str,
        repo: &str,
        tag: &str,
        comment: &str,
        labels: &std::collections::HashMap<String, String>,
    ) -> Result<String> {
        self.commit_with_env(container, repo, tag, comment, labels, &[])
    }

    /// [`Engine::commit`] with `env` (`KEY=VALUE` each) over the container's environment in
    /// the image: a key given here has this value (the engine keeps the container's other
    /// variables; none can be removed this way, only given another value).
    pub fn commit_with_env(
        &self,
        container: &str,
        repo: &str,
        tag: &str,
        comment: &str,
        labels: &std::collections::HashMap<String, String>,
        env: &[String],
    ) -> Result<String> {
        let options = CommitContainerOptions {
            container: Some(container.to_owned()),
            repo: Some(repo.to_owned()),
            tag: Some(tag.to_owned()),
            comment: Some(comment.to_owned()),
            pause: true,
            ..Default::default()
        };
        let config = ContainerConfig {
            labels: Some(labels.clone()),
            env: (!env.is_empty()).then(|| env.to_vec()),
            ..Default::default()
        };
        let id = self
            .block_on(self.docker.commit_container(options, config))
            .map_err(|e| self.missing_or(container, "commit", e))?;
        Ok(id.id)
    }
}
