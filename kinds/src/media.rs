//! Media ranges of HTTP `Accept` headers, as content negotiation of API responses reads them
//! (discovery versions, Tables).

/// One media range of an Accept header: the lower-cased `type/subtype` and its parameters
/// (names lower-cased, values as sent, `q` excluded).
#[derive(Debug, Clone, PartialEq)]
pub struct MediaRange {
    /// `application/json`, `*/*`, ...
    pub essence: String,
    /// Parameters such as `as=Table`, `g=meta.k8s.io`, `v=v1`.
    pub params: Vec<(String, String)>,
    /// The `q` weight (1.0 when absent).
    pub quality: f32,
}

impl MediaRange {
    /// The value of parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether a JSON body satisfies this range (`application/json`, `application/*`, `*/*`).
    pub fn accepts_json(&self) -> bool {
        matches!(
            self.essence.as_str(),
            "application/json" | "application/*" | "*/*"
        )
    }
}

/// The media ranges of an Accept header, most preferred first (by `q`, then by order).
pub fn media_ranges(accept: &str) -> Vec<MediaRange> {
    let mut ranges: Vec<MediaRange> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';');
            let essence = parts.next()?.trim().to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let mut params = Vec::new();
            let mut quality = 1.0;
            for param in parts {
                let Some((name, value)) = param.split_once('=') else {
                    continue;
                };
                let name = name.trim().to_ascii_lowercase();
                let value = value.trim().trim_matches('"').to_string();
                if name == "q" {
                    quality = value.parse().unwrap_or(1.0);
                } else {
                    params.push((name, value));
                }
            }
            Some(MediaRange {
                essence,
                params,
                quality,
            })
        })
        .collect();
    // A stable sort keeps the client's order among equal weights.
    ranges.sort_by(|a, b| b.quality.total_cmp(&a.quality));
    ranges
}
