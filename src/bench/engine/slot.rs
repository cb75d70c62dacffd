//! A concurrency slot asked for in the dispatcher's order.
//!
//! vLLM's and SGLang's clients create each request's task at its send time and the task waits on
//! an asyncio semaphore, which serves its waiters first come, first served: with
//! `--max-concurrency`, request k is sent k-th. Tokio's semaphore is fair in the same way, but a
//! future asks for its permit only when first polled, and a spawned task is first polled when
//! the runtime gets to it: not in spawn order (a worker runs the task it spawned last first,
//! and two workers race). So the dispatcher asks here, before it spawns the request's task:
//! [`Slot::ask`] polls the semaphore's future once, which queues the ask in dispatch order,
//! and the task awaits the rest with [`Slot::taken`]. A permit granted before the task runs
//! stays granted to it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

type Waiting = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// A place in a semaphore's queue, taken when asked.
pub enum Slot {
    /// The permit was free when asked.
    Held(OwnedSemaphorePermit),
    /// Queued behind the earlier asks.
    Queued(Waiting),
    /// The semaphore was closed (never, in a run: the run owns it).
    Closed,
}

impl Slot {
    /// Asks `slots` for one permit now, queued after every earlier ask.
    pub fn ask(slots: &Arc<Semaphore>) -> Slot {
        let mut wait: Waiting = Box::pin(slots.clone().acquire_owned());
        // The waker does nothing: the request's task polls again with its own.
        match wait.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(permit)) => Slot::Held(permit),
            Poll::Ready(Err(_)) => Slot::Closed,
            Poll::Pending => Slot::Queued(wait),
        }
    }

    /// Waits for the permit and keeps it in place (a queued slot becomes held). Cancel-safe:
    /// dropped before the permit comes, the slot keeps its place in the queue.
    pub async fn granted(&mut self) {
        if let Slot::Queued(wait) = self {
            *self = match wait.await {
                Ok(permit) => Slot::Held(permit),
                Err(_) => Slot::Closed,
            };
        }
    }

    /// Whether the permit is held (or will never come).
    pub fn is_settled(&self) -> bool {
        !matches!(self, Slot::Queued(_))
    }

    /// The permit, once every earlier ask has had its turn; `None` if the semaphore closed.
    pub async fn taken(self) -> Option<OwnedSemaphorePermit> {
        match self {
            Slot::Held(permit) => Some(permit),
            Slot::Queued(wait) => wait.await.ok(),
            Slot::Closed => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Waiters asked for in order 0..n and run in reverse get their permits in the asked order.
    #[tokio::test(flavor = "current_thread")]
    async fn permits_follow_the_order_of_asking_not_of_polling() {
        let slots = Arc::new(Semaphore::new(1));
        let first = Slot::ask(&slots);
        assert!(
            matches!(first, Slot::Held(_)),
            "a free permit is held at once"
        );
        let asked: Vec<Slot> = (0..5).map(|_| Slot::ask(&slots)).collect();
        assert!(asked.iter().all(|s| matches!(s, Slot::Queued(_))));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut set = tokio::task::JoinSet::new();
        // Spawned last-asked first, so each task is first polled in the reverse order.
        for (k, slot) in asked.into_iter().enumerate().rev() {
            let order = order.clone();
            set.spawn(async move {
                let _permit = slot.taken().await.expect("open");
                order.lock().unwrap().push(k);
                tokio::task::yield_now().await;
            });
        }
        tokio::task::yield_now().await;
        assert!(
            order.lock().unwrap().is_empty(),
            "the first permit is still held"
        );
        drop(first.taken().await);
        while set.join_next().await.is_some() {}
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_semaphore_gives_no_permit() {
        let slots = Arc::new(Semaphore::new(0));
        let queued = Slot::ask(&slots);
        slots.close();
        assert!(queued.taken().await.is_none());
        assert!(matches!(Slot::ask(&slots), Slot::Closed));
    }
}
