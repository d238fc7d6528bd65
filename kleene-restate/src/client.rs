//! A small HTTP/1 client for Restate's ingress and admin APIs: submit to a channel, read its
//! status, register a worker deployment. It fails over between the nodes of a cluster.
//!
//! ```no_run
//! # async fn go() -> Result<(), kleene_restate::client::ClientError> {
//! use kleene_restate::client::Restate;
//! let restate = Restate::new("http://127.0.0.1:8080", "http://127.0.0.1:9070");
//! restate.register("http://127.0.0.1:9080").await?;
//! let status = restate.status("run-0123456789ab").await?;
//! println!("{status}");
//! # Ok(()) }
//! ```
//!
//! Several nodes are given comma-separated (`http://n1:8080,http://n2:8080`): a request goes
//! to the node that answered last, and one that cannot be reached (or answers that it cannot
//! serve now, 502–504) is retried on the next, round after round with a growing pause, for at
//! most [`Restate::with_retry_window`]'s time (10 s by default). Submissions and resumes carry
//! an idempotency key, so retrying one on another node attaches to the same pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;

use kleene::batch::BatchEvidence;
use kleene::id::Digest;

use crate::call::{DrawAnswer, FixDraw, StoredClosure};
use crate::service::{RunReport, Submission};
use crate::status::ChannelStatus;
use crate::store::{ContentStore, StoreError, carried_bytes};

/// Why a request to Restate failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The URL did not parse.
    #[error("use {url} as a Restate URL: {message}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The request could not be sent or its answer read.
    #[error("reach {url}; is the Restate server running (scripts/restate-server.sh start)?")]
    Transport {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Restate answered with an error status.
    #[error("call {url}: Restate answered {status}: {message}")]
    Status {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// Restate's message (a handler's terminal error, verbatim).
        message: String,
    },
    /// A value the channel keeps in the content store could not be read.
    #[error("read the channel's evidence")]
    Store(#[source] StoreError),
    /// The answer was not the JSON expected.
    #[error("read the answer of {url}")]
    Json {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// The handler's own message when Restate answered with an error status.
    pub fn handler_message(&self) -> Option<&str> {
        match self {
            Self::Status { message, .. } => Some(message),
            _ => None,
        }
    }
}

/// How long a request is retried on the nodes by default before it fails.
pub const DEFAULT_RETRY_WINDOW: Duration = Duration::from_secs(10);

/// How long connecting to one node may take before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Which of a node's APIs a request goes to.
#[derive(Debug, Clone, Copy)]
enum Api {
    Ingress,
    Admin,
}

/// The nodes serving one API, and the one that answered last.
#[derive(Debug)]
struct Nodes {
    urls: Vec<String>,
    preferred: AtomicUsize,
}

impl Nodes {
    /// `list`'s comma-separated URLs, without trailing slashes.
    fn of(list: &str) -> Self {
        let urls: Vec<String> = list
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        Self {
            urls: if urls.is_empty() {
                vec![String::new()]
            } else {
                urls
            },
            preferred: AtomicUsize::new(0),
        }
    }

    /// The URLs in the order to try them: the one that answered last first.
    fn in_turn(&self) -> impl Iterator<Item = (usize, &str)> {
        let n = self.urls.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        (0..n).map(move |k| {
            let i = (first + k) % n;
            (i, self.urls[i].as_str())
        })
    }
}

/// Restate's ingress and admin endpoints, on one node or several.
#[derive(Debug, Clone)]
pub struct Restate {
    ingress: Arc<Nodes>,
    admin: Arc<Nodes>,
    retry_window: Duration,
    http: Client<HttpConnector, Full<Bytes>>,
    store: Option<ContentStore>,
}

impl Restate {
    /// A client of the server at `ingress` (`http://127.0.0.1:8080`) and `admin`
    /// (`http://127.0.0.1:9070`); each may list several nodes, comma-separated.
    pub fn new(ingress: &str, admin: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        Self {
            ingress: Arc::new(Nodes::of(ingress)),
            admin: Arc::new(Nodes::of(admin)),
            retry_window: DEFAULT_RETRY_WINDOW,
            http: Client::builder(TokioExecutor::new()).build(connector),
            store: None,
        }
    }

    /// Reads values the channel kept in `store` (the workers' content store) from there:
    /// without it, evidence larger than a message cannot be read.
    #[must_use]
    pub fn with_store(mut self, store: Option<ContentStore>) -> Self {
        self.store = store;
        self
    }

    /// Retries a request that found no node to serve it for at most `window` (zero: each
    /// node is tried once).
    #[must_use]
    pub fn with_retry_window(mut self, window: Duration) -> Self {
        self.retry_window = window;
        self
    }

    async fn post<T: DeserializeOwned>(
        &self,
        api: Api,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<T, ClientError> {
        let (url, bytes) = self.post_bytes(api, path, body, None).await?;
        let bytes = if bytes.is_empty() {
            Bytes::from_static(b"null")
        } else {
            bytes
        };
        serde_json::from_slice(&bytes).map_err(|source| ClientError::Json { url, source })
    }

    /// The answer's body as bytes, and the URL that gave it, after refusing an error status.
    /// A node that cannot be reached, or answers that it cannot serve now (502, 503, 504),
    /// is passed over for the next, round after round with a growing pause, until the retry
    /// window is spent: the last failure is returned then.
    async fn post_bytes(
        &self,
        api: Api,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
        idempotency_key: Option<&str>,
    ) -> Result<(String, Bytes), ClientError> {
        let nodes = match api {
            Api::Ingress => &self.ingress,
            Api::Admin => &self.admin,
        };
        let start = Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            let mut last = None;
            for (i, base) in nodes.in_turn() {
                let url = format!("{base}{path}");
                match self.post_once(url, body, idempotency_key).await {
                    Ok(answer) => {
                        nodes.preferred.store(i, Ordering::Relaxed);
                        return Ok(answer);
                    }
                    Err(e) if is_unserved(&e) => last = Some(e),
                    Err(e) => return Err(e),
                }
            }
            let left = self.retry_window.saturating_sub(start.elapsed());
            match last {
                Some(e) if left.is_zero() => return Err(e),
                Some(_) => {
                    tokio::time::sleep(pause.min(left)).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                // A node list is never empty (`Nodes::of`); said rather than assumed.
                None => {
                    return Err(ClientError::Url {
                        url: String::new(),
                        message: "no Restate URL was given".to_owned(),
                    });
                }
            }
        }
    }

    /// One request to `url`.
    async fn post_once(
        &self,
        url: String,
        body: Option<&(impl Serialize + ?Sized)>,
        idempotency_key: Option<&str>,
    ) -> Result<(String, Bytes), ClientError> {
        let mut request = Request::builder().method(Method::POST).uri(&url);
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let json = match body {
            Some(b) => {
                request = request.header("content-type", "application/json");
                serde_json::to_vec(b).map_err(|source| ClientError::Json {
                    url: url.clone(),
                    source,
                })?
            }
            // A handler without input takes an empty body.
            None => Vec::new(),
        };
        let request = request
            .body(Full::new(Bytes::from(json)))
            .map_err(|e| ClientError::Url {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let transport =
            |url: &String, e: Box<dyn std::error::Error + Send + Sync>| ClientError::Transport {
                url: url.clone(),
                source: e,
            };
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| transport(&url, Box::new(e)))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| transport(&url, Box::new(e)))?
            .to_bytes();
        if !status.is_success() {
            return Err(ClientError::Status {
                url,
                status: status.as_u16(),
                message: error_message(&bytes),
            });
        }
        Ok((url, bytes))
    }

    /// Registers (or re-registers) the worker deployment at `endpoint` with the admin API.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the admin API refuses it (it could not discover the endpoint).
    pub async fn register(&self, endpoint: &str) -> Result<(), ClientError> {
        let body = serde_json::json!({ "uri": endpoint, "force": true });
        let _: serde_json::Value = self.post(Api::Admin, "/deployments", Some(&body)).await?;
        Ok(())
    }

    /// Draws one fix attempt from `channel`'s run-wide budget in its fix ledger: granted
    /// (durable once this returns), or why not. Sent with an idempotency key, so a retried
    /// request gets the first answer.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the ledger could not be reached or refused the request.
    pub async fn draw_fix(&self, channel: &str, draw: &FixDraw) -> Result<DrawAnswer, ClientError> {
        let path = format!("/FixLedger/{channel}/draw");
        // The turn is in the key: another execution's draw is answered for itself.
        let key = format!(
            "{channel}/{}/{}/{}/{}",
            draw.task,
            draw.attempt,
            draw.fix,
            draw.turn.as_deref().unwrap_or("")
        );
        let (url, bytes) = self
            .post_bytes(Api::Ingress, &path, Some(draw), Some(&key))
            .await?;
        serde_json::from_slice(&bytes).map_err(|source| ClientError::Json { url, source })
    }

    /// Every fix draw `channel`'s ledger granted, in order.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the server cannot be reached or the answer does not read.
    pub async fn fix_grants(&self, channel: &str) -> Result<Vec<FixDraw>, ClientError> {
        self.post(
            Api::Ingress,
            &format!("/FixLedger/{channel}/grants"),
            None::<&()>,
        )
        .await
    }

    /// Submits `submission` to `channel` and waits for the pass to end (following it through
    /// the invocations it hands over to).
    ///
    /// # Errors
    ///
    /// [`ClientError::Status`] with the channel's refusal (evidence exists, plan refused).
    pub async fn submit(
        &self,
        channel: &str,
        submission: &Submission,
    ) -> Result<RunReport, ClientError> {
        // Keyed, so that a retry on another node attaches to the same pass.
        let key = once_key("submit", channel);
        let path = format!("/Channel/{channel}/submit");
        let (url, bytes) = self
            .post_bytes(Api::Ingress, &path, Some(submission), Some(&key))
            .await?;
        let report: RunReport =
            serde_json::from_slice(&bytes).map_err(|source| ClientError::Json { url, source })?;
        self.follow(channel, report).await
    }

    /// Resumes `channel` and waits for the pass to end (following it through the invocations
    /// it hands over to).
    ///
    /// # Errors
    ///
    /// [`ClientError::Status`] with the channel's refusal (no evidence).
    pub async fn resume(&self, channel: &str) -> Result<RunReport, ClientError> {
        let report = self.resume_once(channel).await?;
        self.follow(channel, report).await
    }

    /// One `resume` of `channel`: the report of the pass it ran.
    async fn resume_once(&self, channel: &str) -> Result<RunReport, ClientError> {
        let key = once_key("resume", channel);
        let path = format!("/Channel/{channel}/resume");
        let (url, bytes) = self
            .post_bytes(Api::Ingress, &path, None::<&()>, Some(&key))
            .await?;
        serde_json::from_slice(&bytes).map_err(|source| ClientError::Json { url, source })
    }

    /// Follows a pass that handed over to a new invocation until one ends without handing
    /// over: each `resume` queues behind the invocation going on with the pass, and goes on
    /// from where it stops.
    async fn follow(&self, channel: &str, mut report: RunReport) -> Result<RunReport, ClientError> {
        let resumed = report.resumed;
        while report.continued {
            report = self.resume_once(channel).await?;
        }
        report.resumed = resumed;
        Ok(report)
    }

    /// The channel's evidence, decoded from its checkpoint; `None` before a submission.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the server cannot be reached or the checkpoint does not decode.
    pub async fn evidence(&self, channel: &str) -> Result<Option<BatchEvidence>, ClientError> {
        let path = format!("/Channel/{channel}/evidence");
        // Raw bytes, empty for none: the handler answers with the checkpoint itself.
        let (url, bytes) = self
            .post_bytes(Api::Ingress, &path, None::<&()>, None)
            .await?;
        if bytes.is_empty() {
            return Ok(None);
        }
        let bytes =
            carried_bytes(Vec::from(bytes), self.store.as_ref()).map_err(ClientError::Store)?;
        kleene::checkpoint::decode(&bytes)
            .map(Some)
            .map_err(|e| ClientError::Transport {
                url,
                source: Box::new(e),
            })
    }

    /// The closure records the channel keeps, one per call it settled with a closure.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the server cannot be reached or the answer does not read.
    pub async fn closures(&self, channel: &str) -> Result<Vec<StoredClosure>, ClientError> {
        self.post(
            Api::Ingress,
            &format!("/Channel/{channel}/closures"),
            None::<&()>,
        )
        .await
    }

    /// The bytes of the plan files with `digests` that `channel` keeps, base64, in the order
    /// asked (`None` where it keeps none).
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the server cannot be reached or the answer does not read.
    pub async fn plan_files(
        &self,
        channel: &str,
        digests: &[Digest],
    ) -> Result<Vec<Option<String>>, ClientError> {
        self.post(
            Api::Ingress,
            &format!("/Channel/{channel}/plan_files"),
            Some(digests),
        )
        .await
    }

    /// The submission `channel` runs (its plan's text and files' manifest), `None` before
    /// one.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the server cannot be reached or the answer does not read.
    pub async fn submission(&self, channel: &str) -> Result<Option<Submission>, ClientError> {
        self.post(
            Api::Ingress,
            &format!("/Channel/{channel}/submission"),
            None::<&()>,
        )
        .await
    }

    /// The channel's status.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the server cannot be reached.
    pub async fn status(&self, channel: &str) -> Result<ChannelStatus, ClientError> {
        self.post(
            Api::Ingress,
            &format!("/Channel/{channel}/status"),
            None::<&()>,
        )
        .await
    }
}

/// Whether `e` says no node served the request (it could not be reached, or answered that it
/// cannot serve now): worth another node, or the same one a little later.
fn is_unserved(e: &ClientError) -> bool {
    match e {
        ClientError::Transport { .. } => true,
        ClientError::Status { status, .. } => matches!(status, 502..=504),
        _ => false,
    }
}

/// An idempotency key for one `what` of `channel` by this process: its retries share it, and
/// nothing else does.
fn once_key(what: &str, channel: &str) -> String {
    static SERIAL: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    format!("{what}/{channel}/{}/{nanos}/{serial}", std::process::id())
}

/// The `message` of Restate's JSON error body, else the body as text.
fn error_message(bytes: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback port nothing listens on: connecting to it is refused.
    fn refusing() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        format!("http://127.0.0.1:{port}")
    }

    /// A node that answers every request with `status` and `body`, counting them.
    async fn node(status: u16, body: &'static str) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&served);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, served)
    }

    const STATUS: &str =
        r#"{"channel":"c","tasks":[],"events":0,"evidence_digest":null,"stopped":null}"#;

    #[tokio::test]
    async fn a_request_fails_over_to_the_node_that_answers_and_stays_there() {
        let (live, served) = node(200, STATUS).await;
        let restate =
            Restate::new(&format!("{},{live}", refusing()), "").with_retry_window(Duration::ZERO);
        let status = restate.status("c").await.unwrap();
        assert_eq!(status.channel, "c");
        // The node that answered is asked first from now on.
        restate.status("c").await.unwrap();
        assert_eq!(served.load(Ordering::SeqCst), 2);
        assert_eq!(restate.ingress.preferred.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_node_that_cannot_serve_now_is_passed_over_and_a_refusal_is_not() {
        let (busy, _) = node(503, "partition unavailable").await;
        let (live, _) = node(200, STATUS).await;
        let restate = Restate::new(&format!("{busy},{live}"), "").with_retry_window(Duration::ZERO);
        assert!(restate.status("c").await.is_ok());
        // A handler's refusal is the answer: the next node would refuse the same.
        let (refuses, _) = node(400, r#"{"message": "no"}"#).await;
        let (other, served) = node(200, STATUS).await;
        let restate =
            Restate::new(&format!("{refuses},{other}"), "").with_retry_window(Duration::ZERO);
        let err = restate.status("c").await.unwrap_err();
        assert_eq!(err.handler_message(), Some("no"));
        assert_eq!(served.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn no_node_answering_is_retried_within_the_window_and_then_named() {
        let dead = refusing();
        let restate = Restate::new(&dead, "").with_retry_window(Duration::from_millis(700));
        let start = Instant::now();
        let err = restate.status("c").await.unwrap_err();
        assert!(matches!(err, ClientError::Transport { .. }), "{err}");
        assert!(err.to_string().contains(&dead), "{err}");
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(700) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    #[test]
    fn a_node_list_is_read_comma_separated() {
        let nodes = Nodes::of("http://a:1/, http://b:2,,");
        assert_eq!(nodes.urls, ["http://a:1", "http://b:2"]);
    }

    #[test]
    fn a_terminal_error_body_gives_its_message() {
        let body = br#"{"code": 500, "message": "failed to batch on channel c: the channel already has evidence; resume it"}"#;
        assert!(error_message(body).ends_with("resume it"));
        assert_eq!(error_message(b"plain"), "plain");
    }
}
