//! DynamoDB at the HTTP level, as the link proxy sees it: where one request ends in a byte
//! stream (HTTP/1.1 with `Content-Length`, as the AWS SDK sends it), which operation it is
//! (`X-Amz-Target`), which requests a [`DdbFault`] picks, and the exact error answers DynamoDB
//! gives when it throttles or fails. Pure functions; the proxy does the I/O.

use crate::scenario::menu::{DdbError, DdbFault};

/// One complete request at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of head plus body.
    pub len: usize,
    /// `UpdateItem`, `Scan`, … from `X-Amz-Target: DynamoDB_20120810.UpdateItem`.
    pub operation: Option<String>,
}

/// Heads longer than this are not HTTP requests of the SDK: the proxy stops parsing.
const MAX_HEAD: usize = 64 * 1024;

/// The request at the start of `buf`: `Ok(None)` until all of it has arrived; `Err` when the
/// stream is not framed by `Content-Length` (the proxy then passes bytes through unparsed).
pub fn frame(buf: &[u8]) -> Result<Option<RequestHead>, String> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Err(format!("no end of HTTP head within {MAX_HEAD} bytes"))
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "HTTP head is not UTF-8")?;
    let mut content_length = 0usize;
    let mut operation = None;
    for line in head.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            content_length = value
                .parse()
                .map_err(|_| format!("bad Content-Length {value:?}"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!(
                "Transfer-Encoding {value:?} is not framed by length"
            ));
        } else if name.eq_ignore_ascii_case("x-amz-target") {
            operation = value.rsplit_once('.').map(|(_, op)| op.to_string());
        }
    }
    let len = end + 4 + content_length;
    Ok((buf.len() >= len).then_some(RequestHead { len, operation }))
}

/// Whether `fault` picks a request of `operation`, given a uniform draw in `[0, 1)`.
pub fn picks(fault: &DdbFault, operation: Option<&str>, draw: f64) -> bool {
    let op_matches = match &fault.operation {
        None => true,
        Some(want) => operation == Some(want.as_str()),
    };
    op_matches && draw < fault.fraction
}

/// The full HTTP response DynamoDB sends for `error` (status, JSON 1.0 body, `__type` as the
/// service writes it), so the SDK's own error parsing and retry classification run.
pub fn error_response(error: DdbError, request_id: u64) -> Vec<u8> {
    let (status, type_prefix, message) = match error {
        DdbError::Throttling => (
            "400 Bad Request",
            "com.amazon.coral.availability",
            "Rate of requests exceeds the allowed throughput.",
        ),
        DdbError::ProvisionedThroughputExceeded => (
            "400 Bad Request",
            "com.amazonaws.dynamodb.v20120810",
            "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.",
        ),
        DdbError::InternalServerError => (
            "500 Internal Server Error",
            "com.amazonaws.dynamodb.v20120810",
            "Internal server error",
        ),
    };
    let body = format!(
        r#"{{"__type":"{type_prefix}#{}","message":"{message}"}}"#,
        error.code()
    );
    format!(
        "HTTP/1.1 {status}\r\nx-amzn-RequestId: HARNESSFAULT{request_id:020}\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::menu::DdbFaultKind;

    const REQ: &str = "POST / HTTP/1.1\r\nx-amz-target: DynamoDB_20120810.UpdateItem\r\ncontent-length: 5\r\n\r\n{...}";

    #[test]
    fn frames_a_request_only_once_complete() {
        let bytes = REQ.as_bytes();
        assert_eq!(frame(&bytes[..20]), Ok(None));
        assert_eq!(frame(&bytes[..bytes.len() - 1]), Ok(None));
        let mut two = bytes.to_vec();
        two.extend_from_slice(b"POST / HTTP/1.1\r\n");
        let head = frame(&two).unwrap().unwrap();
        assert_eq!(head.len, bytes.len());
        assert_eq!(head.operation.as_deref(), Some("UpdateItem"));
        let chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(frame(chunked.as_bytes()).is_err());
    }

    #[test]
    fn picks_by_operation_and_fraction() {
        let fault = DdbFault {
            kind: DdbFaultKind::Unanswered,
            fraction: 0.5,
            operation: Some("Scan".into()),
        };
        assert!(picks(&fault, Some("Scan"), 0.2));
        assert!(!picks(&fault, Some("Scan"), 0.7));
        assert!(!picks(&fault, Some("UpdateItem"), 0.0));
        assert!(!picks(&fault, None, 0.0));
    }

    #[test]
    fn error_bodies_are_dynamodbs() {
        let text = String::from_utf8(error_response(DdbError::Throttling, 7)).unwrap();
        assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
        assert!(text.contains("com.amazon.coral.availability#ThrottlingException"));
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        let text = String::from_utf8(error_response(DdbError::InternalServerError, 7)).unwrap();
        assert!(text.starts_with("HTTP/1.1 500 "));
        let v: serde_json::Value =
            serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(
            v["__type"],
            "com.amazonaws.dynamodb.v20120810#InternalServerError"
        );
    }
}
