//! The supervisor's drain (SIGTERM): stop acquiring, release every stream, tell the fleet.

use super::*;

impl Supervisor {
    /// Drain: stop acquiring, ask every stream to flush and release, wait up to the budget.
    pub(super) async fn drain(mut self) -> usize {
        self.readiness.draining.store(true, Ordering::Relaxed);
        let budget = self.config.drain;
        let deadline = Instant::now() + budget;
        // Leave a little of the budget for the release writes themselves.
        let by = Instant::now() + budget.mul_f64(0.8);
        tracing::info!(
            streams = self.owned.len(),
            budget_ms = budget.as_millis() as u64,
            "draining"
        );
        // Segmented discovery marks its membership item (instead of growing the signal's set)
        // and names who takes each of its streams, before any is released: a member reading
        // the item after the signal's bump finds the streams handed to it, which may lie in
        // none of its segments.
        let mut membership = self.membership.take();
        if let Some(membership) = &mut membership {
            let streams: Vec<String> = self.owned.keys().cloned().collect();
            let handoffs = self.core.handoffs(&streams, true, lease_table::now_ms());
            let left = deadline.saturating_duration_since(Instant::now());
            let held = self.owned.len();
            membership
                .draining(
                    &self.shared.table,
                    &self.core,
                    held,
                    handoffs,
                    FLEET_TIMEOUT.min(left),
                )
                .await;
        }
        for owned in self.owned.values_mut() {
            owned.releasing = true;
            let _ = owned.control.send(Control::Release {
                by,
                reason: "drain",
            });
        }
        self.release_abandoned(deadline).await;
        // While the streams flush: tell the fleet this worker is draining, so the others stop
        // counting it as a live owner (their share grows to cover its streams) and look at once.
        // (Even with nothing owned: a starved worker's last bids would otherwise count it live.)
        let mark = membership.is_none().then_some(true);
        self.fleet_bump(mark, deadline).await;
        let mut unconfirmed = 0;
        let mut unannounced = 0;
        loop {
            let joined = tokio::time::timeout_at(deadline, self.tasks.join_next()).await;
            let mut batch = match joined {
                Ok(Some(first)) => vec![first],
                Ok(None) => break,
                Err(_) => {
                    unconfirmed += self.tasks.len();
                    tracing::error!(
                        left = self.tasks.len(),
                        "drain budget exhausted; leaving the rest to expire"
                    );
                    self.tasks.abort_all();
                    break;
                }
            };
            // Streams flush at about the same time: announce their releases together.
            while let Some(more) = self.tasks.try_join_next() {
                batch.push(more);
            }
            for joined in batch {
                match joined {
                    Ok((stream_id, exit)) => {
                        self.owned.remove(&stream_id);
                        if exit == Exit::Released {
                            unannounced += 1;
                        } else {
                            unconfirmed += 1;
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "a stream task was cancelled while draining");
                        unconfirmed += 1;
                    }
                }
            }
            if unannounced > 0 && !self.tasks.is_empty() {
                self.fleet_bump(None, deadline).await;
                unannounced = 0;
            }
        }
        if unannounced > 0 {
            // The last releases. The draining mark stays: this worker's last bids may still
            // look fresh; the others forget it once it holds and bids nothing.
            self.fleet_bump(None, deadline + Duration::from_millis(500))
                .await;
        }
        self.shared.metrics.owned_streams.set(0);
        unconfirmed
    }

    /// Releases the streams whose acquire was abandoned at the signal, if the table names this
    /// worker for them (read consistently; the release is conditioned on the fence read).
    async fn release_abandoned(&mut self, deadline: Instant) {
        if self.acquiring.is_empty() {
            return;
        }
        let streams: Vec<String> = self.acquiring.drain().collect();
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = AWS_CALL_TIMEOUT.min(left).max(Duration::from_millis(100));
        let table = &self.shared.table;
        let released = futures_util::future::join_all(
            streams
                .iter()
                .map(|stream_id| table.release_if_mine(stream_id, timeout)),
        )
        .await;
        for (stream_id, result) in streams.iter().zip(released) {
            match result {
                Ok(true) => {
                    tracing::info!(%stream_id, "released a lease whose acquire was in flight at the signal")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(%stream_id, error = %e, "could not check a lease whose acquire was in flight at the signal; it expires instead")
                }
            }
        }
    }

    /// One fleet signal write during drain, bounded by `deadline` (a failure only costs speed:
    /// the others still find the released streams at their next scan).
    async fn fleet_bump(&self, draining: Option<bool>, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = FLEET_TIMEOUT.min(left).max(Duration::from_millis(100));
        if let Err(e) = self.shared.table.fleet_bump(draining, timeout).await {
            tracing::warn!(error = %e, "fleet signal write failed; others find the released streams at their next scan");
        }
    }
}
