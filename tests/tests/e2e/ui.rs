//! The timeline page (`/ui/`) in headless Chromium against a real `skiff server` with a scripted
//! history: a Deployment created and scaled, a ConfigMap created and deleted. A node script
//! (`tests/browser/timeline.js`, Playwright's `playwright-core` driving Debian's
//! `/usr/bin/chromium`; `.ci/run` installs both) logs in with the admin token and checks each
//! view. It writes a screenshot of each view to `<target dir>/ui-screenshots/` (for a release
//! run with the CI's target dir: `~/.cache/skiff-target/ui-screenshots/`).
//!
//! Without node, Chromium or `tests/browser/node_modules` (`npm ci` there) the test fails and
//! says what is missing: a browser test that silently skips proves nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use skiff_tests::{TestCluster, eventually, kill_pod_processes};

const CHROMIUM: &str = "/usr/bin/chromium";

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox:1
        command: ["sh", "-c", "while true; do sleep 1; done"]
"#;

/// Kills the pods' host processes however the test ends.
struct PodCleanup(PathBuf);

impl Drop for PodCleanup {
    fn drop(&mut self) {
        kill_pod_processes(&self.0);
    }
}

fn revision_of(json: &str) -> u64 {
    let object: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {json}"))
}

/// What the browser test needs, or a panic naming what is missing and how to get it.
fn browser_tools(browser_dir: &Path) {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "node is missing: install Node.js (Debian: apt-get install nodejs npm); .ci/run does"
    );
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
    );
    assert!(
        browser_dir.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run `npm ci` in {} (.ci/run does)",
        browser_dir.display()
    );
}

/// `<target dir>/ui-screenshots`, next to the profile directory the test runs from.
fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test executable is under <target>/<profile>/deps");
    let dir = target.join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("creating the screenshot dir");
    dir
}

#[test]
fn timeline_page_shows_filters_points_diffs_and_live_changes() {
    let browser_dir = crate::package_dir().join("browser");
    browser_tools(&browser_dir);
    let cluster = TestCluster::start_server(&[]);
    let _cleanup = PodCleanup(cluster.kubelet_root());
    let k = cluster.kubectl();

    // The scripted history: web created (replicas 1), scaled to 3; a ConfigMap created and
    // deleted (a delete marker).
    let created = revision_of(&k.ok_with_input(&["apply", "-f", "-", "-o", "json"], DEPLOYMENT));
    k.ok(&["create", "configmap", "doomed", "--from-literal=k=v"]);
    std::thread::sleep(Duration::from_millis(1200));
    let scaled = revision_of(&k.ok(&[
        "patch",
        "deployment",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
        "-o",
        "json",
    ]));
    k.ok(&["delete", "configmap", "doomed"]);
    assert!(
        eventually(Duration::from_secs(60), || {
            k.ok(&[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.replicas}",
            ])
            .trim()
                == "3"
        }),
        "web never got its 3 replicas"
    );

    let shots = screenshot_dir();
    let out = Command::new("node")
        .arg(browser_dir.join("timeline.js"))
        .env("SKIFF_URL", &cluster.server)
        .env("SKIFF_TOKEN", &cluster.token)
        .env("SKIFF_CHROMIUM", CHROMIUM)
        .env("REV_CREATED", created.to_string())
        .env("REV_SCALED", scaled.to_string())
        .env("SCREENSHOTS", &shots)
        .current_dir(&browser_dir)
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser test failed:\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        cluster.log_text()
    );
    for view in [
        "1-timeline",
        "2-filtered",
        "3-point",
        "4-diff",
        "5-compare",
        "6-live",
    ] {
        let shot = shots.join(format!("{view}.png"));
        let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
        assert!(size > 1000, "no screenshot at {}", shot.display());
    }
    // The page's live change went through the API, as the Rust side sees.
    k.ok(&["get", "configmap", "live-cm"]);
    eprintln!("screenshots in {}\n{stdout}", shots.display());
}
