//! The crate's own thread: a single-threaded tokio runtime that owns every connection.
//!
//! [`relay_core::store::Store`] is synchronous and the relay shell calls it from a task on *its*
//! tokio runtime, where blocking on another future of the same runtime is not allowed (the sync
//! `postgres` crate panics there). So the connections live on a dedicated thread: callers hand it
//! a future and wait for the answer on a plain channel ([`PgRuntime::block_on`], safe from a tokio
//! worker and from any other thread) or await it ([`PgRuntime::run`], runtime-agnostic).

use std::{
    future::Future,
    sync::mpsc,
    thread::{self, ThreadId},
};

use tokio::{runtime::Handle, sync::oneshot};

use crate::PgError;

/// Name of the thread (visible in `top -H`, debuggers and panics).
pub(crate) const THREAD_NAME: &str = "relay-pg";

/// Handle to the dedicated thread; dropping the last handle stops the thread, which closes every
/// connection it owns.
#[derive(Debug)]
pub(crate) struct PgRuntime {
    handle: Handle,
    thread: ThreadId,
    stop: Option<oneshot::Sender<()>>,
}

impl PgRuntime {
    /// Starts the thread and its runtime.
    pub(crate) fn start() -> Result<Self, PgError> {
        let (handle_tx, handle_rx) = mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                // Runs spawned tasks until the last `PgRuntime` is dropped; dropping the runtime
                // then drops every task, and with them the connections.
                runtime.block_on(async {
                    let _ = stop_rx.await;
                });
            })
            .map_err(|e| PgError::Backend(format!("starting the {THREAD_NAME} thread: {e}")))?;
        let handle = handle_rx
            .recv()
            .map_err(|_| PgError::Stopped)?
            .map_err(|e| PgError::Backend(format!("starting the {THREAD_NAME} runtime: {e}")))?;
        Ok(Self {
            handle,
            thread: thread.thread().id(),
            stop: Some(stop_tx),
        })
    }

    /// Spawns `future` on the thread (fire and forget).
    pub(crate) fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        drop(self.handle.spawn(future));
    }

    /// Runs `future` on the thread and blocks the calling thread until it finishes. Safe from a
    /// tokio worker of another runtime; refused on the crate's own thread (it would deadlock).
    pub(crate) fn block_on<T: Send + 'static>(
        &self,
        future: impl Future<Output = Result<T, PgError>> + Send + 'static,
    ) -> Result<T, PgError> {
        if thread::current().id() == self.thread {
            return Err(PgError::Backend(format!(
                "block_on called on the {THREAD_NAME} thread itself"
            )));
        }
        let (tx, rx) = mpsc::sync_channel(1);
        self.spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.recv().map_err(|_| PgError::Stopped)?
    }

    /// Runs `future` on the thread; the returned future can be awaited on any executor. Dropping
    /// it does not cancel `future` (pass a cancellation signal for that).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = Result<T, PgError>> + Send + 'static,
    ) -> Result<T, PgError> {
        let (tx, rx) = oneshot::channel();
        self.spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.await.map_err(|_| PgError::Stopped)?
    }
}

impl Drop for PgRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
