//! Percentiles of latency samples.

use std::time::Duration;

/// Median, p90 and p99 of a set of samples, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Summary {
    /// Number of samples.
    pub(crate) n: usize,
    /// 50th percentile, ms.
    pub(crate) median: f64,
    /// 90th percentile, ms.
    pub(crate) p90: f64,
    /// 99th percentile, ms.
    pub(crate) p99: f64,
}

/// The nearest-rank `p`-th percentile (0 < p <= 100) of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1000.0
}

impl Summary {
    /// Summarises `samples` (in any order).
    pub(crate) fn of(samples: &[Duration]) -> Summary {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        Summary {
            n: sorted.len(),
            median: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
        }
    }

    /// The JSON form.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "n": self.n,
            "median_ms": round3(self.median),
            "p90_ms": round3(self.p90),
            "p99_ms": round3(self.p99),
        })
    }
}

/// Rounds to three decimals (microseconds, for figures in ms).
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The median of a few figures (of repeated benchmark rounds).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let s = Summary::of(&samples);
        assert_eq!((s.n, s.median, s.p90, s.p99), (100, 50.0, 90.0, 99.0));
        let one = Summary::of(&[Duration::from_millis(7)]);
        assert_eq!((one.median, one.p99), (7.0, 7.0));
    }

    #[test]
    fn median_of_rounds() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
