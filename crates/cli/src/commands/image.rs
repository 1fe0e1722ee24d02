//! `agentbox image`: import, list and remove base images.

use super::ctx::Ctx;
use crate::args::ImageCmd;
use crate::errors::CliResult;
use crate::render;

pub(super) fn image(ctx: &Ctx, cmd: ImageCmd) -> CliResult {
    match cmd {
        ImageCmd::Import { name, source } => {
            let img = ctx.boxes().import_image(&name, &source, ctx)?;
            ctx.out(&img, || {
                format!(
                    "imported image {name:?}\nUse it: agentbox create --image {name} (inside a project, or with -C DIR)\n"
                )
            })
        }
        ImageCmd::List => {
            let list = ctx.boxes().images()?;
            ctx.out(&list, || {
                let mut s = format!("{:<20} {:<20} SOURCE\n", "NAME", "IMPORTED");
                for i in &list {
                    s.push_str(&format!(
                        "{:<20} {:<20} {}\n",
                        i.name,
                        render::time(&i.imported),
                        i.source
                    ));
                }
                s
            })
        }
        ImageCmd::Build {
            dockerfile,
            docker_host,
        } => {
            let image =
                ctx.boxes()
                    .build_image("docker", &dockerfile, docker_host.as_deref(), ctx)?;
            ctx.out(&serde_json::json!({ "image": image }), || {
                format!("{image}\nUse it: agentbox create --provider docker --image {image}\n")
            })
        }
        ImageCmd::Rm { name } => {
            ctx.boxes().remove_image(&name)?;
            ctx.out(&serde_json::json!({ "removed": name }), || {
                format!("removed image {name:?}\n")
            })
        }
    }
}
