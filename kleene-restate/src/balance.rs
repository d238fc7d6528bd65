//! An HTTP/2 balancer in front of several worker processes: Restate calls one deployment
//! URL, and each invocation (one HTTP/2 stream) goes to the worker with the fewest
//! invocations open.
//!
//! Restate does not spread one deployment over several endpoints; its documentation asks
//! for an HTTP/2-capable L7 load balancer in front of the service's instances. This one is
//! for loopback tests and single machines; in production use the platform's (a Kubernetes
//! service, an ALB with HTTP/2).
//!
//! ```no_run
//! # async fn go() -> std::io::Result<()> {
//! use kleene_restate::balance::Balancer;
//! let balancer = Balancer::new(vec!["http://127.0.0.1:9081".into(), "http://127.0.0.1:9082".into()]);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9080").await?;
//! balancer.serve(listener).await
//! # }
//! ```

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// One worker behind the balancer.
#[derive(Debug)]
struct Backend {
    url: String,
    open: AtomicUsize,
    /// Set when a request to it failed: it is skipped until a probe connects to it again
    /// (a backend that refuses connections is never picked while it does).
    down: AtomicBool,
    /// Set while a probe of it runs.
    probing: AtomicBool,
}

/// Spreads requests over backends by fewest open streams.
#[derive(Debug, Clone)]
pub struct Balancer {
    backends: Arc<Vec<Backend>>,
    next: Arc<AtomicUsize>,
    client: Client<HttpConnector, Incoming>,
}

/// The path prefix of the task-worker service's invocations.
const TASK_CALLS: &str = "/invoke/TaskWorker/";

/// How often a backend that is down is probed with a connection.
const PROBE_EVERY: Duration = Duration::from_millis(250);

impl Balancer {
    /// A balancer over `backends` (`http://127.0.0.1:9081`, …).
    pub fn new(backends: Vec<String>) -> Self {
        // No Nagle on either side: the protocol's small frames wait for their answers.
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(connector);
        Self {
            backends: Arc::new(
                backends
                    .into_iter()
                    .map(|url| Backend {
                        url: url.trim_end_matches('/').to_owned(),
                        open: AtomicUsize::new(0),
                        down: AtomicBool::new(false),
                        probing: AtomicBool::new(false),
                    })
                    .collect(),
            ),
            next: Arc::new(AtomicUsize::new(0)),
            client,
        }
    }

    /// The backend to use: the one with the fewest open streams among those not marked
    /// down, ties taken in turn.
    fn pick(&self) -> Option<usize> {
        let n = self.backends.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let up = |b: &Backend| !b.down.load(Ordering::Relaxed);
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| up(&self.backends[i]))
            .min_by_key(|&i| self.backends[i].open.load(Ordering::Relaxed))
            .or_else(|| (n > 0).then_some(start % n))
    }

    async fn forward(&self, mut request: Request<Incoming>) -> Response<ProxyBody> {
        // Only task calls are spread by load: the channel's own long invocation and the
        // short `outputs`/`status` reads would otherwise skew the counts.
        let counted = request.uri().path().starts_with(TASK_CALLS);
        let Some(i) = self.pick() else {
            return status(
                StatusCode::SERVICE_UNAVAILABLE,
                "no worker behind the balancer",
            );
        };
        let backend = &self.backends[i];
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        match format!("{}{path}", backend.url).parse() {
            Ok(uri) => *request.uri_mut() = uri,
            Err(_) => return status(StatusCode::BAD_GATEWAY, "bad backend URL"),
        }
        let guard = counted.then(|| {
            backend.open.fetch_add(1, Ordering::Relaxed);
            Open {
                backends: Arc::clone(&self.backends),
                index: i,
            }
        });
        match self.client.request(request).await {
            Ok(response) => response.map(|body| Tracked { body, _open: guard }.boxed()),
            Err(e) => {
                self.mark_down(i);
                status(
                    StatusCode::BAD_GATEWAY,
                    &format!("worker {} did not answer: {e}", backend.url),
                )
            }
        }
    }

    /// Takes backend `i` as down and probes it until a connection to it succeeds.
    fn mark_down(&self, i: usize) {
        let Some(backend) = self.backends.get(i) else {
            return;
        };
        backend.down.store(true, Ordering::Relaxed);
        if backend.probing.swap(true, Ordering::Relaxed) {
            return;
        }
        let address = backend
            .url
            .parse::<hyper::Uri>()
            .ok()
            .and_then(|u| u.authority().map(|a| a.as_str().to_owned()));
        let backends = Arc::clone(&self.backends);
        tokio::spawn(async move {
            let Some(backend) = backends.get(i) else {
                return;
            };
            if let Some(address) = address {
                loop {
                    tokio::time::sleep(PROBE_EVERY).await;
                    let probe = tokio::net::TcpStream::connect(&address);
                    if let Ok(Ok(_)) = tokio::time::timeout(PROBE_EVERY * 4, probe).await {
                        break;
                    }
                }
            }
            backend.down.store(false, Ordering::Relaxed);
            backend.probing.store(false, Ordering::Relaxed);
        });
    }

    /// Serves `listener` until the process ends.
    ///
    /// # Errors
    ///
    /// When accepting a connection fails.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let this = self.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let this = this.clone();
                    async move { Ok::<_, std::convert::Infallible>(this.forward(req).await) }
                });
                // A connection that breaks ends its streams; the server retries them.
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }
}

fn status(code: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(text.to_owned()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = code;
    response
}

/// Counts a stream as open until its response body is dropped.
struct Open {
    backends: Arc<Vec<Backend>>,
    index: usize,
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(b) = self.backends.get(self.index) {
            b.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A response body that keeps its stream counted while it is read.
struct Tracked {
    body: Incoming,
    _open: Option<Open>,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_least_loaded_backend_is_picked() {
        let b = Balancer::new(vec!["http://a".into(), "http://b".into()]);
        b.backends[0].open.store(3, Ordering::Relaxed);
        for _ in 0..4 {
            assert_eq!(b.pick(), Some(1));
        }
    }

    #[test]
    fn a_backend_marked_down_is_skipped() {
        let b = Balancer::new(vec!["http://a".into(), "http://b".into()]);
        b.backends[1].down.store(true, Ordering::Relaxed);
        b.backends[0].open.store(5, Ordering::Relaxed);
        assert_eq!(b.pick(), Some(0));
    }

    /// A backend that refuses connections was picked again after a 2 s skip window, and its
    /// calls answered 502: it stays down until a probe connects to it.
    #[tokio::test]
    async fn a_backend_that_refuses_connections_stays_down_until_it_listens_again() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let b = Balancer::new(vec![format!("http://{address}"), "http://b".into()]);
        b.mark_down(0);
        tokio::time::sleep(PROBE_EVERY * 8).await;
        assert!(b.backends[0].down.load(Ordering::Relaxed));
        assert!((0..4).all(|_| b.pick() == Some(1)));
        let _back = tokio::net::TcpListener::bind(address).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while b.backends[0].down.load(Ordering::Relaxed) {
            assert!(Instant::now() < deadline, "the backend never came back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!b.backends[0].probing.load(Ordering::Relaxed));
    }

    #[test]
    fn ties_alternate() {
        let b = Balancer::new(vec!["http://a".into(), "http://b".into()]);
        let picks: Vec<_> = (0..4).filter_map(|_| b.pick()).collect();
        assert_eq!(picks, [0, 1, 0, 1]);
    }
}
