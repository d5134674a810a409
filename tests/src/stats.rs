//! Small statistics for the benchmarks: percentiles of a sorted sample.

/// The `p` percentile (0.0–1.0) of `sorted` by nearest rank; 0 for an empty sample.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}
