//! One client connection: read, parse, execute a whole pipeline under one lock, write once.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use lattice_node::{ConnId, Input};
use lattice_resp::{Limits, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::host::{Mail, Shared};

/// Requests executed per lock acquisition at most, so one client's enormous pipeline cannot
/// starve the others for long.
const MAX_BATCH: usize = 1024;
/// Initial read buffer; grows for large requests.
const READ_CHUNK: usize = 16 * 1024;

pub async fn serve(shared: Arc<Shared>, mut socket: TcpStream) {
    let _ = socket.set_nodelay(true);
    let conn = shared.next_conn_id();
    let peer_addr = socket
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let local_addr = socket
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut own_out: Vec<Bytes> = Vec::new();
    let (mut limits, mut closing) = {
        let mut host = shared.host.lock();
        host.register(conn, tx);
        host.handle(Input::Connected {
            conn,
            peer_addr,
            local_addr,
        });
        let closing = host.drain(Some(conn), &mut own_out);
        (limits_of(&host.node), closing)
    };
    let mut parser = RequestParser::new(limits);
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK);
    let mut batch: Vec<Vec<Bytes>> = Vec::new();
    // Runs of one command in a batch, for INFO commandstats; kept across batches so a batch
    // allocates nothing for it.
    let mut runs: Vec<(&'static str, u64)> = Vec::new();

    let single_threaded = tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::CurrentThread;
    // Whether the last read brought more than one request.
    let mut pipelined = false;
    'conn: loop {
        if !own_out.is_empty() && single_threaded && pipelined {
            // Replies wait until every other connection that was ready has run, like Redis
            // writing all replies just before it sleeps, so the client can wake once for a
            // burst of replies instead of once per reply (waking a sleeping client was the
            // largest kernel cost in a profile of a pipelined load). Measured on its own in
            // alternating runs, the effect is within the noise (docs/ARCHITECTURE.md §23).
            // Only on the one-thread runtime: with several workers a yielded connection may
            // resume on another thread, and the hand-over cost more than it saved (measured:
            // a replicating node's CPU per SET rose by a quarter). And only after a pipeline:
            // for a lone request the extra task switch (about 480 instructions) cost as much
            // as the batching saved.
            tokio::task::yield_now().await;
        }
        if !own_out.is_empty() && write_all(&mut socket, &mut own_out).await.is_err() {
            break;
        }
        if closing {
            break;
        }
        let hint = parser.bytes_needed_hint();
        rbuf.reserve(hint.max(READ_CHUNK / 4));
        tokio::select! {
            // Socket first, in a fixed order: a ready read returns without polling the
            // mailbox (rarely used: pub/sub and kills), and no random number is drawn per
            // wake-up.
            biased;
            read = socket.read_buf(&mut rbuf) => {
                match read {
                    Ok(0) | Err(_) => break 'conn,
                    Ok(_) => {}
                }
                // Parse everything complete outside the lock.
                let mut protocol_error = None;
                let mut parsed = 0;
                loop {
                    match parser.parse(&mut rbuf) {
                        Ok(Some(args)) => {
                            parsed += 1;
                            batch.push(args);
                            if batch.len() >= MAX_BATCH {
                                closing |= execute(&shared, conn, &mut batch, None, &mut own_out, &mut limits, &mut runs);
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            protocol_error = Some(e.message().to_string());
                            break;
                        }
                    }
                }
                pipelined = parsed > 1;
                closing |= execute(&shared, conn, &mut batch, protocol_error, &mut own_out, &mut limits, &mut runs);
                if parser.limits() != limits {
                    parser.set_limits(limits);
                }
            }
            mail = rx.recv() => {
                match mail {
                    Some(Mail::Write(data)) => own_out.push(data),
                    Some(Mail::Close) | None => closing = true,
                }
            }
        }
    }
    let mut host = shared.host.lock();
    host.unregister(conn);
    host.handle(Input::Closed { conn });
    let mut ignored = Vec::new();
    host.drain(None, &mut ignored);
}

fn limits_of(node: &lattice_node::Node) -> Limits {
    Limits {
        max_bulk_len: node.config().proto_max_bulk_len as usize,
        ..Limits::default()
    }
}

/// Runs the parsed batch (and then a protocol error, if any) under one lock. Returns true when
/// the connection must close after writing.
fn execute(
    shared: &Shared,
    conn: ConnId,
    batch: &mut Vec<Vec<Bytes>>,
    protocol_error: Option<String>,
    own_out: &mut Vec<Bytes>,
    limits: &mut Limits,
    runs: &mut Vec<(&'static str, u64)>,
) -> bool {
    if batch.is_empty() && protocol_error.is_none() {
        return false;
    }
    let mut host = shared.host.lock();
    let now = host.now();
    // INFO commandstats time: the batch's time, from the node's clock reading at its start to
    // one more reading at its end (two clock reads per batch, not two per command), is shared
    // evenly by its commands (charged once per run of the same command, the common shape of
    // a pipeline). A wall clock stepped backwards mid-batch charges nothing.
    let started_us = now.0;
    let commands = batch.len() as u64;
    if batch.len() > 1 {
        for args in batch.iter() {
            host.node.prefetch(args);
        }
    }
    runs.clear();
    for args in batch.drain(..) {
        host.node.handle(now, Input::Request { conn, args });
        if let Some(name) = host.node.last_command(conn) {
            match runs.last_mut() {
                Some((last, n)) if *last == name => *n += 1,
                _ => runs.push((name, 1)),
            }
        }
    }
    // With no command run, `runs` is empty and nothing is charged.
    let usec = crate::host::wall_clock_us().saturating_sub(started_us);
    for &(name, n) in runs.iter() {
        let share = (usec * n).checked_div(commands).unwrap_or(0);
        host.node.charge_command_time(name, share);
    }
    if let Some(message) = protocol_error {
        host.node
            .handle(now, Input::ProtocolError { conn, message });
    }
    let close = host.drain(Some(conn), own_out);
    *limits = limits_of(&host.node);
    shared.check_timer(&host);
    close
}

async fn write_all(socket: &mut TcpStream, chunks: &mut Vec<Bytes>) -> std::io::Result<()> {
    if chunks.len() == 1 {
        socket.write_all(&chunks[0]).await?;
    } else {
        let total: usize = chunks.iter().map(|c| c.len()).sum();
        let mut joined = Vec::with_capacity(total);
        for c in chunks.iter() {
            joined.extend_from_slice(c);
        }
        socket.write_all(&joined).await?;
    }
    chunks.clear();
    Ok(())
}
