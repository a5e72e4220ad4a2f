//! Talking to the CA: instant-acme's protocol (JWS, nonces, the order
//! state machine) over a blocking ureq client, driven by `pollster` on the
//! ACME thread. No async runtime: each future the crate hands us resolves
//! the moment ureq returns, and the waits between polls are plain sleeps
//! on this thread, which nothing else runs on.

use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, BytesResponse, ChallengeType,
    ExternalAccountKey, HttpClient, Identifier, NewAccount, NewOrder, OrderStatus, Problem,
};

use super::{state, AcmeSettings, ChallengeKind};
use crate::challenge;

/// Longest answer read from the CA (a chain is a few KiB).
const MAX_RESPONSE: u64 = 1 << 20;

/// Per request to the CA, connect to last byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an order may take to be validated and issued before it is
/// given up (and retried later with backoff).
const ORDER_TIMEOUT: Duration = Duration::from_secs(120);

/// Why an order failed, for the `result` label and the log.
#[derive(Debug)]
pub enum Failure {
    /// The CA answered with a problem document or an invalid order or
    /// challenge (RFC 8555 §6.7): it refused.
    Refused(String),
    /// The CA could not be reached, or answered nonsense.
    Error(anyhow::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused(p) => write!(f, "the CA refused: {p}"),
            Failure::Error(e) => write!(f, "{e:#}"),
        }
    }
}

impl From<instant_acme::Error> for Failure {
    fn from(e: instant_acme::Error) -> Failure {
        match e {
            instant_acme::Error::Api(p) => Failure::Refused(problem(&p)),
            e => Failure::Error(anyhow!(e)),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Error(e)
    }
}

/// A problem document in one line: type, detail, status.
fn problem(p: &Problem) -> String {
    format!(
        "{} ({}{})",
        p.detail.as_deref().unwrap_or("no detail"),
        p.r#type.as_deref().unwrap_or("no type"),
        p.status.map(|s| format!(", HTTP {s}")).unwrap_or_default()
    )
}

/// instant-acme's `HttpClient` over ureq: the request is made when the
/// future is created, so the future is ready at once.
struct Ureq(ureq::Agent);

impl Ureq {
    fn new(settings: &AcmeSettings) -> anyhow::Result<Ureq> {
        use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
        let mut tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ));
        if let Some(path) = &settings.ca_roots {
            let pem = std::fs::read(path)
                .with_context(|| format!("acme_ca_roots: reading {}", path.display()))?;
            let roots: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if roots.is_empty() {
                bail!(
                    "acme_ca_roots: {} holds no CERTIFICATE block",
                    path.display()
                );
            }
            tls = tls.root_certs(RootCerts::new_with_certs(&roots));
        } else {
            tls = tls.root_certs(RootCerts::WebPki);
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .user_agent(concat!("shardhttpd/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls.build())
            .build();
        Ok(Ureq(ureq::Agent::new_with_config(config)))
    }

    fn send(&self, req: http::Request<Full<Bytes>>) -> Result<BytesResponse, instant_acme::Error> {
        let (parts, body) = req.into_parts();
        let body = pollster::block_on(body.collect())
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let req = http::Request::from_parts(parts, body.to_vec());
        let resp = self
            .0
            .run(req)
            .map_err(|e| instant_acme::Error::Other(Box::new(e)))?;
        let (parts, body) = resp.into_parts();
        let mut bytes = Vec::new();
        body.into_reader()
            .take(MAX_RESPONSE)
            .read_to_end(&mut bytes)
            .map_err(|e| instant_acme::Error::Other(Box::new(e)))?;
        Ok(BytesResponse::from(http::Response::from_parts(
            parts,
            Full::new(Bytes::from(bytes)),
        )))
    }
}

impl HttpClient for Ureq {
    fn request(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        Box::pin(std::future::ready(self.send(req)))
    }
}

/// The account for `settings.directory`: from the credentials file, or
/// created (and its credentials written 0600) on first use.
pub fn account(settings: &AcmeSettings) -> Result<Account, Failure> {
    let file = settings.account_file();
    let http = || Ureq::new(settings).map(|c| Box::new(c) as Box<dyn HttpClient>);
    if let Ok(text) = std::fs::read(&file) {
        let creds: AccountCredentials = serde_json::from_slice(&text)
            .with_context(|| format!("ACME account credentials {} do not parse", file.display()))?;
        return Ok(pollster::block_on(Account::from_credentials_and_http(
            creds,
            http()?,
        ))?);
    }
    let contact = settings.email.as_ref().map(|e| format!("mailto:{e}"));
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let eab = settings
        .eab
        .as_ref()
        .map(|(kid, key)| ExternalAccountKey::new(kid.clone(), key));
    let (account, creds) = pollster::block_on(Account::create_with_http(
        &NewAccount {
            contact: &contact,
            terms_of_service_agreed: true,
            only_return_existing: false,
        },
        &settings.directory,
        eab.as_ref(),
        http()?,
    ))?;
    let json = serde_json::to_vec(&creds).context("serialising the account credentials")?;
    state::write_private(&file, &json)?;
    tracing::info!(
        directory = settings.directory.as_str(),
        "ACME account created"
    );
    Ok(account)
}

/// Removes the challenge answers of one order when it ends, however it
/// ends.
struct Published {
    tokens: Vec<String>,
    names: Vec<String>,
}

impl Drop for Published {
    fn drop(&mut self) {
        for t in &self.tokens {
            challenge::remove_http01(t);
        }
        for n in &self.names {
            challenge::remove_alpn(n);
        }
    }
}

/// Order a certificate for `name`: answer its challenge, finalize with a
/// new P-256 key, and return the PEM of key and chain.
pub fn order(account: &Account, settings: &AcmeSettings, name: &str) -> Result<String, Failure> {
    pollster::block_on(order_async(account, settings, name))
}

async fn order_async(
    account: &Account,
    settings: &AcmeSettings,
    name: &str,
) -> Result<String, Failure> {
    let started = Instant::now();
    let ids = [Identifier::Dns(name.to_owned())];
    let mut order = account.new_order(&NewOrder { identifiers: &ids }).await?;
    let mut published = Published {
        tokens: Vec::new(),
        names: Vec::new(),
    };
    let wanted = match settings.challenge {
        ChallengeKind::Http01 => ChallengeType::Http01,
        ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
    };
    for authz in order.authorizations().await? {
        match authz.status {
            AuthorizationStatus::Valid => continue,
            AuthorizationStatus::Pending => {}
            other => return Err(Failure::Refused(format!("authorization is {other:?}"))),
        }
        let Some(ch) = authz.challenges.iter().find(|c| c.r#type == wanted) else {
            return Err(Failure::Refused(format!(
                "the CA offers no {} challenge for {name}",
                settings.challenge.as_str()
            )));
        };
        let key_auth = order.key_authorization(ch);
        match settings.challenge {
            ChallengeKind::Http01 => {
                challenge::add_http01(&ch.token, key_auth.as_str());
                published.tokens.push(ch.token.clone());
            }
            ChallengeKind::TlsAlpn01 => {
                let cert = alpn_certificate(name, key_auth.digest().as_ref())?;
                challenge::add_alpn(name, cert);
                published.names.push(name.to_owned());
            }
        }
        order.set_challenge_ready(&ch.url).await?;
    }
    let mut delay = Duration::from_millis(250);
    loop {
        let state = order.refresh().await?;
        match state.status {
            OrderStatus::Ready => break,
            OrderStatus::Invalid => return Err(Failure::Refused(invalid_reason(&mut order).await)),
            OrderStatus::Valid => break,
            OrderStatus::Pending | OrderStatus::Processing => {}
        }
        if started.elapsed() > ORDER_TIMEOUT {
            return Err(Failure::Error(anyhow!(
                "the order was not ready after {}s",
                ORDER_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(5));
    }
    drop(published);
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| anyhow!("generating the certificate key: {e}"))?;
    if order.state().status == OrderStatus::Ready {
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])
            .map_err(|e| anyhow!("CSR for {name}: {e}"))?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params
            .serialize_request(&key)
            .map_err(|e| anyhow!("CSR for {name}: {e}"))?;
        order.finalize(csr.der()).await?;
    }
    let mut delay = Duration::from_millis(250);
    let chain = loop {
        if let Some(chain) = order.certificate().await? {
            break chain;
        }
        if order.state().status == OrderStatus::Invalid {
            return Err(Failure::Refused(invalid_reason(&mut order).await));
        }
        if started.elapsed() > ORDER_TIMEOUT {
            return Err(Failure::Error(anyhow!(
                "no certificate after {}s",
                ORDER_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(5));
    };
    Ok(format!("{}{chain}", key.serialize_pem()))
}

/// The CA's reason for an invalid order: the order's problem, else the
/// first failed challenge's.
async fn invalid_reason(order: &mut instant_acme::Order) -> String {
    if let Some(p) = &order.state().error {
        return problem(p);
    }
    if let Ok(authzs) = order.authorizations().await {
        for a in authzs {
            if let Some(p) = a.challenges.iter().find_map(|c| c.error.as_ref()) {
                return problem(p);
            }
        }
    }
    "the order became invalid (no problem document)".to_owned()
}

/// The TLS-ALPN-01 certificate for `name`: self-signed, the name as its
/// only subjectAltName, and the critical acmeIdentifier extension holding
/// the SHA-256 of the key authorization (RFC 8737 §3).
fn alpn_certificate(name: &str, digest: &[u8]) -> anyhow::Result<Arc<rustls::sign::CertifiedKey>> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])?;
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(digest));
    let cert = params.self_signed(&key)?;
    state::certified_key(cert.der().to_vec(), key.serialize_der())
}
