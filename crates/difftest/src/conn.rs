//! A blocking RESP2 client connection: one command out, one reply in.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lattice_resp::{decode_frame, encode_frame, Frame};

use crate::reply::Reply;

pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    out: BytesMut,
    broken: Option<String>,
}

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_command(args: &[Vec<u8>], out: &mut BytesMut) {
    let frame = Frame::Array(
        args.iter()
            .map(|a| Frame::Bulk(Bytes::copy_from_slice(a)))
            .collect(),
    );
    encode_frame(&frame, out);
}

impl Conn {
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<Conn> {
        let sa = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
        let stream = TcpStream::connect_timeout(&sa, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
            out: BytesMut::with_capacity(1024),
            broken: None,
        })
    }

    /// Sends one command and reads its reply. A transport failure becomes [`Reply::Io`] and
    /// poisons the connection (every later call returns the same failure).
    pub fn call(&mut self, args: &[Vec<u8>]) -> Reply {
        if let Some(e) = &self.broken {
            return Reply::Io(format!("connection already failed: {e}"));
        }
        match self.call_inner(args) {
            Ok(r) => r,
            Err(e) => {
                let msg = e.to_string();
                self.broken = Some(msg.clone());
                Reply::Io(msg)
            }
        }
    }

    fn call_inner(&mut self, args: &[Vec<u8>]) -> io::Result<Reply> {
        self.out.clear();
        encode_command(args, &mut self.out);
        self.stream.write_all(&self.out)?;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match decode_frame(&mut self.buf) {
                Ok(Some(frame)) => {
                    if !self.buf.is_empty() {
                        // One command, one reply: anything extra means the server sent two.
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{} unexpected bytes after the reply", self.buf.len()),
                        ));
                    }
                    return Ok(Reply::from(frame));
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("undecodable reply: {e:?}"),
                    ))
                }
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_bulk_array() {
        let mut out = BytesMut::new();
        encode_command(&[b"GET".to_vec(), b"".to_vec()], &mut out);
        assert_eq!(&out[..], b"*2\r\n$3\r\nGET\r\n$0\r\n\r\n");
    }
}
