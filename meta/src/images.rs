//! Image references: the pull policy an image gets when a container does not say.
//!
//! The API server defaults `imagePullPolicy` on pods it stores; the kubelet needs the same rule
//! for static pods, which it runs from their manifests without the API server's defaulting.

/// `Always` when the image has no tag or the `latest` tag (and no digest), else `IfNotPresent`.
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.is_empty() || image.contains('@') {
        return "IfNotPresent";
    }
    // The tag follows the last ':' after the last '/' (a ':' before it is a registry port).
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        None => "Always",
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_decide_the_policy() {
        for (image, policy) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("busybox:1.36", "IfNotPresent"),
            ("127.0.0.1:5000/busybox", "Always"),
            ("127.0.0.1:5000/busybox:test", "IfNotPresent"),
            ("busybox@sha256:abc", "IfNotPresent"),
            ("", "IfNotPresent"),
        ] {
            assert_eq!(default_pull_policy(image), policy, "{image}");
        }
    }
}
