//! Worker names: `worker-N`, N counting from 1, also each worker's `OWNER_ID`. A leaf that the
//! scenario model, the fleet and the fault injector all name workers through, so none of them
//! imports another for it.

/// The name of the `n`-th worker (1-based), also its `OWNER_ID`.
pub fn worker_name(n: usize) -> String {
    format!("worker-{n}")
}

/// `worker-7` → 7; `None` for anything that is not a worker name.
pub fn parse_worker(name: &str) -> Option<usize> {
    name.strip_prefix("worker-")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_parses_back_to_its_number() {
        assert_eq!(worker_name(7), "worker-7");
        assert_eq!(parse_worker(&worker_name(12)), Some(12));
        assert_eq!(parse_worker("worker-x"), None);
        assert_eq!(parse_worker("w-1"), None);
    }
}
