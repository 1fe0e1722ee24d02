//! The OpenAPI document (3.1) at `/api/openapi.json`, generated from the routes' and types'
//! annotations: every route, its parameters, its body's schema and its answers, and the
//! bearer token as the security every operation needs but `/api/hello` (the server's proof
//! that it holds the token, asked for before sending it).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::answers::*;
use super::params::*;

#[derive(OpenApi)]
#[openapi(
    info(title = "agentbox", description = "Isolated, versioned boxes for coding agents: the HTTP API of `agentbox serve`."),
    paths(
        super::boxes::list, super::boxes::create, super::boxes::status, super::boxes::destroy,
        super::boxes::exec, super::boxes::fork, super::boxes::tournament,
        super::boxes::checkpoint_create, super::boxes::checkpoint_list,
        super::history::log, super::history::show, super::history::diff,
        super::history::checkout, super::history::undo, super::history::tags,
        super::history::tag, super::history::untag,
        super::files::read, super::files::list,
        super::events::events, super::procs::list, super::procs::log, super::hello::hello,
    ),
    components(schemas(
        ErrorAnswer, NodeAnswer, ListedAnswer, MadeAnswer, ExecAnswer, CheckedOutAnswer,
        ShownAnswer, ChangeAnswer, TagAnswer, FileAnswer, ListingAnswer, EntryAnswer,
        DestroyedAnswer, ObjectAnswer, CreateBody, ExecBody, CheckoutBody, TagBody, ForkBody,
        CandidateBody, TournamentBody, CheckpointBody, super::procs::LogChunk,
        super::hello::HelloAnswer,
    )),
    modifiers(&Bearer),
    security(("bearer" = [])),
)]
struct ApiDoc;

/// The token scheme: `Authorization: Bearer <token>`.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document, as JSON.
pub fn document() -> serde_json::Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|e| {
        serde_json::json!({"openapi": "3.1.0", "info": {"title": "agentbox", "version": "", "description": format!("cannot encode the document: {e}")}, "paths": {}})
    })
}
