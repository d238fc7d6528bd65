//! A small HTTP/1 client for Restate's ingress and admin APIs: submit to a channel, read its
//! status, register a worker deployment.
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

/// Restate's ingress and admin endpoints.
#[derive(Debug, Clone)]
pub struct Restate {
    ingress: String,
    admin: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl Restate {
    /// A client of the server at `ingress` (`http://127.0.0.1:8080`) and `admin`
    /// (`http://127.0.0.1:9070`).
    pub fn new(ingress: &str, admin: &str) -> Self {
        Self {
            ingress: ingress.trim_end_matches('/').to_owned(),
            admin: admin.trim_end_matches('/').to_owned(),
            http: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn post<T: DeserializeOwned>(
        &self,
        url: String,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<T, ClientError> {
        let bytes = self.post_bytes(url.clone(), body, None).await?;
        let bytes = if bytes.is_empty() {
            Bytes::from_static(b"null")
        } else {
            bytes
        };
        serde_json::from_slice(&bytes).map_err(|source| ClientError::Json { url, source })
    }

    /// The answer's body as bytes, after refusing an error status.
    async fn post_bytes(
        &self,
        url: String,
        body: Option<&(impl Serialize + ?Sized)>,
        idempotency_key: Option<&str>,
    ) -> Result<Bytes, ClientError> {
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
        Ok(bytes)
    }

    /// Registers (or re-registers) the worker deployment at `endpoint` with the admin API.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the admin API refuses it (it could not discover the endpoint).
    pub async fn register(&self, endpoint: &str) -> Result<(), ClientError> {
        let body = serde_json::json!({ "uri": endpoint, "force": true });
        let _: serde_json::Value = self
            .post(format!("{}/deployments", self.admin), Some(&body))
            .await?;
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
        let url = format!("{}/FixLedger/{channel}/draw", self.ingress);
        // The turn is in the key: another execution's draw is answered for itself.
        let key = format!(
            "{channel}/{}/{}/{}/{}",
            draw.task,
            draw.attempt,
            draw.fix,
            draw.turn.as_deref().unwrap_or("")
        );
        let bytes = self.post_bytes(url.clone(), Some(draw), Some(&key)).await?;
        serde_json::from_slice(&bytes).map_err(|source| ClientError::Json { url, source })
    }

    /// Submits `submission` to `channel` and waits for the pass to end.
    ///
    /// # Errors
    ///
    /// [`ClientError::Status`] with the channel's refusal (evidence exists, plan refused).
    pub async fn submit(
        &self,
        channel: &str,
        submission: &Submission,
    ) -> Result<RunReport, ClientError> {
        self.post(
            format!("{}/Channel/{channel}/submit", self.ingress),
            Some(submission),
        )
        .await
    }

    /// Resumes `channel` and waits for the pass to end.
    ///
    /// # Errors
    ///
    /// [`ClientError::Status`] with the channel's refusal (no evidence).
    pub async fn resume(&self, channel: &str) -> Result<RunReport, ClientError> {
        self.post(
            format!("{}/Channel/{channel}/resume", self.ingress),
            None::<&()>,
        )
        .await
    }

    /// The channel's evidence, decoded from its checkpoint; `None` before a submission.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the server cannot be reached or the checkpoint does not decode.
    pub async fn evidence(&self, channel: &str) -> Result<Option<BatchEvidence>, ClientError> {
        let url = format!("{}/Channel/{channel}/evidence", self.ingress);
        // Raw bytes, empty for none: the handler answers with the checkpoint itself.
        let bytes = self.post_bytes(url.clone(), None::<&()>, None).await?;
        if bytes.is_empty() {
            return Ok(None);
        }
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
            format!("{}/Channel/{channel}/closures", self.ingress),
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
            format!("{}/Channel/{channel}/plan_files", self.ingress),
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
            format!("{}/Channel/{channel}/submission", self.ingress),
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
            format!("{}/Channel/{channel}/status", self.ingress),
            None::<&()>,
        )
        .await
    }
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

    #[test]
    fn a_terminal_error_body_gives_its_message() {
        let body = br#"{"code": 500, "message": "failed to batch on channel c: the channel already has evidence; resume it"}"#;
        assert!(error_message(body).ends_with("resume it"));
        assert_eq!(error_message(b"plain"), "plain");
    }
}
