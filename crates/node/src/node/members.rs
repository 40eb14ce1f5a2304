//! Live membership in the shell (ARCHITECTURE, "Live membership"): member records gossiped on
//! the peer links, the placement recomputed from the `up` members, and the moves a change
//! calls for: a draining holder streams each group it no longer owns to every owner, drops it
//! once all of them acknowledged, and a gaining owner with no draining holder left asks a
//! holding owner for the group.

use bytes::Bytes;

use super::Node;
use crate::cluster::{Groups, Member, Status};
use crate::repl::wire::{self, Body};
use lattice_crdt::NodeId;

/// How often the moves a membership calls for are checked again from the timer (a link came
/// up, an ask went unanswered): each check costs a pass over the 256 groups.
pub const MEMBER_CHECK_MS: u64 = 200;
/// A gaining owner asks a holder for a group again after this long without a stream.
const ASK_AGAIN_MS: u64 = 2_000;

/// The wire form of a member's record.
pub(super) fn to_wire(id: u32, m: &Member) -> wire::Member {
    wire::Member {
        id,
        host: m.host.clone(),
        port: u32::from(m.port),
        cluster_port: u32::from(m.cluster_port),
        status: m.status as u32,
        epoch: m.epoch,
        held: m.held.to_bytes(),
    }
}

pub(super) fn from_wire(m: wire::Member) -> Option<(u32, Member)> {
    Some((
        m.id,
        Member {
            host: m.host,
            port: u16::try_from(m.port).ok()?,
            cluster_port: u16::try_from(m.cluster_port).ok()?,
            status: Status::from_wire(m.status),
            epoch: m.epoch,
            held: Groups::from_bytes(&m.held),
        },
    ))
}

impl Node {
    /// Every member record we know, to `to`.
    pub(super) fn send_members(&mut self, to: &[NodeId]) {
        let Some(c) = self.core.cluster.as_deref() else {
            return;
        };
        let members = wire::Members {
            members: c.members.iter().map(|(id, m)| to_wire(*id, m)).collect(),
        };
        if let Some(r) = self.core.repl.as_mut() {
            for &peer in to {
                r.send_control(peer, Body::Members(members.clone()));
            }
        }
    }

    /// Our records to every live peer (after a change of ours).
    fn gossip(&mut self) {
        let ups: Vec<NodeId> = match self.core.cluster.as_deref() {
            Some(c) => c.up.iter().map(|&p| NodeId(p)).collect(),
            None => return,
        };
        self.send_members(&ups);
    }

    /// A peer's member list: merged, what was new gossiped on, and the peer answered with
    /// our list when it lacks a record we have (it asks so when it held back deltas sent under
    /// records it had not heard of, see `wire::Deltas`; a lost gossip message is repaired
    /// the same way). Ends: an answer makes the peer learn, and a list that lacks nothing is
    /// not answered.
    pub(super) fn cluster_members(&mut self, peer: NodeId, m: wire::Members) {
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return;
        };
        let theirs: std::collections::BTreeMap<u32, Member> =
            m.members.into_iter().filter_map(from_wire).collect();
        let lacks = c.lacks(&theirs);
        let learned = c.learn(theirs);
        for (id, addr) in learned.dial {
            self.core.dials.push_back((NodeId(id), addr));
        }
        if !learned.changed {
            if lacks {
                self.send_members(&[peer]);
            }
            return;
        }
        // Gossip what was new on; records only rise in rank, so this ends.
        self.gossip();
        self.membership_changed();
    }

    /// The membership changed (or a move ended): hands the replicator the placement and the
    /// keepers, starts the streams and asks that are due, drops what every owner acknowledged.
    pub(super) fn membership_changed(&mut self) {
        let now_ms = self.core.now.as_millis();
        let core = &mut self.core;
        let (Some(c), Some(r)) = (core.cluster.as_deref_mut(), core.repl.as_deref_mut()) else {
            return;
        };
        if c.placement().is_none() {
            return;
        }
        c.next_check_ms = now_ms + MEMBER_CHECK_MS;
        if std::mem::take(&mut c.dirty) {
            // A change of ours (LEAVE, FORGET) goes out before any stream it starts, so a
            // receiver knows it keeps what arrives (the link is in order).
            let ups: Vec<NodeId> = c.up.iter().map(|&p| NodeId(p)).collect();
            let members = wire::Members {
                members: c.members.iter().map(|(id, m)| to_wire(*id, m)).collect(),
            };
            for peer in ups {
                r.send_control(peer, Body::Members(members.clone()));
            }
        }
        // Drops first: a group every owner acknowledged is released.
        let draining = c.draining();
        let mut dropped = Groups::default();
        for g in draining.iter() {
            let owners = c.group_owners(g);
            let pushed = c.pushed.get(&g);
            if owners.iter().all(|o| pushed.is_some_and(|p| p.contains(o))) {
                dropped.insert(g);
            }
        }
        if !dropped.is_empty() {
            c.update_me(|me| {
                for g in dropped.iter() {
                    me.held.remove(g);
                }
            });
            for g in dropped.iter() {
                c.pushed.remove(&g);
                c.owe.remove(&g);
            }
            c.stats.groups_dropped += dropped.len() as u64;
        }
        // A leaving node that holds nothing more has left.
        if c.me().status == Status::Leaving && c.me().held.is_empty() {
            c.update_me(|me| me.status = Status::Left);
        }
        // A group nobody holds any more (its holders were forgotten) is taken as held by its
        // owners: there is nothing left to wait for.
        let incoming = c.incoming();
        let orphans: Vec<u16> = incoming
            .iter()
            .filter(|&g| {
                !c.members
                    .values()
                    .any(|m| m.status != Status::Left && m.held.contains(g))
            })
            .collect();
        if !orphans.is_empty() {
            c.update_me(|me| orphans.iter().for_each(|&g| me.held.insert(g)));
        }
        let members: std::collections::BTreeSet<u32> = c
            .members
            .iter()
            .filter(|(_, m)| m.status != Status::Left)
            .map(|(id, _)| *id)
            .collect();
        r.set_ownership(c.placement().cloned());
        r.set_keepers(
            c.extra_keepers(),
            c.incoming(),
            members,
            c.ranks(),
            c.gaining(),
        );
        if !dropped.is_empty() {
            r.drop_groups(dropped);
        }
        // Streams owed to owners a change added to groups we hold (see `Cluster::place`);
        // one that is no owner or member any more is owed nothing.
        let held = c.me().held;
        let placement = c.placement().cloned();
        let members_now = &c.members;
        c.owe.retain(|&g, owed| {
            let slot = g * lattice_placement::SLOTS_PER_GROUP;
            owed.retain(|o| {
                placement.as_ref().is_some_and(|p| p.is_owner(*o, slot))
                    && members_now.get(o).is_some_and(|m| m.status != Status::Left)
            });
            held.contains(g) && !owed.is_empty()
        });
        // An owed stream to an owner that does not hold the group yet waits while a live
        // draining holder streams it the group whole: sent once the owner holds it, it goes
        // as checks of what the owner has (`Replicator::start_move`), not as the group again.
        // With no live drainer it goes at once, whole, and may be what makes the owner hold.
        let mut to: std::collections::BTreeMap<u32, Groups> = Default::default();
        for (&g, owed) in &c.owe {
            let drained = c.drainers(g).iter().any(|d| *d != c.me && c.up.contains(d));
            for &o in owed.iter().filter(|o| c.up.contains(o)) {
                let has = c.members.get(&o).is_some_and(|m| m.held.contains(g));
                if drained && !has {
                    continue;
                }
                to.entry(o).or_default().insert(g);
            }
        }
        // Streams of what we drain, to every live owner that has not acknowledged it.
        for g in c.draining().iter() {
            for &o in c.group_owners(g) {
                if o != c.me
                    && c.up.contains(&o)
                    && !c.pushed.get(&g).is_some_and(|p| p.contains(&o))
                {
                    to.entry(o).or_default().insert(g);
                }
            }
        }
        for (peer, groups) in to {
            r.start_move(NodeId(peer), groups, now_ms, &core.db);
        }
        // Groups we gain with no live draining holder: ask a live owner that holds them.
        let mut asks: std::collections::BTreeMap<u32, Groups> = Default::default();
        for g in c.incoming().iter() {
            let live = |id: &u32| *id != c.me && c.up.contains(id);
            if c.drainers(g).iter().any(|d| *d != c.me) {
                // A draining holder streams to us unasked once its link is up; one that is
                // down keeps the group until it returns or is forgotten (then it is no
                // drainer and we ask an owner). Asking meanwhile would stream it twice.
                continue;
            }
            if c.asked_ms
                .get(&g)
                .is_some_and(|&t| t + ASK_AGAIN_MS > now_ms)
            {
                continue;
            }
            let holder = c
                .group_owners(g)
                .iter()
                .copied()
                .find(|o| live(o) && c.members.get(o).is_some_and(|m| m.held.contains(g)));
            if let Some(h) = holder {
                c.asked_ms.insert(g, now_ms);
                asks.entry(h).or_default().insert(g);
            }
        }
        let held = c.me().held;
        c.asked_ms.retain(|g, _| !held.contains(*g));
        for (peer, groups) in asks {
            r.send_control(
                NodeId(peer),
                Body::MoveAsk(wire::MoveAsk {
                    groups: groups.to_bytes(),
                }),
            );
        }
        let changed = !dropped.is_empty() || !orphans.is_empty();
        if changed {
            self.gossip();
        }
    }

    /// Streams that ended: the groups each peer acknowledged.
    pub(super) fn moves_progress(&mut self) {
        let core = &mut self.core;
        let (Some(c), Some(r)) = (core.cluster.as_deref_mut(), core.repl.as_deref_mut()) else {
            return;
        };
        let moved = r.take_moved();
        if moved.is_empty() {
            return;
        }
        for (peer, groups) in moved {
            for g in groups.iter() {
                c.pushed.entry(g).or_default().insert(peer.0);
                if let Some(owed) = c.owe.get_mut(&g) {
                    owed.remove(&peer.0);
                }
                c.stats.groups_sent += 1;
            }
        }
        self.membership_changed();
    }

    /// A stream's last slice arrived: the owned ones of its groups are held now.
    pub(super) fn move_in(&mut self, groups: Groups) {
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return;
        };
        let gained: Vec<u16> = c
            .incoming()
            .iter()
            .filter(|&g| groups.contains(g))
            .collect();
        if gained.is_empty() {
            return;
        }
        c.stats.groups_received += gained.len() as u64;
        c.update_me(|me| gained.iter().for_each(|&g| me.held.insert(g)));
        self.gossip();
        self.membership_changed();
    }

    /// A gaining owner asks for groups: stream it those we hold.
    pub(super) fn move_ask(&mut self, peer: NodeId, groups: Groups) {
        let now_ms = self.core.now.as_millis();
        let core = &mut self.core;
        let (Some(c), Some(r)) = (core.cluster.as_deref(), core.repl.as_deref_mut()) else {
            return;
        };
        let mut give = Groups::default();
        for g in groups.iter().filter(|&g| c.me().held.contains(g)) {
            give.insert(g);
        }
        r.start_move(peer, give, now_ms, &core.db);
    }

    /// From the timer: the periodic check of due moves, and a step of a drop's sweep.
    pub(super) fn members_tick(&mut self, now_ms: u64) {
        let due = self
            .core
            .cluster
            .as_deref()
            .is_some_and(|c| c.placement().is_some() && c.next_check_ms <= now_ms);
        if due {
            self.membership_changed();
        }
        let core = &mut self.core;
        let Some(r) = core.repl.as_deref_mut() else {
            return;
        };
        if !r.dropping() {
            return;
        }
        let keys: Vec<Bytes> = r.sweep_drops(&mut core.db);
        for k in keys {
            core.db.remove(&k);
            core.persist.note_modified(&k);
        }
    }
}
