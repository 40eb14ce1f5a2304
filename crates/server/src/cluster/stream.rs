//! A replica link's byte stream: plain TCP, or TLS over it (`tls-replication`).
//!
//! The handshake, the framing and the heartbeats are the same over both; only the bytes on the
//! wire differ. An enum rather than a boxed trait object, so the plaintext link pays one
//! predictable branch per call and no allocation.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The rustls configurations of TLS replica links.
#[derive(Clone, Debug)]
pub struct LinkTls {
    /// Incoming links: the dialer must present a certificate signed by the CA.
    pub acceptor: Arc<rustls::ServerConfig>,
    /// Outgoing links: presents this node's certificate, checks the acceptor's against the CA.
    pub dialer: Arc<rustls::ClientConfig>,
}

pub enum LinkStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl LinkStream {
    /// Wraps an accepted socket: over TLS, the TLS handshake runs first (the caller bounds it
    /// in time). An error means the dialer is not one of ours (or not speaking TLS).
    pub async fn accept(socket: TcpStream, tls: Option<&LinkTls>) -> io::Result<LinkStream> {
        match tls {
            None => Ok(LinkStream::Plain(socket)),
            Some(t) => {
                let s = tokio_rustls::TlsAcceptor::from(t.acceptor.clone())
                    .accept(socket)
                    .await?;
                Ok(LinkStream::Tls(Box::new(s.into())))
            }
        }
    }

    /// Wraps a dialed socket to `seed`; over TLS, runs the TLS handshake.
    pub async fn dial(
        socket: TcpStream,
        tls: Option<&LinkTls>,
        seed: &str,
    ) -> io::Result<LinkStream> {
        match tls {
            None => Ok(LinkStream::Plain(socket)),
            Some(t) => {
                let s = tokio_rustls::TlsConnector::from(t.dialer.clone())
                    .connect(crate::tls::link_server_name(seed), socket)
                    .await?;
                Ok(LinkStream::Tls(Box::new(s.into())))
            }
        }
    }

    /// Writes what the stream takes now without waiting; `WouldBlock` when it took nothing.
    /// Over TLS, encrypted bytes the socket did not take stay in the session (bounded by
    /// rustls's buffer limit) and go out with the next write or flush.
    pub fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            LinkStream::Plain(s) => s.try_write(data),
            LinkStream::Tls(s) => {
                let waker = noop_waker();
                let mut cx = Context::from_waker(&waker);
                let mut pinned = Pin::new(s.as_mut());
                let written = match pinned.as_mut().poll_write(&mut cx, data) {
                    Poll::Ready(r) => r?,
                    Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
                };
                match pinned.poll_flush(&mut cx) {
                    Poll::Ready(Err(e)) => Err(e),
                    _ => Ok(written),
                }
            }
        }
    }
}

/// A waker that does nothing: [`LinkStream::try_write`] polls once and never waits.
fn noop_waker() -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable, Waker};
    fn clone(_: *const ()) -> RawWaker {
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    fn nothing(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, nothing, nothing, nothing);
    // SAFETY: every function of the table ignores the (null) data pointer.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

impl AsyncRead for LinkStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            LinkStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for LinkStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            LinkStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            LinkStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            LinkStream::Plain(s) => s.is_write_vectored(),
            LinkStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_flush(cx),
            LinkStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            LinkStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
