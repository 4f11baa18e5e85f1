//! The history reads over a real log in a temporary data dir.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skiff_store::{Config, KeyRange, Revision, SledStore, Store};

use super::*;

/// A data dir removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!("skiff-replay-{}", uuid::Uuid::new_v4()));
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(dir: &TempDir) -> Arc<dyn Store> {
    let mut config = Config::new(dir.0.join("db"));
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.fsync = false;
    Arc::new(SledStore::open(config).unwrap())
}

fn cm(name: &str, data: &str, manager: &str, time: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default",
            "managedFields": [{"manager": manager, "operation": "Update", "time": time}]},
        "data": {"k": data},
    })
}

async fn put(store: &dyn Store, key: &str, object: &Value) -> Revision {
    store
        .put(key.into(), serde_json::to_vec(object).unwrap(), None)
        .await
        .unwrap()
        .0
}

const A: &str = "/registry/core/configmaps/default/a";
const B: &str = "/registry/core/configmaps/default/b";
const D: &str = "/registry/apps/deployments/default/web";

fn configmaps() -> &'static skiff_meta::ResourceInfo {
    objects::resolve_kind(&skiff_kinds::Kinds::builtin().snapshot(), "cm").unwrap()
}

/// A small history: a created (r1), b created (r2), a updated by "editor" (r3), web created (r4),
/// web's status updated (r5), b deleted (r6).
async fn scenario(store: &dyn Store) {
    put(
        store,
        A,
        &cm("a", "1", "kubectl-create", "2026-01-01T00:00:00Z"),
    )
    .await;
    put(
        store,
        B,
        &cm("b", "1", "kubectl-create", "2026-01-01T00:00:00Z"),
    )
    .await;
    let mut a = cm("a", "2", "kubectl-create", "2026-01-01T00:00:00Z");
    a["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .push(json!({"manager": "editor", "operation": "Update", "time": "2026-01-01T00:05:00Z"}));
    put(store, A, &a).await;
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 1}});
    put(store, D, &web).await;
    let mut web2 = web.clone();
    web2["status"] = json!({"replicas": 1});
    put(store, D, &web2).await;
    store.delete(KeyRange::key(B)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_read_as_they_were_at_each_revision() {
    let dir = TempDir::new();
    let store = open(&dir);
    scenario(store.as_ref()).await;
    let replay = Replay::new(store.clone());
    let names = |items: Vec<Value>| -> Vec<(String, String)> {
        items
            .iter()
            .map(|o| {
                (
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect()
    };
    let at = |r| replay.list(configmaps(), Some("default"), Revision(r));
    assert_eq!(names(at(0).await.unwrap()), vec![]);
    assert_eq!(
        names(at(2).await.unwrap()),
        vec![("a".into(), "1".into()), ("b".into(), "2".into())]
    );
    assert_eq!(
        names(at(5).await.unwrap()),
        vec![("a".into(), "3".into()), ("b".into(), "2".into())]
    );
    assert_eq!(names(at(6).await.unwrap()), vec![("a".into(), "3".into())]);
    let a2 = replay
        .get(configmaps(), Some("default"), "a", Revision(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a2["data"]["k"], "1");
    assert!(
        replay
            .get(configmaps(), Some("default"), "b", Revision(6))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_lists_every_version_with_operation_and_manager() {
    let dir = TempDir::new();
    let store = open(&dir);
    scenario(store.as_ref()).await;
    let replay = Replay::new(store);
    let summary = |versions: Vec<Version>| -> Vec<(u64, Operation, Option<String>)> {
        versions
            .into_iter()
            .map(|v| (v.revision, v.operation, v.manager))
            .collect()
    };
    assert_eq!(
        summary(
            replay
                .history(configmaps(), Some("default"), "a")
                .await
                .unwrap()
        ),
        vec![
            (1, Operation::Created, Some("kubectl-create".into())),
            (3, Operation::Updated, Some("editor".into())),
        ]
    );
    assert_eq!(
        summary(
            replay
                .history(configmaps(), Some("default"), "b")
                .await
                .unwrap()
        ),
        vec![
            (2, Operation::Created, Some("kubectl-create".into())),
            (6, Operation::Deleted, None)
        ]
    );
    let deploys =
        objects::resolve_kind(&skiff_kinds::Kinds::builtin().snapshot(), "deploy").unwrap();
    let web = replay
        .history(deploys, Some("default"), "web")
        .await
        .unwrap();
    assert_eq!(
        summary(web),
        vec![
            (4, Operation::Created, None),
            (5, Operation::StatusUpdated, None)
        ]
    );
}

/// Each change names the user whose request made it: writes through the registry inside a
/// request's origin scope carry it, impersonation keeps the authenticated user too, and the
/// server's own writes (outside any request) carry none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_the_log_name_who_made_each_change() {
    use crate::origin::{self, Origin};
    let dir = TempDir::new();
    let store = open(&dir);
    let registry = crate::registry::Registry::new(store.clone());
    let info = configmaps();
    let alice = Origin {
        user: "alice".into(),
        groups: vec!["devs".into(), "system:authenticated".into()],
        by: None,
    };
    let bob = Origin {
        user: "bob".into(),
        groups: vec!["ops".into()],
        by: Some("system:admin".into()),
    };
    let object = cm("a", "1", "kubectl-create", "2024-01-01T00:00:00Z");
    origin::scope(&alice, registry.create(info, object, None))
        .await
        .unwrap();
    let change = registry.update(
        info,
        Some("default"),
        "a",
        None,
        false,
        |mut o| async move {
            o["data"]["k"] = json!("2");
            Ok(crate::registry::Update::Write(o))
        },
    );
    origin::scope(&bob, change).await.unwrap();
    registry
        .delete(info, Some("default"), "a", None)
        .await
        .unwrap();
    let replay = Replay::new(store);
    let versions = replay.history(info, Some("default"), "a").await.unwrap();
    let users: Vec<_> = versions.iter().map(|v| v.user.clone()).collect();
    assert_eq!(users, vec![Some(alice.clone()), Some(bob.clone()), None]);
    let page = replay
        .log(Revision(1), None, &Filter::default(), usize::MAX)
        .await
        .unwrap();
    let users: Vec<_> = page.changes.iter().map(|c| c.user.clone()).collect();
    assert_eq!(users, vec![Some(alice), Some(bob.clone()), None]);
    // In JSON as an audit event names its user.
    let json = serde_json::to_value(&versions[1]).unwrap();
    assert_eq!(
        json["user"],
        json!({"username": "bob", "groups": ["ops"], "impersonatedBy": "system:admin"})
    );
    assert!(
        serde_json::to_value(&versions[2])
            .unwrap()
            .get("user")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_and_diffs_name_exactly_what_changed() {
    let dir = TempDir::new();
    let store = open(&dir);
    scenario(store.as_ref()).await;
    let replay = Replay::new(store);
    let page = replay
        .log(Revision(2), None, &Filter::default(), usize::MAX)
        .await
        .unwrap();
    assert_eq!((page.last, page.more), (Revision(6), false));
    let changes = page.changes;
    let lines: Vec<(u64, Operation, &str, &str, Vec<String>)> = changes
        .iter()
        .map(|c| {
            (
                c.revision,
                c.operation,
                c.kind.as_str(),
                c.name.as_str(),
                c.fields.clone(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            (
                2,
                Operation::Created,
                "ConfigMap",
                "b",
                vec![
                    "data".into(),
                    "metadata.name".into(),
                    "metadata.namespace".into()
                ]
            ),
            (3, Operation::Updated, "ConfigMap", "a", vec!["data".into()]),
            (
                4,
                Operation::Created,
                "Deployment",
                "web",
                vec![
                    "metadata.name".into(),
                    "metadata.namespace".into(),
                    "spec".into()
                ]
            ),
            (
                5,
                Operation::StatusUpdated,
                "Deployment",
                "web",
                vec!["status".into()]
            ),
            (
                6,
                Operation::Deleted,
                "ConfigMap",
                "b",
                vec![
                    "data".into(),
                    "metadata.name".into(),
                    "metadata.namespace".into()
                ]
            ),
        ]
    );
    let only_cms = Filter {
        resource: Some(configmaps()),
        namespace: Some("default"),
        name: None,
    };
    let page = replay
        .log(Revision(1), Some(Revision(4)), &only_cms, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        page.changes.iter().map(|c| c.revision).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    // A name narrows the log to that object's changes.
    let only_a = Filter {
        name: Some("a"),
        ..only_cms
    };
    let page = replay
        .log(Revision(1), None, &only_a, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        page.changes
            .iter()
            .map(|c| (c.revision, c.name.as_str()))
            .collect::<Vec<_>>(),
        vec![(1, "a"), (3, "a")]
    );
    let page = replay
        .log(Revision(1), None, &Filter::default(), 2)
        .await
        .unwrap();
    assert_eq!(
        (page.changes.len(), page.last, page.more),
        (2, Revision(2), true)
    );
    let page = replay
        .log(Revision(7), None, &Filter::default(), 2)
        .await
        .unwrap();
    assert_eq!(
        (page.changes.len(), page.last, page.more),
        (0, Revision(6), false)
    );

    let diff = replay
        .diff(Revision(2), Revision(6), &Filter::default())
        .await
        .unwrap()
        .objects;
    let named: Vec<(DiffKind, &str)> = diff.iter().map(|d| (d.diff, d.name.as_str())).collect();
    assert_eq!(
        named,
        vec![
            (DiffKind::Created, "web"),
            (DiffKind::Changed, "a"),
            (DiffKind::Deleted, "b")
        ]
    );
    assert!(
        replay
            .diff(Revision(3), Revision(3), &Filter::default())
            .await
            .unwrap()
            .objects
            .is_empty()
    );
    assert!(matches!(
        replay
            .diff(Revision(4), Revision(3), &Filter::default())
            .await,
        Err(Error::EmptyWindow { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_resolve_and_compacted_points_say_so() {
    let dir = TempDir::new();
    let store = open(&dir);
    put(store.as_ref(), A, &cm("a", "1", "m", "t")).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let middle = std::time::SystemTime::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    put(store.as_ref(), A, &cm("a", "2", "m", "t")).await;
    put(store.as_ref(), A, &cm("a", "3", "m", "t")).await;
    let replay = Replay::new(store.clone());
    assert_eq!(replay.resolve(&Point::Now).await.unwrap(), Revision(3));
    assert_eq!(
        replay.resolve(&Point::Revision(Revision(2))).await.unwrap(),
        Revision(2)
    );
    let t = Point::Time(jiff::Timestamp::try_from(middle).unwrap());
    assert_eq!(replay.resolve(&t).await.unwrap(), Revision(1));
    assert_eq!(
        replay.resolve(&"-1h".parse().unwrap()).await.unwrap(),
        Revision(0)
    );
    assert!(matches!(
        replay.resolve(&Point::Revision(Revision(9))).await,
        Err(Error::Future {
            requested: Revision(9),
            current: Revision(3)
        })
    ));

    store.compact(Revision(3)).await.unwrap();
    for point in [Point::Revision(Revision(2)), t, "-1h".parse().unwrap()] {
        let e = replay.resolve(&point).await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Compacted {
                    compacted: Revision(3),
                    oldest_time: Some(_),
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("compacted at revision 3") && text.contains("oldest time 20"),
            "{text}"
        );
    }
    let e = replay
        .list(configmaps(), None, Revision(1))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("compacted at revision 3"), "{e}");
    let e = replay
        .log(Revision(1), None, &Filter::default(), 10)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Compacted { .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_long_poll_waits_for_the_next_change_in_scope() {
    let dir = TempDir::new();
    let store = open(&dir);
    scenario(store.as_ref()).await;
    let replay = Replay::new(store.clone());
    let ask = |since: &str, wait: &str| {
        let params: http::Params = [("resource", "configmaps"), ("since", since), ("wait", wait)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let replay = replay.clone();
        async move { http::answer(&replay, "log", &params).await }
    };

    // History in scope answers at once, without waiting.
    let now: http::Log = serde_json::from_value(ask("3", "30").await.unwrap()).unwrap();
    assert_eq!(now.changes.len(), 2, "a updated (r3) and b deleted (r6)");

    // Nothing after r6: the request is held until a change in scope commits. A Deployment
    // written meanwhile is out of scope and does not end the wait; the ConfigMap after it does.
    let waiting = tokio::spawn(ask("7", "30"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "answered before anything was committed"
    );
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 2}});
    put(store.as_ref(), D, &web).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "a change out of scope ended the wait"
    );
    let c = put(
        store.as_ref(),
        "/registry/core/configmaps/default/c",
        &cm("c", "1", "kubectl-create", "2026-01-01T00:10:00Z"),
    )
    .await;
    let live: http::Log = serde_json::from_value(waiting.await.unwrap().unwrap()).unwrap();
    let names: Vec<_> = live
        .changes
        .iter()
        .map(|c| (c.revision, c.name.as_str()))
        .collect();
    assert_eq!(names, vec![(c.0, "c")]);
    assert_eq!(live.revision, c.0);

    // A wait that ends with nothing in scope answers empty, from where the caller continues.
    let quiet: http::Log =
        serde_json::from_value(ask(&(c.0 + 1).to_string(), "0.1").await.unwrap()).unwrap();
    assert!(quiet.changes.is_empty());
    assert_eq!(quiet.revision, c.0);

    let bad = ask("1", "soon").await.unwrap_err();
    assert!(bad.to_string().contains("wait=soon"), "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_of_the_definitions_in_the_log_are_read_too() {
    let dir = TempDir::new();
    let store = open(&dir);
    let definition = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    put(
        store.as_ref(),
        "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com",
        &definition,
    )
    .await;
    let widget = |size: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w1", "namespace": "default"}, "spec": {"size": size}})
    };
    let key = "/registry/example.com/widgets/default/w1";
    let small = put(store.as_ref(), key, &widget("small")).await;
    put(store.as_ref(), key, &widget("large")).await;

    // Built-in reads know nothing of widgets; reads that loaded the definitions do.
    assert!(Replay::new(store.clone()).resolve_kind("widgets").is_none());
    let replay = Replay::load(store.clone()).await.unwrap();
    let widgets = replay.resolve_kind("wd").unwrap();
    assert_eq!((widgets.group, widgets.kind), ("example.com", "Widget"));
    let then = replay
        .get(widgets, Some("default"), "w1", small)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(then["spec"]["size"], "small");
    let history = replay
        .history(widgets, Some("default"), "w1")
        .await
        .unwrap();
    assert_eq!(history.len(), 2);
    let log = replay
        .log(
            Revision(1),
            None,
            &Filter {
                resource: Some(widgets),
                namespace: None,
                name: None,
            },
            10,
        )
        .await
        .unwrap();
    assert_eq!(log.changes.len(), 2, "{:?}", log.changes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diff_of_every_kind_leaves_out_kinds_whose_history_is_pruned() {
    const EVENT: &str = "/registry/core/events/default/e";
    let dir = TempDir::new();
    let mut config = Config::new(dir.0.join("db"));
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.fsync = false;
    config.prefix_retention = vec![skiff_store::PrefixRetention {
        prefix: b"/registry/core/events/".to_vec(),
        max_versions: 1,
    }];
    let store: Arc<dyn Store> = Arc::new(SledStore::open(config).unwrap());
    let event = |count: u64| {
        json!({"apiVersion": "v1", "kind": "Event", "count": count,
            "metadata": {"name": "e", "namespace": "default"}})
    };
    let first = put(store.as_ref(), EVENT, &event(1)).await;
    for count in 2..=4 {
        put(store.as_ref(), EVENT, &event(count)).await;
    }
    let created = put(
        store.as_ref(),
        A,
        &cm("a", "1", "kubectl-create", "2026-01-01T00:00:00Z"),
    )
    .await;
    let replay = Replay::new(store.clone());

    let page = replay
        .diff(first, created, &Filter::default())
        .await
        .unwrap();
    let named: Vec<(DiffKind, &str, &str)> = page
        .objects
        .iter()
        .map(|d| (d.diff, d.kind.as_str(), d.name.as_str()))
        .collect();
    assert_eq!(named, vec![(DiffKind::Created, "ConfigMap", "a")]);
    assert_eq!(page.pruned.len(), 1, "{:?}", page.pruned);
    assert_eq!(page.pruned[0].kind, "Event");
    assert!(page.pruned[0].compacted > first.0, "{:?}", page.pruned);

    // Asked for Events alone, the diff says why it cannot answer.
    let events = Filter {
        resource: Some(objects::resolve_kind(&replay.kinds(), "events").unwrap()),
        namespace: Some("default"),
        name: None,
    };
    match replay.diff(first, created, &events).await {
        Err(e @ Error::Pruned { .. }) => {
            assert!(e.to_string().contains("/registry/core/events/"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // The log of the same window leaves out the changes whose versions are gone, and says how
    // many.
    let log = replay
        .log(first, None, &Filter::default(), usize::MAX)
        .await
        .unwrap();
    let changes: Vec<(u64, &str, &str)> = log
        .changes
        .iter()
        .map(|c| (c.revision, c.kind.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(changes.last(), Some(&(created.0, "ConfigMap", "a")));
    assert!(
        changes
            .iter()
            .all(|(r, kind, _)| *kind == "ConfigMap" || *r > first.0 + 1),
        "{changes:?}"
    );
    assert!(log.pruned >= 2, "{}", log.pruned);
    assert_eq!(log.changes.len() + log.pruned, 5);
    // From a revision still kept for Events, they are read as usual.
    let page = replay
        .diff(
            Revision(page.pruned[0].compacted),
            created,
            &Filter::default(),
        )
        .await
        .unwrap();
    assert!(page.pruned.is_empty(), "{:?}", page.pruned);
}

/// The timeline reads over a log of 30 writes: pages of changes newest first join up with no
/// gap or repeat, filters narrow them, the scan bound holds, bad input is 400 and a point before
/// the retained history 410.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_pages_filters_and_bounds() {
    use timeline::{Bounds, Select};
    let dir = TempDir::new();
    let store = open(&dir);
    // r1..r10: c0..c9 created; r11..r30: c0..c9 updated twice (c3's by "editor").
    for i in 0..10 {
        put(
            store.as_ref(),
            &format!("/registry/core/configmaps/default/c{i}"),
            &cm(&format!("c{i}"), "0", "m", "t"),
        )
        .await;
    }
    for round in 1..=2 {
        for i in 0..10 {
            let manager = if i == 3 { "editor" } else { "m" };
            let mut o = cm(&format!("c{i}"), &round.to_string(), "m", "t");
            if manager == "editor" {
                // A new entry each round: the manager of a change is the one whose entry it wrote.
                o["metadata"]["managedFields"] = json!([{"manager": "editor", "operation": "Update", "time": format!("t{round}")}]);
            }
            put(
                store.as_ref(),
                &format!("/registry/core/configmaps/default/c{i}"),
                &o,
            )
            .await;
        }
    }
    let replay = Replay::new(store.clone());
    let all = Filter::default();
    let small = Bounds {
        scan: 1_000,
        chunk: 4,
    };

    // Pages of 7, newest first, continued by token, across chunk boundaries.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = timeline::changes(
            &replay,
            small,
            None,
            None,
            token.as_deref(),
            7,
            &all,
            &Select::default(),
        )
        .await
        .unwrap();
        pages += 1;
        seen.extend(page.items.iter().map(|r| r.revision));
        match page.r#continue {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(
        seen,
        (1..=30).rev().collect::<Vec<_>>(),
        "every change once, newest first"
    );
    assert_eq!(pages, 5);

    // Filters: one object's changes; one manager's.
    let c3 = Select {
        name: Some("c3".into()),
        ..Select::default()
    };
    let page = timeline::changes(&replay, small, None, None, None, 100, &all, &c3)
        .await
        .unwrap();
    assert_eq!(
        page.items.iter().map(|r| r.revision).collect::<Vec<_>>(),
        [24, 14, 4]
    );
    assert_eq!(page.items[2].operation, Operation::Created);
    let editor = Select {
        manager: Some("editor".into()),
        ..Select::default()
    };
    let page = timeline::changes(&replay, small, None, None, None, 100, &all, &editor)
        .await
        .unwrap();
    assert_eq!(
        page.items.iter().map(|r| r.revision).collect::<Vec<_>>(),
        [24, 14]
    );

    // The scan bound: a request reads at most `scan` revisions and says where to go on.
    let tight = Bounds { scan: 8, chunk: 3 };
    let page = timeline::changes(&replay, tight, None, None, None, 100, &all, &c3)
        .await
        .unwrap();
    assert_eq!(
        page.items.iter().map(|r| r.revision).collect::<Vec<_>>(),
        [24]
    );
    assert_eq!(
        page.r#continue.as_deref(),
        Some("22"),
        "r23..=r30 read, continue below"
    );
    assert_eq!((page.scanned_from, page.scanned_to), (23, 30));

    // The timeline counts the window by operation; a bound window counts its newest part.
    let t = timeline::timeline(
        &replay,
        small,
        Some(Point::Revision(Revision(1))),
        None,
        10,
        &all,
        &Select::default(),
    )
    .await
    .unwrap();
    let count = |f: fn(&timeline::Bucket) -> u64| t.buckets.iter().map(f).sum::<u64>();
    assert_eq!((count(|b| b.created), count(|b| b.updated)), (10, 20));
    assert!(t.complete);
    assert_eq!((t.from, t.to, t.oldest, t.newest), (1, 30, 1, 30));
    let t = timeline::timeline(
        &replay,
        tight,
        Some(Point::Revision(Revision(1))),
        None,
        10,
        &all,
        &Select::default(),
    )
    .await
    .unwrap();
    assert!(!t.complete);
    assert_eq!(t.scanned_from, 23);
    assert_eq!(t.buckets.iter().map(|b| b.updated).sum::<u64>(), 8);

    // Over HTTP: malformed input is 400, a point before the retained history 410.
    let params = |pairs: &[(&str, &str)]| -> http::Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    for bad in [
        params(&[("buckets", "many")]),
        params(&[("since", "yesterday")]),
        params(&[("labelSelector", "a in (b")]),
    ] {
        let e = http::answer(&replay, "timeline", &bad).await.unwrap_err();
        assert_eq!(e.code().as_u16(), 400, "{bad:?}: {e:?}");
    }
    let e = http::answer(&replay, "changes", &params(&[("continue", "x")]))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_u16(), 400, "{e:?}");
    let ok = http::answer(
        &replay,
        "changes",
        &params(&[("name", "c9"), ("limit", "2")]),
    )
    .await
    .unwrap();
    assert_eq!(ok["items"][0]["revision"], 30);
    assert_eq!(ok["continue"], "19");
    store.compact(Revision(20)).await.unwrap();
    let e = http::answer(&replay, "timeline", &params(&[("since", "5")]))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_u16(), 410, "{e:?}");
    assert!(e.to_string().contains("compacted at revision 20"), "{e}");
    let snap = http::answer(&replay, "snapshot", &params(&[("at", "25")]))
        .await
        .unwrap();
    assert_eq!(snap["kinds"][0]["kind"], "ConfigMap");
    assert_eq!(snap["kinds"][0]["total"], 10);
    assert_eq!(snap["kinds"][0]["rows"][0]["summary"], "data 1");
}

/// The timeline of `since..` up to now in 10 buckets.
async fn chart(
    replay: &Replay,
    bounds: timeline::Bounds,
    since: Option<u64>,
    scope: &Filter<'_>,
    select: &timeline::Select,
) -> timeline::Timeline {
    let since = since.map(|r| Point::Revision(Revision(r)));
    timeline::timeline(replay, bounds, since, None, 10, scope, select)
        .await
        .unwrap()
}

/// The timeline counted from the log's summary is the timeline counted by reading the log, for
/// any window and filter the summary holds; it is complete where a bounded read is not; and the
/// summary is built while timelines are asked for, newest first, then as the log fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summarised_timeline_counts_what_reading_the_log_counts() {
    use timeline::{Bounds, Select};
    let dir = TempDir::new();
    let store = open(&dir);
    // r1..r57 over ConfigMaps in two namespaces by two managers: creates, updates, status-only
    // updates, deletes, and Warning events.
    let mut revision = 0;
    for i in 0..57u64 {
        let ns = if i % 3 == 0 { "kube-system" } else { "default" };
        let manager = if i % 4 == 0 { "helm" } else { "kubectl" };
        let name = format!("c{}", i % 7);
        let key = format!("/registry/core/configmaps/{ns}/{name}");
        revision = match i % 5 {
            4 => {
                // The Event the step before wrote.
                let ns = if (i - 1) % 3 == 0 {
                    "kube-system"
                } else {
                    "default"
                };
                let e = format!("/registry/core/events/{ns}/e{}", i - 1);
                store
                    .delete(KeyRange::key(e.into_bytes()))
                    .await
                    .unwrap()
                    .0
                    .0
            }
            3 => {
                let e = json!({"apiVersion": "v1", "kind": "Event", "type": "Warning",
                    "reason": format!("R{i}"), "count": 1,
                    "metadata": {"name": format!("e{i}"), "namespace": ns}});
                put(
                    store.as_ref(),
                    &format!("/registry/core/events/{ns}/e{i}"),
                    &e,
                )
                .await
                .0
            }
            phase => {
                // The same data across r1..r30 and across r31..: rewrites there change only
                // the status.
                let mut o = cm(&name, &(i / 30).to_string(), manager, &i.to_string());
                o["metadata"]["namespace"] = json!(ns);
                o["status"] = json!({"phase": phase});
                put(store.as_ref(), &key, &o).await.0
            }
        };
    }
    let newest = store.status().revision.0;
    assert_eq!(revision, 57);
    assert_eq!(newest, 57);
    let index = Arc::new(index::Index::new(10));
    let plain = Replay::new(store.clone());
    let summarised = Replay::new(store.clone()).with_index(index.clone());
    for n in 0..newest / 10 {
        index.build(&plain, n).await.unwrap();
    }
    assert_eq!(index.blocks().len() as u64, newest / 10);

    let sorted = |mut t: timeline::Timeline| {
        // Only the summarised reads say how far the summary goes.
        t.summarised = None;
        for b in &mut t.buckets {
            b.markers.sort_by_key(|m| m.revision);
        }
        t
    };
    let cms = configmaps();
    let scopes = [
        Filter::default(),
        Filter {
            resource: Some(cms),
            namespace: Some("default"),
            name: None,
        },
        Filter {
            resource: Some(cms),
            ..Filter::default()
        },
    ];
    let selects = [
        Select::default(),
        Select {
            manager: Some("helm".into()),
            ..Select::default()
        },
        // Not in the summary: both read the log (the summarised one passing over blocks without
        // a change in scope).
        Select {
            name: Some("c1".into()),
            ..Select::default()
        },
    ];
    let windows = [(Some(1), None), (Some(5), Some(44)), (Some(11), Some(30))];
    for scope in &scopes {
        for select in &selects {
            for (since, until) in windows {
                let point = |r: Option<u64>| r.map(|r| Point::Revision(Revision(r)));
                let mut got = Vec::new();
                for replay in [&summarised, &plain] {
                    let t = timeline::timeline(
                        replay,
                        Bounds::default(),
                        point(since),
                        point(until),
                        10,
                        scope,
                        select,
                    )
                    .await
                    .unwrap();
                    got.push(sorted(t));
                }
                let (by_index, by_log) = (&got[0], &got[1]);
                assert_eq!(
                    by_index, by_log,
                    "{scope:?} {select:?} {since:?}..{until:?}"
                );
                assert!(by_index.complete);
            }
        }
    }
    // Something was counted, deletes and warnings marked.
    let all = chart(
        &summarised,
        Bounds::default(),
        None,
        &Filter::default(),
        &Select::default(),
    )
    .await;
    let total: u64 = all
        .buckets
        .iter()
        .map(|b| b.created + b.updated + b.status_updated + b.deleted)
        .sum();
    assert_eq!(total, newest);
    let marked = |kind: &str| -> u64 {
        all.buckets
            .iter()
            .filter_map(|b| b.marker_counts.get(kind))
            .sum()
    };
    assert!(marked("delete") > 0 && marked("warning") > 0);
    assert!(all.buckets.iter().any(|b| b.status_updated > 0));

    // A bound of 15 revisions read: reading the log covers r43.., the summary the whole window
    // (r5..r10 and the revisions after the last full block are all it reads).
    let tight = Bounds { scan: 15, chunk: 4 };
    let mut got = Vec::new();
    for replay in [&plain, &summarised] {
        got.push(
            chart(
                replay,
                tight,
                Some(5),
                &Filter::default(),
                &Select::default(),
            )
            .await,
        );
    }
    let (by_log, by_index) = (&got[0], &got[1]);
    assert!(!by_log.complete);
    assert_eq!(by_log.scanned_from, newest - 14);
    assert!(by_index.complete, "{by_index:?}");
    assert_eq!(by_index.scanned_from, 5);
    // A name is not in the summary: that timeline reads the log, within the bound.
    let one = Select {
        name: Some("c1".into()),
        ..Select::default()
    };
    let by_name = chart(&summarised, tight, Some(5), &Filter::default(), &one).await;
    assert!(!by_name.complete);

    // One object named in full is read from its own history: all of it, whatever the bound, and
    // counted as reading the log counts it.
    let c1 = Select {
        name: Some("c1".into()),
        ..Select::default()
    };
    let mut got = Vec::new();
    for (scope, bounds) in [
        (
            Filter {
                resource: Some(cms),
                namespace: Some("default"),
                name: None,
            },
            Bounds::default(),
        ),
        (
            Filter {
                resource: Some(cms),
                namespace: Some("default"),
                name: Some("c1"),
            },
            tight,
        ),
    ] {
        got.push(chart(&plain, bounds, Some(1), &scope, &c1).await);
    }
    assert!(got[1].complete);
    assert_eq!(got[0].buckets, got[1].buckets);
    assert!(got[1].buckets.iter().map(|b| b.created).sum::<u64>() > 0);
    let only_c1 = Filter {
        resource: Some(cms),
        namespace: Some("default"),
        name: Some("c1"),
    };
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    for limit in [2, 100] {
        let page = timeline::changes(
            &plain,
            tight,
            None,
            None,
            token.as_deref(),
            limit,
            &only_c1,
            &c1,
        )
        .await
        .unwrap();
        token = page.r#continue.clone();
        pages.push(page);
    }
    let (page, rest) = (&pages[0], &pages[1]);
    assert_eq!(page.items.len(), 2);
    assert!(page.r#continue.is_some(), "older changes of c1");
    assert!(rest.r#continue.is_none());
    let listed: Vec<u64> = page
        .items
        .iter()
        .chain(&rest.items)
        .map(|r| r.revision)
        .collect();
    let counted: u64 = got[0]
        .buckets
        .iter()
        .map(|b| b.created + b.updated + b.status_updated + b.deleted)
        .sum();
    assert_eq!(listed.len() as u64, counted);
    assert!(listed.windows(2).all(|w| w[0] > w[1]), "{listed:?}");

    // A kind with no change in the summarised blocks: they are passed over unread, so the list
    // is answered in full within the bound; reading the log stops at the bound.
    let secrets = Filter {
        resource: objects::resolve_kind(&plain.kinds(), "secrets"),
        ..Filter::default()
    };
    let mut got = Vec::new();
    for replay in [&plain, &summarised] {
        let page = timeline::changes(
            replay,
            tight,
            None,
            None,
            None,
            100,
            &secrets,
            &Select::default(),
        )
        .await
        .unwrap();
        got.push(page);
    }
    assert!(got.iter().all(|p| p.items.is_empty()));
    assert!(got[0].r#continue.is_some(), "{:?}", got[0]);
    assert_eq!(got[1].r#continue, None, "{:?}", got[1]);
    assert_eq!(got[1].scanned_from, 1);

    // Built in the background once a timeline is asked for: newest first, then what the log
    // adds.
    let fresh = Arc::new(index::Index::new(10));
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(fresh.clone().run(plain.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        fresh.blocks().is_empty(),
        "nothing is summarised until asked"
    );
    fresh.touch();
    let until = |n: u64| {
        let fresh = fresh.clone();
        async move {
            for _ in 0..200 {
                if fresh.blocks().len() as u64 >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("{} blocks summarised, not {n}", fresh.blocks().len());
        }
    };
    until(newest / 10).await;
    for i in 0..10 {
        put(store.as_ref(), A, &cm("a", &format!("x{i}"), "m", "t")).await;
    }
    until(store.status().revision.0 / 10).await;
    assert_eq!(
        fresh.blocks().last().unwrap().to,
        store.status().revision.0 / 10 * 10
    );
    let size = fresh.footprint();
    assert_eq!(size.blocks as u64, store.status().revision.0 / 10);
    assert!(size.cells >= size.blocks && size.markers > 0 && size.bytes > 0);
    stop.cancel();
    running.await.unwrap();
}
