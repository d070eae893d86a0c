//! ECS rolling-deploy batching: a pure calculation of the steps ECS takes to replace a service's
//! tasks under `minimumHealthyPercent` / `maximumPercent`. It sits beside the scenario model
//! because validation refuses a deploy that cannot progress, and the injector follows the steps.

/// One step of an ECS rolling deploy: start `start` new tasks (and wait until they are ready),
/// then stop `stop` old ones (SIGTERM, SIGKILL after the stop timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeployStep {
    pub start: usize,
    pub stop: usize,
}

/// The steps ECS takes to replace `n` tasks with `minimum_healthy_percent` and `maximum_percent`:
/// never more than `floor(n·max/100)` running, never fewer than `ceil(n·min/100)` healthy.
/// With 100/200 that is one step: start all `n`, then stop all `n`. `None` when the two
/// percentages leave no room to make progress (100/100).
pub fn deploy_batches(n: usize, min_percent: u32, max_percent: u32) -> Option<Vec<DeployStep>> {
    let max_total = n * max_percent as usize / 100;
    let min_healthy = (n * min_percent as usize).div_ceil(100);
    let (mut old, mut new) = (n, 0usize);
    let mut steps = Vec::new();
    while old > 0 {
        let start = max_total.saturating_sub(old + new).min(n - new);
        new += start;
        let stop = old.min((old + new).saturating_sub(min_healthy));
        if start == 0 && stop == 0 {
            return None;
        }
        old -= stop;
        steps.push(DeployStep { start, stop });
    }
    if new < n {
        steps.push(DeployStep {
            start: n - new,
            stop: 0,
        });
    }
    Some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hundred_two_hundred_replaces_everything_in_one_step() {
        assert_eq!(
            deploy_batches(3, 100, 200),
            Some(vec![DeployStep { start: 3, stop: 3 }])
        );
    }

    #[test]
    fn fifty_hundred_stops_before_it_starts_and_keeps_half_healthy() {
        let steps = deploy_batches(4, 50, 100).unwrap();
        assert_eq!(steps[0], DeployStep { start: 0, stop: 2 });
        assert_eq!(steps.iter().map(|s| s.start).sum::<usize>(), 4);
        assert_eq!(steps.iter().map(|s| s.stop).sum::<usize>(), 4);
        // Healthy never drops below 2, running never exceeds 4.
        let (mut old, mut new) = (4, 0);
        for s in steps {
            new += s.start;
            assert!(old + new <= 4);
            old -= s.stop;
            assert!(old + new >= 2);
        }
    }

    #[test]
    fn every_valid_pair_terminates_with_everything_replaced() {
        for n in 1..8 {
            for min in [0, 25, 50, 75, 100] {
                for max in [100, 125, 150, 200] {
                    match deploy_batches(n, min, max) {
                        Some(steps) => {
                            assert_eq!(steps.iter().map(|s| s.start).sum::<usize>(), n);
                            assert_eq!(steps.iter().map(|s| s.stop).sum::<usize>(), n);
                        }
                        None => assert!(
                            n * max as usize / 100 == n && (n * min as usize).div_ceil(100) == n
                        ),
                    }
                }
            }
        }
    }

    #[test]
    fn no_room_is_refused() {
        assert_eq!(deploy_batches(3, 100, 100), None);
    }
}
