//! `wss://` relays over real TLS on 127.0.0.1: the embedded relay behind a TLS-terminating proxy whose
//! certificate comes from a CA made at test time. A connection that trusts the CA file publishes and
//! subscribes; one that trusts only Mozilla's roots is refused; a bad CA file is a typed error.

use agentwire_nostr::crypto::Crypto;
use agentwire_nostr::relay_conn::{Incoming, RelayConn, RelayTls, TlsError};
use nostr::prelude::{EventBuilder, Filter, Keys, Kind};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tempfile::TempDir;
use tokio::net::{TcpListener, TcpStream};

/// How long a connection that should succeed may take (a TLS handshake on loopback takes milliseconds).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a refused connection is given to succeed anyway: several handshake attempts at the backoff's
/// first delays (100, 200, 400 ms).
const REFUSED_WAIT: Duration = Duration::from_millis(1500);
/// How long to wait for an event on a subscription.
const RECV_TIMEOUT: Duration = Duration::from_secs(5);

/// A CA, and a server certificate it issued for `localhost` and 127.0.0.1.
struct TestPki {
    ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: PrivateKeyDer<'static>,
}

fn make_pki() -> TestPki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "agentwire test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let mut server_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    server_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    TestPki {
        ca_pem: ca_cert.pem(),
        server_chain: vec![server_cert.der().clone(), ca_cert.der().clone()],
        server_key: PrivatePkcs8KeyDer::from(server_key.serialize_der()).into(),
    }
}

/// A TLS-terminating proxy on 127.0.0.1 in front of `upstream`; counts failed handshakes.
struct TlsProxy {
    addr: SocketAddr,
    failed_handshakes: Arc<AtomicUsize>,
}

async fn start_proxy(pki: &TestPki, listener: TcpListener, upstream: SocketAddr) -> TlsProxy {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(pki.server_chain.clone(), pki.server_key.clone_key())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let addr = listener.local_addr().unwrap();
    let failed_handshakes = Arc::new(AtomicUsize::new(0));
    let failed = failed_handshakes.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, failed) = (acceptor.clone(), failed.clone());
            tokio::spawn(async move {
                let mut tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(_) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                };
                let Ok(mut relay) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut relay).await;
            });
        }
    });
    TlsProxy {
        addr,
        failed_handshakes,
    }
}

struct Setup {
    dir: TempDir,
    relay: agentwire_relay::RelayHandle,
    proxy: TlsProxy,
    ca_file: PathBuf,
}

async fn setup() -> Setup {
    let dir = TempDir::new().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut config = agentwire_relay::RelayConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        dir.path().join("relay.sqlite"),
    );
    // The proxy passes the Host its clients send: the relay takes the names it is reached at behind the
    // proxy as its own (its public URLs), and no other.
    config.public_urls = vec![
        format!("wss://127.0.0.1:{port}"),
        format!("wss://localhost:{port}"),
    ];
    let relay = agentwire_relay::start(config).await.unwrap();
    let pki = make_pki();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let proxy = start_proxy(&pki, listener, relay.local_addr()).await;
    Setup {
        dir,
        relay,
        proxy,
        ca_file,
    }
}

async fn next_event(rx: &mut tokio::sync::mpsc::Receiver<Incoming>) -> nostr::prelude::Event {
    loop {
        match tokio::time::timeout(RECV_TIMEOUT, rx.recv()).await {
            Ok(Some(Incoming::Event { event, .. })) => return *event,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("connection closed"),
            Err(_) => panic!("no event within {RECV_TIMEOUT:?}"),
        }
    }
}

#[tokio::test]
async fn wss_with_the_ca_file_publishes_and_subscribes() {
    let s = setup().await;
    let tls = RelayTls::new(Some(&s.ca_file)).unwrap();
    assert_eq!(tls.extra_roots(), 1);
    let url = format!("wss://127.0.0.1:{}", s.proxy.addr.port());
    let (conn, mut rx) = RelayConn::connect_with_tls(&url, tls.clone());
    assert!(conn.wait_connected(CONNECT_TIMEOUT).await, "{url}");

    let author = Crypto::new(Keys::generate());
    conn.subscribe(
        "mine",
        vec![Filter::new()
            .author(author.public_key())
            .kind(Kind::TextNote)],
    );
    // A plain ws:// subscriber straight to the relay sees what came in over TLS.
    let (plain, mut plain_rx) = RelayConn::connect(&s.relay.url());
    assert!(plain.wait_connected(CONNECT_TIMEOUT).await);
    plain.subscribe(
        "mine",
        vec![Filter::new()
            .author(author.public_key())
            .kind(Kind::TextNote)],
    );
    tokio::time::sleep(Duration::from_millis(100)).await;

    let event = author.sign(EventBuilder::new(Kind::TextNote, "over TLS"));
    let ok = conn.publish(&event).await.unwrap();
    assert!(ok.accepted, "{ok:?}");
    assert_eq!(next_event(&mut rx).await.id, event.id);
    assert_eq!(next_event(&mut plain_rx).await.id, event.id);

    // The certificate's DNS name works too.
    let url = format!("wss://localhost:{}", s.proxy.addr.port());
    let (by_name, _rx) = RelayConn::connect_with_tls(&url, tls);
    assert!(by_name.wait_connected(CONNECT_TIMEOUT).await, "{url}");
    assert_eq!(s.proxy.failed_handshakes.load(Ordering::SeqCst), 0);
    drop(s.dir);
}

/// A log sink for one test (the current-thread runtime runs the connection's task on this thread).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn wss_without_the_ca_is_refused() {
    let logs = Logs::default();
    let sink = logs.clone();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish(),
    );
    let s = setup().await;
    let url = format!("wss://127.0.0.1:{}", s.proxy.addr.port());
    let (conn, _rx) = RelayConn::connect_with_tls(&url, RelayTls::new(None).unwrap());
    assert!(!conn.wait_connected(REFUSED_WAIT).await);
    // Refused in the TLS handshake, and tried again with the backoff.
    assert!(
        s.proxy.failed_handshakes.load(Ordering::SeqCst) >= 2,
        "failed handshakes: {}",
        s.proxy.failed_handshakes.load(Ordering::SeqCst)
    );
    // Said once at warn level, with the relay and rustls's reason.
    let text = logs.text();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("TLS handshake"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains(&url), "{text}");
    assert!(warnings[0].contains("UnknownIssuer"), "{text}");
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_bad_ca_file_is_a_typed_error() {
    let dir = TempDir::new().unwrap();
    let missing = dir.path().join("missing.pem");
    let err = RelayTls::new(Some(&missing)).unwrap_err();
    assert!(matches!(err, TlsError::ReadCaFile { .. }), "{err}");
    assert!(err.to_string().contains("missing.pem"), "{err}");

    let not_pem = write(dir.path(), "not.pem", "hello, I am not a certificate\n");
    let err = RelayTls::new(Some(&not_pem)).unwrap_err();
    assert!(matches!(err, TlsError::NoCertificates { .. }), "{err}");

    let bad_base64 = write(
        dir.path(),
        "bad64.pem",
        "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----\n",
    );
    let err = RelayTls::new(Some(&bad_base64)).unwrap_err();
    assert!(matches!(err, TlsError::BadPem { .. }), "{err}");

    let not_x509 = write(
        dir.path(),
        "garbage.pem",
        "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
    );
    let err = RelayTls::new(Some(&not_x509)).unwrap_err();
    assert!(
        matches!(err, TlsError::BadCertificate { index: 1, .. }),
        "{err}"
    );

    let good = write(dir.path(), "ca.pem", &make_pki().ca_pem);
    assert_eq!(RelayTls::new(Some(&good)).unwrap().extra_roots(), 1);
}
