//! The API server's authorizer behind the `authorizer` variable of admission CEL
//! ([`skiff_kinds::custom::authorizer`]): a check an expression builds is decided by
//! [`Authorizer::authorize`] for the request's user, or for the service account
//! `authorizer.serviceAccount(ns, name)` names, as kube-apiserver's authorization library asks
//! its authorizer chain.

use std::collections::BTreeMap;
use std::sync::Arc;

use skiff_kinds::custom::authorizer::{Authorize, Check, Decision, RequestAuthorizer};

use super::{Authorizer, Request};
use crate::admission::Attributes;
use crate::auth::{AUTHENTICATED_GROUP, User};

/// The authorizer acting for one user.
pub struct ForUser {
    authorizer: Arc<Authorizer>,
    user: User,
}

impl ForUser {
    /// `authorizer` deciding for `user`.
    pub fn shared(authorizer: Arc<Authorizer>, user: User) -> Arc<dyn Authorize> {
        Arc::new(ForUser { authorizer, user })
    }
}

impl Authorize for ForUser {
    fn decide(&self, check: &Check) -> Decision {
        let request = match &check.path {
            Some(path) => Request::NonResource {
                verb: &check.verb,
                path,
            },
            None => Request::Resource {
                verb: &check.verb,
                group: &check.group,
                resource: &check.resource,
                subresource: &check.subresource,
                namespace: &check.namespace,
                name: &check.name,
            },
        };
        let decision = self.authorizer.authorize(&self.user, &request);
        let allowed = decision.allowed();
        let (super::Decision::Allow(reason) | super::Decision::Deny(reason)) = decision;
        Decision {
            allowed,
            reason,
            error: None,
        }
    }

    fn for_service_account(&self, namespace: &str, name: &str) -> Arc<dyn Authorize> {
        ForUser::shared(self.authorizer.clone(), service_account(namespace, name))
    }
}

/// The user a service account's token authenticates as.
fn service_account(namespace: &str, name: &str) -> User {
    User {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            AUTHENTICATED_GROUP.into(),
        ],
        extra: BTreeMap::new(),
    }
}

/// The `authorizer` of admission request `a`: `authorizer` deciding for its user, and its own
/// resource attributes.
pub fn for_request(authorizer: &Arc<Authorizer>, a: &Attributes<'_>) -> RequestAuthorizer {
    RequestAuthorizer {
        authorize: ForUser::shared(authorizer.clone(), a.user.clone()),
        request: request_check(a),
    }
}

/// `authorizer.requestResource`: the request's own resource attributes.
fn request_check(a: &Attributes<'_>) -> Check {
    Check {
        verb: String::new(),
        group: a.info.group.to_string(),
        resource: a.info.plural.to_string(),
        subresource: a.subresource.unwrap_or_default().to_string(),
        namespace: a.namespace.unwrap_or_default().to_string(),
        name: a.name.to_string(),
        path: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::authz::rbac::Kind;

    #[test]
    fn checks_are_decided_by_rbac_for_the_user_or_the_service_account() {
        let authorizer = Arc::new(Authorizer::default());
        authorizer.change(|policy| {
            policy.apply(
                Kind::ClusterRole,
                "",
                "scaler",
                Some(&json!({"metadata": {"name": "scaler"}, "rules": [
                    {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["update"]},
                    {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]})),
            );
            policy.apply(
                Kind::ClusterRoleBinding,
                "",
                "scalers",
                Some(&json!({"metadata": {"name": "scalers"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "scaler"},
                    "subjects": [{"kind": "ServiceAccount", "namespace": "ops", "name": "bot"}]})),
            );
        });
        let alice = User {
            name: "alice".into(),
            uid: String::new(),
            groups: vec![AUTHENTICATED_GROUP.into()],
            extra: BTreeMap::new(),
        };
        let as_alice = ForUser::shared(authorizer.clone(), alice);
        let scale = Check {
            verb: "update".into(),
            group: "apps".into(),
            resource: "deployments".into(),
            subresource: "scale".into(),
            namespace: "web".into(),
            name: "front".into(),
            path: None,
        };
        assert!(!as_alice.decide(&scale).allowed);
        let as_bot = as_alice.for_service_account("ops", "bot");
        let decided = as_bot.decide(&scale);
        assert!(decided.allowed, "{decided:?}");
        assert!(decided.reason.contains("scaler"), "{}", decided.reason);
        let healthz = Check {
            verb: "get".into(),
            path: Some("/healthz".into()),
            ..Check::default()
        };
        assert!(as_bot.decide(&healthz).allowed);
        assert!(
            !as_bot
                .decide(&Check {
                    verb: "post".into(),
                    ..healthz
                })
                .allowed
        );
        // A service account of another namespace is someone else.
        assert!(
            !as_alice
                .for_service_account("dev", "bot")
                .decide(&scale)
                .allowed
        );
    }
}
