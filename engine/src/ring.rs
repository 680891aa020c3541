//! Rings that join application threads to engine cores (GUIDE rule 8).
//!
//! [`spsc`] is the single-producer single-consumer ring of each engine core's command ring
//! (application → core) and event ring (core → application). [`mpmc`] is the completion
//! queues' ring: several cores may fill one and several threads drain it, a run or a batch
//! per atomic claim.
#![allow(unsafe_code)]

pub use spsc::{channel, Consumer, Front, Producer};

/// A bounded single-producer single-consumer ring of power-of-two capacity.
///
/// # Design
/// Two free-running cursors, `head` (next slot to read, written only by the consumer) and
/// `tail` (next slot to write, written only by the producer), each on its own cache line
/// ([`CachePadded`]); a slot's index is the cursor masked by `capacity - 1`, and the ring
/// holds `tail - head` items (wrapping arithmetic, so the cursors may wrap `usize`).
///
/// - The producer writes items into slots `[tail, tail + n)`, then publishes them with one
///   `Release` store of `tail + n`. The consumer's `Acquire` load of `tail` makes the item
///   writes visible before it reads them.
/// - The consumer moves items out of slots `[head, head + n)`, then frees the slots with
///   one `Release` store of `head + n`. The producer's `Acquire` load of `head` orders the
///   consumer's reads before the producer overwrites the slots.
/// - Each side keeps a private copy of the other side's cursor and reloads it only when
///   that copy says the ring is full (producer) or empty (consumer). A consumer that
///   finds `k` items pending then reads the producer's cache line once for those `k`
///   items rather than once per item (and the producer likewise for free slots), which is
///   what keeps the two cores from bouncing the cursors' lines while the ring is neither
///   nearly empty nor nearly full.
/// - Batch operations ([`Producer::push_batch`], [`Consumer::pop_batch`]) move many items
///   per cursor store.
///
/// # Lazy doorbell
/// A consumer about to sleep calls [`Consumer::prepare_idle`], which raises the "consumer
/// may be idle" flag and then re-checks the ring; it sleeps only if the ring is still
/// empty. A producer calls [`Producer::doorbell_needed`] after a push (or a batch), which
/// checks the flag and takes it down: only when it was up does the producer ring the
/// actual doorbell (unpark, eventfd, ...), like siw's lazy doorbell. The flag store and
/// the cursor reload on the consumer's side, and the cursor store and the flag load on the
/// producer's side, are each separated by a `SeqCst` fence, so at least one side sees the
/// other's write: either the consumer sees the item and does not sleep, or the producer
/// sees the flag and wakes it. No wake-up is lost.
///
/// # Drop
/// Items still in the ring when both ends are dropped are dropped with the ring. A
/// [`Producer`] and a [`Consumer`] are `Send` (when `T` is), but neither is `Sync` nor
/// `Clone`: each end is used by one thread at a time.
///
/// [`CachePadded`]: crossbeam::utils::CachePadded
pub mod spsc {
    use core::cell::{Cell, UnsafeCell};
    use core::fmt;
    use core::marker::PhantomData;
    use core::mem::MaybeUninit;
    use core::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    use crossbeam::utils::CachePadded;

    struct Shared<T> {
        /// Next slot to read; written only by the consumer.
        head: CachePadded<AtomicUsize>,
        /// Next slot to write; written only by the producer.
        tail: CachePadded<AtomicUsize>,
        /// "The consumer may be idle": raised by the consumer before sleeping.
        idle: CachePadded<AtomicBool>,
        mask: usize,
        buf: Box<[UnsafeCell<MaybeUninit<T>>]>,
    }

    // SAFETY: slots are accessed by at most one thread at a time: slots in
    // [head, tail) only by the consumer, the others only by the producer, and ownership of
    // a slot changes hands through the release/acquire pair on `tail` or `head` (module
    // documentation). Items are moved between threads, so `T: Send` is needed and enough;
    // no `&T` is ever shared, so `T: Sync` is not.
    unsafe impl<T: Send> Send for Shared<T> {}
    // SAFETY: as above.
    unsafe impl<T: Send> Sync for Shared<T> {}

    impl<T> Shared<T> {
        #[inline]
        fn slot(&self, cursor: usize) -> *mut MaybeUninit<T> {
            // SAFETY: `mask == buf.len() - 1` with `buf.len()` a power of two, so the
            // masked index is in bounds.
            unsafe { self.buf.get_unchecked(cursor & self.mask) }.get()
        }
    }

    impl<T> Drop for Shared<T> {
        fn drop(&mut self) {
            let head = *self.head.get_mut();
            let tail = *self.tail.get_mut();
            let mut c = head;
            while c != tail {
                // SAFETY: both ends are gone (we have `&mut self`); slots in [head, tail)
                // hold initialized items that nobody moved out. Each is dropped once.
                unsafe { (*self.slot(c)).assume_init_drop() };
                c = c.wrapping_add(1);
            }
        }
    }

    /// Creates a ring of `capacity` slots.
    ///
    /// # Panics
    /// If `capacity` is not a power of two (0 included). Capacities are configuration,
    /// checked at start-up (GUIDE rule 7).
    pub fn channel<T>(capacity: usize) -> (Producer<T>, Consumer<T>) {
        assert!(
            capacity.is_power_of_two(),
            "spsc::channel: capacity must be a power of two, got {capacity}"
        );
        let buf = (0..capacity)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        let shared = Arc::new(Shared {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            idle: CachePadded::new(AtomicBool::new(false)),
            mask: capacity - 1,
            buf,
        });
        (
            Producer {
                shared: shared.clone(),
                tail: 0,
                head_cache: 0,
                _not_sync: PhantomData,
            },
            Consumer {
                shared,
                head: 0,
                tail_cache: 0,
                _not_sync: PhantomData,
            },
        )
    }

    /// The writing end of a ring.
    pub struct Producer<T> {
        shared: Arc<Shared<T>>,
        /// Our cursor; `shared.tail` is its published copy.
        tail: usize,
        /// The consumer's cursor as last loaded.
        head_cache: usize,
        _not_sync: PhantomData<Cell<()>>,
    }

    impl<T> Producer<T> {
        /// Free slots, reloading the consumer's cursor only if the cached one shows fewer
        /// than `want`.
        #[inline]
        fn free(&mut self, want: usize) -> usize {
            let cap = self.shared.mask + 1;
            let free = cap - self.tail.wrapping_sub(self.head_cache);
            if free >= want {
                return free;
            }
            self.head_cache = self.shared.head.load(Ordering::Acquire);
            cap - self.tail.wrapping_sub(self.head_cache)
        }

        /// Pushes `value`, or gives it back if the ring is full.
        #[inline]
        pub fn push(&mut self, value: T) -> Result<(), T> {
            if self.free(1) == 0 {
                return Err(value);
            }
            // SAFETY: the slot at `tail` is free (tail - head < capacity, with `head`
            // acquired, so the consumer is done with it) and only the producer writes it.
            unsafe { (*self.shared.slot(self.tail)).write(value) };
            self.tail = self.tail.wrapping_add(1);
            self.shared.tail.store(self.tail, Ordering::Release);
            Ok(())
        }

        /// Pushes the item `make` builds, if there is room: `make` runs only then, and its
        /// item is written straight into the slot. A large item built from borrowed parts
        /// is copied once, where [`Producer::push`] copies the item built beforehand again.
        /// Returns whether the item was pushed.
        #[inline]
        pub fn push_with(&mut self, make: impl FnOnce() -> T) -> bool {
            if self.free(1) == 0 {
                return false;
            }
            // SAFETY: as in `push`: the slot at `tail` is free and only the producer writes
            // it. Should `make` panic, nothing was written nor published.
            unsafe { (*self.shared.slot(self.tail)).write(make()) };
            self.tail = self.tail.wrapping_add(1);
            self.shared.tail.store(self.tail, Ordering::Release);
            true
        }

        /// [`Producer::push_with`], then `init` finishes the item where it lies in its
        /// slot, before it is published: a large item can be built in place in parts (e.g.
        /// a placeholder written by `make`, its large fields copied by `init` one by one,
        /// each inline, where a copy of the whole is a `memcpy` call). Returns whether the
        /// item was pushed.
        #[inline]
        pub fn push_with_init(
            &mut self,
            make: impl FnOnce() -> T,
            init: impl FnOnce(&mut T),
        ) -> bool {
            if self.free(1) == 0 {
                return false;
            }
            // SAFETY: as in `push`: the slot at `tail` is free and only the producer writes
            // it; `write` returns the reference to the item it initialised, which nothing
            // else reaches until `tail` is published below. Should `make` or `init` panic,
            // nothing is published (the item leaks in its slot, as in `push_batch`).
            let item = unsafe { (*self.shared.slot(self.tail)).write(make()) };
            init(item);
            self.tail = self.tail.wrapping_add(1);
            self.shared.tail.store(self.tail, Ordering::Release);
            true
        }

        /// The same as [`Producer::push`]; the name says that it never waits.
        #[inline]
        pub fn try_push(&mut self, value: T) -> Result<(), T> {
            self.push(value)
        }

        /// Pushes items taken from `items` until the ring is full or `items` is exhausted,
        /// publishing them with one cursor store; returns how many were pushed. Never takes
        /// an item from `items` that it cannot push, so the rest stay in the iterator.
        pub fn push_batch<I: Iterator<Item = T>>(&mut self, items: &mut I) -> usize {
            let free = self.free(usize::MAX);
            let mut n = 0;
            while n < free {
                let Some(item) = items.next() else { break };
                // SAFETY: `tail + n` is one of the `free` slots the consumer released.
                unsafe { (*self.shared.slot(self.tail.wrapping_add(n))).write(item) };
                n += 1;
            }
            // If `next` panicked above, the items written are not published and leak;
            // the ring stays consistent.
            if n > 0 {
                self.tail = self.tail.wrapping_add(n);
                self.shared.tail.store(self.tail, Ordering::Release);
            }
            n
        }

        /// Pushes clones of a prefix of `items` (as many as fit) with one cursor store;
        /// returns how many.
        pub fn push_slice(&mut self, items: &[T]) -> usize
        where
            T: Clone,
        {
            self.push_batch(&mut items.iter().cloned())
        }

        /// Whether the consumer announced it may be idle; takes the announcement down.
        /// Call after a push or a batch, and ring the real doorbell only on `true`. The
        /// fence pairs with the one in [`Consumer::prepare_idle`] (module documentation).
        #[inline]
        pub fn doorbell_needed(&self) -> bool {
            fence(Ordering::SeqCst);
            self.shared.idle.load(Ordering::Relaxed)
                && self.shared.idle.swap(false, Ordering::Relaxed)
        }

        /// The number of items in the ring (exact from the producer's side at the moment of
        /// the load; the consumer may take more at any time).
        pub fn len(&self) -> usize {
            self.tail
                .wrapping_sub(self.shared.head.load(Ordering::Acquire))
        }

        /// Whether the ring is empty.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Whether the ring is full.
        pub fn is_full(&self) -> bool {
            self.len() == self.capacity()
        }

        /// The number of slots.
        pub fn capacity(&self) -> usize {
            self.shared.mask + 1
        }

        /// Whether the consumer has been dropped (items pushed now will never be read).
        pub fn is_abandoned(&self) -> bool {
            Arc::strong_count(&self.shared) == 1
        }
    }

    impl<T> fmt::Debug for Producer<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("Producer")
                .field("len", &self.len())
                .field("capacity", &self.capacity())
                .finish()
        }
    }

    /// The reading end of a ring.
    pub struct Consumer<T> {
        shared: Arc<Shared<T>>,
        /// Our cursor; `shared.head` is its published copy.
        head: usize,
        /// The producer's cursor as last loaded.
        tail_cache: usize,
        _not_sync: PhantomData<Cell<()>>,
    }

    impl<T> Consumer<T> {
        /// Items available, reloading the producer's cursor only if the cached one shows
        /// fewer than `want`.
        #[inline]
        fn available(&mut self, want: usize) -> usize {
            let n = self.tail_cache.wrapping_sub(self.head);
            if n >= want {
                return n;
            }
            self.tail_cache = self.shared.tail.load(Ordering::Acquire);
            self.tail_cache.wrapping_sub(self.head)
        }

        /// Takes the oldest item, if any.
        #[inline]
        pub fn pop(&mut self) -> Option<T> {
            if self.available(1) == 0 {
                return None;
            }
            // SAFETY: the slot at `head` is in [head, tail) with `tail` acquired, so the
            // producer initialized it and will not touch it until we release `head`.
            let value = unsafe { (*self.shared.slot(self.head)).assume_init_read() };
            self.head = self.head.wrapping_add(1);
            self.shared.head.store(self.head, Ordering::Release);
            Some(value)
        }

        /// The oldest item, if any, left in its slot: the [`Front`] guard reads or changes it
        /// there, then either moves it out ([`Front::take`]) or, dropped, drops it in place;
        /// both free the slot. Handling an item in place spares the copy of it that
        /// [`Consumer::pop`] makes (a large item is copied whole).
        #[inline]
        pub fn front(&mut self) -> Option<Front<'_, T>> {
            if self.available(1) == 0 {
                return None;
            }
            Some(Front { consumer: self })
        }

        /// Frees the slot at `head` (its item moved out or dropped).
        #[inline]
        fn advance(&mut self) {
            self.head = self.head.wrapping_add(1);
            self.shared.head.store(self.head, Ordering::Release);
        }

        /// Moves up to `max` items, oldest first, into `out` with one cursor store; returns
        /// how many. If `out` stops consuming early (or panics), the items it did not take
        /// stay in the ring.
        pub fn pop_batch<E: Extend<T>>(&mut self, out: &mut E, max: usize) -> usize {
            let n = self.available(max).min(max);
            if n == 0 {
                return 0;
            }
            let mut drain = Drain {
                consumer: self,
                left: n,
                taken: 0,
            };
            out.extend(&mut drain);
            drain.taken
        }

        /// Moves every available item into `out` ([`Consumer::pop_batch`] without a limit).
        pub fn drain_into<E: Extend<T>>(&mut self, out: &mut E) -> usize {
            self.pop_batch(out, usize::MAX)
        }

        /// Raises the "consumer may be idle" flag, then checks the ring again. Returns
        /// `true` if the ring is still empty: the caller may now sleep, and a producer that
        /// pushes afterwards will see the flag ([`Producer::doorbell_needed`]). On `false`
        /// items arrived: the caller should call [`Consumer::clear_idle`] and keep going.
        pub fn prepare_idle(&mut self) -> bool {
            self.shared.idle.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            self.available(1) == 0
        }

        /// Takes the idle flag down (after waking, or when [`Consumer::prepare_idle`]
        /// found items), so producers stop ringing.
        pub fn clear_idle(&self) {
            self.shared.idle.store(false, Ordering::Relaxed);
        }

        /// Whether the idle flag is up (a producer has not rung since it was raised).
        pub fn is_idle(&self) -> bool {
            self.shared.idle.load(Ordering::Relaxed)
        }

        /// The number of items in the ring (exact from the consumer's side at the moment of
        /// the load; the producer may add more at any time).
        pub fn len(&self) -> usize {
            self.shared
                .tail
                .load(Ordering::Acquire)
                .wrapping_sub(self.head)
        }

        /// Whether the ring is empty.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// The number of slots.
        pub fn capacity(&self) -> usize {
            self.shared.mask + 1
        }

        /// Whether the producer has been dropped (no item will arrive after those in the
        /// ring).
        pub fn is_abandoned(&self) -> bool {
            Arc::strong_count(&self.shared) == 1
        }
    }

    impl<T> fmt::Debug for Consumer<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("Consumer")
                .field("len", &self.len())
                .field("capacity", &self.capacity())
                .finish()
        }
    }

    /// The oldest item of a ring, still in its slot ([`Consumer::front`]). Dereferences to
    /// the item; [`Front::take`] moves it out, and dropping the guard drops the item in its
    /// slot. Either way the slot is freed, so the item is consumed exactly once.
    pub struct Front<'a, T> {
        consumer: &'a mut Consumer<T>,
    }

    impl<T> Front<'_, T> {
        /// Moves the item out of its slot and frees the slot (as [`Consumer::pop`]).
        #[inline]
        pub fn take(self) -> T {
            // The guard is not dropped: the item is moved out here, not dropped in place.
            let mut this = core::mem::ManuallyDrop::new(self);
            let consumer: &mut Consumer<T> = &mut *this.consumer;
            // SAFETY: a `Front` exists only for an item in [head, tail) with `tail`
            // acquired (`Consumer::front`): initialized, and the producer leaves it alone
            // until `head` is released. It is read once: the guard is not dropped (no drop
            // in place) and the slot is freed just below.
            let value = unsafe { (*consumer.shared.slot(consumer.head)).assume_init_read() };
            consumer.advance();
            value
        }

        /// Frees the slot without dropping the item, as [`core::mem::forget`] would: what
        /// the item owns is leaked. For an item known to own nothing (a variant without
        /// destructors), this spares the call of its type's drop glue that dropping the
        /// guard makes.
        #[inline]
        pub fn forget(self) {
            let mut this = core::mem::ManuallyDrop::new(self);
            // The item stays in the slot, never to be read again: the producer overwrites
            // the slot once it is free, without dropping what was there.
            this.consumer.advance();
        }
    }

    impl<T> core::ops::Deref for Front<'_, T> {
        type Target = T;

        #[inline]
        fn deref(&self) -> &T {
            let c = &*self.consumer;
            // SAFETY: the item at `head` is initialized and owned by the consumer until the
            // guard frees the slot (see `Front::take`); the borrow of the guard keeps the
            // reference from outliving it.
            unsafe { (*c.shared.slot(c.head)).assume_init_ref() }
        }
    }

    impl<T> core::ops::DerefMut for Front<'_, T> {
        #[inline]
        fn deref_mut(&mut self) -> &mut T {
            let c = &mut *self.consumer;
            // SAFETY: as in `deref`; the guard is borrowed mutably, so this is the only
            // reference to the item.
            unsafe { (*c.shared.slot(c.head)).assume_init_mut() }
        }
    }

    impl<T> Drop for Front<'_, T> {
        #[inline]
        fn drop(&mut self) {
            /// Frees the slot even if the item's destructor panics (it is then leaked, never
            /// dropped twice).
            struct Advance<'b, T>(&'b mut Consumer<T>);
            impl<T> Drop for Advance<'_, T> {
                #[inline]
                fn drop(&mut self) {
                    self.0.advance();
                }
            }
            let c = Advance(&mut *self.consumer);
            // SAFETY: the item at `head` is initialized and ours (see `Front::take`), and it
            // was not moved out (`take` forgets the guard); it is dropped once, as the slot
            // is freed right after by `c`.
            unsafe { (*c.0.shared.slot(c.0.head)).assume_init_drop() };
        }
    }

    impl<T: fmt::Debug> fmt::Debug for Front<'_, T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_tuple("Front").field(&**self).finish()
        }
    }

    /// Moves items out of the ring for [`Consumer::pop_batch`]; publishes the new head once,
    /// when dropped, for exactly the items it yielded.
    struct Drain<'a, T> {
        consumer: &'a mut Consumer<T>,
        /// Items still available to yield.
        left: usize,
        /// Items yielded so far.
        taken: usize,
    }

    impl<T> Iterator for Drain<'_, T> {
        type Item = T;

        #[inline]
        fn next(&mut self) -> Option<T> {
            if self.left == 0 {
                return None;
            }
            let c = self.consumer.head.wrapping_add(self.taken);
            // SAFETY: `c` is in [head, head + available) with `tail` acquired by
            // `available`; each slot is read once because `taken` advances.
            let value = unsafe { (*self.consumer.shared.slot(c)).assume_init_read() };
            self.taken += 1;
            self.left -= 1;
            Some(value)
        }

        fn size_hint(&self) -> (usize, Option<usize>) {
            (self.left, Some(self.left))
        }
    }

    impl<T> Drop for Drain<'_, T> {
        fn drop(&mut self) {
            if self.taken > 0 {
                let c = &mut *self.consumer;
                c.head = c.head.wrapping_add(self.taken);
                c.shared.head.store(c.head, Ordering::Release);
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn fifo_and_edges() {
            let (mut p, mut c) = channel::<u32>(4);
            assert!(c.pop().is_none());
            for i in 0..4 {
                p.push(i).unwrap();
            }
            assert!(p.is_full());
            assert_eq!(p.push(9), Err(9));
            assert_eq!(c.pop(), Some(0));
            p.push(4).unwrap();
            let mut v = Vec::new();
            assert_eq!(c.drain_into(&mut v), 4);
            assert_eq!(v, [1, 2, 3, 4]);
            assert!(c.is_empty());
        }

        #[test]
        fn cursors_may_wrap_usize() {
            let (mut p, mut c) = channel::<usize>(2);
            // Start both cursors just below usize::MAX (the ring is empty there).
            let start = usize::MAX - 2;
            p.tail = start;
            p.head_cache = start;
            p.shared.tail.store(start, Ordering::Relaxed);
            p.shared.head.store(start, Ordering::Relaxed);
            c.head = start;
            c.tail_cache = start;
            for i in 0..10 {
                p.push(i).unwrap();
                p.push(i + 100).unwrap();
                assert_eq!(p.push(0), Err(0));
                assert_eq!(c.len(), 2);
                assert_eq!(c.pop(), Some(i));
                assert_eq!(c.pop(), Some(i + 100));
                assert_eq!(c.pop(), None);
            }
        }

        /// `push_with_init` gives what `push_with` of the finished item gives: built only
        /// when there is room, finished before it is published, in order.
        #[test]
        fn push_with_init_equals_push_with() {
            let (mut p, mut c) = channel::<[u64; 3]>(2);
            let (mut q, mut d) = channel::<[u64; 3]>(2);
            for i in 0..5u64 {
                let a = p.push_with_init(|| [i, 0, 0], |v| v[1] = i * 10);
                let b = q.push_with(|| [i, i * 10, 0]);
                assert_eq!(a, b);
                if i % 2 == 1 {
                    assert_eq!(c.pop(), d.pop());
                }
            }
            assert!(!p.push_with_init(
                || unreachable!("no room: not built"),
                |_| unreachable!("no room: not finished")
            ));
            let (mut u, mut v) = (Vec::new(), Vec::new());
            c.drain_into(&mut u);
            d.drain_into(&mut v);
            assert_eq!(u, v);
            assert_eq!(u, [[2, 20, 0], [4, 40, 0]]);
        }

        #[test]
        fn front_in_place_take_and_drop() {
            use std::rc::Rc;
            let (mut p, mut c) = channel::<Rc<u32>>(2);
            let a = Rc::new(1);
            assert!(c.front().is_none());
            p.push(Rc::clone(&a)).unwrap();
            p.push(Rc::clone(&a)).unwrap();
            assert!(!p.push_with(|| unreachable!("no room: not built")));
            // Read in place, then dropped in its slot: the slot is freed.
            assert_eq!(**c.front().unwrap(), 1);
            assert_eq!(Rc::strong_count(&a), 2);
            assert!(p.push_with(|| Rc::new(7)));
            // Moved out: not dropped.
            let b = c.front().unwrap().take();
            assert_eq!(Rc::strong_count(&a), 2);
            drop(b);
            assert_eq!(Rc::strong_count(&a), 1);
            let mut f = c.front().unwrap();
            *f = Rc::new(8);
            assert_eq!(*f.take(), 8);
            assert!(c.front().is_none());
            // Forgotten: the slot is freed, the item leaked (never dropped).
            p.push(Rc::clone(&a)).unwrap();
            c.front().unwrap().forget();
            assert_eq!(Rc::strong_count(&a), 2);
            assert!(c.front().is_none());
            assert!(c.is_empty());
            // The test itself leaks nothing, so that Miri's and LeakSanitizer's leak checks
            // pass: the reference the forgotten clone held is given back.
            // SAFETY: that clone's strong reference is never dropped (the count is 2 with
            // `a` the only `Rc` alive), so exactly one decrement is owed, on `a`'s pointer.
            unsafe { Rc::decrement_strong_count(Rc::as_ptr(&a)) };
            assert_eq!(Rc::strong_count(&a), 1);
        }

        #[test]
        #[should_panic(expected = "power of two")]
        fn capacity_must_be_power_of_two() {
            let _ = channel::<u8>(3);
        }
    }
}

/// A bounded multi-producer multi-consumer queue of `Copy` items that moves a batch of
/// items per atomic read-modify-write: the completion queues' ring
/// ([`crate::CompletionQueue`]), which several engine cores may fill and several
/// application threads may drain.
///
/// # Why not `crossbeam::queue::ArrayQueue`
/// It is the same design (below) but takes one compare-and-swap of a shared cursor per
/// item on each side. A run of small Writes completes tens of requests per engine loop, and
/// `perf` put those two locked instructions per completion at ~7 % of the sending core of
/// a 64 B Write stream; here a run costs one on each side (`docs/decisions/0007-batched-completion-queue.md`).
///
/// # Design
/// Dmitry Vyukov's bounded queue, as crossbeam lays it out: each slot carries a `stamp`,
/// and the `head` and `tail` cursors are positions `lap | index`, where `one_lap` is the
/// power of two above the capacity. At position `p`:
/// - a slot whose stamp is `p` is free for the producer that claims position `p`;
/// - a slot whose stamp is `p + 1` holds the item written at position `p`;
/// - reading it sets the stamp to `p + one_lap`: free for the same index one lap later.
///
/// A producer counts the free slots from `tail` (up to the batch it wants), claims them with
/// one compare-and-swap of `tail`, writes them and publishes each with a `Release` store of
/// its stamp. A consumer counts the published slots from `head`, claims them with one
/// compare-and-swap of `head`, reads them and frees each with a `Release` store of its
/// stamp. A stamp can leave the value that counted it only through a claim of its position,
/// which moves the cursor the counting thread is about to swap, so a claim never covers a
/// slot that was not free (producer) or published (consumer) when it succeeded. A consumer
/// that finds the slot at `head` claimed but not yet written waits for its producer, as
/// crossbeam's does; producers write a claimed batch without anything in between that can
/// block.
pub mod mpmc {
    use core::cell::UnsafeCell;
    use core::fmt;
    use core::mem::MaybeUninit;
    use core::sync::atomic::{fence, AtomicUsize, Ordering};

    use crossbeam::utils::{Backoff, CachePadded};

    struct Slot<T> {
        stamp: AtomicUsize,
        value: UnsafeCell<MaybeUninit<T>>,
    }

    /// The queue (shared by reference; see the module documentation).
    pub struct Queue<T: Copy> {
        head: CachePadded<AtomicUsize>,
        tail: CachePadded<AtomicUsize>,
        buf: Box<[Slot<T>]>,
        cap: usize,
        one_lap: usize,
    }

    // SAFETY: a slot's value is accessed only by the one thread whose compare-and-swap
    // claimed its position, and ownership passes between threads through the release
    // store and acquire load of its stamp (module documentation). Items are copied between
    // threads, so `T: Send` is needed and enough; no `&T` is shared.
    unsafe impl<T: Copy + Send> Send for Queue<T> {}
    // SAFETY: as above.
    unsafe impl<T: Copy + Send> Sync for Queue<T> {}

    /// Aborts the process if dropped while unwinding: a producer that claimed slots and
    /// panicked before publishing them would leave every consumer waiting for them forever.
    struct AbortOnUnwind;

    impl Drop for AbortOnUnwind {
        fn drop(&mut self) {
            std::process::abort();
        }
    }

    impl<T: Copy> Queue<T> {
        /// A queue of exactly `capacity` items.
        ///
        /// # Panics
        /// If `capacity` is 0 or above `usize::MAX / 4` (configuration, checked at set-up).
        pub fn new(capacity: usize) -> Queue<T> {
            assert!(
                capacity > 0 && capacity <= usize::MAX / 4,
                "mpmc::Queue: capacity must be in 1..=usize::MAX/4, got {capacity}"
            );
            let buf = (0..capacity)
                .map(|i| Slot {
                    stamp: AtomicUsize::new(i),
                    value: UnsafeCell::new(MaybeUninit::uninit()),
                })
                .collect();
            Queue {
                head: CachePadded::new(AtomicUsize::new(0)),
                tail: CachePadded::new(AtomicUsize::new(0)),
                buf,
                cap: capacity,
                one_lap: (capacity + 1).next_power_of_two(),
            }
        }

        /// The slot of position `pos`.
        #[inline]
        fn slot(&self, pos: usize) -> &Slot<T> {
            &self.buf[pos & (self.one_lap - 1)]
        }

        /// The position after `pos`.
        #[inline]
        fn next(&self, pos: usize) -> usize {
            let index = pos & (self.one_lap - 1);
            if index + 1 < self.cap {
                pos.wrapping_add(1)
            } else {
                (pos & !(self.one_lap - 1)).wrapping_add(self.one_lap)
            }
        }

        /// Claims up to `n` (>= 1) free slots from `tail`: their first position and count,
        /// or `None` when the queue is full.
        #[inline]
        fn claim_free(&self, n: usize) -> Option<(usize, usize)> {
            let backoff = Backoff::new();
            let mut tail = self.tail.load(Ordering::Relaxed);
            loop {
                let stamp = self.slot(tail).stamp.load(Ordering::Acquire);
                if stamp == tail {
                    // Free: count the free ones after it, up to `n`.
                    let (mut k, mut pos) = (1, self.next(tail));
                    while k < n && self.slot(pos).stamp.load(Ordering::Acquire) == pos {
                        k += 1;
                        pos = self.next(pos);
                    }
                    if k < n && self.wait_read_by_consumer(pos, tail) {
                        // A consumer freed the slot: count again.
                        continue;
                    }
                    match self.tail.compare_exchange_weak(
                        tail,
                        pos,
                        Ordering::SeqCst,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Some((tail, k)),
                        Err(t) => {
                            tail = t;
                            backoff.spin();
                            continue;
                        }
                    }
                }
                if stamp.wrapping_add(self.one_lap) == tail.wrapping_add(1) {
                    // The slot still holds the item of the lap before: full, unless a
                    // consumer claimed it meanwhile.
                    fence(Ordering::SeqCst);
                    let head = self.head.load(Ordering::Relaxed);
                    if head.wrapping_add(self.one_lap) == tail {
                        return None;
                    }
                    backoff.spin();
                } else {
                    // Another producer claimed `tail` already (or its consumer has not
                    // freed the slot yet): look again.
                    backoff.snooze();
                }
                tail = self.tail.load(Ordering::Relaxed);
            }
        }

        /// For [`Self::claim_free`], whose count of the free slots after `tail` stopped at
        /// `pos`: whether that slot is room a consumer is freeing (then this waits until it
        /// is free, for the count to start again). If it still holds the item of the lap
        /// before, that item is either the oldest (`head` one lap behind: the queue is full
        /// there) or one a consumer claimed and is copying out now: room, waited for as
        /// `push` waits for it, unless another producer moves `tail` meanwhile (the count's
        /// swap would fail anyway). Counted as no room, a batch of a queue that had room for
        /// it came back short, which `CompletionQueue::push_run` reports as an overrun. Out
        /// of line: a count stops short only at a full queue or in this race.
        #[cold]
        #[inline(never)]
        fn wait_read_by_consumer(&self, pos: usize, tail: usize) -> bool {
            let backoff = Backoff::new();
            loop {
                let s = self.slot(pos).stamp.load(Ordering::Acquire);
                if s == pos {
                    return true;
                }
                if s.wrapping_add(self.one_lap) != pos.wrapping_add(1) {
                    // Written for this lap already: another producer moved `tail`.
                    return false;
                }
                fence(Ordering::SeqCst);
                let head = self.head.load(Ordering::Relaxed);
                if head.wrapping_add(self.one_lap) == pos
                    || self.tail.load(Ordering::Relaxed) != tail
                {
                    return false;
                }
                backoff.spin();
            }
        }

        /// Claims up to `n` (>= 1) published slots from `head`: their first position and
        /// count, or `None` when the queue is empty.
        #[inline]
        fn claim_full(&self, n: usize) -> Option<(usize, usize)> {
            let backoff = Backoff::new();
            let mut head = self.head.load(Ordering::Relaxed);
            loop {
                let stamp = self.slot(head).stamp.load(Ordering::Acquire);
                if stamp == head.wrapping_add(1) {
                    // Published: count the published ones after it, up to `n`.
                    let (mut k, mut pos) = (1, self.next(head));
                    while k < n
                        && self.slot(pos).stamp.load(Ordering::Acquire) == pos.wrapping_add(1)
                    {
                        k += 1;
                        pos = self.next(pos);
                    }
                    match self.head.compare_exchange_weak(
                        head,
                        pos,
                        Ordering::SeqCst,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Some((head, k)),
                        Err(h) => {
                            head = h;
                            backoff.spin();
                            continue;
                        }
                    }
                }
                if stamp == head {
                    // Free at this lap: empty, unless a producer claimed it and is writing.
                    fence(Ordering::SeqCst);
                    let tail = self.tail.load(Ordering::Relaxed);
                    if tail == head {
                        return None;
                    }
                    backoff.spin();
                } else {
                    // Another consumer took `head` already: look again.
                    backoff.snooze();
                }
                head = self.head.load(Ordering::Relaxed);
            }
        }

        /// Appends up to `n` items, `make(j)` building the `j`-th, in order, with one
        /// compare-and-swap: as many as there is room for (the first ones), and returns
        /// how many. `make` runs after the slots are claimed and must not panic (the
        /// process aborts if it does: consumers would wait for the claimed slots forever).
        pub fn push_with(&self, n: usize, mut make: impl FnMut(usize) -> T) -> usize {
            if n == 0 {
                return 0;
            }
            let Some((first, k)) = self.claim_free(n.min(self.cap)) else {
                return 0;
            };
            let guard = AbortOnUnwind;
            let mut pos = first;
            for j in 0..k {
                let v = make(j);
                let slot = self.slot(pos);
                // SAFETY: the compare-and-swap in `claim_free` gave this thread position
                // `pos`, whose slot was free (its stamp said so and no one else can claim
                // it): no other thread touches the value until the stamp store below.
                unsafe { (*slot.value.get()).write(v) };
                slot.stamp.store(pos.wrapping_add(1), Ordering::Release);
                pos = self.next(pos);
            }
            core::mem::forget(guard);
            k
        }

        /// Appends `v`; gives it back when the queue is full. (The one-item case of
        /// [`Queue::push_with`], spelled out: no count of free slots.)
        #[inline]
        pub fn push(&self, v: T) -> Result<(), T> {
            let backoff = Backoff::new();
            let mut tail = self.tail.load(Ordering::Relaxed);
            loop {
                let slot = self.slot(tail);
                let stamp = slot.stamp.load(Ordering::Acquire);
                if stamp == tail {
                    match self.tail.compare_exchange_weak(
                        tail,
                        self.next(tail),
                        Ordering::SeqCst,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            // SAFETY: as in `push_with`: position `tail` is this thread's.
                            unsafe { (*slot.value.get()).write(v) };
                            slot.stamp.store(tail.wrapping_add(1), Ordering::Release);
                            return Ok(());
                        }
                        Err(t) => {
                            tail = t;
                            backoff.spin();
                            continue;
                        }
                    }
                }
                if stamp.wrapping_add(self.one_lap) == tail.wrapping_add(1) {
                    fence(Ordering::SeqCst);
                    if self.head.load(Ordering::Relaxed).wrapping_add(self.one_lap) == tail {
                        return Err(v);
                    }
                    backoff.spin();
                } else {
                    backoff.snooze();
                }
                tail = self.tail.load(Ordering::Relaxed);
            }
        }

        /// Moves up to `out.len()` of the oldest items into `out`, in order, with one
        /// compare-and-swap; returns how many.
        pub fn pop_into(&self, out: &mut [T]) -> usize {
            if out.is_empty() {
                return 0;
            }
            let Some((first, k)) = self.claim_full(out.len().min(self.cap)) else {
                return 0;
            };
            let mut pos = first;
            for o in &mut out[..k] {
                let slot = self.slot(pos);
                // SAFETY: the compare-and-swap in `claim_full` gave this thread position
                // `pos`, whose slot was published (stamp `pos + 1`, acquired): its value is
                // initialized and no other thread touches it until the stamp store below.
                *o = unsafe { (*slot.value.get()).assume_init() };
                slot.stamp
                    .store(pos.wrapping_add(self.one_lap), Ordering::Release);
                pos = self.next(pos);
            }
            k
        }

        /// Takes the oldest item. (The one-item case of [`Queue::pop_into`], spelled
        /// out: no count of published slots.)
        #[inline]
        pub fn pop(&self) -> Option<T> {
            let backoff = Backoff::new();
            let mut head = self.head.load(Ordering::Relaxed);
            loop {
                let slot = self.slot(head);
                let stamp = slot.stamp.load(Ordering::Acquire);
                if stamp == head.wrapping_add(1) {
                    match self.head.compare_exchange_weak(
                        head,
                        self.next(head),
                        Ordering::SeqCst,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            // SAFETY: as in `pop_into`: position `head` is this thread's.
                            let v = unsafe { (*slot.value.get()).assume_init() };
                            slot.stamp
                                .store(head.wrapping_add(self.one_lap), Ordering::Release);
                            return Some(v);
                        }
                        Err(h) => {
                            head = h;
                            backoff.spin();
                            continue;
                        }
                    }
                }
                if stamp == head {
                    fence(Ordering::SeqCst);
                    if self.tail.load(Ordering::Relaxed) == head {
                        return None;
                    }
                    backoff.spin();
                } else {
                    backoff.snooze();
                }
                head = self.head.load(Ordering::Relaxed);
            }
        }

        /// No items at this moment.
        #[inline]
        pub fn is_empty(&self) -> bool {
            let head = self.head.load(Ordering::SeqCst);
            let tail = self.tail.load(Ordering::SeqCst);
            head == tail
        }

        /// Items at this moment (claimed by producers included).
        pub fn len(&self) -> usize {
            loop {
                let tail = self.tail.load(Ordering::SeqCst);
                let head = self.head.load(Ordering::SeqCst);
                if self.tail.load(Ordering::SeqCst) == tail {
                    let hix = head & (self.one_lap - 1);
                    let tix = tail & (self.one_lap - 1);
                    return if hix < tix {
                        tix - hix
                    } else if hix > tix {
                        self.cap - hix + tix
                    } else if tail == head {
                        0
                    } else {
                        self.cap
                    };
                }
            }
        }

        /// Capacity.
        pub fn capacity(&self) -> usize {
            self.cap
        }
    }

    impl<T: Copy> fmt::Debug for Queue<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("mpmc::Queue")
                .field("len", &self.len())
                .field("capacity", &self.cap)
                .finish()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::Arc;

        #[test]
        fn fifo_full_empty_and_exact_capacity() {
            for cap in [1, 2, 3, 5, 8] {
                let q = Queue::<u32>::new(cap);
                assert!(q.is_empty() && q.pop().is_none());
                for i in 0..cap as u32 {
                    assert_eq!(q.push(i), Ok(()));
                }
                assert_eq!(q.len(), cap);
                assert_eq!(q.push(99), Err(99), "capacity {cap} is exact");
                for i in 0..cap as u32 {
                    assert_eq!(q.pop(), Some(i));
                }
                assert!(q.is_empty() && q.pop().is_none());
            }
        }

        #[test]
        fn batches_take_what_fits_and_keep_order_across_laps() {
            let q = Queue::<u64>::new(5);
            let mut next_in = 0u64;
            let mut next_out = 0u64;
            let mut out = [0u64; 7];
            // Batch sizes that wrap the ring at every offset, many laps over.
            for round in 0..200u64 {
                let want = (round % 7) as usize;
                let room = 5 - q.len();
                let base = next_in;
                let k = q.push_with(want, |j| base + j as u64);
                assert_eq!(k, want.min(room));
                next_in += k as u64;
                let take = ((round * 3) % 8) as usize;
                let had = q.len();
                let m = q.pop_into(&mut out[..take.min(7)]);
                assert_eq!(m, take.min(7).min(had));
                for v in &out[..m] {
                    assert_eq!(*v, next_out);
                    next_out += 1;
                }
            }
            assert_eq!(q.len() as u64, next_in - next_out);
        }

        #[test]
        fn cursors_near_usize_wrap() {
            // Positions are lap | index; start a few laps before the cursors wrap.
            let q = Queue::<u32>::new(3);
            let start = 0usize.wrapping_sub(q.one_lap * 3);
            q.head.store(start, Ordering::Relaxed);
            q.tail.store(start, Ordering::Relaxed);
            for (i, s) in q.buf.iter().enumerate() {
                s.stamp.store(start + i, Ordering::Relaxed);
            }
            let mut out = [0u32; 2];
            let mut n = 0u32;
            for _ in 0..40 {
                assert_eq!(q.push_with(2, |j| n + j as u32), 2);
                assert_eq!(q.pop_into(&mut out), 2);
                assert_eq!(out, [n, n + 1]);
                n += 2;
            }
        }

        /// Several producers pushing batches and several consumers popping batches: every
        /// item arrives exactly once, and each producer's items in the order it pushed them.
        #[test]
        fn concurrent_batches_lose_nothing_and_duplicate_nothing() {
            const PRODUCERS: u64 = 3;
            // Fewer under Miri, which runs one interleaving per seed, orders of magnitude slower.
            const PER: u64 = if cfg!(miri) { 200 } else { 60_000 };
            let q = Arc::new(Queue::<u64>::new(64));
            let done = Arc::new(AtomicUsize::new(0));
            let producers: Vec<_> = (0..PRODUCERS)
                .map(|p| {
                    let q = Arc::clone(&q);
                    std::thread::spawn(move || {
                        let mut i = 0u64;
                        while i < PER {
                            let n = (1 + (i % 9) as usize).min((PER - i) as usize);
                            let base = i;
                            let k = q.push_with(n, |j| p << 32 | (base + j as u64));
                            i += k as u64;
                            if k == 0 {
                                std::thread::yield_now();
                            }
                        }
                    })
                })
                .collect();
            let consumers: Vec<_> = (0..2)
                .map(|c| {
                    let q = Arc::clone(&q);
                    let done = Arc::clone(&done);
                    std::thread::spawn(move || {
                        let mut got = Vec::new();
                        let mut out = [0u64; 13];
                        loop {
                            let m = if c == 0 {
                                q.pop_into(&mut out)
                            } else {
                                q.pop().map(|v| out[0] = v).map_or(0, |_| 1)
                            };
                            got.extend_from_slice(&out[..m]);
                            if m == 0 {
                                if done.load(Ordering::Acquire) == PRODUCERS as usize
                                    && q.is_empty()
                                {
                                    return got;
                                }
                                std::thread::yield_now();
                            }
                        }
                    })
                })
                .collect();
            for p in producers {
                p.join().unwrap();
                done.fetch_add(1, Ordering::Release);
            }
            let mut seen = vec![Vec::new(); PRODUCERS as usize];
            for c in consumers {
                let got = c.join().unwrap();
                // Within one consumer, each producer's items come in increasing order.
                let mut last = vec![None::<u64>; PRODUCERS as usize];
                for v in got {
                    let (p, i) = ((v >> 32) as usize, v & 0xFFFF_FFFF);
                    assert!(
                        last[p].is_none_or(|l| l < i),
                        "producer {p}: {i} after {last:?}"
                    );
                    last[p] = Some(i);
                    seen[p].push(i);
                }
            }
            for (p, mut s) in seen.into_iter().enumerate() {
                s.sort_unstable();
                assert_eq!(
                    s.len() as u64,
                    PER,
                    "producer {p}: lost or duplicated items"
                );
                assert!(s.iter().enumerate().all(|(k, &i)| k as u64 == i));
            }
        }

        /// A consumer between its claim of a batch and the stamp stores that free its slots
        /// (`pop_into` copying the items out): the positions it claimed are room for the
        /// producers, who wait for their slots as `push` does. A batch push used to stop
        /// counting at the first slot not freed yet and return short, which
        /// `CompletionQueue::push_run` takes for a full queue: completions lost and the
        /// queue reported overrun (its QPs failed) while it had room for all of them.
        /// (Added with that fix in 9abcf466, dropped by the refactoring after it, 0771d232,
        /// whose message says it still passes: restored, so `wait_read_by_consumer` stays
        /// covered.)
        #[test]
        fn batch_push_counts_slots_a_consumer_is_reading_as_room() {
            let q = Queue::<u32>::new(4);
            for i in 0..4 {
                q.push(i).unwrap();
            }
            // A consumer claims the two oldest items; it has freed the first slot (as
            // `pop_into` does after copying the item) and is still reading the second.
            assert_eq!(q.claim_full(2), Some((0, 2)));
            q.slot(0).stamp.store(q.one_lap, Ordering::Release);
            assert_eq!(q.len(), 2, "two of the four positions are free");
            let pushed = std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    q.slot(1).stamp.store(1 + q.one_lap, Ordering::Release);
                });
                q.push_with(2, |j| 10 + j as u32)
            });
            assert_eq!(pushed, 2, "room for both: the queue was never full");
            let mut out = [0u32; 4];
            assert_eq!(q.pop_into(&mut out), 4);
            assert_eq!(out, [2, 3, 10, 11]);
        }

        #[test]
        #[should_panic(expected = "capacity must be")]
        fn zero_capacity_is_refused() {
            let _ = Queue::<u8>::new(0);
        }
    }
}
