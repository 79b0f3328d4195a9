//! TLS for `wss://` relays: a rustls client configuration (the `ring` provider) that trusts Mozilla's roots
//! (compiled in from `webpki-roots`, so no system CA store is needed) plus, optionally, the CA certificates
//! of a PEM file the user names. It is built once and shared by every connection.

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Largest CA file read. A bundle of every Mozilla root is about 220 KB; a file much larger than that is
/// not a CA file, and reading it whole would only waste memory at startup.
pub const MAX_CA_FILE_BYTES: u64 = 4 << 20;

/// Why a relay TLS configuration could not be built. Each names the CA file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The CA file could not be read.
    #[error("cannot read the relay CA file {}: {error}", path.display())]
    ReadCaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The CA file is larger than [`MAX_CA_FILE_BYTES`].
    #[error("the relay CA file {} is larger than {MAX_CA_FILE_BYTES} bytes", path.display())]
    CaFileTooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A PEM section of the CA file is malformed.
    #[error("the relay CA file {} is not valid PEM: {error}", path.display())]
    BadPem {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        error: pem::Error,
    },
    /// The CA file holds no `CERTIFICATE` section.
    #[error(
        "the relay CA file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        path.display()
    )]
    NoCertificates {
        /// The file.
        path: PathBuf,
    },
    /// A certificate in the CA file cannot be used as a trust anchor (it is not valid X.509).
    #[error("certificate {index} in the relay CA file {} is not usable: {error}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// Which certificate (1 is the first in the file).
        index: usize,
        /// What rustls said.
        error: rustls::Error,
    },
    /// rustls refused the configuration (not expected with the ring provider's defaults).
    #[error("cannot build the TLS client configuration: {0}")]
    Config(rustls::Error),
}

/// The TLS client configuration for `wss://` relays; cheap to clone (the configuration is shared).
#[derive(Debug, Clone)]
pub struct RelayTls {
    config: Arc<ClientConfig>,
    extra_roots: usize,
}

/// The configuration [`RelayConn::connect`](super::RelayConn::connect) uses: the installed one, or else
/// Mozilla's roots alone, built on first use.
static PROCESS_DEFAULT: OnceLock<RelayTls> = OnceLock::new();

impl RelayTls {
    /// Trusts Mozilla's roots and, when `ca_file` is given, every certificate in that PEM file as well
    /// (e.g. a private CA, or a relay's self-signed certificate).
    pub fn new(ca_file: Option<&Path>) -> Result<RelayTls, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let mut extra_roots = 0;
        if let Some(path) = ca_file {
            for cert in read_ca_file(path)? {
                extra_roots += 1;
                roots.add(cert).map_err(|error| TlsError::BadCertificate {
                    path: path.to_path_buf(),
                    index: extra_roots,
                    error,
                })?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(RelayTls {
            config: Arc::new(config),
            extra_roots,
        })
    }

    /// The rustls configuration.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// How many certificates came from the CA file.
    pub fn extra_roots(&self) -> usize {
        self.extra_roots
    }

    /// Makes this the configuration of every later [`RelayConn::connect`](super::RelayConn::connect) in
    /// this process. Only the first call (before any `wss://` connection) takes effect; later ones give
    /// the configuration back, as rustls's `CryptoProvider::install_default` does.
    pub fn install_default(self) -> Result<(), RelayTls> {
        PROCESS_DEFAULT.set(self)
    }

    /// The installed configuration, or Mozilla's roots alone (built once).
    pub fn process_default() -> Result<RelayTls, TlsError> {
        if let Some(tls) = PROCESS_DEFAULT.get() {
            return Ok(tls.clone());
        }
        let tls = RelayTls::new(None)?;
        Ok(PROCESS_DEFAULT.get_or_init(|| tls).clone())
    }
}

/// Reads every certificate in a PEM file; other sections (keys, CRLs) are skipped.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read_error = |error| TlsError::ReadCaFile {
        path: path.to_path_buf(),
        error,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(read_error)?
        .take(MAX_CA_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(TlsError::CaFileTooLarge {
            path: path.to_path_buf(),
        });
    }
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::BadPem {
            path: path.to_path_buf(),
            error,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificates {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// Whether a connect error is the TLS handshake failing (an untrusted or mismatched certificate, a TLS
/// alert, a name rustls cannot check) rather than the network or the WebSocket upgrade.
pub(crate) fn is_handshake_failure(error: &tokio_tungstenite::tungstenite::Error) -> bool {
    use tokio_tungstenite::tungstenite::Error;
    match error {
        Error::Tls(_) => true,
        Error::Io(e) => e
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
        _ => false,
    }
}
