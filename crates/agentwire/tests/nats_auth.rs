//! NATS credentials, TLS and server lists for every NATS connection agentwire makes (the worker in
//! `serve`, and `ask --nats`), against real `nats-server`s that demand them: a token, a user and password,
//! an nkey, mutual TLS with a CA made at test time, and a list whose first server is down. A missing or
//! wrong secret is a clear error, and no secret is ever printed.

mod common;

use agentwire_testkit::NatsServer;
use common::Daemon;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TOKEN_VAR: &str = "AW_TEST_NATS_TOKEN";
const TOKEN: &str = "tok-Zq81-never-shown";
const PASSWORD_VAR: &str = "AW_TEST_NATS_PASSWORD";
const PASSWORD: &str = "pw-Kx7-never-shown";

fn agentwire(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove(TOKEN_VAR)
        .env_remove(PASSWORD_VAR)
        .envs(env.iter().copied())
        .output()
        .expect("agentwire runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

/// `ask --nats <url> --identity <identity> calc 2+3` with `config`: its output.
fn ask(config: &str, url: &str, identity: &str, env: &[(&str, &str)]) -> Output {
    agentwire(
        &[
            "--config",
            config,
            "ask",
            "--nats",
            url,
            "--identity",
            identity,
            "calc",
            "2+3",
        ],
        env,
    )
}

fn assert_answered(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "5");
}

fn assert_no_secret(out: &Output) {
    for secret in [TOKEN, PASSWORD] {
        assert!(
            !text(&out.stdout).contains(secret) && !text(&out.stderr).contains(secret),
            "a secret was printed"
        );
    }
}

#[test]
fn a_token_and_a_user_with_a_password_authenticate_the_worker_and_the_client() {
    let dir = tempfile::tempdir().unwrap();
    for (n, (server_auth, file_auth, env)) in [
        (
            format!("authorization {{ token: \"{TOKEN}\" }}"),
            format!("token_env = \"{TOKEN_VAR}\"\n"),
            (TOKEN_VAR, TOKEN),
        ),
        (
            format!(
                "authorization {{ users: [ {{ user: \"alice\", password: \"{PASSWORD}\" }} ] }}"
            ),
            format!("user = \"alice\"\npassword_env = \"{PASSWORD_VAR}\"\n"),
            (PASSWORD_VAR, PASSWORD),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let nats = NatsServer::start_with_config(&server_auth);
        let config = write(
            dir.path(),
            &format!("a{n}.toml"),
            &format!("[nats]\n{file_auth}"),
        );
        let identity = format!("auth{n}");
        let data = dir.path().join(format!("data{n}"));
        let d = Daemon::start_with_env(
            &data,
            &[
                "--config",
                &config,
                "--nats",
                &nats.url,
                "--identity",
                &identity,
            ],
            &[env],
        );
        assert_eq!(d.ready["nats"]["identity"], identity.as_str());
        let out = ask(&config, &nats.url, &identity, &[env]);
        assert_answered(&out);
        assert_no_secret(&out);

        // Without the variable: said plainly, and nothing connects.
        let out = ask(&config, &nats.url, &identity, &[]);
        assert_ne!(out.status.code(), Some(0));
        assert!(
            text(&out.stderr).contains(&format!("the environment variable {} is not set", env.0)),
            "{}",
            text(&out.stderr)
        );
        // A wrong secret is refused by the server, and neither secret is printed.
        let out = ask(&config, &nats.url, &identity, &[(env.0, "wrong-secret")]);
        assert_ne!(out.status.code(), Some(0));
        assert!(
            text(&out.stderr).to_lowercase().contains("authorization"),
            "{}",
            text(&out.stderr)
        );
        assert_no_secret(&out);
        // `serve` with a wrong secret does not start, and says why.
        let out = agentwire(
            &[
                "serve",
                "--http-listen",
                "127.0.0.1:0",
                "--data-dir",
                dir.path().join(format!("bad{n}")).to_str().unwrap(),
                "--relay-listen",
                "127.0.0.1:0",
                "--roost-socket",
                dir.path().join(format!("bad{n}.sock")).to_str().unwrap(),
                "--config",
                &config,
                "--nats",
                &nats.url,
                "--identity",
                &identity,
            ],
            &[(env.0, "wrong-secret")],
        );
        assert_ne!(out.status.code(), Some(0));
        assert!(
            text(&out.stderr).to_lowercase().contains("authorization"),
            "{}",
            text(&out.stderr)
        );
        assert_no_secret(&out);
        drop(d);
    }
}

#[test]
fn an_nkey_seed_file_authenticates() {
    let dir = tempfile::tempdir().unwrap();
    let user = nkeys::KeyPair::new_user();
    let nats = NatsServer::start_with_config(&format!(
        "authorization {{ users: [ {{ nkey: \"{}\" }} ] }}",
        user.public_key()
    ));
    let seed = write(
        dir.path(),
        "user.nk",
        &format!("{}\n", user.seed().unwrap()),
    );
    let config = write(
        dir.path(),
        "nk.toml",
        &format!("[nats]\nnkey_seed_file = \"{seed}\"\n"),
    );
    let _d = Daemon::start(
        &dir.path().join("data"),
        &[
            "--config",
            &config,
            "--nats",
            &nats.url,
            "--identity",
            "nk1",
        ],
    );
    assert_answered(&ask(&config, &nats.url, "nk1", &[]));
    // Another user's seed is refused.
    let other = write(
        dir.path(),
        "other.nk",
        &nkeys::KeyPair::new_user().seed().unwrap(),
    );
    let config = write(
        dir.path(),
        "other.toml",
        &format!("[nats]\nnkey_seed_file = \"{other}\"\n"),
    );
    let out = ask(&config, &nats.url, "nk1", &[]);
    assert_ne!(out.status.code(), Some(0));
    let seed_text = std::fs::read_to_string(&other).unwrap();
    assert!(
        !text(&out.stderr).contains(seed_text.trim()),
        "the seed was printed"
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate it issued, as PEM files in `dir`:
/// (ca, server cert, server key, client cert, client key).
fn make_pki(dir: &Path) -> [PathBuf; 5] {
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
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(vec!["agentwire".to_string()]).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, "agentwire");
    client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();
    let files = [
        ("ca.pem", ca_cert.pem()),
        ("server.pem", server_cert.pem()),
        ("server.key", server_key.serialize_pem()),
        ("client.pem", client_cert.pem()),
        ("client.key", client_key.serialize_pem()),
    ];
    files.map(|(name, body)| PathBuf::from(write(dir, name, &body)))
}

#[test]
fn mutual_tls_with_a_ca_file_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let [ca, cert, key, client_cert, client_key] = make_pki(dir.path());
    let nats = NatsServer::start_with_config(&format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true, timeout: 2 }}",
        cert.display(),
        key.display(),
        ca.display()
    ));
    let config = write(
        dir.path(),
        "tls.toml",
        &format!(
            "[nats]\ntls_ca_file = \"{}\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
            ca.display(),
            client_cert.display(),
            client_key.display()
        ),
    );
    let _d = Daemon::start(
        &dir.path().join("data"),
        &[
            "--config",
            &config,
            "--nats",
            &nats.url,
            "--identity",
            "tls1",
        ],
    );
    assert_answered(&ask(&config, &nats.url, "tls1", &[]));
    // Trusting the CA without a client certificate: the server that verifies clients refuses it.
    let ca_only = write(
        dir.path(),
        "ca-only.toml",
        &format!("[nats]\ntls_ca_file = \"{}\"\n", ca.display()),
    );
    assert_ne!(ask(&ca_only, &nats.url, "tls1", &[]).status.code(), Some(0));
    // A key without its certificate is a configuration error, named.
    let half = write(
        dir.path(),
        "half.toml",
        &format!("[nats]\ntls_key_file = \"{}\"\n", client_key.display()),
    );
    let out = ask(&half, &nats.url, "tls1", &[]);
    assert!(
        text(&out.stderr).contains("tls_cert_file and tls_key_file go together"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_server_list_whose_first_server_is_down_serves_and_asks_through_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::start();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("nats://{}", l.local_addr().unwrap())
    };
    let list = format!("{dead},{}", nats.url);
    let config = write(dir.path(), "plain.toml", "");
    let d = Daemon::start(
        &dir.path().join("data"),
        &["--nats", &list, "--identity", "list1"],
    );
    assert_eq!(d.ready["nats"]["url"], list.as_str());
    assert_answered(&ask(&config, &list, "list1", &[]));
}

/// A JWT of `claims` (with `iss` and `sub` filled), signed by `issuer`, as nsc makes them.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let header = b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let claims = serde_json::json!({
        "jti": format!("{name}-{}", std::process::id()),
        "iat": 1_700_000_000u64,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let body = b64(claims.to_string().as_bytes());
    let signed = format!("{header}.{body}");
    let signature = b64(&issuer.sign(signed.as_bytes()).unwrap());
    format!("{signed}.{signature}")
}

#[test]
fn a_creds_file_authenticates_against_an_operator_mode_server() {
    let dir = tempfile::tempdir().unwrap();
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let operator_jwt = jwt(
        &operator,
        &operator.public_key(),
        "op",
        serde_json::json!({"type": "operator", "version": 2}),
    );
    let account_jwt = jwt(
        &operator,
        &account.public_key(),
        "acc",
        serde_json::json!({
            "type": "account", "version": 2,
            "limits": {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                       "wildcards": true, "conn": -1, "leaf": -1},
        }),
    );
    let user_jwt = jwt(
        &account,
        &user.public_key(),
        "agentwire",
        serde_json::json!({"type": "user", "version": 2, "pub": {}, "sub": {},
                           "subs": -1, "data": -1, "payload": -1}),
    );
    let nats = NatsServer::start_with_config(&format!(
        "operator: \"{operator_jwt}\"\nresolver: MEMORY\nresolver_preload: {{ {}: \"{account_jwt}\" }}\n",
        account.public_key()
    ));
    let creds = write(
        dir.path(),
        "agent.creds",
        &format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            user.seed().unwrap()
        ),
    );
    let config = write(
        dir.path(),
        "creds.toml",
        &format!("[nats]\ncreds_file = \"{creds}\"\n"),
    );
    let _d = Daemon::start(
        &dir.path().join("data"),
        &[
            "--config",
            &config,
            "--nats",
            &nats.url,
            "--identity",
            "creds1",
        ],
    );
    assert_answered(&ask(&config, &nats.url, "creds1", &[]));
    // Without the file, the server takes nobody.
    let plain = write(dir.path(), "plain.toml", "");
    assert_ne!(ask(&plain, &nats.url, "creds1", &[]).status.code(), Some(0));
    // A missing file is an error that names it.
    let missing = write(
        dir.path(),
        "missing.toml",
        "[nats]\ncreds_file = \"/nonexistent/agent.creds\"\n",
    );
    let out = ask(&missing, &nats.url, "creds1", &[]);
    assert!(
        text(&out.stderr).contains("credentials file /nonexistent/agent.creds"),
        "{}",
        text(&out.stderr)
    );
}

/// A user and password in the server URL (`nats://alice:<password>@host`), as NATS clients take them:
/// the worker and the client authenticate with them, and even a trace log never shows the password (the
/// NATS client logs the addresses it connects to at debug; its `CONNECT` line redacts what it sends).
#[test]
fn a_user_and_password_in_the_url_authenticate_and_stay_out_of_the_trace_log() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    // A password with characters a URL must encode (`@` as %40, `/` as %2F).
    let secret = format!("{PASSWORD}@/x");
    let nats = NatsServer::start_with_config(&format!(
        "authorization {{ users: [ {{ user: \"alice\", password: \"{secret}\" }} ] }}"
    ));
    let port = nats.url.rsplit(':').next().unwrap();
    let url = format!("nats://alice:{PASSWORD}%40%2Fx@127.0.0.1:{port}");
    let log = dir.path().join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--relay-listen",
            "127.0.0.1:0",
            "--roost-socket",
            dir.path().join("r.sock").to_str().unwrap(),
            "--nats",
            &url,
            "--identity",
            "inurl",
        ])
        .env("RUST_LOG", "trace")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(
        ready.contains("\"ready\":true"),
        "serve did not start: {}",
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let config = write(dir.path(), "empty.toml", "");
    let out = ask(&config, &url, "inurl", &[]);
    assert_answered(&out);
    assert_no_secret(&out);
    let _ = child.kill();
    let _ = child.wait();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("TRACE") && logged.contains("async_nats"),
        "the log is at trace, the NATS client's included"
    );
    assert!(!logged.contains(PASSWORD), "the password reached the log");
}
