//! Resource amounts the scheduler adds up: quantities parsed to integers (millicores, bytes), a
//! pod's effective request, and the "non-zero" request the priorities use for pods that request
//! nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The CPU a container without a CPU request counts as in the priorities (millicores), so that
/// best-effort pods still spread (`DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory a container without a memory request counts as in the priorities (bytes,
/// `DefaultMemoryRequest`).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// CPU and memory: what a node offers or what pods request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resource {
    /// CPU in millicores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
}

impl Resource {
    /// Component-wise sum.
    pub fn add(&mut self, other: Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
    }

    /// Component-wise difference.
    pub fn sub(&mut self, other: Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
    }

    /// Component-wise maximum.
    pub fn max(self, other: Resource) -> Resource {
        Resource {
            milli_cpu: self.milli_cpu.max(other.milli_cpu),
            memory: self.memory.max(other.memory),
        }
    }

    /// The cpu and memory of a resource list (`requests`, `allocatable`, `overhead`); absent
    /// entries and unparsable quantities count as zero.
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Resource {
        let Some(list) = list else {
            return Resource::default();
        };
        Resource {
            milli_cpu: list
                .get("cpu")
                .map_or(0, |q| milli_value(&q.0).unwrap_or(0)),
            memory: list.get("memory").map_or(0, |q| value(&q.0).unwrap_or(0)),
        }
    }
}

/// What a pod asks of a node: its effective request, and the same with defaults filled in for
/// containers that request nothing (for the priorities).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodRequests {
    /// The effective request (`computePodResourceRequest`): the sum over app containers, at
    /// least the largest init container, plus the pod overhead.
    pub request: Resource,
    /// The sum over app containers with [`DEFAULT_MILLI_CPU_REQUEST`] and
    /// [`DEFAULT_MEMORY_REQUEST`] standing in for absent requests.
    pub non_zero: Resource,
}

impl PodRequests {
    /// The requests of a pod.
    pub fn of(pod: &Pod) -> PodRequests {
        let Some(spec) = pod.spec.as_ref() else {
            return PodRequests::default();
        };
        let mut request = Resource::default();
        let mut non_zero = Resource::default();
        for c in &spec.containers {
            let r = container_requests(c);
            request.add(Resource::from_list(r));
            non_zero.add(non_zero_requests(r));
        }
        for c in spec.init_containers.iter().flatten() {
            request = request.max(Resource::from_list(container_requests(c)));
        }
        request.add(Resource::from_list(spec.overhead.as_ref()));
        PodRequests { request, non_zero }
    }
}

fn container_requests(c: &Container) -> Option<&BTreeMap<String, Quantity>> {
    c.resources.as_ref().and_then(|r| r.requests.as_ref())
}

/// A container's requests with the defaults for absent cpu or memory (`GetNonzeroRequests`):
/// an explicit zero stays zero.
fn non_zero_requests(requests: Option<&BTreeMap<String, Quantity>>) -> Resource {
    let get = |name: &str| requests.and_then(|r| r.get(name));
    Resource {
        milli_cpu: get("cpu").map_or(DEFAULT_MILLI_CPU_REQUEST, |q| {
            milli_value(&q.0).unwrap_or(0)
        }),
        memory: get("memory").map_or(DEFAULT_MEMORY_REQUEST, |q| value(&q.0).unwrap_or(0)),
    }
}

pub use skiff_meta::quantity::{milli_value, value};

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn container(requests: &[(&str, &str)]) -> Container {
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(
                    requests
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_request_sums_containers_and_takes_the_largest_init_container() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![
                    container(&[("cpu", "100m"), ("memory", "1Gi")]),
                    container(&[("cpu", "200m")]),
                ],
                init_containers: Some(vec![container(&[("cpu", "1"), ("memory", "10Mi")])]),
                overhead: Some([("cpu".to_string(), Quantity("10m".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = PodRequests::of(&pod);
        assert_eq!(
            r.request,
            Resource {
                milli_cpu: 1010,
                memory: 1 << 30
            }
        );
        // The second container has no memory request: 200 MiB stands in for the priorities.
        assert_eq!(
            r.non_zero,
            Resource {
                milli_cpu: 300,
                memory: (1 << 30) + DEFAULT_MEMORY_REQUEST
            }
        );
    }

    #[test]
    fn best_effort_pod_requests_nothing_but_counts_defaults_for_priorities() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![Container::default()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = PodRequests::of(&pod);
        assert_eq!(r.request, Resource::default());
        assert_eq!(
            r.non_zero,
            Resource {
                milli_cpu: DEFAULT_MILLI_CPU_REQUEST,
                memory: DEFAULT_MEMORY_REQUEST
            }
        );
    }
}
