//! The `tcp://` transport with TLS, on keep-alive connections.
//!
//! bollard's own TLS transport keeps no connection idle: every request pays a TCP and a
//! TLS handshake, and an exec is at least three requests — over a link with any latency,
//! that is most of the command's cost. This one keeps connections for reuse, as the docker
//! CLI does. Trust is the docker CLI's too: the system's roots and the CA of the
//! certificate directory; the client presents its certificate and key when they are there
//! (without them the engine refuses the connection, which is what the user should hear).

use std::path::Path;
use std::sync::Arc;

use bollard::{BollardRequest, ClientVersion, Docker};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::endpoint::TlsFiles;

/// A client of the engine at `host` (`tcp://` or `https://`) with the TLS material `tls`;
/// `Err` says what is wrong with that material.
pub(crate) fn connect(
    host: &str,
    tls: &TlsFiles,
    timeout_secs: u64,
    version: &ClientVersion,
) -> Result<Docker, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    // A system without a readable store still has the CA below.
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let ca = certificates(&tls.ca)?;
    let (added, _) = roots.add_parsable_certificates(ca);
    if added == 0 {
        return Err(format!("{}: no CA certificate in it", tls.ca.display()));
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = if tls.cert.exists() || tls.key.exists() {
        let certs = certificates(&tls.cert)?;
        let key = PrivateKeyDer::from_pem_file(&tls.key)
            .map_err(|e| format!("{}: {e}", tls.key.display()))?;
        builder
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("{} and {}: {e}", tls.cert.display(), tls.key.display()))?
    } else {
        builder.with_no_client_auth()
    };
    let mut http = HttpConnector::new();
    // The connector is given https:// addresses; the TLS layer wraps it.
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnector::from((http, config));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https);
    let address = match host.split_once("://") {
        Some((_, rest)) => format!("https://{rest}"),
        None => format!("https://{host}"),
    };
    Docker::connect_with_custom_transport(
        move |req: BollardRequest| {
            let client = client.clone();
            async move {
                client
                    .request(req)
                    .await
                    .map_err(bollard::errors::Error::from)
            }
        },
        Some(address),
        timeout_secs,
        version,
    )
    .map_err(|e| e.to_string())
}

/// The certificates in PEM file `path`, at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}
