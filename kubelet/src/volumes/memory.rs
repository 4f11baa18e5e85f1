//! `emptyDir` volumes with `medium: Memory`: a tmpfs mounted on the volume's directory, so what
//! the pod writes there never reaches the disk and counts against memory, as with the Kubernetes
//! kubelet.
//!
//! The tmpfs is as large as `sizeLimit`, else as the pod's memory limit when every container has
//! one (what the pod may use anyway), else the kernel's default (half the RAM). Mounting needs
//! `CAP_SYS_ADMIN`: a kubelet without it (the process runtime run by a user) keeps the volume on
//! disk and says so, rather than refusing every chart that asks for a memory-backed scratch dir.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, Pod};

use crate::spec::parse_quantity;

/// The size of the pod's tmpfs for `source`, in bytes; `None` leaves it to the kernel.
pub fn size(pod: &Pod, source: &EmptyDirVolumeSource) -> Option<u64> {
    if let Some(limit) = &source.size_limit {
        return parse_quantity(&limit.0).map(|b| b.ceil().max(0.0) as u64);
    }
    pod_memory_limit(pod)
}

/// The pod's memory limit as the scheduler and the cgroups see it: the sum of its containers'
/// limits, or the largest init container's if that is more (they run one at a time); `None`
/// when a container has no limit.
fn pod_memory_limit(pod: &Pod) -> Option<u64> {
    let spec = pod.spec.as_ref()?;
    let limit = |c: &Container| -> Option<u64> {
        let q = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
        parse_quantity(&q.0).map(|b| b.ceil().max(0.0) as u64)
    };
    let mut sum = 0u64;
    for c in &spec.containers {
        sum = sum.saturating_add(limit(c)?);
    }
    let mut init = 0u64;
    for c in spec.init_containers.iter().flatten() {
        init = init.max(limit(c)?);
    }
    Some(sum.max(init))
}

/// Whether `path` is a mount point: on another device than its parent.
pub fn is_mount_point(path: &Path) -> bool {
    let (Ok(own), Some(Ok(parent))) = (
        std::fs::metadata(path),
        path.parent().map(std::fs::metadata),
    ) else {
        return false;
    };
    own.dev() != parent.dev()
}

/// Mounts a tmpfs of `size` bytes on the directory `path` unless one is there already (a
/// kubelet restart finds its pods' mounts in place). `Ok(Some(why))` when it cannot mount for
/// lack of privilege and the directory stays on disk.
pub fn ensure(path: &Path, size: Option<u64>) -> std::io::Result<Option<String>> {
    if is_mount_point(path) {
        return Ok(None);
    }
    // The mode every emptyDir has, so containers running as any user can write to it.
    let mut data = String::from("mode=0777");
    if let Some(size) = size {
        data.push_str(&format!(",size={size}"));
    }
    let data = std::ffi::CString::new(data).expect("no NUL in mount options");
    use rustix::mount::{MountFlags, mount};
    match mount(
        "tmpfs",
        path,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        data.as_c_str(),
    ) {
        Ok(()) => Ok(None),
        Err(e) if e == rustix::io::Errno::PERM || e == rustix::io::Errno::ACCESS => {
            Ok(Some(format!(
                "not mounted as tmpfs ({e}): the kubelet needs CAP_SYS_ADMIN, so it is on disk"
            )))
        }
        Err(e) => Err(e.into()),
    }
}

/// Unmounts the memory-backed volumes under a pod's directory (`<pod dir>/volumes/empty-dir`),
/// before the directory is removed. Detached, so a process still inside does not keep it.
pub fn unmount_all(pod_dir: &Path) {
    let Ok(dir) = std::fs::read_dir(pod_dir.join("volumes/empty-dir")) else {
        return;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        if is_mount_point(&path)
            && let Err(err) = rustix::mount::unmount(&path, rustix::mount::UnmountFlags::DETACH)
        {
            tracing::warn!(%err, path = %path.display(), "unmounting a memory-backed emptyDir");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn container(memory: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            resources: memory.map(|m| ResourceRequirements {
                limits: Some(BTreeMap::from([("memory".into(), Quantity(m.into()))])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: Some(init),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn size_is_the_limit_else_the_pods_memory_limit() {
        let limited = EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(Quantity("16Mi".into())),
        };
        let unlimited = EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: None,
        };
        let two = pod(
            vec![container(Some("64Mi")), container(Some("32Mi"))],
            vec![container(Some("128Mi"))],
        );
        assert_eq!(size(&two, &limited), Some(16 << 20));
        // The init container's 128Mi is more than the app containers' 96Mi together.
        assert_eq!(size(&two, &unlimited), Some(128 << 20));
        let small_init = pod(
            vec![container(Some("64Mi")), container(Some("32Mi"))],
            vec![container(Some("1Mi"))],
        );
        assert_eq!(size(&small_init, &unlimited), Some(96 << 20));
        // One container without a limit: the kernel's default.
        let open = pod(vec![container(Some("64Mi")), container(None)], vec![]);
        assert_eq!(size(&open, &unlimited), None);
        assert_eq!(size(&open, &limited), Some(16 << 20));
    }

    /// A tmpfs is mounted once, found again, and gone after `unmount_all`. Needs root (the
    /// kubelet's own privilege); without it the fallback is what is checked.
    #[test]
    fn a_tmpfs_is_mounted_found_again_and_unmounted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("volumes/empty-dir/cache");
        std::fs::create_dir_all(&path).unwrap();
        match ensure(&path, Some(1 << 20)).unwrap() {
            None => {
                assert!(is_mount_point(&path));
                let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
                let line = mounts
                    .lines()
                    .find(|l| l.split(' ').nth(1) == Some(path.to_str().unwrap()))
                    .expect("in /proc/self/mounts");
                assert!(line.starts_with("tmpfs "), "{line}");
                assert!(line.contains("size=1024k"), "{line}");
                // Found in place: not mounted twice.
                assert_eq!(ensure(&path, Some(1 << 20)).unwrap(), None);
                let count = std::fs::read_to_string("/proc/self/mounts")
                    .unwrap()
                    .lines()
                    .filter(|l| l.split(' ').nth(1) == Some(path.to_str().unwrap()))
                    .count();
                assert_eq!(count, 1);
                unmount_all(dir.path());
                assert!(!is_mount_point(&path));
            }
            Some(why) => {
                assert!(why.contains("CAP_SYS_ADMIN"), "{why}");
                assert!(!is_mount_point(&path));
            }
        }
    }
}
