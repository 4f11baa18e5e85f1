//! Loading image archives into the node's containerd, for homelabs without a registry (k3s's
//! air-gap images): `skiff images import FILE.tar` and the `*.tar` files of the kubelet's
//! image directory (`<data-dir>/images` under `skiff server`), imported at start.
//!
//! CRI has no import call, so this goes to containerd itself: its `ctr` client (shipped in the
//! same package as containerd) with `--address` the node's socket and the namespace the CRI
//! plugin uses (`k8s.io`), where the CRI plugin sees the image at once. `ctr images import` reads
//! both OCI archives (`index.json`, the image named by its `org.opencontainers.image.ref.name`
//! annotation) and docker archives (`docker save`, named by `RepoTags`), writes the blobs to the
//! content store, makes the image records and unpacks them into the default snapshotter, so a
//! pod with `imagePullPolicy: Never` (or `IfNotPresent`) runs them without a registry.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The containerd namespace of the CRI plugin's images.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// Why an archive was not imported.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `ctr` could not be run.
    #[error("cannot run ctr (containerd's client, in the containerd package): {0}")]
    Ctr(#[source] std::io::Error),
    /// `ctr images import` failed; its message.
    #[error("importing {archive}: {message}")]
    Import {
        /// The archive.
        archive: PathBuf,
        /// What ctr said.
        message: String,
    },
    /// The archive holds no image ctr could name.
    #[error("importing {0}: no named image in the archive")]
    Empty(PathBuf),
    /// The image directory could not be read.
    #[error("image directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Imports the archive at `archive` into the containerd at `socket`; the names of the images it
/// held. Blocking (containerd unpacks the layers): call it off the async runtime.
pub fn import(socket: &Path, archive: &Path) -> Result<Vec<String>, Error> {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", CRI_NAMESPACE, "images", "import"])
        .arg(archive)
        .output()
        .map_err(Error::Ctr)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Import {
            archive: archive.to_path_buf(),
            message: ctr_message(&stderr, &stdout),
        });
    }
    let names = imported_names(&stdout);
    if names.is_empty() {
        return Err(Error::Empty(archive.to_path_buf()));
    }
    Ok(names)
}

/// The `*.tar` files of `dir` in name order; none when `dir` does not exist.
pub fn archives(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Dir {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut tars: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "tar"))
        .collect();
    tars.sort();
    Ok(tars)
}

/// Imports every archive of `dir` into the containerd at `socket`, logging each; an archive that
/// fails does not stop the others. Blocking.
pub fn import_dir(socket: &Path, dir: &Path) {
    let tars = match archives(dir) {
        Ok(tars) => tars,
        Err(err) => {
            tracing::warn!(%err, "image archives not imported");
            return;
        }
    };
    for tar in tars {
        match import(socket, &tar) {
            Ok(names) => tracing::info!(archive = %tar.display(), ?names, "imported image archive"),
            Err(err) => tracing::warn!(%err, "image archive not imported"),
        }
    }
}

/// The image names in `ctr images import`'s output (`unpacking <name> (sha256:...)...done`).
fn imported_names(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("unpacking "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// ctr's error without its log decoration (`ctr: <message>`).
fn ctr_message(stderr: &str, stdout: &str) -> String {
    let text = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    text.lines()
        .map(|l| l.trim().strip_prefix("ctr: ").unwrap_or(l.trim()))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_unpack_lines() {
        let out = "unpacking localhost/imported:v1 (sha256:5bc3)...done\n\
                   unpacking docker.io/library/app:2 (sha256:6c43)...done\n";
        assert_eq!(
            imported_names(out),
            ["localhost/imported:v1", "docker.io/library/app:2"]
        );
        assert!(imported_names("").is_empty());
    }

    #[test]
    fn errors_lose_the_ctr_prefix() {
        assert_eq!(
            ctr_message("ctr: unrecognized image format\n", ""),
            "unrecognized image format"
        );
        assert_eq!(ctr_message("", "plain\n"), "plain");
    }

    #[test]
    fn only_tar_files_are_archives_and_a_missing_dir_has_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(archives(&dir.path().join("none")).unwrap().is_empty());
        for f in ["b.tar", "a.tar", "notes.txt", "c.tar.gz"] {
            std::fs::write(dir.path().join(f), "x").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.tar")).unwrap();
        let names: Vec<String> = archives(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.tar", "b.tar"]);
    }

    #[test]
    fn a_socket_nobody_serves_is_an_import_error() {
        let dir = tempfile::tempdir().unwrap();
        let tar = dir.path().join("x.tar");
        std::fs::write(&tar, "not an archive").unwrap();
        match import(&dir.path().join("none.sock"), &tar) {
            // Without ctr on the machine the error says so; with it, ctr's own message.
            Err(Error::Ctr(_)) | Err(Error::Import { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
