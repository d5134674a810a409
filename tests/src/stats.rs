//! Small statistics for the benchmarks and tests: percentiles of a sorted sample, and the
//! most intervals open at once.

/// The `p` percentile (0.0–1.0) of `sorted` by nearest rank; 0 for an empty sample.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The most of `intervals` (start, end) open at once. At equal instants an end sorts before a
/// start: touching intervals do not overlap.
pub fn max_overlap(
    intervals: impl IntoIterator<Item = (std::time::Instant, std::time::Instant)>,
) -> usize {
    let mut edges: Vec<(std::time::Instant, i32)> = Vec::new();
    for (start, end) in intervals {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut current, mut max) = (0i32, 0i32);
    for (_, delta) in edges {
        current += delta;
        max = max.max(current);
    }
    usize::try_from(max).unwrap_or(0)
}
