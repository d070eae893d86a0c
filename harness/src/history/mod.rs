//! `history.jsonl` (design §5): one JSON object per line, in time order. [`records`] holds the
//! line types (also read back by the report renderers); [`writer`] appends them from a thread of
//! its own so the sink never waits on the disk.

pub mod records;
pub mod writer;

pub use records::*;
pub use writer::{HistoryWriter, Recorder};
