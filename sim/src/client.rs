//! Workload clients: what each simulated client knows and decides on its own side of the
//! network. A client behaves like a pipelining Redis client: it connects to a node, sends
//! batches of commands, decodes replies from its byte stream, gives up on a connection whose
//! oldest request is stuck for too long (closing it and reconnecting after a backoff), and
//! tracks which of its requests expect a reply (CLIENT REPLY OFF/SKIP) so it knows what is
//! outstanding. Checking the replies is the world's job (it owns the model's expectations).

use std::collections::{BTreeSet, VecDeque};

use bytes::{BufMut, Bytes, BytesMut};

use crate::workload::{ScanArgs, Tag};

/// The client's view of CLIENT REPLY.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    SkipNext,
}

/// A request waiting for its reply.
#[derive(Debug)]
pub struct Pending {
    pub sent_at: u64,
    pub tag: Tag,
}

pub struct Client {
    /// The node this client prefers; it moves elsewhere now and then.
    pub home: usize,
    /// The open connection, if any.
    pub conn: Option<u64>,
    /// No more requests on this connection (QUIT or garbage sent): wait for the close.
    pub closing: bool,
    pub reconnect_at: u64,
    pub pending: VecDeque<Pending>,
    pub mode: ReplyMode,
    /// Where the current SCAN iteration continues (cursor, arguments), if one is under way.
    pub scan_next: Option<(Bytes, ScanArgs)>,
    pub scan_busy: bool,
    /// MULTI sent and neither EXEC nor DISCARD since: commands are being queued.
    pub in_multi: bool,
    /// Subscriptions the client asked for (`c:` channels, `p:` patterns) and has not
    /// given up, which is exactly what the node holds: (un)subscribe always runs.
    pub subs: BTreeSet<Vec<u8>>,
    /// Earliest time the next batch may be sent (think time).
    pub next_send_at: u64,
    /// A wake-up event is queued for this time.
    pub wake_at: Option<u64>,
    /// The client reads nothing from its connection before this time (a slow reader).
    pub read_paused_until: u64,
    /// Stats.
    pub replies: u64,
    pub last_reply_at: u64,
    pub connects: u64,
    pub timeouts: u64,
}

impl Client {
    pub fn new(home: usize) -> Client {
        Client {
            home,
            conn: None,
            closing: false,
            reconnect_at: 0,
            pending: VecDeque::new(),
            mode: ReplyMode::On,
            scan_next: None,
            scan_busy: false,
            in_multi: false,
            subs: BTreeSet::new(),
            next_send_at: 0,
            wake_at: None,
            read_paused_until: 0,
            replies: 0,
            last_reply_at: 0,
            connects: 0,
            timeouts: 0,
        }
    }

    /// Forgets the connection (closed, reset or abandoned).
    pub fn drop_conn(&mut self) {
        self.conn = None;
        self.closing = false;
        self.pending.clear();
        self.mode = ReplyMode::On;
        self.scan_next = None;
        self.scan_busy = false;
        self.in_multi = false;
        self.subs.clear();
    }

    /// Follows what a request sent does to the connection's transaction and subscriptions
    /// (the workload keeps (un)subscribe out of transactions, so these are exact).
    pub fn track(&mut self, args: &[Bytes]) {
        let name = args[0].to_ascii_lowercase();
        let queued = self.in_multi
            && !matches!(
                &name[..],
                b"exec" | b"discard" | b"multi" | b"watch" | b"quit" | b"reset"
            );
        if queued {
            return;
        }
        let (prefix, sub): (&[u8], bool) = match &name[..] {
            b"multi" if args.len() == 1 => {
                self.in_multi = true;
                return;
            }
            b"exec" => {
                self.in_multi = false;
                return;
            }
            b"discard" if args.len() == 1 => {
                self.in_multi = false;
                return;
            }
            b"reset" => {
                self.in_multi = false;
                self.subs.clear();
                return;
            }
            b"subscribe" => (b"c:", true),
            b"psubscribe" => (b"p:", true),
            b"unsubscribe" => (b"c:", false),
            b"punsubscribe" => (b"p:", false),
            _ => return,
        };
        let named = |a: &Bytes| [prefix, &a[..]].concat();
        if sub {
            self.subs.extend(args[1..].iter().map(named));
        } else if args.len() == 1 {
            self.subs.retain(|s| !s.starts_with(prefix));
        } else {
            for a in &args[1..] {
                self.subs.remove(&named(a));
            }
        }
    }

    /// Records a request sent at `now`: whether it expects a reply follows CLIENT REPLY.
    pub fn sent(&mut self, now: u64, tag: Tag) {
        let replies = match self.mode {
            ReplyMode::On => !matches!(tag, Tag::ReplyOff | Tag::ReplySkip),
            // Redis clears the skip before CLIENT REPLY ON answers, but not before RESET does.
            ReplyMode::SkipNext => matches!(tag, Tag::ReplyOn),
            // ON and RESET clear OFF before they answer.
            ReplyMode::Off => matches!(tag, Tag::ReplyOn | Tag::Reset),
        };
        self.mode = match (&tag, self.mode) {
            (Tag::ReplyOff, _) => ReplyMode::Off,
            (Tag::ReplySkip, ReplyMode::Off) => ReplyMode::Off,
            (Tag::ReplySkip, _) => ReplyMode::SkipNext,
            (Tag::ReplyOn | Tag::Reset, _) => ReplyMode::On,
            (_, ReplyMode::SkipNext) => ReplyMode::On,
            (_, m) => m,
        };
        if matches!(tag, Tag::Quit | Tag::Garbage) {
            self.closing = true;
        }
        if matches!(tag, Tag::Scan(_)) {
            self.scan_busy = true;
            self.scan_next = None;
        }
        if replies {
            self.pending.push_back(Pending { sent_at: now, tag });
        } else if matches!(tag, Tag::Scan(_)) {
            // A SCAN whose reply is suppressed ends this iteration.
            self.scan_busy = false;
        }
    }
}

/// Encodes a request: RESP multibulk, or an inline command line.
pub fn encode(args: &[Bytes], inline: bool, out: &mut BytesMut) {
    if inline {
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                out.put_u8(b' ');
            }
            out.extend_from_slice(a);
        }
        out.extend_from_slice(b"\r\n");
        return;
    }
    header(out, b'*', args.len());
    for a in args {
        header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// `<prefix><n>\r\n` without allocating.
fn header(out: &mut BytesMut, prefix: u8, n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.put_u8(prefix);
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_mode_mirror() {
        let mut c = Client::new(0);
        c.sent(1, Tag::Plain);
        c.sent(2, Tag::ReplySkip);
        c.sent(3, Tag::Plain); // skipped
        c.sent(4, Tag::Plain);
        c.sent(5, Tag::ReplyOff);
        c.sent(6, Tag::Plain); // off
        c.sent(7, Tag::ReplyOn);
        let at: Vec<u64> = c.pending.iter().map(|p| p.sent_at).collect();
        assert_eq!(at, vec![1, 4, 7]);
        assert_eq!(c.mode, ReplyMode::On);
    }

    #[test]
    fn encodes_resp_and_inline() {
        let mut out = BytesMut::new();
        let args = [Bytes::from_static(b"GET"), Bytes::from_static(b"k1")];
        encode(&args, false, &mut out);
        assert_eq!(&out[..], b"*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n");
        out.clear();
        encode(&args, true, &mut out);
        assert_eq!(&out[..], b"GET k1\r\n");
    }
}
