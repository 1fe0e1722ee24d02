//! Errors as the API answers them: the command line's message, hint and exit code as JSON
//! (`{"error", "hint", "code"}`), under the HTTP status the exit code's class maps to; and
//! the extractors that turn a malformed request into such an error instead of axum's plain
//! text.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;

use crate::errors::{CliError, ExitCode};

/// A failed request: the error, and the status it is answered with.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: CliError,
}

/// The HTTP status of a command line exit code.
pub fn status_of(code: i32) -> StatusCode {
    match code {
        2 => StatusCode::BAD_REQUEST,
        3 => StatusCode::NOT_FOUND,
        4 => StatusCode::CONFLICT,
        5 => StatusCode::LOCKED,
        6 => StatusCode::FORBIDDEN,
        // 126 and 127: a command that cannot be run in the box (not executable, not there),
        // as a shell says; the request was understood, the command is what is wrong.
        8 | 9 | 126 | 127 => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<CliError> for ApiError {
    fn from(error: CliError) -> ApiError {
        ApiError {
            status: status_of(error.code),
            error,
        }
    }
}

impl ApiError {
    /// A request the API cannot read (`status`: the rejection's own, e.g. 413 for a body
    /// over the limit).
    pub fn bad_request(status: StatusCode, what: String) -> ApiError {
        ApiError {
            status,
            error: CliError::usage(what, "the request's shape is in /api/openapi.json"),
        }
    }

    pub fn failure(message: String) -> ApiError {
        CliError::new(ExitCode::Failure, message, None).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": self.error.message,
            "hint": self.error.hint,
            "code": self.error.code,
        });
        (self.status, Json(body)).into_response()
    }
}

/// A JSON body, or a JSON error (400, 413 over the limit, 415 without the content type).
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(e) => Err(rejected_json(e)),
        }
    }
}

fn rejected_json(e: JsonRejection) -> ApiError {
    let status = match e.status() {
        // Axum answers a body of the wrong shape 422; it is a bad request like any other.
        StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
        s => s,
    };
    ApiError::bad_request(status, e.body_text())
}

/// A query string, or a JSON error (400).
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e: QueryRejection| {
                ApiError::bad_request(StatusCode::BAD_REQUEST, e.body_text())
            })
    }
}

/// Path parameters, or a JSON error (400).
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e: PathRejection| {
                ApiError::bad_request(StatusCode::BAD_REQUEST, e.body_text())
            })
    }
}

/// What answers a route nothing else matches.
pub async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        error: CliError::new(
            ExitCode::NotFound,
            format!("no API route {}", uri.path()),
            Some("the routes are listed in /api/openapi.json".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_map_to_their_class_of_status() {
        assert_eq!(status_of(2), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(3), StatusCode::NOT_FOUND);
        assert_eq!(status_of(4), StatusCode::CONFLICT);
        assert_eq!(status_of(1), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(status_of(9), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status_of(126), StatusCode::UNPROCESSABLE_ENTITY);
    }
}
