//! `--against-redis PORT`: runs the workload against a real redis-server on one connection,
//! one command at a time, and checks every reply with the reference model (the model's `now` is
//! the local wall clock, so replies that depend on the exact millisecond may differ by one).
//! This validates the model itself against Redis 7.0; the simulation then holds the node to it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use lattice_resp::{decode_frame, Frame};

use crate::check::{Check, ScanState, Verifier};
use crate::client::encode;
use crate::model::Model;
use crate::rng::Rand;
use crate::trace::show_frame;
use crate::workload::{Gen, Tag, FAMILIES};

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

fn send(s: &mut TcpStream, args: &[Bytes]) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    encode(args, false, &mut out);
    s.write_all(&out)
}

fn read_frame(s: &mut TcpStream, rx: &mut BytesMut) -> std::io::Result<Frame> {
    loop {
        if let Some(f) = decode_frame(rx).map_err(|e| std::io::Error::other(e.to_string()))? {
            return Ok(f);
        }
        let mut buf = [0u8; 65536];
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::other("connection closed"));
        }
        rx.extend_from_slice(&buf[..n]);
    }
}

fn roundtrip(s: &mut TcpStream, rx: &mut BytesMut, args: &[Bytes]) -> std::io::Result<Frame> {
    send(s, args)?;
    read_frame(s, rx)
}

/// Returns the number of mismatches.
pub fn run(port: u16, seed: u64, ops: u64) -> std::io::Result<u64> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_nodelay(true)?;
    let mut rx = BytesMut::new();
    let b = |x: &str| Bytes::from(x.to_string());
    roundtrip(&mut s, &mut rx, &[b("FLUSHALL")])?;
    roundtrip(&mut s, &mut rx, &[b("CONFIG"), b("SET"), b("hz"), b("10")])?;
    let Frame::Integer(id) = roundtrip(&mut s, &mut rx, &[b("CLIENT"), b("ID")])? else {
        return Err(std::io::Error::other("CLIENT ID"));
    };
    let info = roundtrip(&mut s, &mut rx, &[b("CLIENT"), b("INFO")])?;
    let text = String::from_utf8_lossy(info.as_bytes().unwrap_or_default()).into_owned();
    let addr = text
        .split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap_or_default()
        .to_string();
    let mut model = Model::new();
    let conn = id as u64;
    model.connect(conn, addr.clone());
    let mut verifier = Verifier::new(true);
    let mut seen = ScanState::default();
    let mut rng = Rand::new(seed);
    let mut scan_next: Option<(Bytes, crate::workload::ScanArgs)> = None;
    let mut bad = 0;
    let mut history: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    // Every family but pub/sub messages between connections (one connection here).
    let weights = [6, 4, 3, 2, 3, 3, 3, 3, 8, 3, 3];
    let mut tracker = crate::client::Client::new(0);
    // The open transaction queued a command whose reply depends on the exact clock.
    let mut clocked_in_tx = false;
    for _ in 0..ops {
        let fam = if tracker.in_multi && rng.pct(25) {
            crate::workload::TX_FAMILY
        } else {
            rng.weighted(&weights)
        };
        let mut g = Gen {
            rng: &mut rng,
            client_now_ms: now_us() / 1000,
            conn_id: conn,
            conn_addr: &addr,
            scan_next: scan_next.as_ref(),
            scan_busy: tracker.in_multi,
            disruptive: false,
            in_multi: tracker.in_multi,
            subscribed: !tracker.subs.is_empty(),
            replies_on: true,
        };
        let cmd = (FAMILIES[fam].gen)(&mut g);
        // One request, one reply: keep CLIENT REPLY and RESET (which would reset the protocol
        // the model tracks just the same, but forget names) simple.
        if matches!(
            cmd.tag,
            Tag::ReplyOff | Tag::ReplySkip | Tag::Garbage | Tag::Quit
        ) {
            continue;
        }
        // Lattice has one database where Redis has sixteen: SELECT 1 / COPY .. DB 1 differ by
        // design.
        let name = String::from_utf8_lossy(&cmd.args[0]).to_ascii_lowercase();
        let db_arg = cmd.args.iter().any(|a| a.eq_ignore_ascii_case(b"db"));
        if (name == "select" && &cmd.args[1][..] != b"0") || (name == "copy" && db_arg) {
            continue;
        }
        tracker.track(&cmd.args);
        let before = now_us();
        let applied = model.apply(conn, before, &cmd.args);
        send(&mut s, &cmd.args)?;
        // Frames for this connection: its pushes (any order within a group), then the reply.
        let mut expected: Vec<(Check, u64)> = applied
            .pushes
            .into_iter()
            .filter(|p| p.conn == conn)
            .map(|p| (p.check, p.group))
            .collect();
        let reply = applied.reply;
        let mut got = Frame::Null;
        let mut failed = None;
        while !expected.is_empty() {
            let f = read_frame(&mut s, &mut rx)?;
            let g = expected[0].1;
            let run = if g == 0 {
                1
            } else {
                expected.iter().take_while(|e| e.1 == g).count()
            };
            let i = (0..run)
                .find(|&i| verifier.verify(&expected[i].0, &f, &mut seen).is_ok())
                .unwrap_or(0);
            let (c, _) = expected.remove(i);
            if let Err(why) = verifier.verify(&c, &f, &mut seen) {
                failed.get_or_insert(format!("push: {why}"));
            }
            got = f;
        }
        if reply.is_some() {
            got = read_frame(&mut s, &mut rx)?;
        }
        if applied.settle {
            model.settle(&got, before);
        }
        let shown: Vec<String> = cmd
            .args
            .iter()
            .map(|a| crate::trace::escape(a, 60))
            .collect();
        history.push_back(format!("{} -> {}", shown.join(" "), show_frame(&got)));
        if history.len() > 40 {
            history.pop_front();
        }
        let result = match (failed, reply) {
            (Some(why), _) => Err(why),
            (None, None) => continue,
            (None, Some(check)) => verifier.verify(&check, &got, &mut seen),
        };
        const CLOCKED: [&str; 5] = ["time", "pttl", "pexpiretime", "ttl", "expiretime"];
        if tracker.in_multi && CLOCKED.contains(&name.as_str()) {
            clocked_in_tx = true;
        }
        let clocked = CLOCKED.contains(&name.as_str()) || (name == "exec" && clocked_in_tx);
        if !tracker.in_multi {
            clocked_in_tx = false;
        }
        if let Err(why) = result {
            // The model's clock is ours, not the server's: these differ by a millisecond or so.
            if clocked {
                continue;
            }
            bad += 1;
            let args: Vec<String> = cmd
                .args
                .iter()
                .map(|a| crate::trace::escape(a, 60))
                .collect();
            println!("MISMATCH `{}`: {why}", args.join(" "));
            if bad == 1 {
                println!("  commands before it, oldest first:");
                for h in &history {
                    println!("    {h}");
                }
            }
            if bad >= 30 {
                break;
            }
        }
        if let Tag::Scan(a) = cmd.tag {
            scan_next = match &got {
                Frame::Array(p) => match p.first() {
                    Some(Frame::Bulk(c)) if &c[..] != b"0" => Some((c.clone(), a)),
                    _ => None,
                },
                _ => None,
            };
        }
    }
    Ok(bad)
}
