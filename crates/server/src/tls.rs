//! TLS for clients and replica links: Redis's `tls-*` settings turned into rustls
//! configurations (ring as the crypto provider).
//!
//! TLS lives only in the server: the node sees plaintext RESP and peer messages. Clients are
//! served by the event loops with a [`rustls::ServerConnection`] per connection
//! (event_loop.rs); replica links wrap their sockets with tokio-rustls (cluster/).
//!
//! Replica links are mutually authenticated by the CA (`tls-ca-cert-file`): each side presents
//! `tls-cert-file` and accepts only a peer whose chain ends at that CA. Host names are not
//! checked on links (a replica is known by its certificate's issuer and then by the membership
//! handshake, not by the name it was dialed as), as Redis does not check them either.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// `tls-auth-clients`: whether a client must present a certificate signed by the CA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthClients {
    /// Required (Redis's default).
    Yes,
    /// Not asked for.
    No,
    /// Asked for; a client without one is served, one with a certificate the CA did not sign
    /// is refused.
    Optional,
}

impl AuthClients {
    pub fn parse(text: &str) -> Result<AuthClients, String> {
        match text.to_ascii_lowercase().as_str() {
            "yes" => Ok(AuthClients::Yes),
            "no" => Ok(AuthClients::No),
            "optional" => Ok(AuthClients::Optional),
            _ => Err(format!(
                "invalid tls-auth-clients '{text}': expected yes, no or optional"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AuthClients::Yes => "yes",
            AuthClients::No => "no",
            AuthClients::Optional => "optional",
        }
    }
}

/// The `tls-*` keys as given by the config file and the flags.
#[derive(Clone, Debug, Default)]
pub struct TlsArgs {
    pub port: Option<u16>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub ca_cert_file: Option<PathBuf>,
    pub auth_clients: Option<String>,
    pub replication: Option<String>,
    pub cluster: Option<String>,
}

/// Validated TLS settings.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// Port of the TLS listener for clients; 0: none.
    pub port: u16,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_cert_file: PathBuf,
    pub auth_clients: AuthClients,
    /// Replica links run over TLS (`tls-replication yes` or `tls-cluster yes`: Lattice's
    /// replica links are its replication and its cluster bus at once).
    pub links: bool,
}

fn yes_no(key: &str, value: Option<&str>) -> Result<bool, String> {
    match value.map(str::to_ascii_lowercase).as_deref() {
        None | Some("no") => Ok(false),
        Some("yes") => Ok(true),
        Some(other) => Err(format!("invalid {key} '{other}': expected yes or no")),
    }
}

/// Validates the `tls-*` keys. None when neither a TLS port nor TLS links are asked for (the
/// files may still be named, as in a Redis config that keeps them for later).
pub fn settings(a: TlsArgs) -> Result<Option<TlsSettings>, String> {
    let auth_clients = match a.auth_clients.as_deref() {
        None => AuthClients::Yes,
        Some(text) => AuthClients::parse(text)?,
    };
    let links = yes_no("tls-replication", a.replication.as_deref())?
        | yes_no("tls-cluster", a.cluster.as_deref())?;
    let port = a.port.unwrap_or(0);
    if port == 0 && !links {
        return Ok(None);
    }
    let need = |file: Option<PathBuf>, key: &str| {
        file.filter(|f| !f.as_os_str().is_empty()).ok_or_else(|| {
            format!(
                "TLS is configured (tls-port, tls-replication or tls-cluster) but {key} is not set"
            )
        })
    };
    Ok(Some(TlsSettings {
        port,
        cert_file: need(a.cert_file, "tls-cert-file")?,
        key_file: need(a.key_file, "tls-key-file")?,
        // As Redis: the CA is needed whenever TLS is on, since it checks clients (unless
        // tls-auth-clients no) and replicas.
        ca_cert_file: need(a.ca_cert_file, "tls-ca-cert-file")?,
        auth_clients,
        links,
    }))
}

/// The rustls configurations built from [`TlsSettings`] at start-up.
pub struct TlsConfigs {
    /// For the client listener.
    pub clients: Arc<ServerConfig>,
    /// For replica links: the acceptor's side (a client certificate is required) and the
    /// dialer's (it presents its own and checks the acceptor's). None without TLS links.
    pub link_acceptor: Option<Arc<ServerConfig>>,
    pub link_dialer: Option<Arc<ClientConfig>>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot load certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("cannot load a private key from {}: {e}", path.display()))
}

fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("invalid CA certificate in {}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// Loads the files and builds the configurations; every error names the file and the reason,
/// so a server with a bad certificate does not start.
pub fn configs(s: &TlsSettings) -> Result<TlsConfigs, String> {
    let certs = read_certs(&s.cert_file)?;
    let key = read_key(&s.key_file)?;
    let roots = read_roots(&s.ca_cert_file)?;
    let server_builder = || {
        ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))
    };
    let client_verifier = |optional: bool| {
        let b = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
        let b = if optional {
            b.allow_unauthenticated()
        } else {
            b
        };
        b.build().map_err(|e| format!("TLS: {e}"))
    };
    let mismatch = |e: rustls::Error| {
        format!(
            "tls-cert-file {} and tls-key-file {} do not go together: {e}",
            s.cert_file.display(),
            s.key_file.display()
        )
    };
    let clients = match s.auth_clients {
        AuthClients::No => server_builder()?.with_no_client_auth(),
        AuthClients::Yes => server_builder()?.with_client_cert_verifier(client_verifier(false)?),
        AuthClients::Optional => {
            server_builder()?.with_client_cert_verifier(client_verifier(true)?)
        }
    }
    .with_single_cert(certs.clone(), key.clone_key())
    .map_err(mismatch)?;
    let (link_acceptor, link_dialer) = if s.links {
        let acceptor = server_builder()?
            .with_client_cert_verifier(client_verifier(false)?)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(mismatch)?;
        let provider = provider();
        let verifier = Arc::new(CaOnly {
            roots: roots.clone(),
            algorithms: provider.signature_verification_algorithms,
        });
        let dialer = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(certs, key)
            .map_err(mismatch)?;
        (Some(Arc::new(acceptor)), Some(Arc::new(dialer)))
    } else {
        (None, None)
    };
    Ok(TlsConfigs {
        clients: Arc::new(clients),
        link_acceptor,
        link_dialer,
    })
}

/// The name a dialer gives for a seed `host:port`: the host when it is a valid DNS name or an
/// IP address, else a fixed one ([`CaOnly`] does not compare names).
pub fn link_server_name(seed: &str) -> ServerName<'static> {
    let host = seed.rsplit_once(':').map_or(seed, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .unwrap_or_else(|_| ServerName::try_from("lattice-replica").expect("a valid DNS name"))
}

/// Accepts a replica's certificate when its chain ends at the cluster's CA, whatever names it
/// carries: the CA is what makes a replica one of ours.
#[derive(Debug)]
struct CaOnly {
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for CaOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_redis_names_and_defaults() {
        assert!(settings(TlsArgs::default()).unwrap().is_none());
        let err = settings(TlsArgs {
            port: Some(7000),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("tls-cert-file"), "{err}");
        let full = TlsArgs {
            port: Some(7000),
            cert_file: Some("c.pem".into()),
            key_file: Some("k.pem".into()),
            ca_cert_file: Some("ca.pem".into()),
            ..Default::default()
        };
        let s = settings(full.clone()).unwrap().unwrap();
        assert_eq!(s.auth_clients, AuthClients::Yes);
        assert!(!s.links);
        let s = settings(TlsArgs {
            port: None,
            cluster: Some("yes".into()),
            auth_clients: Some("OPTIONAL".into()),
            ..full.clone()
        })
        .unwrap()
        .unwrap();
        assert!(s.links && s.port == 0 && s.auth_clients == AuthClients::Optional);
        assert!(settings(TlsArgs {
            auth_clients: Some("maybe".into()),
            ..full.clone()
        })
        .is_err());
        assert!(settings(TlsArgs {
            replication: Some("sometimes".into()),
            ..full
        })
        .is_err());
    }

    #[test]
    fn link_names_come_from_the_seed_host() {
        assert_eq!(
            link_server_name("127.0.0.1:7000"),
            ServerName::try_from("127.0.0.1").unwrap()
        );
        assert_eq!(
            link_server_name("[::1]:7000"),
            ServerName::try_from("::1").unwrap()
        );
        assert_eq!(
            link_server_name("node-2.local:7000"),
            ServerName::try_from("node-2.local").unwrap()
        );
        assert_eq!(
            link_server_name("bad host:7000"),
            ServerName::try_from("lattice-replica").unwrap()
        );
    }
}
