//! What every stand-in shares: serving its router on either network, a poison-tolerant lock
//! on its shared state, and a bounded record of what it received.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

use axum::Router;
use seam::net::{Network, serve};

/// Binds `addr` on `N` and serves `router` until `shutdown`.
pub(crate) async fn serve_on<N: Network>(
    addr: SocketAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = N::bind(addr).await?;
    serve(listener, router, shutdown).await
}

/// Locks a stand-in's state. Its state is records and scripted answers: a holder that panicked
/// leaves nothing half-done that a later reader could misread, so a poisoned lock is used as is.
pub(crate) fn lock<T>(state: &Mutex<T>) -> MutexGuard<'_, T> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a stand-in received, oldest first, keeping the newest `max` and counting the rest.
#[derive(Debug)]
pub(crate) struct Recorded<T> {
    items: VecDeque<T>,
    max: usize,
    dropped: u64,
}

impl<T: Clone> Recorded<T> {
    /// An empty record that keeps at most `max` items.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            items: VecDeque::new(),
            max,
            dropped: 0,
        }
    }

    /// Appends `item`, dropping the oldest one when full.
    pub(crate) fn push(&mut self, item: T) {
        if self.items.len() >= self.max {
            self.items.pop_front();
            self.dropped += 1;
        }
        self.items.push_back(item);
    }

    /// Every item kept, oldest first.
    pub(crate) fn to_vec(&self) -> Vec<T> {
        self.items.iter().cloned().collect()
    }

    /// How many items are kept.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// How many items were dropped to stay within the bound.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::Recorded;

    #[test]
    fn a_full_record_drops_the_oldest_and_counts_it() {
        let mut r = Recorded::new(2);
        for i in 0..5 {
            r.push(i);
        }
        assert_eq!(r.to_vec(), vec![3, 4]);
        assert_eq!(r.len(), 2);
        assert_eq!(r.dropped(), 3);
    }
}
