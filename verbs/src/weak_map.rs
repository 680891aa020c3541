//! Weak handles by identifier, the dropped ones forgotten in amortised sweeps.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// Weak handles to objects by identifier (the completion queues a context or a channel
/// made). Dropped objects are forgotten by a sweep that runs when the map has doubled
/// since the last one, so an insertion costs O(1) amortised and the map holds at most
/// about twice the live objects (plus [`WeakById::FIRST_SWEEP`]). A sweep at every
/// insertion made creating n queues take O(n²): 65,536 `ibv_create_cq` calls took 16 s
/// (the query_limits contract), where the same number of PDs took milliseconds.
#[derive(Debug)]
pub(crate) struct WeakById<T> {
    map: HashMap<u64, Weak<T>>,
    /// The length at which the next insertion sweeps first.
    sweep_at: usize,
    /// How many entries the sweeps visited in all (the tests' evidence of the
    /// amortisation: at most about twice the insertions).
    swept: usize,
}

impl<T> Default for WeakById<T> {
    fn default() -> Self {
        WeakById {
            map: HashMap::new(),
            sweep_at: Self::FIRST_SWEEP,
            swept: 0,
        }
    }
}

impl<T> WeakById<T> {
    /// The length below which no sweep runs.
    pub(crate) const FIRST_SWEEP: usize = 64;

    /// Records `obj` under `id` (replacing what was there).
    pub(crate) fn insert(&mut self, id: u64, obj: &Arc<T>) {
        if self.map.len() >= self.sweep_at {
            self.swept += self.map.len();
            self.map.retain(|_, w| w.strong_count() > 0);
            self.sweep_at = (2 * self.map.len()).max(Self::FIRST_SWEEP);
        }
        self.map.insert(id, Arc::downgrade(obj));
    }

    /// The object recorded under `id`, if it still lives.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<T>> {
        self.map.get(&id).and_then(Weak::upgrade)
    }

    /// Whether `obj` is the object recorded under `id` (the same allocation, alive).
    pub(crate) fn holds(&self, id: u64, obj: &Arc<T>) -> bool {
        self.map
            .get(&id)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(obj)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_are_amortised_and_keep_the_live_ones() {
        let mut m = WeakById::default();
        let mut live = Vec::new();
        for id in 0..100_000u64 {
            let obj = Arc::new(id);
            m.insert(id, &obj);
            // One in a thousand stays alive; the rest are dropped at once.
            if id % 1000 == 0 {
                live.push(obj);
            }
        }
        // A sweep per insertion past the first 64 would visit about 6.4 million entries;
        // each sweep here waits for as many insertions as it visits, and the map never holds
        // much more than twice the live ones.
        assert!(
            m.swept <= 200_000,
            "sweeps visited {} entries for 100,000 insertions",
            m.swept
        );
        assert!(m.map.len() <= 2 * live.len() + WeakById::<u64>::FIRST_SWEEP + 1);
        for obj in &live {
            assert!(m.holds(**obj, obj));
            assert_eq!(m.get(**obj).as_deref(), Some(&**obj));
        }
        assert_eq!(m.get(1), None, "a dropped object is not handed out");
    }

    #[test]
    fn a_growing_live_set_is_swept_rarely() {
        // All alive: each sweep finds nothing to forget and the next waits for twice as many.
        let mut m = WeakById::default();
        let objs: Vec<_> = (0..10_000u64).map(Arc::new).collect();
        for (i, o) in objs.iter().enumerate() {
            m.insert(i as u64, o);
        }
        assert!(m.swept <= 20_000, "sweeps visited {} entries", m.swept);
        assert_eq!(m.map.len(), 10_000);
    }
}
