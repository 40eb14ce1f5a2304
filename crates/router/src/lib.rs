//! What a driver does between a Lattice node and its system calls, as pure code.
//!
//! A node ([`lattice_node::Node`]) turns inputs into outputs; a driver has to carry those
//! outputs somewhere: replies to the connection whose batch produced them, writes for other
//! connections to the event loops serving them (in the node's order), messages to peers,
//! persistence records to the persister, and the node's next deadline to whoever runs its
//! timers. The server does this across several event-loop threads; the simulator does it for
//! simulated loops in virtual time. Both drive the [`Router`] here, so the routing the server
//! relies on (batching, mail between loops, the timer deadline, bounded connection output, when
//! a connection is read and when it is read again after its socket drained) runs
//! under simulation with every fault the simulator injects.
//!
//! No IO, clocks, threads or OS randomness: the driver passes the time in and carries out what
//! comes back (docs/ARCHITECTURE.md, "The router").

mod flow;
mod hasher;
mod mail;
mod output;
mod router;

pub use flow::{AfterWrite, ConnFlow, MailAction, PUSH_LIMIT_BYTES};
pub use hasher::IdHasher;
pub use mail::{Mail, Mailboxes, Slot};
pub use output::{OutputQueue, PushOverflow};
pub use router::{Route, Router};
