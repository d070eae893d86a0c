//! The pure decision core: whether a stream may publish, what to checkpoint, how long to back
//! off, which streams to try to acquire and how many to shed.
//!
//! Everything here is plain data in, decision out, with the clock passed in (`Instant`s and Unix
//! milliseconds) and randomness passed in as numbers. It never performs I/O, never sleeps and never
//! reads a clock, so the safety properties (no publishing past the local deadline, fences never
//! decrease, checkpoints never pass what the sink accepted) are tested exhaustively in `tests`.
//!
//! It is split by concern: [`stream`] (one owned stream's core), [`plan`] (one acquisition round
//! from one view of the table), [`owners`] (the supervisor's state across rounds: which owners
//! are live, lapsed or draining, cooldowns, the ramp, when to scan, bid or wake) and [`round`]
//! (its settings and what one round decides).

pub mod census;
mod items;
pub mod owners;
pub mod plan;
pub mod round;
pub mod schedule;
pub mod stream;
pub mod window;

pub use items::instance_alias;
pub use owners::*;
pub use plan::*;
pub use round::*;
pub use schedule::*;
pub use stream::*;
pub use window::*;

#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod segmented_tests;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod supervision_tests;
#[cfg(test)]
mod tests;
