//! Scenario errors: each names the file, the 1-based line and the field, and the message says
//! what is wrong; serde's own errors are turned into the same shape.

use std::fmt;
use std::path::{Path, PathBuf};

use super::SpanMap;

/// A scenario error: the file, the 1-based line, the field path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: PathBuf,
    pub line: usize,
    pub field: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file.display(), self.line)?;
        if !self.field.is_empty() {
            write!(f, "field `{}`: ", self.field)?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// Turns a serde error into one naming the line and the field.
pub(super) fn de_error(e: &toml::de::Error, spans: &SpanMap, file: &Path) -> ScenarioError {
    let message = e.message().trim().to_string();
    let missing = message
        .starts_with("missing field")
        .then(|| backticked(&message))
        .flatten();
    let (line, field) = match (e.span(), missing) {
        (Some(span), Some(name)) => {
            // serde points at the table that lacks the field: name the field inside it.
            let table = spans.table_at(&span).unwrap_or("");
            let field = if table.is_empty() {
                name
            } else {
                format!("{table}.{name}")
            };
            (spans.line_of_offset(span.start), field)
        }
        (Some(span), None) => {
            let field = spans
                .path_at(span.start)
                .or_else(|| spans.element_at(span.start))
                .unwrap_or_default()
                .to_string();
            (spans.line_of_offset(span.start), field)
        }
        (None, missing) => (1, missing.unwrap_or_default()),
    };
    ScenarioError {
        file: file.to_path_buf(),
        line,
        field,
        message,
    }
}

fn backticked(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let end = start + message[start..].find('`')?;
    Some(message[start..end].to_string())
}
