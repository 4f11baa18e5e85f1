//! Authentication: a verified client certificate (its common name is the user, its organizations
//! the groups, as kube-apiserver reads them; [`crate::tls`] checks the chain), else a bearer token
//! from the token file in the data directory, else a service-account token. A warp filter turns
//! each request into a [`User`] or a 401.
//!
//! The token file has the format of kube-apiserver's `--token-auth-file`, one token per line:
//! ```text
//! token,user,uid,"group1,group2"
//! ```
//! The first start creates it with one admin token (user `system:admin`, group
//! `system:masters`); more tokens (a node join token, ...) are added with
//! [`Authenticator::add_token`].
//!
//! A bearer token that is not in the file and is a JWT of the service-account issuer, or a legacy
//! one of `kubernetes/serviceaccount` kept in a Secret, is checked as a service-account token
//! ([`crate::serviceaccount`]) by [`Authenticator::filter_with`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use sha2::{Digest as _, Sha256};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::tls::ClientCertificate;

/// File name of the token file in the data directory.
pub const TOKEN_FILE: &str = "tokens.csv";
/// The admin user created on first start.
pub const ADMIN_USER: &str = "system:admin";
/// The group whose members may do anything (once RBAC exists).
pub const MASTERS_GROUP: &str = "system:masters";
/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// Errors of the token file and of authentication.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The token file could not be read or written.
    #[error("cannot access the token file {path}")]
    Io {
        /// The token file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A line of the token file is not `token,user,uid[,"groups"]`.
    #[error("{path}:{line}: {reason}")]
    Malformed {
        /// The token file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A token or user name that cannot be stored in the token file.
    #[error("invalid token entry: {0}")]
    InvalidEntry(&'static str),
    /// The request carries no bearer token.
    #[error("no bearer token in the request")]
    MissingToken,
    /// The bearer token is not known.
    #[error("invalid bearer token")]
    InvalidToken,
    /// A client certificate that does not hold (another CA, expired), and no token.
    #[error("invalid client certificate: {0}")]
    InvalidCertificate(String),
    /// A service-account token that does not hold (expired, wrongly signed, its service account
    /// gone); the reason is logged, the client sees only 401.
    #[error("invalid bearer token, {0}")]
    InvalidServiceAccountToken(String),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An authenticated user, handed to the handlers (RBAC decides with it later).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    /// The user name (`system:admin`, `system:node:n1`).
    pub name: String,
    /// A unique id for the user.
    pub uid: String,
    /// The groups the user is in; authenticated users are always in `system:authenticated`.
    pub groups: Vec<String>,
    /// What else the authenticator knows (a service account's bound pod, the credential id).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// The cluster admin created on first start.
    pub fn admin() -> User {
        User {
            name: ADMIN_USER.to_string(),
            uid: "admin".to_string(),
            groups: vec![MASTERS_GROUP.to_string()],
            extra: BTreeMap::new(),
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// One known token.
struct Entry {
    /// Kept to rewrite the file when a token is added.
    token: String,
    /// SHA-256 of the token: compared in constant time, always over 32 bytes.
    digest: [u8; 32],
    user: User,
}

/// Checks bearer tokens against the token file.
pub struct Authenticator {
    path: PathBuf,
    /// Read on every request, written when a token is added; never held across `.await`.
    entries: RwLock<Vec<Entry>>,
    /// Token lookups made (a request is authenticated once: the route tests count).
    lookups: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// A new random token: 32 bytes from the OS-seeded CSPRNG, hex encoded.
pub fn generate_token() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Equality of two digests without an early exit.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl Authenticator {
    /// Loads the token file at `path`, creating it (mode 0600) with a new admin token when it
    /// does not exist.
    pub fn load_or_create(path: &Path) -> Result<Authenticator> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let authenticator = Authenticator {
            path: path.to_path_buf(),
            entries: RwLock::new(Vec::new()),
            lookups: std::sync::atomic::AtomicU64::new(0),
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let entries = parse(path, &text)?;
                *authenticator.entries.write().expect("token lock poisoned") = entries;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = path.parent() {
                    crate::tls::create_dir_all_durably(parent, 0o777).map_err(io)?;
                }
                authenticator.add_token(User::admin())?;
            }
            Err(e) => return Err(io(e)),
        }
        Ok(authenticator)
    }

    /// The path of the token file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The first token of the user called `name` (to write the admin kubeconfig).
    pub fn token_of(&self, name: &str) -> Option<String> {
        let entries = self.entries.read().expect("token lock poisoned");
        entries
            .iter()
            .find(|e| e.user.name == name)
            .map(|e| e.token.clone())
    }

    /// Token lookups made so far.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The admin token, if the file still has one.
    pub fn admin_token(&self) -> Option<String> {
        self.token_of(ADMIN_USER)
    }

    /// Adds a new random token for `user`, persists the file and returns the token.
    pub fn add_token(&self, user: User) -> Result<String> {
        let token = generate_token();
        self.insert(token.clone(), user)?;
        Ok(token)
    }

    /// Adds a given token for `user` (e.g. a join token chosen by the operator) and persists
    /// the file.
    pub fn insert(&self, token: String, user: User) -> Result<()> {
        validate_field(&token, "the token")?;
        validate_field(&user.name, "the user name")?;
        validate_field(&user.uid, "the uid")?;
        if user
            .groups
            .iter()
            .any(|g| g.contains(['"', '\n', '\r', ',']) || g.is_empty())
        {
            return Err(Error::InvalidEntry(
                "a group is empty or contains a quote, comma or newline",
            ));
        }
        let mut entries = self.entries.write().expect("token lock poisoned");
        let digest = digest(&token);
        if entries.iter().any(|e| e.digest == digest) {
            return Err(Error::InvalidEntry("the token already exists"));
        }
        entries.push(Entry {
            token,
            digest,
            user,
        });
        let text = render(&entries);
        crate::tls::write_atomically(&self.path, text.as_bytes(), 0o600).map_err(|source| {
            // Keep memory and file in agreement.
            entries.pop();
            Error::Io {
                path: self.path.clone(),
                source,
            }
        })
    }

    /// Gives every token of the user called `name` to `user` instead, and persists the file;
    /// whether there was one.
    pub fn replace_user(&self, name: &str, user: User) -> Result<bool> {
        let mut entries = self.entries.write().expect("token lock poisoned");
        let before: Vec<User> = entries.iter().map(|e| e.user.clone()).collect();
        let mut replaced = false;
        for entry in entries.iter_mut().filter(|e| e.user.name == name) {
            entry.user = user.clone();
            replaced = true;
        }
        if !replaced {
            return Ok(false);
        }
        let text = render(&entries);
        crate::tls::write_atomically(&self.path, text.as_bytes(), 0o600).map_err(|source| {
            // Keep memory and file in agreement.
            for (entry, old) in entries.iter_mut().zip(before) {
                entry.user = old;
            }
            Error::Io {
                path: self.path.clone(),
                source,
            }
        })?;
        Ok(true)
    }

    /// Authenticates a request from its `Authorization` header value: `Bearer <token>` (the
    /// scheme is case-insensitive). Every known token is compared, in constant time.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<User> {
        self.lookup(bearer(authorization)?)
    }

    /// The user of `token` in the token file, in `system:authenticated`.
    pub fn lookup(&self, token: &str) -> Result<User> {
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let presented = digest(token);
        let entries = self.entries.read().expect("token lock poisoned");
        let mut found = None;
        for entry in entries.iter() {
            if constant_time_eq(&presented, &entry.digest) && found.is_none() {
                found = Some(&entry.user);
            }
        }
        let mut user = found.cloned().ok_or(Error::InvalidToken)?;
        if !user.in_group(AUTHENTICATED_GROUP) {
            user.groups.push(AUTHENTICATED_GROUP.to_string());
        }
        Ok(user)
    }

    /// A filter that extracts the authenticated [`User`] from the request, or rejects with
    /// [`Unauthorized`] (turn it into the 401 `Status` with [`Unauthorized::response`] or
    /// [`recover`]).
    pub fn filter(self: &Arc<Self>) -> BoxedFilter<(User,)> {
        let this = self.clone();
        warp::header::optional::<String>("authorization")
            .and_then(move |header: Option<String>| {
                let result = this
                    .authenticate(header.as_deref())
                    .map_err(|error| warp::reject::custom(Unauthorized { error }));
                std::future::ready(result)
            })
            .boxed()
    }

    /// [`Authenticator::filter`] that also takes service-account tokens of `api`'s issuer
    /// (verified, and their service account looked up, as kube-apiserver does).
    pub fn filter_with(
        self: &Arc<Self>,
        api: Arc<crate::server::ApiServer>,
    ) -> BoxedFilter<(User,)> {
        let this = self.clone();
        warp::ext::optional::<ClientCertificate>()
            .and(warp::header::optional::<String>("authorization"))
            .and_then(
                move |certificate: Option<ClientCertificate>, header: Option<String>| {
                    let this = this.clone();
                    let api = api.clone();
                    async move {
                        if let Some(ClientCertificate::Verified(subject)) = &certificate {
                            return Ok(certificate_user(subject));
                        }
                        let result = authenticate_with(&this, &api, header.as_deref()).await;
                        match (result, certificate) {
                            // A certificate that does not hold and no token that does: the
                            // certificate is why.
                            (
                                Err(Error::MissingToken),
                                Some(ClientCertificate::Invalid(reason)),
                            ) => Err(Error::InvalidCertificate(reason)),
                            (result, _) => result,
                        }
                        .map_err(|error| warp::reject::custom(Unauthorized { error }))
                    }
                },
            )
            .boxed()
    }
}

/// The user a verified client certificate names, as kube-apiserver's x509 authenticator reads
/// it: the common name is the user, each organization a group.
pub fn certificate_user(subject: &skiff_pki::Subject) -> User {
    let mut groups = subject.organizations.clone();
    if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        groups.push(AUTHENTICATED_GROUP.to_string());
    }
    User {
        name: subject.common_name.clone(),
        uid: String::new(),
        groups,
        extra: BTreeMap::new(),
    }
}

/// The user of a request's `Authorization` header: a token-file token, else a service-account
/// token of `api`'s issuer.
pub async fn authenticate_with(
    tokens: &Authenticator,
    api: &crate::server::ApiServer,
    authorization: Option<&str>,
) -> Result<User> {
    let token = bearer(authorization)?;
    match tokens.lookup(token) {
        Err(Error::InvalidToken) => {}
        found => return found,
    }
    match api
        .service_accounts
        .authenticate(&api.registry, token, &[])
        .await
    {
        Ok(Some(found)) => {
            let mut user = found.user;
            user.groups.push(AUTHENTICATED_GROUP.to_string());
            Ok(user)
        }
        Ok(None) => Err(Error::InvalidToken),
        Err(reason) => Err(Error::InvalidServiceAccountToken(reason)),
    }
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer(authorization: Option<&str>) -> Result<&str> {
    authorization
        .map(str::trim)
        .and_then(|value| {
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|token| !token.is_empty())
        .ok_or(Error::MissingToken)
}

fn validate_field(value: &str, what: &'static str) -> Result<()> {
    if value.is_empty() || value.contains([',', '"', '\n', '\r']) || value.trim() != value {
        Err(Error::InvalidEntry(match what {
            "the token" => "the token is empty or has a comma, quote, newline or outer space",
            "the user name" => {
                "the user name is empty or has a comma, quote, newline or outer space"
            }
            _ => "the uid is empty or has a comma, quote, newline or outer space",
        }))
    } else {
        Ok(())
    }
}

fn parse(path: &Path, text: &str) -> Result<Vec<Entry>> {
    let mut entries: Vec<Entry> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let malformed = |reason| Error::Malformed {
            path: path.to_path_buf(),
            line: index + 1,
            reason,
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.splitn(4, ',');
        let token = fields.next().unwrap_or_default().trim();
        let name = fields.next().map(str::trim).unwrap_or_default();
        let uid = fields.next().map(str::trim).unwrap_or_default();
        if token.is_empty() || name.is_empty() || uid.is_empty() {
            return Err(malformed("expected token,user,uid[,\"groups\"]"));
        }
        let groups = match fields.next().map(str::trim) {
            None | Some("") => Vec::new(),
            Some(quoted) => {
                let inner = match quoted.strip_prefix('"') {
                    Some(rest) => rest
                        .strip_suffix('"')
                        .ok_or_else(|| malformed("unterminated quoted group list"))?,
                    None if !quoted.contains(',') => quoted,
                    None => return Err(malformed("a group list with commas must be quoted")),
                };
                inner
                    .split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_string)
                    .collect()
            }
        };
        let digest = digest(token);
        if entries.iter().any(|e| e.digest == digest) {
            return Err(malformed("duplicate token"));
        }
        entries.push(Entry {
            token: token.to_string(),
            digest,
            user: User {
                name: name.to_string(),
                uid: uid.to_string(),
                groups,
                extra: BTreeMap::new(),
            },
        });
    }
    Ok(entries)
}

fn render(entries: &[Entry]) -> String {
    let mut text = String::from("# skiff bearer tokens: token,user,uid,\"groups\"\n");
    for e in entries {
        let _ = writeln!(
            text,
            "{},{},{},\"{}\"",
            e.token,
            e.user.name,
            e.user.uid,
            e.user.groups.join(",")
        );
    }
    text
}

/// The rejection of a request without a valid bearer token.
#[derive(Debug)]
pub struct Unauthorized {
    /// Why (missing or invalid token); not shown to the client.
    pub error: Error,
}

impl warp::reject::Reject for Unauthorized {}

impl Unauthorized {
    /// The 401 response: a `Status` with reason `Unauthorized`, as kube-apiserver sends.
    pub fn response(&self) -> warp::reply::Response {
        tracing::debug!(error = %self.error, "unauthorized");
        crate::routes::status_response(unauthorized_status(), StatusCode::UNAUTHORIZED)
    }
}

/// Turns an [`Unauthorized`] rejection into its 401 response and passes any other rejection on;
/// for `.recover(auth::recover)`.
pub async fn recover(rejection: warp::Rejection) -> Result<warp::reply::Response, warp::Rejection> {
    match rejection.find::<Unauthorized>() {
        Some(unauthorized) => Ok(unauthorized.response()),
        None => Err(rejection),
    }
}

/// The 401 body kube-apiserver sends: reason and message `Unauthorized`.
fn unauthorized_status() -> Vec<u8> {
    skiff_meta::status::ApiError::unauthorized("Unauthorized").to_body()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::testing::{TempDir, call, get, json};
    use std::os::unix::fs::PermissionsExt as _;
    use warp::Reply as _;

    fn open(dir: &TempDir) -> Authenticator {
        Authenticator::load_or_create(&dir.0.join("auth").join(TOKEN_FILE)).unwrap()
    }

    #[test]
    fn a_token_can_change_hands_and_the_file_says_so() {
        let dir = TempDir::new("auth-replace");
        let auth = open(&dir);
        let agent = User {
            name: "skiff:agent".into(),
            uid: "a".into(),
            groups: vec!["system:nodes".into()],
            ..User::default()
        };
        let token = auth.add_token(agent).unwrap();
        let bootstrap = User {
            name: "system:bootstrap:skiff".into(),
            uid: "b".into(),
            groups: vec!["system:bootstrappers".into()],
            ..User::default()
        };
        assert!(auth.replace_user("skiff:agent", bootstrap).unwrap());
        assert!(!auth.replace_user("skiff:agent", User::admin()).unwrap());
        let again = open(&dir);
        let user = again.lookup(&token).unwrap();
        assert_eq!(user.name, "system:bootstrap:skiff");
        assert!(user.in_group("system:bootstrappers") && !user.in_group("system:nodes"));
        assert_eq!(again.token_of("system:bootstrap:skiff"), Some(token));
    }

    #[test]
    fn first_start_creates_an_admin_token_and_reuses_it() {
        let dir = TempDir::new("auth");
        let auth = open(&dir);
        let token = auth.admin_token().unwrap();
        assert_eq!(token.len(), 64);
        let mode = std::fs::metadata(auth.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let reopened = open(&dir);
        assert_eq!(reopened.admin_token().unwrap(), token);
        let user = reopened
            .authenticate(Some(&format!("Bearer {token}")))
            .unwrap();
        assert_eq!(user.name, ADMIN_USER);
        assert!(user.in_group(MASTERS_GROUP));
        assert!(user.in_group(AUTHENTICATED_GROUP));
    }

    #[test]
    fn wrong_missing_and_non_bearer_tokens_fail() {
        let dir = TempDir::new("auth-bad");
        let auth = open(&dir);
        let token = auth.admin_token().unwrap();
        assert!(matches!(
            auth.authenticate(Some("Bearer nope")),
            Err(Error::InvalidToken)
        ));
        // A prefix of the real token is not the token.
        assert!(matches!(
            auth.authenticate(Some(&format!("Bearer {}", &token[..63]))),
            Err(Error::InvalidToken)
        ));
        assert!(matches!(auth.authenticate(None), Err(Error::MissingToken)));
        assert!(matches!(
            auth.authenticate(Some("Bearer ")),
            Err(Error::MissingToken)
        ));
        assert!(matches!(
            auth.authenticate(Some(&format!("Basic {token}"))),
            Err(Error::MissingToken)
        ));
        // The scheme is case-insensitive.
        assert!(auth.authenticate(Some(&format!("bearer {token}"))).is_ok());
    }

    #[test]
    fn added_tokens_persist_with_their_user() {
        let dir = TempDir::new("auth-add");
        let auth = open(&dir);
        let node = User {
            name: "system:node:n1".into(),
            uid: "node-n1".into(),
            groups: vec!["system:nodes".into(), "skiff:join".into()],
            ..Default::default()
        };
        let token = auth.add_token(node.clone()).unwrap();
        let reopened = open(&dir);
        let user = reopened
            .authenticate(Some(&format!("Bearer {token}")))
            .unwrap();
        assert_eq!(user.name, node.name);
        assert_eq!(user.uid, node.uid);
        assert!(user.in_group("system:nodes") && user.in_group("skiff:join"));
        assert!(!user.in_group(MASTERS_GROUP));
        // The admin token still works.
        let admin = reopened.admin_token().unwrap();
        assert_eq!(
            reopened
                .authenticate(Some(&format!("Bearer {admin}")))
                .unwrap()
                .name,
            ADMIN_USER
        );
    }

    #[test]
    fn bad_entries_are_refused() {
        let dir = TempDir::new("auth-entries");
        let auth = open(&dir);
        let admin = auth.admin_token().unwrap();
        assert!(matches!(
            auth.insert(admin, User::admin()),
            Err(Error::InvalidEntry(_))
        ));
        assert!(matches!(
            auth.insert("a,b".into(), User::admin()),
            Err(Error::InvalidEntry(_))
        ));
        let mut odd = User::admin();
        odd.groups.push("x\"y".into());
        assert!(matches!(
            auth.insert("fine".into(), odd),
            Err(Error::InvalidEntry(_))
        ));
        // Nothing of that reached the file.
        assert_eq!(open(&dir).entries.read().unwrap().len(), 1);
    }

    #[test]
    fn hand_written_token_files_parse() {
        let dir = TempDir::new("auth-parse");
        let path = dir.0.join(TOKEN_FILE);
        std::fs::write(
            &path,
            "# comment\n\nt1,alice,u1,\"g1, g2\"\nt2,bob,u2\nt3,carol,u3,solo\n",
        )
        .unwrap();
        let auth = Authenticator::load_or_create(&path).unwrap();
        let alice = auth.authenticate(Some("Bearer t1")).unwrap();
        assert_eq!(alice.groups, vec!["g1", "g2", AUTHENTICATED_GROUP]);
        let bob = auth.authenticate(Some("Bearer t2")).unwrap();
        assert_eq!(bob.groups, vec![AUTHENTICATED_GROUP]);
        let carol = auth.authenticate(Some("Bearer t3")).unwrap();
        assert_eq!(carol.groups, vec!["solo", AUTHENTICATED_GROUP]);
        // No admin token was invented for an existing file.
        assert!(auth.admin_token().is_none());

        for (bad, line) in [
            ("t1,alice\n", 1),
            ("# x\nt1,alice,u1,\"g1\n", 2),
            ("t1,a,u\nt1,b,u\n", 2),
            ("t1,a,u,g1,g2\n", 1),
        ] {
            std::fs::write(&path, bad).unwrap();
            match Authenticator::load_or_create(&path) {
                Err(Error::Malformed { line: l, .. }) => assert_eq!(l, line, "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn the_filter_yields_the_user_or_a_401_status() {
        let dir = TempDir::new("auth-filter");
        let auth = Arc::new(open(&dir));
        let token = auth.admin_token().unwrap();
        let route = auth
            .filter()
            .map(|user: User| user.name.into_response())
            .recover(recover)
            .unify();

        let ok = call(
            route.clone(),
            get("/x", &[("authorization", &format!("Bearer {token}"))]),
        )
        .await;
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.body().as_ref(), ADMIN_USER.as_bytes());

        for headers in [vec![], vec![("authorization", "Bearer wrong")]] {
            let denied = call(route.clone(), get("/x", &headers)).await;
            assert_eq!(denied.status(), 401);
            assert_eq!(
                denied.headers()["content-type"].to_str().unwrap(),
                "application/json"
            );
            let body = json(&denied);
            assert_eq!(body["kind"], "Status");
            assert_eq!(body["apiVersion"], "v1");
            assert_eq!(body["status"], "Failure");
            assert_eq!(body["reason"], "Unauthorized");
            assert_eq!(body["code"], 401);
        }
    }
}
