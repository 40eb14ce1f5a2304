//! Command implementations, one module per Redis command group. Each module exports its table
//! as `COMMANDS`; [`FAMILIES`] is the list the node builds its lookup table from.

use crate::ctx::CommandSpec;

pub mod acl;
pub mod cluster;
pub mod connection;
pub mod databases;
pub mod dump;
pub mod expire;
pub mod function;
pub mod geo;
pub mod hash;
pub mod hll;
pub mod keys;
pub mod latency;
pub mod list;
pub mod lolwut;
pub mod memory;
pub mod monitor;
pub mod pause;
pub mod pubsub;
pub mod role;
pub mod script;
pub mod server;
pub mod set;
pub mod shard_pubsub;
pub mod slowlog;
pub mod sort;
pub mod stream;
pub mod string;
pub mod tracking;
pub mod tx;
pub(crate) mod typed;
pub mod zset;

pub const FAMILIES: &[&[CommandSpec]] = &[
    connection::COMMANDS,
    databases::COMMANDS,
    server::COMMANDS,
    cluster::COMMANDS,
    keys::COMMANDS,
    expire::COMMANDS,
    dump::COMMANDS,
    string::COMMANDS,
    hll::COMMANDS,
    list::COMMANDS,
    hash::COMMANDS,
    sort::COMMANDS,
    set::COMMANDS,
    zset::COMMANDS,
    geo::COMMANDS,
    tx::COMMANDS,
    pubsub::COMMANDS,
    stream::COMMANDS,
    script::COMMANDS,
    function::COMMANDS,
    slowlog::COMMANDS,
    latency::COMMANDS,
    role::COMMANDS,
    lolwut::COMMANDS,
    shard_pubsub::COMMANDS,
    memory::COMMANDS,
    monitor::COMMANDS,
    acl::COMMANDS,
];

#[cfg(test)]
mod tests {
    use super::FAMILIES;
    use crate::command::Flag;
    use crate::ctx::CommandSpec;

    fn every_spec() -> Vec<&'static CommandSpec> {
        let mut all = Vec::new();
        for family in FAMILIES {
            for spec in family.iter() {
                all.push(spec);
                all.extend(spec.subcommands.iter());
            }
        }
        all
    }

    /// The rules the table carries beside Redis's flags hold what the code relying on them
    /// assumes: a command logged as itself changes only its first key; the replication rules
    /// are on write commands; the flag bits agree with the flag names COMMAND shows.
    #[test]
    fn rule_flags_fit_their_commands() {
        for spec in every_spec() {
            let named = crate::command::flag_bits(spec.flags);
            assert_eq!(
                spec.bits & named,
                named,
                "{}: a named flag lost its bit",
                spec.name
            );
            if spec.has(Flag::LoggedAsCommand) {
                assert!(spec.is_write(), "{} is logged but not a write", spec.name);
                assert_eq!(spec.keys, (1, 1, 1), "{} names other keys", spec.name);
            }
            for rule in [
                Flag::Increments,
                Flag::IncrementsWithIncrOption,
                Flag::KeepsValue,
            ] {
                if spec.has(rule) {
                    assert!(spec.is_write(), "{}: {rule:?} on a read", spec.name);
                }
            }
            if spec.has(Flag::RunsInsideMulti) || spec.has(Flag::AllowedWhileSubscribed) {
                assert!(
                    !spec.is_write(),
                    "{}: a write bypasses the policy",
                    spec.name
                );
            }
        }
        let count = |f: Flag| every_spec().iter().filter(|s| s.has(f)).count();
        assert_eq!(count(Flag::RunsInsideMulti), 6);
        assert_eq!(count(Flag::AllowedWhileSubscribed), 9);
    }
}
