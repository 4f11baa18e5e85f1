//! CrashLoopBackOff: how long a container that exited waits before its next start.
//!
//! The first restart waits `base` (10 s), each further one twice as long up to `max` (5 min); a
//! run that lasted `reset_after` (10 min) or more starts the sequence over.

use std::time::Duration;

/// Backoff settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The first delay.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
    /// A run at least this long resets the delay to `base`.
    pub reset_after: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }
}

impl Config {
    /// The delay before restarting a container that ran for `ran_for`, given the delay used
    /// before its previous restart (`None` if it never restarted or the sequence was reset).
    pub fn next(&self, previous: Option<Duration>, ran_for: Duration) -> Duration {
        match previous {
            Some(prev) if ran_for < self.reset_after => (prev * 2).min(self.max),
            _ => self.base.min(self.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_base_to_max() {
        let cfg = Config::default();
        let short = Duration::from_secs(1);
        let mut delays = Vec::new();
        let mut prev = None;
        for _ in 0..7 {
            let d = cfg.next(prev, short);
            delays.push(d.as_secs());
            prev = Some(d);
        }
        assert_eq!(delays, vec![10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn a_long_run_resets() {
        let cfg = Config::default();
        let d = cfg.next(Some(Duration::from_secs(300)), Duration::from_secs(600));
        assert_eq!(d, Duration::from_secs(10));
        let d = cfg.next(Some(Duration::from_secs(300)), Duration::from_secs(599));
        assert_eq!(d, Duration::from_secs(300));
    }
}
