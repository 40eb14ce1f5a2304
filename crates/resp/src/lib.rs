//! RESP2 and RESP3 codec.
//!
//! Three jobs, one module each:
//! - [`request`]: incremental parsing of client requests (multibulk or inline, as telnet sends
//!   them) with Redis's limits. This is the hot path of every connection.
//! - [`frame`] / [`decode`]: the full RESP3 frame model and a check-then-parse decoder, used by
//!   clients (the simulator, the differential tester) and by tests.
//! - [`write`]: reply encoders that append straight into a connection's output buffer, so a
//!   reply never becomes an intermediate [`Frame`] on the server's hot path.

pub mod decode;
pub mod frame;
pub mod request;
pub mod write;

pub use decode::decode_frame;
pub use frame::{encode_frame, Frame};
pub use request::{Limits, ProtocolError, RequestParser};
pub use write::{Protocol, ReplyWriter};
