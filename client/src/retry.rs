//! When a component's request is sent again: client-go's rule, not kube-rs's default.
//!
//! kube-rs retries every 429, 503 and 504 answer by default, up to 15 times with an exponential
//! backoff of up to 1,000 s between tries, whether or not the server asked for it. A component
//! whose API server is briefly unavailable, or a request that ends at an aggregated API nobody
//! serves, then holds its worker for minutes and hides the error from the code that should handle
//! it (a controller requeues with its own backoff; the autoscaler says it cannot read a metric).
//! client-go sends a request again only when the answer says when (`Retry-After` on a 429 or a
//! 5xx, as skiff's own limits and an unavailable store answer), after those seconds, up to 10
//! times. That is the rule here.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use tower::BoxError;
use tower::retry::Policy;

/// How many times client-go sends a request again on the server's word.
pub const MAX_RETRIES: u32 = 10;

/// The longest wait a `Retry-After` may ask for before the answer is taken as it is.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// client-go's retry rule as a tower retry policy.
#[derive(Clone, Debug)]
pub struct ServerDirected {
    left: u32,
}

impl Default for ServerDirected {
    fn default() -> Self {
        ServerDirected { left: MAX_RETRIES }
    }
}

/// How long the server asks the client to wait before sending `response`'s request again, if it
/// asks (a 429 or a 5xx with `Retry-After` in whole seconds, at most [`MAX_WAIT`]).
pub fn retry_after<B>(response: &Response<B>) -> Option<Duration> {
    let status = response.status();
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let seconds: u64 = response
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let wait = Duration::from_secs(seconds);
    (wait <= MAX_WAIT).then_some(wait)
}

impl<B> Policy<Request<Body>, Response<B>, BoxError> for ServerDirected {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _request: &mut Request<Body>,
        result: &mut Result<Response<B>, BoxError>,
    ) -> Option<Self::Future> {
        let wait = retry_after(result.as_ref().ok()?)?;
        self.left = self.left.checked_sub(1)?;
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        // Only bodies held whole can be sent again (not a stream).
        let body = request.body().try_clone()?;
        let mut copy = Request::builder()
            .method(request.method().clone())
            .uri(request.uri().clone())
            .version(request.version())
            .body(body)
            .ok()?;
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, retry_after: Option<&str>) -> Response<()> {
        let mut builder = Response::builder().status(status);
        if let Some(r) = retry_after {
            builder = builder.header("Retry-After", r);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn only_an_answer_that_says_when_is_sent_again() {
        assert_eq!(
            retry_after(&answer(429, Some("1"))),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_after(&answer(500, Some("2"))),
            Some(Duration::from_secs(2))
        );
        // An unavailable aggregated API or server without a word on when: the caller decides.
        assert_eq!(retry_after(&answer(503, None)), None);
        assert_eq!(retry_after(&answer(504, None)), None);
        // Not a refusal to retry; not whole seconds; too long to hold a worker.
        assert_eq!(retry_after(&answer(409, Some("1"))), None);
        assert_eq!(
            retry_after(&answer(429, Some("Wed, 21 Oct 2026 07:28:00 GMT"))),
            None
        );
        assert_eq!(retry_after(&answer(429, Some("3600"))), None);
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_ten_retries_each_after_the_wait_asked_for() {
        let mut policy = ServerDirected::default();
        let mut request = Request::get("/api").body(Body::empty()).unwrap();
        let started = tokio::time::Instant::now();
        for _ in 0..MAX_RETRIES {
            let mut result: Result<Response<()>, BoxError> = Ok(answer(429, Some("1")));
            let wait = policy.retry(&mut request, &mut result).expect("retried");
            wait.await;
        }
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        let mut result: Result<Response<()>, BoxError> = Ok(answer(429, Some("1")));
        assert!(policy.retry(&mut request, &mut result).is_none());
        // A failure to connect is the caller's to handle.
        let mut failed: Result<Response<()>, BoxError> = Err("refused".into());
        assert!(
            ServerDirected::default()
                .retry(&mut request, &mut failed)
                .is_none()
        );
        // The request goes again as it was.
        let copy =
            Policy::<_, Response<()>, BoxError>::clone_request(&mut policy, &request).unwrap();
        assert_eq!(
            (copy.method(), copy.uri()),
            (request.method(), request.uri())
        );
    }
}
