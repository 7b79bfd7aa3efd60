//! The accept loop of `serve` and `serve-model`: HTTP/1 connections on a tokio listener, with
//! what `axum::serve` does not offer and a server on a network needs:
//! - a **header-read timeout** ([`HEADER_READ_TIMEOUT`]): a client that sends half a request head,
//!   or nothing at all (also between requests on a kept-alive connection), is disconnected;
//! - a **cap on open connections** ([`connection_cap`], below the process's file-descriptor
//!   limit): past it the loop stops accepting until one closes, so idle sockets cannot use up the
//!   descriptors every other client and the store need;
//! - the peer address on each request ([`axum::extract::ConnectInfo`]) for per-client limits;
//! - graceful shutdown: in-flight requests get [`SHUTDOWN_GRACE`], then the rest are dropped.

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Semaphore};
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
    let (stop, stopping) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    // When the cap was last reported (once a minute at most while it holds).
    let mut warned: Option<std::time::Instant> = None;
    loop {
        while connections.try_join_next().is_some() {}
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if warned.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!(
                        cap,
                        "connection cap reached: new clients wait until one closes"
                    );
                    warned = Some(std::time::Instant::now());
                }
                tokio::select! {
                    p = permits.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    _ = &mut shutdown => break,
                }
            }
        };
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
        let _ = stream.set_nodelay(true);
        let open = Open {
            peer,
            router: router.clone(),
            stopping: stopping.clone(),
            header_read_timeout: limits.header_read_timeout,
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

/// What a connection is served with.
struct Open {
    peer: SocketAddr,
    router: Router,
    stopping: watch::Receiver<bool>,
    header_read_timeout: Duration,
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
    } = open;
    let service = router.map_request(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo(peer));
        req
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    async fn start(limits: Limits) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route(
            "/health",
            axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                format!("ok {}", peer.ip())
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
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")?;
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

    /// With the cap reached by idle connections, a new client waits; as soon as one closes it
    /// is served.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_cap_a_client_is_served_when_a_connection_closes() {
        let (addr, _stop) = start(Limits {
            connections: 2,
            header_read_timeout: HEADER_READ_TIMEOUT,
        })
        .await;
        let idle1 = std::net::TcpStream::connect(addr).unwrap();
        let _idle2 = std::net::TcpStream::connect(addr).unwrap();
        let waiting = tokio::task::spawn_blocking(move || get(addr));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "the third client waits");
        drop(idle1);
        let answer = waiting.await.unwrap().unwrap();
        assert!(answer.contains("ok 127.0.0.1"), "{answer}");
    }
}
