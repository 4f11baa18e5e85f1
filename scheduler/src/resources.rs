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

/// A quantity in thousandths of its unit, rounded up (`Quantity.MilliValue`): "500m" is 500,
/// "2" is 2000, "1Ki" is 1,024,000. `None` when it does not parse or overflows.
pub fn milli_value(s: &str) -> Option<i64> {
    scaled(s, 3)
}

/// A quantity in its unit, rounded up (`Quantity.Value`): "1Gi" is 1,073,741,824, "100m" is 1.
pub fn value(s: &str) -> Option<i64> {
    scaled(s, 0)
}

/// `s` times 10^`exp10`, rounded up to an integer.
fn scaled(s: &str, exp10: u32) -> Option<i64> {
    let s = s.trim();
    let (negative, s) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." {
        return None;
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // The value as mantissa * 10^(dec_exp) * 2^(bin_exp).
    let mut mantissa: i128 = 0;
    for c in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(c - b'0'))?;
    }
    let mut dec_exp = -(frac_part.len() as i32) + exp10 as i32;
    let mut bin_exp = 0u32;
    match suffix {
        "" => {}
        "n" => dec_exp -= 9,
        "u" => dec_exp -= 6,
        "m" => dec_exp -= 3,
        "k" => dec_exp += 3,
        "M" => dec_exp += 6,
        "G" => dec_exp += 9,
        "T" => dec_exp += 12,
        "P" => dec_exp += 15,
        "E" => dec_exp += 18,
        "Ki" => bin_exp = 10,
        "Mi" => bin_exp = 20,
        "Gi" => bin_exp = 30,
        "Ti" => bin_exp = 40,
        "Pi" => bin_exp = 50,
        "Ei" => bin_exp = 60,
        e if e.starts_with(['e', 'E']) => dec_exp += e[1..].parse::<i32>().ok()?,
        _ => return None,
    }
    mantissa = mantissa.checked_mul(1i128.checked_shl(bin_exp)?)?;
    let result = if dec_exp >= 0 {
        mantissa.checked_mul(10i128.checked_pow(dec_exp as u32)?)?
    } else {
        let divisor = 10i128.checked_pow((-dec_exp) as u32)?;
        // Round up, away from zero for positive amounts as Kubernetes does.
        (mantissa + divisor - 1) / divisor
    };
    let result = if negative { -result } else { result };
    i64::try_from(result).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    #[test]
    fn quantities_parse_to_milli_and_plain_values() {
        assert_eq!(milli_value("500m"), Some(500));
        assert_eq!(milli_value("2"), Some(2000));
        assert_eq!(milli_value("1.5"), Some(1500));
        assert_eq!(milli_value("0.1"), Some(100));
        assert_eq!(value("1Gi"), Some(1 << 30));
        assert_eq!(value("128Mi"), Some(128 << 20));
        assert_eq!(value("1G"), Some(1_000_000_000));
        assert_eq!(value("1e3"), Some(1000));
        assert_eq!(value("100m"), Some(1), "rounds up");
        assert_eq!(milli_value("1Ki"), Some(1_024_000));
        assert_eq!(value("-1"), Some(-1));
        assert_eq!(value("abc"), None);
        assert_eq!(value("1Qi"), None);
        assert_eq!(value("99999999999E"), None, "overflow is None");
    }

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
