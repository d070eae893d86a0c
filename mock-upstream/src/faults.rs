//! Connection faults the harness can switch on for a while: periodic drops, frame delay, refusal
//! of new connections. This module holds the fault state and the drop ticker; the connection code
//! asks it what applies now.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::time::{Duration, Instant};

use crate::feed::Feed;

/// A set of connection faults (the body of `POST /admin/faults`). Setting one replaces the
/// previous set; an empty object `{}` clears every fault.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Close every open connection every this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_every_secs: Option<f64>,
    /// Hold every event frame until this many milliseconds after it was produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Answer new WebSocket requests with 503 instead of upgrading.
    #[serde(default)]
    pub refuse_new: bool,
    /// How long the faults last, in seconds; absent = until replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_secs: Option<f64>,
}

impl Faults {
    /// Refuses values that cannot be honoured, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        let positive = |name: &str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x > 0.0 && x < 1e9) => Err(format!(
                "{name} {x} is invalid: give a number of seconds > 0"
            )),
            _ => Ok(()),
        };
        positive("drop_every_secs", self.drop_every_secs)?;
        positive("duration_secs", self.duration_secs)?;
        Ok(())
    }
}

/// The active fault set and when it ends.
#[derive(Default)]
pub(crate) struct FaultState {
    inner: Mutex<Active>,
}

#[derive(Default)]
struct Active {
    faults: Faults,
    until: Option<Instant>,
    /// Bumped on every change so an old drop ticker stops.
    generation: u64,
}

impl FaultState {
    /// The faults in force now (empty once expired).
    pub fn current(&self) -> Faults {
        let active = self.inner.lock().expect("fault lock");
        match active.until {
            Some(until) if Instant::now() >= until => Faults::default(),
            _ => active.faults.clone(),
        }
    }

    /// The frame delay in force now, if any.
    pub fn delay(&self) -> Option<Duration> {
        self.current()
            .delay_ms
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
    }

    /// Replaces the fault set and starts its drop ticker when one is asked for.
    pub fn set(self: &Arc<Self>, faults: Faults, feed: &Arc<Feed>) {
        let until = faults
            .duration_secs
            .map(|s| Instant::now() + Duration::from_secs_f64(s));
        let generation = {
            let mut active = self.inner.lock().expect("fault lock");
            active.faults = faults.clone();
            active.until = until;
            active.generation += 1;
            active.generation
        };
        if let Some(every) = faults.drop_every_secs {
            let every = Duration::from_secs_f64(every);
            let (state, feed) = (self.clone(), feed.clone());
            tokio::spawn(async move {
                let mut next = Instant::now() + every;
                loop {
                    tokio::time::sleep_until(next).await;
                    let still_mine =
                        state.inner.lock().expect("fault lock").generation == generation;
                    if !still_mine || until.is_some_and(|u| Instant::now() >= u) {
                        return;
                    }
                    let dropped: usize = feed.streams.iter().map(|s| s.drop_connections()).sum();
                    tracing::info!(dropped, "fault: dropped every connection");
                    next += every;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let f: Faults =
            serde_json::from_str(r#"{"drop_every_secs":2,"delay_ms":50,"duration_secs":10}"#)
                .unwrap();
        assert_eq!(f.drop_every_secs, Some(2.0));
        assert!(!f.refuse_new);
        f.validate().unwrap();
        let f: Faults = serde_json::from_str(r#"{"drop_every_secs":0}"#).unwrap();
        assert!(f.validate().unwrap_err().contains("drop_every_secs 0"));
        assert!(serde_json::from_str::<Faults>(r#"{"dropevery":1}"#).is_err());
        assert_eq!(
            serde_json::from_str::<Faults>("{}").unwrap(),
            Faults::default()
        );
    }

    #[tokio::test]
    async fn faults_apply_and_expire() {
        let state = Arc::new(FaultState::default());
        let feed = Arc::new(Feed::new(&["a".into()], 0.0, 0, 1));
        let faults = Faults {
            delay_ms: Some(30),
            refuse_new: true,
            duration_secs: Some(3600.0),
            ..Faults::default()
        };
        state.set(faults.clone(), &feed);
        assert_eq!(state.current(), faults);
        assert_eq!(state.delay(), Some(Duration::from_millis(30)));
        state.set(
            Faults {
                refuse_new: true,
                duration_secs: Some(0.05),
                ..Faults::default()
            },
            &feed,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while state.current() != Faults::default() {
            assert!(Instant::now() < deadline, "faults never expired");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(state.delay(), None);
    }
}
