//! Who holds a TUIC identity: the binding policy under the table's lock (a live owner keeps
//! it for the grace period), the holder lookup, and dropping a session's route to an identity.

use super::*;

/// The live-owner policy of [`SessionTable::bind_identity`], under the table's lock.
pub(super) fn bind_locked(g: &mut Inner, id: &str, tuic: &str, now: u64, grace: u64) -> Binding {
    let Inner {
        sessions,
        identities,
        ..
    } = g;
    let Some(me) = sessions.get_mut(&Sid::of(id)) else {
        return Binding::Unchanged;
    };
    let previous_identity = me.set_tuic_session(Some(tuic.into()));
    if let Some(prev) = previous_identity.filter(|p| &**p != tuic) {
        drop_route(identities, &prev, id);
    }
    let owners = identities.entry(tuic.to_owned()).or_default();
    if owners.sessions.iter().any(|s| s == id) {
        return Binding::Unchanged;
    }
    // Forget owners whose protocol session is gone.
    owners
        .sessions
        .retain(|s| sessions.contains_key(&Sid::of(s)));
    let Some(owner) = owners.sessions.first().cloned() else {
        owners.sessions.push(id.to_owned());
        return Binding::Owner;
    };
    let owner_sid = Sid::of(&owner);
    let owner_live = sessions
        .get(&owner_sid)
        .is_some_and(|o| is_live(o, now, grace));
    if owner_live {
        owners.sessions.push(id.to_owned());
        Binding::Sibling
    } else {
        // The stale owner's routes are retired atomically with the takeover.
        owners.sessions.retain(|s| s != &owner);
        owners.sessions.insert(0, id.to_owned());
        if let Some(o) = sessions.get_mut(&owner_sid) {
            o.set_tuic_session(None);
        }
        Binding::Reclaimed { previous: owner }
    }
}

/// A session owns its identity actively: it holds a stream or was used within the grace.
pub(super) fn is_live(s: &McpSession, now: u64, grace: u64) -> bool {
    s.has_stream() || now.saturating_sub(s.last_us()) < grace
}

/// [`SessionTable::holder`] under the table's lock.
pub(super) fn holder_locked(g: &Inner, id: &str, tuic: &str, now: u64, grace: u64) -> Holder {
    let Some(owners) = g.identities.get(tuic) else {
        return Holder::Nobody;
    };
    let others = || {
        owners
            .sessions
            .iter()
            .filter(|s| s.as_str() != id)
            .filter_map(|s| g.sessions.get(&Sid::of(s)).map(|x| (s, x)))
    };
    if let Some((s, _)) = others().find(|(_, x)| is_live(x, now, grace)) {
        return Holder::Live(s.clone());
    }
    match others().next() {
        Some((s, _)) => Holder::Stale(s.clone()),
        None => Holder::Nobody,
    }
}

/// Removes one session's route from an identity; the next co-owner becomes delivery owner and
/// the identity goes when its last co-owner goes.
pub(super) fn drop_route(identities: &mut HashMap<String, Owners>, tuic: &str, id: &str) {
    if let Some(o) = identities.get_mut(tuic) {
        o.sessions.retain(|s| s != id);
        if o.sessions.is_empty() {
            identities.remove(tuic);
        }
    }
}
