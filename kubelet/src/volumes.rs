//! Pod volumes on the host (emptyDir, hostPath, configMap, secret, downwardAPI and projected, whose
//! contents [`crate::projected`] works out, and persistentVolumeClaim) and how a container sees
//! them. A claim is its bound volume's directory on this node (a `hostPath` or `local` volume),
//! made when missing: the node that holds the data makes it (see the local-path provisioner in
//! skiff-controllers for who removes it).
//!
//! An emptyDir with `medium: Memory` is a tmpfs ([`memory`]).
//!
//! Volumes live under the pod's directory (`<root-dir>/pods/<uid>/volumes/<kind>/<name>`), except
//! hostPath, which is the host's path itself. A process cannot have a host path remapped without
//! mount namespaces, so each container gets a root directory (`<pod dir>/roots/<container>`) in
//! which every `mountPath` is a symbolic link to its volume (or to `subPath` within it). That root is
//! the container's default working directory; `$POD_ROOT` names it.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod};

use crate::runtime::Mount;
use crate::spec::Sources;

pub mod memory;

/// Why volumes could not be set up (the pod stays `ContainerCreating` with an event).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A volume kind the process runtime does not support.
    #[error("volume {0}: unsupported volume type")]
    Unsupported(String),
    /// A referenced ConfigMap or Secret is missing and not optional.
    #[error("volume {volume}: {kind} {name:?} not found")]
    SourceNotFound {
        /// The volume.
        volume: String,
        /// `configmap` or `secret`.
        kind: &'static str,
        /// The object's name.
        name: String,
    },
    /// A key named in `items` is missing.
    #[error("volume {volume}: key {key:?} not found")]
    KeyNotFound {
        /// The volume.
        volume: String,
        /// The key.
        key: String,
    },
    /// A hostPath of a type that must exist (`Directory`, `File`, ...) does not.
    #[error("volume {volume}: hostPath {path} is not a {type_}")]
    HostPathType {
        /// The volume.
        volume: String,
        /// The path.
        path: String,
        /// The required type.
        type_: String,
    },
    /// A projected service-account token could not be had (TokenRequest failed).
    #[error("volume {volume}: cannot get a service account token: {reason}")]
    TokenUnavailable {
        /// The volume.
        volume: String,
        /// Why.
        reason: String,
    },
    /// A path in `items`, `mountPath` or `subPath` escapes its directory.
    #[error("invalid path {0:?}")]
    InvalidPath(String),
    /// A container mounts a volume the pod does not declare.
    #[error("container {container}: no volume {volume}")]
    NoSuchVolume {
        /// The container.
        container: String,
        /// The volume name.
        volume: String,
    },
    /// A claim the pod mounts cannot be used yet (unbound, being deleted, not local).
    #[error("volume {volume}: {message}")]
    ClaimNotReady {
        /// The volume.
        volume: String,
        /// Why.
        message: String,
    },
    /// Filesystem work failed.
    #[error("volume at {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Result of volume setup.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A relative path that stays inside its directory (no `..`, not absolute).
fn safe_relative(p: &str) -> Result<&Path> {
    let path = Path::new(p);
    let ok = !p.is_empty()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    ok.then_some(path)
        .ok_or_else(|| Error::InvalidPath(p.to_string()))
}

/// A pod's volumes, made.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Each volume's host path by name.
    pub paths: BTreeMap<String, PathBuf>,
    /// What was not made as asked, for a pod event (a memory-backed emptyDir left on disk).
    pub warnings: Vec<String>,
}

/// Makes the pod's volumes. Idempotent: configMap and secret contents are rewritten so updates
/// reach running pods.
pub fn prepare(pod: &Pod, pod_dir: &Path, sources: &Sources) -> Result<Prepared> {
    let mut out = Prepared::default();
    let Some(spec) = &pod.spec else {
        return Ok(out);
    };
    let fs_group = spec.security_context.as_ref().and_then(|s| s.fs_group);
    // Files written for an fsGroup are group readable from the start, not only once
    // `set_group_ownership` has been over them.
    let extra = if fs_group.is_some() { 0o440 } else { 0 };
    for v in spec.volumes.iter().flatten() {
        let path = if let Some(empty) = &v.empty_dir {
            let p = pod_dir.join("volumes/empty-dir").join(&v.name);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
            if empty.medium.as_deref() == Some("Memory") {
                let size = memory::size(pod, empty);
                if let Some(why) = memory::ensure(&p, size).map_err(io(&p))? {
                    out.warnings
                        .push(format!("emptyDir {} with medium Memory is {why}", v.name));
                }
            }
            // Writable by whatever user the containers run as, as the Kubernetes kubelet makes
            // every emptyDir.
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).map_err(io(&p))?;
            p
        } else if let Some(hp) = &v.host_path {
            host_path(&v.name, &hp.path, hp.type_.as_deref().unwrap_or(""))?
        } else if let Some(cm) = &v.config_map {
            let p = pod_dir.join("volumes/configmap").join(&v.name);
            match sources.config_map_data(&cm.name) {
                Some(data) => write_files(
                    &v.name,
                    &p,
                    &data,
                    cm.items.as_deref(),
                    cm.default_mode,
                    extra,
                )?,
                None if cm.optional == Some(true) => {
                    write_files(&v.name, &p, &BTreeMap::new(), None, cm.default_mode, extra)?
                }
                None => {
                    return Err(Error::SourceNotFound {
                        volume: v.name.clone(),
                        kind: "configmap",
                        name: cm.name.clone(),
                    });
                }
            }
            p
        } else if let Some(sec) = &v.secret {
            let p = pod_dir.join("volumes/secret").join(&v.name);
            let name = sec.secret_name.clone().unwrap_or_default();
            match sources.secret_data(&name) {
                Some(data) => write_files(
                    &v.name,
                    &p,
                    &data,
                    sec.items.as_deref(),
                    sec.default_mode,
                    extra,
                )?,
                None if sec.optional == Some(true) => {
                    write_files(&v.name, &p, &BTreeMap::new(), None, sec.default_mode, extra)?
                }
                None => {
                    return Err(Error::SourceNotFound {
                        volume: v.name.clone(),
                        kind: "secret",
                        name,
                    });
                }
            }
            p
        } else if let Some(pvc) = &v.persistent_volume_claim {
            match sources.claims.get(&pvc.claim_name) {
                Some(Ok(p)) => {
                    if !p.exists() {
                        // Writable by whatever user the pod runs as, as the local-path
                        // provisioner makes its directories: a hostPath or local volume gets no
                        // fsGroup ownership.
                        std::fs::create_dir_all(p).map_err(io(p))?;
                        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777))
                            .map_err(io(p))?;
                    }
                    p.clone()
                }
                Some(Err(message)) => {
                    return Err(Error::ClaimNotReady {
                        volume: v.name.clone(),
                        message: message.clone(),
                    });
                }
                None => {
                    return Err(Error::ClaimNotReady {
                        volume: v.name.clone(),
                        message: format!("persistentvolumeclaim \"{}\" not found", pvc.claim_name),
                    });
                }
            }
        } else if let Some(projected) = &v.projected {
            let p = pod_dir.join("volumes/projected").join(&v.name);
            let files = crate::projected::projected_files(&v.name, pod, projected, sources)?;
            write_file_list(&v.name, &p, files, projected.default_mode, extra)?;
            p
        } else if let Some(downward) = &v.downward_api {
            let p = pod_dir.join("volumes/downward-api").join(&v.name);
            let items = downward.items.as_deref().unwrap_or_default();
            let files = crate::projected::downward_files(&v.name, pod, items)?;
            write_file_list(&v.name, &p, files, downward.default_mode, extra)?;
            p
        } else {
            return Err(Error::Unsupported(v.name.clone()));
        };
        // The kubelet's own volumes belong to the pod's fsGroup. An emptyDir is the pod's to
        // write: its directory is given to the group, and what the pod makes there inherits the
        // group (set-group-ID), so its contents are not walked at every sync. The kubelet's
        // files (configMap, secret, projected, downwardAPI) are given for reading, each one.
        if let Some(group) = fs_group {
            if v.empty_dir.is_some() {
                set_group_ownership(&path, group, false, false)?;
            } else if v.host_path.is_none() && v.persistent_volume_claim.is_none() {
                set_group_ownership(&path, group, true, true)?;
            }
        }
        out.paths.insert(v.name.clone(), path);
    }
    Ok(out)
}

/// Gives the volume at `dir` (with everything in it when `recursive`) to `group` as the
/// Kubernetes kubelet does for `fsGroup`: each file and directory gets that group and group read
/// (and write unless `read_only`) permission, directories also group search and set-group-ID,
/// so that what the pod creates there keeps the group. Symbolic links are left alone, and what
/// already has the group and the bits is not touched. Without the privilege to change groups (a
/// kubelet that is not root) nothing is changed: the process runtime says so in its warnings.
fn set_group_ownership(dir: &Path, group: i64, read_only: bool, recursive: bool) -> Result<()> {
    let Some(gid) = u32::try_from(group).ok().filter(|g| *g != u32::MAX) else {
        return Ok(());
    };
    let gid = rustix::fs::Gid::from_raw(gid);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        if meta.gid() != gid.as_raw() {
            match rustix::fs::chown(&path, None, Some(gid)) {
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::PERM => return Ok(()),
                Err(e) => return Err(io(&path)(e.into())),
            }
        }
        let mut mask = if read_only { 0o440 } else { 0o660 };
        if meta.is_dir() {
            mask |= 0o2110;
            if recursive {
                for entry in std::fs::read_dir(&path).map_err(io(&path))?.flatten() {
                    stack.push(entry.path());
                }
            }
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode | mask != mode {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | mask))
                .map_err(io(&path))?;
        }
    }
    Ok(())
}

fn host_path(volume: &str, path: &str, type_: &str) -> Result<PathBuf> {
    let p = PathBuf::from(path);
    let mismatch = || Error::HostPathType {
        volume: volume.to_string(),
        path: path.to_string(),
        type_: type_.to_string(),
    };
    match type_ {
        "DirectoryOrCreate" => std::fs::create_dir_all(&p).map_err(io(&p))?,
        "FileOrCreate" => {
            if !p.exists() {
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(io(parent))?;
                }
                std::fs::write(&p, b"").map_err(io(&p))?;
            }
        }
        "Directory" if !p.is_dir() => return Err(mismatch()),
        "File" if !p.is_file() => return Err(mismatch()),
        "Socket" | "CharDevice" | "BlockDevice" if !p.exists() => return Err(mismatch()),
        _ => {}
    }
    Ok(p)
}

/// Writes `files` (path, contents, the item's own mode) into `dir` with `default_mode` unless an
/// item says otherwise, removing files that went away.
fn write_file_list(
    volume: &str,
    dir: &Path,
    files: Vec<crate::projected::File>,
    default_mode: Option<i32>,
    extra: u32,
) -> Result<()> {
    let modes: Vec<(String, i32)> = files
        .iter()
        .filter_map(|(path, _, mode)| Some((path.clone(), (*mode)?)))
        .collect();
    let data: BTreeMap<String, Vec<u8>> = files.into_iter().map(|(p, c, _)| (p, c)).collect();
    write_files(volume, dir, &data, None, default_mode, extra)?;
    for (path, mode) in modes {
        let file = dir.join(safe_relative(&path)?);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode as u32 | extra))
            .map_err(io(&file))?;
    }
    Ok(())
}

/// Writes `data` (or the listed `items`) as files with `mode` and the `extra` bits (group read
/// for an fsGroup), removing files of keys that went away.
fn write_files(
    volume: &str,
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    extra: u32,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let default_mode = default_mode.unwrap_or(0o644) as u32;
    let mut wanted: Vec<(PathBuf, &[u8], u32)> = Vec::new();
    match items {
        Some(items) => {
            for item in items {
                let content = data.get(&item.key).ok_or_else(|| Error::KeyNotFound {
                    volume: volume.to_string(),
                    key: item.key.clone(),
                })?;
                let rel = safe_relative(&item.path)?;
                let mode = item.mode.map(|m| m as u32).unwrap_or(default_mode);
                wanted.push((rel.to_path_buf(), content, mode));
            }
        }
        None => {
            for (key, content) in data {
                wanted.push((safe_relative(key)?.to_path_buf(), content, default_mode));
            }
        }
    }
    // Remove top-level entries no longer wanted.
    let keep: Vec<_> = wanted
        .iter()
        .filter_map(|(p, _, _)| p.components().next().map(|c| c.as_os_str().to_owned()))
        .collect();
    for entry in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
        if !keep.contains(&entry.file_name()) {
            let p = entry.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
    for (rel, content, mode) in wanted {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        if std::fs::read(&path).ok().as_deref() != Some(content) {
            let tmp = path.with_extension("skiff-tmp");
            std::fs::write(&tmp, content).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))?;
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | extra))
            .map_err(io(&path))?;
    }
    Ok(())
}

/// The container's root directory: `<pod dir>/roots/<container>`.
pub fn container_root(pod_dir: &Path, container: &str) -> PathBuf {
    pod_dir.join("roots").join(container)
}

/// Links the container's mounts into its root and returns them for the runtime.
pub fn mount(
    container: &Container,
    root: &Path,
    volumes: &BTreeMap<String, PathBuf>,
) -> Result<Vec<Mount>> {
    std::fs::create_dir_all(root).map_err(io(root))?;
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let volume = volumes.get(&vm.name).ok_or_else(|| Error::NoSuchVolume {
            container: container.name.clone(),
            volume: vm.name.clone(),
        })?;
        let mut target = volume.clone();
        if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
            target = target.join(safe_relative(sub)?);
            if !target.exists() {
                std::fs::create_dir_all(&target).map_err(io(&target))?;
            }
        }
        let rel = safe_relative(vm.mount_path.trim_start_matches('/'))?;
        let link = root.join(rel);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        if std::fs::read_link(&link).ok().as_ref() != Some(&target) {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&target, &link).map_err(io(&link))?;
        }
        mounts.push(Mount {
            host_path: target,
            container_path: vm.mount_path.clone(),
            read_only: vm.read_only.unwrap_or(false),
        });
    }
    Ok(mounts)
}

/// The working directory: `workingDir` if it exists on the host, else that path inside the
/// container's root (created), else the root.
pub fn working_dir(container: &Container, root: &Path) -> Result<PathBuf> {
    match container.working_dir.as_deref().filter(|w| !w.is_empty()) {
        Some(w) if Path::new(w).is_dir() => Ok(PathBuf::from(w)),
        Some(w) => {
            let p = root.join(safe_relative(w.trim_start_matches('/'))?);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
            Ok(p)
        }
        None => Ok(root.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapVolumeSource, EmptyDirVolumeSource, HostPathVolumeSource, PodSpec,
        Secret, SecretVolumeSource, Volume, VolumeMount,
    };

    fn pod(volumes: Vec<Volume>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                volumes: Some(volumes),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sources() -> Sources {
        let mut s = Sources::default();
        s.config_maps.insert(
            "cfg".into(),
            ConfigMap {
                data: Some(BTreeMap::from([
                    ("a.conf".into(), "A".into()),
                    ("b.conf".into(), "B".into()),
                ])),
                ..Default::default()
            },
        );
        s.secrets.insert(
            "sec".into(),
            Secret {
                data: Some(BTreeMap::from([(
                    "token".into(),
                    ByteString(b"t0k".to_vec()),
                )])),
                ..Default::default()
            },
        );
        s
    }

    /// With an fsGroup the kubelet's volumes belong to it: a secret of mode 0400 becomes group
    /// readable (0440), an emptyDir group writable with set-group-ID. Changing groups needs root
    /// (the kubelet's own privilege); without it nothing changes.
    #[test]
    fn fs_group_owns_the_kubelets_volumes() {
        use k8s_openapi::api::core::v1::PodSecurityContext;
        let dir = tempfile::tempdir().unwrap();
        let mut p = pod(vec![
            Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                name: "creds".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some("sec".into()),
                    default_mode: Some(0o400),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]);
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            fs_group: Some(2000),
            ..Default::default()
        });
        let vols = prepare(&p, dir.path(), &sources()).unwrap().paths;
        let token = std::fs::metadata(vols["creds"].join("token")).unwrap();
        let scratch = std::fs::metadata(&vols["scratch"]).unwrap();
        if rustix::process::geteuid().is_root() {
            assert_eq!(token.gid(), 2000);
            assert_eq!(token.mode() & 0o7777, 0o440);
            assert_eq!(scratch.gid(), 2000);
            assert_eq!(scratch.mode() & 0o7777, 0o2777);
        } else {
            assert_eq!(token.mode() & 0o7777, 0o440);
        }
        // Without an fsGroup nothing is given away.
        let plain = tempfile::tempdir().unwrap();
        p.spec.as_mut().unwrap().security_context = None;
        let vols = prepare(&p, plain.path(), &sources()).unwrap().paths;
        let token = std::fs::metadata(vols["creds"].join("token")).unwrap();
        assert_eq!(token.mode() & 0o7777, 0o400);
        assert_eq!(token.gid(), rustix::process::getegid().as_raw());
    }

    #[test]
    fn all_kinds_are_made_and_mounted_under_the_container_root() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host-data");
        let p = pod(vec![
            Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                name: "host".into(),
                host_path: Some(HostPathVolumeSource {
                    path: host.display().to_string(),
                    type_: Some("DirectoryOrCreate".into()),
                }),
                ..Default::default()
            },
            Volume {
                name: "config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: "cfg".into(),
                    items: Some(vec![KeyToPath {
                        key: "a.conf".into(),
                        path: "sub/a.conf".into(),
                        mode: Some(0o600),
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "creds".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some("sec".into()),
                    default_mode: Some(0o400),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]);
        let pod_dir = dir.path().join("pod");
        let vols = prepare(&p, &pod_dir, &sources()).unwrap().paths;
        assert!(vols["scratch"].is_dir());
        assert!(host.is_dir());
        assert_eq!(
            std::fs::read_to_string(vols["config"].join("sub/a.conf")).unwrap(),
            "A"
        );
        assert!(!vols["config"].join("b.conf").exists(), "only listed items");
        let token = vols["creds"].join("token");
        assert_eq!(std::fs::read(&token).unwrap(), b"t0k");
        assert_eq!(
            std::fs::metadata(&token).unwrap().permissions().mode() & 0o777,
            0o400
        );

        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "config".into(),
                    mount_path: "/etc/app".into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "scratch".into(),
                    mount_path: "/data".into(),
                    sub_path: Some("x".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let root = container_root(&pod_dir, "c");
        let mounts = mount(&c, &root, &vols).unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(
            std::fs::read_to_string(root.join("etc/app/sub/a.conf")).unwrap(),
            "A"
        );
        assert_eq!(mounts[1].host_path, vols["scratch"].join("x"));
        // Mounting again is idempotent.
        mount(&c, &root, &vols).unwrap();
        assert_eq!(working_dir(&c, &root).unwrap(), root);
    }

    #[test]
    fn config_map_updates_rewrite_and_prune_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = pod(vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "cfg".into(),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        let mut s = sources();
        let vols = prepare(&p, dir.path(), &s).unwrap().paths;
        assert!(vols["config"].join("b.conf").exists());
        s.config_maps.get_mut("cfg").unwrap().data =
            Some(BTreeMap::from([("a.conf".into(), "A2".into())]));
        prepare(&p, dir.path(), &s).unwrap();
        assert_eq!(
            std::fs::read_to_string(vols["config"].join("a.conf")).unwrap(),
            "A2"
        );
        assert!(!vols["config"].join("b.conf").exists());
    }

    #[test]
    fn failures_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = pod(vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "nope".into(),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        assert!(matches!(
            prepare(&missing, dir.path(), &sources()),
            Err(Error::SourceNotFound {
                kind: "configmap",
                ..
            })
        ));
        let bad_key = pod(vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "cfg".into(),
                items: Some(vec![KeyToPath {
                    key: "zzz".into(),
                    path: "z".into(),
                    mode: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        assert!(matches!(
            prepare(&bad_key, dir.path(), &sources()),
            Err(Error::KeyNotFound { .. })
        ));
        let escape = pod(vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "cfg".into(),
                items: Some(vec![KeyToPath {
                    key: "a.conf".into(),
                    path: "../evil".into(),
                    mode: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        assert!(matches!(
            prepare(&escape, dir.path(), &sources()),
            Err(Error::InvalidPath(_))
        ));
        let not_dir = pod(vec![Volume {
            name: "h".into(),
            host_path: Some(HostPathVolumeSource {
                path: dir.path().join("absent").display().to_string(),
                type_: Some("Directory".into()),
            }),
            ..Default::default()
        }]);
        assert!(matches!(
            prepare(&not_dir, dir.path(), &sources()),
            Err(Error::HostPathType { .. })
        ));
        let unsupported = pod(vec![Volume {
            name: "nfs".into(),
            ..Default::default()
        }]);
        assert!(matches!(
            prepare(&unsupported, dir.path(), &sources()),
            Err(Error::Unsupported(_))
        ));
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "ghost".into(),
                mount_path: "/x".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(matches!(
            mount(&c, dir.path(), &BTreeMap::new()),
            Err(Error::NoSuchVolume { .. })
        ));
    }

    #[test]
    fn a_bound_claim_is_its_volume_directory_and_an_unbound_one_waits() {
        let dir = tempfile::tempdir().unwrap();
        let claim = |name: &str| {
            pod(vec![Volume {
                name: "data".into(),
                persistent_volume_claim: Some(
                    k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                        claim_name: name.into(),
                        read_only: None,
                    },
                ),
                ..Default::default()
            }])
        };
        let data = dir.path().join("storage/pvc-1_default_data-web-0");
        let mut s = sources();
        s.claims.insert("bound".into(), Ok(data.clone()));
        s.claims.insert(
            "pending".into(),
            Err("persistentvolumeclaim \"pending\" is not bound".into()),
        );
        let vols = prepare(&claim("bound"), dir.path(), &s).unwrap().paths;
        assert_eq!(vols["data"], data);
        assert!(data.is_dir(), "the node makes the directory");
        match prepare(&claim("pending"), dir.path(), &s) {
            Err(Error::ClaimNotReady { volume, message }) => {
                assert_eq!(volume, "data");
                assert!(message.contains("is not bound"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            prepare(&claim("missing"), dir.path(), &s),
            Err(Error::ClaimNotReady { .. })
        ));
    }
}
