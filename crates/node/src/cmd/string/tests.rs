//! String command tests through the node's real entry point, replies compared byte for byte.

use bytes::Bytes;

use crate::buggify::Buggify;
use crate::client::ConnId;
use crate::config::Config;
use crate::node::{Input, Micros, Node, Output};

const T0: u64 = 1_700_000_000_000;

struct Harness {
    node: Node,
    now_ms: u64,
}

impl Harness {
    fn new() -> Harness {
        let now = Micros::from_millis(T0);
        let mut node = Node::new(Config::default(), 7, Buggify::disabled(), now);
        node.handle(
            now,
            Input::Connected {
                conn: ConnId(1),
                peer_addr: "127.0.0.1:1".into(),
                local_addr: "127.0.0.1:6379".into(),
            },
        );
        Harness { node, now_ms: T0 }
    }

    fn send_raw(&mut self, args: &[&[u8]]) -> Vec<u8> {
        let args = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        self.node.handle(
            Micros::from_millis(self.now_ms),
            Input::Request {
                conn: ConnId(1),
                args,
            },
        );
        let mut out = Vec::new();
        while let Some(o) = self.node.poll_output() {
            if let Output::Write { data, .. } = o {
                out.extend_from_slice(&data);
            }
        }
        out
    }

    /// Sends a command given as whitespace-separated words.
    fn cmd(&mut self, line: &str) -> Vec<u8> {
        let words: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
        self.send_raw(&words)
    }

    #[track_caller]
    fn check(&mut self, line: &str, expected: &[u8]) {
        let got = self.cmd(line);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected),
            "reply to {line:?}"
        );
    }

    #[track_caller]
    fn check_raw(&mut self, args: &[&[u8]], expected: &[u8]) {
        let got = self.send_raw(args);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected),
            "reply to {args:?}"
        );
    }

    fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
    }
}

/// Differential helper: runs the commands in `$LATTICE_CMDS` (one per line, arguments split by
/// tabs, `\xHH` escapes) and writes each raw reply, hex-encoded, to `$LATTICE_OUT`.
#[test]
#[ignore]
fn replay_commands_file() {
    let (Ok(input), Ok(output)) = (std::env::var("LATTICE_CMDS"), std::env::var("LATTICE_OUT"))
    else {
        return;
    };
    let text = std::fs::read_to_string(input).unwrap();
    let mut h = Harness::new();
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        let args: Vec<Vec<u8>> = line.split('\t').map(unescape).collect();
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let reply = h.send_raw(&refs);
        lines.push(reply.iter().map(|b| format!("{b:02x}")).collect::<String>());
    }
    std::fs::write(output, lines.join("\n") + "\n").unwrap();
}

fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() + 0 && b[i + 1] == b'x' {
            out.push(u8::from_str_radix(&s[i + 2..i + 4], 16).unwrap());
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}
