//! Maelstrom's wire format: one JSON object per line, `{"src", "dest", "body"}`.
//!
//! Bodies stay `serde_json::Value`s: the adapter and the harness each read only the fields of
//! the message types they handle, and anything else passes through untouched.

use std::io::{self, BufRead};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Longest line either side accepts. A peer message is at most 16 MiB of node bytes, which is
/// about 22 MiB of base64; 64 MiB leaves room for the envelope while keeping one bad line from
/// exhausting memory.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Maelstrom's error codes (its protocol documentation lists them; the numbers are the
/// contract, the names are ours).
pub mod code {
    /// The request timed out: indeterminate.
    pub const TIMEOUT: i64 = 0;
    /// The addressed node does not exist: definite.
    pub const NODE_NOT_FOUND: i64 = 1;
    /// This node does not support the request type: definite.
    pub const NOT_SUPPORTED: i64 = 10;
    /// The node cannot serve the request now (e.g. before `init`): definite.
    pub const TEMPORARILY_UNAVAILABLE: i64 = 11;
    /// The request is malformed: definite.
    pub const MALFORMED_REQUEST: i64 = 12;
    /// The node failed while handling it: indeterminate.
    pub const CRASH: i64 = 13;
    /// The operation was aborted: definite.
    pub const ABORT: i64 = 14;
    /// lin-kv: the key does not exist: definite.
    pub const KEY_DOES_NOT_EXIST: i64 = 20;
    /// The key already exists: definite.
    pub const KEY_ALREADY_EXISTS: i64 = 21;
    /// cas: the current value is not `from`: definite.
    pub const PRECONDITION_FAILED: i64 = 22;
    /// A transaction conflict: definite.
    pub const TXN_CONFLICT: i64 = 30;

    /// Whether an error with this code guarantees that the operation did not take effect.
    /// Unknown codes are treated as indeterminate: that is the cautious reading.
    pub fn is_definite(code: i64) -> bool {
        matches!(
            code,
            NODE_NOT_FOUND
                | NOT_SUPPORTED
                | TEMPORARILY_UNAVAILABLE
                | MALFORMED_REQUEST
                | ABORT
                | KEY_DOES_NOT_EXIST
                | KEY_ALREADY_EXISTS
                | PRECONDITION_FAILED
                | TXN_CONFLICT
        )
    }
}

/// One Maelstrom message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub src: String,
    pub dest: String,
    pub body: Value,
}

impl Message {
    /// Parses one line; the error says what is wrong, for the log.
    pub fn parse(line: &str) -> Result<Message, String> {
        let msg: Message =
            serde_json::from_str(line).map_err(|e| format!("not a Maelstrom message: {e}"))?;
        if !msg.body.is_object() {
            return Err("message body is not a JSON object".into());
        }
        Ok(msg)
    }

    /// The message as one line, without the trailing newline.
    pub fn to_line(&self) -> String {
        // Serialising a struct of strings and a Value cannot fail.
        serde_json::to_string(self).expect("a message always serialises")
    }

    pub fn body_type(&self) -> &str {
        self.body.get("type").and_then(Value::as_str).unwrap_or("")
    }

    pub fn msg_id(&self) -> Option<u64> {
        self.body.get("msg_id").and_then(Value::as_u64)
    }

    pub fn in_reply_to(&self) -> Option<u64> {
        self.body.get("in_reply_to").and_then(Value::as_u64)
    }

    /// A reply to this message from `from`: `body` gets `in_reply_to` (when the request had a
    /// `msg_id`) and `msg_id`.
    pub fn reply(&self, from: &str, msg_id: u64, mut body: Map<String, Value>) -> Message {
        if let Some(id) = self.msg_id() {
            body.insert("in_reply_to".into(), json!(id));
        }
        body.insert("msg_id".into(), json!(msg_id));
        Message {
            src: from.to_string(),
            dest: self.src.clone(),
            body: Value::Object(body),
        }
    }

    /// An error reply with one of [`code`]'s codes.
    pub fn error_reply(&self, from: &str, msg_id: u64, code: i64, text: &str) -> Message {
        let mut body = Map::new();
        body.insert("type".into(), json!("error"));
        body.insert("code".into(), json!(code));
        body.insert("text".into(), json!(text));
        self.reply(from, msg_id, body)
    }
}

/// What [`read_bounded_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    Line(String),
    /// A line longer than the limit (skipped through its newline) or not UTF-8.
    Bad(String),
    Eof,
}

/// Reads one line of at most `max_bytes` (newline excluded). An overlong line is consumed to its
/// end and reported, so one bad line never stalls or exhausts the reader.
pub fn read_bounded_line<R: BufRead>(reader: &mut R, max_bytes: usize) -> io::Result<LineRead> {
    let mut buf = Vec::new();
    let mut overlong = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            if buf.is_empty() && !overlong {
                return Ok(LineRead::Eof);
            }
            break;
        }
        let (chunk, consumed, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        if !overlong {
            if buf.len() + chunk.len() > max_bytes {
                overlong = true;
                buf = Vec::new();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        reader.consume(consumed);
        if done {
            break;
        }
    }
    if overlong {
        return Ok(LineRead::Bad(format!(
            "line longer than {max_bytes} bytes skipped"
        )));
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    match String::from_utf8(buf) {
        Ok(s) => Ok(LineRead::Line(s)),
        Err(_) => Ok(LineRead::Bad("line is not UTF-8".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines_skip_overlong_ones_and_continue() {
        let data = b"short\nthis one is far too long\nok\r\nlast".to_vec();
        let mut r = io::BufReader::with_capacity(4, &data[..]);
        assert_eq!(
            read_bounded_line(&mut r, 10).unwrap(),
            LineRead::Line("short".into())
        );
        assert!(matches!(
            read_bounded_line(&mut r, 10).unwrap(),
            LineRead::Bad(_)
        ));
        assert_eq!(
            read_bounded_line(&mut r, 10).unwrap(),
            LineRead::Line("ok".into())
        );
        assert_eq!(
            read_bounded_line(&mut r, 10).unwrap(),
            LineRead::Line("last".into())
        );
        assert_eq!(read_bounded_line(&mut r, 10).unwrap(), LineRead::Eof);
    }

    #[test]
    fn parse_rejects_non_messages() {
        assert!(Message::parse("{").is_err());
        assert!(Message::parse(r#"{"src":"a","dest":"b","body":3}"#).is_err());
        let m = Message::parse(r#"{"src":"c1","dest":"n1","body":{"type":"echo","msg_id":7}}"#)
            .unwrap();
        assert_eq!(m.body_type(), "echo");
        assert_eq!(m.msg_id(), Some(7));
        let r = m.error_reply("n1", 1, code::NOT_SUPPORTED, "no");
        assert_eq!(r.dest, "c1");
        assert_eq!(r.in_reply_to(), Some(7));
        assert_eq!(r.body["code"], 10);
    }
}
