//! The ARP neighbour cache (RFC 826): resolved next hops with a lifetime, refreshed before
//! they expire so a busy connection never pauses for a resolution, and outstanding requests
//! retried at a bounded rate: the first at once, the next ones [`RETRY`] apart, at most
//! [`PROBES`] in a round; a round unanswered fails the address ([`Lookup::Failed`]) for one
//! more interval, then a new round may begin (RFC 1122 2.3.2.1; Linux's `mcast_solicit`
//! and `retrans_time`, its INCOMPLETE and FAILED states). New traffic for a failed address
//! (a connect that did not wait through the failed round) begins a new round at once
//! ([`Neighbors::restart`]: the last request went a whole interval before, so the rate
//! holds), as Linux's `__neigh_event_send` probes a FAILED entry again; the traffic that
//! waited through the failed round still fails ([`Neighbors::failed_at`]).

use std::collections::{BTreeSet, HashMap};

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, Ipv4Address};

/// How long a resolved entry is used without being heard from again (smoltcp: 60 s).
const LIFETIME: Duration = Duration::from_secs(60);
/// An entry in use this close to expiry is refreshed by a request while still in use.
const REFRESH_BEFORE: Duration = Duration::from_secs(5);
/// Least time between two requests for the same address: RFC 1122 2.3.2.1 (prevent ARP
/// flooding) recommends at most one a second per destination, and Linux's `retrans_time`
/// is 1 s. A lost first request so costs a connect 1 s, as a lost SYN does (RFC 6298's
/// initial RTO).
pub(crate) const RETRY: Duration = Duration::from_secs(1);
/// Requests in one round of resolution (Linux's `mcast_solicit`): the round fails
/// [`RETRY`] after the last of them went unanswered.
pub(crate) const PROBES: u8 = 3;
/// Most addresses cached or being resolved: a flood of ARP traffic cannot grow the table.
const CAPACITY: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: EthernetAddress,
    expires: Instant,
}

/// What the caller should do to reach an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Send to this hardware address.
    Found(EthernetAddress),
    /// Send to this address, and send an ARP request too (entry about to expire).
    FoundRefresh(EthernetAddress),
    /// Unknown: send an ARP request now, hold the traffic.
    Request,
    /// Unknown and a request went out recently: hold the traffic.
    Wait,
    /// Unknown, and the last round of [`PROBES`] requests went unanswered (for one
    /// [`RETRY`] from the instant it failed; then a look-up asks again): a connection not
    /// yet synchronized that waited through the round gives up (RFC 1122 2.3.2.2's error
    /// to the waiting traffic, Linux's `EHOSTUNREACH`), others hold the traffic; new
    /// traffic (a connect or resolution that came after the failure) begins a new round at
    /// once ([`Neighbors::restart`]).
    Failed,
}

/// The requests of a round for one address: when the last went and how many did.
#[derive(Debug, Clone, Copy)]
struct Asked {
    at: Instant,
    tries: u8,
    /// A round begun by [`Neighbors::restart`]: the instant the failed round before it
    /// failed (what waited through that one still fails).
    after_failure: Option<Instant>,
}

impl Asked {
    /// Whether the round fails now: its requests all went and the last one's interval is
    /// over, but not yet the hold-down interval after that.
    fn failed(self, now: Instant) -> bool {
        self.tries >= PROBES && now >= self.at + RETRY && now < self.at + RETRY + RETRY
    }

    /// Until when the record holds anything back (a request, or the failure): past it, a
    /// full list of requests may drop it.
    fn holds_until(self) -> Instant {
        if self.tries >= PROBES {
            self.at + RETRY + RETRY
        } else {
            self.at + RETRY
        }
    }
}

/// What [`Neighbors::may_ask`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// Send a request now (noted).
    Now,
    /// A request went within [`RETRY`].
    Wait,
    /// The round failed ([`Lookup::Failed`]).
    Failed,
}

/// The last address found, its hardware address, and the instant until which a lookup of it
/// answers [`Lookup::Found`] (its entry's expiry less [`REFRESH_BEFORE`]).
#[derive(Debug, Clone, Copy)]
struct Memo {
    ip: Ipv4Address,
    mac: EthernetAddress,
    found_until: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct Neighbors {
    entries: HashMap<Ipv4Address, Entry>,
    /// `entries` again, as `(expires, address)` in order of expiry (which is the order of
    /// their last fill: every fill gives `now + LIFETIME`): a full table prunes its
    /// expired entries from the front, not by a walk of all of them.
    by_expiry: BTreeSet<(Instant, Ipv4Address)>,
    /// The entries of `by_expiry` a full table may evict for an answer we asked for: those
    /// neither asked for (in `asked`) nor a live connection's next hop (in `held`), in the
    /// same order. The victim, the oldest entry it may drop, is its first (or second, past
    /// the memo's), found without a walk past the entries it may not take: a table whose
    /// oldest entries were all held (thousands of on-link peers, or a SYN flood's
    /// half-open connections from gleaned sources) walked every one of them for each
    /// answer, and for each answer it refused.
    evictable: BTreeSet<(Instant, Ipv4Address)>,
    asked: HashMap<Ipv4Address, Asked>,
    /// Next hops of live connections, each with how many use it ([`Self::hold`]): a full
    /// table never evicts one, and always takes one's answer.
    held: HashMap<Ipv4Address, u32>,
    /// The answer of the last lookup that found its address: a host sends to one or a few
    /// next hops, and every transmit pass of a connection looks its next hop up (a SipHash
    /// of the map each time otherwise). Cleared by every change to `entries`.
    memo: Option<Memo>,
    /// No entry expires before this instant (`None`: not known): a full table drops its
    /// expired entries (the front of `by_expiry`) only once one may have expired, not for
    /// every address it refuses. Entries only ever get later expiries, so the bound holds
    /// until the next prune.
    prune_from: Option<Instant>,
    /// No request in `asked` may be repeated before this instant (`None`: not known), for
    /// the same purpose.
    asked_prune_from: Option<Instant>,
    /// Walks of `entries` and of `asked` for expired items (what the two bounds above
    /// save; the tests count them instead of timing a flood).
    #[cfg(test)]
    walks: (u64, u64),
    /// Entries looked at for a victim by [`Self::fill`] (counted by the tests).
    #[cfg(test)]
    victim_probes: u64,
}

impl Neighbors {
    #[inline]
    pub fn lookup(&mut self, ip: Ipv4Address, now: Instant) -> Lookup {
        if let Some(m) = self.memo {
            if m.ip == ip && now < m.found_until {
                return Lookup::Found(m.mac);
            }
        }
        self.lookup_entries(ip, now)
    }

    /// What [`Self::lookup`] answers from its memo alone ([`Lookup::Found`]), changing
    /// nothing: `None` whenever the lookup would have to look further (and might then ask
    /// for a refresh or drop an expired entry), which is left to it.
    #[inline]
    pub fn found_in_memo(&self, ip: Ipv4Address, now: Instant) -> Option<EthernetAddress> {
        self.memo
            .filter(|m| m.ip == ip && now < m.found_until)
            .map(|m| m.mac)
    }

    fn lookup_entries(&mut self, ip: Ipv4Address, now: Instant) -> Lookup {
        if let Some(e) = self.entries.get(&ip).copied() {
            if e.expires > now {
                if e.expires - now < REFRESH_BEFORE && self.may_ask(ip, now) == Ask::Now {
                    return Lookup::FoundRefresh(e.mac);
                }
                self.memo = Some(Memo {
                    ip,
                    mac: e.mac,
                    found_until: e.expires - REFRESH_BEFORE,
                });
                return Lookup::Found(e.mac);
            }
            self.entries.remove(&ip);
            self.by_expiry.remove(&(e.expires, ip));
            self.evictable.remove(&(e.expires, ip));
            self.memo = None;
        }
        match self.may_ask(ip, now) {
            Ask::Now => Lookup::Request,
            Ask::Wait => Lookup::Wait,
            Ask::Failed => Lookup::Failed,
        }
    }

    /// Whether a request for `ip` may go now (then noted as one more of its round), at
    /// most one per [`RETRY`] and [`PROBES`] a round (RFC 1122 2.3.2.1). A round's last
    /// request unanswered for [`RETRY`] fails it for one more [`RETRY`]; a request past
    /// that (or past a request's interval twice over, a round nobody carried on) begins a
    /// new round.
    fn may_ask(&mut self, ip: Ipv4Address, now: Instant) -> Ask {
        let prior = self.asked.get(&ip).copied();
        match prior {
            Some(a) if now < a.at + RETRY => Ask::Wait,
            Some(a) if a.failed(now) => Ask::Failed,
            known => {
                // The round carried on: its requests' count (a stale one begins anew).
                // A round restarted after a failure keeps that failure's instant while it
                // carries on (`failed_at`: what waited through it still fails).
                let (tries, after_failure) = match known {
                    Some(a) if now < a.at + RETRY + RETRY && a.tries < PROBES => {
                        (a.tries + 1, a.after_failure)
                    }
                    _ => (1, None),
                };
                let known = known.is_some();
                // A full list is walked for requests past their retry only once one may be
                // (as `fill` prunes the table): the addresses asked for are the peers', a
                // SYN flood from new on-link sources names a new one each.
                if self.asked.len() >= CAPACITY
                    && !known
                    && self.asked_prune_from.is_none_or(|t| t <= now)
                {
                    #[cfg(test)]
                    {
                        self.walks.1 += 1;
                    }
                    let mut soonest: Option<Instant> = None;
                    let (entries, held, evictable) =
                        (&self.entries, &self.held, &mut self.evictable);
                    self.asked.retain(|k, a| {
                        let until = a.holds_until();
                        let live = now < until;
                        if live {
                            soonest = Some(soonest.map_or(until, |s| s.min(until)));
                        } else if let Some(e) = entries.get(k) {
                            // No longer asked for: evictable again unless held.
                            if !held.contains_key(k) {
                                evictable.insert((e.expires, *k));
                            }
                        }
                        live
                    });
                    self.asked_prune_from = soonest;
                }
                if known || self.asked.len() < CAPACITY {
                    self.asked.insert(
                        ip,
                        Asked {
                            at: now,
                            tries,
                            after_failure,
                        },
                    );
                    // Asked for (a refresh, negative advice): no victim while the answer
                    // may come.
                    if let Some(e) = self.entries.get(&ip) {
                        self.evictable.remove(&(e.expires, ip));
                    }
                }
                Ask::Now
            }
        }
    }

    /// New traffic for `ip` while its last round is failed ([`Lookup::Failed`]): a new
    /// round begins now, its first request to be sent by the caller (`true`). The round
    /// before's last request went [`RETRY`] ago or more: RFC 1122 2.3.2.1's rate holds.
    /// Linux's `__neigh_event_send` likewise takes a FAILED entry back to INCOMPLETE for
    /// new traffic. `false` (nothing changed) when the address is not failed now.
    pub fn restart(&mut self, ip: Ipv4Address, now: Instant) -> bool {
        let Some(a) = self.asked.get_mut(&ip) else {
            return false;
        };
        if !a.failed(now) {
            return false;
        }
        *a = Asked {
            at: now,
            tries: 1,
            after_failure: Some(a.at + RETRY),
        };
        true
    }

    /// When the last round of requests for `ip` failed, while that failure still counts:
    /// during its hold-down interval, and during a round [`Self::restart`] began after it
    /// (until that one is answered or fails in turn). A connection that waited for `ip`
    /// from before this instant waited through the failed round.
    pub fn failed_at(&self, ip: Ipv4Address, now: Instant) -> Option<Instant> {
        let a = self.asked.get(&ip)?;
        if a.failed(now) {
            Some(a.at + RETRY)
        } else if now < a.at + RETRY + RETRY {
            // The restarted round carries on (`may_ask`'s window): past it, a look-up begins
            // anew and the failure no longer counts.
            a.after_failure
        } else {
            None
        }
    }

    /// When a look-up of `ip` next answers anew (a request may be repeated, its round
    /// fails, or a failed one may begin again): `None` when none is held back (none went
    /// out, or it was answered). Asked of the addresses connections wait for only (the
    /// stack's poll deadline): a request nobody waits for any more stays in `asked`, its
    /// retry long past, until it is answered or pruned.
    pub fn retry_at(&self, ip: Ipv4Address, now: Instant) -> Option<Instant> {
        self.asked.get(&ip).map(|a| {
            if a.failed(now) {
                a.holds_until()
            } else {
                a.at + RETRY
            }
        })
    }

    /// Records `ip` at `mac` (a reply, or a request addressed to us: RFC 826's merge).
    /// Returns whether the address was being waited for. A full table (of live entries)
    /// takes an address we asked for (the answer to our own request) in place of its
    /// oldest entry that is neither asked for, nor a live connection's next hop, nor the
    /// memo's (the first of the evictable entries, kept in expiry order: no walk of the
    /// table, nor past the entries it may not drop); anything else it refuses, so a flood
    /// of requests for us (or of gleaned SYNs) cannot crowd out a next hop we need.
    pub fn fill(&mut self, ip: Ipv4Address, mac: EthernetAddress, now: Instant) -> bool {
        if !mac.is_unicast() {
            return false;
        }
        let memo = self.memo.take().map(|m| m.ip);
        if self.entries.len() >= CAPACITY && !self.entries.contains_key(&ip) {
            if self.prune_from.is_none_or(|t| t <= now) {
                #[cfg(test)]
                {
                    self.walks.0 += 1;
                }
                // The expired entries are the front of the expiry order.
                while let Some(&(at, old)) = self.by_expiry.first() {
                    if at > now {
                        break;
                    }
                    self.by_expiry.pop_first();
                    self.evictable.remove(&(at, old));
                    self.entries.remove(&old);
                }
                self.prune_from = self.by_expiry.first().map(|&(at, _)| at);
            }
            if self.entries.len() >= CAPACITY {
                if !self.asked.contains_key(&ip) && !self.held.contains_key(&ip) {
                    return false;
                }
                // The oldest entry neither asked for, nor a live connection's next hop,
                // nor the memo's: the first evictable one, or the second past the memo's.
                let victim = self
                    .evictable
                    .iter()
                    .find(|(_, k)| {
                        #[cfg(test)]
                        {
                            self.victim_probes += 1;
                        }
                        Some(*k) != memo
                    })
                    .copied();
                let Some((expires, victim)) = victim else {
                    return false;
                };
                self.entries.remove(&victim);
                self.by_expiry.remove(&(expires, victim));
                self.evictable.remove(&(expires, victim));
            }
        }
        let expires = now + LIFETIME;
        if let Some(old) = self.entries.insert(ip, Entry { mac, expires }) {
            self.by_expiry.remove(&(old.expires, ip));
            self.evictable.remove(&(old.expires, ip));
        }
        self.by_expiry.insert((expires, ip));
        let asked = self.asked.remove(&ip).is_some();
        if !self.held.contains_key(&ip) {
            self.evictable.insert((expires, ip));
        }
        asked
    }

    /// A connection uses `ip` as its next hop (until [`Self::release`]).
    pub fn hold(&mut self, ip: Ipv4Address) {
        let n = self.held.entry(ip).or_insert(0);
        *n += 1;
        if *n == 1 {
            if let Some(e) = self.entries.get(&ip) {
                self.evictable.remove(&(e.expires, ip));
            }
        }
    }

    /// A connection that used `ip` as its next hop is gone.
    pub fn release(&mut self, ip: Ipv4Address) {
        if let Some(n) = self.held.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&ip);
                if let Some(e) = self.entries.get(&ip) {
                    if !self.asked.contains_key(&ip) {
                        self.evictable.insert((e.expires, ip));
                    }
                }
            }
        }
    }

    /// Adds `ip` at `mac` learnt from a SYN of an on-link peer, only where the address has
    /// no entry (a SYN with a forged source must not redirect a known next hop, the
    /// gateway's say) and the table has room (it evicts nothing, as [`Self::fill`] does
    /// for an address not asked for). Returns whether the address was being waited for
    /// (as [`Self::fill`]): the traffic held for it may go now.
    pub fn glean(&mut self, ip: Ipv4Address, mac: EthernetAddress, now: Instant) -> bool {
        if self.entries.get(&ip).is_none_or(|e| e.expires <= now) {
            self.fill(ip, mac, now)
        } else {
            false
        }
    }

    /// Negative advice from a connection's retransmissions (RFC 1122 2.3.2.1 (4)): whether
    /// to ask again for `ip`, a known address not asked for within [`RETRY`] (then noted as
    /// asked). The entry stays in use meanwhile; an answer replaces its hardware address.
    pub fn advise(&mut self, ip: Ipv4Address, now: Instant) -> bool {
        self.knows(ip, now) && self.may_ask(ip, now) == Ask::Now
    }

    /// Whether `ip` has a live entry (a look-up would find it), changing nothing.
    pub fn knows(&self, ip: Ipv4Address, now: Instant) -> bool {
        self.entries.get(&ip).is_some_and(|e| e.expires > now)
    }

    /// Only updates an address already known (RFC 826: merge without adding), or one being
    /// resolved: asked for, as Linux keeps it in its table (INCOMPLETE) for any ARP frame
    /// of its sender to complete, so a request of its own for another host or a gratuitous
    /// ARP answers ours when our request or its reply was lost. Returns whether the address
    /// was being waited for (as [`Self::fill`]).
    pub fn refresh(&mut self, ip: Ipv4Address, mac: EthernetAddress, now: Instant) -> bool {
        // Being resolved: a round under way or just failed (an old record, past what it
        // holds back, is no resolution any more).
        let resolving = self.asked.get(&ip).is_some_and(|a| now < a.holds_until());
        if self.entries.contains_key(&ip) || resolving {
            self.fill(ip, mac, now)
        } else {
            false
        }
    }
}

#[cfg(test)]
impl Neighbors {
    /// Whether `evictable` holds exactly the entries neither asked for nor held.
    fn evictable_consistent(&self) -> bool {
        let want: BTreeSet<(Instant, Ipv4Address)> = self
            .entries
            .iter()
            .filter(|(ip, _)| !self.asked.contains_key(ip) && !self.held.contains_key(ip))
            .map(|(ip, e)| (e.expires, *ip))
            .collect();
        want == self.evictable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    #[test]
    fn requests_are_rate_limited_and_answers_resolve() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(1000);
        assert_eq!(n.lookup(IP, t0), Lookup::Request);
        assert_eq!(n.lookup(IP, t0 + Duration::from_millis(50)), Lookup::Wait);
        assert_eq!(n.retry_at(IP, t0), Some(t0 + RETRY));
        assert_eq!(n.lookup(IP, t0 + RETRY), Lookup::Request);
        assert!(n.fill(IP, MAC, t0 + RETRY));
        assert_eq!(n.lookup(IP, t0 + RETRY), Lookup::Found(MAC));
        assert_eq!(n.retry_at(IP, t0 + RETRY), None);
    }

    /// Linux's `__neigh_event_send` (new traffic for a FAILED entry probes it again) within
    /// RFC 1122 2.3.2.1's rate: a restart begins a new round only while the address is
    /// failed (never while a round's request is within its interval), and the failure it
    /// followed stays known to the traffic that waited through it until that round ends.
    #[test]
    fn a_failed_address_restarts_a_round_for_new_traffic_only_when_failed() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(1000);
        let ms = Duration::from_millis;
        assert!(!n.restart(IP, t0), "nothing asked yet");
        assert_eq!(n.lookup(IP, t0), Lookup::Request);
        assert!(
            !n.restart(IP, t0 + ms(500)),
            "a request within its interval"
        );
        assert_eq!(n.failed_at(IP, t0 + ms(500)), None);
        assert_eq!(n.lookup(IP, t0 + ms(1000)), Lookup::Request);
        assert_eq!(n.lookup(IP, t0 + ms(2000)), Lookup::Request);
        assert_eq!(n.lookup(IP, t0 + ms(3200)), Lookup::Failed);
        assert_eq!(n.failed_at(IP, t0 + ms(3200)), Some(t0 + ms(3000)));
        assert!(n.restart(IP, t0 + ms(3200)));
        // The new round: rate-limited as any, the failure before it still known.
        assert_eq!(n.lookup(IP, t0 + ms(3200)), Lookup::Wait);
        assert!(!n.restart(IP, t0 + ms(3300)));
        assert_eq!(n.failed_at(IP, t0 + ms(3300)), Some(t0 + ms(3000)));
        assert_eq!(n.retry_at(IP, t0 + ms(3300)), Some(t0 + ms(4200)));
        assert_eq!(n.lookup(IP, t0 + ms(4200)), Lookup::Request);
        assert_eq!(n.failed_at(IP, t0 + ms(4300)), Some(t0 + ms(3000)));
        assert_eq!(n.lookup(IP, t0 + ms(5200)), Lookup::Request);
        assert_eq!(n.failed_at(IP, t0 + ms(5300)), Some(t0 + ms(3000)));
        // It fails in turn: its own failure now.
        assert_eq!(n.lookup(IP, t0 + ms(6200)), Lookup::Failed);
        assert_eq!(n.failed_at(IP, t0 + ms(6200)), Some(t0 + ms(6200)));
        // Its hold-down over, no failure counts, not the one before it either (asked
        // ahead of the answer below: a question changes nothing).
        assert_eq!(n.failed_at(IP, t0 + ms(7300)), None);
        // An answer ends it all.
        assert!(n.fill(IP, MAC, t0 + ms(6300)));
        assert_eq!(n.failed_at(IP, t0 + ms(6300)), None);
        assert!(!n.restart(IP, t0 + ms(6300)));
    }

    /// RFC 1122 2.3.2.1: requests for one address at most once a second, three a round
    /// (Linux's `mcast_solicit`, `retrans_time`); the round then fails for one interval,
    /// and a look-up after that begins a new round. An answer at any point resolves.
    #[test]
    fn requests_go_once_a_second_three_a_round_then_the_round_fails() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(1000);
        let ms = Duration::from_millis;
        assert_eq!(n.lookup(IP, t0), Lookup::Request);
        assert_eq!(n.lookup(IP, t0 + ms(100)), Lookup::Wait);
        assert_eq!(n.lookup(IP, t0 + ms(999)), Lookup::Wait);
        assert_eq!(n.lookup(IP, t0 + ms(1000)), Lookup::Request);
        assert_eq!(n.lookup(IP, t0 + ms(1500)), Lookup::Wait);
        assert_eq!(n.lookup(IP, t0 + ms(2000)), Lookup::Request);
        assert_eq!(n.retry_at(IP, t0 + ms(2000)), Some(t0 + ms(3000)));
        assert_eq!(n.lookup(IP, t0 + ms(2999)), Lookup::Wait);
        // Three unanswered: the round fails, for every look-up of the next second.
        assert_eq!(n.lookup(IP, t0 + ms(3000)), Lookup::Failed);
        assert_eq!(n.lookup(IP, t0 + ms(3000)), Lookup::Failed);
        assert_eq!(n.retry_at(IP, t0 + ms(3000)), Some(t0 + ms(4000)));
        assert_eq!(n.lookup(IP, t0 + ms(3999)), Lookup::Failed);
        // A new round.
        assert_eq!(n.lookup(IP, t0 + ms(4000)), Lookup::Request);
        assert_eq!(n.lookup(IP, t0 + ms(4000)), Lookup::Wait);
        assert_eq!(n.lookup(IP, t0 + ms(5000)), Lookup::Request);
        assert!(n.fill(IP, MAC, t0 + ms(5100)));
        assert_eq!(n.lookup(IP, t0 + ms(5100)), Lookup::Found(MAC));
        // A round nobody carried on (its request's interval passed twice over) begins anew.
        let other = Ipv4Address::new(198, 18, 0, 3);
        assert_eq!(n.lookup(other, t0), Lookup::Request);
        assert_eq!(n.lookup(other, t0 + ms(1000)), Lookup::Request);
        assert_eq!(n.lookup(other, t0 + ms(9000)), Lookup::Request);
        assert_eq!(n.lookup(other, t0 + ms(10_000)), Lookup::Request);
        assert_eq!(n.lookup(other, t0 + ms(11_000)), Lookup::Request);
        assert_eq!(n.lookup(other, t0 + ms(12_000)), Lookup::Failed);
    }

    #[test]
    fn the_memo_answers_as_the_table_does() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        n.fill(IP, MAC, t0);
        assert_eq!(n.lookup(IP, t0), Lookup::Found(MAC));
        assert!(n.memo.is_some());
        // Another address is not answered from the memo.
        let other = Ipv4Address::new(198, 18, 0, 3);
        assert_eq!(n.lookup(other, t0), Lookup::Request);
        // A new hardware address for the memoised one replaces it at once.
        let moved = EthernetAddress([2, 0, 0, 0, 0, 9]);
        n.fill(IP, moved, t0 + Duration::from_secs(1));
        assert_eq!(
            n.lookup(IP, t0 + Duration::from_secs(1)),
            Lookup::Found(moved)
        );
        // Near expiry the memo stops answering, so the entry is refreshed as before...
        let near = t0 + Duration::from_secs(1) + LIFETIME - Duration::from_secs(1);
        assert_eq!(n.lookup(IP, near), Lookup::FoundRefresh(moved));
        // ...and past it the address is unknown.
        let gone = t0 + Duration::from_secs(2) + LIFETIME;
        assert_eq!(n.lookup(IP, gone), Lookup::Request);
    }

    #[test]
    fn entries_are_refreshed_before_they_expire_and_dropped_after() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        n.fill(IP, MAC, t0);
        let near = t0 + LIFETIME - Duration::from_secs(1);
        assert_eq!(n.lookup(IP, near), Lookup::FoundRefresh(MAC));
        assert_eq!(n.lookup(IP, near), Lookup::Found(MAC));
        assert_eq!(n.lookup(IP, t0 + LIFETIME), Lookup::Request);
    }

    /// A flood of on-link sources (SYNs gleaned by `on_syn`, or ARP requests for us) that
    /// fills the table does not keep out the answer to our own request: it takes the place
    /// of the oldest entry nobody asked for.
    #[test]
    fn a_full_table_takes_the_answer_we_asked_for() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        for k in 0..CAPACITY as u32 {
            let ip = Ipv4Address::from(0x0a00_0000u32 + k);
            n.fill(ip, MAC, t0);
        }
        let wanted = Ipv4Address::new(10, 200, 0, 1);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(n.lookup(wanted, t1), Lookup::Request);
        n.fill(wanted, MAC, t1);
        assert_ne!(
            n.lookup(wanted, t1 + RETRY),
            Lookup::Request,
            "the reply to our own request was dropped: the table is full of flood entries"
        );
        // An address nobody asked for still finds no room.
        let stranger = Ipv4Address::new(10, 201, 0, 1);
        assert!(!n.fill(stranger, MAC, t1));
        assert!(!n.entries.contains_key(&stranger));
        assert_eq!(n.entries.len(), CAPACITY);
    }

    /// A full table of live entries refuses a flood of addresses nobody asked for (ARP
    /// requests for us from new on-link sources, gleaned SYNs) at the cost of a look-up
    /// each: it looks for expired entries to prune only once one may have expired, not at
    /// every refused address. (Each refusal walked all 4,096 entries before, about 10 us
    /// in a test build, and an on-link flood of 60-octet frames at 100,000 a second held
    /// the core. The test counts the walks.)
    #[test]
    fn a_full_table_refuses_a_flood_without_walking_it_each_time() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        for k in 0..CAPACITY as u32 {
            assert!(!n.fill(Ipv4Address::from(0x0a00_0000u32 + k), MAC, t0));
        }
        let t1 = t0 + Duration::from_secs(1);
        for k in 0..100_000u32 {
            assert!(!n.fill(Ipv4Address::from(0x0b00_0000u32 + k), MAC, t1));
        }
        // One walk found nothing expired and learnt when something may; no more walks.
        assert_eq!(n.walks.0, 1, "walks of the full table for 100,000 refusals");
        assert_eq!(n.entries.len(), CAPACITY);
        // Once the entries expire, the table makes room again.
        let later = t0 + LIFETIME + Duration::from_secs(1);
        let fresh = Ipv4Address::new(10, 202, 0, 1);
        n.fill(fresh, MAC, later);
        assert_eq!(n.lookup(fresh, later), Lookup::Found(MAC));
        assert_eq!(n.entries.len(), 1);
        assert_eq!(n.by_expiry.len(), 1);
    }

    /// A full list of requests just sent, each for a new address (the SYN-ACKs of a SYN
    /// flood from new on-link sources the full table could not glean), costs a look-up per
    /// further request, not a walk of the list: it is walked for requests past their retry
    /// only once one may be. (About 10 us each before: 100,000 took a second. The test
    /// counts the walks.) A request that went out before is still held back for its retry.
    #[test]
    fn a_full_list_of_requests_is_not_walked_for_each_new_address() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        for k in 0..CAPACITY as u32 {
            let ip = Ipv4Address::from(0x0a00_0000u32 + k);
            assert_eq!(n.lookup(ip, t0), Lookup::Request);
        }
        let t1 = t0 + Duration::from_millis(50);
        for k in 0..100_000u32 {
            let ip = Ipv4Address::from(0x0b00_0000u32 + k);
            assert_eq!(n.lookup(ip, t1), Lookup::Request);
        }
        // One walk found nothing stale and learnt when something may be; no more walks.
        assert_eq!(
            n.walks.1, 1,
            "walks of the full list for 100,000 new addresses"
        );
        assert_eq!(n.asked.len(), CAPACITY);
        let first = Ipv4Address::from(0x0a00_0000u32);
        assert_eq!(n.lookup(first, t1), Lookup::Wait);
        // Past the retry, the stale requests make room and the new one is held back again.
        let t2 = t0 + RETRY;
        let other = Ipv4Address::new(10, 203, 0, 1);
        assert_eq!(n.lookup(other, t2), Lookup::Request);
        assert_eq!(n.lookup(other, t2), Lookup::Wait);
        assert_eq!(n.lookup(first, t2), Lookup::Request);
    }

    /// A full table that takes the answers to our own requests (the SYN-ACKs of a flood
    /// from new on-link sources, each answered by ARP) finds each one's victim, the oldest
    /// entry nobody asked for or uses, with a look at the oldest entries, not a walk of
    /// all 4,096 with two hash look-ups each: that made every SYN and ARP reply of an
    /// on-link peer cost the core ~half a million instructions. The test counts the
    /// entries looked at.
    #[test]
    fn a_full_table_finds_the_victim_for_an_answer_without_walking_it() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        for k in 0..CAPACITY as u32 {
            let ip = Ipv4Address::from(0x0a00_0000u32 + k);
            n.fill(ip, MAC, t0 + Duration::from_micros(u64::from(k)));
        }
        let t1 = t0 + Duration::from_secs(1);
        for k in 0..1000u32 {
            let wanted = Ipv4Address::from(0x0c00_0000u32 + k);
            assert_eq!(n.lookup(wanted, t1), Lookup::Request);
            assert!(n.fill(wanted, MAC, t1), "the answer we asked for is taken");
            assert_eq!(n.lookup(wanted, t1), Lookup::Found(MAC));
        }
        assert_eq!(n.entries.len(), CAPACITY);
        assert_eq!(
            n.by_expiry.len(),
            CAPACITY,
            "the expiry order mirrors the table"
        );
        // The oldest went first (RFC 826 leaves the policy to us; oldest-first as before).
        assert!(!n
            .entries
            .contains_key(&Ipv4Address::from(0x0a00_0000u32 + 999)));
        assert!(n
            .entries
            .contains_key(&Ipv4Address::from(0x0a00_0000u32 + 1000)));
        assert!(
            n.victim_probes <= 4 * 1000,
            "{} entries looked at for 1,000 victims",
            n.victim_probes
        );
    }

    /// A full table whose oldest entries are live connections' next hops (a server with
    /// thousands of on-link clients, or the half-open connections of a SYN flood from
    /// on-link sources the table gleaned: each holds its next hop) finds the victim for the
    /// answer to our own request without a walk past those entries, and refuses at once an
    /// answer no entry can make room for. The search walked every held entry at the front
    /// of the expiry order, two hash look-ups each, for every such answer: an on-link peer
    /// that answered the requests of the flood's SYN-ACKs (over and over: a refused answer
    /// leaves the request outstanding) cost the core ~4,000 probes per ARP frame. The test
    /// counts the entries looked at.
    #[test]
    fn a_full_table_of_held_next_hops_finds_a_victim_without_walking_them() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        const HELD: u32 = 4000;
        for k in 0..CAPACITY as u32 {
            let ip = Ipv4Address::from(0x0a00_0000u32 + k);
            n.fill(ip, MAC, t0 + Duration::from_micros(u64::from(k)));
            if k < HELD {
                n.hold(ip);
            }
        }
        let t1 = t0 + Duration::from_secs(1);
        for k in 0..1000u32 {
            let wanted = Ipv4Address::from(0x0c00_0000u32 + k);
            assert_eq!(n.lookup(wanted, t1), Lookup::Request);
            assert!(n.fill(wanted, MAC, t1), "the answer we asked for is taken");
            assert_eq!(n.lookup(wanted, t1), Lookup::Found(MAC));
        }
        // The held next hops all stayed; the unheld ones went oldest first.
        for k in 0..HELD {
            assert!(n.knows(Ipv4Address::from(0x0a00_0000u32 + k), t1));
        }
        assert!(!n.knows(Ipv4Address::from(0x0a00_0000u32 + HELD), t1));
        assert_eq!(n.entries.len(), CAPACITY);
        assert!(
            n.victim_probes <= 4 * 1000,
            "{} entries looked at for 1,000 victims behind {HELD} held next hops",
            n.victim_probes
        );
        // Every entry held: an answer finds no room, and no walk says so.
        let mut m = Neighbors::default();
        for k in 0..CAPACITY as u32 {
            let ip = Ipv4Address::from(0x0a00_0000u32 + k);
            m.fill(ip, MAC, t0);
            m.hold(ip);
        }
        let wanted = Ipv4Address::new(10, 200, 0, 1);
        assert_eq!(m.lookup(wanted, t1), Lookup::Request);
        for _ in 0..1000 {
            assert!(!m.fill(wanted, MAC, t1));
        }
        assert!(
            m.victim_probes <= 4 * 1000,
            "{} entries looked at for 1,000 refused answers",
            m.victim_probes
        );
        // A released next hop becomes the victim again, and a held one that is released
        // after the answer was refused makes room for the next answer.
        m.release(Ipv4Address::from(0x0a00_0000u32 + 7));
        assert!(m.fill(wanted, MAC, t1 + RETRY));
        assert!(!m.knows(Ipv4Address::from(0x0a00_0000u32 + 7), t1 + RETRY));
        assert!(m.knows(wanted, t1 + RETRY));
        assert!(n.evictable_consistent() && m.evictable_consistent());
    }

    /// The evictable entries stay those neither asked for nor held through every change
    /// (fills, look-ups that ask, refresh or expire, holds and releases, advice, a full
    /// list of requests pruned, a full table pruned and evicting), over a small table of
    /// addresses (a walk of random operations, the table's capacity reached).
    #[test]
    fn the_evictable_entries_follow_every_change() {
        let mut n = Neighbors::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now = Instant::from_millis(0);
        let mut holds: Vec<Ipv4Address> = Vec::new();
        for step in 0..60_000u32 {
            let r = next();
            // Twice the addresses the table holds, so it fills and evicts.
            let ip = Ipv4Address::from(0x0a00_0000u32 + (r >> 8) as u32 % (2 * CAPACITY as u32));
            match r % 10 {
                0 | 1 => {
                    n.lookup(ip, now);
                }
                2..=4 => {
                    n.fill(ip, MAC, now);
                }
                5 => {
                    n.hold(ip);
                    holds.push(ip);
                }
                6 => {
                    if !holds.is_empty() {
                        let k = (r >> 40) as usize % holds.len();
                        n.release(holds.swap_remove(k));
                    }
                }
                7 => {
                    n.advise(ip, now);
                }
                8 => {
                    n.refresh(ip, MAC, now);
                }
                _ => {
                    n.glean(ip, MAC, now);
                }
            }
            now += Duration::from_micros(r >> 59);
            if step % 20_000 == 10_000 {
                // A burst of new next hops that fills the list of requests.
                for k in 0..CAPACITY as u32 + 16 {
                    n.lookup(Ipv4Address::from(0x0b00_0000u32 + k), now);
                }
            }
            if step % 20_000 == 19_999 {
                // Past every entry's lifetime and every request's retry.
                now += LIFETIME;
            }
            if step % 997 == 0 {
                assert!(n.evictable_consistent(), "step {step}");
            }
        }
        assert!(n.evictable_consistent());
        assert!(
            n.walks.0 > 0 && n.walks.1 > 0,
            "{:?}: both prunes ran",
            n.walks
        );
    }

    /// A SYN's source is gleaned only for an address without an entry: a SYN with a forged
    /// source does not redirect a known next hop.
    #[test]
    fn a_gleaned_syn_source_does_not_overwrite_a_known_address() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        n.fill(IP, MAC, t0);
        let forged = EthernetAddress([2, 0, 0, 0, 0, 0x66]);
        let t1 = t0 + Duration::from_secs(1);
        n.glean(IP, forged, t1);
        assert_eq!(n.lookup(IP, t1), Lookup::Found(MAC));
        let other = Ipv4Address::new(198, 18, 0, 3);
        n.glean(other, forged, t1);
        assert_eq!(n.lookup(other, t1), Lookup::Found(forged));
    }

    #[test]
    fn broadcast_and_multicast_addresses_are_never_cached() {
        let mut n = Neighbors::default();
        n.fill(IP, EthernetAddress::BROADCAST, Instant::ZERO);
        assert_eq!(n.lookup(IP, Instant::ZERO), Lookup::Request);
        assert!(!n.refresh(Ipv4Address::new(198, 18, 0, 9), MAC, Instant::ZERO));
    }

    /// RFC 1122 2.3.2.1 (4): negative advice asks again for a known address only, at most
    /// once per retry interval, keeps the entry in use meanwhile, and the answer's new
    /// hardware address replaces the old one at once.
    #[test]
    fn negative_advice_asks_again_and_the_answer_moves_the_entry() {
        let mut n = Neighbors::default();
        let t0 = Instant::from_millis(0);
        assert!(
            !n.advise(IP, t0),
            "an unknown address is not asked for by advice"
        );
        n.fill(IP, MAC, t0);
        let t1 = t0 + Duration::from_secs(10);
        assert!(n.advise(IP, t1));
        assert!(!n.advise(IP, t1 + RETRY - Duration::from_millis(1)));
        assert_eq!(n.lookup(IP, t1), Lookup::Found(MAC));
        let moved = EthernetAddress([2, 0, 0, 0, 0, 9]);
        assert!(
            n.fill(IP, moved, t1 + Duration::from_millis(1)),
            "the answer was waited for"
        );
        assert_eq!(
            n.lookup(IP, t1 + Duration::from_millis(2)),
            Lookup::Found(moved)
        );
        assert!(n.advise(IP, t1 + RETRY));
    }
}
