//! The review kinds: `authorization.k8s.io/v1` SelfSubjectAccessReview, SelfSubjectRulesReview,
//! LocalSubjectAccessReview and SubjectAccessReview, and `authentication.k8s.io/v1`
//! SelfSubjectReview and TokenReview. Each is a question (`kubectl auth can-i`, `can-i --list`,
//! `auth whoami`, "whose token is this?"): only ever created, never stored; the API server's
//! authorizer (the authenticator, for TokenReview) writes the answer into `status` of the object
//! it returns.

use super::prelude::*;
use crate::kind::Source;

macro_rules! review {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $group:literal, $plural:literal, $singular:literal, $namespaced:literal) => {
        $(#[$doc])*
        pub struct $name;

        impl $name {
            /// Its names, scope and verbs.
            pub const INFO: ResourceInfo = ResourceInfo {
                group: $group,
                version: "v1",
                kind: stringify!($name),
                plural: $plural,
                singular: $singular,
                short_names: &[],
                namespaced: $namespaced,
                verbs: CREATE_ONLY,
                subresources: &[],
                categories: &[],
                selectable_fields: &[],
            };
        }

        impl Kind for $name {
            fn info(&self) -> &'static ResourceInfo {
                &Self::INFO
            }

            fn decode(&self, object: &Value) -> Result<Value, String> {
                roundtrip::<$ty>(object)
            }

            fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
                Some(schema_name::<$ty>(generator))
            }

            fn columns(&self) -> Vec<Column> {
                table::generic_columns()
            }

            fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
                Some(table::fallback_row(&self.columns(), object, now))
            }


            fn source(&self) -> Source {
                Source::Review
            }
        }
    };
}

review!(
    /// `kubectl auth can-i`: may I do this?
    SelfSubjectAccessReview,
    api::authorization::v1::SelfSubjectAccessReview,
    "authorization.k8s.io",
    "selfsubjectaccessreviews",
    "selfsubjectaccessreview",
    false
);
review!(
    /// `kubectl auth can-i --list`: what may I do in this namespace?
    SelfSubjectRulesReview,
    api::authorization::v1::SelfSubjectRulesReview,
    "authorization.k8s.io",
    "selfsubjectrulesreviews",
    "selfsubjectrulesreview",
    false
);
review!(
    /// May this user do this in this namespace? (Namespace admins ask it.)
    LocalSubjectAccessReview,
    api::authorization::v1::LocalSubjectAccessReview,
    "authorization.k8s.io",
    "localsubjectaccessreviews",
    "localsubjectaccessreview",
    true
);
review!(
    /// May this user do this? (Webhooks and proxies ask it for their callers.)
    SubjectAccessReview,
    api::authorization::v1::SubjectAccessReview,
    "authorization.k8s.io",
    "subjectaccessreviews",
    "subjectaccessreview",
    false
);
review!(
    /// `kubectl auth whoami`: who am I?
    SelfSubjectReview,
    api::authentication::v1::SelfSubjectReview,
    "authentication.k8s.io",
    "selfsubjectreviews",
    "selfsubjectreview",
    false
);
review!(
    /// Is this bearer token valid, and whose is it? (Webhooks, proxies and OIDC consumers ask it;
    /// `system:auth-delegator` may.)
    TokenReview,
    api::authentication::v1::TokenReview,
    "authentication.k8s.io",
    "tokenreviews",
    "tokenreview",
    false
);
