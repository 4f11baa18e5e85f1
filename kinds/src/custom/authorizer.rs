//! The `authorizer` variable of admission CEL (ValidatingAdmissionPolicy expressions and webhook
//! `matchConditions`): Kubernetes' authorization library, which asks the API server's authorizer
//! whether the request's user (or a service account) may do something else.
//!
//! ```text
//! authorizer.group('apps').resource('deployments').namespace('ns').name('x').check('update').allowed()
//! authorizer.requestResource.subresource('scale').check('update').reason()
//! authorizer.path('/healthz').check('get').allowed()
//! authorizer.serviceAccount('ns', 'sa').group('').resource('pods').check('list').errored()
//! ```
//!
//! The types keep Kubernetes' names (`kubernetes.authorization.Authorizer`, `PathCheck`,
//! `GroupCheck`, `ResourceCheck`, `Decision`); each step returns a new value, so a check can be
//! built in parts and reused. The decision itself is made by an [`Authorize`] the API server
//! supplies; this module knows nothing of RBAC. `authorizer.requestResource` is a
//! `ResourceCheck` already set to the request's group, resource, subresource, namespace and name,
//! bound by [`RequestAuthorizer::bind`].

use std::fmt;
use std::sync::Arc;

use cel::common::functions::Function;
use cel::common::types::{STRING_TYPE, Type};
use cel::common::value::{CowVal, Val};
use cel::objects::Opaque;
use cel::{Env, ExecutionError, Value};

/// What a check asks: the attributes of an authorization request, as kube-apiserver's
/// authorizers take them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Check {
    /// The verb asked about (`get`, `create`, ...; for a path, the HTTP verb in lower case).
    pub verb: String,
    /// The API group (`""` for core).
    pub group: String,
    /// The resource's plural.
    pub resource: String,
    /// The subresource, or empty.
    pub subresource: String,
    /// The namespace, or empty.
    pub namespace: String,
    /// The object's name, or empty.
    pub name: String,
    /// For a check of a path that is no resource: the path.
    pub path: Option<String>,
}

/// What the authorizer answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// Why, in the authorizer's words.
    pub reason: String,
    /// When the authorizer could not decide: why.
    pub error: Option<String>,
}

/// The API server's authorizer, acting for one user.
pub trait Authorize: Send + Sync {
    /// Decides `check` for this authorizer's user.
    fn decide(&self, check: &Check) -> Decision;

    /// The same authorizer acting for the service account `namespace/name` instead.
    fn for_service_account(&self, namespace: &str, name: &str) -> Arc<dyn Authorize>;
}

const AUTHORIZER: &str = "kubernetes.authorization.Authorizer";
const PATH_CHECK: &str = "kubernetes.authorization.PathCheck";
const GROUP_CHECK: &str = "kubernetes.authorization.GroupCheck";
const RESOURCE_CHECK: &str = "kubernetes.authorization.ResourceCheck";
const DECISION: &str = "kubernetes.authorization.Decision";

/// The variable name a ResourceCheck of the request itself is bound under.
const REQUEST_RESOURCE: &str = "authorizer.requestResource";

/// One value of the library: an authorizer with the check built so far.
#[derive(Clone)]
struct Step {
    authorize: Arc<dyn Authorize>,
    kind: &'static str,
    check: Check,
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(self.kind)
            .field("check", &self.check)
            .finish()
    }
}

impl PartialEq for Step {
    fn eq(&self, other: &Step) -> bool {
        Arc::ptr_eq(&self.authorize, &other.authorize)
            && self.kind == other.kind
            && self.check == other.check
    }
}

impl Eq for Step {}

impl Opaque for Step {
    fn runtime_type_name(&self) -> &str {
        self.kind
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Decided(Decision);

impl Opaque for Decided {
    fn runtime_type_name(&self) -> &str {
        DECISION
    }
}

/// The `authorizer` of one request: the API server's authorizer acting for the request's user,
/// and the request's own attributes (`authorizer.requestResource`).
#[derive(Clone)]
pub struct RequestAuthorizer {
    /// Decides for the request's user.
    pub authorize: Arc<dyn Authorize>,
    /// The request's group, resource, subresource, namespace and name.
    pub request: Check,
}

impl fmt::Debug for RequestAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestAuthorizer")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

impl RequestAuthorizer {
    /// Binds `authorizer` and `authorizer.requestResource` into `scope`.
    pub fn bind(&self, scope: &mut super::cel::Scope) {
        let authorizer = Step {
            authorize: self.authorize.clone(),
            kind: AUTHORIZER,
            check: Check::default(),
        };
        let request_resource = Step {
            kind: RESOURCE_CHECK,
            check: self.request.clone(),
            ..authorizer.clone()
        };
        scope.bind("authorizer", Value::Opaque(Arc::new(authorizer)));
        scope.bind(REQUEST_RESOURCE, Value::Opaque(Arc::new(request_resource)));
    }
}

/// Declares the library's functions in `env`.
pub fn declare(env: &mut Env) -> Result<(), cel::DeclarationError> {
    // (name, receiver type, string arguments, function)
    let methods: [(&str, &'static str, usize, Function); 13] = [
        ("group", AUTHORIZER, 1, group),
        ("path", AUTHORIZER, 1, path),
        ("serviceAccount", AUTHORIZER, 2, service_account),
        ("resource", GROUP_CHECK, 1, resource),
        ("subresource", RESOURCE_CHECK, 1, subresource),
        ("namespace", RESOURCE_CHECK, 1, namespace),
        ("name", RESOURCE_CHECK, 1, name),
        ("check", RESOURCE_CHECK, 1, check),
        ("check", PATH_CHECK, 1, check),
        ("allowed", DECISION, 0, allowed),
        ("reason", DECISION, 0, reason),
        ("errored", DECISION, 0, errored),
        ("error", DECISION, 0, error),
    ];
    for (method, receiver, strings, f) in methods {
        let id = format!("{receiver}.{method}");
        let receiver = Type::new_opaque_type(receiver);
        let arguments = (0..strings).map(|_| STRING_TYPE).collect();
        env.add_member_overload(method, &id, receiver, arguments, f)?;
    }
    for name in [
        AUTHORIZER,
        PATH_CHECK,
        GROUP_CHECK,
        RESOURCE_CHECK,
        DECISION,
    ] {
        env.add_type(Type::new_opaque_type(name))?;
    }
    Ok(())
}

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Returned<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

/// The receiver (a step of the library) and the `N` string arguments of a call.
fn step_and_strings<const N: usize>(
    function: &str,
    args: &[CowVal<'_, '_>],
) -> Result<(Step, [String; N]), ExecutionError> {
    let mut values = args.iter().map(|a| Value::try_from(a.as_ref()));
    let receiver = match values.next() {
        Some(Ok(Value::Opaque(o))) => o.downcast_ref::<Step>().cloned(),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::function_error(function, "not called on an authorizer"))?;
    let strings: Vec<String> = values
        .map(|v| match v {
            Ok(Value::String(s)) => Ok(s.to_string()),
            _ => Err(ExecutionError::function_error(function, "takes strings")),
        })
        .collect::<Result<_, _>>()?;
    let count = strings.len();
    let strings = strings
        .try_into()
        .map_err(|_| ExecutionError::invalid_argument_count(N, count))?;
    Ok((receiver, strings))
}

fn returning<'b, 'v>(value: Value) -> Returned<'b, 'v> {
    let boxed: Box<dyn Val> = value.try_into()?;
    Ok(CowVal::from(boxed))
}

fn step<'b, 'v>(step: Step) -> Returned<'b, 'v> {
    returning(Value::Opaque(Arc::new(step)))
}

/// A step that sets one attribute from the call's one string argument.
fn setting<'b, 'v>(
    function: &str,
    args: Args<'b, 'v>,
    kind: &'static str,
    set: impl FnOnce(&mut Check, String),
) -> Returned<'b, 'v> {
    let (mut s, [value]) = step_and_strings(function, &args)?;
    set(&mut s.check, value);
    s.kind = kind;
    step(s)
}

fn group<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    setting("group", args, GROUP_CHECK, |c, v| c.group = v)
}

fn path<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    setting("path", args, PATH_CHECK, |c, v| c.path = Some(v))
}

fn resource<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    setting("resource", args, RESOURCE_CHECK, |c, v| c.resource = v)
}

fn subresource<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    setting("subresource", args, RESOURCE_CHECK, |c, v| {
        c.subresource = v
    })
}

fn namespace<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    setting("namespace", args, RESOURCE_CHECK, |c, v| c.namespace = v)
}

fn name<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    setting("name", args, RESOURCE_CHECK, |c, v| c.name = v)
}

fn service_account<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let (s, [namespace, name]) = step_and_strings("serviceAccount", &args)?;
    step(Step {
        authorize: s.authorize.for_service_account(&namespace, &name),
        kind: AUTHORIZER,
        check: Check::default(),
    })
}

/// `check(verb)` of a resource or a path: asks the authorizer.
fn check<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let (s, [verb]) = step_and_strings("check", &args)?;
    let check = Check { verb, ..s.check };
    returning(Value::Opaque(Arc::new(Decided(s.authorize.decide(&check)))))
}

fn decision(function: &str, args: &[CowVal<'_, '_>]) -> Result<Decision, ExecutionError> {
    match args.first().map(|a| Value::try_from(a.as_ref())) {
        Some(Ok(Value::Opaque(o))) => o.downcast_ref::<Decided>().map(|d| d.0.clone()),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::function_error(function, "not called on a decision"))
}

fn allowed<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    returning(Value::Bool(decision("allowed", &args)?.allowed))
}

fn reason<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    returning(Value::String(Arc::new(decision("reason", &args)?.reason)))
}

fn errored<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    returning(Value::Bool(decision("errored", &args)?.error.is_some()))
}

fn error<'b, 'v>(args: Args<'b, 'v>) -> Returned<'b, 'v> {
    let message = decision("error", &args)?.error.unwrap_or_default();
    returning(Value::String(Arc::new(message)))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::custom::cel::{Expression, Scope, to_cel};

    /// Every check asked, with the user it was asked for.
    type Asked = Arc<Mutex<Vec<(String, Check)>>>;

    /// Allows what its user's list names (`verb group/resource/subresource ns/name` or
    /// `verb path`), and records every check.
    struct Listed {
        user: String,
        allowed: Vec<String>,
        asked: Asked,
    }

    fn line(check: &Check) -> String {
        match &check.path {
            Some(path) => format!("{} {path}", check.verb),
            None => format!(
                "{} {}/{}/{} {}/{}",
                check.verb,
                check.group,
                check.resource,
                check.subresource,
                check.namespace,
                check.name
            ),
        }
    }

    impl Authorize for Listed {
        fn decide(&self, check: &Check) -> Decision {
            self.asked
                .lock()
                .unwrap()
                .push((self.user.clone(), check.clone()));
            let allowed = self
                .allowed
                .contains(&format!("{} {}", self.user, line(check)));
            Decision {
                allowed,
                reason: if allowed {
                    "listed".into()
                } else {
                    String::new()
                },
                error: (check.verb == "explode").then(|| "the authorizer failed".into()),
            }
        }

        fn for_service_account(&self, namespace: &str, name: &str) -> Arc<dyn Authorize> {
            Arc::new(Listed {
                user: format!("system:serviceaccount:{namespace}:{name}"),
                allowed: self.allowed.clone(),
                asked: self.asked.clone(),
            })
        }
    }

    fn scope(allowed: &[&str]) -> (Scope, Asked) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let authorize = Arc::new(Listed {
            user: "alice".into(),
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            asked: asked.clone(),
        });
        let mut scope = Scope::new();
        RequestAuthorizer {
            authorize,
            request: Check {
                group: "apps".into(),
                resource: "deployments".into(),
                namespace: "ns".into(),
                name: "web".into(),
                ..Check::default()
            },
        }
        .bind(&mut scope);
        scope.bind("object", to_cel(&json!({"spec": {"replicas": 3}})).unwrap());
        (scope, asked)
    }

    fn run(scope: &Scope, source: &str) -> Result<cel::Value, String> {
        Expression::compile(source)?.evaluate_in(scope)
    }

    #[test]
    fn a_resource_check_asks_the_authorizer_for_the_requests_user() {
        let (scope, asked) = scope(&["alice update apps/deployments/scale ns/web"]);
        assert_eq!(
            run(
                &scope,
                "authorizer.group('apps').resource('deployments').subresource('scale')\
                 .namespace('ns').name('web').check('update').allowed()"
            ),
            Ok(cel::Value::Bool(true))
        );
        assert_eq!(
            run(
                &scope,
                "authorizer.group('apps').resource('deployments').check('delete').allowed()"
            ),
            Ok(cel::Value::Bool(false))
        );
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[1].0, "alice");
        assert_eq!(line(&asked[1].1), "delete apps/deployments/ /");
    }

    #[test]
    fn request_resource_is_the_request_itself() {
        let (scope, asked) = scope(&["alice update apps/deployments/scale ns/web"]);
        assert_eq!(
            run(
                &scope,
                "authorizer.requestResource.subresource('scale').check('update').allowed() \
                 && object.spec.replicas == 3"
            ),
            Ok(cel::Value::Bool(true))
        );
        assert_eq!(
            run(&scope, "authorizer.requestResource.check('get').reason()"),
            Ok(cel::Value::String(Arc::new(String::new())))
        );
        assert_eq!(
            line(&asked.lock().unwrap()[1].1),
            "get apps/deployments/ ns/web"
        );
        // The expression reads `authorizer`, so a caller knows to bind it.
        assert!(
            Expression::compile("authorizer.requestResource.check('get').allowed()")
                .unwrap()
                .reads("authorizer")
        );
    }

    #[test]
    fn paths_service_accounts_and_errors() {
        let (scope, asked) = scope(&[
            "alice get /healthz",
            "system:serviceaccount:kube-system:ctl list /pods/ /",
        ]);
        assert_eq!(
            run(&scope, "authorizer.path('/healthz').check('get').allowed()"),
            Ok(cel::Value::Bool(true))
        );
        assert_eq!(
            run(
                &scope,
                "authorizer.serviceAccount('kube-system', 'ctl').group('').resource('pods')\
                 .check('list').reason()"
            ),
            Ok(cel::Value::String(Arc::new("listed".into())))
        );
        assert_eq!(
            asked.lock().unwrap().last().unwrap().0,
            "system:serviceaccount:kube-system:ctl"
        );
        assert_eq!(
            run(
                &scope,
                "[authorizer.path('/x').check('explode')].map(d, [d.errored(), d.error()])"
            ),
            Ok(cel::to_value(json!([[true, "the authorizer failed"]])).unwrap())
        );
        // A step out of order does not exist, and other values have none of the methods.
        assert!(run(&scope, "authorizer.resource('pods')").is_err());
        assert!(run(&scope, "object.group('apps')").is_err());
        assert!(
            Expression::compile("authorizer.group('apps').frobnicate()").is_err()
                || run(&scope, "authorizer.group('apps').frobnicate()").is_err()
        );
    }
}
