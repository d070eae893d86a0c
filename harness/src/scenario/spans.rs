//! Where each key of a TOML document sits, so semantic errors (found after serde is done) can
//! still name the line. Paths read like `faults[2].target`.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// One key of the document: its dotted path, the span of the key and the span of its value.
#[derive(Debug, Clone)]
struct Entry {
    path: String,
    key: Range<usize>,
    value: Range<usize>,
}

/// A map from key paths to source positions, built from the raw TOML text.
#[derive(Debug, Clone, Default)]
pub struct SpanMap {
    entries: Vec<Entry>,
    line_starts: Vec<usize>,
    /// Span of each `[[array]]` element (by path such as `faults[1]`).
    elements: Vec<(String, Range<usize>)>,
}

impl SpanMap {
    /// Builds the map; a document that does not parse yields an empty map (serde reports that).
    pub fn new(text: &str) -> Self {
        let mut map = SpanMap {
            line_starts: std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
            ..SpanMap::default()
        };
        if let Ok(doc) = DeTable::parse(text) {
            map.walk_table("", doc.get_ref());
        }
        map
    }

    fn walk_table(&mut self, prefix: &str, table: &DeTable<'_>) {
        for (key, value) in table.iter() {
            let path = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            self.entries.push(Entry {
                path: path.clone(),
                key: key.span(),
                value: value.span(),
            });
            self.walk_value(&path, value);
        }
    }

    fn walk_value(&mut self, path: &str, value: &Spanned<DeValue<'_>>) {
        match value.get_ref() {
            DeValue::Table(t) => self.walk_table(path, t),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let element = format!("{path}[{i}]");
                    self.elements.push((element.clone(), item.span()));
                    self.walk_value(&element, item);
                }
            }
            _ => {}
        }
    }

    /// 1-based line of a byte offset.
    pub fn line_of_offset(&self, offset: usize) -> usize {
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Line of the key at `path`, else of the nearest enclosing key or array element, else 1.
    pub fn line(&self, path: &str) -> usize {
        let mut current = path.to_string();
        loop {
            if let Some(e) = self.entries.iter().find(|e| e.path == current) {
                return self.line_of_offset(e.key.start);
            }
            if let Some((_, span)) = self.elements.iter().find(|(p, _)| *p == current) {
                return self.line_of_offset(span.start);
            }
            match current.rfind(['.', '[']) {
                Some(i) => current.truncate(i),
                None => return 1,
            }
        }
    }

    /// The path of the innermost key whose key or value span holds `offset`.
    pub fn path_at(&self, offset: usize) -> Option<&str> {
        self.entries
            .iter()
            .filter(|e| e.key.contains(&offset) || e.value.contains(&offset))
            .min_by_key(|e| {
                let len = |r: &Range<usize>| r.end - r.start;
                if e.key.contains(&offset) {
                    len(&e.key)
                } else {
                    len(&e.value)
                }
            })
            .map(|e| e.path.as_str())
    }

    /// The path of the table or array element whose value span is exactly `span` ("" for the
    /// document itself): where serde points a "missing field" error.
    pub fn table_at(&self, span: &Range<usize>) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.value == *span)
            .map(|e| e.path.as_str())
            .or_else(|| {
                self.elements
                    .iter()
                    .find(|(_, s)| s == span)
                    .map(|(p, _)| p.as_str())
            })
    }

    /// The path of the innermost array element (such as `faults[1]`) holding `offset`.
    pub fn element_at(&self, offset: usize) -> Option<&str> {
        self.elements
            .iter()
            .filter(|(_, span)| span.contains(&offset))
            .min_by_key(|(_, span)| span.end - span.start)
            .map(|(p, _)| p.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "name = \"x\"\n\n[lease]\nseconds = 3\n\n[[faults]]\nat_seconds = 1\n\n[[faults]]\nat_seconds = 2\ntarget = \"worker-9\"\n";

    #[test]
    fn finds_lines_of_nested_keys_and_array_elements() {
        let map = SpanMap::new(DOC);
        assert_eq!(map.line("name"), 1);
        assert_eq!(map.line("lease.seconds"), 4);
        assert_eq!(map.line("faults[1].target"), 11);
        assert_eq!(map.line("faults[0].at_seconds"), 7);
        // A field that is absent falls back to its table.
        assert_eq!(map.line("lease.renew_seconds"), 3);
    }

    #[test]
    fn finds_the_key_at_an_offset() {
        let map = SpanMap::new(DOC);
        let offset = DOC.find("\"worker-9\"").unwrap() + 2;
        assert_eq!(map.path_at(offset), Some("faults[1].target"));
    }
}
