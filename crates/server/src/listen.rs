//! The accept loop of `serve` and `serve-model`: HTTP/1 connections on a tokio listener, with
//! what `axum::serve` does not offer and a server on a network needs:
//! - a **header-read timeout** ([`HEADER_READ_TIMEOUT`]): a client that sends half a request head,
//!   or nothing at all (also between requests on a kept-alive connection), is disconnected;
//! - a **cap on open connections** ([`connection_cap`], below the process's file-descriptor
//!   limit), so idle sockets cannot use up the descriptors every other client and the store need.
//!   At the cap, each new client makes room by closing the longest-open connection that has no
//!   request in flight (hyper's graceful shutdown: an idle one closes at once), as nginx reuses
//!   idle keep-alive connections; the loop waits only when every connection is serving a request.
//!   So thousands of idle sockets delay a new client by the time it takes to accept them, not by
//!   the header-read timeout each;
//! - the peer address on each request ([`axum::extract::ConnectInfo`]) for per-client limits;
//! - graceful shutdown: in-flight requests get [`SHUTDOWN_GRACE`], then the rest are dropped.

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{watch, Notify, Semaphore};
use tower::ServiceExt;

/// How long a client may take to send a request head, and to start the next one on a kept-alive
/// connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopping server waits for in-flight requests.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Connections held open at most, whatever the descriptor limit.
const MAX_CONNECTIONS: usize = 4096;
/// Descriptors kept for the store, the model client, logs and the listener.
const RESERVED_FDS: usize = 128;

/// How many connections may be open at once: [`MAX_CONNECTIONS`], or less when the soft
/// file-descriptor limit leaves less room (that limit minus [`RESERVED_FDS`], at least 16).
pub fn connection_cap() -> usize {
    let soft = fd_limit().unwrap_or(MAX_CONNECTIONS + RESERVED_FDS);
    soft.saturating_sub(RESERVED_FDS).clamp(16, MAX_CONNECTIONS)
}

#[cfg(unix)]
fn fd_limit() -> Option<usize> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer to a local.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    ok.then(|| usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX))
}

#[cfg(not(unix))]
fn fd_limit() -> Option<usize> {
    None
}

/// The bounds of [`serve_with`].
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections at most.
    pub connections: usize,
    /// How long a request head may take ([`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
}

impl Default for Limits {
    /// [`connection_cap`] and [`HEADER_READ_TIMEOUT`].
    fn default() -> Self {
        Limits {
            connections: connection_cap(),
            header_read_timeout: HEADER_READ_TIMEOUT,
        }
    }
}

/// Serve `router` on `listener` until `shutdown` resolves, within `limits`.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> std::io::Result<()> {
    let cap = limits.connections.max(1);
    let permits = Arc::new(Semaphore::new(cap));
    let open_connections = Arc::new(Mutex::new(Registry::default()));
    let (stop, stopping) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    // When the cap was last reported (once a minute at most while it holds).
    let mut warned: Option<std::time::Instant> = None;
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a reset before accept: wait a moment, then go on.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // A permit for it: a free one, else the one an idle connection gives back.
        let permit = tokio::select! {
            p = make_room(&permits, &open_connections, cap, &mut warned) => match p {
                Some(p) => p,
                None => break,
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let open = Open {
            peer,
            router: router.clone(),
            stopping: stopping.clone(),
            header_read_timeout: limits.header_read_timeout,
            slot: Registered::new(&open_connections),
        };
        connections.spawn(connection(stream, open, permit));
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!("stopping: dropped the connections still open after the grace period");
    }
    Ok(())
}

/// A permit for one more connection: a free one; at the cap, the permit of the longest-open
/// connection with no request in flight, which is told to close; while every one is busy, the
/// first to close or to become idle. `None` once the semaphore is closed.
async fn make_room(
    permits: &Arc<Semaphore>,
    open_connections: &Mutex<Registry>,
    cap: usize,
    warned: &mut Option<std::time::Instant>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Ok(p) = permits.clone().try_acquire_owned() {
        return Some(p);
    }
    if warned.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
        tracing::warn!(
            cap,
            "connection cap reached: each new client closes the longest-idle connection"
        );
        *warned = Some(std::time::Instant::now());
    }
    loop {
        if let Some(idle) = lock(open_connections).take_oldest_idle() {
            idle.evict.notify_one();
        }
        // Every connection busy: the first to close, or to finish its request (checked again).
        tokio::select! {
            p = permits.clone().acquire_owned() => return p.ok(),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// What a connection is served with.
struct Open {
    peer: SocketAddr,
    router: Router,
    stopping: watch::Receiver<bool>,
    header_read_timeout: Duration,
    slot: Registered,
}

/// The open connections by age (ids increase), for the one to close at the cap.
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: BTreeMap<u64, Arc<Slot>>,
}

/// One open connection: its requests in flight (until each response body is sent or dropped),
/// and the signal that closes it.
#[derive(Default)]
struct Slot {
    in_flight: AtomicUsize,
    evict: Notify,
}

impl Registry {
    /// The longest-open connection with no request in flight, taken out (it is told to close).
    fn take_oldest_idle(&mut self) -> Option<Arc<Slot>> {
        let id = self
            .open
            .iter()
            .find(|(_, slot)| slot.in_flight.load(Ordering::Acquire) == 0)
            .map(|(id, _)| *id)?;
        self.open.remove(&id)
    }
}

fn lock(registry: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A connection's place in the [`Registry`], given up when the connection ends.
struct Registered {
    id: u64,
    slot: Arc<Slot>,
    registry: Arc<Mutex<Registry>>,
}

impl Registered {
    fn new(registry: &Arc<Mutex<Registry>>) -> Self {
        let slot = Arc::new(Slot::default());
        let mut r = lock(registry);
        let id = r.next_id;
        r.next_id += 1;
        r.open.insert(id, slot.clone());
        Registered {
            id,
            slot,
            registry: registry.clone(),
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.registry).open.remove(&self.id);
    }
}

/// Counts one request in flight on its connection while alive.
struct Busy(Arc<Slot>);

impl Busy {
    fn new(slot: &Arc<Slot>) -> Self {
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(slot.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted in flight until it is sent or dropped (a
/// streamed answer, such as server-sent events, is not idle).
struct TrackedBody {
    inner: axum::body::Body,
    _busy: Busy,
}

impl hyper::body::Body for TrackedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        hyper::body::Body::poll_frame(Pin::new(&mut self.get_mut().inner), cx)
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.inner)
    }
}

/// One HTTP/1 connection; it holds `permit` while open and finishes its request when told to stop.
async fn connection(
    stream: tokio::net::TcpStream,
    open: Open,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let _permit = permit;
    let Open {
        peer,
        router,
        mut stopping,
        header_read_timeout,
        slot,
    } = open;
    let busy_slot = slot.slot.clone();
    let service = tower::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let busy = Busy::new(&busy_slot);
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo(peer));
        let response = router.clone().oneshot(req);
        async move {
            let res = response.await?;
            Ok::<_, Infallible>(
                res.map(|inner| axum::body::Body::new(TrackedBody { inner, _busy: busy })),
            )
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(%peer, "connection ended: {e}");
            }
        }
        // The one change there is: to "stopping".
        _ = stopping.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
        // Closed to make room at the cap: at once when idle, else after its request.
        _ = slot.slot.evict.notified() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    async fn start(limits: Limits) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new()
            .route(
                "/health",
                axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                    format!("ok {}", peer.ip())
                }),
            )
            .route(
                "/slow",
                axum::routing::get(|| async {
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                    "slow done"
                }),
            );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve_with(
            listener,
            router,
            async {
                let _ = rx.await;
            },
            limits,
        ));
        (addr, tx)
    }

    fn get(addr: SocketAddr) -> std::io::Result<String> {
        request(addr, "/health")
    }

    fn request(addr: SocketAddr, path: &str) -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }

    #[test]
    fn the_cap_stays_below_the_descriptor_limit() {
        let cap = connection_cap();
        assert!((16..=MAX_CONNECTIONS).contains(&cap), "{cap}");
        if let Some(limit) = fd_limit() {
            assert!(cap < limit.max(17), "{cap} vs {limit}");
        }
    }

    /// A client that sends half a request head, or nothing, is disconnected after the
    /// header-read timeout (300 ms here, 10 s in `serve`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn half_a_head_and_silence_are_cut_off() {
        let timeout = Duration::from_millis(300);
        let (addr, _stop) = start(Limits {
            connections: 8,
            header_read_timeout: timeout,
        })
        .await;
        let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut half, b"GET /health HTTP/1.1\r\nhost:")
            .await
            .unwrap();
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(timeout * 3).await;
        for s in [&mut half, &mut silent] {
            let mut buf = [0u8; 256];
            let n = tokio::time::timeout(
                Duration::from_secs(1),
                tokio::io::AsyncReadExt::read(s, &mut buf),
            )
            .await
            .expect("the server closed it")
            .unwrap_or(0);
            let answer = String::from_utf8_lossy(&buf[..n]);
            assert!(n == 0 || answer.starts_with("HTTP/1.1 408"), "{answer}");
        }
    }

    /// At the cap, a new client closes the longest-open idle connection and is served at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_cap_the_longest_idle_connection_makes_room() {
        let (addr, _stop) = start(Limits {
            connections: 2,
            header_read_timeout: HEADER_READ_TIMEOUT,
        })
        .await;
        let mut oldest = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let answer = tokio::task::spawn_blocking(move || get(addr))
            .await
            .unwrap()
            .unwrap();
        assert!(answer.contains("ok 127.0.0.1"), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::io::AsyncReadExt::read(&mut oldest, &mut buf),
        )
        .await
        .expect("the oldest idle connection was closed")
        .unwrap_or(0);
        assert_eq!(n, 0);
    }

    /// A connection serving a request is not closed to make room: a new client waits for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_cap_a_busy_connection_is_left_to_finish() {
        let (addr, _stop) = start(Limits {
            connections: 1,
            header_read_timeout: HEADER_READ_TIMEOUT,
        })
        .await;
        let slow = tokio::task::spawn_blocking(move || request(addr, "/slow"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let waiting = tokio::task::spawn_blocking(move || get(addr));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "the new client waits");
        let slow = slow.await.unwrap().unwrap();
        assert!(slow.contains("slow done"), "{slow}");
        let answer = waiting.await.unwrap().unwrap();
        assert!(answer.contains("ok 127.0.0.1"), "{answer}");
    }
}
