//! Who made a change: the user a request acts as, kept with the revision it writes as the
//! store's opaque tag ([`skiff_store::Txn::tag`]), so that history can say who made each change
//! with or without an audit log, on either store backend.
//!
//! The user is the one the request acts as (after impersonation: whose rights it used), with its
//! groups; when that user was impersonated, the authenticated user is kept too (`by`), as an audit
//! event's `impersonatedUser` and `user` would name them. A request's handler runs inside
//! [`scope`] (see `routes`), and every write the registry makes for it, admission's included,
//! reads the tag from there with [`current`]. Writes the server makes on its own (its background
//! loops) carry none, and show as the system's.
//!
//! Encoding, short because every write pays for it (a node's lease renewal is a few hundred
//! bytes): a format byte, then NUL-separated UTF-8 fields, the user, `by` (empty: none), then the
//! groups. NUL never occurs in a name a request can carry (header values and certificate
//! subjects that hold one are refused upstream, and one here would only be cut at the NUL).
//! At most [`MAX_TAG`] bytes: groups that do not fit are left out and the list ends with `…`.
//!
//! ```text
//!  0x01 | "alice" 00 "" 00 "devs" 00 "system:authenticated"
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::auth::User;

/// The format byte of [`Origin::encode`].
const FORMAT: u8 = 1;

/// The longest tag written, well under the store's own limit.
pub const MAX_TAG: usize = 512;

/// The group list's last entry when groups were left out to fit [`MAX_TAG`].
pub const MORE_GROUPS: &str = "…";

/// Who made a change, as history shows it (in JSON as an audit event's user:
/// `{"username": .., "groups": [..]}`, plus `impersonatedBy` when impersonated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The user the request acted as.
    #[serde(rename = "username")]
    pub user: String,
    /// That user's groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// The authenticated user, when it impersonated [`Origin::user`].
    #[serde(
        rename = "impersonatedBy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub by: Option<String>,
}

impl Origin {
    /// The origin of a request by `user`, impersonated by `by` when it was.
    pub fn of(user: &User, by: Option<&User>) -> Origin {
        Origin {
            user: user.name.clone(),
            groups: user.groups.clone(),
            by: by.map(|b| b.name.clone()),
        }
    }

    /// The tag for the store (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let field = |s: &str| s.split('\0').next().unwrap_or_default().to_string();
        let mut out = vec![FORMAT];
        let mut name = field(&self.user);
        truncate(&mut name, MAX_TAG / 2);
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        if let Some(by) = &self.by {
            let mut by = field(by);
            truncate(&mut by, MAX_TAG / 4);
            out.extend_from_slice(by.as_bytes());
        }
        for group in &self.groups {
            let group = field(group);
            // Room for this group and, should a later one not fit, the marker.
            if out.len() + 1 + group.len() + 1 + MORE_GROUPS.len() > MAX_TAG {
                out.push(0);
                out.extend_from_slice(MORE_GROUPS.as_bytes());
                break;
            }
            out.push(0);
            out.extend_from_slice(group.as_bytes());
        }
        out
    }

    /// Who made the revision tagged `tag`: `None` for no tag (the server's own write, or one
    /// from before origins were kept) or a tag this build cannot read.
    pub fn of_tag(tag: Option<&[u8]>) -> Option<Origin> {
        tag.and_then(Origin::decode)
    }

    /// The user as a table shows it: `alice`, or `alice (by system:admin)` when impersonated.
    pub fn display(&self) -> String {
        match &self.by {
            Some(by) => format!("{} (by {by})", self.user),
            None => self.user.clone(),
        }
    }

    /// Reads a tag [`Origin::encode`] wrote; `None` for anything else (a tag of a later format,
    /// or none at all).
    pub fn decode(tag: &[u8]) -> Option<Origin> {
        let (&format, rest) = tag.split_first()?;
        if format != FORMAT {
            return None;
        }
        let text = std::str::from_utf8(rest).ok()?;
        let mut fields = text.split('\0');
        let user = fields.next()?.to_string();
        let by = fields.next().filter(|b| !b.is_empty()).map(str::to_string);
        Some(Origin {
            user,
            groups: fields.map(str::to_string).collect(),
            by,
        })
    }
}

/// Cuts `s` to at most `max` bytes, on a character boundary.
fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

tokio::task_local! {
    /// The encoded origin of the request being served on this task.
    static TAG: Arc<[u8]>;
}

/// Runs `f` (a request's handling) with `origin` as the tag of every write it makes.
pub async fn scope<F: Future>(origin: &Origin, f: F) -> F::Output {
    TAG.scope(origin.encode().into(), f).await
}

/// The tag for a write made now: the origin of the request being served, or `None` outside one
/// (the server's own work).
pub fn current() -> Option<Vec<u8>> {
    TAG.try_with(|tag| tag.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(user: &str, groups: &[&str], by: Option<&str>) -> Origin {
        Origin {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            by: by.map(str::to_string),
        }
    }

    #[test]
    fn origins_round_trip_compactly() {
        for o in [
            origin("alice", &["devs", "system:authenticated"], None),
            origin("alice", &["devs"], Some("system:admin")),
            origin("system:anonymous", &[], None),
            origin("", &[""], None),
        ] {
            assert_eq!(Origin::decode(&o.encode()), Some(o));
        }
        let tag = origin("alice", &["devs"], None).encode();
        assert_eq!(tag, b"\x01alice\0\0devs");
        assert_eq!(Origin::decode(b""), None);
        assert_eq!(Origin::decode(b"\x02alice"), None, "a later format");
    }

    #[test]
    fn long_origins_are_capped_and_say_so() {
        let many: Vec<String> = (0..100).map(|i| format!("group-number-{i}")).collect();
        let long = Origin {
            user: "u".repeat(1000),
            groups: many.clone(),
            by: Some("b".repeat(1000)),
        };
        let tag = long.encode();
        assert!(tag.len() <= MAX_TAG, "{} bytes", tag.len());
        let back = Origin::decode(&tag).unwrap();
        assert_eq!(back.user.len(), MAX_TAG / 2);
        assert_eq!(back.groups.last().map(String::as_str), Some(MORE_GROUPS));
        assert_eq!(
            back.groups[..back.groups.len() - 1],
            many[..back.groups.len() - 1]
        );
        // A NUL cannot shift the fields.
        let nul = origin("a\0b", &["g\0h"], None);
        assert_eq!(
            Origin::decode(&nul.encode()),
            Some(origin("a", &["g"], None))
        );
    }

    #[tokio::test]
    async fn writes_in_a_scope_carry_its_origin_and_others_none() {
        assert_eq!(current(), None);
        let alice = origin("alice", &["devs"], None);
        let inner = scope(&alice, async { current() }).await;
        assert_eq!(inner.as_deref().and_then(Origin::decode), Some(alice));
        assert_eq!(current(), None);
    }
}
