//! Per-run turns for the checkpoint edits one process makes (decisions, answers).

/// Per-run turns for the checkpoint edits of one process: a run id maps to one of a fixed set
/// of locks (two runs may share one; an edit is a load and a save, so that costs little).
pub(crate) struct EditLocks([tokio::sync::Mutex<()>; EDIT_LOCKS]);

const EDIT_LOCKS: usize = 32;

impl Default for EditLocks {
    fn default() -> Self {
        EditLocks(std::array::from_fn(|_| tokio::sync::Mutex::new(())))
    }
}

impl EditLocks {
    /// Waits for `run_id`'s turn; the turn lasts as long as the guard.
    pub(crate) async fn turn(&self, run_id: &str) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(run_id);
        // The modulo keeps the index below EDIT_LOCKS, so it fits a usize.
        #[allow(clippy::cast_possible_truncation)]
        let index = (hash % EDIT_LOCKS as u64) as usize;
        self.0[index].lock().await
    }
}
