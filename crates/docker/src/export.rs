//! A container's whole filesystem as one tar (what `docker export` does), and the part of
//! an image's configuration an export drops (what a flattened image must be given again
//! when the tar is imported: environment, command, entry point, working directory, user,
//! exposed ports).

use std::io::Write;
use std::path::Path;

use futures_util::StreamExt;

use crate::engine::Engine;
use crate::Result;

/// The configuration of an image that `docker export` does not carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunConfig {
    /// `KEY=VALUE` each.
    pub env: Vec<String>,
    pub cmd: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    /// `80/tcp` each.
    pub exposed_ports: Vec<String>,
}

impl RunConfig {
    /// As the Dockerfile instructions an import applies (`ENV`, `CMD`, …): a command and
    /// an entry point in their JSON form, other values double-quoted with `\`, `"` and
    /// `$` escaped, so that no character of a value is read as syntax or expanded. A
    /// value with a line break cannot be given this way: `Err` names it.
    pub fn changes(&self) -> std::result::Result<Vec<String>, String> {
        let quoted = |what: &str, v: &str| -> std::result::Result<String, String> {
            if v.contains(['\n', '\r']) {
                return Err(format!("{what} holds a line break"));
            }
            let mut q = String::from("\"");
            for ch in v.chars() {
                if matches!(ch, '\\' | '"' | '$') {
                    q.push('\\');
                }
                q.push(ch);
            }
            q.push('"');
            Ok(q)
        };
        let json = |v: &Vec<String>| serde_json::to_string(v).map_err(|e| e.to_string());
        let mut out = Vec::new();
        for kv in &self.env {
            if let Some((k, v)) = kv.split_once('=') {
                if k.is_empty() || k.contains(|c: char| c.is_whitespace() || c == '=') {
                    return Err(format!("environment variable {k:?} has no usable name"));
                }
                out.push(format!("ENV {k}={}", quoted(&format!("variable {k}"), v)?));
            }
        }
        if let Some(w) = self.workdir.as_ref().filter(|w| !w.is_empty()) {
            out.push(format!("WORKDIR {}", quoted("the working directory", w)?));
        }
        if let Some(u) = self.user.as_ref().filter(|u| !u.is_empty()) {
            out.push(format!("USER {}", quoted("the user", u)?));
        }
        for p in &self.exposed_ports {
            out.push(format!("EXPOSE {}", quoted("an exposed port", p)?));
        }
        if let Some(e) = &self.entrypoint {
            out.push(format!("ENTRYPOINT {}", json(e)?));
        }
        if let Some(c) = &self.cmd {
            out.push(format!("CMD {}", json(c)?));
        }
        Ok(out)
    }
}

impl Engine {
    /// Write the filesystem of container `container` (running or not) to the file `dest`
    /// as one tar.
    pub fn export_container(&self, container: &str, dest: &Path) -> Result<()> {
        let doing = format!("export container {container}");
        let mut file = std::io::BufWriter::new(fs_err::File::create(dest)?);
        self.block_on(async {
            let mut body = self.docker.export_container(container);
            while let Some(piece) = body.next().await {
                let piece = piece.map_err(|e| self.missing_or(container, "export", e))?;
                file.write_all(&piece)?;
            }
            Ok::<_, crate::DockerError>(())
        })?;
        file.into_inner()
            .map_err(|e| std::io::Error::other(format!("{doing}: {}", e.error())))?
            .sync_all()?;
        Ok(())
    }

    /// What `docker export` drops of image `image`'s configuration.
    pub fn run_config(&self, image: &str) -> Result<RunConfig> {
        let inspected = self
            .block_on(self.docker.inspect_image(image))
            .map_err(|e| {
                if crate::engine::is_not_found(&e) {
                    crate::DockerError::ImageMissing {
                        engine: self.endpoint().shown(),
                        image: image.to_owned(),
                    }
                } else {
                    self.fail(&format!("inspect image {image}"), e)
                }
            })?;
        let c = inspected.config.unwrap_or_default();
        Ok(RunConfig {
            env: c.env.unwrap_or_default(),
            // An empty list is none (an engine says either).
            cmd: c.cmd.filter(|v| !v.is_empty()),
            entrypoint: c.entrypoint.filter(|v| !v.is_empty()),
            workdir: c.working_dir,
            user: c.user,
            exposed_ports: c.exposed_ports.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_becomes_instructions_whose_values_are_json() {
        let c = RunConfig {
            env: vec!["PATH=/usr/bin:/bin".into(), "Q=a \"b\" $c".into()],
            cmd: Some(vec!["sh".into(), "-c".into(), "echo hi".into()]),
            entrypoint: None,
            workdir: Some("/workspace".into()),
            user: Some("1000:1000".into()),
            exposed_ports: vec!["8080/tcp".into()],
        };
        assert_eq!(
            c.changes().expect("changes"),
            [
                r#"ENV PATH="/usr/bin:/bin""#,
                r#"ENV Q="a \"b\" \$c""#,
                r#"WORKDIR "/workspace""#,
                r#"USER "1000:1000""#,
                r#"EXPOSE "8080/tcp""#,
                r#"CMD ["sh","-c","echo hi"]"#,
            ]
        );
        let broken = RunConfig {
            env: vec!["X=a\nb".into()],
            ..Default::default()
        };
        assert!(broken.changes().is_err());
    }
}
