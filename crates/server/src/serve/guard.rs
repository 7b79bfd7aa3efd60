//! Guards on every route of `maslens serve`, as one layer ([`guard`]), before authentication:
//!
//! - **Host**: the `Host` header must name this server (`ServeConfig::allowed_hosts`; loopback
//!   names by default), so a DNS-rebinding page cannot read it under a foreign name;
//! - **Origin**: a request a browser marks with an `Origin` must come from this server's own
//!   origin (same scheme-less `host:port` as `Host`), so a page elsewhere cannot send simple
//!   (no-preflight) requests;
//! - **content type**: a write to `/api` or `/v1` must say JSON or protobuf
//!   (`text/plain`, a form or none gets 415), so no HTML form can write.
//!
//! And the browser sessions ([`Sessions`]): random, expiring, revoked by logout; with a limit
//! on failed sign-ins and bearer tokens ([`FailureLimit`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;

/// The host names a loopback server answers to.
pub const LOOPBACK_HOSTS: [&str; 4] = ["localhost", "127.0.0.1", "[::1]", "::1"];

/// `host` of a `Host` header value or an origin's authority, without its port.
fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        // [::1]:8080
        return rest
            .split_once(']')
            .map_or(authority, |(h, _)| &authority[..h.len() + 2]);
    }
    authority.split(':').next().unwrap_or(authority)
}

/// Whether `host` (a `Host` header value) is one of `allowed` (names, any port).
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host_name(host);
    allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// Whether an `Origin` header names the same `host:port` as the `Host` header.
pub fn origin_matches(origin: &str, host: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|a| a.eq_ignore_ascii_case(host))
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a write to `path` says a content type the API reads.
fn content_type_ok(path: &str, headers: &HeaderMap) -> bool {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    match ct.as_deref() {
        Some("application/json") => true,
        Some("application/x-protobuf") | Some("application/protobuf") => path.starts_with("/v1/"),
        _ => false,
    }
}

fn refuse(status: StatusCode, why: &'static str) -> Response {
    tracing::info!(%status, why, "request refused");
    (status, why).into_response()
}

/// The Host, Origin and content-type checks (see the module docs).
pub async fn guard(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(allowed) = &state.config.allowed_hosts {
        if !host_allowed(host, allowed) {
            return refuse(
                StatusCode::MISDIRECTED_REQUEST,
                "this server does not answer to that Host name",
            );
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin.to_str().is_ok_and(|o| origin_matches(o, host));
        if !ok {
            return refuse(StatusCode::FORBIDDEN, "cross-origin request refused");
        }
    }
    let path = req.uri().path();
    if is_write(req.method())
        && (path.starts_with("/api/") || path.starts_with("/v1/"))
        && !content_type_ok(path, headers)
    {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a write needs Content-Type: application/json (or application/x-protobuf for OTLP)",
        );
    }
    next.run(req).await
}

/// Browser sessions: a random id per sign-in, valid for `ttl`, removed by logout.
#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    live: Mutex<HashMap<String, Instant>>,
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// How long a session lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new session id (256 random bits, hex).
    pub fn create(&self) -> String {
        use rand::RngCore;
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let id = hex::encode(bytes);
        let now = Instant::now();
        if let Ok(mut live) = self.live.lock() {
            live.retain(|_, until| *until > now);
            live.insert(id.clone(), now + self.ttl);
        }
        id
    }

    /// Whether `id` is a live session.
    pub fn valid(&self, id: &str) -> bool {
        let now = Instant::now();
        self.live
            .lock()
            .is_ok_and(|live| live.get(id).is_some_and(|until| *until > now))
    }

    /// End a session (logout).
    pub fn revoke(&self, id: &str) {
        if let Ok(mut live) = self.live.lock() {
            live.remove(id);
        }
    }
}

/// A limit on failed credentials (sign-ins and bearer tokens), per client address: at most `max`
/// failures from one address in a sliding `window`; past it, that address's credentials are not
/// even checked until the window moves on. Other clients are not affected, so a stranger's wrong
/// guesses never lock out the exporters and people that hold the token.
#[derive(Debug)]
pub struct FailureLimit {
    max: usize,
    window: Duration,
    /// Recent failures by client address (`None`: a request whose address is not known).
    failures: Mutex<HashMap<Option<IpAddr>, Vec<Instant>>>,
}

/// Addresses remembered at most; past it the expired ones are dropped, then all of them.
const MAX_CLIENTS: usize = 10_000;

impl FailureLimit {
    pub fn new(max: usize, window: Duration) -> FailureLimit {
        FailureLimit {
            max,
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// True while `client` has reached the limit (answer 429 without checking its credentials).
    pub fn blocked(&self, client: Option<IpAddr>) -> bool {
        let now = Instant::now();
        self.failures
            .lock()
            .is_ok_and(|mut all| match all.get_mut(&client) {
                Some(f) => {
                    f.retain(|t| now.duration_since(*t) < self.window);
                    f.len() >= self.max
                }
                None => false,
            })
    }

    pub fn record_failure(&self, client: Option<IpAddr>) {
        let now = Instant::now();
        if let Ok(mut all) = self.failures.lock() {
            if all.len() >= MAX_CLIENTS && !all.contains_key(&client) {
                all.retain(|_, f| {
                    f.last()
                        .is_some_and(|t| now.duration_since(*t) < self.window)
                });
                if all.len() >= MAX_CLIENTS {
                    all.clear();
                }
            }
            all.entry(client).or_default().push(now);
        }
    }
}

/// The client's address as an extractor ([`client_address`]; `None` when the server did not
/// record it).
pub struct Client(pub Option<IpAddr>);

impl axum::extract::FromRequestParts<Arc<AppState>> for Client {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(Client(client_address(
            &parts.extensions,
            &parts.headers,
            &state.config.trusted_proxies,
        )))
    }
}

/// The address of the client that sent `req` ([`client_address`]).
pub fn client_of<B>(req: &axum::http::Request<B>, trusted: &[IpAddr]) -> Option<IpAddr> {
    client_address(req.extensions(), req.headers(), trusted)
}

/// The client's address: the peer the accept loop recorded, unless that peer is one of the
/// `trusted` reverse proxies (`maslens serve --trusted-proxy`). Then it is the nearest address in
/// `X-Forwarded-For` that is not a trusted proxy, read from the right (each proxy appends the
/// address it received the request from, so entries to the left of the last untrusted one
/// are the client's own claims and are not believed). A header that does not parse there, or
/// none, leaves the peer: every client behind that proxy then shares its limit, as without the
/// option. A peer that is not trusted is the client whatever the header says.
pub fn client_address(
    extensions: &axum::http::Extensions,
    headers: &HeaderMap,
    trusted: &[IpAddr],
) -> Option<IpAddr> {
    let peer = extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())?;
    if !trusted.contains(&peer) {
        return Some(peer);
    }
    let mut client = peer;
    for value in headers.get_all("x-forwarded-for").iter().rev() {
        let Ok(text) = value.to_str() else {
            return Some(peer);
        };
        for hop in text.rsplit(',') {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) if trusted.contains(&ip) => client = ip,
                Ok(ip) => return Some(ip),
                Err(_) => return Some(peer),
            }
        }
    }
    Some(client)
}

/// Large request bodies read and handled at once, at most; more wait their turn.
pub const LARGE_BODIES_AT_ONCE: usize = 4;
/// A body larger than this (or of unknown length) takes a slot.
pub const LARGE_BODY_BYTES: u64 = 1 << 20;

/// Bounds the memory of concurrent large bodies: a write whose body is over
/// [`LARGE_BODY_BYTES`] (or does not say its length) waits for one of [`LARGE_BODIES_AT_ONCE`]
/// slots and holds it while it is read and handled; small writes and reads never wait.
pub async fn body_slots(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let large = is_write(req.method()) && length.is_none_or(|n| n > LARGE_BODY_BYTES);
    if !large {
        return next.run(req).await;
    }
    let Ok(_slot) = state.body_slots.clone().acquire_owned().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    next.run(req).await
}

/// The 429 answer while [`FailureLimit::blocked`].
pub fn too_many() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "60")],
        "too many failed sign-ins or tokens; try again in a minute",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins() {
        let allowed: Vec<String> = LOOPBACK_HOSTS.iter().map(|s| s.to_string()).collect();
        for ok in ["127.0.0.1:4318", "localhost", "LOCALHOST:1", "[::1]:80"] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "evil.example:4318",
            "127.0.0.1.evil.example",
            "",
            "localhost.:1",
        ] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
        assert!(origin_matches("http://127.0.0.1:4318", "127.0.0.1:4318"));
        assert!(!origin_matches("http://127.0.0.1:9999", "127.0.0.1:4318"));
        assert!(!origin_matches("null", "127.0.0.1:4318"));
    }

    #[test]
    fn sessions_expire_and_are_revoked() {
        let s = Sessions::new(Duration::from_millis(50));
        let a = s.create();
        let b = s.create();
        assert_ne!(a, b);
        assert!(s.valid(&a) && s.valid(&b));
        s.revoke(&a);
        assert!(!s.valid(&a) && s.valid(&b));
        std::thread::sleep(Duration::from_millis(60));
        assert!(!s.valid(&b));
    }

    #[test]
    fn failures_are_limited_per_window() {
        let l = FailureLimit::new(3, Duration::from_millis(50));
        for _ in 0..3 {
            assert!(!l.blocked(None));
            l.record_failure(None);
        }
        assert!(l.blocked(None));
        std::thread::sleep(Duration::from_millis(60));
        assert!(!l.blocked(None));
    }

    /// A red-team finding: one global limit let 20 wrong tokens from anyone lock out everyone.
    /// The limit is per client address now.
    #[test]
    fn failures_of_one_client_do_not_block_another() {
        let limit = FailureLimit::new(3, Duration::from_secs(60));
        let stranger = Some(IpAddr::from([203, 0, 113, 7]));
        let exporter = Some(IpAddr::from([10, 0, 0, 2]));
        for _ in 0..3 {
            assert!(!limit.blocked(stranger));
            limit.record_failure(stranger);
        }
        assert!(limit.blocked(stranger));
        assert!(!limit.blocked(exporter), "another client is not blocked");
        assert!(!limit.blocked(None));
    }

    fn with_peer(peer: [u8; 4], forwarded: &[&str]) -> (axum::http::Extensions, HeaderMap) {
        let mut ext = axum::http::Extensions::new();
        ext.insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((
            peer, 4318,
        ))));
        let mut headers = HeaderMap::new();
        for f in forwarded {
            headers.append("x-forwarded-for", f.parse().unwrap());
        }
        (ext, headers)
    }

    /// The client behind trusted proxies is the nearest untrusted hop, read from the right; an
    /// untrusted peer is the client whatever it claims; a bad header leaves the peer.
    #[test]
    fn the_client_address_believes_only_trusted_proxies() {
        let proxy = IpAddr::from([10, 0, 0, 1]);
        let inner = IpAddr::from([10, 0, 0, 2]);
        let trusted = [proxy, inner];
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let at = |peer: [u8; 4], fwd: &[&str]| {
            let (e, h) = with_peer(peer, fwd);
            client_address(&e, &h, &trusted)
        };
        assert_eq!(at([203, 0, 113, 7], &["1.2.3.4"]), ip("203.0.113.7"));
        assert_eq!(at([10, 0, 0, 1], &["203.0.113.7"]), ip("203.0.113.7"));
        // The client's own claim (left) is not believed; the proxy's entry (right) is.
        assert_eq!(
            at([10, 0, 0, 1], &["1.2.3.4, 203.0.113.7"]),
            ip("203.0.113.7")
        );
        // Chained proxies are skipped, over several header lines too.
        assert_eq!(
            at([10, 0, 0, 1], &["203.0.113.7, 10.0.0.2"]),
            ip("203.0.113.7")
        );
        assert_eq!(
            at([10, 0, 0, 1], &["203.0.113.7", "10.0.0.2"]),
            ip("203.0.113.7")
        );
        assert_eq!(at([10, 0, 0, 1], &["2001:db8::1"]), ip("2001:db8::1"));
        // Nothing to go by: the peer.
        assert_eq!(at([10, 0, 0, 1], &[]), ip("10.0.0.1"));
        assert_eq!(at([10, 0, 0, 1], &["not-an-address"]), ip("10.0.0.1"));
        assert_eq!(at([10, 0, 0, 1], &["10.0.0.2"]), ip("10.0.0.2"));
        let (e, h) = with_peer([10, 0, 0, 1], &["203.0.113.7"]);
        assert_eq!(
            client_address(&e, &h, &[]),
            ip("10.0.0.1"),
            "no trusted proxy"
        );
        let none = axum::http::Extensions::new();
        assert_eq!(client_address(&none, &h, &trusted), None);
    }
}
