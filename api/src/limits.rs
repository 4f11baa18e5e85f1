//! Request admission limits: how much one request, one connection and one client may ask of the
//! API server at once. Every limit lives here; the routes and the connection loop only ask.
//!
//! | limit | answer | reference |
//! |---|---|---|
//! | body over [`Settings::max_body_bytes`] (with or without `Content-Length`) | 413 `RequestEntityTooLarge` | kube-apiserver's 3 MiB `MaxRequestBodyBytes` |
//! | request headers not complete within [`Settings::header_read_timeout`] | connection closed | Go's `ReadHeaderTimeout`, 32 s in kube-apiserver |
//! | more than [`Settings::max_requests_inflight`] reads or [`Settings::max_mutating_requests_inflight`] writes in flight | 429 `TooManyRequests`, `Retry-After: 1` | `--max-requests-inflight` 400, `--max-mutating-requests-inflight` 200 |
//! | more than [`Settings::max_watches_per_user`] open watches of one user | 429 `TooManyRequests`, `Retry-After: 1` | skiff's own |
//! | a watch whose client does not read: [`Settings::watch_buffer_bytes`] queued for [`Settings::watch_stall_timeout`] | the watch is closed, with its connection over HTTP/1, its stream alone over HTTP/2 | the cacher's "forcing watcher close due to unresponsiveness" |
//!
//! Long-running requests (watches, `exec`, `attach`, `portforward`, `log`, `proxy`) take no
//! in-flight seat, as upstream's `BasicLongRunningRequestCheck` exempts them; members of
//! `system:masters` are never refused a seat (upstream's max-in-flight filter exempts them too),
//! but their watches count.
//!
//! The bookkeeping ([`Counters`]) is pure and tested without I/O; [`Limits`] is the shell that
//! guards it with a mutex and hands out [`Seat`]s that give their place back when dropped.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::error::Error;

/// What a 429 asks the client to wait, in seconds (upstream's max-in-flight filter says 1).
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// The limits, with kube-apiserver's defaults where it has one.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Request bodies over this many bytes get 413 (kube-apiserver: 3 MiB).
    pub max_body_bytes: usize,
    /// Non-mutating requests (get, list) in flight at once; more get 429. 0: no limit.
    pub max_requests_inflight: usize,
    /// Mutating requests in flight at once; more get 429. 0: no limit.
    pub max_mutating_requests_inflight: usize,
    /// Watches one user may hold open at once; more get 429. 0: no limit.
    pub max_watches_per_user: usize,
    /// Bytes a watch may have queued for a client that is not reading before its sender waits.
    pub watch_buffer_bytes: usize,
    /// How long a watch's sender waits on a full buffer before the watch is closed.
    pub watch_stall_timeout: Duration,
    /// A connection must send its request headers within this time (each request's from its
    /// first poll); otherwise it is closed.
    pub header_read_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_body_bytes: 3 * 1024 * 1024,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            max_watches_per_user: 1000,
            watch_buffer_bytes: 1024 * 1024,
            watch_stall_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(32),
        }
    }
}

/// How a request counts against the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// get, list.
    ReadOnly,
    /// Everything that writes.
    Mutating,
    /// A watch: no in-flight seat, one of its user's watches.
    Watch,
    /// exec, attach, port-forward, log, proxy: not counted.
    LongRunning,
}

/// The class of a request by its authorization verb and subresource (upstream's
/// `BasicLongRunningRequestCheck` of verbs `watch`, `proxy` and subresources `attach`, `exec`,
/// `proxy`, `log`, `portforward`; `get`, `list` and `watch` are its non-mutating verbs).
pub fn classify(verb: &str, subresource: Option<&str>) -> Class {
    if verb == "watch" {
        return Class::Watch;
    }
    if verb == "proxy"
        || matches!(
            subresource,
            Some("attach" | "exec" | "proxy" | "log" | "portforward")
        )
    {
        return Class::LongRunning;
    }
    match verb {
        "get" | "list" => Class::ReadOnly,
        _ => Class::Mutating,
    }
}

/// Why a request was refused a seat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The in-flight limit of the request's class is reached.
    InFlight,
    /// The user holds as many watches as allowed.
    Watches {
        /// The user.
        user: String,
        /// The limit.
        limit: usize,
    },
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Error {
        let message = match refusal {
            // Upstream's words (its filter writes them as plain text; a Status carries them
            // here, which client-go reads the same way).
            Refusal::InFlight => "Too many requests, please try again later.".to_string(),
            Refusal::Watches { user, limit } => format!(
                "Too many watches: user {user:?} has {limit} open, the most allowed; please try again later."
            ),
        };
        Error::Api(skiff_meta::status::ApiError::too_many_requests(
            message,
            RETRY_AFTER_SECONDS,
        ))
    }
}

/// A place taken in [`Counters`], to give back with [`Counters::release`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Nothing was counted (long-running, or exempt).
    None,
    /// One non-mutating request.
    ReadOnly,
    /// One mutating request.
    Mutating,
    /// One watch of this user.
    Watch(String),
}

/// Requests in flight and watches open: the pure bookkeeping.
#[derive(Debug, Default)]
pub struct Counters {
    read_only: usize,
    mutating: usize,
    watches: HashMap<String, usize>,
}

impl Counters {
    /// Takes a place for a request of `class` from `user` (`privileged`: in `system:masters`),
    /// or says why not.
    pub fn admit(
        &mut self,
        settings: &Settings,
        class: Class,
        user: &str,
        privileged: bool,
    ) -> Result<Place, Refusal> {
        let under = |count: usize, limit: usize| limit == 0 || count < limit;
        match class {
            Class::LongRunning => Ok(Place::None),
            Class::ReadOnly | Class::Mutating if privileged => Ok(Place::None),
            Class::ReadOnly if under(self.read_only, settings.max_requests_inflight) => {
                self.read_only += 1;
                Ok(Place::ReadOnly)
            }
            Class::Mutating if under(self.mutating, settings.max_mutating_requests_inflight) => {
                self.mutating += 1;
                Ok(Place::Mutating)
            }
            Class::ReadOnly | Class::Mutating => Err(Refusal::InFlight),
            Class::Watch => {
                let open = self.watches.get(user).copied().unwrap_or(0);
                if !under(open, settings.max_watches_per_user) {
                    return Err(Refusal::Watches {
                        user: user.to_string(),
                        limit: settings.max_watches_per_user,
                    });
                }
                self.watches.insert(user.to_string(), open + 1);
                Ok(Place::Watch(user.to_string()))
            }
        }
    }

    /// Gives a place back.
    pub fn release(&mut self, place: &Place) {
        match place {
            Place::None => {}
            Place::ReadOnly => self.read_only -= 1,
            Place::Mutating => self.mutating -= 1,
            Place::Watch(user) => {
                let open = self
                    .watches
                    .get_mut(user)
                    .expect("a released watch was counted");
                *open -= 1;
                if *open == 0 {
                    self.watches.remove(user);
                }
            }
        }
    }

    /// (non-mutating, mutating) requests in flight, and users with open watches.
    pub fn in_flight(&self) -> (usize, usize, usize) {
        (self.read_only, self.mutating, self.watches.len())
    }
}

/// The shell: [`Counters`] behind a mutex (held for a few instructions, never across `.await`).
#[derive(Debug, Default)]
pub struct Limits {
    /// The limits.
    pub settings: Settings,
    counters: Mutex<Counters>,
}

impl Limits {
    /// Limits with these settings.
    pub fn new(settings: Settings) -> Arc<Limits> {
        Arc::new(Limits {
            settings,
            counters: Mutex::default(),
        })
    }

    /// A seat for a request of `class`, or the 429 that refuses it.
    pub fn admit(self: &Arc<Self>, class: Class, user: &crate::auth::User) -> Result<Seat, Error> {
        let privileged = user.groups.iter().any(|g| g == crate::auth::MASTERS_GROUP);
        let place = self
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(&self.settings, class, &user.name, privileged)?;
        Ok(Seat {
            limits: self.clone(),
            place,
        })
    }

    /// (non-mutating, mutating) requests in flight, and users with open watches.
    pub fn in_flight(&self) -> (usize, usize, usize) {
        self.counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .in_flight()
    }
}

/// A place in the limits, given back on drop.
#[derive(Debug)]
pub struct Seat {
    limits: Arc<Limits>,
    place: Place,
}

impl Seat {
    /// Whether the seat is a watch's, which must be held as long as its response streams.
    pub fn is_watch(&self) -> bool {
        matches!(self.place, Place::Watch(_))
    }

    /// The response, holding this seat until its body is dropped (a watch's seat is given back
    /// when the watch ends, not when its headers are sent).
    pub fn hold_until_sent(self, response: crate::request::Response) -> crate::request::Response {
        let (parts, body) = response.into_parts();
        let held = Held { body, _seat: self };
        let body = warp::reply::Reply::into_response(warp::reply::stream(held)).into_body();
        http::Response::from_parts(parts, body)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.limits
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release(&self.place);
    }
}

/// A response body, as a stream of its data, that holds a seat until it is dropped.
struct Held<B> {
    body: B,
    _seat: Seat,
}

impl<B> Stream for Held<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let frame = match hyper::body::Body::poll_frame(Pin::new(&mut self.body), cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(std::io::Error::other(e.to_string()))));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            // Trailers are not sent on watches; data is passed on as it is.
            if let Ok(data) = frame.into_data() {
                return Poll::Ready(Some(Ok(data)));
            }
        }
    }
}

/// Closes the connection a request came on (a request extension the connection loop adds): a
/// watch whose client stopped reading cannot be ended by ending its body, since the server
/// stops polling a body it cannot write.
#[derive(Debug, Clone, Default)]
pub struct Connection(pub CancellationToken);

/// The sending side of a watch's bounded buffer.
#[derive(Debug)]
pub struct WatchSender {
    tx: mpsc::UnboundedSender<Bytes>,
    /// Closed when the watch stalls.
    connection: Option<Connection>,
    shared: Arc<Shared>,
    budget: usize,
    stall: Duration,
}

/// What the watch task and the response body share.
#[derive(Debug, Default)]
struct Shared {
    /// Bytes sent and not yet taken by the response body.
    queued: AtomicUsize,
    /// Signalled each time the response body takes a line.
    taken: Notify,
    /// The watch was closed for a client that does not read.
    stalled: AtomicBool,
}

/// Why a watch line was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The response is gone (the client went away, or the server shut down).
    Closed,
    /// The buffer stayed full for the stall timeout: the client is not reading.
    Stalled,
}

/// A watch's buffer: at most `settings.watch_buffer_bytes` (or one line, if larger) queued for
/// the client; a sender that waits `settings.watch_stall_timeout` for room gives up.
/// A stall also closes `connection`, the connection the watch came on (an HTTP/1 one: an HTTP/2
/// watch has none, and only its stream is reset).
pub fn watch_buffer(
    settings: &Settings,
    connection: Option<Connection>,
) -> (WatchSender, WatchBody) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::default());
    (
        WatchSender {
            tx,
            connection,
            shared: shared.clone(),
            budget: settings.watch_buffer_bytes,
            stall: settings.watch_stall_timeout,
        },
        WatchBody { rx, shared },
    )
}

/// Whether a line of `len` bytes fits with `queued` bytes waiting: always when nothing waits
/// (so one large object still goes), else within the budget.
pub fn fits(queued: usize, len: usize, budget: usize) -> bool {
    queued == 0 || queued.saturating_add(len) <= budget
}

impl WatchSender {
    /// Queues one line, waiting for room up to the stall timeout.
    pub async fn send(&self, line: Bytes) -> Result<(), SendError> {
        let deadline = tokio::time::Instant::now() + self.stall;
        loop {
            let taken = self.shared.taken.notified();
            tokio::pin!(taken);
            // Registered before the check, so a take between the check and the wait wakes us.
            taken.as_mut().enable();
            if self.tx.is_closed() {
                return Err(SendError::Closed);
            }
            let queued = self.shared.queued.load(Ordering::Acquire);
            if fits(queued, line.len(), self.budget) {
                self.shared.queued.fetch_add(line.len(), Ordering::AcqRel);
                return self.tx.send(line).map_err(|_| SendError::Closed);
            }
            tokio::select! {
                _ = taken => {}
                _ = self.tx.closed() => return Err(SendError::Closed),
                _ = tokio::time::sleep_until(deadline) => {
                    self.shared.stalled.store(true, Ordering::Release);
                    tracing::warn!(
                        queued = self.shared.queued.load(Ordering::Acquire),
                        stalled_for = ?self.stall,
                        "closing a watch (and its connection) whose client does not read"
                    );
                    if let Some(connection) = &self.connection {
                        connection.0.cancel();
                    }
                    return Err(SendError::Stalled);
                }
            }
        }
    }

    /// Resolves when the response body is gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// The receiving side of a watch's buffer: the response body's stream of lines. After a stall it
/// ends with an error, so that a server still able to write aborts the response.
#[derive(Debug)]
pub struct WatchBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    shared: Arc<Shared>,
}

impl Stream for WatchBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(line)) => {
                self.shared.queued.fetch_sub(line.len(), Ordering::AcqRel);
                self.shared.taken.notify_waiters();
                Poll::Ready(Some(Ok(line)))
            }
            Poll::Ready(None) if self.shared.stalled.swap(false, Ordering::AcqRel) => {
                Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "watch closed: the client did not read it",
                ))))
            }
            other => other.map(|o| o.map(Ok)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(read: usize, write: usize, watches: usize) -> Settings {
        Settings {
            max_requests_inflight: read,
            max_mutating_requests_inflight: write,
            max_watches_per_user: watches,
            ..Settings::default()
        }
    }

    #[test]
    fn classes_follow_upstreams_long_running_check() {
        assert_eq!(classify("get", None), Class::ReadOnly);
        assert_eq!(classify("list", None), Class::ReadOnly);
        assert_eq!(classify("watch", None), Class::Watch);
        for verb in ["create", "update", "patch", "delete", "deletecollection"] {
            assert_eq!(classify(verb, None), Class::Mutating, "{verb}");
        }
        assert_eq!(classify("create", Some("exec")), Class::LongRunning);
        assert_eq!(classify("get", Some("log")), Class::LongRunning);
        assert_eq!(classify("get", Some("proxy")), Class::LongRunning);
        assert_eq!(classify("create", Some("portforward")), Class::LongRunning);
        assert_eq!(classify("create", Some("eviction")), Class::Mutating);
        assert_eq!(classify("get", Some("status")), Class::ReadOnly);
    }

    #[test]
    fn reads_and_writes_have_separate_limits_and_seats_come_back() {
        let s = settings(2, 1, 0);
        let mut c = Counters::default();
        let r1 = c.admit(&s, Class::ReadOnly, "u", false).unwrap();
        let _r2 = c.admit(&s, Class::ReadOnly, "u", false).unwrap();
        assert_eq!(
            c.admit(&s, Class::ReadOnly, "v", false),
            Err(Refusal::InFlight)
        );
        let w = c.admit(&s, Class::Mutating, "u", false).unwrap();
        assert_eq!(
            c.admit(&s, Class::Mutating, "u", false),
            Err(Refusal::InFlight)
        );
        // Long-running requests and system:masters are never refused.
        assert_eq!(c.admit(&s, Class::LongRunning, "u", false), Ok(Place::None));
        assert_eq!(c.admit(&s, Class::Mutating, "admin", true), Ok(Place::None));
        assert_eq!(c.in_flight(), (2, 1, 0));
        c.release(&r1);
        c.release(&w);
        assert_eq!(
            c.admit(&s, Class::ReadOnly, "v", false),
            Ok(Place::ReadOnly)
        );
        assert_eq!(
            c.admit(&s, Class::Mutating, "v", false),
            Ok(Place::Mutating)
        );
    }

    #[test]
    fn watches_are_capped_per_user_privileged_or_not() {
        let s = settings(1, 1, 2);
        let mut c = Counters::default();
        let a1 = c.admit(&s, Class::Watch, "a", true).unwrap();
        let _a2 = c.admit(&s, Class::Watch, "a", true).unwrap();
        assert_eq!(
            c.admit(&s, Class::Watch, "a", true),
            Err(Refusal::Watches {
                user: "a".into(),
                limit: 2
            })
        );
        // Another user is not affected, and watches take no in-flight seat.
        let b = c.admit(&s, Class::Watch, "b", false).unwrap();
        assert_eq!(c.in_flight(), (0, 0, 2));
        c.release(&a1);
        c.release(&b);
        assert_eq!(c.in_flight(), (0, 0, 1));
        assert!(c.admit(&s, Class::Watch, "a", true).is_ok());
    }

    #[test]
    fn zero_means_no_limit() {
        let s = settings(0, 0, 0);
        let mut c = Counters::default();
        for _ in 0..10_000 {
            c.admit(&s, Class::ReadOnly, "u", false).unwrap();
            c.admit(&s, Class::Mutating, "u", false).unwrap();
            c.admit(&s, Class::Watch, "u", false).unwrap();
        }
    }

    #[test]
    fn refusals_are_429_with_a_retry_hint() {
        let e = Error::from(Refusal::InFlight);
        assert_eq!(e.code(), http::StatusCode::TOO_MANY_REQUESTS);
        let status = e.to_status();
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
        assert_eq!(
            status["message"],
            "Too many requests, please try again later."
        );
        let e = Error::from(Refusal::Watches {
            user: "bob".into(),
            limit: 3,
        });
        assert_eq!(e.code(), http::StatusCode::TOO_MANY_REQUESTS);
        assert!(e.to_string().contains("\"bob\" has 3 open"), "{e}");
    }

    #[test]
    fn a_line_fits_an_empty_buffer_whatever_its_size() {
        assert!(fits(0, 10, 4));
        assert!(fits(2, 2, 4));
        assert!(!fits(3, 2, 4));
        assert!(!fits(usize::MAX - 1, 2, usize::MAX - 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_buffer_waits_for_room_then_gives_up_on_a_client_that_does_not_read() {
        let s = Settings {
            watch_buffer_bytes: 10,
            watch_stall_timeout: Duration::from_secs(5),
            ..Settings::default()
        };
        let connection = Connection::default();
        let (tx, mut body) = watch_buffer(&s, Some(connection.clone()));
        tx.send(Bytes::from_static(b"0123456")).await.unwrap();
        // Room is made by the reader.
        let send = tokio::spawn(async move {
            tx.send(Bytes::from_static(b"abcdef")).await.unwrap();
            tx
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!send.is_finished());
        use futures::StreamExt as _;
        assert_eq!(&body.next().await.unwrap().unwrap()[..], b"0123456");
        let tx = send.await.unwrap();
        // Nobody reads now: after the stall timeout the sender gives up...
        let started = tokio::time::Instant::now();
        assert_eq!(
            tx.send(Bytes::from_static(b"ghijkl")).await,
            Err(SendError::Stalled)
        );
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(
            connection.0.is_cancelled(),
            "the stall closes the connection"
        );
        drop(tx);
        // ...and the body yields what was queued, then an error, then ends.
        assert_eq!(&body.next().await.unwrap().unwrap()[..], b"abcdef");
        assert!(body.next().await.unwrap().is_err());
        assert!(body.next().await.is_none());
    }

    #[tokio::test]
    async fn a_watch_sender_sees_the_body_go() {
        let (tx, body) = watch_buffer(&Settings::default(), None);
        drop(body);
        assert_eq!(
            tx.send(Bytes::from_static(b"x")).await,
            Err(SendError::Closed)
        );
    }
}
